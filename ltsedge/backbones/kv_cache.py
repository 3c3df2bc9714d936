"""The declared inputs and outputs of a KV-cache decoder's ``generate`` variant (GPT-2, OPT).

The naming Optimum exports and onnxruntime-genai reads by default. Heads and head size are static
per layer (they differ per layer in ltsedge's spaces); batch, sequence and past are symbolic.
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
    for i, (n_head, d_head) in enumerate(zip(arch.n_head, arch.d_head)):
        for kind in ("key", "value"):
            inputs.append(TensorSpec(PAST.format(i=i, kind=kind), "float32",
                                     ("batch", n_head, "past_sequence", d_head), "past"))
            outputs.append(TensorSpec(PRESENT.format(i=i, kind=kind), "float32",
                                      ("batch", n_head, "total_sequence", d_head), "present"))
    return ExportSpec("generate", tuple(inputs), tuple(outputs))


def kv_cache_bytes(arch, batch: int, tokens: int, bytes_per_value: int = 4) -> int:
    """The cache of ``tokens`` tokens: keys and values of every layer (heads x head size = d_model)."""
    return 2 * batch * tokens * sum(h * d for h, d in zip(arch.n_head, arch.d_head)) * bytes_per_value
