"""What a search leaves in ``--out`` to resume from: the checkpoint and the candidate log.

``checkpoint.json`` is written after every complete generation: NSGA-II's population (genes,
objectives, constraints, rank and crowding), its random generator's state and counters, and the
run's own bookkeeping (hypervolume history and scale, elapsed time). JSON, never a pickle: a
crafted file in an output directory cannot run code. Resuming re-creates the algorithm from it and
continues exactly as an uninterrupted run would (tested), and a checkpoint of the last generation
leaves nothing to run; a damaged one is refused in one line. Written to a temporary file, fsynced,
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
class SearchState:
    """The search's own bookkeeping, beside the algorithm's state (the checkpoint's ``"run"`` object)."""

    generation: int = 0
    hv_history: list[dict] = field(default_factory=list)
    hv_scale: dict | None = None
    elapsed: float = 0.0
    calibration: dict | None = None  # the reference model's calibration this run measures against
    # The end-of-search settling round (evaluate.settle_front) is done: a re-run settles nothing more, so
    # it publishes the front the first run would have (a checkpoint without it: not yet settled).
    settled: bool = False


# ---------------------------------------------------------------------------------------------
# The checkpoint
# ---------------------------------------------------------------------------------------------
def save_checkpoint(out_dir: Path, identity: str, algorithm, state: SearchState) -> None:
    data = {"format": FORMAT, "identity": identity, "ltsedge": ltsedge.__version__, "run": state.__dict__,
            "algorithm": _algorithm_state(algorithm)}
    write_atomically(out_dir / CHECKPOINT, json.dumps(data))


def load_checkpoint(out_dir: Path, identity: str, algorithm) -> SearchState | None:
    """Restore ``algorithm`` (freshly set up) and return the run's state; None if there is no checkpoint."""
    path = out_dir / CHECKPOINT
    if not path.exists():
        return None
    try:
        data = _read(path)
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
    except (OSError, ValueError) as e:
        raise LtsedgeError(f"checkpoint {path} is unreadable ({e}); {RESTART_HINT}") from None
    if data.get("identity") != identity:
        raise LtsedgeError(f"{out_dir} holds a search with different settings (space, population, seed, budgets, "
                           f"device, machine or export target); {RESTART_HINT}")
    try:
        _restore_algorithm(algorithm, data["algorithm"])
        return _search_state(data["run"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise LtsedgeError(f"checkpoint {path} is damaged ({e}); {RESTART_HINT}") from None


def peek_calibration(out_dir: Path, identity: str) -> dict | None:
    """The calibration a resumable checkpoint of this run recorded (None if there is none to resume;
    a damaged checkpoint is reported by ``load_checkpoint``)."""
    try:
        data = _read(out_dir / CHECKPOINT)
        calibration = data["run"]["calibration"] if data.get("identity") == identity else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return calibration if isinstance(calibration, dict) else None


def _read(path: Path) -> dict:
    """The checkpoint's JSON object (ValueError for anything else: not UTF-8, not JSON, not an object)."""
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an object")
    return data


def _search_state(saved: dict) -> SearchState:
    state = SearchState(**saved)
    if not isinstance(state.generation, int) or isinstance(state.generation, bool) or state.generation < 0:
        raise ValueError(f"generation {state.generation!r} is not a count")
    if not (isinstance(state.hv_history, list) and all(isinstance(r, dict) for r in state.hv_history)
            and isinstance(state.hv_scale, (dict, type(None))) and isinstance(state.elapsed, (int, float))):
        raise ValueError("the run's hypervolume history, scale or elapsed time is malformed")
    if not isinstance(state.settled, bool):
        raise ValueError(f"settled {state.settled!r} is not true or false")
    return state


def _algorithm_state(algorithm) -> dict[str, Any]:
    pop = algorithm.pop
    return {"n_iter": algorithm.n_iter, "n_eval": algorithm.evaluator.n_eval,
            "random_state": algorithm.random_state.bit_generator.state,
            "population": {k: pop.get(k).tolist() for k in POPULATION_KEYS}}


def _restore_algorithm(algorithm, state: dict[str, Any]) -> None:
    algorithm.pop = Population.new(**_population(state["population"], algorithm.problem))
    algorithm.random_state.bit_generator.state = state["random_state"]
    algorithm.n_iter = int(state["n_iter"])
    if algorithm.n_iter < 2:
        raise ValueError(f"n_iter {algorithm.n_iter} is before the first complete generation")
    algorithm.evaluator.n_eval = int(state["n_eval"])
    algorithm.is_initialized = True
    algorithm.start_time = time.time()
    algorithm._set_optimum()  # noqa: SLF001 - what pymoo does after every generation
    # pymoo updates its termination before it counts the generation done (n_iter += 1): update it as
    # it stood then, or a finished search would look unfinished and run one generation too many.
    algorithm.n_iter -= 1
    algorithm.termination.update(algorithm)
    algorithm.n_iter += 1


def _population(pop: dict, problem) -> dict[str, np.ndarray]:
    """The saved population as arrays, checked against the problem (pymoo itself raises a bare
    Exception on arrays of different lengths, and a wrong shape would fail only generations later)."""
    arrays = {k: np.array(pop[k]) for k in POPULATION_KEYS}  # ragged lists: ValueError
    n = len(arrays["X"]) if arrays["X"].ndim else 0
    widths = {"X": problem.n_var, "F": problem.n_obj, "G": problem.n_ieq_constr, "rank": None, "crowding": None}
    for key, width in widths.items():
        shape = (n, width) if width is not None else (n,)
        numbers = arrays[key].dtype.kind in "iuf" or (width is None and all(_number(v) for v in arrays[key].flat))
        if n == 0 or arrays[key].shape != shape or not numbers:
            raise ValueError(f"population {key} is {arrays[key].dtype} of shape {arrays[key].shape}, "
                             f"expected numbers of shape {shape}")
    X = arrays["X"].astype(float)
    if not np.all(np.isfinite(X)) or np.any(X != np.round(X)) or np.any(X < problem.xl) or np.any(X > problem.xu):
        raise ValueError("population X holds genes outside the space")
    arrays["X"] = X.astype(int)
    return arrays


def _number(value) -> bool:
    """A rank or crowding distance (None: an individual NSGA-II has not ranked)."""
    return value is None or (isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_)))


# ---------------------------------------------------------------------------------------------
# The candidate log
# ---------------------------------------------------------------------------------------------
class CandidateLog:
    """Append-only JSON lines: a header naming the run, then one record per evaluated candidate (or, under
    another ``name``, per figure publishing took: ``publish_log.py``)."""

    def __init__(self, out_dir: Path, identity: str, name: str = CANDIDATE_LOG):
        self.path = out_dir / name
        self.identity = identity

    def records(self) -> list[dict]:
        """The records of this run's log (none if there is no log yet); another run's log is refused."""
        if not self.path.exists():
            return []
        try:  # always ASCII as written: undecodable bytes are damage, and the checks below refuse them
            lines = self.path.read_bytes().decode("utf-8", errors="replace").splitlines()
        except OSError as e:
            raise LtsedgeError(f"cannot read {self.path}: {e.strerror or e}; {RESTART_HINT}") from None
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
