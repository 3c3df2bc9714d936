#!/usr/bin/env bash
# Install torch into a Python environment unless it already has one: the CPU build on Linux without an NVIDIA GPU
# (PyPI's Linux builds pull several GB of CUDA packages), the ordinary build elsewhere (a GPU wants CUDA; macOS's
# is a CPU build).
#
#   ci/install-torch.sh PYTHON [VERSION]     (the Makefile's install step; VERSION defaults to 2.13.0)
#
# The CPU build is taken from pip's own indexes when they hold it (a wheelhouse, a mirror), else from PyTorch's
# CPU index (TORCH_CPU_INDEX).
set -euo pipefail
python=${1:?usage: ci/install-torch.sh PYTHON [VERSION]}
version=${2:-2.13.0}
cpu_index=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}

if "$python" -c "import torch" 2>/dev/null; then
  echo "torch $("$python" -c 'import torch; print(torch.__version__)') is installed: kept"
  exit 0
fi
pip_install() { "$python" -m pip install -q "$@"; }
if [ "$(uname -s)" != Linux ] || { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
  echo "installing torch $version"
  pip_install "torch==$version"
else
  echo "no NVIDIA GPU: installing torch $version, the CPU build"
  pip_install "torch==$version+cpu" 2>/dev/null || pip_install "torch==$version+cpu" --extra-index-url "$cpu_index"
fi
