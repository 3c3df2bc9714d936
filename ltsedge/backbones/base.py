"""What a backbone provides: the one protocol every model family implements.

A backbone is everything ltsedge knows about one family of decoders (GPT-2, Transformer-XL, ...):
how to count its parameters (the proxy), its PyTorch reference model, its ONNX graph for each
export variant and the inputs/outputs that graph declares, its default search space and its
layer-scaled baseline. Everything else — search, export, measurement, store — asks the registry
(``ltsedge.backbones.get_backbone(arch.backbone)``) and never names a backbone.

Subclasses keep torch and onnx imports inside the methods that need them: counting parameters or
validating an architecture must stay instant and import-light.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ltsedge.backbones.kv_cache import DEFAULT_CACHE_LAYOUT
from ltsedge.interrupts import interrupts_deferred

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from ltsedge.architecture import Architecture
    from ltsedge.iospec import ExportSpec


def grid(low: int, high: int, step: int) -> tuple[int, ...]:
    """The choices low, low + step, ..., high (inclusive): how spaces write their ranges."""
    return tuple(range(low, high + 1, step))


@dataclass(frozen=True)
class BaselineSpec:
    """The study's layer-scaled baseline: one homogeneous block stacked 1..N times."""

    d_model: int = 1024
    d_inner: int = 3072
    n_head: int = 16
    layers: tuple[int, ...] = tuple(range(1, 17))
    # The block's grouped key/value heads and head size, for a backbone with those fields (None: its default)
    n_kv_head: int | None = None
    head_dim: int | None = None

    def to_dict(self) -> dict:
        out = {"d_model": self.d_model, "d_inner": self.d_inner, "n_head": self.n_head, "layers": list(self.layers)}
        # Only where set: the baselines of the backbones without them read as they did.
        grouped = {"n_kv_head": self.n_kv_head, "head_dim": self.head_dim}
        return {**out, **{k: v for k, v in grouped.items() if v is not None}}


