"""The user's text: one file, or every text file under a folder, as documents; refused in one line when
there is none, when a file is empty, or when it is binary.

A folder is read file by file in sorted order (hidden files and folders skipped); binary files in a folder
are skipped and counted, since a folder of sources often holds a few. A single file the user named must be
text. The hash covers the names and the contents, so a resumed check knows it is reading the same text.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ltsedge.errors import LtsedgeError

SNIFF_BYTES = 8192  # a NUL byte in a file's first 8 KiB marks it binary, as git and grep judge


@dataclass(frozen=True)
class Text:
    documents: list[str]  # one per file
    files: int  # files read
    skipped: int  # binary or empty files skipped in a folder
    bytes: int
    sha256: str
    source: str


def read_text(path: str | Path) -> Text:
    path = Path(path)
    if not path.exists():
        raise LtsedgeError(f"--text {path} not found")
    if path.is_dir():
        return _read_folder(path)
    if not path.is_file():
        raise LtsedgeError(f"--text {path} is not a regular file or a folder")
    raw = _read_bytes(path)
    if not raw.strip():
        raise LtsedgeError(f"--text {path} is empty: give a file of text to train on")
    text, why = _decode(raw)
    if text is None:
        raise LtsedgeError(f"--text {path} is binary ({why}): give a text file (UTF-8)")
    digest = hashlib.sha256(raw)
    return Text([text], 1, 0, len(raw), digest.hexdigest(), str(path))


def _read_folder(root: Path) -> Text:
    documents, digest, skipped, size = [], hashlib.sha256(), 0, 0
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = file.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            continue
        raw = _read_bytes(file)
        text, _ = _decode(raw) if raw.strip() else (None, "")
        if text is None:
            skipped += 1
            continue
        documents.append(text)
        digest.update(rel.as_posix().encode() + b"\0" + hashlib.sha256(raw).digest())
        size += len(raw)
    if not documents:
        more = f" ({skipped} empty or binary files)" if skipped else ""
        raise LtsedgeError(f"--text {root} holds no text file{more}: give a file or a folder of text")
    return Text(documents, len(documents), skipped, size, digest.hexdigest(), str(root))


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise LtsedgeError(f"cannot read --text {path}: {e.strerror or e}") from None


def _decode(raw: bytes) -> tuple[str | None, str]:
    """(the text, "") or (None, why it is not text)."""
    nul = raw.find(b"\0", 0, SNIFF_BYTES)
    if nul >= 0:
        return None, f"a NUL byte at offset {nul}"
    try:
        return raw.decode("utf-8"), ""
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 at offset {e.start}"
