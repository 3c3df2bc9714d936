"""A search's output directory: only files ltsedge wrote are replaced or removed; one search at a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ltsedge.errors import LtsedgeError
from ltsedge.search.outdir import MANIFEST, OutputDir
from tests.helpers import ltsedge_cli


def test_a_search_refuses_an_out_with_someone_elses_model_and_leaves_it_alone(tmp_path):
    proj = tmp_path / "proj"
    (proj / "models").mkdir(parents=True)
    mine = proj / "models" / "my_production_model.onnx"
    mine.write_bytes(b"precious")
    proc = ltsedge_cli("search", "--preset", "smoke", "--generations", 1, "--out", proj, "--store", tmp_path / "s.sqlite",
                   "--quiet", "--no-baseline")
    assert proc.returncode == 2 and "my_production_model.onnx was not written by ltsedge search" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert mine.read_bytes() == b"precious"


def test_outputs_of_an_earlier_tool_at_the_fixed_names_are_refused(tmp_path):
    (tmp_path / "frontier.json").write_text("{}")
    with pytest.raises(LtsedgeError, match="frontier.json was not written by ltsedge search"):
        OutputDir(tmp_path).open()
    assert (tmp_path / "frontier.json").read_text() == "{}"


def test_only_recorded_files_are_removed_and_empty_dirs_tidied(tmp_path):
    with OutputDir(tmp_path) as out:
        model = out.path("models/a/model.onnx")
        model.write_bytes(b"x")
        assert out.owns("models/a/model.onnx") and out.files_under("models") == ["models/a/model.onnx"]
        (tmp_path / "notes.txt").write_text("mine")  # beside, not in an owned place: never touched
        with pytest.raises(LtsedgeError, match="did not write it"):
            out.remove("notes.txt")
        out.remove("models/a/model.onnx")
        assert not model.exists() and not (tmp_path / "models" / "a").exists()
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert "models/a/model.onnx" not in json.loads((tmp_path / MANIFEST).read_text())["files"]


def test_a_recorded_file_survives_a_reopen_and_a_damaged_manifest_is_refused(tmp_path):
    with OutputDir(tmp_path) as out:
        out.path(".scratch/x.onnx").write_bytes(b"left by a killed run")
    with OutputDir(tmp_path) as out:  # recorded: not foreign
        assert out.files_under(".scratch") == [".scratch/x.onnx"]
    (tmp_path / MANIFEST).write_text("{")
    with pytest.raises(LtsedgeError, match="damaged"):
        OutputDir(tmp_path).open()


def test_a_move_keeps_the_bytes_and_the_records_and_refuses_a_stranger(tmp_path):
    with OutputDir(tmp_path) as out:
        out.path(".scratch/b/model.onnx").write_bytes(b"measured")
        moved = out.move(".scratch/b/model.onnx", "models/fast/model.onnx")
        assert moved.read_bytes() == b"measured" and not (tmp_path / ".scratch").exists()
        assert out.files_under("models") == ["models/fast/model.onnx"] and out.files_under(".scratch") == []
        (tmp_path / "mine.txt").write_text("mine")
        with pytest.raises(LtsedgeError, match="did not write it"):
            out.move("mine.txt", "models/mine.txt")
    assert (tmp_path / "mine.txt").read_text() == "mine"


def test_a_half_written_file_of_a_killed_run_is_adopted_and_a_stranger_is_not(tmp_path):
    with OutputDir(tmp_path) as out:
        out.path(".scratch/x.onnx")  # recorded, then killed while writing x.onnx.partial
    (tmp_path / ".scratch" / "x.onnx.partial").write_bytes(b"half")
    (tmp_path / ".scratch" / "x.onnx.data.partial").write_bytes(b"half")
    with OutputDir(tmp_path) as out:
        assert out.files_under(".scratch") == [".scratch/x.onnx", ".scratch/x.onnx.data.partial",
                                               ".scratch/x.onnx.partial"]
        for rel in out.files_under(".scratch"):
            out.remove(rel)
    assert not (tmp_path / ".scratch").exists()
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "theirs.onnx.partial").write_bytes(b"someone else's")
    with pytest.raises(LtsedgeError, match="theirs.onnx.partial was not written by ltsedge search"):
        OutputDir(tmp_path).open()
    assert (tmp_path / "models" / "theirs.onnx.partial").read_bytes() == b"someone else's"


def test_two_searches_never_share_a_directory(tmp_path):
    first = OutputDir(tmp_path).open()
    try:
        # Another process: flock is per open file description, so a second process is refused.
        code = ("from ltsedge.search.outdir import OutputDir\n"
                "from ltsedge.errors import LtsedgeError\n"
                f"try:\n    OutputDir({str(tmp_path)!r}).open()\nexcept LtsedgeError as e:\n    print(e)\n")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert f"another ltsedge search is writing to {tmp_path} (pid {os.getpid()})" in proc.stdout
    finally:
        first.close()
    OutputDir(tmp_path).open().close()  # released
