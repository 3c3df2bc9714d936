"""Opening the measurement store: several processes creating one at once, the wait a lock message
reports, and a store that can only be read (a read-only mount) for the commands that only read."""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from ltsedge import store_sqlite
from ltsedge.errors import LtsedgeError
from ltsedge.store import MeasurementStore
from tests.helpers import ltsedge_cli, one_line_exit_2, tiny_arch

KEY = ("sha256:" + "a" * 64, "fp", "set", "1.20.1")
SUCCESS = {"ok": True, "latency_ms": 2.0}


def put(store: MeasurementStore, key=KEY, measurement=SUCCESS) -> None:
    store.put(*key, measurement, fingerprint={}, settings={})


def write_lock_on_a_new_file(path: Path) -> sqlite3.Connection:
    """Another process's write lock on a store file still in SQLite's first journal mode, as the first of
    several processes creating one store holds it."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    return holder


# --- several processes creating one store --------------------------------------------------------


def test_a_new_store_waits_for_another_process_s_write_lock_instead_of_failing_at_once(tmp_path):
    path = tmp_path / "m.sqlite"
    holder = write_lock_on_a_new_file(path)
    release = threading.Timer(0.5, holder.rollback)
    release.start()
    started = time.monotonic()
    try:
        with MeasurementStore(path) as s:
            put(s)
            assert s.get(*KEY) == SUCCESS
        assert time.monotonic() - started >= 0.4
    finally:
        release.join()
        holder.close()


def test_a_lock_message_says_how_long_it_really_waited(tmp_path, monkeypatch):
    monkeypatch.setattr(store_sqlite, "BUSY_TIMEOUT_S", 0.3)
    path = tmp_path / "m.sqlite"
    holder = write_lock_on_a_new_file(path)
    started = time.monotonic()
    try:
        with pytest.raises(LtsedgeError, match="stayed locked by another process for") as info:
            MeasurementStore(path)
    finally:
        holder.close()
    waited = time.monotonic() - started
    reported = float(re.search(r"for (\d+\.\d) s;", str(info.value)).group(1))
    assert 0.3 <= waited and 0.25 <= reported <= waited + 0.05


def _open_new(path: str, barrier, results) -> None:
    barrier.wait()  # all at once, as parallel CI jobs starting on one cache do
    try:
        MeasurementStore(path).close()
        results.put("ok")
    except LtsedgeError as e:
        results.put(str(e))


@pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(), reason="needs forkserver")
def test_many_processes_creating_one_store_at_once_all_open_it(tmp_path):
    ctx = multiprocessing.get_context("forkserver")  # forked from a server that imported this: they meet
    ctx.set_forkserver_preload([__name__])
    for round in range(5):
        path = str(tmp_path / f"m{round}.sqlite")
        barrier, results = ctx.Barrier(24), ctx.Queue()
        procs = [ctx.Process(target=_open_new, args=(path, barrier, results)) for _ in range(24)]
        for p in procs:
            p.start()
        answers = [results.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert answers == ["ok"] * 24, [a for a in answers if a != "ok"][:3]
        with MeasurementStore(path) as s:
            assert s.count() == 0


# --- a store that can only be read ---------------------------------------------------------------


@pytest.fixture
def read_only_view(tmp_path):
    """A writable folder and the same folder read-only: a read-only bind mount where this runs as root
    (root writes whatever the permission bits say), else the folder's write permissions taken away."""
    writable, view = tmp_path / "rw", tmp_path / "ro"
    writable.mkdir()
    if os.name != "posix":
        pytest.skip("needs POSIX mounts or permissions")
    if os.geteuid() != 0:
        yield writable, writable, lambda: (writable.chmod(0o555), *(f.chmod(0o444) for f in writable.iterdir()))
        writable.chmod(0o755)
        return
    view.mkdir()
    if shutil.which("mount") is None or subprocess.run(["mount", "--bind", "-o", "ro", writable, view],
                                                       capture_output=True).returncode != 0:
        pytest.skip("cannot make a read-only bind mount here")
    try:
        if os.access(view, os.W_OK):
            pytest.skip("this mount does not honour -o ro")
        yield writable, view, lambda: None
    finally:
        subprocess.run(["umount", view], check=True)


