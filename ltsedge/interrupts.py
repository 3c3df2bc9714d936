"""Ctrl-C held back through a section that an interrupt must not cut in the middle.

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


@contextlib.contextmanager
def interrupts_deferred():
    """Run the body with SIGINT recorded instead of raised; raise KeyboardInterrupt after it if one came.

    Only where Python's own handler is in place, in the main thread (elsewhere no handler can be set,
    and a handler someone else installed, or SIGINT ignored, is theirs to keep)."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:  # the body finished: the interrupt now lands where nothing is half done
        raise KeyboardInterrupt
