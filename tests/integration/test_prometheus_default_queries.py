"""The CRD's default PromQL, evaluated by a real Prometheus over what ``neuronserve`` exports.

``neuronserve_inflight_requests`` counts every request accepted and not answered, queued ones
included; the autoscaler's load is queued plus in flight, so the default in-flight query must
leave the queue out or the load counts it twice (as the simulator, whose in-flight count is the
executing requests only, never did).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_prometheus import PrometheusServer, TargetGroup

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.metrics.prometheus import PrometheusMetrics
from neuronfleet.planning.signals import MetricSnapshot

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]
QUEUED, EXECUTING = 4, 6

#: One replica's /metrics, as neuronserve writes them: 10 accepted and unanswered, 4 of them queued.
EXPOSITION = f"""# TYPE neuronserve_queue_depth gauge
neuronserve_queue_depth {QUEUED}
# TYPE neuronserve_inflight_requests gauge
neuronserve_inflight_requests {QUEUED + EXECUTING}
# TYPE neuronserve_device_busy_ratio gauge
neuronserve_device_busy_ratio 0.5
""".encode()


class Exporter(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(EXPOSITION)))
        self.end_headers()
        self.wfile.write(EXPOSITION)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def exporter() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_the_default_queries_count_a_queued_request_once(prometheus: PrometheusServer, exporter: str) -> None:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["spec"]["scaling"]["metrics"] = {"prometheusUrl": prometheus.url}  # every query at its default
    dep = InferenceDeployment.model_validate(doc)
    labels = {"namespace": dep.metadata.namespace or "default", "deployment": dep.name, "role": "active"}
    prometheus.set_targets([TargetGroup((exporter,), labels)])

    reader = PrometheusMetrics(None)
    snapshot: MetricSnapshot | None = None
    deadline = time.monotonic() + 60
    while snapshot is None or snapshot.missing():
        assert time.monotonic() < deadline, "Prometheus never scraped the exporter"
        await asyncio.sleep(0.1)  # a poll's pace, not a wait for an effect
        snapshot, _ = await reader.snapshot(dep, time.time())
    assert snapshot.queue_depth == QUEUED
    assert snapshot.in_flight == EXECUTING
    assert snapshot.load == QUEUED + EXECUTING
