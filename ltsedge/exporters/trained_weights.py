"""Trained weights in: a PyTorch ``state_dict`` of ltsedge's reference model, from ``.pt`` or ``.safetensors``
(transformers' ``LlamaForCausalLM`` has its names, under ``model.``, and its tied ``lm_head``).

Reading never runs code from the file: ``torch.load(weights_only=True)`` or safetensors; a file that
cannot be read so is refused in ltsedge's own words (torch's warnings silenced, and never its advice to
load with ``weights_only=False``). Only floating-point tensors are weights. The tensors
are checked against the architecture's reference model (built on the meta device: names and shapes,
no memory) and the first mismatch is a one-line error naming the tensor, as is a tensor without values of
its own to export: on the meta device, sparse, or holding NaN or infinite values. The common wrappers of a
training script are accepted: a ``{"model": state_dict}`` checkpoint, ``module.`` (DataParallel) and
``_orig_mod.`` (torch.compile) prefixes.
"""

from __future__ import annotations

import pickle
import re
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ltsedge.errors import LtsedgeError
from ltsedge.extras import require

SUFFIXES = (".pt", ".pth", ".bin", ".safetensors")
WRAPPER_KEYS = ("model", "state_dict", "model_state_dict")
PREFIXES = ("_orig_mod.", "module.", "model.")  # torch.compile, DataParallel, Hugging Face's *ForCausalLM


def load_state_dict(path: str | Path) -> dict:
    """The tensors of a weights file, by name; of every shard a ``model.safetensors.index.json`` names."""
    path = Path(path)
    if not path.is_file():
        raise LtsedgeError(f"weights file not found: {path}")
    if path.name.endswith(".safetensors.index.json"):
        return _unwrap(_sharded(path), path)
    return _unwrap(_read(path), path)


def _read(path: Path) -> dict:
    """A weights file's contents as stored (a state dict, or what holds one)."""
    if not path.is_file():
        raise LtsedgeError(f"weights file not found: {path}")
    require("torch", "reading trained weights")
    if path.suffix.lower() not in SUFFIXES:
        raise LtsedgeError(f"weights file {path}: expected a PyTorch state_dict as {', '.join(SUFFIXES)}")
    try:
        if path.suffix.lower() == ".safetensors":
            require("safetensors", "reading .safetensors weights")
            from safetensors.torch import load_file

            data = load_file(str(path))
        else:
            import torch

            with warnings.catch_warnings():  # e.g. "Detected pickle protocol 4": the error below says it all
                warnings.simplefilter("ignore")
                data = torch.load(str(path), map_location="cpu", weights_only=True)
    except LtsedgeError:
        raise
    except Exception as e:  # noqa: BLE001 - unpickling and safetensors raise many kinds
        raise LtsedgeError(f"weights file {path} cannot be read: {_why_unreadable(e)}") from None
    return data


def _why_unreadable(e: Exception) -> str:
    """One line: what torch found, without its advice to turn weights_only off (ltsedge never does)."""
    text = str(e)
    if isinstance(e, pickle.UnpicklingError):  # weights_only refused it: not a pickle, or objects beyond tensors
        found = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)
        return (f"not a plain state_dict of tensors ({_first_sentences(found.group(1) if found else '')}); "
                f"ltsedge never runs code from a weights file (save model.state_dict() with torch.save, or use "
                f".safetensors)")
    if isinstance(e, EOFError):
        return "the file is empty or cut short"
    return _first_sentences(text.strip().splitlines()[0] if text.strip() else "") or type(e).__name__


def _first_sentences(line: str) -> str:
    """The sentences of ``line`` up to torch's advice to load with weights_only=False."""
    kept = []
    for sentence in re.split(r"(?<=\.)\s+", line.strip()):
        if "weights_only" in sentence or "Re-running" in sentence or "add_safe_globals" in sentence:
            break
        kept.append(sentence)
    return " ".join(kept).strip()


def _unwrap(data, path: Path) -> dict:
    import torch

    if isinstance(data, Mapping):
        for key in WRAPPER_KEYS:  # a training checkpoint holding the state_dict
            if isinstance(data.get(key), Mapping) and not isinstance(data.get(key), torch.Tensor):
                data = data[key]
                break
    if not isinstance(data, Mapping) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise LtsedgeError(f"weights file {path} is not a state_dict (a mapping of tensor names to tensors)")
    out = {}
    for name, tensor in data.items():
        for prefix in PREFIXES:
            name = name.removeprefix(prefix)
        out[name] = tensor
    return out


