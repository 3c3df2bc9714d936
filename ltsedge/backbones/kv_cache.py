"""The declared inputs and outputs of a KV-cache decoder's ``generate`` variant (GPT-2, OPT; Llama lays out
its grouped key/value heads itself, ``backbones.llama.uniform_kv_heads``).

The naming Optimum exports and onnxruntime-genai reads by default. Batch, sequence and past are
symbolic; heads and head size are static, in one of two cache layouts (``CACHE_LAYOUTS``):

- ``per-layer``: each cache in its layer's own heads, ``[batch_size, n_head[i], past, d_model / n_head[i]]``
  (ltsedge's spaces give every layer its own head count), GPT-2's, OPT's and Llama's default;
- ``uniform``: every cache in one layout ``[batch_size, H, past, d_model / H]``, H the most heads of any
  layer with a cache (``uniform_heads``); each layer's attention reads it in its own heads
  (``cached_scores`` / ``cached_weighted``). Runtimes that size every layer's empty cache from
  config.json's one head count (Optimum) can feed it. A model whose attention layers
  all have H heads has the same graph, byte for byte, in both layouts.

Only layers with an attention block have a cache (an FFN-only PAR layer has none). Caches are numbered
0, 1, ... over those layers, in order: the consecutive names runtimes expect (onnxruntime-genai reads
``past_key_values.%d.key`` for 0 .. num_hidden_layers - 1); ``cache_layers`` maps a cache to its layer.
"""

from __future__ import annotations

from ltsedge.errors import LtsedgeError
from ltsedge.iospec import ExportSpec, TensorSpec

PAST = "past_key_values.{i}.{kind}"
PRESENT = "present.{i}.{kind}"
PER_LAYER, UNIFORM = "per-layer", "uniform"
CACHE_LAYOUTS = (PER_LAYER, UNIFORM)
# The layout of a backbone that declares none (``Backbone.default_cache_layout``). GPT-2, OPT and Llama declare
# per-layer: in onnxruntime-genai's loop a plain-form GPT-2 step after 960 tokens took 1.11x longer in this one,
# and fused attention needs each cache in its layer's own heads (docs/benchmarks.md).
DEFAULT_CACHE_LAYOUT = UNIFORM
# A bundle's batch axis (``workloads.BATCH_AXES``), named as Optimum's exports name it: transformers.js makes an
# app's empty caches from the graph's declared shapes and sizes a symbolic axis by name, knowing the batch only as
# "batch_size" (any other name gets 0 rows, which GroupQueryAttention refuses; a Concat took them).
BATCH = "batch_size"


def check_cache_layout(layout: str) -> str:
    if layout not in CACHE_LAYOUTS:
        raise LtsedgeError(f"cache layout {layout!r} is unknown (layouts: {', '.join(CACHE_LAYOUTS)})")
    return layout


