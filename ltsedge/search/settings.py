"""What a search is asked to do (``SearchSettings``): the space, NSGA-II's population, generations and
seed, budgets, baseline, the objective, how candidates are exported, timed and screened, and how the
frontier is published; and what of it a checkpoint must agree on to be resumed (``identity``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ltsedge.backbones import BaselineSpec
from ltsedge.devices import DeviceProfile, coarse
from ltsedge.devices.fingerprint import fingerprint_hash
from ltsedge.errors import LtsedgeError
from ltsedge.exporters.options import ExportOptions
from ltsedge.precision import QuantOptions
from ltsedge.proxy import decoder_merit
from ltsedge.search.budgets import Budgets
from ltsedge.space import SearchSpace
from ltsedge.workloads import WORKLOADS

# Upper bounds of a search's size: every candidate is a model exported and measured (a second or more
# each), so 10,000 of either is already weeks of measuring, far beyond the study's 100 x 30.
MAX_POPULATION = 10_000
MAX_GENERATIONS = 10_000
TIMINGS = ("coarse", "profile")


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
    objective: str = "forward"  # the latency optimised: a workload's name (ltsedge.workloads)
    racing: bool = True  # a first estimate for all, full precision only where the front can change
    measure: str = "front"  # "front": measure where the cost model says it could matter; "all": every candidate
    seed_baseline: bool = True  # the first generation holds the layer-scaled baseline models the space holds
    precision: str = "fp32"  # every candidate exported and measured at it: fp32, int8, int4 (fp16 on CUDA)
    # How the search times its candidates: "coarse" (devices.coarse: the cost model averages the noise) or
    # "profile" (the device profile's own policy); None: coarse with the cost model (measure "front"), the
    # profile's with every candidate measured (the study's protocol). The frontier is published re-measured
    # at the profile's policy either way.
    timing: str | None = None
    # Publishing: the front thinned so that every front model left out has a published one within this
    # factor in each objective (0: the whole front; pareto.thin)
    resolution: float = 0.1
    # Publishing: at most this many models written (None: the thinned front whole); the baseline
    # comparison's models first (pareto.cap). Not part of the identity: a resume may publish more or fewer.
    max_bundles: int | None = None
    quantization: QuantOptions | None = None  # how the precision is reached (None: onnxruntime's defaults, as ltsedge sets them)
    # NSGA-II's quality objective: None, decoder parameters (the study's proxy); or a proxy a check fitted on
    # the user's text (proxycheck.fitted.FittedProxy), part of the identity so a resume cannot switch proxies
    proxy: object | None = None

    def __post_init__(self) -> None:
        if self.timing is None:
            object.__setattr__(self, "timing", "coarse" if self.measure == "front" else "profile")
        if self.timing not in TIMINGS:
            raise LtsedgeError(f"--search-timing {self.timing!r} is not one of {', '.join(TIMINGS)}")
        if not (isinstance(self.resolution, (int, float)) and not isinstance(self.resolution, bool)
                and 0 <= self.resolution <= 1):
            raise LtsedgeError(f"--resolution {self.resolution!r} is out of range: use 0 (the whole front) to 1")
        if self.max_bundles is not None and (not isinstance(self.max_bundles, int) or isinstance(self.max_bundles, bool)
                                             or self.max_bundles < 1):
            raise LtsedgeError(f"--max-bundles {self.max_bundles!r} is out of range: use 1 or more")
        # Checked before anything starts: NSGA-II would try to sample a billion candidates and hang silently.
        for name, low, high in (("population", 2, MAX_POPULATION), ("generations", 1, MAX_GENERATIONS)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise LtsedgeError(f"--{name} {value!r} is out of range: use {low} to {high}")

    @property
    def export_options(self) -> ExportOptions:
        """How every candidate is exported, the frontier published and both keyed in the store: the
        objective's variant at ``target_ort`` and ``precision`` (built here only, so they never disagree)."""
        return ExportOptions(variant=WORKLOADS[self.objective].variant, target_ort=self.target_ort,
                             precision=self.precision, quantization=self.quantization)

    def identity(self, profile: DeviceProfile, fingerprint: dict) -> dict:
        """What a checkpoint must agree on to be resumed (more generations is fine)."""
        device = profile.settings()
        if self.objective != "forward":
            device["context"] = profile.context  # decides a generate model's decode figures
        return {**self._evolution(), "device": device, "machine": fingerprint_hash(fingerprint)}

    def to_dict(self) -> dict:
        return {**self._evolution(), "generations": self.generations, "resolution": self.resolution,
                "max_bundles": self.max_bundles,
                "baseline": self.baseline.to_dict() if self.baseline else None}

    def _evolution(self) -> dict:
        return {"space": self.space.to_dict(), "population": self.population, "seed": self.seed,
                "budgets": self.budgets.to_dict(), "prob_gene": self.prob_gene, "target_ort": self.target_ort,
                "objective": self.objective, "racing": self.racing, "measure": self.measure,
                "seed_baseline": self.seed_baseline, "precision": self.precision, "timing": self.timing,
                "quantization": self.quantization.for_precision(self.precision) if self.quantization else None,
                # only when set: the identities of searches of decoder parameters stay what they were
                **({"proxy": self.proxy.identity()} if self.proxy is not None else {})}

    @property
    def merit(self):
        """The front's quality axis (pareto.py): decoder parameters, or the fitted proxy's merit."""
        return self.proxy.merit if self.proxy is not None else decoder_merit

    def measuring_profile(self, profile: DeviceProfile) -> DeviceProfile:
        """The profile the search's candidates are measured with (its repeat policy per ``timing``)."""
        return coarse(profile) if self.timing == "coarse" else profile
