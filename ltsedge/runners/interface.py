"""What measures models, declared: the interface this machine's ``Runner`` and a fleet's
``RemoteRunner`` both implement, and what search, profile and check are written against.

A runner is a context manager holding one device profile. Its figures are ``Measurement`` objects
(failures included, never raised) in one scale of milliseconds: ratios to the reference model times
``calibrate()``'s reference time, which ``use_calibration`` can fix beforehand (a resumed search's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pathlib import Path

    from ltsedge.devices import DeviceProfile
    from ltsedge.runners.measurement import Measurement
    from ltsedge.runners.policy import Calibration
    from ltsedge.runners.racing import Race

    Model = str | Path | bytes  # a file, or a serialized model


@runtime_checkable
class MeasuringRunner(Protocol):
    profile: DeviceProfile

    def fingerprint(self) -> dict[str, Any]:
        """The machine the figures belong to (``ltsedge.devices.fingerprint``): part of every store key."""

    def calibrate(self) -> Calibration:
        """The run's scale of milliseconds (timing the reference alone first, if nothing fixed it)."""

    def use_calibration(self, calibration: Calibration) -> None:
        """Measure in a scale taken earlier (a resumed search keeps its milliseconds)."""

    def measure(self, model: Model, *, shapes: dict[str, list[int]] | None = None,
                race: Race | None = None) -> Measurement:
        """One model: latency per workload, peak memory; a failure comes back as ``ok=False``."""

    def measure_many(self, models: list[Model], *, shapes: dict[str, list[int]] | None = None,
                     on_result: Callable[[int, Measurement], None] | None = None,
                     race: Callable[[int], Race | None] | None = None) -> list[Measurement]:
        """A batch, in order; ``on_result(i, m)`` as each arrives, ``race(i)`` asked just before model i."""

    def close(self) -> None: ...

    def __enter__(self) -> MeasuringRunner: ...

    def __exit__(self, *exc: object) -> None: ...
