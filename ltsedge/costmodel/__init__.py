"""A learned on-device cost model: predicted latency ratios and peak memory, with intervals.

``features`` counts what an architecture costs on a workload, ``fit`` turns this machine's
measurements into a non-negative linear fit with a conformal interval, ``model`` holds one fit per
figure, ``samples`` selects the training figures from the measurement store by its keys, and
``screening`` decides, in a search, which candidates must be measured.
"""

from ltsedge.costmodel.fit import MIN_SAMPLES, Prediction
from ltsedge.costmodel.model import CostModel, Estimate

__all__ = ["MIN_SAMPLES", "CostModel", "Estimate", "Prediction"]
