"""The study's baseline: the same homogeneous GPT-2 with 1..16 identical layers, measured on the same device.

Each baseline model is compared with the frontier model that has at least its decoder parameters
(so, by the proxy, at least its quality) and the lowest latency.
"""

from __future__ import annotations

from dataclasses import dataclass

from ltsedge.architecture import Architecture
from ltsedge.search.evaluate import Candidate


@dataclass(frozen=True)
class BaselineSpec:
    d_model: int = 1024
    d_inner: int = 3072
    n_head: int = 16
    layers: tuple[int, ...] = tuple(range(1, 17))

    def architectures(self, vocab_size: int, n_positions: int) -> list[Architecture]:
        return [Architecture(n_layer=n, d_model=self.d_model, n_head=[self.n_head] * n, d_inner=[self.d_inner] * n,
                             vocab_size=vocab_size, n_positions=n_positions) for n in self.layers]

    def to_dict(self) -> dict:
        return {"d_model": self.d_model, "d_inner": self.d_inner, "n_head": self.n_head, "layers": list(self.layers)}


def compare(baseline: list[Candidate], front: list[Candidate]) -> list[dict]:
    rows = []
    for b in baseline:
        row = {"baseline_id": b.arch.id, "n_layer": b.arch.n_layer, "decoder_params": b.params.decoder_params,
               "latency_ms": b.latency_ms, "peak_memory_mb": b.memory_mb, "ok": b.ok,
               "frontier_id": None, "frontier_decoder_params": None, "frontier_latency_ms": None,
               "frontier_peak_memory_mb": None, "speedup": None, "memory_ratio": None}
        matches = [f for f in front if f.params.decoder_params >= b.params.decoder_params]
        if b.ok and matches:
            best = min(matches, key=lambda f: f.latency_ms)
            row.update(frontier_id=best.arch.id, frontier_decoder_params=best.params.decoder_params,
                       frontier_latency_ms=best.latency_ms, frontier_peak_memory_mb=best.memory_mb,
                       speedup=b.latency_ms / best.latency_ms, memory_ratio=b.memory_mb / best.memory_mb)
        rows.append(row)
    return rows
