"""The agent: a Dask worker on a board that measures for searches elsewhere (``ltsedge agent``).

It has one thread and one ``SLOT`` resource, so it never times two models at once, and a ``MACHINE``
resource naming its fingerprint, so a search is served only by boards of one kind. Inside, an ordinary
``Runner`` measures, with the board's own pinned calibration (from the board's own measurement store)
and its own drift guard. ``agent_info`` and ``measure_on_agent`` are the tasks a search host sends
(``remote.py``); they run here, in the agent's one task thread.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ltsedge.devices import DeviceProfile
from ltsedge.devices.fingerprint import fingerprint_hash, machine_fingerprint
from ltsedge.errors import LtsedgeError
from ltsedge.runners.model_payload import write_beside
from ltsedge.runners.racing import Race
from ltsedge.scratch import ScratchDir

SLOT = "ltsedge"  # one per agent: one measurement at a time
MACHINE = "ltsedge-machine-"  # + fingerprint hash: which boards may serve a search


def distributed_module():
    from ltsedge.extras import require

    return require("distributed", "measuring on a fleet")


class _Agent:
    """This process's measuring state: its device profile, and one Runner per profile a search sends
    (the search's own, and the stricter one its frontier is re-measured with)."""

    def __init__(self, profile: DeviceProfile, store_path: str | Path | None = None):
        self.profile, self.store_path = profile, store_path
        self.fingerprint = machine_fingerprint(profile)
        self.runners: dict[str, Any] = {}
        self.lock = threading.Lock()  # one measurement at a time, also against an info request

    def runner(self, profile: DeviceProfile):
        from ltsedge.runners.policy import pinned_calibration
        from ltsedge.runners.runner import Runner
        from ltsedge.store import MeasurementStore

        key = profile.settings_hash()
        if key not in self.runners:
            runner = Runner(profile)
            try:
                with MeasurementStore(self.store_path) as store:  # this board's pinned calibration
                    runner.use_pinned(pinned_calibration(store, runner))
            except BaseException:
                runner.close()
                raise
            self.runners[key] = runner
        return self.runners[key]

    def close(self) -> None:
        for runner in self.runners.values():
            runner.close()


_AGENT: _Agent | None = None


def _agent() -> _Agent:
    if _AGENT is None:
        raise RuntimeError("this Dask worker is not an ltsedge agent (start it with `ltsedge agent`)")
    return _AGENT


def agent_info() -> dict:
    """What a search host asks every agent: its machine, profile and calibration."""
    agent = _agent()
    with agent.lock:
        calibration = agent.runner(agent.profile).calibrate()
    runner = agent.runners[agent.profile.settings_hash()]
    spread = runner.pinned.figure_spread if runner.pinned else 0.0
    return {"fingerprint": agent.fingerprint, "profile": agent.profile.name,
            "execution_provider": agent.profile.execution_provider,
            "calibration": {**calibration.to_dict(), "spread": spread},
            "host": socket.gethostname()}


def measure_on_agent(model: bytes, profile: DeviceProfile, shapes: dict | None, race: Race | None,
                     data: dict[str, bytes] | None = None) -> dict:
    """The task a search sends: measure one model here, under the search's profile. Runs in the agent's
    one task thread. ``data``: the model's external data files, by the locations it names."""
    agent = _agent()
    with agent.lock, ScratchDir("ltsedge-agent-") as folder:
        if data:  # the model and its data side by side, as onnxruntime looks for them
            model = write_beside(Path(folder), model, data)
        m = agent.runner(profile).measure(model, shapes=shapes, race=race)
    worker = distributed_module().get_worker()
    m.agent = f"{worker.name} ({socket.gethostname()})" if worker.name else worker.address
    return m.to_dict()


def run_agent(scheduler: str, profile: DeviceProfile, *, name: str | None = None,
              ready: Callable[[str], None] | None = None, store_path: str | Path | None = None) -> None:
    """Serve measurements for ``scheduler`` until it goes away (or Ctrl-C); ``store_path``: where the
    board keeps its pinned calibration (default: its measurement store)."""
    global _AGENT
    distributed = distributed_module()
    import asyncio
    import logging

    # Dask's worker logs a dozen INFO lines at start, and its closing connection's traceback when the agent
    # is stopped (Ctrl-C, SIGTERM from systemd or docker stop): the agent's own line says what matters.
    logging.getLogger("distributed").setLevel(logging.WARNING)

    _AGENT = _Agent(profile, store_path)
    resources = {SLOT: 1, MACHINE + fingerprint_hash(_AGENT.fingerprint): 1}

    async def serve() -> None:
        async with distributed.Worker(scheduler, nthreads=1, resources=resources, name=name,
                                      validate=False) as worker:
            if ready:
                ready(worker.address)
            await worker.finished()

    try:
        asyncio.run(serve())
    except OSError as e:
        raise LtsedgeError(f"cannot reach the scheduler {scheduler}: {e}") from None
    finally:
        _AGENT.close()
