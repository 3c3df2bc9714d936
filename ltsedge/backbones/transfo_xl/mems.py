"""The declared inputs and outputs of Transformer-XL's ``generate`` variant: the recurrence memory.

Where a KV-cache decoder feeds back keys and values (``ltsedge.backbones.kv_cache``), Transformer-XL
feeds back the memory: per layer with attention, the last ``mem_len`` *inputs* of that layer
(``[batch, positions, d_model]``), from which it recomputes keys and values. ``mems.{k}`` in,
``new_mems.{k}`` out, k = 0, 1, ... over the layers with attention in order (an FFN-only PAR layer
has no memory); ``mem_layers`` maps memory k to its layer. The memory fed may be shorter than
``mem_len`` (0 at the first segment); the memory returned is at most ``mem_len`` long. No attention
mask or position ids: positions are relative, and a segment sees its whole memory.
"""

from __future__ import annotations

from ltsedge.iospec import ExportSpec, TensorSpec

MEMS = "mems.{k}"
NEW_MEMS = "new_mems.{k}"


def generate_spec(arch) -> ExportSpec:
    inputs = [TensorSpec("input_ids", "int64", ("batch", "sequence"), "input_ids")]
    outputs = [TensorSpec("logits", "float32", ("batch", "sequence", arch.vocab_size), "logits")]
    for k in range(len(mem_layers(arch))):
        inputs.append(TensorSpec(MEMS.format(k=k), "float32", ("batch", "past_sequence", arch.d_model), "past"))
        outputs.append(TensorSpec(NEW_MEMS.format(k=k), "float32", ("batch", "memory", arch.d_model), "present"))
    return ExportSpec("generate", tuple(inputs), tuple(outputs))


def mem_layers(arch) -> tuple[int, ...]:
    """Memory k belongs to layer ``mem_layers(arch)[k]``: the layers with attention."""
    return arch.attention_layers


def mems_bytes(arch, batch: int, tokens: int, bytes_per_value: int = 4) -> int:
    """The memory after ``tokens`` tokens: at most ``mem_len`` positions of d_model per attention layer."""
    return batch * min(tokens, arch.mem_len) * arch.d_model * len(mem_layers(arch)) * bytes_per_value
