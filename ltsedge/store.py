"""Every measurement ever taken, in one SQLite file, so a repeated request is answered from disk.

The search uses it as a cache, and a killed search resumes without re-measuring anything. A row is
keyed by (model_key, fingerprint_hash, settings_hash, ort_version): the same model measured on the
same device with the same profile settings and onnxruntime gives the same answer. Failures are
stored too, so a candidate that crashes the runtime is not retried forever.

Several processes may share one store: WAL journal, a busy timeout, and one statement per write.
A corrupt or foreign file is reported, never deleted or recreated.

Beside the measurements, the architecture behind each exported candidate's model key: a device's
cost model (``ltsedge.costmodel``) learns from this machine's figures of known architectures; and
the machine's pinned calibration of the reference model per (fingerprint_hash, settings_hash,
ort_version) of its runtime settings (``ltsedge.runners.policy.PinnedCalibration``).

How the file is opened, its schema, its migrations and sqlite3's errors on it are ``store_sqlite.py``.
"""

from __future__ import annotations

import json
import os
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ltsedge import __version__
from ltsedge.cache import cache_dir
from ltsedge.errors import LtsedgeError
from ltsedge.runners.measurement import Measurement
from ltsedge.store_sqlite import KEY_COLUMNS, UPSERT, connect, connect_read_only, sqlite_errors
from ltsedge.validate import reject_unknown

ENV_VAR = "LTSEDGE_STORE"
FILENAME = "measurements.sqlite"

FILTER_COLUMNS = KEY_COLUMNS + ("ok", "ltsedge_version")

def default_store_path() -> Path:
    """``$LTSEDGE_STORE`` if set, else ``measurements.sqlite`` in the user's cache directory."""
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override).expanduser()
    return cache_dir() / FILENAME


