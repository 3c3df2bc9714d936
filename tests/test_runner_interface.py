"""Both runners implement the declared measuring interface, parameter for parameter: code written
against ``MeasuringRunner`` works on this machine and on a fleet alike."""

from __future__ import annotations

import inspect

import pytest

from ltsedge.runners.interface import MeasuringRunner
from ltsedge.runners.remote import RemoteRunner
from ltsedge.runners.runner import Runner

METHODS = [name for name, member in vars(MeasuringRunner).items()
           if callable(member) and (not name.startswith("_") or name in ("__enter__", "__exit__"))]


def parameters(function) -> list[tuple[str, inspect._ParameterKind]]:
    """Names and kinds, ``self`` and variadics' names aside (``*exc`` and ``exc_type, *exc`` both take any)."""
    params = list(inspect.signature(function).parameters.values())[1:]
    return [(p.name, p.kind) for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            and not (function.__name__ == "__exit__")]


def test_the_interface_declares_what_a_search_calls():
    assert {"fingerprint", "calibrate", "use_calibration", "measure", "measure_many", "close"} <= set(METHODS)


@pytest.mark.parametrize("runner", [Runner, RemoteRunner])
@pytest.mark.parametrize("method", METHODS)
def test_each_runner_implements_each_method_with_the_declared_parameters(runner, method):
    implemented = getattr(runner, method, None)
    assert implemented is not None and implemented is not getattr(MeasuringRunner, method), f"{runner.__name__}.{method}"
    assert parameters(implemented) == parameters(getattr(MeasuringRunner, method))


def test_a_runner_on_this_machine_is_a_measuring_runner(tmp_path):
    from ltsedge.devices import load_profile

    runner = Runner(load_profile("cpu"))  # no worker starts until something is measured
    try:
        assert isinstance(runner, MeasuringRunner)
    finally:
        runner.close()
