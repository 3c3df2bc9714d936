"""``ExportOptions``: everything that decides an export's bytes, as one value.

The CLI (``ltsedge export``'s flags, the search's and profile's settings) builds one; it travels down to
the exporters (``export_model``, ``bundle.export_to_path``) and, whole, into the store key
(``options.model_key(arch)``): what an export was made with is what its
figures are filed under, so a figure of one setting never answers for another. What is not an export
option (the weights, a seed, the execution provider a precision is checked against) stays a keyword of
the call.

Light: nothing here imports torch (onnx only to clamp the target's opset to what it can write).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ltsedge.errors import LtsedgeError
from ltsedge.keys import DEFAULT_VARIANT, WEIGHTS_SCHEME, arch_key
from ltsedge.ortcompat import parse_version
from ltsedge.precision import DEFAULT_PRECISION, QuantOptions, check_precision

PLAIN_FORM, CONTRIB_FORM = "plain", "contrib"
GRAPH_FORMS = (PLAIN_FORM, CONTRIB_FORM)
# The contrib form's operators run on CPUs from onnxruntime 1.22 on (probed in 1.17.3 ... 1.22.1 and 1.32):
# SkipSimplifiedLayerNormalization from 1.17 at least, fp32 GroupQueryAttention with fused rotary from 1.18,
# its attention_bias (which masks padding: without it a left-padded prompt attends to its padding) and
# GatherBlockQuantized of uint8 blocks (the int4 tied embedding; 1.20's took int4 tensors only) from 1.22.
CONTRIB_MIN_ORT = (1, 22)
CONTRIB_MIN_TARGET = f"{CONTRIB_MIN_ORT[0]}.{CONTRIB_MIN_ORT[1]}"


@dataclass(frozen=True)
class ExportOptions:
    """How an architecture is exported; each field other than its default is named in the model key.

    ``variant``: forward (logits over a whole sequence) or generate (KV cache), as the backbone declares.
    ``target_ort``: the onnxruntime version the model must load in (None: ``ortcompat.OLDEST_ORT``).
    ``precision``: fp32, or fp16 / int8 / int4 by onnxruntime's quantizers, with ``quantization``'s
    options (None: ``QuantOptions()``; options of another precision than this one change nothing).
    ``cache_layout``: a KV-cache generate variant's (``backbones.kv_cache``; None: the backbone's default).
    ``external_data``: the weights in ``<file>_data`` beside the model (None: a generation model's always, other
    models' only over protobuf's 2 GB; ``default_external``).
    ``graph_form``: plain (standard ONNX operators) or contrib (onnxruntime's fused operators), of the forms
    the backbone has (None: its default, where the target runs it; ``graph_form_of``).
    Bad values are refused on construction, one line each."""

    variant: str = DEFAULT_VARIANT
    target_ort: str | None = None
    precision: str = DEFAULT_PRECISION
    quantization: QuantOptions | None = None
    cache_layout: str | None = None
    external_data: bool | None = None
    graph_form: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.variant, str) or not self.variant:
            raise LtsedgeError(f"export variant {self.variant!r} must be a name, e.g. forward or generate")
        if self.target_ort is not None and not isinstance(self.target_ort, str):
            raise LtsedgeError(f"onnxruntime version {self.target_ort!r} is not a version number like 1.20 or 1.20.1")
        # The messages of ``ltsedge export``'s flags; the execution provider (fp16: CUDA only) is checked
        # where the model is built or measured, it being no export option.
        check_precision(self.precision, self.target.runtime, execution_provider=None)
        if self.quantization is not None and not isinstance(self.quantization, QuantOptions):
            raise LtsedgeError(f"quantization options must be a QuantOptions, not {type(self.quantization).__name__}")
        if self.cache_layout is not None:
            from ltsedge.backbones.kv_cache import check_cache_layout

            check_cache_layout(self.cache_layout)
        if self.external_data is not None and not isinstance(self.external_data, bool):
            raise LtsedgeError(f"external_data {self.external_data!r} must be true, false or None (only over 2 GB)")
        if self.graph_form is not None:
            if self.graph_form not in GRAPH_FORMS:
                raise LtsedgeError(f"graph form {self.graph_form!r} is unknown (forms: {', '.join(GRAPH_FORMS)})")
            if not runs_form(self.graph_form, self.target.runtime):
                raise LtsedgeError(f"graph form contrib needs onnxruntime >= {CONTRIB_MIN_ORT[0]}.{CONTRIB_MIN_ORT[1]} "
                                   f"(GroupQueryAttention with attention_bias), the target is onnxruntime "
                                   f"{self.target.runtime}: export it in the plain form")

    @property
    def target(self):
        """The opset and IR version ``target_ort`` loads (``ortcompat.OnnxTarget``)."""
        from ltsedge.ortcompat import target_for

        return target_for(self.target_ort)

    def model_key(self, arch) -> str:
        """Store key of ``arch`` exported with these options: its id and everything that decides the exported
        bytes.

        Each option other than its default is named (the defaults predate them, and are left out so old keys
        stay): the variant; where it gives another graph than the per-layer one (which every key without it
        has always meant), a generate variant's KV-cache layout; a precision other than fp32 (an int8 figure
        never answers for fp32) with any of its quantization options (``QuantOptions``) other than the
        defaults; weights in an external data file (``data=external``: they load otherwise), as generation
        models' are unless asked otherwise (``data_external``); a graph form other than plain (``form=contrib``:
        onnxruntime's fused operators, the default of some backbones for targets that run them,
        ``graph_form_of``)."""
        from ltsedge.backbones import get_backbone

        backbone = get_backbone(arch.backbone)
        backbone.check_variant(self.variant)
        resolved = self.resolved(backbone, arch)
        if resolved is not self:
            return resolved.model_key(arch)
        target = self.target
        settings: dict[str, Any] = {"graph": backbone.graph_version, "opset": target.opset,
                                    "ir": target.ir_version, "weights": WEIGHTS_SCHEME}
        if self.variant != DEFAULT_VARIANT:
            settings["variant"] = self.variant
        if self.variant == "generate" and backbone.kv_cache:
            from ltsedge.backbones.kv_cache import layout_changes_graph

            layout = self.cache_layout or backbone.default_cache_layout
            if layout_changes_graph(arch, layout, backbone):
                settings["cache"] = layout
        form = self.graph_form_of(backbone, arch)
        if form != PLAIN_FORM:  # every key without a form is of the plain graph
            settings["form"] = form
        if self.precision != DEFAULT_PRECISION:  # fp32 keys predate precisions: it is left out of them
            settings["precision"] = self.precision
            quantization = self.quantization.key(self.precision) if self.quantization is not None else None
            if quantization:
                settings["quantization"] = quantization
        if self.data_external:  # False (inline), and None where that means inline, are the keys of old
            settings["data"] = "external"
        return arch_key(arch.id, settings)

    @property
    def data_external(self) -> bool:
        """Are the weights in a data file (below 2 GB: above, they always are)? Asked for, or the variant's
        default: a generation model's weights are (``default_external``), so its keys say so."""
        return default_external(self.variant) if self.external_data is None else self.external_data

    def graph_form_of(self, backbone, arch=None) -> str:
        """The form ``backbone``'s graph of ``arch`` is exported in: ``graph_form`` when given (one the backbone
        has), else the first of its forms (its default, by measurement; a generation bundle's own default first,
        the fastest in onnxruntime-genai's loop, ``Backbone.generate_form``; None for ``arch``: the family's)
        that the target runtime runs."""
        if self.graph_form is not None:
            if self.graph_form not in backbone.graph_forms:
                raise LtsedgeError(f"backbone {backbone.name} has no graph form {self.graph_form!r} "
                                   f"(forms: {', '.join(backbone.graph_forms)})")
            return self.graph_form
        forms = (*self._preferred(backbone, arch), *backbone.graph_forms, PLAIN_FORM)
        return next(f for f in forms if runs_form(f, self.target.runtime))

    def resolved(self, backbone, arch=None) -> ExportOptions:
        """These options for ``backbone``'s ``arch`` (None: the family's default): without a target, a
        generation bundle whose preferred form needs a newer onnxruntime than the oldest (GroupQueryAttention
        with a shared buffer, the fastest in genai's loop) targets the oldest that runs it. Given a target, it
        decides as before (``graph_form_of``). Exports and store keys are both made from the resolved options."""
        preferred = self._preferred(backbone, arch)
        if self.target_ort is not None or self.graph_form is not None or not preferred \
                or runs_form(preferred[0], self.target.runtime):
            return self
        return dataclasses.replace(self, target_ort=CONTRIB_MIN_TARGET, graph_form=preferred[0])

    def _preferred(self, backbone, arch) -> tuple[str, ...]:
        if self.variant != "generate":
            return ()
        form = backbone.generate_graph_form if arch is None else backbone.generate_form(arch, self.cache_layout)
        return (form,) if form else ()


def default_external(variant: str) -> bool:
    """Are a variant's weights in a data file unless asked otherwise? A generation model's are: onnxruntime
    holds a model read with its weights inline about half their size again for as long as it runs (45 MiB
    more for SmolLM2-135M at int4, 86 MB), and apps load generation bundles; onnxruntime-genai's builder writes
    its models so too. Other models keep one file below protobuf's 2 GB."""
    return variant == "generate"


def runs_form(form: str, runtime: str) -> bool:
    """Does onnxruntime ``runtime`` (e.g. "1.20") run graphs of ``form``?"""
    return form != CONTRIB_FORM or parse_version(runtime) >= CONTRIB_MIN_ORT
