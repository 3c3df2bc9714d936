"""The trained model's weights as the sub-networks read them, and a PyTorch model running any of them.

Weights arrive as a ``state_dict`` in the reference model's names or Hugging Face's (``model.`` and a tied
``lm_head.weight`` are accepted, as ``--weights`` accepts them) and are checked once against the
architecture (``exporters.trained_weights.checked_weights``: names, shapes, finite values); the sub-networks
then slice float32 tensors, and a model is built around them without copying or initialising anything.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from ltsedge.architecture import Architecture
from ltsedge.backbones import get_backbone
from ltsedge.errors import LtsedgeError
from ltsedge.extras import require

torch = require("torch", "sub-networks of a trained model")

HF_PREFIX = "model."  # LlamaForCausalLM's decoder; its lm_head has no prefix


def parent_weights(arch: Architecture, state: Mapping, source: str = "weights") -> dict[str, torch.Tensor]:
    """``state`` checked against ``arch``'s reference model, as float32 tensors in its names (one line naming
    the first tensor that does not fit)."""
    from ltsedge.exporters.trained_weights import checked_weights

    backbone = get_backbone(arch.backbone)
    named = {name.removeprefix(HF_PREFIX): tensor for name, tensor in state.items()}
    arrays = checked_weights(named, backbone.empty_model(arch), source, backbone.tied_aliases)
    return {name: torch.from_numpy(array) for name, array in arrays.items()}


def model_of(arch: Architecture, weights: Mapping[str, torch.Tensor]):
    """The reference model of ``arch`` in eval mode holding ``weights`` themselves (no copy): built on the
    meta device, so nothing is initialised only to be overwritten."""
    model = get_backbone(arch.backbone).empty_model(arch)
    model.load_state_dict(dict(weights), strict=True, assign=True)
    return model.eval()


def check_token_ids(ids: torch.Tensor, vocab_size: int) -> None:
    """Token ids the model has embeddings for, or one line: the text was tokenized for another model."""
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        raise LtsedgeError(f"token ids {low} .. {high} do not fit the model's vocabulary of {vocab_size}: the text "
                           f"was tokenized with a tokenizer that does not match the model")


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` for the block (None: left as they are)."""
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def hooked_pass(model, windows: torch.Tensor, batch: int, threads: int | None, handles: list) -> None:
    """``model`` over ``windows`` [n, window] ``batch`` windows at a time, for what its forward ``handles``
    (hooks) collect; the hooks are removed afterwards, whatever happens."""
    try:
        with torch.inference_mode(), torch_threads(threads):
            for start in range(0, len(windows), batch):
                model(windows[start:start + batch])
    finally:
        for handle in handles:
            handle.remove()
