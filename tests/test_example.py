"""examples/train_and_export.py end to end on a tiny search: pick, train, export, generate — and the
trained bundle generates the trained PyTorch model's tokens."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.generation import greedy
from tests.helpers import ltsedge_cli

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_and_export.py"


@pytest.mark.slow
def test_search_pick_train_export_generate(tmp_path):
    out = tmp_path / "search"
    search = ltsedge_cli("search", "--preset", "smoke", "--generations", "1", "--out", out,
                         "--store", tmp_path / "s.sqlite", "--quiet", "--no-baseline")
    assert search.returncode == 0, search.stderr
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat. " * 200)
    trained = tmp_path / "trained"
    proc = subprocess.run([sys.executable, str(EXAMPLE), out / "frontier.json", corpus, "--out", trained,
                           "--steps", "60", "--seq", "32", "--generate", "8"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "loss" in proc.stdout and "generated with" in proc.stdout
    arch = Architecture.load(trained / "architecture.json")
    assert arch.id in {m["id"] for m in json.loads((out / "frontier.json").read_text())["models"]}

    # The bundle holds the trained weights: its greedy tokens are the trained PyTorch model's.
    model = get_backbone(arch.backbone).build_model(arch)
    model.load_state_dict(torch.load(trained / "weights.pt", weights_only=True))
    session = ort.InferenceSession(str(trained / "bundle" / "model.onnx"), providers=["CPUExecutionProvider"])
    prompt = np.array([list(b"the ")])
    got = greedy(session, prompt, 10)
    ids = torch.from_numpy(prompt)
    with torch.no_grad():
        for step in range(10):
            logits, _ = model.forward_with_cache(ids, torch.ones_like(ids), torch.arange(ids.size(1))[None])
            assert np.abs(logits[0, -1].numpy() - got.logits[step][0]).max() <= 1e-3
            ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert got.tokens[0].tolist() == ids[0, 4:].tolist()

    # The held-out comparison: fp32's perplexity is the PyTorch model's on the same windows; int8 and
    # int4 are compared with it (their figures are the quantizers', only their presence is asserted).
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines() if line.startswith("  ")}
    assert set(rows) == {"fp32", "int8", "int4"} and rows["fp32"][-1] == "100.0%"
    text = corpus.read_bytes()
    seq = min(32, arch.n_positions - 1)
    held = np.frombuffer(text[len(text) - max(len(text) // 10, seq + 2):], dtype=np.uint8).astype(np.int64)
    windows = torch.from_numpy(np.stack([held[i:i + seq + 1] for i in range(0, len(held) - seq - 1, seq)]))
    with torch.no_grad():
        log_probs = torch.log_softmax(model(windows[:, :-1]).double(), -1)
    nll = -log_probs.gather(-1, windows[:, 1:, None]).mean().item()
    assert abs(float(rows["fp32"][1]) / np.exp(nll) - 1) < 1e-3

