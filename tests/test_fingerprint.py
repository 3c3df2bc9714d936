"""Machine fingerprints and sensors, read from sample /proc and /sys trees in tests/data/machines/."""

from __future__ import annotations

import platform
import shutil
from pathlib import Path

import pytest

from ltsedge.devices import load_profile
from ltsedge.devices.fingerprint import fingerprint_hash, machine_fingerprint
from ltsedge.devices.sensors import (
    Sensors,
    read_cpu_freq_mhz,
    read_load_avg,
    read_temperature_c,
    read_throttled,
)

MACHINES = Path(__file__).parent / "data" / "machines"


def fp_of(machine: str, profile=None) -> dict:
    return machine_fingerprint(profile, root=MACHINES / machine)


def test_raspberry_pi_4():
    fp = fp_of("rpi4")
    assert fp["cpu_model"] == "ARM Cortex-A72"
    assert fp["board"] == "Raspberry Pi 4 Model B Rev 1.4"  # device tree, trailing NUL stripped
    assert (fp["cpu_implementer"], fp["cpu_part"]) == ("ARM", "Cortex-A72")
    assert (fp["logical_cores"], fp["physical_cores"]) == (4, 4)
    assert fp["memory_total_mb"] == pytest.approx(7811.0, abs=0.1)
    assert fp["memory_total_gb"] == 8


def test_raspberry_pi_5():
    fp = fp_of("rpi5")
    assert fp["cpu_model"] == "ARM Cortex-A76"
    assert fp["board"] == "Raspberry Pi 5 Model B Rev 1.0"
    assert fingerprint_hash(fp) != fingerprint_hash(fp_of("rpi4"))


def test_cortex_a55_board_without_device_tree_model():
    fp = fp_of("cortex-a55")
    assert fp["cpu_model"] == "ARM Cortex-A55"
    assert fp["board"] is None
    assert fp["logical_cores"] == 4


def test_x86_with_hyperthreads():
    fp = fp_of("x86")
    assert fp["cpu_model"] == "Intel(R) Core(TM) i7-8550U CPU @ 1.80GHz"
    assert fp["cpu_implementer"] is None and fp["cpu_part"] is None
    assert (fp["logical_cores"], fp["physical_cores"]) == (4, 2)
    assert fp["board"] == "XPS 13 9370"  # DMI product name


def test_board_from_cpuinfo_model_line_without_device_tree(tmp_path):
    (tmp_path / "proc").mkdir()
    shutil.copy(MACHINES / "rpi4/proc/cpuinfo", tmp_path / "proc/cpuinfo")
    assert machine_fingerprint(root=tmp_path)["board"] == "Raspberry Pi 4 Model B Rev 1.4"


def test_big_little_and_unknown_parts(tmp_path):
    blocks = [("0x41", "0xd05")] * 2 + [("0x41", "0xd0b")] * 2
    text = "".join(f"processor\t: {i}\nCPU implementer\t: {impl}\nCPU part\t: {part}\n\n"
                   for i, (impl, part) in enumerate(blocks))
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(text)
    fp = machine_fingerprint(root=tmp_path)
    assert fp["cpu_part"] == "Cortex-A55+Cortex-A76"
    (tmp_path / "proc/cpuinfo").write_text(
        "processor : 0\nCPU implementer : 0x41\nCPU part : 0xfff\nHardware : SoC-X\n")
    assert machine_fingerprint(root=tmp_path)["cpu_model"] == "SoC-X"  # unknown part: the SoC name instead


@pytest.mark.parametrize("machine", ["garbage", "does-not-exist"])
def test_garbage_or_missing_proc_falls_back(machine, monkeypatch):
    monkeypatch.setattr(platform, "processor", lambda: "")
    fp = fp_of(machine)
    assert fp["cpu_model"] == "unknown"
    assert fp["board"] is None and fp["memory_total_mb"] is None
    assert fp["logical_cores"] >= 1
    monkeypatch.setattr(platform, "processor", lambda: "x86_64")
    assert fp_of(machine)["cpu_model"] == "x86_64"


def test_this_machine_and_profile_settings():
    cpu = load_profile("cpu")
    fp = machine_fingerprint(cpu)
    assert fp["arch"] == platform.machine()
    assert fp["cpu_model"] and fp["logical_cores"] >= 1 and fp["onnxruntime"]
    assert fp["execution_provider"] == "CPUExecutionProvider"
    assert fp["settings"] == cpu.settings() and fp["settings_hash"] == cpu.settings_hash()


