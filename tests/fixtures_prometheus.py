"""Pytest plugin: a real Prometheus (the Debian package's binary) on 127.0.0.1 for one test.

``prometheus`` starts the binary with a generated config (scrape and evaluation every second,
targets from a file_sd file the test rewrites) and a temporary TSDB; the test points targets at
real processes with :meth:`PrometheusServer.set_targets`, can :meth:`~PrometheusServer.stop` and
:meth:`~PrometheusServer.start` it mid-test (same port and TSDB: a restart, as a real outage), and
query it. The binary is installed by ``hack/install-prometheus.sh`` when absent; if that cannot
be done (no root, no apt) the tests that need it are skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
INSTALL_SCRIPT = REPO / "hack" / "install-prometheus.sh"
SCRAPE_INTERVAL = "1s"


@dataclass(frozen=True)
class TargetGroup:
    """One file_sd entry: addresses (host:port) and the labels every series scraped from them gets."""

    targets: tuple[str, ...]
    labels: Mapping[str, str]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrometheusServer:
    """One Prometheus process with its config, file_sd targets and TSDB under ``workdir``."""

    def __init__(self, binary: str, workdir: Path, port: int | None = None) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = port or free_port()
        self.targets_file = workdir / "targets.json"
        self.config_file = workdir / "prometheus.yml"
        self.tsdb = workdir / "tsdb"
        self.log_file = workdir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.set_targets([])
        config = {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
            "scrape_configs": [
                {
                    "job_name": "neuronserve",
                    "scrape_timeout": "900ms",
                    "file_sd_configs": [{"files": [str(self.targets_file)], "refresh_interval": "1s"}],
                }
            ],
        }
        self.config_file.write_text(yaml.safe_dump(config))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def set_targets(self, groups: Sequence[TargetGroup]) -> None:
        """Replace the scrape targets (atomically: Prometheus never reads a half-written file)."""
        doc = [{"targets": list(g.targets), "labels": dict(g.labels)} for g in groups]
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, sort_keys=True))
        os.replace(tmp, self.targets_file)

    def start(self, timeout: float = 30.0) -> None:
        """Start (or restart) the process and wait until it answers /-/ready."""
        if self.running:
            return
        self.tsdb.mkdir(exist_ok=True)
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.config_file}",
                    f"--storage.tsdb.path={self.tsdb}",
                    "--storage.tsdb.retention.time=1h",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while not self._ready():
            if not self.running:
                raise RuntimeError(f"prometheus exited at start-up:\n{self.log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"prometheus not ready after {timeout}s:\n{self.log()}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 10 s); the TSDB stays for a restart."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")[-4000:] if self.log_file.exists() else ""

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=5) as response:
            doc = json.loads(response.read())
        if doc.get("status") != "success":
            raise RuntimeError(f"prometheus API {path}: {doc}")
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def active_targets(self) -> list[dict[str, Any]]:
        targets: list[dict[str, Any]] = self.api("targets", state="active")["activeTargets"]
        return targets


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
