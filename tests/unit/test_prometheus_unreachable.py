"""The Prometheus reader fails fast: one connection per snapshot when Prometheus is down, no retries.

A reconcile waits for the snapshot, so retries with back-off against a dead Prometheus (the
client library's default when no Retry is given) would stall every reconcile by seconds.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.metrics.prometheus import PrometheusMetrics

REPO = Path(__file__).resolve().parents[2]


class SlammingServer:
    """Accepts TCP connections and closes them at once (a Prometheus dying mid-request); counts them."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


@pytest.fixture
def slamming() -> Iterator[SlammingServer]:
    server = SlammingServer()
    yield server
    server.sock.close()


def deployment(url: str) -> InferenceDeployment:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["spec"]["scaling"]["metrics"] = {"prometheusUrl": url, "timeoutSeconds": 2}
    return InferenceDeployment.model_validate(doc)


async def test_one_connection_per_snapshot_and_the_reason_names_prometheus(slamming: SlammingServer) -> None:
    url = f"http://127.0.0.1:{slamming.port}"
    metrics = PrometheusMetrics(None)
    for round_ in range(1, 3):
        snapshot, reason = await metrics.snapshot(deployment(url), time.time())
        assert snapshot is None
        assert reason.startswith(f"Prometheus at {url} unavailable")
        assert slamming.accepted == round_


async def test_no_url_is_a_reason_not_an_error() -> None:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    snapshot, reason = await PrometheusMetrics(None).snapshot(InferenceDeployment.model_validate(doc), time.time())
    assert snapshot is None and "no Prometheus URL configured" in reason
