#!/usr/bin/env bash
# Install Prometheus (Debian's `prometheus` package, 2.42 on bookworm) for the autoscaling
# integration tests, which start the binary themselves on 127.0.0.1 with a generated config.
# Idempotent: does nothing when a working `prometheus` is already on PATH. The package's own
# service is neither needed nor started: inside containers there is no init to start it, and on a
# host with systemd the policy-rc.d guard below keeps apt from starting it.
set -euo pipefail

if command -v prometheus >/dev/null 2>&1 && prometheus --version >/dev/null 2>&1; then
    echo "prometheus already installed: $(prometheus --version 2>&1 | head -n 1)"
    exit 0
fi

SUDO=""
if [[ "$(id -u)" != "0" ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "install-prometheus: not root and no sudo; install the Debian package 'prometheus' by hand" >&2
        exit 1
    fi
    SUDO="sudo"
fi

# Keep apt from starting the packaged service: the tests run their own instance.
POLICY=/usr/sbin/policy-rc.d
ADDED_POLICY=0
if [[ ! -e "$POLICY" ]]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
    $SUDO chmod +x "$POLICY"
    ADDED_POLICY=1
fi
cleanup() { if [[ "$ADDED_POLICY" == 1 ]]; then $SUDO rm -f "$POLICY"; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y --no-install-recommends prometheus; then
    $SUDO apt-get update
    $SUDO apt-get install -y --no-install-recommends prometheus
fi
prometheus --version 2>&1 | head -n 1
