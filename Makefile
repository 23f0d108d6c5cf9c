# fabric-te: every target installs what it needs into .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
FABRIC ?= pod

PROTOS := $(wildcard protos/fabric_te/v1/*.proto)
GEN    := controller/api/fabric_te/v1/te_pb2.py

# Debian packages of the real components the tests start (FRR, etcd, slurmctld, Prometheus,
# Redis as SONiC's CONFIG_DB, Open vSwitch, lldpd for LLDP discovery), and libyang2-dev, which the sonic extra's
# libyang builds on. Installed when running as root and missing (CI runs as root); otherwise
# the tests that need them skip and say why. Services are not started by the install
# (policy-rc.d).
DEBS := iproute2 nftables frr etcd-server slurmctld prometheus redis-server libyang2-dev openvswitch-switch lldpd

.PHONY: demo test fuzz bench check protos clean system-deps sonic-extra ray-extra certs

# Debian's python3 keeps venv's pip bootstrap (ensurepip) in python3-venv: installed with
# apt-get when root and missing, else named.
$(STAMP): pyproject.toml
	@$(PYTHON) -c "import ensurepip" 2>/dev/null || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "python3 has no ensurepip: installing python3-venv"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; \
	else echo "$(PYTHON) has no ensurepip, which venv needs: install python3-venv (Debian)" \
		"or another Python 3.11+ with venv, then run make again" >&2; exit 1; fi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# The sonic driver's extra (redis, libyang) for its tests; libyang builds on Debian's
# libyang2-dev, so this comes after system-deps. Without it the sonic tests skip and say why.
sonic-extra: $(STAMP) system-deps
	@$(BIN)/python -c "import libyang, redis" 2>/dev/null || \
		$(BIN)/python -m pip install --quiet -e '.[dev,sonic]' || \
		echo "the sonic extra did not install (libyang2-dev missing?): the sonic tests will skip"

# Ray for `tectl resilience --ray` and its test on a local two-node cluster (the `ray`
# extra); without it that test skips and says why.
ray-extra: $(STAMP)
	@$(BIN)/python -c "import ray" 2>/dev/null || \
		$(BIN)/python -m pip install --quiet -e '.[dev,ray]' || \
		echo "the ray extra did not install: the Ray test will skip"

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

## system-deps: Debian packages for the real-component tests (root only; skipped otherwise)
system-deps:
	@if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
		echo "system-deps: not root or no apt-get; tests needing $(DEBS) will skip"; exit 0; fi; \
	missing=""; for p in $(DEBS); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "system-deps: installing$$missing"; \
		apt-get update -q >/dev/null && \
		policy=/usr/sbin/policy-rc.d; made=0; \
		if [ ! -e $$policy ]; then printf '#!/bin/sh\nexit 101\n' >$$policy; chmod +x $$policy; made=1; fi; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing >/dev/null; \
		rc=$$?; [ $$made = 1 ] && rm -f $$policy; exit $$rc; \
	fi

## test: the whole test suite, a worker process per core (pytest-xdist)
test: $(GEN) system-deps sonic-extra ray-extra
	$(BIN)/python -m pytest -n auto

## fuzz: every fuzz test (modules or tests named *fuzz*) with many more examples
FUZZ_EXAMPLES ?= 5000
fuzz: $(GEN)
	FABRIC_TE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -n auto -k fuzz

## certs: a throw-away CA, server and client certificates in certs/ (git-ignored)
certs: $(STAMP)
	$(BIN)/tectl certs certs --force

## bench: scale benchmarks; writes docs/benchmarks.md
bench: $(GEN) sonic-extra ray-extra
	$(BIN)/python -m sim.bench --out docs/benchmarks.md

## check: lint and type-check
check: $(GEN)
	$(BIN)/ruff check controller sim tests
	$(BIN)/mypy controller sim

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find controller/api -name '*_pb2*' -delete
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
