"""The parent's side of the worker: start it, send one request, wait, and turn every death into a reason.

While the worker times a model the parent only waits on the reply pipe (``select`` with a short
timeout) and, between wake-ups, reads the worker's RSS: above the memory limit the worker is killed.
A timeout kills it too. A worker that dies on its own is classified from its exit status: a signal
(SIGSEGV, SIGABRT: a crash), SIGKILL that we did not send (the kernel's OOM killer, confirmed by
/proc/vmstat's oom_kill counter when it moved), or an exit code with the last line of its log.
POSIX only (select on a pipe).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

import ltsedge
from ltsedge.errors import LtsedgeError
from ltsedge.runners.memory import with_huge_pages
from ltsedge.runners.protocol import read_message, write_message

MB = 2**20
POLL_S = 0.05  # how often the parent wakes to check the worker's memory
STARTUP_TIMEOUT_S = 120.0  # importing onnxruntime on a cold SD card can take a while


class WorkerDied(Exception):
    """The worker is gone; the message says why, in one line."""


class WorkerProcess:
    def __init__(self, log_path: Path, *, huge_pages: bool = False):
        if os.name != "posix":
            raise LtsedgeError("measuring needs Linux or macOS (the worker's pipe is waited on with select)")
        self.log_path = log_path
        self.served = 0  # models measured so far
        self.rested_mb: float | None = None  # its RSS before its first model (the Runner's retire rule)
        env = dict(os.environ)
        package_root = str(Path(ltsedge.__file__).resolve().parent.parent)  # find this ltsedge, not another
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        if huge_pages:  # glibc reads its tunables once, at start-up: the profile's setting is the process's
            env = with_huge_pages(env)
        # ``python -m`` puts the working directory first on sys.path: the worker starts in the runner's
        # own scratch directory, so a statistics.py (or any module) where the user runs ltsedge is never
        # imported. Model paths are made absolute by the Runner.
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "ltsedge.runners.worker"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, env=env, cwd=log_path.parent)
        self._ps = psutil.Process(self.proc.pid)
        try:
            self.hello = self._wait(STARTUP_TIMEOUT_S, None)
        except WorkerDied as e:
            raise LtsedgeError(f"the measuring worker did not start: {e}") from None

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def request(self, message: dict, *, timeout_s: float, memory_limit_mb: float | None) -> dict:
        """Send a request and wait for its reply; raises WorkerDied (the worker is then dead)."""
        try:
            write_message(self.proc.stdin, message)
        except (BrokenPipeError, OSError):
            raise WorkerDied(self._death_reason(oom_before=None)) from None
        return self._wait(timeout_s, memory_limit_mb)

    def _wait(self, timeout_s: float, memory_limit_mb: float | None) -> dict:
        oom_before = oom_kills()
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise WorkerDied(f"timed out after {timeout_s:g} s")
            ready, _, _ = select.select([fd], [], [], min(POLL_S, remaining))
            if ready:
                reply = read_message(self.proc.stdout)
                if reply is None:  # end of stream: the worker is gone
                    raise WorkerDied(self._death_reason(oom_before))
                return reply
            if memory_limit_mb is not None and self._rss_mb() > memory_limit_mb:
                self.kill()
                raise WorkerDied(f"exceeded the memory limit of {memory_limit_mb:g} MB")

    def _rss_mb(self) -> float:
        try:
            return self._ps.memory_info().rss / MB
        except psutil.Error:  # exited between two polls: the pipe tells us next time round
            return 0.0

    def _death_reason(self, oom_before: int | None) -> str:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # closed its pipe but lingers
            self.kill()
            return "worker stopped answering"
        return death_reason(code, oom_before, oom_kills(), self._last_log_line())

    def _last_log_line(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - 4096))
                lines = [line.strip() for line in f.read().decode(errors="replace").splitlines() if line.strip()]
            return lines[-1] if lines else ""
        except OSError:
            return ""

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
        self.proc.wait()
        self._close_pipes()

    def close(self) -> None:
        """Ask the worker to exit; kill it if it does not within a few seconds."""
        if self.alive:
            try:
                write_message(self.proc.stdin, {"cmd": "exit"})
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def _close_pipes(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


def death_reason(returncode: int, oom_before: int | None, oom_after: int | None, last_log_line: str = "") -> str:
    """One line saying why a worker that we did not kill is gone."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        if name == "SIGKILL":
            if oom_before is not None and oom_after is not None and oom_after > oom_before:
                return "out of memory (killed by the kernel)"
            return "killed by SIGKILL (out of memory?)"
        return f"worker crashed (signal {name})"
    reason = f"worker exited with code {returncode}"
    return f"{reason}: {last_log_line}" if last_log_line else reason


def oom_kills() -> int | None:
    """The kernel's count of OOM kills since boot (Linux >= 4.13), or None."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None
