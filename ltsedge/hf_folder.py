"""A Hugging Face model folder as input (``--from DIR``): what a user has after ``huggingface-cli download``.

    DIR/config.json                        LlamaForCausalLM (model_type "llama"): the architecture
    DIR/model.safetensors                  the weights, or sharded: model.safetensors.index.json and its shards
    DIR/tokenizer.json, tokenizer_config.json, generation_config.json, chat_template.jinja ...   the tokenizer

The config maps onto the ``llama`` backbone field by field; what the backbone cannot express (a rotary scaling
other than the default, attention or MLP biases, a sliding window, an activation other than SiLU) is refused in
one line naming the field. PyTorch pickles (``pytorch_model.bin``) are refused: loading one can run code.
Reads JSON only: the weights are loaded where they are exported (``exporters.trained_weights``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ltsedge.architecture import Architecture
from ltsedge.errors import LtsedgeError

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
SHARDED = "model.safetensors.index.json"
TOKENIZER = "tokenizer.json"
LLAMA_TYPES = ("llama",)  # model_type values the llama backbone reads true (SmolLM2 and MobileLLM are llama)
# config.json fields whose other values change the network beyond what the llama backbone builds
UNSUPPORTED = {"attention_bias": (False, None), "mlp_bias": (False, None), "sliding_window": (None,),
               "hidden_act": ("silu", None), "pretraining_tp": (1, None)}


@dataclass(frozen=True)
class HfFolder:
    path: Path
    arch: Architecture
    weights: Path  # model.safetensors, or the shards' index
    tokenizer: Path | None  # the folder, where it holds a tokenizer.json


def read_folder(path: str | Path) -> HfFolder:
    """The architecture, weights and tokenizer of a Hugging Face Llama folder; one line for anything it lacks or
    cannot be read as ltsedge's llama backbone."""
    path = Path(path)
    if not path.is_dir():
        raise LtsedgeError(f"--from {path}: not a folder (a Hugging Face model folder holds config.json and "
                           f"model.safetensors)")
    config = _config(path / CONFIG)
    return HfFolder(path, architecture_of(config, f"{path / CONFIG}"), _weights(path),
                    path if (path / TOKENIZER).is_file() else None)


def architecture_of(config: dict, where: str) -> Architecture:
    """ltsedge's llama architecture of a transformers LlamaConfig (as config.json holds it)."""
    model_type = config.get("model_type")
    if model_type not in LLAMA_TYPES:
        classes = ", ".join(config.get("architectures") or []) or "none named"
        raise LtsedgeError(f"{where}: model_type {model_type!r} ({classes}) is not supported: ltsedge reads Llama "
                           f"models (model_type llama, LlamaForCausalLM)")
    for field, allowed in UNSUPPORTED.items():
        if config.get(field) not in allowed:
            raise LtsedgeError(f"{where}: {field} = {json.dumps(config.get(field))} is not supported by the llama "
                               f"backbone (it builds {field} = {json.dumps(allowed[0])})")
    scaling = config.get("rope_scaling")
    if scaling is not None and (not isinstance(scaling, dict)
                                or scaling.get("rope_type", scaling.get("type")) not in ("default", None)):
        raise LtsedgeError(f"{where}: rope_scaling = {json.dumps(scaling)} is not supported: the llama backbone "
                           f"builds the default rotary positions")
    try:
        layers, heads = int(config["num_hidden_layers"]), int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        fields = dict(backbone="llama", n_layer=layers, d_model=hidden, n_head=[heads] * layers,
                      n_kv_head=[int(config.get("num_key_value_heads") or heads)] * layers,
                      head_dim=int(config.get("head_dim") or hidden // heads),
                      d_inner=[int(config["intermediate_size"])] * layers, vocab_size=int(config["vocab_size"]),
                      n_positions=int(config.get("max_position_embeddings") or 2048),
                      tie_embeddings=bool(config.get("tie_word_embeddings", True)),
                      rope_theta=float(config.get("rope_theta", 10000.0)),
                      rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)))
    except KeyError as e:
        raise LtsedgeError(f"{where}: {e.args[0]} is missing") from None
    except (TypeError, ValueError) as e:
        raise LtsedgeError(f"{where}: a field is not a number ({e})") from None
    try:
        return Architecture.from_dict(fields)
    except LtsedgeError as e:
        raise LtsedgeError(f"{where}: {e}") from None


def _config(path: Path) -> dict:
    if not path.is_file():
        raise LtsedgeError(f"{path} not found: a Hugging Face model folder holds config.json")
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise LtsedgeError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise LtsedgeError(f"{path} must hold a JSON object")
    return config


def _weights(path: Path) -> Path:
    for name in (WEIGHTS, SHARDED):
        if (path / name).is_file():
            return path / name
    pickles = sorted(p.name for p in path.glob("*.bin"))
    if pickles:
        raise LtsedgeError(f"{path} holds weights only as PyTorch pickles ({', '.join(pickles)}), which ltsedge does "
                           f"not load (loading one can run code): convert them to model.safetensors")
    raise LtsedgeError(f"{path} holds no weights: {WEIGHTS} or {SHARDED} with its shards")
