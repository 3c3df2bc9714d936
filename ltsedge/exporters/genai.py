"""The configuration files of a bundle: onnxruntime-genai's ``genai_config.json`` and the Hugging Face
``config.json`` / ``generation_config.json``.

onnxruntime-genai (checked with 0.18): model type ``decoder`` is its generic decoder-only model (a
backbone may name its family's, ``Backbone.genai_model_type``: ``llama`` runs the same model); it
feeds ``input_ids``, ``attention_mask`` and ``position_ids`` (int64) and the per-layer cache under the
name templates below. Its config has one ``num_key_value_heads`` and ``head_size`` for all layers,
which ltsedge's heterogeneous models do not have: with ``past_present_share_buffer`` off, genai
starts from an empty cache and feeds each ``present`` back as ``past`` with the shapes the model
gives it, so every layer keeps its own heads (tested: a model of 2, 8 and 4 heads per layer
generates the reference's tokens and logits). The config's head fields hold the heads and head size
the first cache is stored in (as the graph declares it): H, every cache's, under the uniform layout
(``backbones.kv_cache``), that layer's own under the per-layer one, its key/value heads with grouped
queries; ``config.json`` carries every layer's.

``config.json`` is the Hugging Face family's own (``model_type`` ``gpt2``, ``opt`` or a backbone's
``hf_model_type``, e.g. ``llama``; transformers' field names) where that reading is true (``hf_family``),
so Optimum's ``ORTModelForCausalLM`` and transformers.js load the bundle unchanged (tests/test_runtimes.py,
tests/test_transformersjs.py). Optimum sizes every layer's empty cache from the one head count: with the
uniform cache layout (GPT-2's and OPT's default; a Llama's each layer's key/value heads repeated to one count)
that is every layer's, whatever the layers' own heads; with the per-layer layout (Llama's default) only models
with equal heads in every layer generate there, and a Llama only with ``head_dim = hidden_size /
num_attention_heads`` (Optimum's head size, checked with optimum-onnx 0.1.0: it ignores ``head_dim``;
``exporters.optimum`` says which bundles it loads). Its layer count is the number of caches, as genai's
``num_hidden_layers``.
"""

from __future__ import annotations

import ltsedge
from ltsedge.backbones import get_backbone
from ltsedge.backbones.kv_cache import PAST, PRESENT, cache_layers, cache_shapes, check_cache_layout

LAYER_NORM_EPS = 1e-5  # both families' (ltsedge.backbones.gpt2.model, opt.model; not imported: they need torch)
# backbone = its Hugging Face model_type -> the class Transformers builds for it
HF_FAMILIES = {"gpt2": "GPT2LMHeadModel", "opt": "OPTForCausalLM"}


def special_token_ids(arch, tokenizer: dict | None = None, given: dict | None = None) -> dict:
    """bos/eos/pad ids: ``given``'s (those the tokenizer's files name, ``exporters.tokenizer``), else found among
    tokenizer.json's special tokens by name; eos defaults to the last id (GPT-2's rule), bos and pad to eos
    (its first, where it is a list)."""
    tokens = (tokenizer or {}).get("added_tokens") or []
    special = {str(t.get("content", "")).lower(): t["id"] for t in (tokens if isinstance(tokens, list) else [])
               if isinstance(t, dict) and t.get("special") and type(t.get("id")) is int  # not a bool
               and 0 <= t["id"] < arch.vocab_size}
    given = given or {}

    def find(kind: str, *words: str):
        if f"{kind}_token_id" in given:
            return given[f"{kind}_token_id"]
        return next((tid for content, tid in special.items() if any(w in content for w in words)), None)

    eos = find("eos", "endoftext", "</s>", "eos")
    eos = arch.vocab_size - 1 if eos is None else eos
    first = eos[0] if isinstance(eos, list) else eos
    bos, pad = find("bos", "<s>", "bos", "startoftext"), find("pad", "pad")
    return {"bos_token_id": first if bos is None else bos, "eos_token_id": eos, "pad_token_id": first if pad is None else pad}


def shares_buffer(arch, proto) -> bool:
    """Whether genai may run ``proto`` with one past/present buffer: every layer with a cache attends with
    GroupQueryAttention, which reads the past's length from its inputs and writes the new keys and values in
    place. A layer in standard operators (the plain form; the contrib form's layers whose head size the fused
    kernel does not take) concatenates: its present must be a new tensor of the total length."""
    fused = sum(node.op_type == "GroupQueryAttention" for node in proto.graph.node)
    return fused > 0 and fused == len(cache_layers(arch))


