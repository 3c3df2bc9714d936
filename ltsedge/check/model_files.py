"""What ``ltsedge check`` reads of the model files before measuring them (``inspect_model``: hash,
ltsedge architecture id, declared inputs, precision) and the input shapes each is measured at, checked
against the inputs it declares (a wrong name or shape is bad input, exit 2, never a failed model)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ltsedge.check.budgets_file import Target
from ltsedge.devices import DeviceProfile
from ltsedge.errors import LtsedgeError
from ltsedge.files import sha256_of
from ltsedge.runners.inputs import resolve_shape


@dataclass(frozen=True)
class ModelInfo:
    sha256: str
    architecture_id: str | None
    inputs: dict[str, list] | None  # declared inputs (not initializers) -> dims; None if onnx cannot read it
    precision: dict | None = None  # what its operators run at (model_precision.precision_of); None: unreadable
    variant: str = "forward"  # what it was exported as (an ltsedge model says; any other is timed on forward)


def inspect_model(path: Path) -> ModelInfo:
    """sha256, ltsedge architecture id and declared inputs; a file onnx cannot parse gets None for
    the last two (onnxruntime then reports why it does not load)."""
    sha256 = sha256_of(path)
    proto = _onnx_proto(path)
    if proto is None:
        return ModelInfo(sha256, None, None)
    from ltsedge.exporters import read_metadata
    from ltsedge.exporters.model_precision import precision_of

    metadata = read_metadata(proto)
    return ModelInfo(sha256, metadata.get("id"), _declared_inputs(proto), precision_of(proto),
                     metadata.get("variant", "forward"))


def _onnx_proto(path: Path):
    """The model's graph without its external weights; None when onnx cannot parse it."""
    try:
        import onnx

        return onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - not parseable here; the runner reports the load failure
        return None


def _declared_inputs(proto) -> dict[str, list | None]:
    """The graph's inputs that are not initializers -> their dims (an int, a symbolic name or None each)."""
    initializers = {t.name for t in proto.graph.initializer}
    inputs = {}
    for vi in proto.graph.input:
        if vi.name in initializers:
            continue
        tensor = vi.type.tensor_type
        inputs[vi.name] = ([d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim]
                           if tensor.HasField("shape") else None)
    return inputs


def check_shapes(path: Path, shapes: dict[str, list[int]], profile: DeviceProfile, where: str) -> None:
    """Shapes against the inputs the model at ``path`` declares: a wrong name or shape is bad input, found
    before anything is measured (nothing to check when onnx cannot read the model)."""
    proto = _onnx_proto(path) if shapes else None
    if proto is not None:
        _check_declared(where, _declared_inputs(proto), shapes, profile)


def _check_declared(where: str, inputs: dict[str, list | None], shapes: dict[str, list[int]],
                    profile: DeviceProfile) -> None:
    for name, dims in shapes.items():
        if name not in inputs:
            raise LtsedgeError(f"{where}: shape given for {name!r}, which is not an input of the model "
                               f"(inputs: {', '.join(inputs) or 'none'})")
        try:
            resolve_shape(name, inputs[name], profile, dims)
        except LtsedgeError as e:
            raise LtsedgeError(f"{where}: {e}") from None


def model_shapes(target: Target, info: ModelInfo, cli: dict[str, list[int]], profile: DeviceProfile
                 ) -> dict[str, list[int]]:
    """The model's shapes from the budgets file, plus the --shape ones for inputs it declares
    (--shape wins); each checked against the declared input, so a wrong shape is bad input (exit 2)
    rather than a model that "failed to measure"."""
    shapes = dict(target.shapes)
    if info.inputs is None:
        shapes.update(cli)
        return shapes
    shapes.update({k: v for k, v in cli.items() if k in info.inputs})
    _check_declared(target.display, info.inputs, shapes, profile)
    return shapes


def check_cli_shapes(cli: dict[str, list[int]], infos: list[ModelInfo]) -> None:
    known = [i.inputs for i in infos if i.inputs is not None]
    if not known:
        return
    for name in cli:
        if not any(name in inputs for inputs in known):
            names = sorted({n for inputs in known for n in inputs})
            raise LtsedgeError(f"--shape {name}=...: no model has an input {name!r} (inputs: {', '.join(names)})")