def test_hash_covers_identity_not_volatile_fields():
    fp = fp_of("rpi4")
    h = fingerprint_hash(fp)
    assert len(h) == 12 and h == fingerprint_hash(dict(fp))
    changed = {**fp, "os": "Linux 9.9", "python": "3.99.0", "memory_total_mb": fp["memory_total_mb"] - 20}
    assert fingerprint_hash(changed) == h  # kernel update, new Python, a few MB reserved: same machine
    assert fingerprint_hash({**fp, "physical_cores": 2}) != h
    assert fingerprint_hash({**fp, "board": "Raspberry Pi 4 Model B Rev 1.5"}) != h


# ---------------------------------------------------------------------------------------------
# Sensors
# ---------------------------------------------------------------------------------------------
def test_temperature_is_the_hottest_readable_zone():
    assert read_temperature_c(MACHINES / "rpi4") == pytest.approx(61.854)
    assert read_temperature_c(MACHINES / "rpi5") == pytest.approx(71.5)
    assert read_temperature_c(MACHINES / "x86") == pytest.approx(45.0)  # the garbage zone skipped
    assert read_temperature_c(MACHINES / "garbage") is None
    assert read_temperature_c(MACHINES / "cortex-a55") is None


def test_cpu_freq():
    assert read_cpu_freq_mhz(MACHINES / "rpi4") == 1800.0
    assert read_cpu_freq_mhz(MACHINES / "garbage") is None


@pytest.mark.parametrize("content, expected", [
    ("0\n", False),
    ("50000\n", False),  # throttled earlier, not now: bits 16-19 only
    ("50005\n", True),   # under-voltage and throttled right now
    ("0x4\n", True),
    ("zz\n", None),
])
def test_raspberry_pi_throttled(tmp_path, content, expected):
    path = tmp_path / "sys/devices/platform/soc/soc:firmware/get_throttled"
    path.parent.mkdir(parents=True)
    path.write_text(content)
    assert read_throttled(tmp_path) is expected


def test_throttled_unknown_off_the_pi():
    assert read_throttled(MACHINES / "x86") is None


def test_sensors_read_never_raise():
    readings = Sensors(MACHINES / "garbage").read()
    assert (readings["cpu_freq_mhz"], readings["temperature_c"], readings["throttled"]) == (None, None, None)
    assert isinstance(readings["load_avg"], float) == isinstance(read_load_avg(), float)
    assert set(Sensors().read()) == {"load_avg", "cpu_freq_mhz", "temperature_c", "throttled"}
    assert Sensors(MACHINES / "rpi5").temperature_c() == pytest.approx(71.5)


@pytest.mark.parametrize("files, expected", [
    ({"sys/fs/cgroup/cpu.max": "max 100000\n"}, None),
    ({"sys/fs/cgroup/cpu.max": "150000 100000\n"}, 1.5),
    ({"proc/self/cgroup": "0::/ci/job\n", "sys/fs/cgroup/ci/job/cpu.max": "200000 100000\n",
      "sys/fs/cgroup/cpu.max": "max 100000\n"}, 2.0),
    ({"sys/fs/cgroup/cpu/cpu.cfs_quota_us": "50000\n", "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"}, 0.5),
    ({"sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n", "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({"sys/fs/cgroup/cpu.max": "garbage"}, None),
])
def test_cgroup_cpu_quota_is_part_of_the_identity(tmp_path, files, expected):
    shutil.copytree(MACHINES / "x86", tmp_path, dirs_exist_ok=True)
    plain = machine_fingerprint(root=tmp_path)
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    fp = machine_fingerprint(root=tmp_path)
    assert fp["cpu_quota"] == expected
    # A quota changes the machine a figure was measured on; no quota leaves the hash as it was.
    assert (fingerprint_hash(fp) == fingerprint_hash(plain)) == (expected is None)


def test_gpu_model_joins_the_identity_only_when_known():
    fp = fp_of("x86")
    assert fp["gpu_model"] is None
    assert fingerprint_hash({**fp, "gpu_model": "NVIDIA H100 80GB HBM3"}) != fingerprint_hash(fp)
    assert fingerprint_hash({**fp, "gpu_model": None}) == fingerprint_hash({k: v for k, v in fp.items()
                                                                           if k != "gpu_model"})
