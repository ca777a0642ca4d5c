# neuronfleet: the two commands a fresh machine needs are `make demo` and `make test`.
# Everything else (lint, crds, bench) is reachable from here too.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
PIP := $(PY) -m pip
# Reinstall when the dependency list or the install scripts change.
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml hack/constraints.txt hack/install-*.sh 2>/dev/null | sha1sum | cut -c1-12)
PYTEST_ARGS ?=
# Test workers (pytest-xdist): two per CPU, at most 4 (each worker compiles its own MiniLM for the
# runtime tests). Most of the suite's time is real processes (servers, the compiler, Prometheus)
# waiting on one another: on 2 cores, three workers left 18% of the CPU idle (420 s and 438 s of
# pytest); four took 338-450 s in six runs (the order the long e2e tests land in moves the end);
# five kept the CPU busy and took 414 s, each extra worker's MiniLM compile costing what it filled.
# PYTEST_WORKERS=0 runs the suite in this process.
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( 2 * n > 4 ? 4 : 2 * n )))

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export MPLBACKEND := Agg
# Python keeps compiled bytecode (and pytest its rewritten test modules) even where the environment
# says not to (these machines set PYTHONDONTWRITEBYTECODE): the suite and the demo start Python
# processes by the hundred, each compiling neuronfleet's modules again without it (~0.3 s each).
unexport PYTHONDONTWRITEBYTECODE
# Tests and the demo reach only 127.0.0.1: boto3 must not probe the EC2 metadata address for credentials.
export AWS_EC2_METADATA_DISABLED := true

.PHONY: help install demo test lint mypy-tests crds crds-check bench bench-docs clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP):
	@echo "==> creating $(VENV) and installing neuronfleet with its test and runtime dependencies"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# torch's CPU build with pip, then the rest with uv (hack/install-python.sh says why).
	VENV=$(abspath $(VENV)) bash hack/install-python.sh
	VENV=$(abspath $(VENV)) bash hack/install-kube-tools.sh
	# Prometheus (Debian package) for the autoscaling integration tests, which run their own instance.
	bash hack/install-prometheus.sh
	@rm -f $(VENV)/.installed-*
	@touch $@

install: $(STAMP)  ## create .venv and install everything (done by demo and test)

# DEMO_ARGS: e.g. DEMO_ARGS="--peak-rps 250" or "--load simulated --minutes 36 --speed 20"; see `neuronfleet demo -h`.
DEMO_ARGS ?=

demo: $(STAMP)  ## the tour: sandbox + operator + compile + real requests to real servers via Prometheus; report in demo-out/
	@echo "==> validating the example InferenceDeployments offline (schema, CEL rules, Inf2 catalog)"
	$(BIN)/neuronfleet validate -f examples/
	@echo "==> sandbox demo (live view on a terminal, a line per minute otherwise)"
	$(BIN)/neuronfleet demo --out demo-out $(DEMO_ARGS)

lint: $(STAMP)  ## ruff, mypy --strict (packages, scripts, tests), import-linter layering contracts
	$(BIN)/ruff check operator runtime tests bench hack
	$(BIN)/ruff format --check operator runtime tests bench hack
	@# The benchmark and hack scripts too: one that calls the planner by an old signature fails here, not an hour into make bench.
	$(BIN)/mypy operator/neuronfleet runtime/neuronserve bench/*.py hack/*.py
	$(MAKE) --no-print-directory mypy-tests
	$(BIN)/lint-imports

# The tests, type-checked as strictly as the packages, in three runs: tests/, tests/e2e and
# tests/runtime each have a conftest.py (pytest imports by folder; there are no packages), which
# one mypy run would take for one module found twice. MYPYPATH mirrors the sys.path pytest gives
# each folder. The runs share the packages' cache (a conftest met at another path is checked anew):
# about 20 s after the packages' run, not a minute.
MYPY_TESTS_PATH := operator:runtime:bench:tests
mypy-tests: $(STAMP)  ## mypy --strict over tests/
	MYPYPATH=$(MYPY_TESTS_PATH):tests/unit:tests/charts:tests/integration $(BIN)/mypy tests/*.py tests/unit tests/charts tests/integration
	MYPYPATH=$(MYPY_TESTS_PATH):tests/e2e $(BIN)/mypy tests/e2e
	MYPYPATH=$(MYPY_TESTS_PATH):tests/runtime $(BIN)/mypy tests/runtime

test: $(STAMP)  ## install everything, lint, then run the whole test suite
	$(MAKE) --no-print-directory lint
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

crds: $(STAMP)  ## regenerate the CRD YAML from the typed API (crds/ and the chart)
	$(BIN)/neuronfleet crds --write

bench: $(STAMP)  ## run the benchmarks; results as JSON under bench/results/, then bench-docs
	@for b in bench/bench_*.py; do echo "==> $$b"; $(PY) $$b; done
	@# bench_fleet.py ran its full grids above (fleet-full-sweep.json); the headline is the narrow sweep.
	@echo "==> bench/bench_fleet.py --narrow"; $(PY) bench/bench_fleet.py --narrow
	$(MAKE) --no-print-directory bench-docs

# The figures in README.md and docs/benchmarks.md are rendered from bench/results, never typed.
bench-docs: $(STAMP)  ## re-render README's and docs/benchmarks.md's figures from bench/results/*.json
	$(PY) bench/render_docs.py

clean:  ## remove the virtualenv and caches
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis demo-out
