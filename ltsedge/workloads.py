"""Workloads: what of a model is timed, declared once.

A workload names the export variant it runs on, how it sizes the model's symbolic axes, the
``Measurement`` figure its median fills, its budget key in ``ltsedge check`` and its labels. The
runner times a model on every workload of its variant (``runners.inputs``), a search optimises one
(its ``--objective``), check gates each figure by its budget, a report draws them.

A new workload is one entry in ``WORKLOADS`` with its axes function, plus its figure as a field of
``ltsedge.runners.Measurement`` and its budget key in the device profile's ``[budgets]``.

Imports nothing: the measuring worker reads this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Workload:
    name: str  # also the search objective that optimises it
    variant: str  # the export variant it runs on
    axes: Callable[[Any], dict[str, int]]  # profile -> sizes of the symbolic axes (total_sequence follows)
    figure: str  # the Measurement field of its median latency (ms)
    budget: str  # its budget key: budgets file, device profile, check's --flag (dashed)
    metric: str  # its name in check's verdicts and reports
    label: str  # a report's axis label
    # The reference timed beside it (runners/reference.py): "compute" (four MatMuls over 192 rows) moves
    # with a compute-bound pass; "bandwidth" (matrix-vector products over 96 MB) with a decode step,
    # which reads every weight once per token.
    reference: str = "compute"


# The batch axis's names: "batch" (forward models, and bundles of before graph versions gpt2 2, opt 2, llama 4),
# "batch_size" (generation bundles: ``backbones.kv_cache.BATCH``).
BATCH_AXES = ("batch", "batch_size")


def batch_axes(batch: int) -> dict[str, int]:
    """Every name of the batch axis sized ``batch``, for ``iospec.axis_sizes``'s base."""
    return dict.fromkeys(BATCH_AXES, batch)


def _forward_axes(profile: Any) -> dict[str, int]:
    """One full pass over ``sequence`` tokens (the study's protocol)."""
    return {**batch_axes(profile.batch), "sequence": profile.sequence}


def _prefill_axes(profile: Any) -> dict[str, int]:
    """A prompt of ``sequence`` tokens through a generate model, with an empty cache."""
    return {**batch_axes(profile.batch), "sequence": profile.sequence, "past_sequence": 0}


def _decode_axes(profile: Any) -> dict[str, int]:
    """One new token after a cache of ``context`` tokens: the time per generated token."""
    return {**batch_axes(profile.batch), "sequence": 1, "past_sequence": profile.context}


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    # Every model has a latency_ms (a generate model's is its decode figure): check calls it "latency".
    Workload("forward", "forward", _forward_axes, "latency_ms", "max_latency_ms", "latency", "latency (ms)"),
    Workload("prefill", "generate", _prefill_axes, "prefill_latency_ms", "max_prefill_ms", "prefill", "prefill (ms)"),
    Workload("decode", "generate", _decode_axes, "decode_latency_ms", "max_decode_ms", "decode",
             "decode (ms / token)", reference="bandwidth"),
)}
PRIMARY_WORKLOAD = "decode"  # of a generate model: its latency_ms is the time per generated token


def timed_on(variant: str) -> tuple[str, ...]:
    """The workloads a model of ``variant`` is timed on; any other model (a foreign one too): forward."""
    return tuple(w.name for w in WORKLOADS.values() if w.variant == variant) or ("forward",)
