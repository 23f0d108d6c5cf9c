# fabric-te: every target installs what it needs into .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
FABRIC ?= pod

PROTOS := $(wildcard protos/fabric_te/v1/*.proto)
GEN    := controller/api/fabric_te/v1/te_pb2.py

.PHONY: demo test bench check protos clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# gRPC code is generated, not committed; the virtual path makes it import as
# controller.api.fabric_te.v1.
PROTOC := $(BIN)/python -m grpc_tools.protoc -Icontroller/api=protos --python_out=. \
	--grpc_python_out=. --pyi_out=. $(PROTOS)

$(GEN): $(PROTOS) $(STAMP)
	$(PROTOC)

## protos: regenerate the gRPC code from protos/
protos: $(STAMP)
	$(PROTOC)

## demo: simulate and solve the built-in default fabric full of training jobs
demo: $(GEN)
	$(BIN)/tectl solve --fabric $(FABRIC) --jobs random --seed 1

## test: the whole test suite
test: $(GEN)
	$(BIN)/python -m pytest

## bench: scale benchmarks; writes docs/benchmarks.md
bench: $(GEN)
	$(BIN)/python -m sim.bench --out docs/benchmarks.md

## check: lint and type-check
check: $(GEN)
	$(BIN)/ruff check controller sim tests
	$(BIN)/mypy controller sim

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find controller/api -name '*_pb2*' -delete
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
