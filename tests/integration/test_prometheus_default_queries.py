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
from collections.abc import Callable, Iterator
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
# TYPE neuronserve_ready gauge
neuronserve_ready 1
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


class Replica:
    """One replica's /metrics endpoint, which a test can take down."""

    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.up = True

    def stop(self) -> None:
        if self.up:
            self.server.shutdown()
            self.server.server_close()
            self.up = False


@pytest.fixture
def replica() -> Iterator[Replica]:
    served = Replica()
    yield served
    served.stop()


@pytest.fixture
def exporter(replica: Replica) -> str:
    return replica.address


def _deployment(prometheus: PrometheusServer, **metrics: Any) -> InferenceDeployment:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["spec"]["scaling"]["metrics"] = {"prometheusUrl": prometheus.url, **metrics}
    return InferenceDeployment.model_validate(doc)


async def _snapshot_until(
    reader: PrometheusMetrics, dep: InferenceDeployment, done: Callable[[MetricSnapshot], bool], what: str
) -> MetricSnapshot:
    deadline = time.monotonic() + 60
    while True:
        snapshot, reason = await reader.snapshot(dep, time.time())
        if snapshot is not None and done(snapshot):
            return snapshot
        assert time.monotonic() < deadline, f"timed out waiting for {what} (last: {reason})"
        await asyncio.sleep(0.2)  # a poll's pace, not a wait for an effect


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


async def test_samples_left_from_before_a_prometheus_restart_are_dated_by_their_scrape(
    prometheus: PrometheusServer, replica: Replica
) -> None:
    # Prometheus restarted while the replica went away: the old samples are still answered (its
    # 5-minute lookback, no staleness marker from the new process), stamped with the query's time.
    # The snapshot must carry their scrape time, so that staleAfterSeconds drops them.
    dep = _deployment(prometheus, staleAfterSeconds=5)
    labels = {"namespace": dep.metadata.namespace or "default", "deployment": dep.name, "role": "active"}
    prometheus.set_targets([TargetGroup((replica.address,), labels)])
    reader = PrometheusMetrics(None)
    fresh = await _snapshot_until(reader, dep, lambda s: not s.missing(), "the first scrape")
    assert time.time() - fresh.time < 5

    prometheus.stop()
    replica.stop()
    prometheus.start()
    old = await _snapshot_until(
        reader, dep, lambda s: s.queue_depth is not None and time.time() - s.time > 5, "samples older than 5 s"
    )
    assert old.queue_depth == QUEUED  # still answered...
    assert old.without_stale(time.time(), 5).queue_depth is None  # ...and dropped as stale


def _exposition(queued: float, executing: float, busy: float, ready: int) -> bytes:
    return (
        f"neuronserve_queue_depth {queued}\n"
        f"neuronserve_inflight_requests {queued + executing}\n"
        f"neuronserve_device_busy_ratio {busy}\n"
        f"neuronserve_ready {ready}\n"
    ).encode()


class Pod:
    """One pod's /metrics with the given exposition."""

    def __init__(self, body: bytes) -> None:
        class Handler(Exporter):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def pods() -> Iterator[Callable[[bytes], Pod]]:
    made: list[Pod] = []

    def make(body: bytes) -> Pod:
        made.append(Pod(body))
        return made[-1]

    yield make
    for pod in made:
        pod.stop()


async def test_the_default_queries_average_and_sum_over_ready_pods_only(
    prometheus: PrometheusServer, pods: Callable[[bytes], Pod]
) -> None:
    # An active pod still loading its model reports a busy ratio of 0: averaged in, it halved the
    # utilization of the one serving, and the autoscaler learned a service rate twice the truth.
    dep = _deployment(prometheus)
    labels = {"namespace": dep.metadata.namespace or "default", "deployment": dep.name, "role": "active"}
    serving = pods(_exposition(queued=2, executing=3, busy=0.6, ready=1))
    loading = pods(_exposition(queued=0, executing=0, busy=0.0, ready=0))
    prometheus.set_targets(
        [
            TargetGroup((serving.address,), {**labels, "pod": "bert-a"}),
            TargetGroup((loading.address,), {**labels, "pod": "bert-b"}),
        ]
    )
    selector = f'neuronserve_ready{{namespace="{labels["namespace"]}",deployment="{dep.name}"}}'
    deadline = time.monotonic() + 60
    while len(prometheus.query(selector)) < 2:
        assert time.monotonic() < deadline, "Prometheus never scraped both pods"
        await asyncio.sleep(0.2)  # a poll's pace, not a wait for an effect
    snapshot, reason = await PrometheusMetrics(None).snapshot(dep, time.time())
    assert snapshot is not None, reason
    assert snapshot.utilization == pytest.approx(0.6)
    assert (snapshot.queue_depth, snapshot.in_flight) == (2.0, 3.0)


async def test_the_default_queries_count_a_pod_scraped_twice_once_and_say_how_many_pods_report(
    prometheus: PrometheusServer, pods: Callable[[bytes], Pod]
) -> None:
    # The chart's PodMonitor beside a plain scrape config (or an HA pair without deduplication):
    # every series of pod a twice, and every sum doubled. Then pod b's scrapes fail: its series go
    # stale and leave the sums, which read low with no signal missing; the count of pods reporting
    # is what tells the autoscaler the snapshot is partial.
    dep = _deployment(prometheus)
    labels = {"namespace": dep.metadata.namespace or "default", "deployment": dep.name, "role": "active"}
    a = pods(_exposition(queued=2, executing=3, busy=0.6, ready=1) + b"neuronserve_arrivals_peak_per_second 10\n")
    b = pods(_exposition(queued=4, executing=1, busy=0.2, ready=1) + b"neuronserve_arrivals_peak_per_second 30\n")
    prometheus.set_targets(
        [
            TargetGroup((a.address,), {**labels, "pod": "bert-a", "scraper": "podmonitor"}),
            TargetGroup((a.address,), {**labels, "pod": "bert-a", "scraper": "static"}),
            TargetGroup((b.address,), {**labels, "pod": "bert-b", "scraper": "podmonitor"}),
        ]
    )
    selector = f'neuronserve_ready{{namespace="{labels["namespace"]}",deployment="{dep.name}"}}'
    deadline = time.monotonic() + 60
    while len(prometheus.query(selector)) < 3:
        assert time.monotonic() < deadline, "Prometheus never scraped the three targets"
        await asyncio.sleep(0.2)  # a poll's pace, not a wait for an effect
    reader = PrometheusMetrics(None)
    snapshot, reason = await reader.snapshot(dep, time.time())
    assert snapshot is not None, reason
    assert (snapshot.queue_depth, snapshot.in_flight, snapshot.arrival_peak) == (6.0, 4.0, 40.0)
    assert snapshot.utilization == pytest.approx(0.4)
    assert snapshot.reporting == 2.0

    b.stop()
    # A snapshot's queries run one after another: one may be answered just before b's series go
    # stale and the next just after, so wait for a snapshot taken wholly after.
    partial = await _snapshot_until(
        reader,
        dep,
        lambda s: s.reporting == 1.0 and (s.queue_depth, s.in_flight) == (2.0, 3.0),
        "pod b's series to go stale, and the sums to read pod a's alone",
    )
    assert partial.partial(ready=2)
