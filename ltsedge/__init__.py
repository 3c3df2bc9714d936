"""ltsedge: training-free search for small Transformer language models that fit a device.

Decoder (non-embedding) parameters stand in for perplexity; latency and peak memory are measured
with onnxruntime on the device itself; NSGA-II keeps the Pareto frontier.
"""

import importlib

__version__ = "0.1.0"

# Loaded on first use (PEP 562): ``import ltsedge.anything`` runs this file first, and the measuring
# worker, which needs almost nothing of ltsedge, must not pay for the architecture and backbones.
_LAZY = {"Architecture": "ltsedge.architecture", "LtsedgeError": "ltsedge.errors",
         "ParamCounts": "ltsedge.proxy", "count_params": "ltsedge.proxy"}

__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ltsedge' has no attribute {name!r}")