def genai_config(arch, spec, model_file: str, tokens: dict | None = None, share_buffer: bool = False) -> dict:
    """``tokens``: the bos/eos/pad ids (``special_token_ids``'s; None: its defaults)."""
    tokens = tokens or special_token_ids(arch)
    context = arch.n_positions
    # genai's "layers" are the caches: one per attention layer (FFN-only PAR layers have none).
    # One head count for all in genai's schema: the first cache's as declared (H, every cache's, if uniform),
    # its query heads the layer's own where the cache keeps the layer's head size (grouped key/value heads, in
    # either layout), else H (GPT-2's uniform layout regroups the layer's features into H heads).
    caches = cache_layers(arch)
    if caches:
        kv_heads, head_size = cache_shapes(spec)[0]
        heads = arch.n_head[caches[0]] if head_size == arch.d_head[caches[0]] else kv_heads
    else:
        heads = kv_heads = arch.n_head[0]
        head_size = arch.d_head[0]
    return {
        "model": {
            **tokens,
            "context_length": context,
            "vocab_size": arch.vocab_size,
            "type": get_backbone(arch.backbone).genai_model_type,
            "decoder": {
                "filename": model_file,
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "hidden_size": arch.d_model,
                "num_hidden_layers": len(cache_layers(arch)),
                "num_attention_heads": heads,
                "num_key_value_heads": kv_heads,
                "head_size": head_size,
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                           "position_ids": "position_ids",
                           "past_key_names": PAST.format(i="%d", kind="key"),
                           "past_value_names": PAST.format(i="%d", kind="value")},
                "outputs": {"logits": "logits",
                            "present_key_names": PRESENT.format(i="%d", kind="key"),
                            "present_value_names": PRESENT.format(i="%d", kind="value")},
            },
        },
        "search": {
            "max_length": context, "min_length": 0, "do_sample": False, "num_beams": 1, "num_return_sequences": 1,
            "top_k": 1, "top_p": 1.0, "temperature": 1.0, "repetition_penalty": 1.0, "length_penalty": 1.0,
            "no_repeat_ngram_size": 0, "diversity_penalty": 0.0, "early_stopping": True,
            # On for GroupQueryAttention (``shares_buffer``): a step copies no cache (genai 0.18 allocates each
            # layer's buffer from the shapes the graph declares, so per-layer key/value heads keep theirs).
            # Off for the plain form: its present is a new tensor of the total length every step.
            "past_present_share_buffer": share_buffer,
        },
    }


def hf_family(arch) -> str | None:
    """The Hugging Face ``model_type`` whose config reads true for ``arch`` as runtimes read it (None: none does).

    A runtime running the ONNX decoder reads from config.json only the class and cache names (model_type),
    the number of caches (the layer count), the cache heads and hidden size, vocabulary, special tokens and
    use_cache: the graph holds the network. So every GPT-2 and OPT model with a KV cache is its family's (and
    every model of a backbone that declares its ``hf_model_type``, e.g. Llama's): adaptive embeddings
    (``d_embed != d_model`` or ``div_val > 1``) change nothing runtimes read, and PAR block types only which
    layers have a cache (``hf_config`` counts those). Not so for Transformer-XL (no KV cache: a recurrence
    memory) or a PAR model without attention (no cache at all): those keep ``ltsedge-<backbone>``, which no
    runtime mistakes for a model it knows.
    """
    if not cache_layers(arch):
        return None
    declared = get_backbone(arch.backbone).hf_model_type
    if declared:
        return declared
    return arch.backbone if arch.backbone in HF_FAMILIES else None


