"""The measurement store's SQLite file: how it is opened to write (``connect``) or only to read
(``connect_read_only``), its tables, the upsert that keeps a success over a later failure, the migrations
that take an older store's file to ``SCHEMA_VERSION`` (``init_schema``), and sqlite3's errors on the file
in ltsedge's words (``sqlite_errors``). ``store.py`` reads and writes through it."""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ltsedge import __version__
from ltsedge.errors import LtsedgeError

SCHEMA_VERSION = 3
BUSY_TIMEOUT_S = 30.0  # how long a write waits for another process's lock
RETRY_S = 0.02  # between tries of a switch to WAL that another process's lock refused
KEY_COLUMNS = ("model_key", "fingerprint_hash", "settings_hash", "ort_version")

CREATE = [
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    "INSERT INTO schema_version (version) VALUES (1)",  # then migrated to SCHEMA_VERSION
    """CREATE TABLE measurements (
        model_key TEXT NOT NULL,
        fingerprint_hash TEXT NOT NULL,
        settings_hash TEXT NOT NULL,
        ort_version TEXT NOT NULL,
        ok INTEGER NOT NULL,
        measurement TEXT NOT NULL,      -- JSON object
        fingerprint TEXT NOT NULL,      -- JSON object
        settings TEXT NOT NULL,         -- JSON object
        created_at TEXT NOT NULL,       -- ISO 8601, UTC
        ltsedge_version TEXT NOT NULL,
        PRIMARY KEY (model_key, fingerprint_hash, settings_hash, ort_version)
    )""",
]
# The architecture an exported candidate's model key stands for; export = the key less "arch:<id>".
ARCHITECTURES = """CREATE TABLE architectures (
    model_key TEXT PRIMARY KEY, export TEXT NOT NULL, architecture TEXT NOT NULL)"""

# The reference model's speed on a machine with some runtime settings: every run's milliseconds are
# its ratios times this (keys.calibration_key; runners/policy.py, "Pinned calibration").
CALIBRATIONS = """CREATE TABLE IF NOT EXISTS calibrations (
    fingerprint_hash TEXT NOT NULL,
    settings_hash TEXT NOT NULL,
    ort_version TEXT NOT NULL,
    calibration TEXT NOT NULL,      -- JSON object
    fingerprint TEXT NOT NULL,      -- JSON object
    settings TEXT NOT NULL,         -- JSON object: the runtime settings
    created_at TEXT NOT NULL,
    ltsedge_version TEXT NOT NULL,
    PRIMARY KEY (fingerprint_hash, settings_hash, ort_version))"""

# MIGRATIONS[v] lists the statements that take a version-v store to version v + 1.
MIGRATIONS: dict[int, list[str]] = {1: [ARCHITECTURES], 2: [CALIBRATIONS]}

# A success replaces anything; a failure never replaces a success (one flaky crash must not erase
# a good measurement), but does replace an older failure (keep the latest reason).
UPSERT = f"""
INSERT INTO measurements ({", ".join(KEY_COLUMNS)}, ok, measurement, fingerprint, settings,
                          created_at, ltsedge_version)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT ({", ".join(KEY_COLUMNS)}) DO UPDATE SET
    ok = excluded.ok, measurement = excluded.measurement, fingerprint = excluded.fingerprint,
    settings = excluded.settings, created_at = excluded.created_at,
    ltsedge_version = excluded.ltsedge_version
WHERE excluded.ok OR NOT measurements.ok
"""


def connect(path: Path) -> sqlite3.Connection:
    """The store at ``path`` to read and write, its schema current; a new or empty file becomes a store."""
    # Autocommit: every write is one statement, so no transaction is held while measuring.
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        _switch_to_wal(db)
        # Safe under WAL (a power cut may lose the last rows, never corrupt) and much faster.
        db.execute("PRAGMA synchronous=NORMAL")
        init_schema(db, path)
    except BaseException:
        db.close()
        raise
    return db


def connect_read_only(path: Path) -> sqlite3.Connection:
    """The store at ``path`` to read only: nothing is created, locked or written. A store not made yet
    reads as an empty one; an older schema is upgraded first, which only a writable store allows."""
    if not path.exists():
        return _empty(path)
    db = _open_read_only(path)
    try:
        version = _version(db, path)
    except BaseException:
        db.close()
        raise
    if version is not None and version >= SCHEMA_VERSION:
        return db
    db.close()
    if version is None:  # an empty file: a store not made yet
        return _empty(path)
    if is_read_only(path):
        raise LtsedgeError(f"measurement store {path} has schema version {version}, older than ltsedge "
                           f"{__version__}'s {SCHEMA_VERSION}, and is read-only: use it once where it can be "
                           "written (any command that measures upgrades it), or pass --store NEW_PATH")
    connect(path).close()
    return _open_read_only(path)


