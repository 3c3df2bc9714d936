"""An exported model (``ExportedModel``): its graph and weights held apart until written, in one file or
with an external data file, atomically; the metadata prefix every ltsedge model carries. Below the
exporter and the quantizers, which both make one."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.backbones.kv_cache import declared_cache_layout
from ltsedge.errors import LtsedgeError
from ltsedge.exporters.options import default_external
from ltsedge.files import data_file_name
from ltsedge.iospec import ExportSpec
from ltsedge.ortcompat import OnnxTarget
from ltsedge.wire import serialized_parts

if TYPE_CHECKING:
    from ltsedge.exporters.options import ExportOptions

METADATA_PREFIX = "ltsedge."


PROTOBUF_LIMIT = 2**31 - 2**20  # protobuf cannot hold a message of 2 GB; keep a MB for the graph


@dataclass(frozen=True)
class ExportedModel:
    """An exported model, held as its graph and its weights (views of the PyTorch model's tensors):
    serialized only when written, with the weights inline or in an external data file."""

    arch: Architecture
    target: OnnxTarget
    spec: ExportSpec
    proto: onnx.ModelProto  # everything but the weights
    weights: list  # (initializer name, array), in file order
    precision: str = "fp32"  # fp32 | fp16 | int8 | int4 (ltsedge.exporters.quantize)
    options: ExportOptions | None = None  # what it was exported with (None: a model made by hand)

    @property
    def nbytes(self) -> int:
        return self.proto.ByteSize() + sum(a.nbytes for _, a in self.weights)

    @property
    def parts(self) -> list:
        """The single file's bytes in pieces (the weights inline)."""
        return serialized_parts(self.proto, self.weights)[0]

    @property
    def cache_layout(self) -> str | None:
        """The layout of its KV cache (``backbones.kv_cache.CACHE_LAYOUTS``), read from its declared inputs;
        None without one (the forward variant, a recurrence memory)."""
        return cache_layout_of(self.arch, self.spec)

    def needs_external_data(self) -> bool:
        return self.nbytes > PROTOBUF_LIMIT

    def external(self, external_data: bool | None = None) -> bool:
        """Are its weights written to a data file beside it? ``external_data`` when given, else its
        options' ``external_data``, else by default (``default_external``)."""
        if external_data is None and self.options is not None:
            external_data = self.options.external_data
        if external_data is None:
            return default_external(self.spec.variant) or self.needs_external_data()
        return external_data

    def to_bytes(self) -> bytes:
        if self.needs_external_data():
            raise LtsedgeError(f"{self.arch.id} is {self.nbytes / 2**30:.2f} GiB: over protobuf's 2 GB, it can only "
                               f"be saved with its weights in an external data file")
        return b"".join(self.parts)

    def save(self, path: str | Path, *, digest: bool = True, external_data: bool | None = None) -> str | None:
        """Write the model (atomically: never a half-written file under its final name); return the
        sha256 of the model file, from the very bytes written (``digest=False`` skips it for scratch files).

        ``external_data``: weights in ``<file>_data`` beside it (None: as its options say, else as ``external``
        decides).
        """
        return self.save_files(path, digest=digest, external_data=external_data).get(Path(path).name)

    def save_files(self, path: str | Path, *, digest: bool = True, external_data: bool | None = None
                   ) -> dict[str, str | None]:
        """Like ``save``; returns every file written (the model, and its data file) -> sha256."""
        path = Path(path)
        if not path.name or path.is_dir():
            raise LtsedgeError(f"cannot write the model to {str(path)!r}: give a file name, e.g. -o model.onnx")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LtsedgeError(f"cannot create {path.parent}: {e.strerror or e}") from None
        external = self.external(external_data)
        data_name = data_file_name(path.name)
        model_parts, data_parts = serialized_parts(self.proto, self.weights, data_name if external else None)
        written = {}
        if external:  # the data first: a model file never points at a data file that is not there yet
            written[data_name] = _write(path.with_name(data_name), data_parts, digest)
        written[path.name] = _write(path, model_parts, digest)
        return written


def _write(path: Path, parts: list, digest: bool) -> str | None:
    tmp = path.with_name(path.name + ".partial")
    sha = hashlib.sha256() if digest else None
    try:
        with open(tmp, "wb") as f:
            for part in parts:
                if sha:
                    sha.update(part)
                f.write(part)
        tmp.replace(path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise LtsedgeError(f"cannot write {path}: {e.strerror or e}") from None
    return sha.hexdigest() if sha else None


def cache_layout_of(arch: Architecture, spec: ExportSpec) -> str | None:
    """The KV-cache layout ``spec`` declares; None where it has no KV cache."""
    backbone = get_backbone(arch.backbone)
    if spec.variant != "generate" or not backbone.kv_cache:
        return None
    return declared_cache_layout(arch, spec, backbone)
