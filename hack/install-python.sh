#!/usr/bin/env bash
# Install neuronfleet (editable) with its runtime, sandbox and test dependencies into the
# virtualenv, the Python half of `make install`.
#
# torch goes first, with pip: the CPU build of torch 2.13.0 lies on these machines' disk, where pip
# looks (its find-links) and uv does not; a bare `torch` anywhere would resolve to a multi-GB CUDA
# build. Everything else goes with uv, which resolves and downloads in parallel: on these 2 cores
# it installs the same packages at the same versions as pip in about 15 s, against 70 s for pip's
# resolver (about 130 index pages fetched one by one) and 180 s with pip's default byte-compile.
# Neither compiles bytecode at install: Python writes the .pyc of what is imported, once, on first
# import, instead of compiling every module of torch, transformers, scipy and moto up front.
# Where uv cannot be installed, pip does the whole job (slower, same result).
# Idempotent: both installers skip what is already satisfied.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
CONSTRAINTS="$ROOT/hack/constraints.txt"
cd "$ROOT"

"$PY" -m pip install --quiet --no-compile -c "$CONSTRAINTS" torch==2.13.0

if "$PY" -m pip install --quiet --no-compile 'uv>=0.5,<1'; then
    # uv does not read pip's configuration: an index set for pip (a mirror) is passed on to it.
    if [[ -z "${UV_DEFAULT_INDEX:-}${UV_INDEX_URL:-}" ]]; then
        pip_index="${PIP_INDEX_URL:-$("$PY" -m pip config get global.index-url 2>/dev/null || true)}"
        if [[ -n "$pip_index" ]]; then
            export UV_DEFAULT_INDEX="$pip_index"
        fi
    fi
    "$VENV/bin/uv" pip install --quiet --python "$PY" -c "$CONSTRAINTS" -e '.[dev]'
else
    echo "install-python: uv could not be installed; installing with pip (a few minutes)" >&2
    "$PY" -m pip install --quiet --no-compile -c "$CONSTRAINTS" -e '.[dev]'
fi
