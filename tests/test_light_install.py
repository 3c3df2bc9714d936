"""The light install: check, profile of an ONNX file, report, compare and devices never import torch or
pymoo; commands that need them say what to install (one line, exit 2). Run with both imports blocked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import ltsedge_cli, ltsedge_process, no_traceback

BLOCKER = '''
import sys

class _NoSearchExtra:
    """As if `pip install ltsedge` had not installed torch and pymoo."""
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "pymoo"):
            raise ImportError(f"No module named {name!r} (blocked by the light-install test)")
        return None

sys.meta_path.insert(0, _NoSearchExtra())
'''


def light(tmp_path: Path, *args, cwd=None):
    """``ltsedge ARGS`` in a process whose torch and pymoo imports fail (a process: the block is installed
    at interpreter start-up)."""
    block = tmp_path / "block"
    block.mkdir(exist_ok=True)
    (block / "sitecustomize.py").write_text(BLOCKER)
    path = os.pathsep.join([str(block), os.environ.get("PYTHONPATH", "")])
    return no_traceback(ltsedge_process(*args, env={"PYTHONPATH": path}, cwd=cwd))


@pytest.fixture(scope="module")
def light_arch(tmp_path_factory) -> Path:
    """A tiny architecture file."""
    arch = tmp_path_factory.mktemp("light-arch") / "arch.json"
    arch.write_text(json.dumps({"n_layer": 1, "d_model": 32, "n_head": [2], "d_inner": [64], "vocab_size": 100,
                                "n_positions": 32}))
    return arch


@pytest.fixture(scope="module")
def searched(tmp_path_factory, light_arch):
    """A tiny search and an exported model, made with the full install."""
    tmp = tmp_path_factory.mktemp("light")
    out = tmp / "out"
    proc = ltsedge_cli("search", "--preset", "smoke", "--generations", "1", "--out", out, "--store", tmp / "s.sqlite",
                       "--quiet", "--no-baseline")
    assert proc.returncode == 0, proc.stderr
    model = tmp / "m.onnx"
    assert ltsedge_cli("export", light_arch, "-o", model).returncode == 0
    return out, light_arch, model


@pytest.mark.slow
def test_the_light_commands_run_without_torch_or_pymoo(tmp_path, searched):
    out, _, model = searched
    device = tmp_path / "fast.toml"
    device.write_text('name = "fast"\n[workload]\nsequence = 16\n[repeats]\nmax_runs = 6\nmax_seconds = 1.0\n')
    assert light(tmp_path, "devices").returncode == 0
    checked = light(tmp_path, "check", model, "--device", device, "--max-latency-ms", 10000, "--json",
                    "--max-memory-mb", 100000)
    assert checked.returncode == 0, checked.stderr
    profiled = light(tmp_path, "profile", model, "--device", device, "--json", "--store", tmp_path / "s.sqlite")
    assert profiled.returncode == 0 and json.loads(profiled.stdout)["ok"]
    reported = light(tmp_path, "report", out, "--out", tmp_path / "report")
    assert reported.returncode == 0, reported.stderr
    assert (tmp_path / "report" / "index.html").is_file()


@pytest.mark.parametrize("args, needs", [
    (["search", "--preset", "smoke"], "search needs pymoo"),
    (["export", "{arch}", "-o", "{tmp}/x.onnx"], "needs torch"),
    (["profile", "{arch}"], "needs torch"),
])
def test_what_needs_the_search_extra_says_how_to_install_it(tmp_path, light_arch, args, needs):
    arch = light_arch
    proc = light(tmp_path, *[a.format(arch=arch, tmp=tmp_path) for a in args])
    assert proc.returncode == 2 and needs in proc.stderr and 'ltsedge[search]' in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
