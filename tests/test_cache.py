"""Files named by their content in ltsedge's cache: written once, reused only intact, never lost for
want of a writable cache; a temporary copy a killed writer left is removed by the next use."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ltsedge.cache import cache_dir, content_file, sweep_abandoned_copies
from ltsedge.devices import load_profile
from ltsedge.runners import Runner

DATA = b"onnx bytes" * 1000


def test_written_once_then_reused(tmp_path):
    path = content_file(DATA, "reference-compute", tmp_path)
    assert path.parent == tmp_path and path.read_bytes() == DATA
    assert path.name == f"reference-compute-{hashlib.sha256(DATA).hexdigest()[:16]}.onnx"
    written = path.stat().st_mtime_ns
    os.utime(path, ns=(written - 10**9, written - 10**9))  # so that a rewrite would show
    assert content_file(DATA, "reference-compute", tmp_path) == path
    assert path.stat().st_mtime_ns == written - 10**9
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary copy left beside it


def test_other_content_gets_its_own_file(tmp_path):
    first = content_file(DATA, "reference-bandwidth", tmp_path)
    second = content_file(DATA + b"!", "reference-bandwidth", tmp_path)
    assert first != second and first.read_bytes() == DATA and second.read_bytes() == DATA + b"!"


def test_a_copy_cut_short_is_written_again(tmp_path):
    path = content_file(DATA, "reference-compute", tmp_path)
    path.write_bytes(DATA[:100])  # a power loss between write and flush
    assert content_file(DATA, "reference-compute", tmp_path) == path
    assert path.read_bytes() == DATA


def test_an_unwritable_cache_falls_through_to_the_next_folder(tmp_path):
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the folder should be")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    path = content_file(DATA, "reference-compute", blocked / "references", scratch)
    assert path.parent == scratch and path.read_bytes() == DATA
    assert blocked.read_text() == "a file where the folder should be"
    with pytest.raises(OSError):
        content_file(DATA, "reference-compute", blocked / "references")


def test_an_intact_copy_in_a_later_folder_is_reused_not_written_again(tmp_path):
    later = tmp_path / "later"
    existing = content_file(DATA, "reference-compute", later)
    assert content_file(DATA, "reference-compute", tmp_path / "first", later) == existing
    assert not (tmp_path / "first").exists()


def test_runners_share_one_copy_of_the_references(tmp_path, monkeypatch):
    """The 100 MB bandwidth reference is written once per machine, not into every Runner's scratch."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    scratches = []
    for _ in range(2):
        with Runner(load_profile("cpu")) as runner:
            scratches.append(runner._tmp.path)
            refs = {kind: runner._reference(kind) for kind in ("compute", "bandwidth")}
            assert all(p.parent == cache_dir() / "references" for p in refs.values())
            assert not list(runner._tmp.path.glob("*.onnx"))
    assert sorted(p.name for p in (cache_dir() / "references").iterdir()) == sorted(p.name for p in refs.values())
    assert refs["bandwidth"].stat().st_size > 90 * 2**20
    assert not any(s.exists() for s in scratches)


def writer_in_the_middle(folder: Path, data: bytes = DATA) -> tuple[subprocess.Popen, Path]:
    """A process writing ``data`` into ``folder`` through the cache, held halfway through its write;
    and the temporary copy it is writing."""
    code = textwrap.dedent(f"""
        import os, sys, time
        from ltsedge import cache

        class HalfWritten:  # writes half the copy, then waits to be killed
            def __init__(self, f):
                self.f = f
            def __enter__(self):
                return self
            def __exit__(self, *exc):
                self.f.close()
            def write(self, data):
                self.f.write(data[:len(data) // 2])
                self.f.flush()
                print("writing", flush=True)
                time.sleep(120)

        fdopen = os.fdopen
        os.fdopen = lambda fd, mode: HalfWritten(fdopen(fd, mode))
        cache.content_file({data!r}, "reference-bandwidth", {str(folder)!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "writing\n"
    (temporary,) = folder.glob(".reference-bandwidth-*.onnx.*.new")
    assert temporary.stat().st_size == len(data) // 2
    return proc, temporary


def test_a_copy_a_killed_writer_left_is_removed_by_the_next_use(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    references = cache_dir() / "references"
    proc, left = writer_in_the_middle(references)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert left.exists()  # nothing could remove it as the process died
    with Runner(load_profile("cpu")) as runner:
        reference = runner._reference("compute")
    assert not left.exists()
    assert sorted(p.name for p in references.iterdir()) == [reference.name]

    proc, left = writer_in_the_middle(tmp_path / "cache")  # and by a use of the cache without a Runner
    proc.kill()
    proc.wait()
    path = content_file(DATA, "reference-bandwidth", tmp_path / "cache")
    assert not left.exists() and path.read_bytes() == DATA


def test_a_live_writers_copy_is_kept(tmp_path):
    proc, writing = writer_in_the_middle(tmp_path)
    try:
        path = content_file(DATA, "reference-bandwidth", tmp_path)  # the same copy, written beside it
        assert path.read_bytes() == DATA and content_file(DATA + b"!", "reference-bandwidth", tmp_path)
        assert writing.stat().st_size == len(DATA) // 2 and sweep_abandoned_copies(tmp_path) == []
    finally:
        proc.kill()
        proc.wait()
    assert sweep_abandoned_copies(tmp_path) == [writing]  # its writer gone now


def test_files_ltsedge_did_not_write_are_never_touched(tmp_path):
    digest = "0123456789abcdef"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "theirs.onnx"
    target.write_text("keep")
    theirs = {
        "notes.txt": "keep",
        ".notes.txt.abcd1234.new": "keep",  # a temporary, but not of a cache copy
        f".model-{digest}.onnx.new": "keep",  # no mkstemp part
        f".model-{digest}.onnx.abcd1234.new.bak": "keep",
    }
    for name, text in theirs.items():
        (tmp_path / name).write_text(text)
    link = tmp_path / f".model-{digest}.onnx.abcd1234.new"  # named as ours, but a link
    link.symlink_to(target)
    folder = tmp_path / f".model-{digest}.onnx.efgh5678.new"  # named as ours, but a folder
    folder.mkdir()
    (folder / "data").write_text("keep")
    content_file(DATA, "reference-compute", tmp_path)
    assert sweep_abandoned_copies(tmp_path) == []
    assert all((tmp_path / name).read_text() == text for name, text in theirs.items())
    assert link.is_symlink() and target.read_text() == "keep" and (folder / "data").read_text() == "keep"
