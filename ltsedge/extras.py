"""What needs the optional dependencies, and the one line that says how to get them.

``pip install ltsedge`` is the light install CI gates use: check, profile of ONNX files, report, compare,
devices, params, space — onnxruntime, onnx, numpy, psutil, typer and the plotting libraries.
``pip install "ltsedge[search]"`` adds PyTorch, pymoo, scipy, safetensors, onnx-ir and tokenizers for search,
export, costmodel, predict, proxy-check and profile of an architecture (which builds the model);
``[fleet]`` adds Dask's distributed for agents and ``--scheduler``. The README's install table says the same,
and tests/test_extras.py holds the three together.
"""

from __future__ import annotations

import importlib

from ltsedge.errors import LtsedgeError

# The extra of pyproject.toml that installs each optional module.
EXTRA = {"torch": "search", "pymoo": "search", "scipy": "search", "safetensors": "search", "onnx_ir": "search",
         "tokenizers": "search", "distributed": "fleet"}
# An unpinned torch on x86 Linux pulls several GB of CUDA packages.
CPU_TORCH = "on a CPU-only machine: pip install torch --index-url https://download.pytorch.org/whl/cpu first"


def install_hint(module: str) -> str:
    """How to install ``module``: the extra that holds it, or the module itself."""
    extra = EXTRA.get(module)
    if extra is None:
        return f"pip install {module}"
    hint = f'pip install "ltsedge[{extra}]"'
    return f"{hint} ({CPU_TORCH})" if module == "torch" else hint


def require(module: str, what: str):
    """The module, or a one-line error: "<what> needs <module>: <how to install it>"."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise LtsedgeError(f"{what} needs {module}: {install_hint(module)}") from None
