"""The precisions an export runs at and how each is reached (``QuantOptions``), checked against the runtime
that must run it. Below the exporters, the device profiles and the store keys, which all name a precision:
it imports nothing of ltsedge but errors and the onnxruntime versions (``exporters/quantize.py`` does the
quantizing)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ltsedge.errors import LtsedgeError
from ltsedge.ortcompat import parse_version

DEFAULT_PRECISION = "fp32"  # keys of the precision predate precisions: it is left out of them
PRECISIONS = ("fp32", "fp16", "int8", "int4")
# The oldest onnxruntime that runs each precision: com.microsoft MatMulNBits first shipped in 1.17
# (onnxruntime PR 17890; its accuracy_level attribute, PR 17669, in the same release); int8's
# DynamicQuantizeLinear and MatMulInteger are standard ONNX operators.
MIN_ORT = {"int4": (1, 17)}
FP16_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")
INT4_BLOCK_SIZES = (16, 32, 64, 128, 256)


@dataclass(frozen=True)
class QuantOptions:
    """How a precision is reached; every field decides the exported bytes (the defaults leave store keys short)."""

    per_channel: bool = False  # int8: one scale per output channel instead of per tensor
    # int4: onnxruntime-genai's model builder's defaults for CPU. Accuracy level 4 computes in int8 (the
    # activations quantized per block at run time): measured here 2.3x faster per decoded token than
    # level 0 (fp32 compute), which decodes slower than the fp32 model (docs/benchmarks.md).
    block_size: int = 32  # weights per scale
    symmetric: bool = True  # no zero points
    accuracy_level: int | None = 4  # MatMulNBits' compute type: 0 unset, 1 fp32, 2 fp16, 3 bf16, 4 int8

    def __post_init__(self) -> None:
        if self.block_size not in INT4_BLOCK_SIZES:
            raise LtsedgeError(f"int4 block size {self.block_size} must be one of "
                               f"{', '.join(map(str, INT4_BLOCK_SIZES))}")
        if self.accuracy_level is not None and self.accuracy_level not in range(5):
            raise LtsedgeError(f"int4 accuracy level {self.accuracy_level} must be 0-4 (0: unset, 1: fp32, "
                               f"2: fp16, 3: bf16, 4: int8)")

    def for_precision(self, precision: str) -> dict:
        """The options that apply to ``precision`` (what its metadata and store key record)."""
        fields = {"int8": ("per_channel",), "int4": ("block_size", "symmetric", "accuracy_level")}.get(precision, ())
        return {k: v for k, v in asdict(self).items() if k in fields}

    def key(self, precision: str) -> str | None:
        """A store-key value for options other than the defaults (None: defaults, nothing to add)."""
        mine = self.for_precision(precision)
        if mine == QuantOptions().for_precision(precision):
            return None
        return "-".join(f"{k}{int(v) if isinstance(v, bool) else v}" for k, v in mine.items())


def check_precision(precision: str, runtime: str, execution_provider: str | None = "CPUExecutionProvider") -> None:
    """Refuse, before anything is exported or measured, a precision the target runtime or provider cannot run
    (``execution_provider`` None: the runtime only, as ``ExportOptions`` checks it)."""
    if precision not in PRECISIONS:
        raise LtsedgeError(f"--precision {precision!r}: must be one of {', '.join(PRECISIONS)}")
    if precision == "fp16" and execution_provider is not None and execution_provider not in FP16_PROVIDERS:
        raise LtsedgeError(f"--precision fp16 runs on the CUDA execution provider only, not {execution_provider}: "
                           f"on a CPU use int8 or int4")
    needed = MIN_ORT.get(precision)
    if needed and parse_version(runtime) < needed:
        raise LtsedgeError(f"--precision {precision} needs onnxruntime >= {needed[0]}.{needed[1]} (MatMulNBits), "
                           f"the target is onnxruntime {runtime}")
