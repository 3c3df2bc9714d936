"""One recipe for every model: AdamW, linear warmup, cosine decay, the same batches in the same order; and the
training of one model, its held-out loss checkpointed along the way.

Every model is the backbone's PyTorch reference model (``Backbone.build_model``, as export builds it) with
a fresh GPT-2-style random init, made trainable. On a GPU it trains in bfloat16 autocast, on a CPU in
float32 (bfloat16 is slow on most CPUs). The held-out loss is the mean next-token cross-entropy (nats) over
every held-out window.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.proxy import count_params

CHECKPOINTS = (0.25, 0.5, 0.75, 1.0)  # fractions of the steps at which the held-out loss is taken
EVAL_BATCH = 32  # held-out windows per forward pass


@dataclass(frozen=True)
class Recipe:
    batch: int = 64
    sequence: int = 256
    lr: float = 1e-3  # peak
    warmup: float = 0.05  # of the steps, linear from lr / steps
    final_lr: float = 0.1  # of the peak, where the cosine ends
    weight_decay: float = 0.1  # matrices only; biases, norms and embeddings' vectors none
    beta2: float = 0.95
    clip: float = 1.0

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.sequence

    def steps(self, tokens: int) -> int:
        return max(len(CHECKPOINTS), math.ceil(tokens / self.tokens_per_step))

    def lr_at(self, step: int, steps: int) -> float:
        """The learning rate of ``step`` (1-based) of ``steps``."""
        warmup = max(1, round(self.warmup * steps))
        if step <= warmup:
            return self.lr * step / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return self.lr * (self.final_lr + (1 - self.final_lr) * 0.5 * (1 + math.cos(math.pi * progress)))

    def checkpoints(self, steps: int) -> dict[int, float]:
        """The steps of ``steps`` after which the held-out loss is taken, each with its fraction."""
        return {max(1, round(f * steps)): f for f in CHECKPOINTS}

    def to_dict(self) -> dict:
        return asdict(self)


def flops_per_token(arch: Architecture, sequence: int) -> float:
    """Training FLOPs per token, roughly: 6 per weight a token passes (decoder and output layer) and the
    attention scores of each attention layer. For ETAs and for spreading models over processes only."""
    output = arch.vocab_size * (arch.d_embed or arch.d_model)
    attention = 12.0 * len(arch.attention_layers) * sequence * arch.d_model
    return 6.0 * (count_params(arch).decoder_params + output) + attention


def pick_device(name: str) -> str:
    """auto -> cuda where torch sees a GPU, else cpu."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def train_one(arch: Architecture, recipe: Recipe, train: np.ndarray, held_out: np.ndarray, tokens: int, seed: int,
              device: str, on_step: Callable[[int, int], None] | None = None) -> dict:
    """Train ``arch`` for ``tokens`` tokens (rounded up to whole batches) and return what a check records of
    it: the held-out loss at the end and at each checkpoint, tokens, seconds, tokens per second."""
    started = time.time()
    torch.manual_seed(seed)
    model = get_backbone(arch.backbone).build_model(arch, seed=seed).to(device).train()
    for p in model.parameters():
        p.requires_grad_(True)
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": matrices, "weight_decay": recipe.weight_decay},
                                   {"params": vectors, "weight_decay": 0.0}], lr=recipe.lr, betas=(0.9, recipe.beta2))
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.startswith("cuda") else nullcontext()
    steps = recipe.steps(tokens)
    marks = recipe.checkpoints(steps)
    window = np.arange(recipe.sequence + 1)
    order = np.random.default_rng(seed)  # the same batches, in the same order, for every model
    checkpoints, train_loss = [], None
    for step in range(1, steps + 1):
        starts = order.integers(0, len(train) - recipe.sequence - 1, recipe.batch)
        batch = torch.from_numpy(train[starts[:, None] + window].astype(np.int64)).to(device, non_blocking=True)
        with autocast:
            logits = model(batch[:, :-1])
        # cross_entropy normalises with log_softmax: an adaptive softmax's log-probabilities pass unchanged
        loss = F.cross_entropy(logits.float().reshape(-1, arch.vocab_size), batch[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.clip)
        for group in optimizer.param_groups:
            group["lr"] = recipe.lr_at(step, steps)
        optimizer.step()
        if step in marks:
            train_loss = _finite(float(loss.detach()))
            checkpoints.append({"fraction": marks[step], "step": step, "tokens": step * recipe.tokens_per_step,
                                "held_out_loss": _finite(held_out_loss(model, held_out, device))})
        if on_step is not None:
            on_step(step, steps)
    seconds = time.time() - started
    used = steps * recipe.tokens_per_step
    final = checkpoints[-1]["held_out_loss"]
    return {"held_out_loss": final, "diverged": final is None,
            "train_loss": train_loss, "checkpoints": checkpoints, "steps": steps, "tokens": used,
            "seconds": round(seconds, 3), "tokens_per_second": round(used / seconds, 1) if seconds > 0 else None,
            "device": device}


def _finite(loss: float) -> float | None:
    """A loss, or None where training diverged (the log and the result are strict JSON: no NaN, no Infinity)."""
    return loss if math.isfinite(loss) else None


@torch.no_grad()
def held_out_loss(model: torch.nn.Module, held_out: np.ndarray, device: str) -> float:
    """Mean next-token cross-entropy (nats) over every held-out window."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.startswith("cuda") else nullcontext()
    for i in range(0, len(held_out), EVAL_BATCH):
        batch = torch.from_numpy(held_out[i:i + EVAL_BATCH].astype(np.int64)).to(device)
        with autocast:
            logits = model(batch[:, :-1])
        total += float(F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1),
                                       reduction="sum"))
        count += batch[:, 1:].numel()
    model.train(was_training)
    return total / count
