"""The search loop: NSGA-II (ask/tell) over the space, candidates evaluated on the device, with resume.

Each generation: ask NSGA-II for offspring, evaluate them (store first, device otherwise), tell it
the objectives and constraints, checkpoint. A killed search re-run with the same command continues
from its last complete generation; everything it had measured is re-used (from the search's own
candidate log and from the store), so nothing is measured twice. At the end (or on Ctrl-C) the
frontier is published as ONNX models with their re-measured costs.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pymoo.algorithms.moo.nsga2 import NSGA2
from pymoo.core.evaluator import Evaluator
from pymoo.problems.static import StaticProblem
from pymoo.termination.max_gen import MaximumGenerationTermination

import ltsedge
from ltsedge.architecture import Architecture
from ltsedge.devices import DeviceProfile, strict
from ltsedge.errors import LtsedgeError
from ltsedge.proxy import count_params
from ltsedge.runners import Runner
from ltsedge.search import report
from ltsedge.search.baseline import BaselineSpec, compare
from ltsedge.search.evaluate import Candidate, CandidateEvaluator
from ltsedge.search.frontier import (
    HypervolumeScale,
    PublishedModel,
    pareto_front,
    publish,
)
from ltsedge.search.problem import ArchitectureProblem, Budgets, make_operators
from ltsedge.space import SearchSpace
from ltsedge.store import MeasurementStore

CHECKPOINT = "checkpoint.pkl"
CANDIDATE_LOG = "candidates.jsonl"


@dataclass(frozen=True)
class SearchSettings:
    space: SearchSpace = field(default_factory=SearchSpace)
    population: int = 100
    generations: int = 30
    seed: int = 0
    budgets: Budgets = field(default_factory=Budgets)
    baseline: BaselineSpec | None = field(default_factory=BaselineSpec)
    prob_gene: float = 0.3  # per-gene mutation probability, as in the study
    target_ort: str | None = None

    def identity(self, profile: DeviceProfile) -> dict:
        """What a checkpoint must agree on to be resumed (more generations is fine)."""
        return {**self._evolution(), "device": profile.settings()}

    def to_dict(self) -> dict:
        return {**self._evolution(), "generations": self.generations,
                "baseline": self.baseline.to_dict() if self.baseline else None}

    def _evolution(self) -> dict:
        return {"space": self.space.to_dict(), "population": self.population, "seed": self.seed,
                "budgets": self.budgets.to_dict(), "prob_gene": self.prob_gene, "target_ort": self.target_ort}


@dataclass
class SearchResult:
    out_dir: Path
    frontier: list[PublishedModel]
    candidates: list[Candidate]
    baseline: list[dict]
    summary: dict
    interrupted: bool = False


class SearchRun:
    def __init__(self, settings: SearchSettings, profile: DeviceProfile, out_dir: Path, store: MeasurementStore, *,
                 fresh: bool = False, restart: bool = False, log: Callable[[str], None] = print,
                 progress=None, runner_factory: Callable[..., Runner] = Runner):
        self.settings, self.profile, self.out_dir, self.store = settings, profile, Path(out_dir), store
        self.runner_factory = runner_factory
        self.fresh, self.restart, self.log, self.progress = fresh, restart, log, progress
        self.hv_history: list[dict] = []
        self.hv_scale: HypervolumeScale | None = None
        self.generation = 0
        self.elapsed_before = 0.0

    # --- the whole job -------------------------------------------------------------------------
    def run(self) -> SearchResult:
        started = time.time()
        self._prepare_out_dir()
        work_dir = self.out_dir / ".scratch"
        work_dir.mkdir(parents=True, exist_ok=True)
        interrupted = False
        with self.runner_factory(self.profile, log=self.log) as runner:
            evaluator = CandidateEvaluator(
                self.profile, runner, self.store, work_dir, self.settings.budgets,
                target_ort=self.settings.target_ort, fresh=self.fresh,
                log_path=self.out_dir / CANDIDATE_LOG, on_progress=self._tick,
            )
            self._reload_log(evaluator)
            algorithm = self._algorithm(evaluator)
            if self.progress:
                self.progress.attach(evaluator.stats)
                self.progress.resume_at(self.generation, len(evaluator.seen))
                self.progress.start()
            try:
                self._evolve(algorithm, evaluator, started)
            except KeyboardInterrupt:
                interrupted = True
                self.log("interrupted: writing the frontier found so far (Ctrl-C again to stop at once)")
        candidates = [c for c in evaluator.seen.values() if c.generation >= 0]
        front = pareto_front(candidates, self.settings.budgets)
        if self.progress:
            self.progress.stop()
        # The frontier and the baseline are measured back to back, with the same strict policy, so
        # their comparison is not a comparison of two moments of a machine whose speed drifts.
        with self.runner_factory(strict(self.profile), log=self.log) as strict_runner:
            published = publish(front, strict_runner, self.out_dir / "models", self.settings.budgets,
                                 self.settings.target_ort, log=self.log)
            baseline = [] if interrupted else self._baseline(strict_runner, work_dir)
        comparison = compare(baseline, [p.candidate for p in published])
        shutil.rmtree(work_dir, ignore_errors=True)
        summary = self._summary(evaluator, published, started, interrupted)
        report.write_all(self.out_dir, published, evaluator, candidates, baseline, comparison, summary,
                         self.settings.budgets)
        return SearchResult(self.out_dir, published, candidates, comparison, summary, interrupted)

    # --- evolution -----------------------------------------------------------------------------
    def _algorithm(self, evaluator: CandidateEvaluator) -> NSGA2:
        s = self.settings
        problem = ArchitectureProblem(s.space, s.budgets)
        checkpoint = self._load_checkpoint(evaluator)
        if checkpoint is not None:
            algorithm = checkpoint["algorithm"]
            algorithm.termination = MaximumGenerationTermination(s.generations)
            self.log(f"resuming {self.out_dir} after generation {self.generation}")
            return algorithm
        algorithm = NSGA2(pop_size=s.population, **make_operators(s.space, s.prob_gene))
        algorithm.setup(problem, termination=MaximumGenerationTermination(s.generations), seed=s.seed, verbose=False)
        return algorithm

    def _evolve(self, algorithm: NSGA2, evaluator: CandidateEvaluator, started: float) -> None:
        problem = algorithm.problem
        while algorithm.has_next():
            pop = algorithm.ask()
            archs = [self.settings.space.decode(x) for x in pop.get("X")]
            candidates = evaluator.evaluate(archs, self.generation + 1)
            F, G = zip(*(problem.objectives(c.params.decoder_params, c.latency_ms, c.memory_mb, c.ok)
                         for c in candidates))
            Evaluator().eval(StaticProblem(problem, F=list(F), G=list(G)), pop)
            algorithm.tell(infills=pop)
            self.generation += 1
            self._record_generation(evaluator)
            self._save_checkpoint(algorithm, started)

    def _record_generation(self, evaluator: CandidateEvaluator) -> None:
        candidates = [c for c in evaluator.seen.values() if c.generation >= 0]
        if self.hv_scale is None:  # fixed after the first generation, so hypervolumes compare
            space = self.settings.space
            max_params = count_params(space.decode(space.upper_bounds)).decoder_params  # the space's largest
            self.hv_scale = HypervolumeScale.from_candidates(candidates, max_params)
        front = pareto_front(candidates, self.settings.budgets)
        s = evaluator.stats
        self.hv_history.append({"generation": self.generation, "hypervolume": self.hv_scale(front),
                                "front_size": len(front), "evaluated": len(candidates), "measured": s.measured,
                                "cached": s.cached, "failed": s.failed})
        if self.progress:
            self.progress.generation_done(self.generation, self.hv_history[-1])

    def _baseline(self, strict_runner: Runner, work_dir: Path) -> list[Candidate]:
        spec = self.settings.baseline
        if spec is None:
            return []
        # fresh: a stored figure would be from another moment than the frontier's re-measurement
        evaluator = CandidateEvaluator(strict(self.profile), strict_runner, self.store, work_dir, Budgets(),
                                       target_ort=self.settings.target_ort, fresh=True)
        archs = spec.architectures(self.settings.space.vocab_size, self.settings.space.n_positions)
        return evaluator.evaluate(archs, generation=-1)

    def _tick(self) -> None:
        if self.progress:
            self.progress.candidate_done()

    # --- output directory, checkpoint and log ------------------------------------------------------
    def _prepare_out_dir(self) -> None:
        if self.restart and self.out_dir.exists():
            for name in (CHECKPOINT, CANDIDATE_LOG):
                (self.out_dir / name).unlink(missing_ok=True)
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LtsedgeError(f"cannot create output directory {self.out_dir}: {e.strerror or e}") from None

    def _identity_hash(self) -> str:
        text = json.dumps(self.settings.identity(self.profile), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def _load_checkpoint(self, evaluator: CandidateEvaluator) -> dict | None:
        path = self.out_dir / CHECKPOINT
        if not path.exists():
            if any(c.generation >= 0 for c in evaluator.seen.values()):
                self.log("no complete generation to resume from: starting over, re-using what was measured")
            return None
        try:
            with open(path, "rb") as f:
                checkpoint = pickle.load(f)
        except Exception as e:  # noqa: BLE001 - any unpickling failure means the same thing
            raise LtsedgeError(f"checkpoint {path} is unreadable ({e}); pass --restart to start over") from None
        if checkpoint.get("identity") != self._identity_hash():
            raise LtsedgeError(
                f"{self.out_dir} holds a search with different settings (space, population, seed, budgets, "
                f"device or export target); pass --restart to start over, or choose another --out"
            )
        self.generation = checkpoint["generation"]
        self.hv_history = checkpoint["hv_history"]
        self.hv_scale = checkpoint["hv_scale"]
        self.elapsed_before = checkpoint["elapsed"]
        return checkpoint

    def _save_checkpoint(self, algorithm: NSGA2, started: float) -> None:
        checkpoint = {"identity": self._identity_hash(), "algorithm": algorithm, "generation": self.generation,
                      "hv_history": self.hv_history, "hv_scale": self.hv_scale,
                      "elapsed": self.elapsed_before + time.time() - started, "ltsedge": ltsedge.__version__}
        path = self.out_dir / CHECKPOINT
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            pickle.dump(checkpoint, f)
        tmp.replace(path)  # atomic: a kill leaves the previous checkpoint intact

    def _reload_log(self, evaluator: CandidateEvaluator) -> None:
        """Candidates this search already evaluated (its log survives kill -9): never evaluated again."""
        path = self.out_dir / CANDIDATE_LOG
        if not path.exists():
            return
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
                arch = Architecture.from_dict(record["architecture"])
            except (json.JSONDecodeError, KeyError, LtsedgeError):
                continue  # a line cut short by a kill
            evaluator.seen[arch.id] = Candidate(arch, count_params(arch), record["measurement"], record["source"],
                                                record["generation"])

    def _summary(self, evaluator: CandidateEvaluator, published: list[PublishedModel], started: float,
                 interrupted: bool) -> dict:
        from ltsedge.ortcompat import target_for

        wall = self.elapsed_before + time.time() - started
        return {
            "ltsedge": ltsedge.__version__, "settings": self.settings.to_dict(), "device": self.profile.to_dict(),
            "fingerprint": evaluator.fingerprint, "export": target_for(self.settings.target_ort).to_dict(),
            "generations_completed": self.generation, "interrupted": interrupted, "wall_seconds": wall,
            "evaluation": evaluator.stats.to_dict(), "hypervolume": self.hv_history,
            "hypervolume_scale": self.hv_scale.to_dict() if self.hv_scale else None,
            "frontier_size": len(published), "versions": report.versions(),
        }
