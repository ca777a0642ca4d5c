"""The default queries' fleet-wide form answers, row by row, what each deployment's own queries do.

A real Prometheus scrapes pods of four deployments in two namespaces: one with a pod scraped twice,
one with a pod still loading (not ready) and a warm pod, one with the same name (and a pod of the
same name) in the other namespace, and one with no series at all; a fifth deployment reads the
first's series with its arrival rate overridden (a longer window), which it asks itself while
taking its other signals from the shared read. Counters grow at every scrape, so
the arrival rates are not zero. The operator's reader asks through a proxy that pins every query's
evaluation time to one instant in the past (data Prometheus no longer changes), so the snapshot
read from the fleet-wide answer and the one read from the deployment's own queries are compared
field by field, sample time included.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
import yaml
from fixtures_prometheus import PrometheusServer, TargetGroup

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.metrics.prometheus import FLEET_QUERIES, PrometheusMetrics
from neuronfleet.planning.signals import MetricSnapshot

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]


class Pod:
    """One pod's /metrics: gauges as given, and request counters that grow by ``step`` per scrape."""

    def __init__(self, queued: float, executing: float, busy: float, ready: int, peak: float, step: int) -> None:
        scrapes = itertools.count(1)
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with lock:
                    n = next(scrapes)
                body = (
                    f"neuronserve_queue_depth {queued}\n"
                    f"neuronserve_inflight_requests {queued + executing}\n"
                    f"neuronserve_device_busy_ratio {busy}\n"
                    f"neuronserve_ready {ready}\n"
                    f"neuronserve_arrivals_peak_per_second {peak}\n"
                    f'neuronserve_requests_total{{outcome="ok"}} {1000 + step * n}\n'
                    f'neuronserve_requests_total{{outcome="error"}} {n}\n'
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class PinnedTime:
    """A proxy to Prometheus' query API that evaluates every query at ``at`` (Unix seconds), and
    records the queries."""

    def __init__(self, prometheus_url: str) -> None:
        self.at: float | None = None
        self.queries: list[str] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                split = urlsplit(self.path)
                params = {key: values[0] for key, values in parse_qs(split.query).items()}
                proxy.queries.append(params["query"])
                params["time"] = f"{proxy.at:.3f}"
                answer = requests.get(prometheus_url + split.path, params=params, timeout=10)
                self.send_response(answer.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def pods() -> Iterator[Callable[..., Pod]]:
    made: list[Pod] = []

    def make(**values: Any) -> Pod:
        made.append(Pod(**values))
        return made[-1]

    yield make
    for pod in made:
        pod.stop()


@pytest.fixture
def pinned(prometheus: PrometheusServer) -> Iterator[PinnedTime]:
    proxy = PinnedTime(prometheus.url)
    yield proxy
    proxy.stop()


#: The usual override (a longer arrival-rate window, for a slower scrape): the deployment asks this
#: one itself and takes the six other queries' rows of the shared read.
LONGER_RATE = (
    "sum(max by (namespace, pod, outcome) "
    '(rate(neuronserve_requests_total{namespace="$namespace",deployment="$name"}[2m])))'
)


def _deployment(namespace: str, name: str, **metrics: str) -> InferenceDeployment:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["metadata"].update(namespace=namespace, name=name)
    # Every query at its default unless given, from the operator's URL.
    doc["spec"]["scaling"]["metrics"] = metrics
    return InferenceDeployment.model_validate(doc)


def _target(pod: Pod, namespace: str, deployment: str, name: str, role: str = "active", **more: str) -> TargetGroup:
    labels = {"namespace": namespace, "deployment": deployment, "pod": name, "role": role, **more}
    return TargetGroup((pod.address,), labels)


async def test_each_deployments_row_of_the_fleet_wide_answer_is_its_own_queries_answer(
    prometheus: PrometheusServer, pinned: PinnedTime, pods: Callable[..., Pod]
) -> None:
    ml_bert_a = pods(queued=2, executing=3, busy=0.6, ready=1, peak=10, step=5)
    ml_bert_b = pods(queued=4, executing=1, busy=0.2, ready=1, peak=30, step=3)
    gpt_a = pods(queued=1, executing=2, busy=0.9, ready=1, peak=7, step=2)
    gpt_loading = pods(queued=0, executing=0, busy=0.0, ready=0, peak=0, step=1)
    gpt_warm = pods(queued=0, executing=0, busy=0.0, ready=1, peak=0, step=0)
    search_bert_a = pods(queued=7, executing=1, busy=0.3, ready=1, peak=3, step=4)
    targets = [
        # Pod ml/bert-a scraped twice (a PodMonitor beside a static scrape config).
        _target(ml_bert_a, "ml", "bert", "bert-a", scraper="podmonitor"),
        _target(ml_bert_a, "ml", "bert", "bert-a", scraper="static"),
        _target(ml_bert_b, "ml", "bert", "bert-b"),
        _target(gpt_a, "ml", "gpt", "gpt-a"),
        _target(gpt_loading, "ml", "gpt", "gpt-b"),  # active, still loading its model
        _target(gpt_warm, "ml", "gpt", "gpt-w", role="warm"),
        # The same deployment and pod names in another namespace.
        _target(search_bert_a, "search", "bert", "bert-a"),
    ]
    prometheus.set_targets(targets)
    deadline = time.monotonic() + 60
    # rate() needs two samples in its window, two scrape intervals before now: five scrapes.
    while len(prometheus.query("count_over_time(neuronserve_ready[1m]) >= 5")) < len(targets):
        assert time.monotonic() < deadline, "Prometheus never scraped every target five times"
        await asyncio.sleep(0.2)  # a poll's pace, not a wait for an effect
    # Two scrape intervals ago: no sample stamped before it is still to be appended.
    pinned.at = time.time() - 2

    deps = [_deployment("ml", "bert"), _deployment("ml", "gpt"), _deployment("search", "bert")]
    deps.append(_deployment("search", "ghost"))  # no series
    deps.append(_deployment("ml", "bert", arrivalRate=LONGER_RATE))  # one query its own
    grouped = PrometheusMetrics(pinned.url)
    from_rows = await asyncio.gather(*(grouped.snapshot(dep, time.time()) for dep in deps))
    # One read for the five, and the overridden query of the fifth.
    own_rate = LONGER_RATE.replace("$namespace", "ml").replace("$name", "bert")
    assert sorted(pinned.queries) == sorted([*FLEET_QUERIES.values(), own_rate])
    pinned.queries.clear()
    own = PrometheusMetrics(pinned.url, group_default_queries=False)
    from_own = [await own.snapshot(dep, time.time()) for dep in deps]
    assert len(pinned.queries) == len(deps) * len(FLEET_QUERIES)
    grouped.close()
    own.close()

    for dep, (row, row_reason), (mine, my_reason) in zip(deps, from_rows, from_own, strict=True):
        which = f"{dep.metadata.namespace}/{dep.name}"
        assert row_reason == my_reason, which
        assert (row is None) == (mine is None), which
        if row is None or mine is None:
            continue
        for field in fields(MetricSnapshot):
            ours, theirs = getattr(row, field.name), getattr(mine, field.name)
            assert (ours is None) == (theirs is None), (which, field.name)
            # The same sums, perhaps added in another order: equal to the last bits or so.
            assert theirs is None or ours == pytest.approx(theirs, rel=1e-12), (which, field.name)

    # The cases are what they say: no pod counted twice, the loading and warm pods left out, each
    # namespace its own row, and no row for the deployment without series.
    ml_bert, ml_gpt, search_bert, ghost, ml_bert_longer_rate = (snapshot for snapshot, _ in from_rows)
    assert ml_bert is not None and (ml_bert.queue_depth, ml_bert.in_flight, ml_bert.reporting) == (6, 4, 2)
    assert ml_bert.arrival_peak == 40 and ml_bert.utilization == pytest.approx(0.4)
    assert ml_bert.arrival_rate is not None and ml_bert.arrival_rate > 0
    assert ml_gpt is not None and (ml_gpt.queue_depth, ml_gpt.reporting) == (1, 1)
    assert ml_gpt.utilization == pytest.approx(0.9)
    assert search_bert is not None and (search_bert.queue_depth, search_bert.reporting) == (7, 1)
    assert ghost is None and from_rows[3][1] == f"Prometheus at {pinned.url} returned no samples for ghost"
    # Its rows are ml/bert's, and its arrival rate its own query's (compared above with asking it all).
    assert ml_bert_longer_rate is not None and ml_bert_longer_rate.queue_depth == ml_bert.queue_depth
    assert ml_bert_longer_rate.arrival_rate is not None and ml_bert_longer_rate.arrival_rate > 0
    assert ml_bert.time <= pinned.at and time.time() - ml_bert.time < 10  # dated by the samples
