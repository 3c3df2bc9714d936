"""One model's figures from several fresh workers (a profile's ``workers``): each figure the median
across the workers (the mean of two).

A decode step's figure moves with the worker process that measured it as much as with the timing noise
of one measurement (docs/benchmarks.md, "Where a decode figure's spread comes from"): the same model's
step runs at another speed in another process. Figures pooled over fresh workers repeat better between
runs; the price is a model timed that many times. Searches time their candidates in one worker
(``devices.profile.coarse``); the figures a user receives or gates on (publishing, ``profile``,
``check``) are pooled where the profile asks for it.
"""

from __future__ import annotations

import dataclasses
from statistics import median
from typing import Any

from ltsedge.runners.measurement import PRIMARY_FIELDS, Measurement
from ltsedge.workloads import WORKLOADS

# A workload's figures that are medians, or ms and ratios derived from one: pooled by their median.
MEDIAN_FIGURES = ("latency_ms", "latency_ratio", "latency_p90_ms", "latency_min_ms", "latency_cv",
                  "latency_low_ms", "latency_high_ms", "latency_coverage", "reference_ms", "uncalibrated_latency_ms")
SUMMED_FIGURES = ("runs", "pairs_timed")
MEDIAN_MEMORY = ("peak_memory_mb", "device_peak_memory_mb", "host_peak_memory_mb")


def pooled(measurements: list[Measurement]) -> Measurement:
    """The measurements of one model by several workers as one: a failure if any failed (the first), else
    the first's record with every timed and memory figure the median across them, runs and time summed,
    and a drift reported if any worker's reference drifted (the drift guard then measures it again)."""
    if len(measurements) == 1:
        return measurements[0]
    failed = next((m for m in measurements if not m.ok), None)
    if failed is not None:
        return failed
    out = dataclasses.replace(measurements[0], workers=len(measurements))
    top = _pool([{k: getattr(m, k) for k in PRIMARY_FIELDS} for m in measurements])
    for key, value in top.items():
        setattr(out, key, value)
    if out.workloads:
        out.workloads = {name: _pool([m.workloads[name] for m in measurements if name in (m.workloads or {})])
                         for name in out.workloads}
        for w in WORKLOADS.values():
            if w.name in out.workloads and hasattr(out, w.figure):
                setattr(out, w.figure, out.workloads[w.name]["latency_ms"])
    for key in MEDIAN_MEMORY:
        values = [getattr(m, key) for m in measurements if getattr(m, key) is not None]
        setattr(out, key, median(values) if values else None)
    out.load_seconds = sum(m.load_seconds for m in measurements)
    out.inference_seconds = sum(m.inference_seconds for m in measurements)
    out.drift = next((m.drift for m in measurements if m.drift is not None), None)
    return out


def _pool(figures: list[dict[str, Any]]) -> dict[str, Any]:
    """One workload's figures from several workers (the first's for anything not pooled)."""
    out = dict(figures[0])
    for key in MEDIAN_FIGURES:
        values = [f[key] for f in figures if f.get(key) is not None]
        if values:
            out[key] = median(values)
    for key in SUMMED_FIGURES:
        if all(key in f for f in figures):
            out[key] = sum(f[key] for f in figures)
    if all("converged" in f for f in figures):
        out["converged"] = all(f["converged"] for f in figures)
    if any(f.get("stopped_early") for f in figures):
        out["stopped_early"] = True
    return out
