"""Reading the user's files: every failure becomes one line that names the file and what it is."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ltsedge.errors import LtsedgeError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def read_text(path: str | Path, what: str) -> str:
    """``what`` names the file's role, e.g. "budgets file": "budgets file not found: b.toml"."""
    path = Path(path)
    try:
        return path.read_text()
    except FileNotFoundError:
        raise LtsedgeError(f"{what} not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise LtsedgeError(f"cannot read {what} {path}: {e}") from None


def read_capped(path: str | Path, what: str, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (a FIFO or device is refused, never waited on)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise LtsedgeError(f"{what} not found: {path}") from None
    except OSError as e:
        raise LtsedgeError(f"cannot read {what} {path}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LtsedgeError(f"{what} {path} is {kind_of(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise LtsedgeError(f"{what} {path} is {st.st_size / 2**20:.1f} MiB, over the {limit / 2**20:.0f} MiB "
                               f"such a file may have")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise LtsedgeError(f"cannot read {what} {path}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while read
        raise LtsedgeError(f"{what} {path} is over the {limit / 2**20:.0f} MiB such a file may have")
    return data


DATA_SUFFIX = "_data"  # model.onnx -> model.onnx_data: Optimum's name, the one transformers.js fetches
EARLIER_DATA_SUFFIX = ".data"  # what versions before it wrote: still recognised as ours, to be cleared


def data_file_name(model_name: str) -> str:
    """The external data file ltsedge writes beside the model file ``model_name``."""
    return model_name + DATA_SUFFIX


def sha256_of(path: str | Path, what: str = "model") -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise LtsedgeError(f"cannot read {what} {path}: {e.strerror or e}") from None
    return digest.hexdigest()


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    text = read_text(path, what)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:  # the message ends with "(at line L, column C)"
        raise LtsedgeError(f"{what} {path}: malformed TOML: {e}") from None
    except RecursionError:
        raise LtsedgeError(f"{what} {path}: malformed TOML: nested too deeply") from None


def parse_json(text: str, where: str) -> Any:
    """``text`` as JSON; malformed or too deeply nested JSON (``[[[...]]]`` 100 000 deep) is one line
    naming ``where``, never a RecursionError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise LtsedgeError(f"{where}: malformed JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise LtsedgeError(f"{where}: malformed JSON: nested too deeply") from None


def read_json(path: str | Path, what: str) -> Any:
    """The JSON in a user's file: "<what> <path>: malformed JSON: ..." when it is not."""
    return parse_json(read_text(path, what), f"{what} {path}")


def kind_of(mode: int) -> str:
    """What a file that is not a regular one is, in words."""
    for test, words in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return "not a regular file"


def check_writable(path: str | Path) -> None:
    """Refuse to write at ``path`` unless nothing is there or a regular file is: a link is never written
    through (nor replaced), a device, FIFO or directory never replaced."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise LtsedgeError(f"cannot write {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(mode):
        raise LtsedgeError(f"refusing to write {path}: it is {kind_of(mode)}, and ltsedge writes only regular files "
                           f"and new paths")


def _create_new(tmp: Path, mode: int) -> int:
    """A new file opened for writing, never through a link; a regular file left by an interrupted write
    (one name, one link) is replaced, anything else at that name refused."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(tmp, flags, mode)
    except FileExistsError:
        st = os.lstat(tmp)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            check_writable(tmp)
            raise LtsedgeError(f"refusing to write {tmp}: it has other names (hard links)") from None
        os.unlink(tmp)
        return os.open(tmp, flags, mode)


def write_file(path: str | Path, data: bytes | Iterable[bytes], *, mode: int = 0o644, sync: bool = False) -> str:
    """Write ``data`` at ``path`` atomically (a new ``<name>.partial``, then renamed over it) and return its
    sha256. Only a regular file or a new path is written (``check_writable``): no link is followed, no
    device or FIFO replaced. ``sync``: the file and the rename reach the disk before it returns."""
    path = Path(path)
    check_writable(path)
    tmp = path.with_name(path.name + ".partial")
    digest = hashlib.sha256()
    try:
        fd = _create_new(tmp, mode)
    except LtsedgeError:
        raise
    except OSError as e:
        raise LtsedgeError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)  # exactly this mode, whatever the umask
            for part in [data] if isinstance(data, (bytes, bytearray, memoryview)) else data:
                digest.update(part)
                f.write(part)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        check_writable(path)  # again, right before the rename
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise LtsedgeError(f"cannot write {path}: {e.strerror or e}") from None
        raise
    if sync:  # the rename itself reaches the disk with the directory
        try:
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError:
            pass
    return digest.hexdigest()


def write_atomically(path: Path, text: str) -> None:
    """Write, fsync, rename: the file is either the old one or the whole new one (``write_file``'s rules)."""
    write_file(path, text.encode(), sync=True)