def test_a_store_on_a_read_only_mount_is_read_by_a_reading_command(read_only_view):
    writable, view, lock = read_only_view
    with MeasurementStore(writable / "m.sqlite") as s:
        put(s)
        s.put_architecture(KEY[0], ":x=1", {"n_layer": 1})
        s.put_calibration(*KEY[1:], {"reference_ms": 1.5}, fingerprint={}, settings={})
    lock()
    with MeasurementStore(view / "m.sqlite", read_only=True) as s:
        assert s.get(*KEY) == SUCCESS and s.count() == 1
        assert s.measured_architectures(*KEY[1:], ":x=1") == [({"n_layer": 1}, SUCCESS)]
        assert s.get_calibration(*KEY[1:]) == {"reference_ms": 1.5}
        with pytest.raises(LtsedgeError, match="is read-only"):
            put(s, (KEY[0] + "2", *KEY[1:]))
    assert sorted(p.name for p in view.iterdir()) == ["m.sqlite"]


def test_a_store_on_a_read_only_mount_while_another_process_writes_it_elsewhere(read_only_view):
    writable, view, lock = read_only_view
    if writable == view:
        pytest.skip("a writer needs the writable side of a mount")
    with MeasurementStore(writable / "m.sqlite") as writer:  # open: its WAL files are beside it
        put(writer)
        with MeasurementStore(view / "m.sqlite", read_only=True) as s:
            assert s.get(*KEY) == SUCCESS
        put(writer, (KEY[0] + "2", *KEY[1:]))
        with MeasurementStore(view / "m.sqlite", read_only=True) as s:
            assert s.count() == 2


def test_predict_reads_a_store_on_a_read_only_mount(read_only_view):
    writable, view, lock = read_only_view
    MeasurementStore(writable / "m.sqlite").close()
    (writable / "arch.json").write_text(tiny_arch().to_json())
    lock()
    proc = ltsedge_cli("predict", view / "arch.json", "--preset", "smoke", "--store", view / "m.sqlite")
    # Read: it holds no cost model, and says so (not that the store cannot be used).
    one_line_exit_2(proc, "ltsedge costmodel")
    assert "read-only" not in proc.stderr and "cannot be used" not in proc.stderr


def test_a_command_that_writes_to_a_read_only_store_says_so_in_one_line(read_only_view):
    writable, view, lock = read_only_view
    MeasurementStore(writable / "m.sqlite").close()
    lock()
    one_line_exit_2(ltsedge_cli("calibrate", "--store", view / "m.sqlite"),
                    f"measurement store {view / 'm.sqlite'} is read-only")


def test_an_older_store_is_upgraded_before_it_is_read_where_it_can_be_written(tmp_path):
    path = tmp_path / "m.sqlite"
    with MeasurementStore(path) as s:
        put(s)
    conn = sqlite3.connect(path)  # as an ltsedge before pinned calibrations wrote it
    conn.execute("DROP TABLE calibrations")
    conn.execute("UPDATE schema_version SET version = 2")
    conn.commit()
    conn.close()
    with MeasurementStore(path, read_only=True) as s:
        assert s.get(*KEY) == SUCCESS and s.get_calibration(*KEY[1:]) is None


def test_an_older_store_that_cannot_be_written_is_one_line(read_only_view):
    writable, view, lock = read_only_view
    with MeasurementStore(writable / "m.sqlite") as s:
        put(s)
    conn = sqlite3.connect(writable / "m.sqlite")
    conn.execute("DROP TABLE calibrations")
    conn.execute("UPDATE schema_version SET version = 2")
    conn.commit()
    conn.close()
    lock()
    with pytest.raises(LtsedgeError, match=r"has schema version 2, older than .* and is read-only"):
        MeasurementStore(view / "m.sqlite", read_only=True)


def test_reading_a_store_not_made_yet_creates_nothing(tmp_path, monkeypatch):
    with MeasurementStore(tmp_path / "m.sqlite", read_only=True) as s:
        assert s.count() == 0 and s.get(*KEY) is None and s.get_calibration(*KEY[1:]) is None
        with pytest.raises(LtsedgeError, match="is read-only"):
            put(s)  # refused, never kept in memory and lost
    monkeypatch.delenv("LTSEDGE_STORE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with MeasurementStore(read_only=True) as s:
        assert s.count() == 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content, message", [
    (b"this is not sqlite at all\x00\xff" * 100, "not a valid SQLite database"),
    ("foreign", "SQLite database of something else"),
    ("newer", "only knows up to"),
])
def test_reading_refuses_what_writing_refuses(tmp_path, content, message):
    path = tmp_path / "m.sqlite"
    if content == "foreign":
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.commit()
        conn.close()
    elif content == "newer":
        MeasurementStore(path).close()
        conn = sqlite3.connect(path)
        conn.execute("UPDATE schema_version SET version = 99")
        conn.commit()
        conn.close()
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    with pytest.raises(LtsedgeError, match=message):
        MeasurementStore(path, read_only=True)
    assert path.read_bytes() == before
