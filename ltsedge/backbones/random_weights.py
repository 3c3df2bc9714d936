"""Random weights for candidates, shared between candidates so that building one costs no memory.

Latency and memory do not depend on weight values, but drawing fresh random numbers for a 250M
parameter candidate takes seconds, most of it faulting in a gigabyte of new pages. Instead every
matrix of every candidate is a window into one buffer of N(0, 0.02) values, at an offset derived from
the architecture's seed and the parameter's name: building a model allocates nothing for its
matrices, and the exporter streams them to the file straight from the buffer. Vectors (biases,
LayerNorm and RMSNorm scales) are small and get their own tensors.

The resulting PyTorch model is an ordinary model: the tests export it and compare logits.
"""

from __future__ import annotations

import hashlib

import torch
import torch.nn as nn

INIT_STD = 0.02
NORMS = (nn.LayerNorm, nn.RMSNorm)  # their scales start at 1
CHUNK = 1 << 22  # elements; windows start within the first chunk


class WeightPool:
    """A buffer that grows by whole chunks, chunk k always drawn from seed (seed, k): a window's
    values depend only on its key and size, never on what was built before."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.buffer = torch.empty(0)

    def window(self, numel: int, key: str) -> torch.Tensor:
        offset = int(hashlib.sha256(key.encode()).hexdigest()[:12], 16) % CHUNK
        self._grow(offset + numel)
        return self.buffer[offset : offset + numel]

    def _grow(self, numel: int) -> None:
        chunks = [self.buffer]
        for k in range(self.buffer.numel() // CHUNK, -(-numel // CHUNK)):
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + k)
            chunks.append(torch.empty(CHUNK).normal_(0.0, INIT_STD, generator=gen))
        if len(chunks) > 1:
            self.buffer = torch.cat(chunks)


_POOL = WeightPool()


@torch.no_grad()
def assign_shared_weights(model: nn.Module, seed: int, pool: WeightPool | None = None) -> nn.Module:
    """Give every parameter of a model built on the meta device its values, without allocating matrices."""
    pool = pool or _POOL
    gen = torch.Generator().manual_seed(seed)
    for module_name, module in model.named_modules():
        for name, p in list(module._parameters.items()):
            if p is None:
                continue
            full = f"{module_name}.{name}" if module_name else name
            if p.dim() >= 2:
                data = pool.window(p.numel(), f"{seed}:{full}").view(p.shape)
            elif isinstance(module, NORMS) and name == "weight":
                data = torch.ones(p.shape)
            else:
                data = torch.empty(p.shape).normal_(0.0, INIT_STD, generator=gen)
            module._parameters[name] = nn.Parameter(data, requires_grad=False)
    return model


@torch.no_grad()
def init_weights(model: nn.Module, seed: int) -> None:
    """Fresh GPT-2-style initialisation of every tensor: biases 0, norm scales 1, the rest N(0, 0.02)."""
    gen = torch.Generator().manual_seed(seed)
    norm_scales = {f"{n}.weight" if n else "weight" for n, m in model.named_modules()
                         if isinstance(m, NORMS)}
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            p.zero_()
        elif name in norm_scales:
            p.fill_(1.0)
        else:
            p.normal_(0.0, INIT_STD, generator=gen)


def materialize(model: nn.Module, seed: int, shared_weights: bool) -> nn.Module:
    """Give a model built on the meta device its weights, deterministically from ``seed``, in eval mode.

    Built on the meta device, nothing is initialised twice. With ``shared_weights`` its matrices are
    windows of the shared random buffer: instant, and still an ordinary model.
    """
    if shared_weights:
        return assign_shared_weights(model, seed).eval()
    model = model.to_empty(device="cpu")
    init_weights(model, seed)
    return model.eval()
