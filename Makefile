# The two commands the README opens with:
#   make pipeline   - build .venv if needed, then run the whole DVC pipeline on the synthetic dataset
#   make test       - build .venv if needed, then ruff (lint + format), dvc.yaml vs the stage table, the tests
# Everything else here is a helper for those two.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export DVC_NO_ANALYTICS := 1
export DO_NOT_TRACK := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export OMP_NUM_THREADS ?= 1

.PHONY: venv pipeline test lint bench clean-venv

venv: $(STAMP)

# pip (not uv/poetry): only pip sees the local CPU torch wheel. Rebuilt when the requirement files change.
$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . 2>&1 | { grep -v "is ignored: it is neither" || true; }
	$(VENV)/bin/python -c "import torch, torch_geometric, numba, pgnn; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $(STAMP)

pipeline: $(STAMP)
	$(VENV)/bin/python -m pgnn.pipeline.run

test: $(STAMP)
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/python -m pgnn.cli dvc-yaml --check
	$(VENV)/bin/python -m pytest -q

bench: $(STAMP)
	for b in benchmarks/*.py; do $(VENV)/bin/python $$b || exit 1; done

clean-venv:
	rm -rf $(VENV)
