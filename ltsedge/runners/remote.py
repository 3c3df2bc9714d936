"""Measuring on other machines: a fleet of boards behind a Dask scheduler.

Each board runs ``ltsedge agent --scheduler tcp://HOST:8786 --device arm64``: a Dask worker with one
thread and one ``ltsedge`` resource, so it never times two models at once, and a resource naming its
machine fingerprint, so a search is served only by boards of one kind (mixing boards would mix
figures). Inside the agent an ordinary ``Runner`` measures, with the board's own pinned calibration
(kept in the board's own measurement store: $LTSEDGE_STORE or its cache directory) and its own drift
guard: the board's figures are made exactly as a local search makes them (``agent.py``).

``RemoteRunner``, here, is the search host's side: the ``Runner`` interface the evaluator uses, over a Dask
client. Models travel as their ONNX bytes, with the external data files they name (written beside
them on the agent, as onnxruntime looks for them: ``model_payload.py``). Each figure comes back with the agent that measured it
and is handed to ``on_result`` as it arrives (the store keeps it at once). An agent that dies in the
middle of a model: Dask runs the task again on another agent, and the figure is recorded once; a
board whose measuring worker dies under a model gets the model measured once more, by whichever agent
is free, before the failure counts (a model that kills every worker fails after that try). The
scheduler going away: a one-line error (``LostConnection``), to which each command adds what is true
for it (the search resumes from its checkpoint when run again; ``cli/options.py``). No
answer at all for longer than a model may take (a hung or cut-off agent): the models still out are
recorded as failures of the environment (never served from the store) and the search goes on.

Every agent times against its own reference model, so its ratios are comparable across boards; its
milliseconds are put on the search's one scale (the agents' median calibration) before anyone ranks
them, as figures from the store are.

Dask's ``distributed`` is needed on both sides (``pip install distributed``); nothing else of ltsedge
runs on an agent while it times a model.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from ltsedge.devices import DeviceProfile
from ltsedge.devices.fingerprint import fingerprint_hash
from ltsedge.errors import LostConnection, LtsedgeError
from ltsedge.runners.agent import MACHINE, SLOT, agent_info, distributed_module, measure_on_agent
from ltsedge.runners.measurement import Measurement
from ltsedge.runners.model_payload import payload
from ltsedge.runners.policy import Calibration

# An agent started beside the search (its worker imports onnxruntime and calibrates first) is waited for.
AGENT_WAIT_S, AGENT_POLL_S = 60.0, 0.5
ANSWER_SLACK_S = 60.0  # beyond the profile's per-model timeout: shipping, loading, the agent's calibration
LARGE_GRAPH_WARNING = "distributed.admin.large-graph-warning-threshold"


class RemoteRunner:
    """The ``Runner`` interface, measuring on the agents of one machine fingerprint."""

    def __init__(self, profile: DeviceProfile, scheduler: str, *, machine: str | None = None,
                 log: Callable[[str], None] | None = None, timeout_s: float = 30.0,
                 agent_wait_s: float = AGENT_WAIT_S, **_: Any):
        distributed = distributed_module()
        self.profile, self.log = profile, log or (lambda m: None)
        # Dask logs a lost connection with its tracebacks; the user gets ltsedge's one line instead.
        for name in ["distributed", *[n for n in logging.root.manager.loggerDict if n.startswith("distributed.")]]:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        try:
            self.client = distributed.Client(scheduler, timeout=timeout_s)
        except (OSError, TimeoutError, asyncio.TimeoutError) as e:
            raise LtsedgeError(f"cannot reach the scheduler {scheduler}: {e}") from None
        self.agents = self._agents(machine, agent_wait_s)
        first = next(iter(self.agents.values()))
        self._fingerprint = first["fingerprint"]
        self.machine = fingerprint_hash(self._fingerprint)
        reference = sorted(a["calibration"]["reference_ms"] for a in self.agents.values())
        self.calibration = Calibration(reference[len(reference) // 2], max(a["calibration"]["noise"]
                                                                           for a in self.agents.values()))
        # How far a board's figures move between runs (the widest of the boards' pinned spreads; their
        # ratios put them on one scale): ``check`` widens its intervals by it.
        self.spread = max(a["calibration"].get("spread", 0.0) for a in self.agents.values())

    def _agents(self, machine: str | None, wait_s: float) -> dict[str, dict]:
        info = self._call(lambda: self.client.run(agent_info))
        waited, started = False, time.monotonic()
        while not info and time.monotonic() - started < wait_s:  # boards are started beside the search, not before
            if not waited:
                self.log(f"waiting up to {wait_s:.0f} s for an ltsedge agent to connect to the scheduler")
                waited = True
            time.sleep(AGENT_POLL_S)
            info = self._call(lambda: self.client.run(agent_info))
        if not info:
            raise LtsedgeError(f"no ltsedge agent connected to the scheduler within {wait_s:.0f} s (start one per "
                               f"board with `ltsedge agent --scheduler ...`)")
        provider = self.profile.execution_provider
        agents = {a: i for a, i in info.items() if i["execution_provider"] == provider}
        if not agents:
            raise LtsedgeError(f"no agent runs {provider} (agents run: "
                               f"{', '.join(sorted({i['execution_provider'] for i in info.values()}))})")
        machines = {fingerprint_hash(i["fingerprint"]) for i in agents.values()}
        if machine is None and len(machines) > 1:
            raise LtsedgeError(f"agents of {len(machines)} kinds of machine are connected ({', '.join(sorted(machines))}); "
                               f"a search measures on one: pass --machine HASH")
        chosen = machine or machines.pop()
        agents = {a: i for a, i in agents.items() if fingerprint_hash(i["fingerprint"]) == chosen}
        if not agents:
            raise LtsedgeError(f"no agent has machine fingerprint {chosen}")
        return agents

    def fingerprint(self) -> dict:
        return self._fingerprint

    def calibrate(self) -> Calibration:
        return self.calibration

    def use_calibration(self, calibration: Calibration) -> None:
        self.calibration = calibration  # the agents keep their own; this is the search's scale for budgets

    def measure(self, model, *, shapes=None, race=None) -> Measurement:
        return self.measure_many([model], shapes=shapes, race=(lambda i: race) if race else None)[0]

    def measure_many(self, models: list, *, shapes=None, on_result=None, race=None) -> list[Measurement]:
        """Every model on some agent of the chosen machine; results handed over as they arrive. A
        failure of the environment (the board's worker died, ran out of memory) is tried once more."""
        report = on_result or (lambda i, m: None)
        payloads = [payload(m) for m in models]
        futures = {}

        def submit(i: int):
            model, data = payloads[i]
            with _models_travel_in_the_task():
                future = self._call(lambda: self.client.submit(
                    measure_on_agent, model, self.profile, shapes, race(i) if race else None, data,
                    resources={SLOT: 1, MACHINE + self.machine: 1}, pure=False, retries=2))
            futures[future] = i
            return future

        pending = {submit(i) for i in range(len(models))}
        results: list[Measurement | None] = [None] * len(models)
        second_tries: set[int] = set()
        try:
            while pending:
                answered = self._call(lambda: self._first_answers(pending))
                if answered is None:
                    self._give_up(pending, futures, results, report)
                    break
                done, pending = answered
                for future in done:
                    i = futures[future]
                    m = self._on_our_scale(Measurement.from_dict(self._call(future.result)))
                    if not m.ok and m.failure_kind == "environment" and i not in second_tries:
                        # The board's trouble (its worker killed, out of memory), not the model's: once
                        # more, on whichever agent is free, before it counts as a failure.
                        self.log(f"model {i + 1} failed on {m.agent} ({m.error}); measuring it once more")
                        second_tries.add(i)
                        pending = pending | {submit(i)}
                        continue
                    results[i] = m
                    report(i, m)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        return results  # type: ignore[return-value]

    def _first_answers(self, pending: set):
        """(done, not done) as soon as one model is back; None when none is within the answer timeout."""
        distributed = distributed_module()
        try:
            return distributed.wait(pending, timeout=self.answer_timeout_s, return_when="FIRST_COMPLETED")
        except (TimeoutError, asyncio.TimeoutError):  # distinct classes before Python 3.11
            if self.client.status != "running":
                raise OSError("the client lost its scheduler") from None
            return None

    @property
    def answer_timeout_s(self) -> float:
        """How long without any result before the agents count as hung: one model's worst case."""
        return self.profile.timeout_s + ANSWER_SLACK_S

    def _give_up(self, pending, futures: dict, results: list, report) -> None:
        self.log(f"no agent answered for {self.answer_timeout_s:.0f} s; {len(pending)} model(s) recorded as failed")
        for future in pending:
            future.cancel()
            i = futures[future]
            results[i] = Measurement.failure(f"no agent answered within {self.answer_timeout_s:.0f} s "
                                             f"(a hung or unreachable agent)", "environment")
            report(i, results[i])

    def _on_our_scale(self, m: Measurement) -> Measurement:
        """An agent's milliseconds through the search's calibration (its ratio is kept as measured)."""
        return m.rescaled(self.calibration.reference_ms)

    def _call(self, fn):
        try:
            return fn()
        except (OSError, TimeoutError, asyncio.TimeoutError) as e:
            raise LostConnection(f"lost the scheduler ({e})") from None
        except Exception as e:  # noqa: BLE001 - distributed's own errors: the scheduler or a task
            if type(e).__name__ in ("CommClosedError", "CancelledError", "FutureCancelledError",
                                    "FuturesCancelledError"):
                raise LostConnection(f"lost the scheduler ({type(e).__name__})") from None
            raise

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RemoteRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def _models_travel_in_the_task():
    """Without Dask's five-line "Sending large graph" warning for a model over 10 MB. Its advice (scatter
    the data first) does not fit here: each model goes once to the one agent that measures it, and
    scattered it would be parked on some agent, copied from it while it times another model, and lost
    with it if it dies (where the model as the task's argument is given to another agent)."""
    import dask

    with dask.config.set({LARGE_GRAPH_WARNING: sys.maxsize}):  # bytes: none is too large
        yield