class Backbone:
    """Base class of the backbones; the registry holds one instance of each."""

    name: str = ""
    description: str = ""
    variants: tuple[str, ...] = ("forward",)  # export variants; "forward" = the full-sequence pass
    # Bumped whenever the exported graph (or the weights it is given) changes: it is part of every
    # stored measurement's key, so figures of the old graph are never reused. tests/test_pins.py pins
    # the exported bytes of a few architectures and fails until this is bumped with the new pins.
    graph_version: int = 1
    # The forms its graph is exported in (``ExportOptions.graph_form``), its default first: "plain" (standard
    # ONNX operators, which every --target-ort loads) and, where its graph module has it (``build_graph``'s
    # ``form``), "contrib" (onnxruntime's fused com.microsoft operators, for targets that run them). A target
    # too old for the default form gets the next.
    graph_forms: tuple[str, ...] = ("plain",)
    # The form of its generation bundles where the target runs it (None: its default form): the fastest in
    # onnxruntime-genai's generator loop, by measurement, for the models ``generate_form`` gives it to. Without
    # --target-ort, those bundles target the oldest onnxruntime that runs it (``ExportOptions.resolved``).
    generate_graph_form: str | None = None
    # int4: a tied token embedding read from the output layer's 4-bit blocks instead of stored in fp32 beside
    # them (``exporters.quantize.tied_embedding_from_blocks``); a backbone turns it on with its graph_version.
    int4_embedding_from_blocks: bool = False
    # Architecture fields a backbone may use: a recurrence memory's default length (None: no memory),
    # and whether its layers may be FFN-only or attention-only (PAR block types).
    default_mem_len: int | None = None
    supports_block_types: bool = False
    supports_adaptive: bool = True  # adaptive input embeddings / softmax (d_embed, div_val)
    learned_positions: bool = True  # a position table of n_positions rows bounds past + sequence
    genai_compatible: bool = True  # its generate variant is a KV-cache decoder onnxruntime-genai can run
    # Its generate variant feeds back a KV cache, exported in one of ``kv_cache.CACHE_LAYOUTS`` (the
    # ``cache_layout`` option of ``export_spec`` / ``build_graph``); False: no cache whose layout is chosen.
    kv_cache: bool = False
    # The layout of that cache when none is asked for.
    default_cache_layout: str = DEFAULT_CACHE_LAYOUT
    # Names a trained checkpoint may carry for a tensor tied to another (alias -> the reference's name):
    # accepted by --weights when equal to it.
    tied_aliases: dict[str, str] = {}
    # The architecture fields of some families only (``architecture.FAMILY_FIELDS``) that it reads; any
    # other set is refused, and those an architecture leaves unset are filled by ``field_defaults``.
    architecture_fields: tuple[str, ...] = ()
    # Its generate bundle's naming: genai_config.json's ``model.type``; config.json's Hugging Face
    # ``model_type`` and class where they read true for its models (None: genai.HF_FAMILIES, else its own
    # type), with ``hf_config_fields``.
    genai_model_type: str = "decoder"
    hf_model_type: str | None = None
    hf_class: str | None = None

    # --- the architecture ------------------------------------------------------------------------
    def field_defaults(self, arch: Architecture) -> dict[str, Any]:
        """Values of its ``architecture_fields`` for an architecture that leaves them unset (None or ())."""
        return {}

    def validate(self, arch: Architecture) -> None:
        """Rules beyond the common ones (positive sizes, one entry per layer): raise LtsedgeError."""

    # --- the proxy -------------------------------------------------------------------------------
    def decoder_params(self, arch: Architecture) -> int:
        raise NotImplementedError

    def embedding_params(self, arch: Architecture) -> int:
        raise NotImplementedError

    # --- the PyTorch reference ---------------------------------------------------------------------
    def empty_model(self, arch: Architecture):
        """The reference ``torch.nn.Module`` on the meta device: its structure, names and shapes, no memory."""
        raise NotImplementedError

    def build_model(self, arch: Architecture, seed: int = 0, shared_weights: bool = False):
        """The reference ``torch.nn.Module`` in eval mode, deterministically initialised from ``seed``."""
        from ltsedge.backbones.random_weights import materialize

        return materialize(self.empty_model(arch), seed, shared_weights)

    # --- ONNX ------------------------------------------------------------------------------------
    def check_variant(self, variant: str) -> None:
        if variant not in self.variants:
            from ltsedge.errors import LtsedgeError

            raise LtsedgeError(f"backbone {self.name} has no export variant {variant!r} "
                               f"(variants: {', '.join(self.variants)})")

    def export_spec(self, arch: Architecture, variant: str) -> ExportSpec:
        """The declared inputs and outputs; a ``kv_cache`` backbone also takes ``cache_layout=``."""
        raise NotImplementedError

    def build_graph(self, arch: Architecture, weights: Mapping[str, np.ndarray], opset: int, variant: str,
                    **options) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
        """The graph (declaring ``export_spec(arch, variant)``) and the weights it reads, by initializer name.

        ``options``: ``gemm=False`` (given only for a quantized export) asks for linear layers as MatMul + Add;
        ``cache_layout`` (given only to a ``kv_cache`` backbone) the generate variant's cache layout."""
        raise NotImplementedError

    def hf_config_fields(self, arch: Architecture, layers: int, cache_heads: int) -> dict[str, Any]:
        """config.json's fields in ``hf_model_type``'s Hugging Face names (``layers``: its layer count, the caches';
        ``cache_heads``: the heads its first cache is stored in, as the graph declares it)."""
        return {}

    # --- the search ------------------------------------------------------------------------------
    def default_space(self) -> dict[str, Any]:
        """``SearchSpace`` fields that differ from the study's GPT-2 ranges (none by default)."""
        return {}

    def baseline(self) -> BaselineSpec:
        return BaselineSpec()

    def max_sequence(self, space) -> int | None:
        """The longest sequence (past included) its models can take: learned position tables end at
        ``n_positions``; None where positions are relative and unbounded."""
        return space.n_positions if self.learned_positions else None

    def __repr__(self) -> str:
        return f"<backbone {self.name}>"


