"""The noise sensors: the machine's state read beside every measurement (hottest thermal zone, Raspberry
Pi throttling, CPU clock, load average). Each returns None where unreadable and never raises; ``root``
is injectable so the tests read sample files from tests/data/."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ltsedge.devices.fingerprint import ROOT, parse_hex, read_text

PI_THROTTLED_NOW = 0xF  # get_throttled bits 0-3: under-voltage, frequency capped, throttled, soft limit


def read_temperature_c(root: Path = ROOT) -> float | None:
    """The hottest thermal zone, in degrees Celsius (the files hold millidegrees)."""
    temps = []
    for path in sorted((root / "sys/class/thermal").glob("thermal_zone*/temp")):
        try:
            temps.append(int((read_text(path) or "").strip()) / 1000)
        except ValueError:
            continue
    temps = [t for t in temps if -40 < t < 200]  # some zones report 0 or garbage when off
    return max(temps) if temps else None


def read_throttled(root: Path = ROOT) -> bool | None:
    """Raspberry Pi firmware: is the SoC throttled right now? None on other machines.

    Only the "currently" bits (0-3) count: bits 16-19 record that it happened since boot, and would
    mark every later measurement as throttled.
    """
    text = read_text(root / "sys/devices/platform/soc/soc:firmware/get_throttled")
    if text is None and root == ROOT and shutil.which("vcgencmd"):
        try:
            result = subprocess.run(["vcgencmd", "get_throttled"], capture_output=True, text=True, timeout=2)
            text = result.stdout.partition("=")[2]  # "throttled=0x50005"
        except (OSError, subprocess.SubprocessError):
            text = None
    value = parse_hex((text or "").strip().removeprefix("0x"))
    return None if value is None else bool(value & PI_THROTTLED_NOW)


def read_cpu_freq_mhz(root: Path = ROOT) -> float | None:
    text = read_text(root / "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq")
    try:
        return int((text or "").strip()) / 1000  # kHz
    except ValueError:
        pass
    if root != ROOT:
        return None
    try:
        import psutil

        freq = psutil.cpu_freq()
        return float(freq.current) if freq and freq.current else None
    except Exception:  # noqa: BLE001
        return None


def read_load_avg() -> float | None:
    """One-minute load average."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


@dataclass(frozen=True)
class Sensors:
    """The four readings taken with every measurement; a test passes its own."""

    root: Path = ROOT

    def read(self) -> dict[str, Any]:
        return {"load_avg": read_load_avg(), "cpu_freq_mhz": read_cpu_freq_mhz(self.root),
                "temperature_c": read_temperature_c(self.root), "throttled": read_throttled(self.root)}

    def temperature_c(self) -> float | None:
        return read_temperature_c(self.root)


if __name__ == "__main__":  # a quick look at this machine: python -m ltsedge.devices.sensors
    import json
    import sys

    from ltsedge.devices.fingerprint import machine_fingerprint

    json.dump({**machine_fingerprint(), **Sensors().read()}, sys.stdout, indent=2)
    print()
