"""Memory that holds still: the profile's fixed mmap threshold, from the TOML file to the measuring worker."""

from __future__ import annotations

import sys

import pytest

from ltsedge.devices import DeviceProfile, load_profile
from ltsedge.devices.profile import SETTINGS
from ltsedge.errors import LtsedgeError
from ltsedge.exporters import export_model
from ltsedge.exporters.options import ExportOptions
from ltsedge.keys import calibration_key, measurement_key
from ltsedge.runners import Runner
from ltsedge.runners.process import WorkerProcess
from ltsedge.runners.protocol import RunSettings
from ltsedge.runners.reference import reference_model
from tests.helpers import FAST_DEVICE, one_line_exit_2, run_ltsedge, tiny_arch

GLIBC = sys.platform.startswith("linux")  # glibc's mallopt; the test VMs and CI are glibc Linux
FINGERPRINT = {"cpu_model": "x", "onnxruntime": "1.0"}


def test_the_cpu_profile_fixes_the_threshold_and_other_profiles_keep_glibcs():
    assert load_profile("cpu").malloc_mmap_threshold_kb == 128
    assert DeviceProfile(name="plain").malloc_mmap_threshold_kb == 0
    assert load_profile("arm64", check_available=False).malloc_mmap_threshold_kb == 0


def test_the_threshold_is_in_the_store_key_only_when_set():
    cpu = load_profile("cpu")
    dynamic = cpu.replace(malloc_mmap_threshold_kb=0)
    # Glibc's own threshold: the settings, and so the keys, of every figure measured before the option.
    assert tuple(dynamic.settings()) == SETTINGS
    assert cpu.settings()["malloc_mmap_threshold_kb"] == 128
    assert cpu.settings_hash() != dynamic.settings_hash() != cpu.replace(malloc_mmap_threshold_kb=256).settings_hash()
    assert measurement_key("m", FINGERPRINT, cpu) != measurement_key("m", FINGERPRINT, dynamic)
    # The reference model's calibration does not depend on it: one pinned calibration serves both.
    assert calibration_key(FINGERPRINT, cpu) == calibration_key(FINGERPRINT, dynamic)


def test_the_threshold_travels_to_the_worker_in_the_run_settings():
    assert RunSettings.from_profile(load_profile("cpu")).malloc_mmap_threshold_kb == 128
    dynamic = load_profile("cpu").replace(malloc_mmap_threshold_kb=0)
    assert RunSettings.from_profile(dynamic).malloc_mmap_threshold_kb == 0


def test_a_profile_file_sets_it(tmp_path):
    path = tmp_path / "board.toml"
    path.write_text(FAST_DEVICE + "[runtime]\nmalloc_mmap_threshold_kb = 1024\n")
    assert load_profile(path).malloc_mmap_threshold_kb == 1024


@pytest.mark.parametrize("value, message", [
    ("-1", "malloc_mmap_threshold_kb = -1 is out of range: must be between 0 and 32768 "
           "(KiB; 0 = glibc's own threshold)"),
    ("40000", "malloc_mmap_threshold_kb = 40000 is out of range"),
    ('"128"', "[runtime] malloc_mmap_threshold_kb = \"128\" has the wrong type: expected an integer"),
    ("true", "has the wrong type: expected an integer"),
    ("1.5", "has the wrong type: expected an integer"),
])
def test_bad_values_are_one_line_errors(tmp_path, value, message):
    path = tmp_path / "board.toml"
    path.write_text(f"[runtime]\nmalloc_mmap_threshold_kb = {value}\n")
    with pytest.raises(LtsedgeError) as info:
        load_profile(path)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith(f"device profile file {path}")


def test_a_bad_value_exits_2_in_one_line(tmp_path, arch_file):
    path = tmp_path / "board.toml"
    path.write_text("[runtime]\nmalloc_mmap_threshold_kb = 99999\n")
    one_line_exit_2(run_ltsedge("profile", arch_file(), "--device", path, "--store", tmp_path / "s.sqlite"),
                    "malloc_mmap_threshold_kb = 99999 is out of range")


# ---------------------------------------------------------------------------------------------
# The worker
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_and_reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("memory")
    model, reference = tmp / "model.onnx", tmp / "reference.onnx"
    export_model(tiny_arch()).save(model)
    reference.write_bytes(reference_model())
    return model, reference


def fast_profile(tmp_path, threshold_kb: int):
    path = tmp_path / "fast.toml"
    path.write_text(FAST_DEVICE)
    return load_profile(path).replace(malloc_mmap_threshold_kb=threshold_kb)


def measure_request(model, reference, profile) -> dict:
    return {"cmd": "measure", "path": str(model), "run": RunSettings.from_profile(profile), "shapes": None,
            "reference_path": str(reference), "race": None}


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt")
def test_the_worker_fixes_the_threshold_it_is_asked_for(tmp_path, model_and_reference):
    model, reference = model_and_reference
    worker = WorkerProcess(tmp_path / "worker.log")
    try:
        fixed = worker.request(measure_request(model, reference, fast_profile(tmp_path, 128)), timeout_s=60,
                               memory_limit_mb=None)
        assert fixed["ok"] and fixed["malloc"] == "mmap_threshold=128KiB"
        # glibc cannot go back to its own threshold: the worker says so instead of mislabelling a figure
        back = worker.request(measure_request(model, reference, fast_profile(tmp_path, 0)), timeout_s=60,
                              memory_limit_mb=None)
        assert not back["ok"] and back["failure_kind"] == "environment"
        assert back["error"] == ("this worker's mmap threshold is fixed at 128 KiB: glibc's own threshold "
                                 "needs a fresh worker")
        again = worker.request(measure_request(model, reference, fast_profile(tmp_path, 256)), timeout_s=60,
                               memory_limit_mb=None)
        assert again["ok"] and again["malloc"] == "mmap_threshold=256KiB"
    finally:
        worker.close()
    plain = WorkerProcess(tmp_path / "worker.log")
    try:
        reply = plain.request(measure_request(model, reference, fast_profile(tmp_path, 0)), timeout_s=60,
                              memory_limit_mb=None)
        assert reply["ok"] and reply["malloc"] == "default"
    finally:
        plain.close()


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt")
def test_fixed_threshold_peaks_repeat_in_fresh_workers(tmp_path):
    """A generate model of ~30 MB peak, in three fresh workers: within 0.25 MB (glibc's own threshold: ~2 MB
    apart on this model, and ~8 MB above)."""
    arch = tiny_arch(d_model=256, n_head=[4, 4], d_inner=[1024, 1024], vocab_size=8000, n_positions=128)
    model = tmp_path / "model.onnx"
    export_model(arch, ExportOptions(variant="generate")).save(model)
    # a plain session: what glibc's threshold holds still (genai's own buffers move its peak by ~0.3 MB)
    profile = fast_profile(tmp_path, 128).replace(sequence=64, context=64, generate_loop="session")
    peaks = []
    for _ in range(3):
        with Runner(profile) as runner:
            m = runner.measure(model)
            assert m.ok and m.memory_method == "fresh_process"
            peaks.append(m.peak_memory_mb)
    assert max(peaks) - min(peaks) <= 0.25, peaks
