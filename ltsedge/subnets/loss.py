"""A sub-network's quality, measured: its held-out loss with its inherited weights, in nats per token.

Each window predicts its tokens 2 .. n from those before them (n - 1 predictions a window), in PyTorch at
float32 (``forward.final_hidden``). The vocabulary's logits are computed a slice of tokens at a time, so a
49152-token vocabulary does not hold a batch's logits in memory at once; windows go through the model a batch
at a time. The cost is the matrix products': SmolLM2-135M spends about 145 GFLOP on a window of 512 tokens.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ltsedge.architecture import Architecture
from ltsedge.errors import LtsedgeError
from ltsedge.subnets.forward import final_hidden, output_weight
from ltsedge.subnets.parent import check_token_ids, model_of, torch, torch_threads

DEFAULT_BATCH = 4  # windows per forward pass
LOGIT_ROWS = 512  # tokens whose logits are held at once


@dataclass(frozen=True)
class HeldOutLoss:
    nats: float  # mean cross-entropy per predicted token
    tokens: int  # predictions measured
    seconds: float  # how long the evaluation took

    @property
    def perplexity(self) -> float:
        return math.exp(self.nats)

    def to_dict(self) -> dict:
        return {"nats_per_token": self.nats, "perplexity": self.perplexity, "tokens": self.tokens,
                "seconds": self.seconds}


def held_out_loss(arch: Architecture, weights: Mapping, windows, batch: int = DEFAULT_BATCH,
                  threads: int | None = None) -> HeldOutLoss:
    """The loss of ``arch`` with ``weights`` on the held-out ``windows`` [n, window] of token ids, computed
    on ``threads`` threads (None: torch's setting)."""
    started = time.perf_counter()
    windows = torch.as_tensor(np.asarray(windows, dtype=np.int64))
    if windows.dim() != 2 or windows.size(0) == 0 or windows.size(1) < 2:
        raise LtsedgeError("held-out loss needs at least one window of two or more token ids")
    check_token_ids(windows, arch.vocab_size)
    model = model_of(arch, weights)
    total = 0.0
    with torch.inference_mode(), torch_threads(threads):
        for start in range(0, len(windows), batch):
            ids = windows[start:start + batch]
            total += _summed_loss(model, final_hidden(model, ids[:, :-1]), ids[:, 1:])
    count = windows.size(0) * (windows.size(1) - 1)
    return HeldOutLoss(total / count, count, time.perf_counter() - started)


def _summed_loss(model, hidden: torch.Tensor, targets: torch.Tensor) -> float:
    """The summed cross-entropy of ``targets`` [B, T] under the logits of ``hidden`` [B, T, C]."""
    output = output_weight(model)
    hidden, targets = hidden.reshape(-1, hidden.size(-1)), targets.reshape(-1)
    total = 0.0
    for start in range(0, len(targets), LOGIT_ROWS):
        logits = hidden[start:start + LOGIT_ROWS] @ output.T
        total += float(torch.nn.functional.cross_entropy(logits, targets[start:start + LOGIT_ROWS], reduction="sum"))
    return total
