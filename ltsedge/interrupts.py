"""Ctrl-C and SIGTERM: both stop a command the same orderly way, never in the middle of a section that
an interrupt must not cut.

SIGTERM is how everything but a terminal stops a process: `timeout`, `docker stop`, systemd, a CI job
cancelled. At Python's default it kills at once: a search then wrote no frontier, its measuring worker
and scratch directory were left behind. ``terminate_as_interrupt`` makes it a ``Terminated``
(a KeyboardInterrupt), so it goes the way Ctrl-C goes: the frontier found so far written, the worker
stopped, scratch removed, exit code 143 (``exit_code``) instead of 130.

torch keeps a stack of function modes (``with torch.device("meta")`` pushes one). A KeyboardInterrupt
raised while torch pushes or pops a mode leaves that stack broken, and torch then raises "trying to pop
from empty mode stack" in place of the interrupt: a search interrupted there ended in a traceback instead
of writing the frontier it had found (caught by a CI run of tests/test_search.py). Holding the interrupt
until the section ends costs the user the section's time: building a model on the meta device takes
milliseconds.
"""

from __future__ import annotations

import contextlib
import signal
import threading

_terminated: list[int] = []  # SIGTERMs received by this process (``exit_code``)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be."""


def _raise_terminated(signum, frame) -> None:
    _terminated.append(signum)
    raise Terminated


@contextlib.contextmanager
def terminate_as_interrupt():
    """Within the body, SIGTERM raises ``Terminated`` in the main thread, where it is at its default (a
    handler someone else set, or SIGTERM ignored, is theirs to keep); the handler is put back after."""
    _terminated.clear()
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def exit_code() -> int:
    """An interrupted command's exit status, as a shell reports a process killed by the signal: 143 if a
    SIGTERM came, else 130 (Ctrl-C)."""
    return 128 + signal.SIGTERM if _terminated else 130


# The handlers that raise, per signal: only these are deferred (a handler someone else set is theirs).
_RAISING = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: _raise_terminated}


@contextlib.contextmanager
def interrupts_deferred():
    """Run the body with SIGINT and SIGTERM recorded instead of raised; raise the first after it.

    Only where the raising handlers are in place (Python's own for SIGINT, ``terminate_as_interrupt``'s
    for SIGTERM), in the main thread (elsewhere no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    deferred = [s for s, handler in _RAISING.items() if signal.getsignal(s) is handler]
    received: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: received.append(signum)) for s in deferred}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if received:  # the body finished: the interrupt now lands where nothing is half done
        if received[0] == signal.SIGTERM:
            _raise_terminated(signal.SIGTERM, None)
        raise KeyboardInterrupt
