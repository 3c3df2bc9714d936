"""A search's output directory: ltsedge replaces and removes only the files it wrote there.

Every file a search writes is recorded, before it is written, in ``OUT/.ltsedge-manifest.json``;
only recorded files are ever overwritten or deleted. A search refuses to start when a file it would
write or clear — one of its fixed outputs, anything under ``models/``, ``.scratch/`` or ``report/`` —
is already there without a record: it belongs to someone else (``proj/models/my_model.onnx`` must
survive ``ltsedge search --out proj``). Two searches never share one directory at once: the first
holds an exclusive lock on ``OUT/.ltsedge.lock`` until it ends (released by the kernel, also after
kill -9).

Every path read from the manifest, and every path written or removed, must stay inside the directory
once symbolic links are resolved (a crafted manifest listing ``.scratch/../../victim.txt``, or an
owned folder that is a link to elsewhere, is refused): ltsedge touches nothing outside ``--out``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

from ltsedge.errors import LtsedgeError
from ltsedge.files import DATA_SUFFIX, EARLIER_DATA_SUFFIX, check_writable, write_atomically

MANIFEST = ".ltsedge-manifest.json"
PARTIAL = ".partial"  # the suffix of files.write_atomically's and the exporters' half-written files
LOCK = ".ltsedge.lock"
OUTPUTS = ("frontier.json", "frontier.csv", "candidates.csv", "baseline.csv", "search.json", "checkpoint.json",
           "candidates.jsonl", "published.jsonl")
MODELS, SCRATCH, REPORT = "models", ".scratch", "report"
OWNED_DIRS = (MODELS, SCRATCH, REPORT)  # everything below them is written by the search


class OutputDir:
    """``outputs``/``owned_dirs``: the files and folders the tool writes there (a search's by default);
    ``tool`` and ``option`` name it in messages; ``lock``: one writer at a time (a bundle of ``ltsedge
    export`` is written without one, and carries no lock file)."""

    def __init__(self, root: str | Path, *, outputs: tuple[str, ...] = OUTPUTS,
                 owned_dirs: tuple[str, ...] = OWNED_DIRS, tool: str = "ltsedge search", option: str = "--out",
                 lock: bool = True):
        self.root = Path(root)
        self.outputs, self.owned_dirs, self.tool, self.option, self.locks = outputs, owned_dirs, tool, option, lock
        self._written_by = tool
        self._real_root: Path | None = None
        self._files: set[str] = set()
        self._lock_fd: int | None = None

    # --- opening and closing --------------------------------------------------------------------
    def open(self) -> OutputDir:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LtsedgeError(f"cannot create output directory {self.root}: {e.strerror or e}") from None
        if self.locks:
            self._lock()
        try:
            self._real_root = self.root.resolve()
            self._files = self._read_manifest()
            existing = self._existing()
            self.claim(*[rel for rel in existing if rel not in self._files and self._half_written(rel)])
            foreign = [rel for rel in existing if rel not in self._files]
            if foreign:
                more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
                clears = ", ".join(f"{d}/" for d in self.owned_dirs) + " and " if self.owned_dirs else ""
                raise LtsedgeError(
                    f"{self.root / foreign[0]}{more} was not written by {self.tool}, which writes and clears "
                    f"{clears}its output files there; choose another {self.option} or move those files away")
            self.claim(*self.outputs)
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
        path = self._inside(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._inside(rel)  # the folders just made are real ones: still inside
        return path

    def claim(self, *rels: str) -> None:
        for rel in rels:
            self._inside(rel)
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
        self._inside(rel).unlink(missing_ok=True)
        self._files.discard(rel)
        self._write_manifest()
        parent = (self.root / rel).parent
        while parent != self.root and parent.is_dir() and not parent.is_symlink() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent

    def move(self, source: str, target: str) -> Path:
        """Rename a recorded file to ``target`` (recorded first, as ``path`` does): its bytes are unchanged."""
        if source not in self._files:
            raise LtsedgeError(f"refusing to move {self.root / source}: ltsedge did not write it")
        path = self.path(target)
        os.replace(self._inside(source), path)
        self.remove(source)  # the record and the folders it leaves empty; the file is already gone
        return path

    def files_under(self, directory: str) -> list[str]:
        prefix = directory.rstrip("/") + "/"
        return sorted(r for r in self._files if r.startswith(prefix))

    # --- internals ------------------------------------------------------------------------------
    def _inside(self, rel: str, source: str | None = None) -> Path:
        """``root/rel``, refused unless it is a plain relative path that stays inside the directory once
        symbolic links are resolved (``source`` names the file the path was read from)."""
        real_root = self._real_root or self.root.resolve()
        parts = PurePosixPath(rel).parts
        path = self.root / rel
        try:
            ok = (bool(parts) and not PurePosixPath(rel).is_absolute() and ".." not in parts and "\\" not in rel
                  and "\0" not in rel and (path.resolve() == real_root or real_root in path.resolve().parents))
        except (OSError, RuntimeError, ValueError):  # a loop of links, an unusable name
            ok = False
        if not ok:
            what = f"{source} lists {rel!r}," if source else f"refusing {rel!r}:"
            raise LtsedgeError(f"{what} a path outside {self.root} (ltsedge touches nothing outside its output "
                               f"directory); choose another {self.option}")
        return path

    def _half_written(self, rel: str) -> bool:
        """``rel`` is the ``<name>.partial`` that ltsedge's atomic writes leave when killed mid-write, of a
        recorded file (or of the data file beside a recorded model): ours, adopted so a resume clears it."""
        if not rel.endswith(PARTIAL):
            return False
        target = rel[: -len(PARTIAL)]
        return target in self._files or any(target.endswith(suffix) and target[: -len(suffix)] in self._files
                                            for suffix in (DATA_SUFFIX, EARLIER_DATA_SUFFIX))

    def _existing(self) -> list[str]:
        found = [name for name in self.outputs if os.path.lexists(self.root / name)]
        for directory in self.owned_dirs:
            base = self.root / directory
            if base.exists():
                found += sorted(p.relative_to(self.root).as_posix() for p in base.rglob("*") if not p.is_dir())
        return found

    def _read_manifest(self) -> set[str]:
        path = self.root / MANIFEST
        if not os.path.lexists(path):
            return set()
        try:
            check_writable(path)  # a regular file, not a link to one elsewhere
            data = json.loads(path.read_text())
            files = data["files"]
            if isinstance(data.get("written_by"), str):
                self._written_by = data["written_by"]
            if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
                raise ValueError("'files' must be a list of paths")
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, LtsedgeError) as e:
            raise LtsedgeError(f"{path} is damaged ({type(e).__name__ if isinstance(e, RecursionError) else e}); "
                               f"choose another {self.option}") from None
        for rel in files:
            self._inside(rel, source=str(path))
        return set(files)

    def _write_manifest(self) -> None:
        text = json.dumps({"format": 1, "written_by": self._written_by, "files": sorted(self._files)}, indent=1)
        write_atomically(self.root / MANIFEST, text)

    def _lock(self) -> None:
        import fcntl

        path = self.root / LOCK
        check_writable(path)  # a link is never followed (truncating what it points at), a FIFO never opened
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK, 0o644)
        except OSError as e:
            raise LtsedgeError(f"cannot lock {path}: {e.strerror or e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise LtsedgeError(f"another {self.tool} is writing to {self.root} (pid {holder}); wait for it to "
                               f"finish or choose another {self.option}") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd
