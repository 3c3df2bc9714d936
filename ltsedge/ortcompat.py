"""Which ONNX opset and IR version a given onnxruntime loads.

An app bundles the onnxruntime it was built with; a model stamped with a newer IR version or opset
than that runtime implements fails to load ("Unsupported model IR version"). We stamp every model
with the newest pair its runtime accepts, the runtime being an explicit ``target_ort`` looked up in
the release table below or, by default, the oldest release ltsedge supports (``OLDEST_ORT``): a
default export loads in every runtime ltsedge runs on, apps' older ones included, not only in the
newest one installed here. ``local_target`` probes the local onnxruntime (the newest pair it loads).

The graphs need opset 17 (``MIN_OPSET``); int4's com.microsoft ``MatMulNBits`` needs onnxruntime 1.17
(``exporters.quantize.MIN_ORT``) and fp16 adds only standard Casts: 1.20's pair serves every precision.
Llama's contrib graph form (onnxruntime's fused GroupQueryAttention, SkipSimplifiedLayerNormalization,
GatherBlockQuantized) needs 1.22 (``exporters.options.CONTRIB_MIN_ORT``): a default export stays plain.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ltsedge.errors import LtsedgeError

MIN_OPSET = 17  # LayerNormalization is an ONNX operator from opset 17 on
# The oldest onnxruntime ltsedge supports (pyproject: onnxruntime>=1.20), the one many mobile apps ship:
# the default target. Raising it changes the default exports' bytes and store keys.
OLDEST_ORT = "1.20"

# onnxruntime minor release -> (newest ONNX opset its kernels cover, newest IR version it loads).
# Verified by loading probe models (and ltsedge's own graphs) in the latest patch of each release:
# 1.15 accepts opset 19 on load but lacks Identity-19/Shape-19 kernels, so 18; 1.22 refuses IR 11.
ORT_RELEASES: dict[tuple[int, int], tuple[int, int]] = {
    (1, 14): (18, 8),
    (1, 15): (18, 9),
    (1, 16): (19, 9),
    (1, 17): (20, 9),
    (1, 18): (21, 10),
    (1, 19): (21, 10),
    (1, 20): (21, 10),
    (1, 21): (22, 10),
    (1, 22): (22, 10),
    (1, 23): (23, 11),
    (1, 24): (25, 13),
    (1, 25): (26, 13),
    (1, 26): (26, 13),
    (1, 27): (26, 13),
    (1, 28): (26, 13),
    (1, 29): (26, 13),
    (1, 30): (26, 13),
    (1, 31): (26, 13),
}


@dataclass(frozen=True)
class OnnxTarget:
    opset: int
    ir_version: int
    runtime: str  # the onnxruntime version this pair was chosen for

    def to_dict(self) -> dict:
        return {"opset": self.opset, "ir_version": self.ir_version, "target_ort": self.runtime}


def parse_version(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.\d+)?(?:[.+-].*)?\s*", text)
    if not m:
        raise LtsedgeError(f"onnxruntime version {text!r} is not a version number like 1.20 or 1.20.1")
    return int(m.group(1)), int(m.group(2))


def writer_limits() -> tuple[int, int]:
    """The newest opset and IR version the installed onnx package can write."""
    import onnx

    return onnx.defs.onnx_opset_version(), onnx.IR_VERSION


def target_for(target_ort: str | None = None) -> OnnxTarget:
    """Opset and IR version for ``target_ort`` (e.g. "1.20"); by default for ``OLDEST_ORT``."""
    max_opset, max_ir = writer_limits()
    target_ort = target_ort or OLDEST_ORT
    version = parse_version(target_ort)
    known = sorted(ORT_RELEASES)
    if version < known[0]:
        raise LtsedgeError(
            f"--target-ort {target_ort}: onnxruntime before {known[0][0]}.{known[0][1]} lacks opset {MIN_OPSET} "
            f"(LayerNormalization), which ltsedge's models need"
        )
    # A release newer than the table implements at least what the newest known release does.
    opset, ir = ORT_RELEASES.get(version, ORT_RELEASES[known[-1]] if version > known[-1] else (None, None))
    if opset is None:
        raise LtsedgeError(f"--target-ort {target_ort}: unknown onnxruntime release")
    return OnnxTarget(min(opset, max_opset), min(ir, max_ir), f"{version[0]}.{version[1]}")


@functools.lru_cache(maxsize=None)
def local_target() -> OnnxTarget:
    """Probe the local onnxruntime with tiny models: the newest opset and IR version it loads."""
    import onnxruntime

    max_opset, max_ir = writer_limits()
    loadable_ir = [v for v in range(8, max_ir + 1) if _loads(MIN_OPSET, v)]
    if not loadable_ir:
        raise LtsedgeError(f"onnxruntime {onnxruntime.__version__} loads no opset-{MIN_OPSET} model")
    ir = max(loadable_ir)
    opset = max(o for o in range(MIN_OPSET, max_opset + 1) if _loads(o, ir))
    return OnnxTarget(opset, ir, onnxruntime.__version__)


def _loads(opset: int, ir_version: int) -> bool:
    import onnxruntime
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    try:
        onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return True
    except Exception:  # noqa: BLE001 - any load failure means "not supported"
        return False
