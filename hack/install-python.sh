#!/usr/bin/env bash
# Install neuronfleet (editable) with its runtime, sandbox and test dependencies into the
# virtualenv, the Python half of `make install`.
#
# torch alone goes first, with pip: the CPU build of torch 2.13.0 lies on these machines' disk,
# where pip looks (its find-links) and uv does not; a bare `torch` anywhere would resolve to a
# multi-GB CUDA build. Everything else, torch's own dependencies included, goes with uv, which
# resolves, downloads and byte-compiles in parallel; torch's modules are byte-compiled on both
# cores by compileall. Measured on these 2 cores: about 1.5 min for the same packages at the same
# versions that pip installs in about 3.7 min (its resolver fetches some 130 index pages one by one
# and it byte-compiles on one core).
# Bytecode is compiled at install, as pip does by default, because these machines set
# PYTHONDONTWRITEBYTECODE: without it every process the tests start (servers, compile jobs, the
# CLI) would compile torch and transformers from source again at each import.
# Where uv cannot be installed, pip does the whole job (slower, same result).
# Idempotent: both installers skip what is already satisfied.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
CONSTRAINTS="$ROOT/hack/constraints.txt"
cd "$ROOT"

SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

"$PY" -m pip install --quiet --no-compile --no-deps -c "$CONSTRAINTS" torch==2.13.0

if "$PY" -m pip install --quiet --no-compile 'uv>=0.5,<1'; then
    # uv does not read pip's configuration: an index set for pip (a mirror) is passed on to it.
    if [[ -z "${UV_DEFAULT_INDEX:-}${UV_INDEX_URL:-}" ]]; then
        pip_index="${PIP_INDEX_URL:-$("$PY" -m pip config get global.index-url 2>/dev/null || true)}"
        if [[ -n "$pip_index" ]]; then
            export UV_DEFAULT_INDEX="$pip_index"
        fi
    fi
    "$VENV/bin/uv" pip install --quiet --compile-bytecode --python "$PY" -c "$CONSTRAINTS" -e '.[dev]'
else
    echo "install-python: uv could not be installed; installing with pip (a few minutes)" >&2
    "$PY" -m pip install --quiet -c "$CONSTRAINTS" torch==2.13.0 -e '.[dev]'
fi
# torch went in uncompiled (pip compiles on one core); compile it on all of them. A few of its
# files are written for newer Pythons and fail to compile, as under pip, which ignores that too:
# they are never imported on this one.
"$PY" -m compileall -q -j 0 "$SITE/torch" "$SITE/torchgen" "$SITE/functorch" >/dev/null || true