def checked_weights(state_dict: Mapping, reference, source: str, tied_aliases: Mapping[str, str] | None = None
                    ) -> dict[str, np.ndarray]:
    """``state_dict`` as float32 arrays, after checking names and shapes against ``reference`` (a model
    on the meta device); the first offending tensor is the error. ``tied_aliases`` (alias -> name) are
    tied copies a checkpoint may carry: dropped when equal to the tensor they alias."""
    import torch

    expected = reference.state_dict()
    state_dict = dict(state_dict)
    for name, tensor in state_dict.items():  # before any comparison: torch raises on these, it never says which
        _check_has_values(name, tensor, source)
    for alias, name in (tied_aliases or {}).items():
        if alias in state_dict and name in state_dict and alias not in expected:
            if not torch.equal(state_dict[alias], state_dict[name]):
                for each in (name, alias):  # NaN is never equal to itself: name it rather than the tie
                    _check_finite(each, state_dict[each], source)
                raise LtsedgeError(f"{source}: tensor {alias!r} differs from {name!r}, which this architecture "
                                   f"ties it to (the output layer reuses the token embedding)")
            del state_dict[alias]
    for name, want in expected.items():
        if name not in state_dict:
            raise LtsedgeError(f"{source}: tensor {name!r} is missing (the architecture needs {list(want.shape)})")
        tensor = state_dict[name]
        got = tuple(tensor.shape)
        if got != tuple(want.shape):
            raise LtsedgeError(f"{source}: tensor {name!r} has shape {list(got)}, the architecture needs "
                               f"{list(want.shape)}")
        if not tensor.is_floating_point():  # complex would lose its imaginary part, integers be cast silently
            raise LtsedgeError(f"{source}: tensor {name!r} is {str(tensor.dtype).removeprefix('torch.')}: weights "
                               f"must be floating point (float32, float16, bfloat16 or float64)")
    extra = [name for name in state_dict if name not in expected]
    if extra:
        raise LtsedgeError(f"{source}: tensor {extra[0]!r} is not part of this architecture's model")
    arrays = {}
    for name in expected:
        weights = state_dict[name].detach().float()
        _check_finite(name, weights, source, state_dict[name])
        arrays[name] = weights.contiguous().numpy()
    return arrays


def _check_has_values(name: str, tensor, source: str) -> None:
    """Refuse a tensor with no values in CPU memory to read: on the meta device (saved from a model built
    empty, e.g. with ``init_empty_weights``), or sparse (its values are not laid out as the weights are)."""
    import torch

    if tensor.device.type != "cpu":  # every real device was mapped to the CPU on loading: meta is left
        raise LtsedgeError(f"{source}: tensor {name!r} is on the {tensor.device.type} device, which holds no "
                           f"values: save the weights of a model loaded or trained in memory")
    if tensor.layout != torch.strided:
        layout = str(tensor.layout).removeprefix("torch.")
        raise LtsedgeError(f"{source}: tensor {name!r} is a {layout} tensor: weights must be dense "
                           f"(save it with .to_dense())")


def _check_finite(name: str, tensor, source: str, original=None) -> None:
    """Refuse NaN or infinite values in ``tensor`` (a model computing with them outputs NaN, silently);
    ``original``: the tensor before its conversion to float32, finite where float32's range was too small."""
    import torch

    bad = ~torch.isfinite(tensor)
    if not bool(bad.any()):
        return
    first = [int(i) for i in np.unravel_index(np.argmax(bad.numpy()), bad.shape)]  # argmax: nonzero lists them all
    count = int(bad.sum())
    values = "value" if count == 1 else "values"
    if original is not None and bool(torch.isfinite(original).all()):
        raise LtsedgeError(f"{source}: tensor {name!r} has {count} {values} beyond float32's range (the first at "
                           f"{first}): exported weights are float32")
    nans = int(torch.isnan(tensor).sum())
    kinds = " and ".join(f"{n} {kind}" for n, kind in ((nans, "NaN"), (count - nans, "infinite")) if n)
    raise LtsedgeError(f"{source}: tensor {name!r} has {kinds} {values} (the first at {first}): weights must be "
                       f"finite")


def _sharded(index: Path) -> dict:
    """A sharded checkpoint: each shard its index names (a file beside it, never elsewhere), merged."""
    import json

    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise LtsedgeError(f"weights index {index} cannot be read: {e}") from None
    state: dict = {}
    for shard in shards:
        if not isinstance(shard, str) or Path(shard).name != shard or not shard.endswith(".safetensors"):
            raise LtsedgeError(f"weights index {index} names {shard!r}: a shard must be a .safetensors file beside it")
        state.update(_read(index.parent / shard))
    missing = sorted(set(weight_map) - set(state))
    if missing:
        raise LtsedgeError(f"weights index {index} names {missing[0]}, which no shard holds")
    return state
