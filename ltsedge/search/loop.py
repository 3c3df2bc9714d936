"""The search loop: NSGA-II (ask/tell) over the space, candidates evaluated on the device, with resume.

Each generation: ask NSGA-II for offspring, evaluate them (store first, device otherwise), tell it
the objectives and constraints (the generation callback records the hypervolume), checkpoint. A killed
search re-run with the same command continues from its last complete generation; everything it had
measured is re-used (from its candidate log and the store), so nothing is measured twice; a finished
one (or one killed while publishing) evolves no further and publishes its frontier again. At the end
(or on Ctrl-C) the frontier is published as ONNX models with their re-measured costs (``finish.py``)
and the outputs are written (``outputs.py``).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pymoo.algorithms.moo.nsga2 import NSGA2
from pymoo.core.evaluator import Evaluator
from pymoo.problems.static import StaticProblem
from pymoo.termination.max_gen import MaximumGenerationTermination

import ltsedge
from ltsedge.devices import DeviceProfile
from ltsedge.errors import LtsedgeError
from ltsedge.interrupts import Terminated
from ltsedge.runners import MeasuringRunner, Runner
from ltsedge.runners.loop import loop_label
from ltsedge.runners.policy import Calibration, pinned_calibration
from ltsedge.search import outputs
from ltsedge.search.baseline import seeds_in_space
from ltsedge.search.budgets import Budgets
from ltsedge.search.callback import GenerationCallback
from ltsedge.search.checkpoint import (
    CANDIDATE_LOG,
    CHECKPOINT,
    RESTART_HINT,
    CandidateLog,
    SearchState,
    identity_hash,
    load_checkpoint,
    peek_calibration,
    save_checkpoint,
)
from ltsedge.search.candidate import Candidate
from ltsedge.search.evaluate import CandidateEvaluator
from ltsedge.search.finish import finish
from ltsedge.search.frontier import PublishedModel
from ltsedge.search.pareto import pareto_front
from ltsedge.search.outdir import SCRATCH, OutputDir
from ltsedge.search.publish_log import PUBLISH_LOG, PublishLog
from ltsedge.search.problem import ArchitectureProblem, make_operators
from ltsedge.search.screening import Screen, screening_summary
from ltsedge.search.settings import SearchSettings
from ltsedge.store import MeasurementStore


@dataclass
class SearchResult:
    """Everything a search found, as data: ``outputs.py`` writes it, ``summary.py`` prints it."""

    out_dir: Path
    frontier: list[PublishedModel]
    candidates: list[Candidate]
    baseline: list[dict]
    summary: dict
    budgets: Budgets
    interrupted: bool = False
    proxy: object | None = None  # the fitted proxy the front was drawn with (``--proxy FILE``); None: decoder parameters

    def failure_reason(self) -> str | None:
        """Why no candidate could be measured, when none could (None when any was)."""
        if not self.candidates or any(c.ok for c in self.candidates):
            return None
        reasons = Counter(c.measurement.error or "unknown" for c in self.candidates)
        reason, count = reasons.most_common(1)[0]
        return f"no candidate could be measured ({count} of {len(self.candidates)}: {reason})"


class SearchRun:
    """One search of one space on one device into one output directory: ``run()`` evolves (or resumes from
    the checkpoint in ``out_dir``), publishes the frontier and writes the outputs, and returns the
    ``SearchResult``. Measurements come from ``store`` first, then from runners ``runner_factory`` makes."""

    def __init__(self, settings: SearchSettings, profile: DeviceProfile, out_dir: Path, store: MeasurementStore, *,
                 fresh: bool = False, restart: bool = False, log: Callable[[str], None] = print,
                 progress=None, runner_factory: Callable[..., MeasuringRunner] = Runner):
        self.settings, self.profile, self.out_dir, self.store = settings, profile, Path(out_dir), store
        self.runner_factory = runner_factory
        self.fresh, self.restart, self.log, self.progress = fresh, restart, log, progress
        self.state = SearchState()
        self.elapsed_before = 0.0  # wall time of the earlier, interrupted searches this one resumes

    def run(self) -> SearchResult:
        with OutputDir(self.out_dir) as outdir:  # locked: one search per directory at a time
            return self._run(outdir)

    def _run(self, outdir: OutputDir) -> SearchResult:
        started = time.time()
        self._clear(outdir)
        interrupted = False
        measuring = self.settings.measuring_profile(self.profile)
        with self.runner_factory(measuring, log=self.log) as runner:
            fingerprint = runner.fingerprint()
            identity = identity_hash(self.settings.identity(self.profile, fingerprint))
            self._calibrate(runner, identity)
            export = self.settings.export_options  # the evaluator's variant is the objective's, as export's
            evaluator = CandidateEvaluator(
                measuring, runner, self.store, outdir, self.settings.budgets, base_profile=self.profile,
                export=export, fresh=self.fresh,
                log=CandidateLog(self.out_dir, identity), on_progress=self._tick, objective=self.settings.objective,
                racing=self.settings.racing,
                screen=Screen(self.settings.objective, self.settings.budgets, self.settings.seed,
                              merit=self.settings.merit)
                if self.settings.measure == "front" else None, merit=self.settings.merit,
            )
            evaluator.reload(evaluator.log.records())
            algorithm = self._algorithm(evaluator, identity)
            if self.progress:
                self.progress.attach(evaluator.stats)
                self.progress.resume_at(self.state.generation, len(evaluator.seen))
                self.progress.start()
            try:
                self._evolve(algorithm, evaluator, identity, started)
                self._settle(algorithm, evaluator, identity)
            except KeyboardInterrupt as e:
                interrupted = True
                what = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
                self.log(f"{what}: writing the frontier found so far (Ctrl-C again to stop at once)")
        if self.progress:
            self.progress.stop()
        candidates = evaluator.candidates()
        publish_started = time.time()
        finished = finish(pareto_front(candidates, self.settings.budgets, self.settings.merit), self.settings, self.profile, self.store,
                          outdir, runner_factory=self._pinned_factory(runner.calibrate()), log=self.log,
                          with_baseline=not interrupted, evaluated=candidates,
                          published=None if self.fresh else PublishLog(self.out_dir, identity))
        summary = self._summary(evaluator, len(finished.frontier), started, interrupted)
        summary["publish_seconds"] = time.time() - publish_started  # files, re-measurement, baseline
        summary["publish"] = finished.cost.to_dict()  # what each pass of publishing measured and cost
        result = SearchResult(self.out_dir, finished.frontier, candidates, finished.baseline, summary,
                              self.settings.budgets, interrupted, self.settings.proxy)
        outputs.write_outputs(result)
        self._report(outdir)
        return result

    def _report(self, outdir: OutputDir) -> None:
        """The pictures and the HTML page: a failure here never costs the search's other outputs."""
        try:
            from ltsedge.report import REPORT_DIR, write_report

            write_report(self.out_dir, open_path=lambda name: outdir.path(f"{REPORT_DIR}/{name}"))
        except Exception as e:  # noqa: BLE001 - plotting libraries fail in many ways; the results are written
            self.log(f"warning: the report could not be drawn ({type(e).__name__}: {e}); "
                     f"the search's outputs are complete; try `ltsedge report {self.out_dir}`")

    def _clear(self, outdir: OutputDir) -> None:
        """Scratch files a killed run left, and with --restart the state it would have resumed from."""
        for rel in outdir.files_under(SCRATCH):
            outdir.remove(rel)
        if self.restart:
            for name in (CHECKPOINT, CANDIDATE_LOG, PUBLISH_LOG):
                outdir.remove(name)

    # --- evolution -----------------------------------------------------------------------------
    def _algorithm(self, evaluator: CandidateEvaluator, identity: str) -> NSGA2:
        s = self.settings
        seeds = []
        if s.seed_baseline and s.baseline is not None:
            # Half the first generation at most, the other half sampled from the whole space; stand-ins
            # beyond it are measured when the front is published (finish.py), so every point is judged alike.
            seeds = seeds_in_space(s.baseline, s.space, limit=max(1, s.population // 2))
        algorithm = NSGA2(pop_size=s.population, **make_operators(s.space, s.prob_gene, seeds))
        algorithm.setup(ArchitectureProblem(s.space, s.budgets, s.proxy), termination=MaximumGenerationTermination(s.generations),
                        seed=s.seed, verbose=False)
        resumed = load_checkpoint(self.out_dir, identity, algorithm)
        if resumed is not None:
            self.state = resumed
            if algorithm.has_next():
                self.log(f"resuming {self.out_dir} after generation {self.state.generation}")
            else:  # finished, or killed while publishing: nothing to evolve, its frontier is published (again)
                self.log(f"{self.out_dir} completed its {self.state.generation} generations: publishing its "
                         f"frontier from the checkpoint and the store")
        elif evaluator.candidates():
            self.log("no complete generation to resume from: starting over, re-using what was measured")
        self.elapsed_before = self.state.elapsed
        algorithm.callback = GenerationCallback(evaluator, s, self.state, progress=self.progress)
        return algorithm

    def _evolve(self, algorithm: NSGA2, evaluator: CandidateEvaluator, identity: str, started: float) -> None:
        problem = algorithm.problem
        while algorithm.has_next():
            pop = algorithm.ask()
            archs = [self.settings.space.decode(x) for x in pop.get("X")]
            candidates = evaluator.evaluate(archs, self.state.generation + 1)
            F, G = zip(*(problem.objectives(c.params.decoder_params, c.latency_ms, c.memory_mb, c.ok, c.arch)
                         for c in candidates))
            Evaluator().eval(StaticProblem(problem, F=list(F), G=list(G)), pop)
            algorithm.tell(infills=pop)  # -> GenerationCallback: hypervolume, front size, progress
            self.state.elapsed = self.elapsed_before + time.time() - started
            save_checkpoint(self.out_dir, identity, algorithm, self.state)  # the generation is complete

    def _settle(self, algorithm: NSGA2, evaluator: CandidateEvaluator, identity: str) -> None:
        """The settling round, once per search: a re-run of a finished search settles nothing more (each
        re-run settled another round, and published another front); one killed while settling goes on
        with what was left of its round."""
        if self.state.settled:
            return
        done = sum(c.source == "settled" for c in evaluator.candidates())
        evaluator.settle_front(limit=max(0, self.settings.population - done), margin=self.settings.resolution)
        self.state.settled = True
        save_checkpoint(self.out_dir, identity, algorithm, self.state)

    def _calibrate(self, runner: MeasuringRunner, identity: str) -> None:
        """The run's scale of milliseconds: the machine's pinned calibration (from the store); a resumed run
        keeps the one it started with, so its milliseconds stay in one scale. A local runner's drift guard
        keeps to the run's own calibration (an old runner without pinning: to the saved one)."""
        saved = peek_calibration(self.out_dir, identity)
        pin = getattr(runner, "use_pinned", None)  # a fleet's agents pin their own
        if saved is not None:
            (pin or runner.use_calibration)(_saved_calibration(saved, self.out_dir / CHECKPOINT))
        elif pin is not None:
            pin(pinned_calibration(self.store, runner, log=self.log))
        self.state.calibration = runner.calibrate().to_dict()

    def _pinned_factory(self, scale: Calibration) -> Callable[..., MeasuringRunner]:
        """Runners for the finishing step (the frontier's re-measurement) in the search's scale."""
        def make(profile: DeviceProfile, **options) -> MeasuringRunner:
            runner = self.runner_factory(profile, **options)
            if hasattr(runner, "use_pinned"):
                runner.use_pinned(scale)
            return runner
        return make

    def _tick(self) -> None:
        if self.progress:
            self.progress.candidate_done()

    def _summary(self, evaluator: CandidateEvaluator, frontier_size: int, started: float, interrupted: bool) -> dict:
        return {
            "ltsedge": ltsedge.__version__, "settings": self.settings.to_dict(), "device": self.profile.to_dict(),
            "fingerprint": evaluator.fingerprint,
            "export": _export_summary_of(self.settings),
            # What timed a candidate: onnxruntime-genai's Generator (generation bundles where it is installed)
            # or a plain session (runners/loop.py).
            "measured_in": loop_label(self.profile, self.settings.export_options.variant),
            "generations_completed": self.state.generation, "interrupted": interrupted,
            "wall_seconds": self.elapsed_before + time.time() - started,
            "evaluation": evaluator.stats.to_dict(), "cost_model": screening_summary(evaluator),
            "hypervolume": self.state.hv_history,
            "hypervolume_scale": self.state.hv_scale, "frontier_size": frontier_size, "versions": outputs.versions(),
        }


def _export_summary_of(settings) -> dict:
    """The target and form the candidates were exported for (resolved for the space's backbone: Llama's bundles
    target the onnxruntime their default form needs), and how the form was chosen where each model's decides it
    (GPT-2's and OPT's bundles: each model's store key names its own)."""
    from ltsedge.backbones import get_backbone
    from ltsedge.exporters.options import PLAIN_FORM

    backbone = get_backbone(settings.space.backbone)
    options = settings.export_options.resolved(backbone)
    form = options.graph_form_of(backbone)
    summary = {**options.target.to_dict(), "precision": settings.precision, "graph_form": form}
    asked = settings.export_options
    rule = backbone.generate_form_rule() if asked.variant == "generate" and asked.graph_form is None \
        and form != PLAIN_FORM else None
    return {**summary, "graph_form_rule": rule} if rule else summary


def _saved_calibration(saved: dict, path: Path) -> Calibration:
    try:
        calibration = Calibration(**saved)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in saved.values()) \
                or not calibration.reference_ms > 0:
            raise ValueError(f"calibration {saved}")
    except (TypeError, ValueError) as e:
        raise LtsedgeError(f"checkpoint {path} is damaged ({e}); {RESTART_HINT}") from None
    return calibration
