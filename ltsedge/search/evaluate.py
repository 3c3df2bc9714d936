"""Evaluating candidates: proxy analytically, latency and memory from the store, the device or the
device's cost model.

For each architecture not seen before: count its decoder parameters; look it up in the store; else,
when the search screens (``screening.py``), predict it and keep the prediction unless its measurement
could matter; else export it, write it to a scratch file, measure it in the runner's worker, record
the measurement in the store (failures too, with their reason; its architecture beside it, for the
cost model) and in the search's own append-only candidate log, then delete the scratch file. Nothing
runs beside a measurement: export happens before, never during. What it makes of each is a
``Candidate`` (``candidate.py``).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable

from ltsedge.architecture import Architecture
from ltsedge.costmodel.samples import cost_models, remember
from ltsedge.devices import DeviceProfile
from ltsedge.errors import LtsedgeError
from ltsedge.exporters import export_model
from ltsedge.exporters.options import ExportOptions
from ltsedge.files import data_file_name
from ltsedge.keys import measurement_key, measurement_settings
from ltsedge.proxy import count_params, decoder_merit, merit_of
from ltsedge.runners import Measurement, MeasuringRunner
from ltsedge.runners.measurement import complete
from ltsedge.runners.racing import Race
from ltsedge.search.budgets import Budgets
from ltsedge.search.candidate import Candidate, EvaluationStats
from ltsedge.search.checkpoint import CandidateLog
from ltsedge.search.outdir import SCRATCH, OutputDir
from ltsedge.search.race_choice import race_for
from ltsedge.search.screening import Screen, plan, predicted_measurement, prediction_record, promise
from ltsedge.store import MeasurementStore
from ltsedge.workloads import WORKLOADS

CHUNK = 10  # candidates exported ahead of measuring, at most (their scratch files exist together)


class CandidateEvaluator:
    def __init__(self, profile: DeviceProfile, runner: MeasuringRunner, store: MeasurementStore, scratch: OutputDir | Path,
                 budgets: Budgets, *, fresh: bool = False,
                 log: CandidateLog | None = None, on_progress: Callable[[], None] | None = None,
                 objective: str = "forward", racing: bool = False, coarse_others: bool = False,
                 screen: Screen | None = None, base_profile: DeviceProfile | None = None,
                 export: ExportOptions | None = None, merit=decoder_merit):
        self.profile, self.runner, self.store = profile, runner, store
        # The profile ``profile``'s repeat policy derives from (a search timing coarsely measures with
        # ``coarse(base_profile)``): its cost model learns from the figures of all its policies.
        self.base_profile = base_profile or profile
        self.objective, self.racing = objective, racing
        # Without racing: time the workloads other than the objective's coarsely anyway (as publishing
        # re-measures its front), or every workload to the profile's policy.
        self.coarse_others = coarse_others
        self.screen = screen  # None: every candidate measured (the study's protocol)
        self.merit = merit  # the front's quality axis when racing and settling (pareto.py)
        self._fitted_on = -1  # samples the screen's cost model was last fitted on
        # What a search may optimise is a workload: the export variant measured, the figure that is the objective.
        self.variant, self.latency_field = WORKLOADS[objective].variant, WORKLOADS[objective].figure
        # How every candidate is exported and keyed: one value, so the file measured and its key agree
        # (``export``; None: the objective's variant with every other option at its default).
        if export is None:
            export = ExportOptions(variant=self.variant)
        if export.variant != self.variant:
            raise ValueError(f"objective {objective} is timed on the {self.variant} variant, not {export.variant}")
        self.export = export  # every candidate is exported (quantized) and measured as it says
        self.scratch, self.budgets, self.fresh = scratch, budgets, fresh
        self.log, self.on_progress = log, on_progress
        self.seen: dict[str, Candidate] = {}
        self.stats = EvaluationStats()
        self.fingerprint = runner.fingerprint()

    def candidates(self) -> list[Candidate]:
        """Every candidate the search evaluated (the baseline, generation -1, is not one)."""
        return [c for c in self.seen.values() if c.generation >= 0]

    def reload(self, records: list[dict]) -> None:
        """Candidates of an interrupted run (its log): never evaluated again."""
        for record in records:
            try:
                arch = Architecture.from_dict(record["architecture"])
                measurement = Measurement.from_record(record["measurement"])
                self.seen[arch.id] = Candidate(arch, count_params(arch), measurement, record["source"],
                                               record["generation"], self.latency_field, record.get("prediction"))
            except (KeyError, TypeError, LtsedgeError):
                continue  # not a candidate record

    def store_key(self, arch: Architecture) -> tuple:
        return measurement_key(self.export.model_key(arch), self.fingerprint, self.profile, variant=self.variant)

    def evaluate(self, archs: list[Architecture], generation: int) -> list[Candidate]:
        """Candidates for ``archs`` in order; each distinct architecture is measured at most once."""
        started = time.perf_counter()
        to_measure: list[Architecture] = []
        for arch in archs:
            if arch.id in self.seen or any(a.id == arch.id for a in to_measure):
                continue
            known = self._without_measuring(arch, generation)
            if known is None:
                to_measure.append(arch)
            else:
                self._record(known)
        if self.screen is None:
            for i in range(0, len(to_measure), CHUNK):
                for candidate in self._measure(to_measure[i : i + CHUNK], generation):
                    self._record(candidate)
        else:
            self._screen_and_measure(to_measure, generation, share=math.ceil(self.screen.share * len(archs)))
        self.stats.evaluate_seconds += time.perf_counter() - started
        return [self.seen[a.id] for a in archs]

    def _screen_and_measure(self, archs: list[Architecture], generation: int, share: int) -> None:
        """Measure, a chunk at a time, the candidates whose measurement could matter (at most ``share``
        of them by promise, audits aside); after each chunk refit the cost model and judge the rest
        again against the grown front; predict what remains."""
        pending = list(archs)
        while pending:
            self._refit()
            front = self.screen.front_points(self._measured())  # once per round: it changes only by measuring
            calibration = self.runner.calibrate().reference_ms
            verdicts = {a.id: self.screen.verdict(a, count_params(a).decoder_params, front, calibration)
                        for a in pending}
            chosen = set(plan(verdicts, share)[:CHUNK])
            batch = [a for a in pending if a.id in chosen]
            share -= sum(verdicts[a.id].budgeted for a in batch)
            if not batch:
                for arch in pending:
                    estimate = verdicts[arch.id].estimate
                    figures = predicted_measurement(estimate, self.objective, self.variant, calibration)
                    self._record(Candidate(arch, count_params(arch), figures, "predicted", generation,
                                           self.latency_field, prediction_record(estimate)))
                return
            for candidate in self._measure(batch, generation):
                estimate = verdicts[candidate.arch.id].estimate
                candidate.prediction = prediction_record(estimate) if estimate is not None else None
                self._record(candidate)
            pending = [a for a in pending if a not in batch]

    def settle_front(self, limit: int, margin: float = 0.0) -> None:
        """At the end of a search: measure (at most ``limit``) predicted candidates whose optimistic
        predictions (the low ends of their intervals, as screening judges) would enter the measured
        front, the most promising first, re-judged after every chunk against the grown front, so the
        front a search publishes is the one its predictions point to, in measured figures (``source``
        "settled"). A prediction beyond the front by no more than ``margin`` (publishing's resolution)
        is not measured: a front model within the resolution of it already stands for it."""
        if self.screen is None:
            return
        settled = 0
        while settled < limit:
            front = self.screen.front_points(self._measured())
            ranked = sorted(((promise(merit_of(c, self.merit), *self._optimistic(c), front), c)
                             for c in self.candidates() if c.predicted), key=lambda pc: -pc[0])
            batch = [c for score, c in ranked if score > 1.0 + margin and not self.budgets.violations(
                c.params.decoder_params, c.latency_ms, c.memory_mb)][:min(CHUNK, limit - settled)]
            if not batch:
                return
            for old, new in zip(batch, self._measure([c.arch for c in batch], batch[0].generation)):
                new.generation, new.prediction, new.source = old.generation, old.prediction, "settled"
                self.stats.predicted -= 1
                self._record(new)
            settled += len(batch)

    def _optimistic(self, c: Candidate) -> tuple[float, float]:
        """A predicted candidate's objective ratio and memory at the low ends of their intervals (the
        point prediction where it has no interval)."""
        p = c.prediction or {}
        ratio = (p.get(self.objective) or {}).get("low") or c.measurement.ratio(self.objective)
        return ratio, (p.get("memory_mb") or {}).get("low") or c.memory_mb

    def _measured(self) -> list[Candidate]:
        """The search's candidates with measured figures (this run's, the store's, settled ones)."""
        return [c for c in self.seen.values() if c.ok and not c.predicted and c.generation >= 0]

    def _refit(self) -> None:
        """The cost models on every figure of this machine and settings in the store (this search's and
        earlier ones'), refitted when new figures arrived: one per candidates' export settings (``cost_models``)."""
        if self.stats.measured + self.stats.cached == self._fitted_on:
            return
        self._fitted_on = self.stats.measured + self.stats.cached
        calibration = self.runner.calibrate()
        self.screen.use(cost_models(self.store, self.fingerprint, self.base_profile, self.export,
                                    calibration.bandwidth_scale, calibration.reference_ms))

    def _without_measuring(self, arch: Architecture, generation: int) -> Candidate | None:
        params = count_params(arch)
        out_of_budget = self.budgets.violations(params.decoder_params, None, None)
        if out_of_budget:
            reason = "skipped: decoder parameters outside the budget (" + ", ".join(out_of_budget) + ")"
            return Candidate(arch, params, Measurement(ok=False, error=reason), "skipped", generation, self.latency_field)
        if self.fresh:
            return None
        stored = self.store.get(*self.store_key(arch))
        if stored is None:
            return None
        # A stored first estimate (raced out) is a real figure with its interval: reused as it is, so that
        # the same seed and store replay the same search; the frontier is re-measured afresh anyway.
        calibration = self.runner.calibrate()
        stored = Measurement.from_record(stored)
        if stored.ok:
            remember(self.store, arch, self.store_key(arch)[0])  # figures stored before architectures were
        return Candidate(arch, params, stored.rescaled(calibration.reference_ms, calibration.bandwidth_scale),
                         "store", generation, self.latency_field)

    def _measure(self, archs: list[Architecture], generation: int) -> list[Candidate]:
        """Export and measure ``archs``. One this version cannot export (quantizing a model over protobuf's
        2 GB) is a failed candidate, not the search's end, and is not stored: a later version may export it."""
        figures: dict[str, Measurement] = {}
        paths, written, exported_archs = [], [], []
        try:
            for arch in archs:
                t = time.perf_counter()
                try:
                    exported = export_model(arch, self.export, execution_provider=self.profile.execution_provider)
                except LtsedgeError as e:
                    figures[arch.id] = Measurement.failure(f"not exported: {e}", "environment")
                    continue
                path = self._scratch_path(f"{arch.id}.onnx")
                if exported.external():  # its weights go in a data file beside it
                    self._scratch_path(data_file_name(f"{arch.id}.onnx"))
                written += [path.with_name(name) for name in exported.save_files(path, digest=False)]
                paths.append(path)
                exported_archs.append(arch)
                self.stats.export_seconds += time.perf_counter() - t
            interim: dict[int, Measurement] = {}

            def keep(i: int, m: Measurement) -> None:
                interim[i] = m
                self._keep(exported_archs[i], m)

            def race(i: int):  # against the front so far, this batch's earlier figures included
                value = self.merit(exported_archs[i], count_params(exported_archs[i]).decoder_params)
                if not self.racing:  # no front to race against; the other workloads coarse, if so asked
                    return Race(self.objective, value, (), self.profile.tolerance) if self.coarse_others else None
                done = [Candidate(exported_archs[j], count_params(exported_archs[j]), m, "measured", generation,
                                  self.latency_field) for j, m in interim.items()]
                return self._race(value, done)

            if paths:
                figures.update(zip((a.id for a in exported_archs), self.runner.measure_many(paths, on_result=keep,
                                                                                            race=race)))
        finally:
            for path in written:
                self._drop_scratch(path)
        return [Candidate(arch, count_params(arch), figures[arch.id], "measured", generation, self.latency_field)
                for arch in archs]

    def _scratch_path(self, name: str) -> Path:
        """Where a candidate's file is written to be measured: the search's recorded .scratch/, or a
        directory of the caller's."""
        if isinstance(self.scratch, OutputDir):
            return self.scratch.path(f"{SCRATCH}/{name}")
        return Path(self.scratch) / name

    def _drop_scratch(self, path: Path) -> None:
        if isinstance(self.scratch, OutputDir):
            self.scratch.remove(f"{SCRATCH}/{path.name}")
        else:
            path.unlink(missing_ok=True)

    def _race(self, merit_value: float, extra: list[Candidate] = ()):
        return race_for(merit_value, self.candidates() + list(extra), self.objective, self.budgets,
                        self.profile.tolerance, self.runner.calibrate().reference_ms, self.merit)

    def _keep(self, arch: Architecture, measurement: Measurement) -> None:
        """Store each figure the moment it exists: an interrupted batch loses nothing it measured (a
        first estimate, or a coarse one, never replaces a complete figure)."""
        if not measurement.complete:
            full = self.store.get(*self.store_key(arch), include_failures=False)
            if full is not None and complete(full):
                return
        self.stats.load_seconds += measurement.load_seconds
        self.stats.inference_seconds += measurement.inference_seconds
        key = self.store_key(arch)
        self.store.put(*key, measurement.to_dict(), fingerprint=self.fingerprint,
                       settings=measurement_settings(self.profile, variant=self.variant))
        if measurement.ok:
            remember(self.store, arch, key[0])

    def _record(self, candidate: Candidate) -> None:
        self.seen[candidate.arch.id] = candidate
        s = self.stats
        if candidate.source == "skipped":
            s.skipped += 1
        elif candidate.source == "store":
            s.cached += 1
        elif candidate.predicted:
            s.predicted += 1
        else:
            s.measured += 1
        if candidate.source != "skipped" and not candidate.ok:
            s.failed += 1
        if self.log is not None:
            self.log.append(candidate.to_record(self.budgets))
        if self.on_progress:
            self.on_progress()