def generate_spec(arch, cache_layout: str = DEFAULT_CACHE_LAYOUT) -> ExportSpec:
    return cache_spec(arch, [(n_head, arch.d_model // n_head) for n_head in cache_heads(arch, cache_layout)])


def cache_spec(arch, shapes) -> ExportSpec:
    """The generate variant with caches of the given static ``(heads, head size)``, one per attention layer
    in order (``cache_layers``): a family whose caches are not d_model wide (grouped key/value heads) gives
    its own."""
    inputs = [TensorSpec("input_ids", "int64", (BATCH, "sequence"), "input_ids"),
              TensorSpec("attention_mask", "int64", (BATCH, "total_sequence"), "attention_mask"),
              TensorSpec("position_ids", "int64", (BATCH, "sequence"), "position_ids")]
    outputs = [TensorSpec("logits", "float32", (BATCH, "sequence", arch.vocab_size), "logits")]
    for i, (n_head, d_head) in enumerate(shapes):
        for kind in ("key", "value"):
            inputs.append(TensorSpec(PAST.format(i=i, kind=kind), "float32",
                                     (BATCH, n_head, "past_sequence", d_head), "past"))
            outputs.append(TensorSpec(PRESENT.format(i=i, kind=kind), "float32",
                                      (BATCH, n_head, "total_sequence", d_head), "present"))
    return ExportSpec("generate", tuple(inputs), tuple(outputs))


def cache_layers(arch) -> tuple[int, ...]:
    """Cache i belongs to layer ``cache_layers(arch)[i]``: the layers with attention."""
    return arch.attention_layers


def uniform_heads(arch) -> int:
    """H of the uniform layout: the most heads of any layer with a cache (layer 0's without one). The
    layers' heads are then usually divisors of H, which the graph reads without copying the cache."""
    return max((arch.n_head[i] for i in cache_layers(arch)), default=arch.n_head[0])


def cache_heads(arch, cache_layout: str = DEFAULT_CACHE_LAYOUT) -> tuple[int, ...]:
    """The heads each cache is stored in (its head size is d_model / heads)."""
    check_cache_layout(cache_layout)
    if cache_layout == UNIFORM:
        return tuple(uniform_heads(arch) for _ in cache_layers(arch))
    return tuple(arch.n_head[layer] for layer in cache_layers(arch))


def cache_shapes(spec: ExportSpec) -> tuple[tuple[int, int], ...]:
    """Each cache's static ``(heads, head size)``, as ``spec`` declares its keys."""
    return tuple((t.dims[1], t.dims[3]) for t in spec.input("past") if t.name.endswith(".key"))


def layout_changes_graph(arch, cache_layout: str, backbone=None) -> bool:
    """Does ``cache_layout`` give another graph than the per-layer one (which all older exports have)?
    Only the uniform layout of a model whose caches differ in the per-layer one does. ``backbone``: the one
    whose ``generate_spec`` lays its caches out (Llama: key/value heads); None: this module's (GPT-2, OPT)."""
    spec_of = generate_spec if backbone is None else backbone.generate_spec
    return cache_shapes(spec_of(arch, cache_layout)) != cache_shapes(spec_of(arch, PER_LAYER))


def declared_cache_layout(arch, spec: ExportSpec, backbone=None) -> str:
    """The layout of a generate spec's caches: uniform when it is the uniform one (models with equal
    heads are both; they say uniform), else per-layer (also where the model has no uniform layout).
    ``backbone`` as for ``layout_changes_graph``."""
    spec_of = generate_spec if backbone is None else backbone.generate_spec
    try:
        uniform = cache_shapes(spec_of(arch, UNIFORM))
    except LtsedgeError:  # e.g. a Llama whose layers' key/value heads repeat to no one count
        return PER_LAYER
    return UNIFORM if cache_shapes(spec) == uniform else PER_LAYER


def cache_heads_of(spec: ExportSpec, cache: int) -> int:
    """The heads cache number ``cache`` is declared in (what the graph reads and returns)."""
    name = PAST.format(i=cache, kind="key")
    return next(t.dims[1] for t in spec.inputs if t.name == name)


# --- in the graph: attention over a cache of ``stored`` heads for a layer of ``n_head`` -------------------
# Head h of H holds features h*d/H .. (h+1)*d/H of a token, so a token's features in order are the same
# under any head count. H is the most heads of any layer, so a layer's head j is usually stored heads
# j*r .. j*r + r-1 (H = r*n): the attention reads the cache as [B, n, r, S, d/H] (a free Reshape) and
# sums the r partial scores; the values need no copy at all, the keys the one Transpose every layer's
# keys get. Where n does not divide H the cache is regrouped through [B, S, d] (two Transposes each).

def cached_scores(g, q: str, keys: str, stored: int, n_head: int, d_model: int) -> str:
    """Unscaled ``q [B, n_head, T, d/n_head] . keys`` of the cache ``[B, stored, S, d/stored]``:
    ``[B, n_head, T, S]``."""
    if stored == n_head or stored % n_head:
        return g.op("MatMul", q, layer_keys_t(g, keys, stored, n_head, d_model))
    r, size = stored // n_head, d_model // stored
    q_parts = g.op("Reshape", q, g.const([0, 0, 0, r, size]))
    q_parts = g.op("Transpose", q_parts, perm=[0, 1, 3, 2, 4])  # [B, n, r, T, e]
    k_parts = _by_layer_head(g, keys, stored, n_head, d_model)
    k_parts = g.op("Transpose", k_parts, perm=[0, 1, 2, 4, 3])  # [B, n, r, e, S]: the keys' one copy
    return g.op("ReduceSum", g.op("MatMul", q_parts, k_parts), g.const([2]), keepdims=0)


def cached_weighted(g, att: str, values: str, stored: int, n_head: int, d_model: int) -> str:
    """``att [B, n_head, T, S]`` times the cache's values ``[B, stored, S, d/stored]``:
    ``[B, n_head, T, d/n_head]``."""
    if stored == n_head or stored % n_head:
        return g.op("MatMul", att, layer_values(g, values, stored, n_head, d_model))
    parts = g.op("MatMul", g.op("Unsqueeze", att, g.const([2])),
                 _by_layer_head(g, values, stored, n_head, d_model))  # [B, n, r, T, e]
    return g.op("Reshape", g.op("Transpose", parts, perm=[0, 1, 3, 2, 4]), g.const([0, 0, 0, d_model // n_head]))


def _by_layer_head(g, cache: str, stored: int, n_head: int, d_model: int) -> str:
    """``[B, H, S, d/H]`` as ``[B, n, r, S, d/H]`` (H = r*n): a view, no copy."""
    return g.op("Reshape", cache, g.const([0, n_head, stored // n_head, -1, d_model // stored]))


def layer_keys_t(g, keys: str, stored: int, n_head: int, d_model: int) -> str:
    """Keys ``[B, stored, S, d/stored]`` -> the layer's transposed keys ``[B, n_head, d/n_head, S]``."""
    if stored == n_head:
        return g.op("Transpose", keys, perm=[0, 1, 3, 2])
    return g.op("Transpose", _through_tokens(g, keys, n_head, d_model), perm=[0, 2, 3, 1])


def layer_values(g, values: str, stored: int, n_head: int, d_model: int) -> str:
    """Values ``[B, stored, S, d/stored]`` -> the layer's ``[B, n_head, S, d/n_head]`` (no node when equal)."""
    if stored == n_head:
        return values
    return g.op("Transpose", _through_tokens(g, values, n_head, d_model), perm=[0, 2, 1, 3])


def _through_tokens(g, cache: str, n_head: int, d_model: int) -> str:
    """``[B, H, S, d/H]`` -> ``[B, S, H, d/H]`` -> ``[B, S, n_head, d/n_head]``."""
    tokens_first = g.op("Transpose", cache, perm=[0, 2, 1, 3])
    return g.op("Reshape", tokens_first, g.const([0, 0, n_head, d_model // n_head]))


def kv_cache_bytes(arch, batch: int, tokens: int, bytes_per_value: int = 4) -> int:
    """The cache of ``tokens`` tokens: keys and values of every attention layer (heads x head size = d_model,
    in either layout; key/value heads x head size with grouped queries)."""
    width = sum(arch.kv_heads[i] * arch.d_head[i] for i in cache_layers(arch))
    return 2 * batch * tokens * width * bytes_per_value
