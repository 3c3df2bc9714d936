"""A fleet on Dask: measuring a batch of tiny models on 1 agent, then on 2, on this machine (loopback).

On one 2-core machine two agents share the cores, so this measures overhead (scheduling, shipping the
ONNX bytes, results coming back), not the scaling real boards would give: expect under 2x.

    python benchmarks/fleet.py [--models 24]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ltsedge.architecture import Architecture
from ltsedge.devices import load_profile
from ltsedge.exporters import export_model
from ltsedge.runners.remote import RemoteRunner

DEVICE = """\
name = "fleet"
[workload]
sequence = 16
[repeats]
warmup = 1
min_runs = 6
max_runs = 9
max_seconds = 1.0
tolerance = 0.1
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(n_agents: int, models: list[bytes], tmp: Path) -> float:
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    device = tmp / "fleet.toml"
    device.write_text(DEVICE)
    dask = str(Path(sys.executable).parent / "dask")
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)]
    time.sleep(2)
    for i in range(n_agents):
        procs.append(subprocess.Popen([sys.executable, "-m", "ltsedge", "agent", "--scheduler", address, "--device",
                                       str(device)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True))
    try:
        time.sleep(8)
        with RemoteRunner(load_profile(device), address) as runner:
            assert len(runner.agents) == n_agents, runner.agents
            started = time.perf_counter()
            results = runner.measure_many(models)
            elapsed = time.perf_counter() - started
        assert all(m.ok for m in results)
        return elapsed
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=24)
    args = parser.parse_args()
    models = [export_model(Architecture(n_layer=1 + i % 3, d_model=64, n_head=[2] * (1 + i % 3),
                                        d_inner=[128 + 32 * (i % 4)] * (1 + i % 3), vocab_size=512,
                                        n_positions=64)).to_bytes() for i in range(args.models)]
    with tempfile.TemporaryDirectory() as tmp:
        one = run(1, models, Path(tmp))
        two = run(2, models, Path(tmp))
    print(f"{args.models} tiny models: 1 agent {one:.1f} s, 2 agents {two:.1f} s: speed-up {one / two:.2f}x "
          f"(one 2-core machine: overhead, not board scaling)")


if __name__ == "__main__":
    main()
