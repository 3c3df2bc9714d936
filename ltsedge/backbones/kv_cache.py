"""The declared inputs and outputs of a KV-cache decoder's ``generate`` variant (GPT-2, OPT).

The naming Optimum exports and onnxruntime-genai reads by default. Heads and head size are static
per layer (they differ per layer in ltsedge's spaces); batch, sequence and past are symbolic.

Only layers with an attention block have a cache (an FFN-only PAR layer has none). Caches are numbered
0, 1, ... over those layers, in order: the consecutive names runtimes expect (onnxruntime-genai reads
``past_key_values.%d.key`` for 0 .. num_hidden_layers - 1); ``cache_layers`` maps a cache to its layer.
"""

from __future__ import annotations

from ltsedge.iospec import ExportSpec, TensorSpec

PAST = "past_key_values.{i}.{kind}"
PRESENT = "present.{i}.{kind}"


def generate_spec(arch) -> ExportSpec:
    inputs = [TensorSpec("input_ids", "int64", ("batch", "sequence"), "input_ids"),
              TensorSpec("attention_mask", "int64", ("batch", "total_sequence"), "attention_mask"),
              TensorSpec("position_ids", "int64", ("batch", "sequence"), "position_ids")]
    outputs = [TensorSpec("logits", "float32", ("batch", "sequence", arch.vocab_size), "logits")]
    for i, layer in enumerate(cache_layers(arch)):
        n_head, d_head = arch.n_head[layer], arch.d_head[layer]
        for kind in ("key", "value"):
            inputs.append(TensorSpec(PAST.format(i=i, kind=kind), "float32",
                                     ("batch", n_head, "past_sequence", d_head), "past"))
            outputs.append(TensorSpec(PRESENT.format(i=i, kind=kind), "float32",
                                      ("batch", n_head, "total_sequence", d_head), "present"))
    return ExportSpec("generate", tuple(inputs), tuple(outputs))


def cache_layers(arch) -> tuple[int, ...]:
    """Cache i belongs to layer ``cache_layers(arch)[i]``: the layers with attention."""
    return arch.attention_layers


def kv_cache_bytes(arch, batch: int, tokens: int, bytes_per_value: int = 4) -> int:
    """The cache of ``tokens`` tokens: keys and values of every attention layer (heads x head size = d_model)."""
    width = sum(arch.n_head[i] * arch.d_head[i] for i in cache_layers(arch))
    return 2 * batch * tokens * width * bytes_per_value
