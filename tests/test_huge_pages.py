"""A profile's huge_pages: the measuring worker's large blocks on transparent huge pages, from the TOML
file to the worker's environment, the store's keys and the worker's own memory map."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from ltsedge.devices import DeviceProfile, load_profile
from ltsedge.devices.profile import SETTINGS
from ltsedge.keys import calibration_key, measurement_key
from ltsedge.runners import Runner, memory
from ltsedge.runners import runner as runner_module
from ltsedge.runners.protocol import RunSettings
from ltsedge.runners.reference import reference_model
from tests.helpers import FAST_DEVICE, one_line_exit_2, run_ltsedge

FAST = load_profile("cpu").replace(min_runs=3, max_runs=5, max_seconds=1.0, warmup=1, drift_check_every=0)
FINGERPRINT = {"cpu_model": "x", "onnxruntime": "1.0"}
THP = sys.platform.startswith("linux") and memory.huge_pages_unavailable() is None


def test_off_by_default_and_in_the_keys_only_when_set():
    assert not load_profile("cpu").huge_pages and not DeviceProfile(name="plain").huge_pages
    plain, huge = FAST, FAST.replace(huge_pages=True)
    assert "huge_pages" not in plain.settings() and huge.settings()["huge_pages"] is True
    assert tuple(DeviceProfile(name="plain").settings()) == SETTINGS  # the keys of figures before it
    assert measurement_key("m", FINGERPRINT, plain) != measurement_key("m", FINGERPRINT, huge)
    # The references run faster on huge pages: a calibration pinned without them does not serve.
    assert calibration_key(FINGERPRINT, plain) != calibration_key(FINGERPRINT, huge)
    assert RunSettings.from_profile(huge).huge_pages and not RunSettings.from_profile(plain).huge_pages


def test_a_profile_file_sets_it_and_a_wrong_type_is_one_line(tmp_path, arch_file):
    path = tmp_path / "board.toml"
    path.write_text(FAST_DEVICE + "[runtime]\nhuge_pages = true\n")
    assert load_profile(path).huge_pages
    path.write_text(FAST_DEVICE + '[runtime]\nhuge_pages = "yes"\n')
    one_line_exit_2(run_ltsedge("profile", str(arch_file()), "--device", str(path)),
                    '[runtime] huge_pages = "yes" has the wrong type: expected true or false')


def test_the_tunable_is_added_to_the_users_own():
    assert memory.with_huge_pages({"A": "1"}) == {"A": "1", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    env = memory.with_huge_pages({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"


@pytest.mark.parametrize("kernel, state", [("always [madvise] never", "on"), ("[always] madvise never", "on"),
                                           ("always madvise [never]", "kernel: never"), ("", "kernel: unknown")])
def test_the_workers_state_follows_the_kernels_mode(tmp_path, monkeypatch, kernel, state):
    mode_file = tmp_path / "enabled"
    mode_file.write_text(kernel)
    monkeypatch.setattr(memory, "THP_MODE_FILE", str(mode_file))
    monkeypatch.setattr("platform.libc_ver", lambda: ("glibc", "2.36"))
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    assert memory.huge_pages_state() == "off"  # not asked for
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
    assert memory.huge_pages_state() == state


def _anon_huge_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    return int(re.search(r"^AnonHugePages:\s+(\d+) kB", text, re.M).group(1)) / 1024


@pytest.mark.skipif(not THP, reason="needs Linux, glibc and transparent huge pages (always or madvise)")
def test_the_workers_weights_land_on_huge_pages_only_when_asked(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(reference_model())
    huge = {}
    for setting in (False, True):
        with Runner(FAST.replace(huge_pages=setting)) as runner:
            assert runner.measure(model).ok
            assert runner._worker.hello["huge_pages"] == ("on" if setting else "off")
            huge[setting] = _anon_huge_mb(runner.worker_pid)
    # The worker holds the 96 MB bandwidth reference (and the model): with the tunable most of it is
    # on 2 MB pages; without, only what the runtime itself asked for.
    assert huge[True] > huge[False] + 64, huge


def test_a_worker_that_cannot_use_them_is_said_once(monkeypatch, tmp_path):
    class NoHugePagesWorker:
        def __init__(self, log_path, *, huge_pages):
            assert huge_pages
            self.hello, self.alive = {"huge_pages": "kernel: never"}, True

        def close(self):
            self.alive = False

    monkeypatch.setattr(runner_module, "WorkerProcess", NoHugePagesWorker)
    said = []
    with Runner(FAST.replace(huge_pages=True), log=said.append) as runner:
        runner._ensure_worker()
        runner._retire_worker()
        runner._ensure_worker()
    assert said == ["huge_pages is set but this worker's blocks cannot be on huge pages (kernel: never): "
                    "figures are measured with the system's pages"]