class MeasurementStore:
    """A SQLite file of measurements. Use as a context manager, or call close()."""

    def __init__(self, path: str | Path | None = None, *, read_only: bool = False) -> None:
        """``read_only``: for a command that only reads (``predict``): nothing is created, locked or written,
        so a store on a read-only mount serves; one not made yet reads as empty."""
        explicit = path is not None or bool(os.environ.get(ENV_VAR))
        self.path = Path(path).expanduser() if path is not None else default_store_path()
        self._conn: sqlite3.Connection | None = None
        if explicit:  # a path the user typed: a typo must not silently start an empty store elsewhere
            if not self.path.parent.is_dir():
                raise LtsedgeError(f"the directory of the measurement store {self.path} does not exist; "
                                   f"create it, or pass another --store")
        elif not read_only:
            _make_parent(self.path)
        with sqlite_errors(self.path):
            self._conn = connect_read_only(self.path) if read_only else connect(self.path)

    def get(
        self,
        model_key: str,
        fingerprint_hash: str,
        settings_hash: str,
        ort_version: str,
        *,
        include_failures: bool = True,
    ) -> dict[str, Any] | None:
        """The stored measurement that may answer this request again, or None.

        A success, or a failure of the model itself (``failure_kind == "model"``: it does not load, its
        inputs cannot be made, it fails to run), which would fail the same way again. A failure caused
        by the circumstances (a timeout, a memory limit, a crashed or killed worker) is kept for the
        record (``rows``) but never served: another run, with other limits, must measure again.
        ``include_failures=False`` serves successes only.
        """
        key = _key(model_key, fingerprint_hash, settings_hash, ort_version)
        where = " AND ".join(f"{c} = ?" for c in KEY_COLUMNS)
        with sqlite_errors(self.path):
            row = self._db.execute(f"SELECT ok, measurement FROM measurements WHERE {where}", key).fetchone()
        if row is None:
            return None
        measurement = self._decode(row[1], model_key)
        if not _complete(measurement, bool(row[0])):
            return None  # damaged: measured again, and the new figure replaces it
        if row[0]:
            return measurement
        return measurement if include_failures and _models_own(measurement) else None

    def put(
        self,
        model_key: str,
        fingerprint_hash: str,
        settings_hash: str,
        ort_version: str,
        measurement: dict[str, Any],
        *,
        fingerprint: dict[str, Any],
        settings: dict[str, Any],
    ) -> None:
        """Store a measurement (success or failure). A failure never overwrites a stored success."""
        key = _key(model_key, fingerprint_hash, settings_hash, ort_version)
        if not isinstance(measurement, dict) or not isinstance(measurement.get("ok"), bool):
            raise LtsedgeError(f"measurement for {model_key} must be a dict with a boolean 'ok'")
        values = (
            *key,
            int(measurement["ok"]),
            _to_json("measurement", model_key, measurement),
            _to_json("fingerprint", model_key, fingerprint),
            _to_json("settings", model_key, settings),
            datetime.now(timezone.utc).isoformat(timespec="seconds"),
            __version__,
        )
        with sqlite_errors(self.path):
            self._db.execute(UPSERT, values)

    def put_architecture(self, model_key: str, export: str, architecture: dict[str, Any]) -> None:
        """Remember which architecture an exported candidate's model key stands for."""
        with sqlite_errors(self.path):
            self._db.execute("INSERT OR IGNORE INTO architectures VALUES (?, ?, ?)",
                             (model_key, export, _to_json("architecture", model_key, architecture)))

    def measured_architectures(self, fingerprint_hash: str, settings_hash: str, ort_version: str,
                               export: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(architecture, measurement) of every successful measurement of an exported candidate on
        this machine, with these settings and onnxruntime, exported this way: oldest first."""
        query = """SELECT a.architecture, m.measurement, m.model_key FROM measurements m
                   JOIN architectures a ON a.model_key = m.model_key
                   WHERE m.ok AND m.fingerprint_hash = ? AND m.settings_hash = ? AND m.ort_version = ?
                   AND a.export = ? ORDER BY m.created_at, m.rowid"""
        with sqlite_errors(self.path):
            found = self._db.execute(query, (fingerprint_hash, settings_hash, ort_version, export)).fetchall()
        decoded = [(self._decode(arch, key), self._decode(m, key)) for arch, m, key in found]
        return [(arch, m) for arch, m in decoded if _complete(m, True)]

    def get_calibration(self, fingerprint_hash: str, settings_hash: str, ort_version: str) -> dict[str, Any] | None:
        """The pinned calibration of this machine with these runtime settings and onnxruntime, or None."""
        key = _calibration_key(fingerprint_hash, settings_hash, ort_version)
        with sqlite_errors(self.path):
            row = self._db.execute("SELECT calibration FROM calibrations WHERE fingerprint_hash = ? AND "
                                   "settings_hash = ? AND ort_version = ?", key).fetchone()
        return None if row is None else self._decode(row[0], "pinned calibration")

    def put_calibration(self, fingerprint_hash: str, settings_hash: str, ort_version: str,
                        calibration: dict[str, Any], *, fingerprint: dict[str, Any],
                        settings: dict[str, Any]) -> None:
        """Pin (or re-pin) the calibration of this machine with these runtime settings."""
        key = _calibration_key(fingerprint_hash, settings_hash, ort_version)
        values = (*key, *(_to_json(what, "pinned calibration", v) for what, v in
                          (("calibration", calibration), ("fingerprint", fingerprint), ("settings", settings))),
                  datetime.now(timezone.utc).isoformat(timespec="seconds"), __version__)
        with sqlite_errors(self.path):
            self._db.execute("INSERT OR REPLACE INTO calibrations VALUES (?, ?, ?, ?, ?, ?, ?, ?)", values)

    def count(self) -> int:
        with sqlite_errors(self.path):
            return self._db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]

    def rows(self, **filters: Any) -> list[dict[str, Any]]:
        """All rows matching the column filters (e.g. ``ok=False``), oldest first, JSON columns decoded."""
        reject_unknown("store filter", filters, FILTER_COLUMNS, sort_known=False)
        where = " AND ".join(f"{c} = ?" for c in filters) or "1"
        with sqlite_errors(self.path):
            cursor = self._db.execute(
                f"SELECT * FROM measurements WHERE {where} ORDER BY created_at, rowid", list(filters.values())
            )
            names = [d[0] for d in cursor.description]
            found = [dict(zip(names, r)) for r in cursor.fetchall()]
        for row in found:
            row["ok"] = bool(row["ok"])
            for column in ("measurement", "fingerprint", "settings"):
                row[column] = self._decode(row[column], row["model_key"])
        return found

    def _decode(self, text: str, model_key: str) -> dict[str, Any]:
        try:
            value = json.loads(text)
        except (TypeError, ValueError):
            value = None
        if not isinstance(value, dict):
            raise LtsedgeError(f"measurement store {self.path}: the row of {model_key} is not valid JSON; "
                               "move the store aside or pass --store NEW_PATH")
        return value

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> MeasurementStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MeasurementStore({str(self.path)!r})"

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise LtsedgeError(f"measurement store {self.path} is closed")
        return self._conn

def _complete(measurement: dict[str, Any], ok: bool) -> bool:
    """Whether a stored measurement can answer a request: its ``ok`` agrees with its row, its fields are
    of their types (``Measurement.from_record``), a success holds a latency (``latency_ms``, else some
    ``latency*`` figure), a failure says why. A row that does not (edited by hand, cut short, written by a
    broken tool) is treated as absent: the store is a cache of what can be measured again, and one
    damaged row must cost one measurement, not the search."""
    if measurement.get("ok") is not ok:
        return False
    try:
        Measurement.from_record(measurement)
    except LtsedgeError:
        return False
    if not ok:
        return isinstance(measurement.get("error"), str)
    figures = [v for k, v in measurement.items() if k.startswith("latency")]
    latency = measurement["latency_ms"] if "latency_ms" in measurement else next(iter(figures), None)
    return isinstance(latency, (int, float)) and not isinstance(latency, bool) and 0 <= latency < float("inf")


# Failures onnxruntime reports while loading a model that come from the files around it, not from the
# model: the same model loads where its external data sits beside it (e.g. on an agent that was sent
# only the .onnx by an older ltsedge). Stored as the model's own by some versions; never served.
_NOT_THE_MODELS = ("External data path does not exist",)


def _models_own(failure: dict[str, Any]) -> bool:
    """A failure the model would repeat on any run: one of its own, and not caused by missing files."""
    return failure.get("failure_kind") == "model" and not any(m in failure["error"] for m in _NOT_THE_MODELS)


def _make_parent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LtsedgeError(
            f"cannot create the measurement store directory {path.parent}: {e.strerror or e}; "
            f"pass --store PATH or set {ENV_VAR}"
        ) from None


def _key(*parts: Any) -> tuple[str, ...]:
    for name, value in zip(KEY_COLUMNS, parts):
        if not isinstance(value, str) or not value:
            raise LtsedgeError(f"store key {name} = {value!r} must be a non-empty string")
    return parts


def _calibration_key(*parts: Any) -> tuple[str, ...]:
    return _key("calibration", *parts)[1:]


def _to_json(what: str, model_key: str, value: Any) -> str:
    if not isinstance(value, dict):
        raise LtsedgeError(f"{what} for {model_key} must be a dict, got {type(value).__name__}")
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise LtsedgeError(f"{what} for {model_key} is not JSON-serializable: {e}") from None
