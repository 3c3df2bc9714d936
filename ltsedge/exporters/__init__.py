"""Architecture -> ONNX: the reference PyTorch model's weights, laid out as a deployable ONNX file.

``export_model`` is the one entry point, taking one ``ExportOptions`` (``exporters.options``: variant,
target runtime, precision, cache layout, external data; all of it in the store key); it asks the
architecture's backbone for the reference model (random weights seeded from the architecture id, so
exporting the same architecture twice gives the same bytes), the declared inputs and outputs of the
variant (``ltsedge.iospec``) and the graph. Every file carries its architecture, id, proxy score,
variant, I/O spec, opset/IR, precision and the ltsedge version in ``metadata_props``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import onnx
from onnx import helper

import ltsedge
from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.backbones.kv_cache import check_cache_layout
from ltsedge.errors import LtsedgeError
from ltsedge.exporters.exported import METADATA_PREFIX, ExportedModel
from ltsedge.exporters.options import ExportOptions
from ltsedge.exporters.quantize import CONTRIB_DOMAIN, quantize_model, tied_embedding_from_blocks
from ltsedge.extras import require
from ltsedge.iospec import ExportSpec
from ltsedge.ortcompat import OnnxTarget
from ltsedge.precision import DEFAULT_PRECISION, check_precision
from ltsedge.proxy import count_params


def weight_seed(arch: Architecture) -> int:
    return int(hashlib.sha256(arch.id.encode()).hexdigest()[:8], 16)


def export_model(arch: Architecture, options: ExportOptions | None = None, *, weights=None, seed: int | None = None,
                 shared_weights: bool = True, weights_source: str = "weights",
                 execution_provider: str = "CPUExecutionProvider") -> ExportedModel:
    """The reference PyTorch model as an ONNX model (nothing written yet), exported as ``options`` say
    (``exporters.options.ExportOptions``; None: the defaults, the forward variant in fp32): stamped with
    the opset and IR version ``options.target_ort`` loads (default: the oldest onnxruntime ltsedge
    supports, ``ortcompat.OLDEST_ORT``, or for a generation bundle of a backbone whose fastest form in
    onnxruntime-genai needs a newer one, that one: ``ExportOptions.resolved``); a precision other than fp32 quantized with onnxruntime's tools
    (``exporters.quantize``, with ``options.quantization``); a KV-cache generate variant's cache laid out
    as ``options.cache_layout`` says (``backbones.kv_cache``; nothing to lay out elsewhere). The model
    keeps ``options``: its files are written as its ``external_data`` says.

    Random weights unless ``weights`` (a ``state_dict`` of the reference model, e.g. from
    ``exporters.trained_weights.load_state_dict``; ``weights_source`` names it in errors) is given;
    ``shared_weights`` (the default) draws the random matrices from the shared buffer, which makes
    building a candidate instant; without it every tensor is freshly initialised (slower, same graph).
    ``seed`` replaces the architecture's own seed of the random weights.

    A precision the target runtime or ``execution_provider`` cannot run is refused before anything is built.
    """
    options = ExportOptions() if options is None else options
    if not isinstance(options, ExportOptions):
        raise LtsedgeError(f"export options must be an ExportOptions, not {type(options).__name__}")
    variant, precision = options.variant, options.precision
    backbone = get_backbone(arch.backbone)
    backbone.check_variant(variant)
    options = options.resolved(backbone, arch)
    layout = cache_layout_option(backbone, variant, options.cache_layout)
    target = options.target
    check_precision(precision, target.runtime, execution_provider)
    require("torch", "exporting an architecture (its PyTorch reference model is built)")
    check_fits_in_memory(arch)
    if weights is not None:
        from ltsedge.exporters.trained_weights import checked_weights

        arrays = checked_weights(weights, backbone.empty_model(arch), weights_source, backbone.tied_aliases)
    else:
        model = backbone.build_model(arch, weight_seed(arch) if seed is None else seed, shared_weights=shared_weights)
        arrays = {name: t.detach().numpy() for name, t in model.state_dict().items()}
    spec = backbone.export_spec(arch, variant, **layout)
    # onnxruntime's quantizers rewrite MatMul, not Gemm; fp32 keeps its Gemm graph (and its pinned bytes).
    quantized = precision in ("int8", "int4")
    form = options.graph_form_of(backbone, arch)
    graph, initializers = backbone.build_graph(arch, arrays, target.opset, variant, **layout,
                                               **({"gemm": False} if quantized else {}),
                                               **({"form": form} if len(backbone.graph_forms) > 1 else {}))
    opsets = [helper.make_opsetid("", target.opset)]
    if any(node.domain == CONTRIB_DOMAIN for node in graph.node):
        opsets.append(helper.make_opsetid(CONTRIB_DOMAIN, 1))
    proto = helper.make_model(graph, opset_imports=opsets, producer_name="ltsedge", producer_version=ltsedge.__version__)
    proto.ir_version = target.ir_version
    add_metadata(proto, arch, target, spec, trained=weights is not None)
    exported = ExportedModel(arch, target, spec, proto, list(initializers.items()), options=options)
    if precision == DEFAULT_PRECISION:
        return exported
    exported = quantize_model(exported, precision, options.quantization)
    if precision == "int4" and backbone.int4_embedding_from_blocks:
        exported = tied_embedding_from_blocks(exported, fused=form == "contrib")
    return exported


def cache_layout_option(backbone, variant: str, cache_layout: str | None) -> dict[str, str]:
    """The ``cache_layout`` option a backbone's spec and graph take: only a KV-cache generate variant has one
    (other backbones' signatures stay as they are). An unknown layout is an error wherever it is given."""
    if cache_layout is not None:
        check_cache_layout(cache_layout)
    if not (backbone.kv_cache and variant == "generate"):
        return {}
    return {"cache_layout": cache_layout or backbone.default_cache_layout}


def check_fits_in_memory(arch: Architecture) -> None:
    """Refuse, before allocating anything, an architecture whose weights alone exceed the memory free now."""
    import psutil

    needed = count_params(arch).total_params * 4  # fp32
    available = psutil.virtual_memory().available
    if needed > available:
        raise LtsedgeError(f"architecture {arch.id} has {count_params(arch).total_params:.3g} parameters: its weights "
                           f"need {needed / 2**30:.3g} GiB, more than the {available / 2**30:.3g} GiB of memory "
                           f"available on this machine")


def add_metadata(proto: onnx.ModelProto, arch: Architecture, target: OnnxTarget, spec: ExportSpec,
                 trained: bool = False) -> None:
    counts = count_params(arch)
    meta = {
        "architecture": arch.to_json(),
        "id": arch.id,
        "decoder_params": str(counts.decoder_params),
        "total_params": str(counts.total_params),
        "version": ltsedge.__version__,
        "opset": str(target.opset),
        "ir_version": str(target.ir_version),
        "target_ort": target.runtime,
        "variant": spec.variant,
        "io_spec": spec.to_json(),
        "weights": "trained" if trained else "random",
        # The longest past + sequence it embeds: what a runner checks without knowing the backbone.
        "max_sequence": str(arch.n_positions) if get_backbone(arch.backbone).learned_positions else "unbounded",
    }
    helper.set_model_props(proto, {METADATA_PREFIX + k: v for k, v in meta.items()})


def read_metadata(path_or_proto: str | Path | onnx.ModelProto) -> dict[str, str]:
    """ltsedge's metadata of an ONNX file (empty for a model ltsedge did not write)."""
    proto = path_or_proto
    if not isinstance(proto, onnx.ModelProto):
        try:
            proto = onnx.load(str(path_or_proto), load_external_data=False)
        except FileNotFoundError:
            raise LtsedgeError(f"model file not found: {path_or_proto}") from None
        except Exception as e:  # noqa: BLE001 - protobuf raises a variety of errors
            raise LtsedgeError(f"cannot read ONNX model {path_or_proto}: {e}") from None
    return {p.key[len(METADATA_PREFIX):]: p.value for p in proto.metadata_props if p.key.startswith(METADATA_PREFIX)}


def architecture_of(path: str | Path) -> Architecture | None:
    """The architecture in an ltsedge model's metadata; None for a model ltsedge did not write."""
    return architecture_in(read_metadata(path), path)


def architecture_in(meta: dict[str, str], path: str | Path) -> Architecture | None:
    """The architecture of ``read_metadata``'s result; damaged metadata is a one-line error naming the file."""
    if "architecture" not in meta:
        return None
    return Architecture.from_json(meta["architecture"], source=f"{path}: metadata ltsedge.architecture")
