"""What needs the optional dependencies, and the one line that says how to get them.

``pip install ltsedge`` is the light install CI gates use: check, profile of ONNX files, report,
compare, devices, agent (with ``[fleet]``) — onnxruntime, onnx, numpy, psutil, typer and the plotting
libraries. ``pip install "ltsedge[search]"`` adds PyTorch and pymoo for search, export, and profile of
an architecture (which builds the model).
"""

from __future__ import annotations

import importlib

from ltsedge.errors import LtsedgeError

INSTALL = {"torch": 'pip install "ltsedge[search]" (on a CPU-only machine: pip install torch --index-url '
                    'https://download.pytorch.org/whl/cpu first)',
           "pymoo": 'pip install "ltsedge[search]"', "scipy": 'pip install "ltsedge[search]"', "safetensors": 'pip install "ltsedge[search]"',
           "distributed": 'pip install "ltsedge[fleet]"', "onnx_ir": 'pip install "ltsedge[search]"',
           "tokenizers": 'pip install "ltsedge[proxy]"'}


def require(module: str, what: str):
    """The module, or a one-line error: "<what> needs <module>: <how to install it>"."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise LtsedgeError(f"{what} needs {module}: {INSTALL.get(module, f'pip install {module}')}") from None
