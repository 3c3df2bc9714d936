#!/usr/bin/env bash
# The light install from a wheel, in a venv of its own and run outside the repository (what a board or a
# CI gate gets from `pip install ltsedge-*.whl`): check a model and draw a search's report with neither
# torch nor pymoo installed. The model and the search come from the full install (`make install-test`, .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# With the full install: a tiny search to report on.
.venv/bin/python -m ltsedge search --preset smoke --generations 1 --out "$work/search" \
  --store "$work/s.sqlite" --quiet --no-baseline >/dev/null

# The wheel: pure Python, so the one file serves x86-64 and aarch64 alike.
.venv/bin/python -m pip install -q build
.venv/bin/python -m build --wheel --outdir dist . >/dev/null
wheel=$(ls -t dist/ltsedge-*-py3-none-any.whl | head -n 1)
python3 -m venv .ci-light
.ci-light/bin/python -m pip install -q --upgrade pip
.ci-light/bin/python -m pip uninstall -y -q ltsedge 2>/dev/null || true  # a wheel of the same version, rebuilt
.ci-light/bin/python -m pip install -q "$wheel"
light=$PWD/.ci-light/bin
cd "$work"  # nothing of the checkout on the path from here on
if "$light/python" -c "import torch" 2>/dev/null || "$light/python" -c "import pymoo" 2>/dev/null; then
  echo "light install: torch or pymoo was installed"; exit 1
fi

# A model made with onnx.helper alone, checked against budgets.
"$light/python" - "$work/tiny.onnx" <<'PY'
import sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), "w")
graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "tiny",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
save(model, sys.argv[1])
PY
"$light/ltsedge" check "$work/tiny.onnx" --max-latency-ms 1000 --max-memory-mb 1000 \
  --junit "$work/report.xml" --benchmark-json "$work/bench.json"
"$light/ltsedge" report "$work/search" --out "$work/report"
test -s "$work/report/index.html"
# What needs the search extra says so, exit 2.
set +e
"$light/ltsedge" search --preset smoke --out "$work/nope" 2>"$work/err"; code=$?
set -e
if [ "$code" != 2 ] || ! grep -q 'ltsedge\[search\]' "$work/err"; then
  echo "light install: search without the extra did not say what to install"; cat "$work/err"; exit 1
fi
echo "light install: 3 passed, 0 failed"
