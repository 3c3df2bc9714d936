"""Which of a GPT-2 or OPT model's layers attend with onnxruntime's GroupQueryAttention in the contrib graph form
(``contrib_graph.py``), and whether all that hold a cache do: light, so the backbones choose a bundle's form
(``generate_form``) without building a graph.
"""

from __future__ import annotations

from ltsedge.backbones.kv_cache import cache_heads_of, cache_layers
from ltsedge.iospec import ExportSpec

GQA_HEAD_MULTIPLE = 16  # GroupQueryAttention's CPU kernel: "head_size shall be a multiple of 16"


def fused(arch, layer: int, stored: int | None = None) -> bool:
    """Does ``layer`` attend with GroupQueryAttention: its head size a multiple of 16 and, with a cache, that
    cache in the layer's own heads (``stored``)?"""
    n_head = arch.n_head[layer]
    return (arch.d_model // n_head) % GQA_HEAD_MULTIPLE == 0 and stored in (None, n_head)


def fuses_every_cache(arch, spec: ExportSpec) -> bool:
    """Does every layer with a cache in the generate ``spec`` attend with GroupQueryAttention, so that
    onnxruntime-genai runs the bundle with one past/present buffer (``exporters.genai.shares_buffer``)?"""
    caches = cache_layers(arch)
    return bool(caches) and all(fused(arch, layer, cache_heads_of(spec, c)) for c, layer in enumerate(caches))
