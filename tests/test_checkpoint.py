"""The checkpoint and the candidate log: exact resume from JSON, refusal of another run's files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ltsedge.errors import LtsedgeError
from ltsedge.search.checkpoint import (
    CandidateLog,
    SearchState,
    load_checkpoint,
    save_checkpoint,
)
from tests.helpers import fresh_algorithm, generation


@pytest.mark.parametrize("stop_after", [1, 3, 5])
def test_resume_from_json_continues_exactly_like_an_uninterrupted_run(tmp_path, stop_after):
    uninterrupted = fresh_algorithm()
    expected = [generation(uninterrupted) for _ in range(6)]

    first = fresh_algorithm()
    asked = [generation(first) for _ in range(stop_after)]
    save_checkpoint(tmp_path, "run-a", first, SearchState(generation=stop_after, hv_history=[{"generation": 1}]))
    json.loads((tmp_path / "checkpoint.json").read_text())  # plain JSON: nothing in it can execute

    resumed = fresh_algorithm()
    state = load_checkpoint(tmp_path, "run-a", resumed)
    assert state.generation == stop_after and state.hv_history == [{"generation": 1}]
    while resumed.has_next():
        asked.append(generation(resumed))
    assert len(asked) == len(expected)
    for got, want in zip(asked, expected):
        np.testing.assert_array_equal(got, want)


def test_checkpoint_of_another_run_or_damaged_is_refused(tmp_path):
    algorithm = fresh_algorithm()
    generation(algorithm)
    save_checkpoint(tmp_path, "run-a", algorithm, SearchState(generation=1))
    with pytest.raises(LtsedgeError, match="different settings"):
        load_checkpoint(tmp_path, "run-b", fresh_algorithm())
    (tmp_path / "checkpoint.json").write_text("\x80\x04 not json")  # e.g. a pickle from an older ltsedge
    with pytest.raises(LtsedgeError, match="unreadable.*--restart"):
        load_checkpoint(tmp_path, "run-a", fresh_algorithm())
    (tmp_path / "checkpoint.json").write_text(json.dumps({"format": 1, "identity": "run-a", "run": {},
                                                          "algorithm": {"population": {}}}))
    with pytest.raises(LtsedgeError, match="damaged"):
        load_checkpoint(tmp_path, "run-a", fresh_algorithm())
    assert load_checkpoint(tmp_path / "none", "run-a", fresh_algorithm()) is None


def test_candidate_log_names_its_run_and_refuses_another(tmp_path):
    log = CandidateLog(tmp_path, "run-a")
    assert log.records() == []
    log.append({"id": "x", "generation": 1})
    with open(log.path, "a") as f:
        f.write('{"id": "cut sho')  # a kill in the middle of a line
    assert log.records() == [{"id": "x", "generation": 1}]
    with pytest.raises(LtsedgeError, match="different settings"):
        CandidateLog(tmp_path, "run-b").records()
    log.path.write_text('{"id": "from an older ltsedge, no header"}\n')
    with pytest.raises(LtsedgeError, match="not a candidate log"):
        log.records()


def test_the_checkpoint_reaches_the_disk_before_it_replaces_the_old_one(tmp_path, monkeypatch):
    """fsync of the new file, then the rename, then fsync of the directory: a power cut leaves the old
    checkpoint or the whole new one, never an empty file under its name."""
    import os
    from pathlib import Path

    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.path.isdir(f"/proc/self/fd/{fd}"))),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda source, target: (events.append(("rename", Path(target).name)),
                                                               real_replace(source, target))[1])
    algorithm = fresh_algorithm()
    generation(algorithm)
    save_checkpoint(tmp_path, "run-a", algorithm, SearchState(generation=1))
    assert events == [("fsync", False), ("rename", "checkpoint.json"), ("fsync", True)]
    assert load_checkpoint(tmp_path, "run-a", fresh_algorithm()).generation == 1
