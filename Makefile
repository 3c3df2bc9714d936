# Two commands set up everything on a fresh machine (README.md, Quick start):
#
#   make quickstart   the main job: a quick search on this machine's CPU, installing what it needs on first use
#   make test         installs what the tests need, then runs them (`make test PYTEST_ARGS='-q -m "not slow"'`)
#
# Repeating either does no harm: $(VENV) is reused, and each install step runs again only when what it installs
# from (pyproject.toml, its script) is newer than the stamp it leaves in $(VENV).

PYTHON ?= python3
VENV ?= .venv
TORCH_VERSION ?= 2.13.0
PYTEST_ARGS ?= -q

venv := $(abspath $(VENV))
bin := $(venv)/bin

.PHONY: quickstart test install install-test

quickstart: install
	$(bin)/ltsedge search --preset quick

test: install-test
	@if [ -d "$(venv)/transformersjs/node_modules/@huggingface/transformers" ]; then \
	  export LTSEDGE_TRANSFORMERSJS_DIR="$${LTSEDGE_TRANSFORMERSJS_DIR:-$(venv)/transformersjs}"; fi; \
	if [ -x "$(venv)/old-ort/bin/python" ]; then \
	  export LTSEDGE_OLD_ORT_PYTHON="$${LTSEDGE_OLD_ORT_PYTHON:-$(venv)/old-ort/bin/python}"; fi; \
	echo "$(bin)/python -m pytest $(PYTEST_ARGS)"; \
	PATH="$(bin):$$PATH" $(bin)/python -m pytest $(PYTEST_ARGS)

# What `ltsedge search` needs: the package with its [search] extra.
install: $(venv)/.installed-search

# What the tests need: [search] and [test], and the runtimes some tests load models in.
install-test: $(venv)/.installed-test $(venv)/.installed-test-runtimes

$(bin)/python:
	$(PYTHON) -m venv $(venv)
	$(bin)/python -m pip install -q --upgrade pip

$(venv)/.installed-torch: ci/install-torch.sh | $(bin)/python
	ci/install-torch.sh $(bin)/python $(TORCH_VERSION)
	touch $@

$(venv)/.installed-search: pyproject.toml $(venv)/.installed-torch
	$(bin)/python -m pip install -q -e ".[search]"
	touch $@

$(venv)/.installed-test: pyproject.toml $(venv)/.installed-torch
	$(bin)/python -m pip install -q -e ".[search,test]"
	touch $@

$(venv)/.installed-test-runtimes: ci/install-test-runtimes.sh | $(venv)/.installed-test
	ci/install-test-runtimes.sh $(venv)
	touch $@
