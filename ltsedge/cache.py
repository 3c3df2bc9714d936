"""ltsedge's cache folder, and the files in it that are named by their content.

A Runner used to write its own copy of each reference model (the bandwidth one is 100 MB) into its scratch
directory: 100 MB written per Runner (on a board, to an SD card or to a RAM-backed /tmp) and 100 MB of
/tmp held while it lived. Now the copy is written once per machine into the cache folder, under a name
that carries its SHA-256, and checked against that name each time it is reused (a file cut short by a
power loss, or one from a reference that changed, is not reused but written afresh beside it).

A copy is written under a temporary name, locked by its writer until it is renamed (``scratch.hold``):
a writer killed outright leaves it behind (up to 100 MB), and the next use of the folder removes it
once its lock is free. Nothing else is removed: not a live writer's temporary, nor any file whose
name is not one of ours.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import sys
import tempfile
from pathlib import Path

from ltsedge.errors import LtsedgeError
from ltsedge.files import sha256_of
from ltsedge.scratch import claim_abandoned, hold

DIGEST_CHARS = 16  # of the SHA-256's hex digits, in the file's name
TEMPORARY_SUFFIX = ".new"
# ``.{stem}-{digest}.onnx.{mkstemp's 8 characters}.new``: what ``_write`` names its temporaries.
TEMPORARY_NAME = re.compile(rf"\..+-[0-9a-f]{{{DIGEST_CHARS}}}\.onnx\.[a-z0-9_]{{8}}{re.escape(TEMPORARY_SUFFIX)}")


def cache_dir() -> Path:
    """ltsedge's folder in the user's cache directory (the platform's convention)."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local"
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        # The XDG spec says relative values are invalid and must be ignored.
        base = xdg if os.path.isabs(xdg) else Path.home() / ".cache"
    return Path(base) / "ltsedge"


def content_file(data: bytes, stem: str, *folders: Path) -> Path:
    """A file holding ``data``, named ``{stem}-{digest}.onnx``: reused from the first of ``folders`` that
    has it intact, else written into the first that can be written (a read-only or full cache falls
    through to the next: a Runner passes its scratch directory last). Raises OSError if none can."""
    digest = hashlib.sha256(data).hexdigest()[:DIGEST_CHARS]
    name = f"{stem}-{digest}.onnx"
    for folder in folders:
        sweep_abandoned_copies(folder)
    for folder in folders:
        path = Path(folder) / name
        if _holds(path, digest):
            return path
    error: OSError | None = None
    for folder in folders:
        try:
            return _write(Path(folder), name, data)
        except OSError as e:
            error = error or e
    raise error or OSError(f"no folder to write {name} into")


def _holds(path: Path, digest: str) -> bool:
    if not path.is_file():
        return False
    try:
        return sha256_of(path, "cached file")[:DIGEST_CHARS] == digest  # in blocks: no 100 MB read at once
    except LtsedgeError:  # unreadable: written afresh beside it
        return False


def _write(folder: Path, name: str, data: bytes) -> Path:
    """Written under a temporary name and renamed: a reader never sees it half written. Not
    ``files.write_file``: its one ``.partial`` name per file is for a single writer, and two Runners
    starting at once on a fresh machine each write this copy; here each writes its own temporary file
    and renames a whole copy."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = _locked_temporary(folder, name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.replace(tmp, folder / name)  # before the lock goes with the descriptor: never swept whole
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return folder / name


def _locked_temporary(folder: Path, name: str) -> tuple[int, str]:
    """A new temporary file for ``name``, locked while this writer lives. Made again if a sweep removed
    it in the instant between its creation and its lock (to the sweep, a temporary with a free lock)."""
    while True:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=TEMPORARY_SUFFIX, dir=folder)
        hold(fd)
        try:
            if os.path.samestat(os.fstat(fd), os.lstat(tmp)):
                return fd, tmp
        except FileNotFoundError:
            pass
        os.close(fd)


def sweep_abandoned_copies(folder: str | Path) -> list[Path]:
    """Remove the temporaries in ``folder`` that ``_write`` named and whose writer is gone (their lock
    free); return them. Never raises: what it cannot read or lock is left as it is."""
    removed: list[Path] = []
    try:
        candidates = [e for e in os.scandir(folder) if TEMPORARY_NAME.fullmatch(e.name)]
    except OSError:  # no folder yet, or not ours to read
        return removed
    for entry in candidates:
        fd = claim_abandoned(Path(entry.path))
        if fd is None:  # its writer lives (or no lock to take: not ours to judge)
            continue
        try:
            found = os.fstat(fd)
            # Still the file we locked (not renamed away meanwhile), a regular file, and this user's.
            if (stat.S_ISREG(found.st_mode) and found.st_uid == os.getuid()
                    and os.path.samestat(found, os.lstat(entry.path))):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed
