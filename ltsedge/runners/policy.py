"""Between two models: the thermal cool-down and the drift check, with the clock and sensors injected.

Cool-down (fan-less boards): sleep ``cooldown_s``, then, if ``max_temperature_c`` is set and the
temperature readable, wait until the hottest thermal zone is below it, at most ``max_cooldown_wait_s``.

Drift: a reference model is timed before a batch and every ``drift_check_every`` models. Its median
has drifted when it moved by more than ``drift_limit`` = max(3 x tolerance, 5%) from the first
reference measurement. Three times the tolerance, because two medians each known within
+-tolerance can differ by twice that with nothing changed; 5% at least, because a shared machine
wanders by a few percent all day. Recovery uses the same limit (waiting for +-tolerance could
outlast any cool-down on a noisy machine).
"""

from __future__ import annotations

from collections.abc import Callable

WAIT_STEP_S = 1.0  # how often to re-read the temperature while waiting
DRIFT_RETRY_S = 5.0  # pause between two reference measurements while waiting for recovery
MIN_DRIFT_LIMIT = 0.05


def cool_down(profile, *, temperature: Callable[[], float | None], clock: Callable[[], float],
              sleep: Callable[[float], None], log: Callable[[str], None]) -> float:
    """Pause between two models as the profile asks; returns the seconds waited (by ``clock``)."""
    start = clock()
    if profile.cooldown_s > 0:
        sleep(profile.cooldown_s)
    limit = profile.max_temperature_c
    if limit is None:
        return clock() - start
    waiting_since = clock()
    while True:
        temp = temperature()
        if temp is None or temp < limit:
            return clock() - start
        waited = clock() - waiting_since
        if waited >= profile.max_cooldown_wait_s:
            log(f"still {temp:.1f} C after waiting {waited:.0f} s for it to drop below {limit:g} C; measuring anyway")
            return clock() - start
        sleep(min(WAIT_STEP_S, profile.max_cooldown_wait_s - waited))


def drift_limit(profile) -> float:
    return max(3 * profile.tolerance, MIN_DRIFT_LIMIT)


def relative_change(latency_ms: float, baseline_ms: float) -> float:
    return (latency_ms - baseline_ms) / baseline_ms
