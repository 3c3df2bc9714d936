"""A model as it travels to a fleet's agent: its ONNX bytes and the external data files it names (by
their locations beside it, never outside its folder), written side by side again on the agent, as
onnxruntime looks for them."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from ltsedge.errors import LtsedgeError

AGENT_MODEL = "model.onnx"  # the model's name on the agent, beside its data files


def payload(model) -> tuple[bytes, dict[str, bytes] | None]:
    """What a model travels as: its bytes, and the external data files it names (by location)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), None
    path = Path(model)
    content = _read(path)
    locations = external_data_locations(content, path)
    return content, {name: _read(path.parent / name, f"external data of {path}:") for name in locations} or None


def external_data_locations(content: bytes, path) -> list[str]:
    """The files beside the model that hold its external data (relative paths, each once)."""
    if b"location" not in content:  # the key every external tensor carries: most models, no parsing
        return []
    import onnx

    try:
        proto = onnx.ModelProto.FromString(content)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError: the agent's onnxruntime says why it does not load
        return []
    locations = data_locations(proto)
    for location in locations:
        _check_location(location, path)
    return locations


def data_locations(proto) -> list[str]:
    """The external data files a parsed model (or graph) names, relative to its file, each once."""
    from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

    return sorted({ExternalDataInfo(t).location for t in _get_all_tensors(proto) if uses_external_data(t)})


def inside_model_dir(location: str) -> bool:
    """Does a data file's ``location`` stay in its model's folder (no absolute path, drive or ``..``)?"""
    parts = PurePosixPath(location.replace("\\", "/")).parts
    return bool(parts) and not location.startswith(("/", "\\")) and ".." not in parts and ":" not in parts[0]


def _check_location(location: str, model) -> None:
    if not inside_model_dir(location):
        raise LtsedgeError(f"model {model} names external data {location!r} outside its own directory; "
                           f"it cannot be measured on a fleet")


def write_beside(folder: Path, model: bytes, data: dict[str, bytes]) -> Path:
    """The model and its data files written into ``folder``; the model's path."""
    for location, content in data.items():
        _check_location(location, "sent")
        target = folder / location
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    name = AGENT_MODEL
    while name in data:  # a data file may bear any name
        name = "_" + name
    path = folder / name
    path.write_bytes(model)
    return path


def _read(path, what: str = "model") -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise LtsedgeError(f"cannot read {what} {path}: {e.strerror or e}") from None
