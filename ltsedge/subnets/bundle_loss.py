"""Held-out loss of the file a user ships: a generation bundle's decoder run by onnxruntime over each held-out
window (an empty past, the whole window as the prompt), so its figure is at the precision it ships in (int4's
MatMulNBits, its int8 compute included), not a PyTorch emulation of it. Nats per token as ``loss.held_out_loss``
counts them: each window predicts its tokens 2 .. n from those before them.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ltsedge.errors import LtsedgeError
from ltsedge.generation import _spec
from ltsedge.workloads import BATCH_AXES
from ltsedge.subnets.loss import HeldOutLoss


def bundle_loss(model_file: str | Path, windows, threads: int | None = None) -> HeldOutLoss:
    """The loss of the generate-variant ONNX ``model_file`` on ``windows`` [n, window] of token ids."""
    import onnxruntime as ort

    started = time.perf_counter()
    windows = np.asarray(windows, dtype=np.int64)
    if windows.ndim != 2 or windows.shape[0] == 0 or windows.shape[1] < 2:
        raise LtsedgeError("held-out loss needs at least one window of two or more token ids")
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
    spec = _spec(session)
    declared = {t.name for t in session.get_inputs()}
    past = {t.name: np.zeros([1 if d in BATCH_AXES else 0 if d == "past_sequence" else d for d in t.dims],
                             dtype=t.dtype)
            for t in spec.input("past")}
    total = 0.0
    for window in windows:
        ids = window[None, :-1]
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                 "position_ids": np.arange(ids.shape[1], dtype=np.int64)[None], **past}
        logits = session.run(["logits"], {k: v for k, v in feeds.items() if k in declared})[0][0]
        total += _summed_cross_entropy(logits, window[1:])
    count = windows.shape[0] * (windows.shape[1] - 1)
    return HeldOutLoss(total / count, count, time.perf_counter() - started)


def _summed_cross_entropy(logits: np.ndarray, targets: np.ndarray) -> float:
    """Sum over positions of -log softmax(logits)[target], in float64."""
    logits = logits.astype(np.float64)
    top = logits.max(axis=-1, keepdims=True)
    log_norm = np.log(np.exp(logits - top).sum(axis=-1)) + top[:, 0]
    return float((log_norm - logits[np.arange(len(targets)), targets]).sum())
