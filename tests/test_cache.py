"""Files named by their content in ltsedge's cache: written once, reused only intact, never lost for
want of a writable cache."""

from __future__ import annotations

import hashlib
import os

import pytest

from ltsedge.cache import cache_dir, content_file
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
