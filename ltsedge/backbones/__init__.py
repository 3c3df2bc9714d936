"""The backbone registry: ``architecture.backbone`` -> the package that knows that model family.

One package per backbone (``gpt2/``: ``params.py`` the analytic counts, ``model.py`` the PyTorch
reference, ``graph.py`` the ONNX graph, ``__init__.py`` the ``Backbone`` that ties them together);
building blocks several backbones share live beside them (``adaptive/``: adaptive embeddings and
softmax; ``random_weights.py``: the shared random-weight pool). Adding a backbone = adding its package and
one ``register`` line below.
"""

from __future__ import annotations

from ltsedge.backbones.base import Backbone, BaselineSpec
from ltsedge.errors import LtsedgeError

_REGISTRY: dict[str, Backbone] = {}


def register(backbone: Backbone) -> Backbone:
    """Make ``backbone`` known under ``backbone.name`` (a later registration of that name replaces it)."""
    if not backbone.name or not backbone.name.replace("_", "").isalnum():
        raise LtsedgeError(f"backbone name {backbone.name!r} must be letters, digits and '_'")
    _REGISTRY[backbone.name] = backbone
    return backbone


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def backbone_names() -> list[str]:
    return list(_REGISTRY)


def get_backbone(name: str) -> Backbone:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise LtsedgeError(f"unknown backbone {name!r} (known: {', '.join(_REGISTRY)})") from None


def _register_builtins() -> None:
    from ltsedge.backbones.gpt2 import GPT2Backbone
    from ltsedge.backbones.llama import LlamaBackbone
    from ltsedge.backbones.opt import OPTBackbone
    from ltsedge.backbones.transfo_xl import TransfoXLBackbone

    register(GPT2Backbone())
    register(TransfoXLBackbone())
    register(OPTBackbone())
    register(LlamaBackbone())


_register_builtins()

__all__ = ["Backbone", "BaselineSpec", "backbone_names", "get_backbone", "register", "unregister"]
