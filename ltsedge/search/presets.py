"""Named search presets: the full-scale default, the study's exact GPT-2 search (``study``), a quick demo, a
tiny smoke test, the study's OPT comparison and an app's Llama-family decoder (``llama-edge``).

A preset narrows the backbone's default space (any backbone's, ``--backbone``; ``opt`` is OPT's own), fixes population, generations and baseline, and
adjusts the device profile's workload (sequence length) and repeat policy; command-line options
override any of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ltsedge.backbones import BaselineSpec, get_backbone
from ltsedge.backbones.base import grid
from ltsedge.devices import DeviceProfile
from ltsedge.errors import LtsedgeError
from ltsedge.space import SearchSpace


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    space_changes: dict  # SearchSpace fields replacing the backbone's default space
    population: int
    generations: int
    baseline_spec: BaselineSpec | None  # None: the backbone's own layer-scaled baseline
    profile_changes: dict = field(default_factory=dict)
    backbone: str | None = None  # the preset's own backbone (None: any, gpt2 unless told otherwise)

    def space(self, backbone: str | None = None) -> SearchSpace:
        backbone = self.backbone_for(backbone) or "gpt2"
        changes = dict(self.space_changes)
        if not get_backbone(backbone).supports_adaptive:  # e.g. OPT: d_embed = d_model, no adaptive factor
            changes.pop("d_embed", None)
            changes.pop("div_val", None)
        return SearchSpace.default(backbone, **changes, source=f"preset {self.name}")

    def backbone_for(self, backbone: str | None) -> str | None:
        """The backbone asked for, else the preset's own; None where neither names one."""
        if self.backbone and backbone and backbone != self.backbone:
            raise LtsedgeError(f"preset {self.name} searches backbone {self.backbone}, not {backbone}")
        return backbone or self.backbone

    def baseline(self, backbone: str | None = None) -> BaselineSpec:
        return self.baseline_spec or get_backbone(self.backbone_for(backbone) or "gpt2").baseline()

    def apply(self, profile: DeviceProfile) -> DeviceProfile:
        return profile.replace(**self.profile_changes) if self.profile_changes else profile


PRESETS = {
    "default": Preset(
        "default", "the backbone's default space (GPT-2's: the study's, with its baseline's 1-layer point and 16 "
        "heads), population 100, 30 generations, sequence 192",
        {}, 100, 30, None,
    ),
    # To reproduce the paper: its GPT-2 space exactly, whose baseline points stand in it as their nearest shapes.
    "study": Preset(
        "study", "the study's own GPT-2 space (2-16 layers, 2, 4 or 8 heads per layer: its 16-head baseline stands "
        "in it as 8 heads, its 1-layer point as 2 layers), population 100, 30 generations, sequence 192",
        dict(n_layer=grid(2, 16, 1), n_head=(2, 4, 8)), 100, 30, None, backbone="gpt2",
    ),
    "quick": Preset(
        "quick", "a small space (1-6 layers, d_model 128-384), 8 generations of 16 (the cost model predicts most), "
        "sequence 64: about a minute on a 2-core laptop-class CPU",
        dict(n_layer=grid(1, 6, 1), d_model=grid(128, 384, 64), d_inner=grid(256, 1536, 64), d_embed=(128, 256),
             div_val=(1, 2)),
        16, 8, BaselineSpec(d_model=384, d_inner=1536, n_head=8, layers=(1, 2, 3, 4, 5, 6)),
        {"sequence": 64, "context": 64, "warmup": 1, "min_runs": 3, "max_runs": 20, "max_seconds": 3.0, "tolerance": 0.05},
    ),
    "smoke": Preset(
        "smoke", "tiny models (vocabulary 512, d_model 32-64), 2 generations of 6, sequence 16: for tests",
        dict(n_layer=(1, 2), d_model=(32, 64), n_head=(2, 4), d_inner=grid(64, 256, 32), d_embed=(16, 32),
             div_val=(1, 2), vocab_size=512, n_positions=64),
        6, 2, BaselineSpec(d_model=64, d_inner=128, n_head=2, layers=(1, 2)),
        {"sequence": 16, "context": 16, "warmup": 1, "min_runs": 3, "max_runs": 5, "max_seconds": 1.0, "tolerance": 0.1,
         "drift_check_every": 0},
    ),
    # An app's chat: the time per generated token once 2048 tokens are in the cache (decode, the objective of
    # a backbone that generates), a 512-token prompt's prefill timed beside it, weights in int4 as apps ship them.
    "llama-edge": Preset(
        "llama-edge", "Llama-family decoders for an app (llama's space: grouped key/value heads, head size, per-layer "
        "SwiGLU): decode after a 2048-token past, 512-token prefill, int4, against SmolLM2-135M's block 2-30 "
        "layers deep; population 100, 30 generations",
        {}, 100, 30, None, {"sequence": 512, "context": 2048, "precision": "int4"}, backbone="llama",
    ),
    "opt": Preset(
        "opt", "the study's OPT-scale space (3-29 layers, d_model 512-1472) against OPT-350M's layer-scaled "
        "block, sequence 2048: models of 100 M-1 B parameters, hours per generation on a laptop CPU",
        {}, 100, 30, None, {"sequence": 2048, "context": 2047}, backbone="opt",
    ),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise LtsedgeError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
    return PRESETS[name]
