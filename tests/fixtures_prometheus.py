"""Pytest plugin: a real Prometheus (the Debian package's binary) on 127.0.0.1 for one test.

The server class is the sandbox's own (:mod:`neuronfleet.sandbox.prometheus`); this plugin adds the
install-when-absent step and the fixtures.

``prometheus`` starts the binary with a generated config (scrape and evaluation every second,
targets from a file_sd file the test rewrites) and a temporary TSDB; the test points targets at
real processes with :meth:`PrometheusServer.set_targets`, can :meth:`~PrometheusServer.stop` and
:meth:`~PrometheusServer.start` it mid-test (same port and TSDB: a restart, as a real outage), and
query it. The binary is installed by ``hack/install-prometheus.sh`` when absent; if that cannot
be done (no root, no apt) the tests that need it are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuronfleet.sandbox.prometheus import PrometheusServer, TargetGroup, free_port

REPO = Path(__file__).resolve().parent.parent
INSTALL_SCRIPT = REPO / "hack" / "install-prometheus.sh"


def prometheus_binary() -> str | None:
    """The prometheus binary, installed with hack/install-prometheus.sh when absent; None if impossible."""
    found = shutil.which("prometheus")
    if found:
        return found
    if os.environ.get("NEURONFLEET_NO_INSTALL"):
        return None
    result = subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        return None
    return shutil.which("prometheus")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    binary = prometheus_binary()
    if binary is None:
        pytest.skip(
            "the prometheus binary is not installed and hack/install-prometheus.sh could not install it "
            "(needs root or sudo and the Debian package 'prometheus')"
        )
    return binary


@pytest.fixture
def prometheus(prometheus_bin: str, tmp_path: Path) -> Iterator[PrometheusServer]:
    """A running Prometheus scraping whatever the test puts in its targets file, every second."""
    workdir = tmp_path / "prometheus"
    workdir.mkdir()
    server = PrometheusServer(prometheus_bin, workdir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


__all__ = ["PrometheusServer", "TargetGroup", "free_port", "prometheus", "prometheus_bin", "prometheus_binary"]
