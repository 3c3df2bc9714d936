"""A search's output directory: ltsedge replaces and removes only the files it wrote there.

Every file a search writes is recorded, before it is written, in ``OUT/.ltsedge-manifest.json``;
only recorded files are ever overwritten or deleted. A search refuses to start when a file it would
write or clear — one of its fixed outputs, anything under ``models/``, ``.scratch/`` or ``report/`` —
is already there without a record: it belongs to someone else (``proj/models/my_model.onnx`` must
survive ``ltsedge search --out proj``). Two searches never share one directory at once: the first
holds an exclusive lock on ``OUT/.ltsedge.lock`` until it ends (released by the kernel, also after
kill -9).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ltsedge.errors import LtsedgeError
from ltsedge.files import write_atomically

MANIFEST = ".ltsedge-manifest.json"
LOCK = ".ltsedge.lock"
OUTPUTS = ("frontier.json", "frontier.csv", "candidates.csv", "baseline.csv", "search.json", "checkpoint.json",
           "candidates.jsonl")
MODELS, SCRATCH, REPORT = "models", ".scratch", "report"
OWNED_DIRS = (MODELS, SCRATCH, REPORT)  # everything below them is written by the search


class OutputDir:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._files: set[str] = set()
        self._lock_fd: int | None = None

    # --- opening and closing --------------------------------------------------------------------
    def open(self) -> OutputDir:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LtsedgeError(f"cannot create output directory {self.root}: {e.strerror or e}") from None
        self._lock()
        try:
            self._files = self._read_manifest()
            foreign = [rel for rel in self._existing() if rel not in self._files]
            if foreign:
                more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
                raise LtsedgeError(
                    f"{self.root / foreign[0]}{more} was not written by ltsedge search, which writes and clears "
                    f"{', '.join(d + '/' for d in OWNED_DIRS)} and its output files there; choose another --out "
                    f"or move those files away")
            self.claim(*OUTPUTS)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the lock
            self._lock_fd = None

    def __enter__(self) -> OutputDir:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- files ----------------------------------------------------------------------------------
    def path(self, rel: str) -> Path:
        """The path of ``rel``, recorded as ltsedge's before anything is written to it."""
        self.claim(rel)
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def claim(self, *rels: str) -> None:
        new = [r for r in rels if r not in self._files]
        if new:
            self._files.update(new)
            self._write_manifest()

    def owns(self, rel: str) -> bool:
        return rel in self._files

    def remove(self, rel: str) -> None:
        """Delete a recorded file (and the directories it leaves empty); anything else is left alone."""
        if rel not in self._files:
            raise LtsedgeError(f"refusing to delete {self.root / rel}: ltsedge did not write it")
        (self.root / rel).unlink(missing_ok=True)
        self._files.discard(rel)
        self._write_manifest()
        parent = (self.root / rel).parent
        while parent != self.root and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent

    def files_under(self, directory: str) -> list[str]:
        prefix = directory.rstrip("/") + "/"
        return sorted(r for r in self._files if r.startswith(prefix))

    # --- internals ------------------------------------------------------------------------------
    def _existing(self) -> list[str]:
        found = [name for name in OUTPUTS if (self.root / name).exists()]
        for directory in OWNED_DIRS:
            base = self.root / directory
            if base.exists():
                found += sorted(p.relative_to(self.root).as_posix() for p in base.rglob("*") if not p.is_dir())
        return found

    def _read_manifest(self) -> set[str]:
        path = self.root / MANIFEST
        if not path.exists():
            return set()
        try:
            data = json.loads(path.read_text())
            files = data["files"]
            if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
                raise ValueError("'files' must be a list of paths")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise LtsedgeError(f"{path} is damaged ({e}); choose another --out") from None
        return set(files)

    def _write_manifest(self) -> None:
        text = json.dumps({"format": 1, "written_by": "ltsedge search", "files": sorted(self._files)}, indent=1)
        write_atomically(self.root / MANIFEST, text)

    def _lock(self) -> None:
        import fcntl

        path = self.root / LOCK
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise LtsedgeError(f"another ltsedge search is writing to {self.root} (pid {holder}); wait for it to "
                               f"finish or choose another --out") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd
