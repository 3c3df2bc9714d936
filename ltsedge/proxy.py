"""The training-free proxy: decoder (non-embedding) parameters, counted analytically.

Decoder = the blocks (and a final LayerNorm). Everything else (token and position embeddings,
adaptive-embedding projections, the output layer's own parameters) depends on the vocabulary and
is reported as ``embedding_params``. Each backbone counts its own (``backbones/<name>/params.py``);
no torch: counting is instant, and the tests prove the formulas equal to counting the PyTorch
modules' parameters.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone


@dataclass(frozen=True)
class ParamCounts:
    decoder_params: int
    embedding_params: int

    @property
    def total_params(self) -> int:
        return self.decoder_params + self.embedding_params

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "total_params": self.total_params}


def count_params(arch: Architecture) -> ParamCounts:
    backbone = get_backbone(arch.backbone)
    return ParamCounts(backbone.decoder_params(arch), backbone.embedding_params(arch))


def decoder_merit(arch: Architecture, decoder_params: int) -> float:
    """The quality axis of a front, higher better, by the study's proxy: the decoder-parameter count. A
    proxy fitted on the user's text (``proxycheck.fitted.FittedProxy.merit``) takes the same arguments."""
    return float(decoder_params)


def merit_of(candidate, merit=decoder_merit) -> float:
    """``merit`` of anything with ``arch`` and ``params`` (a search's candidate)."""
    return merit(candidate.arch, candidate.params.decoder_params)
