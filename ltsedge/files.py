"""Reading the user's files: every failure becomes one line that names the file and what it is."""

from __future__ import annotations

import hashlib
import os
import sys
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


def write_atomically(path: Path, text: str) -> None:
    """Write, fsync, rename: the file is either the old one or the whole new one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    try:  # the rename itself reaches the disk with the directory
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
