"""ltsedge: training-free search for small Transformer language models that fit a device.

Decoder (non-embedding) parameters stand in for perplexity; latency and peak memory are measured
with onnxruntime on the device itself; NSGA-II keeps the Pareto frontier.
"""

__version__ = "0.1.0"

from ltsedge.architecture import Architecture  # noqa: E402
from ltsedge.errors import LtsedgeError  # noqa: E402
from ltsedge.proxy import ParamCounts, count_params  # noqa: E402

__all__ = ["Architecture", "LtsedgeError", "ParamCounts", "count_params", "__version__"]
