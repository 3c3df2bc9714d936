"""How much each layer, key/value group and SwiGLU channel of the trained model matters, from one pass over
calibration windows of the user's text (activation-based, as Minitron; layers as ShortGPT).

- a SwiGLU channel: the mean |silu(gate(x)) * up(x)| over the calibration tokens, the input of down_proj;
- a key/value group: the mean over tokens of the L2 norm of its query heads' attention output (before o_proj);
- a query head: the mean over tokens of the L2 norm of its own attention output;
- a layer: its block influence, the mean over tokens of 1 - cos(layer input, layer output).

Per-token figures are float32, their sums float64, and the windows run in a fixed order: the same text gives the same figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ltsedge.architecture import Architecture
from ltsedge.errors import LtsedgeError
from ltsedge.subnets.genes import check_parent
from ltsedge.subnets.parent import check_token_ids, hooked_pass, model_of, torch

DEFAULT_BATCH = 4  # windows per forward pass


@dataclass(frozen=True)
class Importance:
    ffn: tuple[np.ndarray, ...]  # per layer, one figure per SwiGLU channel
    kv_groups: tuple[np.ndarray, ...]  # per layer, one figure per key/value group
    block_influence: np.ndarray  # per layer
    tokens: int  # calibration tokens measured
    q_heads: tuple[np.ndarray, ...] | None = None  # per layer, one figure per query head

    def to_dict(self) -> dict:
        """Finite floats and lists only: strict JSON."""
        data = {"ffn": [v.tolist() for v in self.ffn], "kv_groups": [v.tolist() for v in self.kv_groups],
                "block_influence": self.block_influence.tolist(), "tokens": self.tokens}
        return data if self.q_heads is None else {**data, "q_heads": [v.tolist() for v in self.q_heads]}

    @classmethod
    def from_dict(cls, data: dict) -> Importance:
        figures = lambda name: tuple(np.asarray(v, dtype=np.float64) for v in data[name])  # noqa: E731
        return cls(figures("ffn"), figures("kv_groups"), np.asarray(data["block_influence"], dtype=np.float64),
                   int(data["tokens"]), figures("q_heads") if "q_heads" in data else None)


def measure_importance(arch: Architecture, weights: Mapping, windows, batch: int = DEFAULT_BATCH,
                       threads: int | None = None) -> Importance:
    """The importance of every layer, group and channel of ``arch`` with ``weights`` (``parent.parent_weights``)
    over the calibration ``windows`` [n, window] of token ids, on ``threads`` threads (None: torch's)."""
    check_parent(arch)
    windows = torch.as_tensor(np.asarray(windows, dtype=np.int64))
    if windows.dim() != 2 or windows.numel() == 0:
        raise LtsedgeError("importance needs at least one calibration window of token ids")
    check_token_ids(windows, arch.vocab_size)
    model = model_of(arch, weights)
    sums = _Sums(arch)
    handles = [hook for i, layer in enumerate(model.layers) for hook in sums.attach(i, layer)]
    hooked_pass(model, windows, batch, threads, handles)
    n = windows.numel()
    return Importance(tuple(s / n for s in sums.ffn), tuple(s / n for s in sums.kv), sums.influence / n, n,
                      tuple(s / n for s in sums.q))


class _Sums:
    """Per layer, the running sums over tokens that the figures are means of."""

    def __init__(self, arch: Architecture):
        self.arch = arch
        self.ffn = [np.zeros(d) for d in arch.d_inner]
        self.kv = [np.zeros(kv) for kv in arch.kv_heads]
        self.q = [np.zeros(h) for h in arch.n_head]
        self.influence = np.zeros(arch.n_layer)

    def attach(self, i: int, layer) -> list:
        return [layer.mlp.down_proj.register_forward_pre_hook(lambda _, args: self._ffn(i, args[0])),
                layer.self_attn.o_proj.register_forward_pre_hook(lambda _, args: self._heads(i, args[0])),
                layer.register_forward_hook(lambda _, args, out: self._block(i, args[0], out[0]))]

    def _ffn(self, i: int, product) -> None:
        self.ffn[i] += product.abs().sum(dim=(0, 1), dtype=torch.float64).numpy()

    def _heads(self, i: int, y) -> None:
        """``y [B, T, n_head * head_dim]``: the heads' outputs, head j in group j // (n_head / n_kv_head)."""
        B, T, _ = y.shape
        groups = y.reshape(B, T, self.arch.kv_heads[i], -1)
        self.kv[i] += groups.norm(dim=-1).sum(dim=(0, 1), dtype=torch.float64).numpy()
        heads = y.reshape(B, T, self.arch.n_head[i], -1)
        self.q[i] += heads.norm(dim=-1).sum(dim=(0, 1), dtype=torch.float64).numpy()

    def _block(self, i: int, x_in, x_out) -> None:
        cos = torch.nn.functional.cosine_similarity(x_in, x_out, dim=-1)
        self.influence[i] += float((1 - cos).sum(dtype=torch.float64))


def ranked(scores: np.ndarray, k: int) -> np.ndarray:
    """The indices of the ``k`` highest ``scores``, in their original order (ties: the lower index)."""
    order = sorted(range(len(scores)), key=lambda j: (-float(scores[j]), j))
    return np.sort(np.asarray(order[:k], dtype=np.int64))
