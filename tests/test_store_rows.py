"""A store row of the wrong types or cut short (edited by hand, written by a broken tool) is treated as
absent and measured again, never a traceback in whatever reads it later."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from ltsedge.errors import LtsedgeError
from ltsedge.runners.measurement import Measurement
from ltsedge.store import MeasurementStore
from tests.helpers import FAST_DEVICE, run_ltsedge, tiny_arch

KEY = ("sha256:" + "b" * 64, "fp", "set", "1.20.1")
GOOD = Measurement(ok=True, latency_ms=2.0, latency_p90_ms=2.5, latency_min_ms=1.5, latency_cv=0.1, runs=5,
                   peak_memory_mb=40.0, weights_mb=1.0, workload="decode",
                   workloads={"decode": {"latency_ms": 2.0, "latency_ratio": 0.5, "coarse": False,
                                         "reference": "bandwidth", "reference_scale": 1.2}}).to_dict()

WRONG_TYPES = [
    ({"workloads": "abc"}, "workloads must be dict"),
    ({"workloads": [1, 2]}, "workloads must be dict"),
    ({"workloads": {"decode": 5}}, "workloads.decode must be an object"),
    ({"workloads": {"decode": {"latency_ms": "2.0"}}}, "workloads.decode.latency_ms must be float"),
    ({"workloads": {"decode": {"latency_ms": 2.0, "coarse": "no"}}}, "workloads.decode.coarse must be bool"),
    ({"peak_memory_mb": "lots"}, "peak_memory_mb must be float"),
    ({"runs": "5"}, "runs must be int"),
    ({"converged": 1}, "converged must be bool"),
    ({"error": ["x"]}, "error must be str"),
]


@pytest.mark.parametrize("change, message", WRONG_TYPES)
def test_a_record_with_a_field_of_another_type_is_refused_in_one_line(change, message):
    with pytest.raises(LtsedgeError, match=message):
        Measurement.from_record({**GOOD, **change})


def test_a_record_keeps_its_fields_and_ignores_those_of_other_versions():
    record = {**GOOD, "peak_memory_mb": 40, "removed_since": "anything"}  # an int where a float is kept
    assert Measurement.from_record(record).to_dict() == {**GOOD, "peak_memory_mb": 40}
    assert Measurement.from_record({"ok": False, "error": "failed to load"}).error == "failed to load"


def _damage(path: Path, sql: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE measurements SET measurement = {sql}")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("change, message", WRONG_TYPES)
def test_a_stored_row_of_wrong_types_is_absent_and_replaced(tmp_path, change, message):
    path = tmp_path / "s.sqlite"
    with MeasurementStore(path) as s:
        s.put(*KEY, GOOD, fingerprint={}, settings={})
        s.put_architecture(KEY[0], ":x=1", {"n_layer": 1})
    _damage(path, f"'{json.dumps({**GOOD, **change})}'")
    with MeasurementStore(path) as s:
        assert s.get(*KEY) is None  # measured again, as if it were not there
        assert s.measured_architectures(*KEY[1:], ":x=1") == []  # and not a cost model's sample
        s.put(*KEY, GOOD, fingerprint={}, settings={})
        assert s.get(*KEY) == GOOD


DAMAGES = {
    "workloads a string": "json_set(measurement, '$.workloads', 'abc')",
    "workloads a list": "json_set(measurement, '$.workloads', json('[1, 2]'))",
    "peak memory a string": "json_set(measurement, '$.peak_memory_mb', 'lots')",
    "no p90": "json_remove(measurement, '$.latency_p90_ms')",
    "p90 null": "json_set(measurement, '$.latency_p90_ms', json('null'))",
}


@pytest.mark.slow  # six measurements
def test_profile_measures_again_over_every_damaged_row(tmp_path):
    arch, device, store = tmp_path / "arch.json", tmp_path / "fast.toml", tmp_path / "s.sqlite"
    arch.write_text(tiny_arch().to_json())
    device.write_text(FAST_DEVICE)
    first = run_ltsedge("profile", arch, "--device", device, "--store", store, "--json")
    assert first.returncode == 0, first.stderr
    clean = tmp_path / "clean.sqlite"
    shutil.copy(store, clean)
    for damage, sql in DAMAGES.items():
        shutil.copy(clean, store)
        _damage(store, sql)
        again = run_ltsedge("profile", arch, "--device", device, "--store", store)  # the printed table
        assert again.returncode == 0 and "measured now" in again.stdout, (damage, again.stderr)
    served = run_ltsedge("profile", arch, "--device", device, "--store", store, "--json")
    assert json.loads(served.stdout)["cached"] is True  # the figure measured again replaced the damaged one