def hf_config(arch, tokens: dict | None = None, cache_layout: str | None = None) -> dict:
    """A Hugging Face config: the family's ``model_type`` and field names where its reading is true
    (``hf_family``; a backbone's own ``hf_config_fields`` where it declares its ``hf_model_type``), ltsedge's
    own type with GPT-2's names otherwise; the output layer's tying; the bos/eos/pad ``tokens``
    (``special_token_ids``'s; None: its defaults); every layer's heads (and key/value
    heads where set), head size, FFN width and block type under ``ltsedge`` (and its ``n_layer``), and a KV-cache
    backbone's cache layout (``cache_layout``, None: the default) with the heads its first cache is stored
    in (``cache_heads``: H, every cache's, in the uniform layout). The standard head field holds those (one
    value for all layers, as runtimes that size the cache from it need, e.g. Optimum); the FFN width is
    layer 0's. The standard layer count (``n_layer`` / ``num_hidden_layers``) counts the layers that hold a
    KV cache, the attention layers, as genai_config's does: runtimes make one cache per layer it counts
    (cache i is layer ``cache_layers(arch)[i]``); it is the model's layer count unless FFN-only PAR layers
    have no cache (``ltsedge.standard_layer_count`` says so; ``ltsedge.n_layer`` is the model's)."""
    family = hf_family(arch)
    backbone = get_backbone(arch.backbone)
    cache, heads = {}, arch.n_head[0]
    if backbone.kv_cache:
        layout = check_cache_layout(cache_layout or backbone.default_cache_layout)
        shapes = cache_shapes(backbone.generate_spec(arch, layout))
        heads, head_dim = shapes[0] if shapes else (heads, arch.d_head[0])  # the first cache's: H if uniform
        cache = {"cache_layout": layout, "cache_heads": heads, "cache_head_dim": head_dim,
                 "cache_layers": list(cache_layers(arch))}
    # The family's layer count is the caches' (runtimes make one cache per layer); ltsedge's own type's is n_layer.
    layers = len(cache_layers(arch)) if family else arch.n_layer
    if family:
        cache["standard_layer_count"] = "cache layers (cache_layers), not n_layer"
    if family and backbone.hf_model_type:
        fields, hf_class = backbone.hf_config_fields(arch, layers, heads), backbone.hf_class
    else:
        fields = _opt_fields(arch, heads, layers) if family == "opt" else _gpt2_fields(arch, heads, layers)
        hf_class = HF_FAMILIES.get(family)
    per_layer_kv = {"n_kv_head_per_layer": list(arch.n_kv_head)} if arch.n_kv_head else {}
    return {
        "model_type": family or f"ltsedge-{arch.backbone}",
        "architectures": [hf_class if family else f"ltsedge.backbones.{arch.backbone}"],
        "vocab_size": arch.vocab_size,
        **fields,
        "tie_word_embeddings": arch.tie_embeddings is not False,
        "use_cache": True,
        **(tokens or special_token_ids(arch)),
        "ltsedge": {"version": ltsedge.__version__, "id": arch.id, "architecture": arch.to_dict(),
                    "n_layer": arch.n_layer, "n_head_per_layer": list(arch.n_head), **per_layer_kv,
                    "head_dim_per_layer": list(arch.d_head),
                    "d_inner_per_layer": list(arch.d_inner),
                    "block_type_per_layer": [arch.block_type(i) for i in range(arch.n_layer)], **cache},
    }


def _gpt2_fields(arch, heads: int, layers: int) -> dict:
    """transformers' GPT2Config names (ltsedge's GPT-2 uses the exact, erf GELU: "gelu")."""
    return {"n_positions": arch.n_positions, "n_embd": arch.d_model, "n_layer": layers,
            "n_head": heads, "n_inner": arch.d_inner[0], "activation_function": "gelu",
            "layer_norm_epsilon": LAYER_NORM_EPS}


def _opt_fields(arch, heads: int, layers: int) -> dict:
    """transformers' OPTConfig names: pre-LayerNorm, ReLU, biases, embeddings of d_model (no projection);
    OPT's max_position_embeddings counts positions, its table adds the offset of 2 rows, as ltsedge's does."""
    return {"hidden_size": arch.d_model, "num_hidden_layers": layers,
            "num_attention_heads": heads, "ffn_dim": arch.d_inner[0],
            "max_position_embeddings": arch.n_positions, "word_embed_proj_dim": arch.d_model,
            "do_layer_norm_before": True, "_remove_final_layer_norm": False, "activation_function": "relu",
            "enable_bias": True, "layer_norm_elementwise_affine": True,
            "dropout": 0.0, "attention_dropout": 0.0, "layerdrop": 0.0}


def hf_generation_config(arch, tokens: dict | None = None) -> dict:
    ids = tokens or special_token_ids(arch)
    return {"bos_token_id": ids["bos_token_id"], "eos_token_id": ids["eos_token_id"],
            "pad_token_id": ids["pad_token_id"], "max_length": arch.n_positions, "do_sample": False,
            "use_cache": True, "transformers_version": None, "ltsedge_version": ltsedge.__version__}
