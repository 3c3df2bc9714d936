#!/usr/bin/env bash
# The runtimes some tests load exported models in, beside the full install in VENV (the Makefile's `make test`
# step). Each test skips where its runtime is missing, so one that does not install is said and passed over.
#
#   ci/install-test-runtimes.sh VENV
#
# VENV/old-ort is a venv of its own with an older onnxruntime, VENV/transformersjs a Node package folder:
# `make test` points the tests at both.
set -uo pipefail
venv=${1:?usage: ci/install-test-runtimes.sh VENV}
python=$venv/bin/python

# onnxruntime-genai runs the exported bundles in tests/test_bundle.py.
"$python" -m pip install -q onnxruntime-genai || echo "onnxruntime-genai did not install: its test will skip"
# Hugging Face Optimum loads the bundles in tests/test_runtimes.py; the installed torch is pinned so that it stays
# the build ci/install-torch.sh chose (the CPU one, without a GPU).
torch=$("$python" -c "import torch; print(torch.__version__)")
"$python" -m pip install -q "optimum[onnxruntime]" transformers "torch==$torch" \
  || echo "optimum did not install: its test will skip"
# transformers.js (Node) generates from the bundles in tests/test_transformersjs.py. Its post-install would fetch
# CUDA binaries from a host that may be out of reach: the CPU ones are in the package. package.json is written
# here: npm init would name the package after its folder.
tjs=$venv/transformersjs
if command -v npm >/dev/null && mkdir -p "$tjs" && (cd "$tjs" \
    && echo '{"name": "ltsedge-test-transformersjs", "private": true}' > package.json \
    && ONNXRUNTIME_NODE_INSTALL=skip npm install -q --no-audit --no-fund @huggingface/transformers >/dev/null); then
  :
else
  echo "transformers.js did not install: its test will skip"
fi
# An older onnxruntime, in a venv of its own: tests/test_compat.py loads the models stamped for it there.
{ [ -x "$venv/old-ort/bin/python" ] || "$python" -m venv "$venv/old-ort"; } \
  && "$venv/old-ort/bin/python" -m pip install -q onnxruntime==1.20.1 numpy \
  || echo "onnxruntime 1.20.1 did not install: the compatibility test will skip"
exit 0
