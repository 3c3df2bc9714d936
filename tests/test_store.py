"""The measurement store: round trips, failure handling, key separation, concurrency, bad files."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from ltsedge import __version__, store_sqlite
from ltsedge.errors import LtsedgeError
from ltsedge.keys import arch_key, file_key
from ltsedge.store import MeasurementStore, default_store_path
from tests.helpers import tiny_arch

KEY = ("arch:gpt2-L3-d256-3f9a0c1b2d:ir=8:opset=17", "fp-1", "set-1", "1.20.1")
FINGERPRINT = {"cpu": "Cortex-A76", "cores": 4}
SETTINGS = {"warmup": 3, "runs": 20, "seq_len": 128}
SUCCESS = {"ok": True, "error": None, "latency_ms_p50": 12.5, "latency_ms_p90": 14.0, "peak_mem_mb": 81.0}
FAILURE = {"ok": False, "error": "worker crashed (signal SIGSEGV)", "failure_kind": "environment"}
MODEL_FAILURE = {"ok": False, "error": "failed to load: unsupported op", "failure_kind": "model"}


def put(s: MeasurementStore, key: tuple[str, ...], measurement: dict) -> None:
    s.put(*key, measurement, fingerprint=FINGERPRINT, settings=SETTINGS)


@pytest.fixture
def db(tmp_path: Path):
    with MeasurementStore(tmp_path / "m.sqlite") as s:
        yield s


# --- location ---------------------------------------------------------------------------------


def test_env_var_overrides_default_location(tmp_path, monkeypatch):
    target = tmp_path / "deep" / "er" / "store.sqlite"
    target.parent.mkdir(parents=True)  # a path the user names must exist (see below)
    monkeypatch.setenv("LTSEDGE_STORE", str(target))
    assert default_store_path() == target
    with MeasurementStore() as s:  # None -> the default path, here from the variable
        put(s, KEY, SUCCESS)
        assert s.path == target
    assert target.is_file()


def test_explicit_path_beats_env_var(tmp_path, monkeypatch):
    monkeypatch.setenv("LTSEDGE_STORE", str(tmp_path / "env.sqlite"))
    with MeasurementStore(tmp_path / "explicit.sqlite") as s:
        assert s.path == tmp_path / "explicit.sqlite"
    assert not (tmp_path / "env.sqlite").exists()


def test_default_location_per_platform(tmp_path, monkeypatch):
    monkeypatch.delenv("LTSEDGE_STORE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "ltsedge" / "measurements.sqlite"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/is/ignored")
    assert default_store_path() == tmp_path / ".cache" / "ltsedge" / "measurements.sqlite"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_store_path() == tmp_path / ".cache" / "ltsedge" / "measurements.sqlite"
    monkeypatch.setattr(sys, "platform", "darwin")
    assert default_store_path() == tmp_path / "Library" / "Caches" / "ltsedge" / "measurements.sqlite"
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "local"))
    assert default_store_path() == tmp_path / "local" / "ltsedge" / "measurements.sqlite"


# --- keys -------------------------------------------------------------------------------------


def test_arch_key_is_canonical():
    assert arch_key("gpt2-L3-d256-3f9a0c1b2d", {"opset": 17, "ir": 8}) == "arch:gpt2-L3-d256-3f9a0c1b2d:ir=8:opset=17"
    assert arch_key("a", {"ir": 8, "opset": 17}) == arch_key("a", {"opset": 17, "ir": 8})
    assert arch_key("a", {"dynamic": True, "dtype": "fp32"}) == "arch:a:dtype=fp32:dynamic=true"
    assert arch_key("a", {}) == "arch:a"


@pytest.mark.parametrize(
    "arch_id, export",
    [("", {}), ("a:b", {}), (None, {}), ("a", None), ("a", {"opset": [17]}), ("a", {"x": "1:2"}), ("a", {"": 1})],
)
def test_arch_key_rejects_ambiguous_input(arch_id, export):
    with pytest.raises(LtsedgeError):
        arch_key(arch_id, export)


def test_file_key():
    digest = "AB" * 32
    assert file_key(digest) == "sha256:" + "ab" * 32
    for bad in ("", "ab" * 31, "zz" * 32, None):
        with pytest.raises(LtsedgeError, match="SHA-256"):
            file_key(bad)


# --- round trip and semantics -----------------------------------------------------------------


def test_round_trip(db):
    assert db.get(*KEY) is None
    assert db.count() == 0
    put(db, KEY, SUCCESS)
    assert db.get(*KEY) == SUCCESS
    assert db.get(*KEY, include_failures=False) == SUCCESS
    assert db.count() == 1
    [row] = db.rows()
    assert (row["model_key"], row["fingerprint_hash"], row["settings_hash"], row["ort_version"]) == KEY
    assert row["ok"] is True
    assert row["measurement"] == SUCCESS
    assert row["fingerprint"] == FINGERPRINT
    assert row["settings"] == SETTINGS
    assert row["ltsedge_version"] == __version__
    assert row["created_at"].endswith("+00:00")


def test_persists_across_reopen(tmp_path):
    with MeasurementStore(tmp_path / "m.sqlite") as s:
        put(s, KEY, SUCCESS)
    with MeasurementStore(tmp_path / "m.sqlite") as s:
        assert s.get(*KEY) == SUCCESS


def test_uses_wal(tmp_path):
    with MeasurementStore(tmp_path / "m.sqlite"):
        conn = sqlite3.connect(tmp_path / "m.sqlite")
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.close()


def test_failures_are_stored_but_only_the_models_own_are_served(db):
    put(db, KEY, FAILURE)  # a crash, a timeout, a memory limit: another run must measure again
    assert db.get(*KEY) is None
    assert [r["measurement"]["error"] for r in db.rows(ok=False)] == [FAILURE["error"]]
    put(db, KEY, MODEL_FAILURE)  # does not load: it would fail the same way again
    assert db.get(*KEY) == MODEL_FAILURE
    assert db.get(*KEY, include_failures=False) is None
    assert db.rows(ok=True) == []
    put(db, KEY, {"ok": False, "error": "from an older ltsedge: no failure_kind"})
    assert db.get(*KEY) is None


def test_success_replaces_failure(db):
    put(db, KEY, FAILURE)
    put(db, KEY, SUCCESS)
    assert db.get(*KEY, include_failures=False) == SUCCESS
    assert db.count() == 1


def test_failure_does_not_replace_success(db):
    put(db, KEY, SUCCESS)
    put(db, KEY, FAILURE)
    assert db.get(*KEY) == SUCCESS


def test_later_failure_and_later_success_replace_their_own_kind(db):
    put(db, KEY, MODEL_FAILURE)
    put(db, KEY, {**MODEL_FAILURE, "error": "failed to load: other"})
    assert db.get(*KEY)["error"] == "failed to load: other"
    put(db, KEY, SUCCESS)
    put(db, KEY, {**SUCCESS, "latency_ms_p50": 11.0})
    assert db.get(*KEY)["latency_ms_p50"] == 11.0
    assert db.count() == 1


def test_every_key_part_is_distinct(db):
    put(db, KEY, SUCCESS)
    variants = []
    for i in range(4):
        key = list(KEY)
        key[i] = key[i] + "-other"
        variants.append(tuple(key))
        assert db.get(*key) is None
        put(db, key, {**SUCCESS, "latency_ms_p50": float(i)})
    assert db.count() == 5
    assert db.get(*KEY) == SUCCESS
    for i, key in enumerate(variants):
        assert db.get(*key)["latency_ms_p50"] == float(i)
    assert len(db.rows(ort_version=KEY[3])) == 4
    assert len(db.rows(model_key=KEY[0], fingerprint_hash=KEY[1])) == 3


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "measurement, match",
    [
        ([1, 2], "must be a dict with a boolean 'ok'"),
        ({"latency_ms_p50": 1.0}, "must be a dict with a boolean 'ok'"),
        ({"ok": 1}, "must be a dict with a boolean 'ok'"),
        ({"ok": True, "when": object()}, "not JSON-serializable"),
    ],
)
def test_put_rejects_bad_measurements(db, measurement, match):
    with pytest.raises(LtsedgeError, match=match):
        put(db, KEY, measurement)
    assert db.count() == 0


def test_bad_keys_filters_and_metadata(db):
    with pytest.raises(LtsedgeError, match="fingerprint_hash"):
        db.get(KEY[0], "", KEY[2], KEY[3])
    with pytest.raises(LtsedgeError, match="ort_version"):
        db.put(*KEY[:3], None, SUCCESS, fingerprint={}, settings={})
    with pytest.raises(LtsedgeError, match="settings .* must be a dict"):
        db.put(*KEY, SUCCESS, fingerprint={}, settings=["warmup", 3])
    with pytest.raises(LtsedgeError, match="unknown store filter 'arch'"):
        db.rows(arch="x")


def test_closed_store(tmp_path):
    s = MeasurementStore(tmp_path / "m.sqlite")
    s.close()
    s.close()  # idempotent
    with pytest.raises(LtsedgeError, match="is closed"):
        s.count()


# --- unusable files ---------------------------------------------------------------------------


def assert_not_valid(path: Path) -> None:
    with pytest.raises(LtsedgeError) as info:
        MeasurementStore(path)
    message = str(info.value)
    assert str(path) in message and "not a valid SQLite database" in message
    assert "move it aside or pass --store NEW_PATH" in message and "\n" not in message


def test_garbage_file_is_reported_not_replaced(tmp_path):
    path = tmp_path / "m.sqlite"
    garbage = b"this is not sqlite at all\x00\xff" * 100
    path.write_bytes(garbage)
    assert_not_valid(path)
    assert path.read_bytes() == garbage


def test_truncated_database_is_reported(tmp_path):
    path = tmp_path / "m.sqlite"
    with MeasurementStore(path) as s:
        for i in range(300):
            put(s, (f"m{i}", *KEY[1:]), {**SUCCESS, "padding": "x" * 500})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert_not_valid(path)
    assert len(path.read_bytes()) == len(data) // 2


def test_foreign_sqlite_database_is_not_touched(tmp_path):
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (text TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(LtsedgeError, match="SQLite database of something else; pass --store NEW_PATH"):
        MeasurementStore(path)
    conn = sqlite3.connect(path)
    assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["notes"]
    conn.close()


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "m.sqlite"
    MeasurementStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(LtsedgeError, match=rf"schema version 99, .* only knows up to {store_sqlite.SCHEMA_VERSION}; upgrade ltsedge"):
        MeasurementStore(path)


def test_older_schema_is_migrated(tmp_path, monkeypatch):
    path = tmp_path / "m.sqlite"
    with MeasurementStore(path) as s:
        put(s, KEY, SUCCESS)
    current = store_sqlite.SCHEMA_VERSION  # a release one schema newer than this one
    monkeypatch.setattr(store_sqlite, "SCHEMA_VERSION", current + 1)
    monkeypatch.setattr(store_sqlite, "MIGRATIONS",
                        {**store_sqlite.MIGRATIONS, current: ["ALTER TABLE measurements ADD COLUMN note TEXT"]})
    with MeasurementStore(path) as s:
        assert s.get(*KEY) == SUCCESS
        assert s.rows()[0]["note"] is None
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(current + 1,)]
    conn.close()


def test_a_version_1_store_keeps_its_rows_and_learns_architectures(tmp_path):
    path = tmp_path / "m.sqlite"
    with MeasurementStore(path) as s:
        put(s, KEY, SUCCESS)
    conn = sqlite3.connect(path)  # as ltsedge wrote it before the architectures table existed
    conn.execute("DROP TABLE architectures")
    conn.execute("UPDATE schema_version SET version = 1")
    conn.commit()
    conn.close()
    with MeasurementStore(path) as s:
        assert s.get(*KEY) == SUCCESS
        s.put_architecture(KEY[0], ":x=1", {"n_layer": 1})
        assert s.measured_architectures(*KEY[1:], ":x=1") == [({"n_layer": 1}, SUCCESS)]
        assert s.measured_architectures(*KEY[1:], ":x=2") == []  # exported otherwise: not this model's


def test_default_directory_that_cannot_be_created(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where a directory should be")
    monkeypatch.delenv("LTSEDGE_STORE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    with pytest.raises(LtsedgeError, match="cannot create the measurement store directory .*--store PATH"):
        MeasurementStore()


def test_path_that_is_a_directory(tmp_path):
    with pytest.raises(LtsedgeError, match=f"measurement store {tmp_path} cannot be used"):
        MeasurementStore(tmp_path)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs POSIX permissions, not root")
def test_unwritable_directory(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(LtsedgeError, match="cannot be used .*pass --store NEW_PATH"):
            MeasurementStore(locked / "m.sqlite")
        with pytest.raises(LtsedgeError, match="cannot create the measurement store directory"):
            MeasurementStore(locked / "sub" / "m.sqlite")
    finally:
        locked.chmod(0o700)


def test_lock_held_too_long_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(store_sqlite, "BUSY_TIMEOUT_S", 0.1)
    path = tmp_path / "m.sqlite"
    MeasurementStore(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(LtsedgeError, match=r"stayed locked by another process for 0\.\d s"):  # as waited
            MeasurementStore(path)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


# --- concurrency ------------------------------------------------------------------------------

N_PROCESSES = 3
N_ROWS = 200
N_SHARED = 20


def _writer(path: str, worker: int, barrier) -> None:
    with MeasurementStore(path) as s:
        barrier.wait()  # start together so the writes really interleave
        for i in range(N_ROWS):
            put(s, (f"w{worker}-m{i}", *KEY[1:]), {**SUCCESS, "worker": worker, "i": i})
            if i < N_SHARED:  # every process also writes the same keys
                put(s, (f"shared-m{i}", *KEY[1:]), {**SUCCESS, "worker": worker, "i": i})


def test_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "m.sqlite")
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter per writer, as in real use
    barrier = ctx.Barrier(N_PROCESSES)
    procs = [ctx.Process(target=_writer, args=(path, w, barrier)) for w in range(N_PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * N_PROCESSES
    with MeasurementStore(path) as s:
        assert s.count() == N_PROCESSES * N_ROWS + N_SHARED
        for w in range(N_PROCESSES):
            for i in range(N_ROWS):
                assert s.get(f"w{w}-m{i}", *KEY[1:]) == {**SUCCESS, "worker": w, "i": i}
        for i in range(N_SHARED):
            assert s.get(f"shared-m{i}", *KEY[1:])["i"] == i



def test_a_row_that_is_not_json_is_one_line_error(tmp_path):
    path = tmp_path / "m.sqlite"
    with MeasurementStore(path) as s:
        put(s, KEY, SUCCESS)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE measurements SET measurement = '{not json'")
    conn.commit()
    conn.close()
    with MeasurementStore(path) as s:
        with pytest.raises(LtsedgeError, match="not valid JSON; move the store aside"):
            s.get(*KEY)
        with pytest.raises(LtsedgeError, match="not valid JSON"):
            s.rows()


def test_a_store_in_a_missing_directory_is_refused_but_the_default_cache_is_created(tmp_path, monkeypatch):
    with pytest.raises(LtsedgeError, match="does not exist; create it"):
        MeasurementStore(tmp_path / "typo" / "m.sqlite")
    assert not (tmp_path / "typo").exists()
    monkeypatch.setenv("LTSEDGE_STORE", str(tmp_path / "also-typo" / "m.sqlite"))
    with pytest.raises(LtsedgeError, match="does not exist"):
        MeasurementStore()
    monkeypatch.delenv("LTSEDGE_STORE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with MeasurementStore() as s:  # the default location is ltsedge's to create
        assert s.path == tmp_path / "cache" / "ltsedge" / "measurements.sqlite" and s.path.exists()


def test_each_export_variant_has_its_own_key():
    """A generate model's figures are never served for the forward model of the same architecture."""
    from ltsedge.exporters.options import ExportOptions

    arch = tiny_arch()
    forward = ExportOptions().model_key(arch)
    assert forward == ExportOptions(variant="forward", precision="fp32").model_key(arch)
    assert ExportOptions(variant="generate").model_key(arch) != forward
    assert "variant" not in forward  # forward keys are the ones stored before variants existed
