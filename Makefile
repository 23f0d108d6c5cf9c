# fabric-te: every target installs what it needs into .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
FABRIC ?= pod

.PHONY: demo test bench check protos clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

## demo: simulate and solve the built-in default fabric full of training jobs
demo: $(STAMP)
	$(BIN)/tectl solve --fabric $(FABRIC) --jobs random --seed 1

## test: the whole test suite
test: $(STAMP)
	$(BIN)/python -m pytest

## bench: scale benchmarks; writes docs/benchmarks.md
bench: $(STAMP)
	$(BIN)/python -m sim.bench --out docs/benchmarks.md

## check: lint and type-check
check: $(STAMP)
	$(BIN)/ruff check controller sim tests
	$(BIN)/mypy controller sim

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
