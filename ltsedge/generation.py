"""Greedy generation with an exported ``generate`` model in plain onnxruntime, feeding the cache back.

The loop an app runs, in a dozen lines: prefill the prompt (past of length 0), then one token at a
time with the ``present`` tensors fed back as ``past``. Inputs are built from the model's declared
I/O spec (``ltsedge.iospec``), so it serves every backbone whose generate variant ltsedge exports.
Left padding: give ``attention_mask`` with zeros before each prompt; positions count real tokens.
The tests compare it with the PyTorch reference; onnxruntime-genai runs the same bundle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ltsedge.errors import LtsedgeError
from ltsedge.iospec import ExportSpec
from ltsedge.workloads import BATCH_AXES


@dataclass
class Generated:
    tokens: np.ndarray  # [batch, n_new]
    logits: list[np.ndarray]  # per step, the last position's logits [batch, vocab]


def greedy(session, prompt: np.ndarray, n_new: int, attention_mask: np.ndarray | None = None) -> Generated:
    """``n_new`` greedy tokens after ``prompt`` [batch, length] (int64)."""
    spec = _spec(session)
    prompt = np.asarray(prompt, dtype=np.int64)
    batch = prompt.shape[0]
    mask = np.ones_like(prompt) if attention_mask is None else np.asarray(attention_mask, dtype=np.int64)
    positions = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)
    past = {t.name: np.zeros([batch if d in BATCH_AXES else 0 if d == "past_sequence" else d for d in t.dims],
                             dtype=t.dtype) for t in spec.input("past")}
    presents = [t.name for t in spec.output("present")]
    declared = {t.name for t in spec.inputs}
    ids, tokens, step_logits = prompt, [], []
    for _ in range(n_new):
        feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": positions, **past}
        out = session.run(["logits", *presents], {k: v for k, v in feeds.items() if k in declared})
        last = out[0][:, -1, :]
        step_logits.append(last)
        ids = last.argmax(axis=-1).astype(np.int64)[:, None]
        tokens.append(ids[:, 0])
        past = {t.name: value for t, value in zip(spec.input("past"), out[1:])}
        mask = np.concatenate([mask, np.ones((batch, 1), dtype=np.int64)], axis=1)
        positions = positions[:, -1:] + 1
    return Generated(np.stack(tokens, axis=1), step_logits)


def _spec(session) -> ExportSpec:
    text = session.get_modelmeta().custom_metadata_map.get("ltsedge.io_spec")
    spec = ExportSpec.from_json(text) if text else None
    if spec is None or spec.variant != "generate":
        raise LtsedgeError("this model is not the generate variant of an ltsedge export (ltsedge.io_spec)")
    return spec
