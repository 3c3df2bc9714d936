"""Scratch directories that do not pile up: one a process killed outright left behind is removed later.

A ``TemporaryDirectory`` is removed when its owner closes it or exits normally, not when the owner is
killed (SIGKILL, the kernel's OOM killer, a board losing power with /tmp on its SD card). A Runner's
held the 100 MB bandwidth reference (now shared in the cache folder: ``cache.py``), so every such death
cost 100 MB of /tmp, which on a board is often RAM (tmpfs): the test suite alone left ~20 of them per
run on a CI machine. It still holds the model being measured, and the worker's log.

So each scratch directory holds a lock file, locked (``flock``) by its owner for as long as it lives.
The kernel releases the lock when the owner dies, however it dies. Making a new scratch directory
removes those of the same prefix whose lock is free: ltsedge wrote them, and their owner is gone.
A directory without the lock file (another tool's, an older ltsedge's) or whose lock is held (its
owner alive, or a child it forked holding the descriptor) is never touched.

The cache's temporary copies (``cache.py``) are marked the same way: ``hold`` by their writer,
``claim_abandoned`` by whoever sweeps them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: plain temporary directories (nothing measures there)
    fcntl = None

LOCK_NAME = ".ltsedge-owner.lock"


class ScratchDir:
    """A temporary directory (``path``) owned by this process until ``cleanup()``."""

    def __init__(self, prefix: str):
        sweep_abandoned(prefix)
        self.path = Path(tempfile.mkdtemp(prefix=prefix))
        self._lock: int | None = None
        if fcntl is None:
            return
        # Locked before it gets its final name: a sweep never sees the lock file unlocked while we live.
        pending = self.path / (LOCK_NAME + ".new")
        self._lock = os.open(pending, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600)
        hold(self._lock)
        os.rename(pending, self.path / LOCK_NAME)

    def cleanup(self) -> None:
        if self.path is None:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock is not None:
            os.close(self._lock)
        self.path = self._lock = None

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def sweep_abandoned(prefix: str, folder: str | Path | None = None) -> list[Path]:
    """Remove the scratch directories named ``prefix*`` in ``folder`` (the temporary directory) whose
    owner is gone; return them. Never raises: a directory it cannot read or lock is left as it is."""
    removed: list[Path] = []
    if fcntl is None:
        return removed
    try:
        candidates = list(Path(folder or tempfile.gettempdir()).glob(f"{prefix}*"))
    except OSError:
        return removed
    for directory in candidates:
        try:
            if directory.is_symlink() or directory.stat().st_uid != os.getuid():
                continue  # another user's, even to root: theirs to clean
        except OSError:
            continue
        fd = claim_abandoned(directory / LOCK_NAME)
        if fd is None:  # no lock file (not a scratch directory of ours), or held: its owner lives
            continue
        try:
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
        finally:
            os.close(fd)
    return removed


def hold(fd: int) -> None:
    """Lock the open file ``fd`` for as long as this process keeps it open: the mark of a live owner. The
    kernel releases it when the owner dies, however it dies."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)


def claim_abandoned(path: Path) -> int | None:
    """A descriptor of ``path`` holding its lock, if its owner is gone (the caller removes what it marked,
    then closes the descriptor); None while an owner holds it, or if it cannot be opened (absent, a
    link, not ours to read) or locked (no ``fcntl``: Windows)."""
    if fcntl is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: its owner lives
        os.close(fd)
        return None
    return fd
