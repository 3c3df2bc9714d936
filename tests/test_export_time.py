"""Where a cold ``ltsedge export`` spends its seconds: what must not come back.

A 30 x 576 int4 generate bundle (SmolLM2-135M's shape) took 5.5 s from the command line on a 2-core VM, a
second of it torch importing sympy for the first random fill of the reference model on the meta device,
where nothing is filled: the reference's structure is built without its initial fills.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

CODE = """
import sys, torch
from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
arch = Architecture(backbone=sys.argv[1], n_layer=2, d_model=32, n_head=(2, 4), d_inner=(64, 48), vocab_size=50,
                    n_positions=16)
model = get_backbone(arch.backbone).empty_model(arch)
shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
assert all(p.is_meta for p in model.parameters()), "not on the meta device"
print("sympy" in sys.modules, shapes[[n for n in shapes if "emb" in n or "wte" in n][0]])
"""


@pytest.mark.parametrize("backbone", ["gpt2", "llama"])
def test_the_empty_reference_model_is_built_without_random_fills(backbone):
    ran = subprocess.run([sys.executable, "-c", CODE, backbone], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    imported_sympy, embedding = ran.stdout.split(maxsplit=1)
    assert imported_sympy == "False"  # no random fill ran on the meta device
    assert embedding.strip() == "(50, 32)"  # the structure is all there
