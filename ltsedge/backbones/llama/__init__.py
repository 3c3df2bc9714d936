"""Llama (RMSNorm, rotary positions, grouped-query attention, SwiGLU): the family small on-device
models ship in (SmolLM2, MobileLLM, TinyLlama; OpenELM's per-layer heads and widths).

Its own architecture fields (``architecture.FAMILY_FIELDS``): per-layer ``n_kv_head`` (each layer's
``n_head`` a multiple of it), one ``head_dim`` (a layer's attention ``n_head x head_dim`` wide, which may
differ from d_model), ``tie_embeddings``, ``rope_theta``, ``rms_norm_eps``. ``params.py`` counts as
transformers' ``LlamaForCausalLM`` does, ``model.py`` is the PyTorch reference, ``graph.py`` the ONNX
graph; this file ties them into the ``Backbone``, with its Hugging Face and onnxruntime-genai names.
"""

from __future__ import annotations

import dataclasses
import math

from ltsedge.backbones.base import BaselineSpec, PackageBackbone, grid
from ltsedge.backbones.kv_cache import PER_LAYER, UNIFORM, cache_layers, cache_spec, check_cache_layout
from ltsedge.errors import LtsedgeError

# transformers' LlamaConfig defaults where the architecture leaves a field unset, but for the tied output
# layer (every other backbone's, and what models below a billion parameters ship) and the RMSNorm
# epsilon (1e-5, SmolLM2's, TinyLlama's and MobileLLM's; transformers' is 1e-6).
DEFAULT_ROPE_THETA = 10000.0
DEFAULT_RMS_NORM_EPS = 1e-5
SMOLLM2_VOCAB_SIZE = 49152  # SmolLM2's tokenizer, the default space's and baseline's vocabulary
SMOLLM2_CONTEXT = 8192


class LlamaBackbone(PackageBackbone):
    name = "llama"
    description = "Llama: pre-RMSNorm blocks, rotary positions, grouped-query attention, SwiGLU"
    variants = ("forward", "generate")
    # 2: int4 reads the tied embedding from the output layer's blocks, and quantized logits are not copied;
    # 3: q, k and v from one packed projection, the mask added to the scores; 4: a bundle's batch axis is
    # "batch_size" (kv_cache.BATCH: transformers.js's own empty caches get their rows)
    graph_version = 4
    # standard operators (graph.py; faster on a CPU: benchmarks/llama_graph_form.py), or onnxruntime's fused ones
    graph_forms = ("plain", "contrib")
    # Its bundles: GroupQueryAttention reading and writing one past/present buffer in onnxruntime-genai's loop
    # (no cache copied per step): after 2000 tokens a step took 23-29 ms there, the plain form's 45-53 ms
    # (benchmarks/llama_builder_parity.py, docs/benchmarks.md)
    generate_graph_form = "contrib"
    int4_embedding_from_blocks = True
    model_class = "Llama"
    supports_adaptive = False  # plain embeddings (d_embed = d_model)
    # n_positions is its context (max_position_embeddings): the rotary angles are computed, not a table, but
    # a model is not meant to be run past the context it declares.
    learned_positions = True
    architecture_fields = ("n_kv_head", "head_dim", "tie_embeddings", "rope_theta", "rms_norm_eps")
    # Hugging Face's LlamaForCausalLM state_dict carries the tied output layer under its own name.
    tied_aliases = {"lm_head.weight": "embed_tokens.weight"}
    # Each layer's cache in its own key/value heads by default: the least memory, and what onnxruntime-genai and
    # transformers.js read (each cache's shape from the graph); the uniform layout is for Optimum, which sizes
    # every layer's cache from config.json's one count (``uniform_kv_heads``).
    kv_cache = True
    default_cache_layout = PER_LAYER
    genai_model_type = "llama"
    hf_model_type = "llama"
    hf_class = "LlamaForCausalLM"

    def field_defaults(self, arch) -> dict:
        """Multi-head attention; head_dim when every layer's d_model / n_head is one size (else each layer's
        own); a tied output layer; transformers' rope_theta; an RMSNorm epsilon of 1e-5."""
        sizes = set(arch.d_head)
        return {"n_kv_head": arch.n_head, "head_dim": sizes.pop() if len(sizes) == 1 else None,
                "tie_embeddings": True, "rope_theta": DEFAULT_ROPE_THETA, "rms_norm_eps": DEFAULT_RMS_NORM_EPS}

    def validate(self, arch) -> None:
        for i, head_dim in enumerate(arch.d_head):
            if head_dim % 2:
                where = (f"'head_dim' = {head_dim}" if arch.head_dim is not None else
                         f"'n_head[{i}]' = {arch.n_head[i]} (a head size of d_model / n_head = {head_dim})")
                raise LtsedgeError(f"architecture field {where} is invalid: rotary positions rotate pairs of a "
                                   f"head's features, so the head size must be even")

    def generate_spec(self, arch, cache_layout: str | None = None):
        """Each cache static in its heads and head size: per layer, the layer's own key/value heads; uniform,
        ``uniform_kv_heads`` in every layer."""
        if check_cache_layout(cache_layout or self.default_cache_layout) == UNIFORM:
            heads = uniform_kv_heads(arch)
            return cache_spec(arch, [(heads, arch.d_head[i]) for i in cache_layers(arch)])
        return cache_spec(arch, [(arch.kv_heads[i], arch.d_head[i]) for i in cache_layers(arch)])

    def build_graph(self, arch, weights, opset: int, variant: str, cache_layout: str | None = None,
                    form: str = "plain", **options):
        """A uniform cache: each layer's key/value heads repeated to ``uniform_kv_heads`` in its projection, so
        the layer attends as one of that many key/value heads (the same attention: each query head reads a copy
        of its own key/value head)."""
        if variant == "generate" and check_cache_layout(cache_layout or self.default_cache_layout) == UNIFORM:
            heads = uniform_kv_heads(arch)
            if set(arch.kv_heads) != {heads}:  # equal key/value heads: the per-layer graph, byte for byte
                arch, weights = _repeated_kv_heads(arch, weights, heads)
        return super().build_graph(arch, weights, opset, variant, cache_layout, form, **options)

    def default_space(self) -> dict:
        """The sub-billion shapes apps ship, and the layers between them: 2..32 layers, d_model 256..1280,
        per layer 2..20 query heads sharing 1..5 key/value heads and a SwiGLU 256..5120 wide (at least half
        d_model: OpenELM's narrowest is 0.6 x), one head size of 32..128; tied output, SmolLM2's vocabulary
        and context. SmolLM2-135M (30 x 576, 9 / 3 heads of 64, FFN 1536), SmolLM2-360M (32 x 960, 15 / 5,
        2560), MobileLLM-125M's shape, Qwen2.5-0.5B's (24 x 896, 14 / 2, 4864) and OpenELM-270M's per-layer
        12..20 / 3..5 heads and 768..5120 FFNs are in it. Untied output layers double the embedding at no
        decoder parameter, so they only lose: a space file opens them (``tie_embeddings = [true, false]``)."""
        return {"n_layer": grid(2, 32, 1), "d_model": grid(256, 1280, 64), "n_head": grid(2, 20, 1),
                "n_kv_head": grid(1, 5, 1), "head_dim": grid(32, 128, 16), "d_inner": grid(256, 5120, 64),
                "d_inner_min_ratio": 0.5, "tie_embeddings": (True,), "d_embed": (), "div_val": (1,),
                "vocab_size": SMOLLM2_VOCAB_SIZE, "n_positions": SMOLLM2_CONTEXT}

    def baseline(self) -> BaselineSpec:
        """SmolLM2-135M's block (d_model 576, 9 query heads sharing 3 key/value heads of 64, SwiGLU 1536),
        2 .. 30 layers deep: its 30-layer point is SmolLM2-135M itself."""
        return BaselineSpec(d_model=576, d_inner=1536, n_head=9, n_kv_head=3, head_dim=64, layers=grid(2, 30, 2))

    def hf_config_fields(self, arch, layers: int, cache_heads: int) -> dict:
        """transformers' LlamaConfig names. One value per field: layer 0's heads, its cache's key/value heads
        (``cache_heads``: every layer's in the uniform layout) and its SwiGLU width (runtimes that read every
        layer's cache from the graph, onnxruntime-genai and transformers.js, need no more; ``ltsedge`` in
        config.json has every layer's)."""
        return {"hidden_size": arch.d_model, "num_hidden_layers": layers, "num_attention_heads": arch.n_head[0],
                "num_key_value_heads": cache_heads, "head_dim": arch.d_head[0],
                "intermediate_size": arch.d_inner[0], "max_position_embeddings": arch.n_positions,
                "rope_theta": arch.rope_theta, "rope_scaling": None, "rms_norm_eps": arch.rms_norm_eps,
                "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
                "attention_dropout": 0.0, "pretraining_tp": 1}