def _switch_to_wal(db: sqlite3.Connection) -> None:
    """WAL, so that readers and one writer never wait for each other. SQLite refuses this switch at once,
    without waiting as for other statements, while another process holds a write lock on a store still in
    its first journal mode (several processes creating one store together): tried again while a write
    would wait."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= deadline:
                raise
            time.sleep(RETRY_S)


def _open_read_only(path: Path) -> sqlite3.Connection:
    uri = path.resolve().as_uri()
    db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return db
    except sqlite3.Error as e:
        db.close()
        if "unable to open" not in str(e):
            raise
    # A WAL store is read through its shared-memory file (NAME-shm) beside it, which an open connection
    # keeps and the last one to close removes: where it is missing and cannot be made (a read-only mount),
    # no process has the store open, so its file alone holds every row and is read as it is.
    return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None)


def _empty(path: Path) -> sqlite3.Connection:
    """An empty store in memory: what a store not made yet reads as. It refuses writes as the file would."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    init_schema(db, path)
    db.execute("PRAGMA query_only = ON")
    return db


def is_read_only(path: Path) -> bool:
    """Whether an existing store cannot be written: its file, or its directory (where SQLite keeps the
    WAL beside it), on a read-only mount or without write permission."""
    return path.is_file() and not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))


def init_schema(db: sqlite3.Connection, path: Path) -> None:
    """Create the tables of a new store, or migrate an older one to ``SCHEMA_VERSION``; refuse anything else."""
    # IMMEDIATE takes the write lock up front, so two processes creating a new store don't race.
    db.execute("BEGIN IMMEDIATE")
    try:
        version = _version(db, path)
        if version is None:
            for statement in CREATE:
                db.execute(statement)
            version = 1
        _migrate(db, version)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def _version(db: sqlite3.Connection, path: Path) -> int | None:
    """The store's schema version, None for a file with no tables yet; refuses a file of something else,
    an invalid version and a newer one."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return None
    if "schema_version" not in tables:
        raise LtsedgeError(
            f"measurement store {path} is an SQLite database of something else; "
            "pass --store NEW_PATH"
        )
    version = db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
    if not isinstance(version, int) or version < 1:
        raise LtsedgeError(
            f"measurement store {path} has an invalid schema version {version!r}; "
            "move it aside or pass --store NEW_PATH"
        )
    if version > SCHEMA_VERSION:
        raise LtsedgeError(
            f"measurement store {path} has schema version {version}, but ltsedge {__version__} "
            f"only knows up to {SCHEMA_VERSION}; upgrade ltsedge or pass --store NEW_PATH"
        )
    return version


def _migrate(db: sqlite3.Connection, version: int) -> None:
    for v in range(version, SCHEMA_VERSION):
        for statement in MIGRATIONS[v]:
            db.execute(statement)
        db.execute("UPDATE schema_version SET version = ?", (v + 1,))


@contextmanager
def sqlite_errors(path: Path) -> Iterator[None]:
    """Turns sqlite3 errors into one-line LtsedgeErrors that name the file and the way out."""
    started = time.monotonic()
    try:
        yield
    except sqlite3.Error as e:
        message = str(e)
        if "not a database" in message or "malformed" in message:
            raise LtsedgeError(
                f"measurement store {path} is not a valid SQLite database ({message}); "
                "move it aside or pass --store NEW_PATH"
            ) from None
        if "locked" in message:  # the time really waited: some statements are refused without waiting
            raise LtsedgeError(
                f"measurement store {path} stayed locked by another process for "
                f"{time.monotonic() - started:.1f} s; retry, or pass --store NEW_PATH"
            ) from None
        if "readonly" in message or is_read_only(path):
            raise LtsedgeError(
                f"measurement store {path} is read-only (a read-only mount, or no permission to write it or "
                "its directory), and this command writes to it; pass --store NEW_PATH"
            ) from None
        raise LtsedgeError(
            f"measurement store {path} cannot be used ({message}); "
            "check that it is a writable file or pass --store NEW_PATH"
        ) from None