class PackageBackbone(Backbone):
    """A backbone laid out as a package: ``params.py`` (``decoder_params``, ``embedding_params``),
    ``model.py`` (the reference class named by ``model_class``), ``graph.py`` (``build_graph`` and, with
    a generate variant, ``build_generate_graph``). The built-in backbones are; the modules are imported
    only when used, so counting parameters never imports torch."""

    model_class: str = ""

    @property
    def package(self) -> str:
        return type(self).__module__

    def _module(self, name: str):
        from importlib import import_module

        return import_module(f"{self.package}.{name}")

    def decoder_params(self, arch: Architecture) -> int:
        return self._module("params").decoder_params(arch)

    def embedding_params(self, arch: Architecture) -> int:
        return self._module("params").embedding_params(arch)

    def empty_model(self, arch: Architecture):
        import torch

        # Ctrl-C inside torch's mode stack breaks it (ltsedge/interrupts.py): it lands once the model is built.
        with interrupts_deferred(), torch.device("meta"), _no_random_fill():
            return getattr(self._module("model"), self.model_class)(arch)

    def export_spec(self, arch: Architecture, variant: str, cache_layout: str | None = None) -> ExportSpec:
        """``cache_layout``: the KV cache's (``kv_cache.CACHE_LAYOUTS``; None: the default)."""
        self.check_variant(variant)
        return self.generate_spec(arch, cache_layout) if variant == "generate" else forward_spec(arch)

    def generate_spec(self, arch: Architecture, cache_layout: str | None = None) -> ExportSpec:
        """The generate variant's inputs and outputs (a KV cache for most backbones)."""
        from ltsedge.backbones.kv_cache import generate_spec

        return generate_spec(arch, cache_layout or self.default_cache_layout)

    def generate_form(self, arch: Architecture, cache_layout: str | None = None) -> str | None:
        """The form ``arch``'s generation bundle in ``cache_layout`` (None: the default) is written in where the
        target runs it (None: the default form): ``generate_graph_form`` unless the backbone says otherwise."""
        return self.generate_graph_form

    def generate_form_rule(self) -> str | None:
        """How ``generate_form`` decides where it depends on the model, in words for a search's summary (None: one
        form for all)."""
        return None

    def build_graph(self, arch, weights, opset: int, variant: str, cache_layout: str | None = None,
                    form: str = "plain", **options):
        """``graph.py`` builds the default form, ``<form>_graph.py`` each other one (``graph_forms``)."""
        graph = self._module("graph" if form == self.graph_forms[0] else f"{form}_graph")
        build = graph.build_generate_graph if variant == "generate" else graph.build_graph
        return build(arch, weights, opset, self.export_spec(arch, variant, cache_layout), **options)


def forward_spec(arch: Architecture) -> ExportSpec:
    """The forward variant every backbone shares: ``input_ids [batch, sequence] -> logits``."""
    from ltsedge.iospec import ExportSpec, TensorSpec

    return ExportSpec(
        "forward",
        inputs=(TensorSpec("input_ids", "int64", ("batch", "sequence"), "input_ids"),),
        outputs=(TensorSpec("logits", "float32", ("batch", "sequence", arch.vocab_size), "logits"),),
    )


def _no_random_fill():
    """A torch function mode in which the modules' initial random fills (``nn.init``) do nothing: on the meta
    device they fill nothing anyway, and the first ``normal_`` there costs a second (torch imports sympy for
    it), a third of a cold ``ltsedge export``."""
    import torch
    from torch.overrides import TorchFunctionMode

    init = torch.nn.init
    fills = {torch.Tensor.normal_, torch.Tensor.uniform_, init.normal_, init.uniform_, init.trunc_normal_,
             init.kaiming_uniform_, init.kaiming_normal_, init.xavier_uniform_, init.xavier_normal_}

    class NoRandomFill(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in fills:  # the tensor filled, as they return it
                return args[0] if args else (kwargs or {}).get("tensor")
            return func(*args, **(kwargs or {}))

    return NoRandomFill()
