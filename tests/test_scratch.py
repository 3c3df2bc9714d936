"""Scratch directories: one left by a process killed outright is removed later; nothing else ever is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap

import pytest

from ltsedge.scratch import LOCK_NAME, ScratchDir, sweep_abandoned

PREFIX = "ltsedge-test-scratch-"


@pytest.fixture
def tmpdir_here(tmp_path, monkeypatch):
    """The temporary directory of this process and of the processes it starts: ``tmp_path``."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


def owner_process(*, then: str) -> tuple[subprocess.Popen, str]:
    """A process that makes a scratch directory, says where, and then does ``then``."""
    code = textwrap.dedent(f"""
        import os, signal, sys, time
        from ltsedge.scratch import ScratchDir
        scratch = ScratchDir({PREFIX!r})
        (scratch.path / "model.onnx").write_bytes(b"x" * 1000)
        print(scratch.path, flush=True)
        {then}
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def test_a_scratch_directory_is_removed_when_closed(tmpdir_here):
    with ScratchDir(PREFIX) as path:
        assert path.parent == tmpdir_here and (path / LOCK_NAME).is_file()
        (path / "file").write_text("x")
    assert not path.exists()


def test_one_left_by_a_killed_process_is_removed_by_the_next(tmpdir_here):
    proc, left = owner_process(then="os.kill(os.getpid(), signal.SIGKILL)")
    assert proc.wait() == -signal.SIGKILL
    assert os.path.isdir(left)  # nothing could remove it as the process died
    with ScratchDir(PREFIX) as mine:
        assert not os.path.exists(left)
        assert mine.is_dir()


def test_a_live_owners_directory_is_kept(tmpdir_here):
    proc, alive = owner_process(then="time.sleep(60)")
    try:
        with ScratchDir(PREFIX) as first, ScratchDir(PREFIX) as second:  # this process's own, too
            assert sweep_abandoned(PREFIX) == []
            assert os.path.isdir(alive) and first.is_dir() and second.is_dir()
    finally:
        proc.kill()
        proc.wait()
    assert sweep_abandoned(PREFIX) == [tmpdir_here / os.path.basename(alive)]  # its owner gone now


def test_directories_ltsedge_did_not_lock_are_never_touched(tmpdir_here):
    theirs = tmpdir_here / f"{PREFIX}someone-elses"
    theirs.mkdir()
    (theirs / "data").write_text("keep")
    plain_file = tmpdir_here / f"{PREFIX}a-file"
    plain_file.write_text("keep")
    linked = tmpdir_here / f"{PREFIX}a-link"
    target = tmpdir_here / "elsewhere"
    target.mkdir()
    (target / LOCK_NAME).write_text("")  # an unlocked lock file, behind a symlink
    linked.symlink_to(target)
    with ScratchDir(PREFIX):
        pass
    assert (theirs / "data").read_text() == "keep" and plain_file.read_text() == "keep"
    assert linked.is_symlink() and (target / LOCK_NAME).exists()