def uniform_kv_heads(arch) -> int:
    """The key/value heads of every cache in the uniform layout: the fewest that each layer's key/value heads
    divide (the largest count, where it is a multiple of the others) and that divide each layer's query heads.
    A model with none, or with head sizes that differ between layers, has no uniform layout (one line)."""
    layers = cache_layers(arch)
    sizes = sorted({arch.d_head[i] for i in layers})
    if len(sizes) > 1:
        raise LtsedgeError(f"no uniform cache layout for this model: its layers' head sizes differ ({sizes}); "
                           f"export it with the per-layer layout")
    heads = math.lcm(*(arch.kv_heads[i] for i in layers))
    for i in layers:
        if arch.n_head[i] % heads:
            raise LtsedgeError(f"no uniform cache layout for this model: its key/value heads repeat to {heads} in "
                               f"every layer, which layer {i}'s {arch.n_head[i]} query heads cannot share; export "
                               f"it with the per-layer layout")
    return heads


def _repeated_kv_heads(arch, weights, heads: int):
    """``arch`` with ``heads`` key/value heads in every layer, and the weights giving each layer's query heads the
    same keys and values: key/value head j of a layer with k of them is heads j*r .. j*r + r-1 (r = heads / k),
    which its query heads of group j read (a group of n / heads, n / k in all)."""
    import numpy as np

    weights = dict(weights)
    for i, kv in enumerate(arch.kv_heads):
        for name in ("k_proj", "v_proj"):
            key = f"layers.{i}.self_attn.{name}.weight"
            rows = weights[key].reshape(kv, arch.d_head[i], arch.d_model)
            weights[key] = np.repeat(rows, heads // kv, axis=0).reshape(heads * arch.d_head[i], arch.d_model)
    return dataclasses.replace(arch, n_kv_head=(heads,) * arch.n_layer), weights
