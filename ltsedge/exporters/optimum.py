"""Whether Hugging Face Optimum's ``ORTModelForCausalLM`` loads a bundle: it makes every layer's empty cache
from config.json alone, ``[batch, heads, 0, head size]`` with ``heads`` its ``num_key_value_heads`` (Llama)
or its one head count (GPT-2, OPT) and ``head size`` ``hidden_size / num_attention_heads`` (it ignores
``head_dim``; optimum-onnx 0.1.0), and onnxruntime refuses a cache the graph declares otherwise. Runtimes that
read each cache's shape from the graph (onnxruntime-genai, transformers.js) load every layout.
"""

from __future__ import annotations

from ltsedge.backbones import get_backbone
from ltsedge.backbones.kv_cache import UNIFORM, cache_shapes
from ltsedge.errors import LtsedgeError
from ltsedge.exporters.genai import hf_config

OPTIMUM_FAMILIES = ("gpt2", "opt", "llama")  # config.json model_types whose caches Optimum sizes as above


def optimum_cache_mismatch(spec, config: dict) -> str | None:
    """Why Optimum cannot feed the caches ``spec`` declares, reading ``config`` (config.json); None where it can
    or where it is no family Optimum sizes so."""
    if config.get("model_type") not in OPTIMUM_FAMILIES:
        return None
    hidden = config.get("hidden_size", config.get("n_embd"))
    heads = config.get("num_attention_heads", config.get("n_head"))
    wanted = (config.get("num_key_value_heads", heads), hidden // heads)
    shapes = cache_shapes(spec)
    if all(shape == wanted for shape in shapes):
        return None
    declared = ", ".join(f"{h}x{d}" for h, d in dict.fromkeys(shapes))
    return (f"it gives every cache {wanted[0]}x{wanted[1]} (heads x head size, from config.json) and this "
            f"bundle's caches are {declared}")


def optimum_note(exported) -> str | None:
    """One line for a bundle Optimum cannot load, naming the layout that it loads where the model has one;
    None where it loads (or for a model that is no bundle)."""
    arch, spec = exported.arch, exported.spec
    backbone = get_backbone(arch.backbone)
    if spec.variant != "generate" or not backbone.kv_cache:
        return None
    why = optimum_cache_mismatch(spec, hf_config(arch, cache_layout=exported.cache_layout))
    if why is None:
        return None
    fix = "; --cache-layout uniform exports one it loads (a larger KV cache)" if uniform_loads(exported) else ""
    return f"Optimum's ORTModelForCausalLM cannot load this bundle: {why}{fix} (onnxruntime-genai and " \
           f"transformers.js load it)"


def uniform_loads(exported) -> bool:
    """Would the same model in the uniform cache layout load in Optimum (False where it already is in it, or has
    no such layout)?"""
    arch = exported.arch
    if exported.cache_layout == UNIFORM:
        return False
    try:
        uniform = get_backbone(arch.backbone).generate_spec(arch, UNIFORM)
    except LtsedgeError:  # no uniform layout for this model
        return False
    return optimum_cache_mismatch(uniform, hf_config(arch, cache_layout=UNIFORM)) is None
