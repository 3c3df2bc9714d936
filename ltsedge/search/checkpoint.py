"""What a search leaves in ``--out`` to resume from: the checkpoint and the candidate log.

``checkpoint.json`` is written after every complete generation: NSGA-II's population (genes,
objectives, constraints, rank and crowding), its random generator's state and counters, and the
run's own bookkeeping (hypervolume history and scale, elapsed time). JSON, never a pickle: a
crafted file in an output directory cannot run code. Resuming re-creates the algorithm from it and
continues exactly as an uninterrupted run would (tested). Written to a temporary file, fsynced,
then renamed over the old one: a kill or power cut leaves the previous checkpoint intact.

``candidates.jsonl`` is the append-only log of every evaluated candidate (it survives kill -9
mid-generation). Its first line names the run's identity; a log of another run is refused.

Both carry the run's identity: a hash of everything a resumed run must agree on (space,
population, seed, budgets, export target, device settings, machine).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pymoo.core.population import Population

import ltsedge
from ltsedge.errors import LtsedgeError
from ltsedge.files import write_atomically

CHECKPOINT = "checkpoint.json"
CANDIDATE_LOG = "candidates.jsonl"
FORMAT = 1
# Population attributes NSGA-II reads when it mates and selects (FEAS and CV derive from G).
POPULATION_KEYS = ("X", "F", "G", "rank", "crowding")
RESTART_HINT = "pass --restart to start over, or choose another --out"


def identity_hash(identity: dict) -> str:
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class RunState:
    """The run's own bookkeeping, beside the algorithm's state."""

    generation: int = 0
    hv_history: list[dict] = field(default_factory=list)
    hv_scale: dict | None = None
    elapsed: float = 0.0
    calibration: dict | None = None  # the reference model's calibration this run measures against


# ---------------------------------------------------------------------------------------------
# The checkpoint
# ---------------------------------------------------------------------------------------------
def save_checkpoint(out_dir: Path, identity: str, algorithm, state: RunState) -> None:
    data = {"format": FORMAT, "identity": identity, "ltsedge": ltsedge.__version__, "run": state.__dict__,
            "algorithm": _algorithm_state(algorithm)}
    write_atomically(out_dir / CHECKPOINT, json.dumps(data))


def load_checkpoint(out_dir: Path, identity: str, algorithm) -> RunState | None:
    """Restore ``algorithm`` (freshly set up) and return the run's state; None if there is no checkpoint."""
    path = out_dir / CHECKPOINT
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
    except (OSError, ValueError, AttributeError) as e:
        raise LtsedgeError(f"checkpoint {path} is unreadable ({e}); {RESTART_HINT}") from None
    if data.get("identity") != identity:
        raise LtsedgeError(f"{out_dir} holds a search with different settings (space, population, seed, budgets, "
                           f"device, machine or export target); {RESTART_HINT}")
    try:
        _restore_algorithm(algorithm, data["algorithm"])
        return RunState(**data["run"])
    except (KeyError, TypeError, ValueError) as e:
        raise LtsedgeError(f"checkpoint {path} is damaged ({e}); {RESTART_HINT}") from None


def peek_calibration(out_dir: Path, identity: str) -> dict | None:
    """The calibration a resumable checkpoint of this run recorded (None if there is none to resume)."""
    try:
        data = json.loads((out_dir / CHECKPOINT).read_text())
        return data["run"]["calibration"] if data.get("identity") == identity else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _algorithm_state(algorithm) -> dict[str, Any]:
    pop = algorithm.pop
    return {"n_iter": algorithm.n_iter, "n_eval": algorithm.evaluator.n_eval,
            "random_state": algorithm.random_state.bit_generator.state,
            "population": {k: pop.get(k).tolist() for k in POPULATION_KEYS}}


def _restore_algorithm(algorithm, state: dict[str, Any]) -> None:
    pop = state["population"]
    algorithm.pop = Population.new(**{k: np.array(pop[k]) for k in POPULATION_KEYS})
    algorithm.random_state.bit_generator.state = state["random_state"]
    algorithm.n_iter = int(state["n_iter"])
    algorithm.evaluator.n_eval = int(state["n_eval"])
    algorithm.is_initialized = True
    algorithm.start_time = time.time()
    algorithm._set_optimum()  # noqa: SLF001 - what pymoo does after every generation


# ---------------------------------------------------------------------------------------------
# The candidate log
# ---------------------------------------------------------------------------------------------
class CandidateLog:
    """Append-only JSON lines: a header naming the run, then one record per evaluated candidate."""

    def __init__(self, out_dir: Path, identity: str):
        self.path = out_dir / CANDIDATE_LOG
        self.identity = identity

    def records(self) -> list[dict]:
        """The records of this run's log (none if there is no log yet); another run's log is refused."""
        if not self.path.exists():
            return []
        lines = self.path.read_text().splitlines()
        header = _json_or_none(lines[0]) if lines else None
        if not isinstance(header, dict) or header.get("ltsedge_candidate_log") != FORMAT:
            raise LtsedgeError(f"{self.path} is not a candidate log of this ltsedge version; {RESTART_HINT}")
        if header.get("identity") != self.identity:
            raise LtsedgeError(f"{self.path} was written by a search with different settings (space, population, "
                               f"seed, budgets, device, machine or export target); {RESTART_HINT}")
        records = [_json_or_none(line) for line in lines[1:]]
        return [r for r in records if isinstance(r, dict)]  # a line cut short by a kill is skipped

    def append(self, record: dict) -> None:
        new = not self.path.exists()
        with open(self.path, "a") as f:  # append-only: survives kill -9
            if new:
                f.write(json.dumps({"ltsedge_candidate_log": FORMAT, "identity": self.identity}) + "\n")
            f.write(json.dumps(record) + "\n")


def _json_or_none(line: str):
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None
