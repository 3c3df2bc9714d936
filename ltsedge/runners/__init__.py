"""Measuring ONNX models with onnxruntime on this device: latency, peak memory, failures.

    with Runner(load_profile("cpu")) as runner:
        m = runner.measure("model.onnx")      # Measurement(ok=True, latency_ms=..., peak_memory_mb=...)

Modules: ``interface`` (``MeasuringRunner``: what the Runner and a fleet's RemoteRunner both
implement), ``runner`` (the Runner), ``calibration`` (its scale of milliseconds and drift guards),
``process`` (the worker subprocess seen from the parent), ``worker`` (the measuring process itself),
``inputs`` (feeds for any model), ``stats`` (when to stop timing), ``policy`` (cool-down and drift
rules), ``reference`` (the drift reference model), ``measurement`` (the result). The initializer bytes of a file come from ``ltsedge.wire``.
"""

from ltsedge.runners.inputs import make_inputs
from ltsedge.runners.interface import MeasuringRunner
from ltsedge.runners.measurement import Measurement
from ltsedge.runners.runner import Runner, measure


def runner_factory(scheduler: str | None = None, machine: str | None = None):
    """What opens a runner: this machine's worker, or (``scheduler``) the agents of a fleet."""
    if scheduler is None:
        return Runner
    import functools

    from ltsedge.runners.remote import RemoteRunner
    from ltsedge.validate import scheduler_address

    return functools.partial(RemoteRunner, scheduler=scheduler_address(scheduler), machine=machine)


__all__ = ["Measurement", "MeasuringRunner", "Runner", "make_inputs", "measure", "runner_factory"]
