"""The measurement store's SQLite file: its tables, the upsert that keeps a success over a later failure,
the migrations that take an older store's file to ``SCHEMA_VERSION`` (``init_schema``), and sqlite3's
errors on the file in ltsedge's words (``sqlite_errors``). ``store.py`` reads and writes through it."""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ltsedge import __version__
from ltsedge.errors import LtsedgeError

SCHEMA_VERSION = 3
BUSY_TIMEOUT_S = 30.0  # how long a write waits for another process's lock
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


def init_schema(db: sqlite3.Connection, path: Path) -> None:
    """Create the tables of a new store, or migrate an older one to ``SCHEMA_VERSION``; refuse anything else."""
    # IMMEDIATE takes the write lock up front, so two processes creating a new store don't race.
    db.execute("BEGIN IMMEDIATE")
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            for statement in CREATE:
                db.execute(statement)
            _migrate(db, path, 1)
        elif "schema_version" not in tables:
            raise LtsedgeError(
                f"measurement store {path} is an SQLite database of something else; "
                "pass --store NEW_PATH"
            )
        else:
            _migrate(db, path, db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0])
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def _migrate(db: sqlite3.Connection, path: Path, version: Any) -> None:
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
    for v in range(version, SCHEMA_VERSION):
        for statement in MIGRATIONS[v]:
            db.execute(statement)
        db.execute("UPDATE schema_version SET version = ?", (v + 1,))


@contextmanager
def sqlite_errors(path: Path) -> Iterator[None]:
    """Turns sqlite3 errors into one-line LtsedgeErrors that name the file and the way out."""
    try:
        yield
    except sqlite3.Error as e:
        message = str(e)
        if "not a database" in message or "malformed" in message:
            raise LtsedgeError(
                f"measurement store {path} is not a valid SQLite database ({message}); "
                "move it aside or pass --store NEW_PATH"
            ) from None
        if "locked" in message:
            raise LtsedgeError(
                f"measurement store {path} stayed locked by another process for {BUSY_TIMEOUT_S:g} s; "
                "retry, or pass --store NEW_PATH"
            ) from None
        raise LtsedgeError(
            f"measurement store {path} cannot be used ({message}); "
            "check that it is a writable file or pass --store NEW_PATH"
        ) from None
