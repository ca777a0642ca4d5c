"""The default queries asked once per Prometheus for every deployment, each snapshot taking its row.

Real HTTP: a small server on 127.0.0.1 answers Prometheus' query API from a table of values by
deployment, and records every query. A deployment's own (one-deployment) query is answered its row
of the same table, so the snapshot a deployment gets from the fleet-wide read can be compared with
the one its own queries give. The equality of the two forms' PromQL over real series is
tests/integration/test_prometheus_fleet_queries.py's.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from manual_clock import ManualClock

from neuronfleet.api.default_queries import FORMER_DEFAULTS
from neuronfleet.api.v1alpha1 import InferenceDeployment, MetricQueries
from neuronfleet.metrics.prometheus import (
    BACKOFF_SECONDS,
    DEFAULT_QUERIES,
    FLEET_QUERIES,
    FLEET_READ_MAX_AGE_SECONDS,
    PrometheusMetrics,
    render,
)
from neuronfleet.planning.signals import QUERIED

REPO = Path(__file__).resolve().parents[2]
NOW = 1_700_000_000.0

#: Each query's values by (namespace, deployment), found by the first word of it the query holds
#: (the in-flight query holds the queue depth's too: its word comes first).
VALUES: dict[str, dict[tuple[str, str], str]] = {
    "inflight": {("search", "bert"): "5", ("search", "gpt"): "1"},
    "queue_depth": {("search", "bert"): "2", ("search", "gpt"): "0"},
    "requests_total": {("search", "bert"): "40.5", ("search", "gpt"): "3"},
    "arrivals_peak": {("search", "bert"): "60", ("search", "gpt"): "4"},
    "busy_ratio": {("search", "bert"): "0.7"},  # gpt's pods report no busy ratio
    "timestamp(": {("search", "bert"): str(NOW - 3), ("search", "gpt"): str(NOW - 8)},
    "count": {("search", "bert"): "2", ("search", "gpt"): "1"},
}
FLEET = "by (namespace, deployment)"
_ONE = re.compile(r'namespace="(?P<namespace>[^"]*)",deployment="(?P<name>[^"]*)"')


class FakePrometheus:
    """Answers fleet-wide queries a row per deployment, a deployment's own queries its row; records
    every query. ``failing``: answer 503 (Prometheus unavailable). ``own_evaluated_at``: the
    evaluation time a deployment's own query is answered at (a fleet-wide one's is NOW).
    ``fleet_as_matrix``: answer fleet-wide queries with a range vector's rows (``values``)."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.failing = False
        self.own_evaluated_at = NOW
        self.fleet_as_matrix = False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query)["query"][0]
                fake.queries.append(query)
                if fake.failing:
                    self._answer(503, b"overloaded")
                    return
                values = next(table for word, table in VALUES.items() if word in query)
                if FLEET in query:
                    result = [
                        {
                            "metric": {"namespace": ns, "deployment": name},
                            **({"values": [[NOW, value]]} if fake.fleet_as_matrix else {"value": [NOW, value]}),
                        }
                        for (ns, name), value in values.items()
                    ]
                else:
                    match = _ONE.search(query)
                    assert match is not None, query
                    value = values.get((match["namespace"], match["name"]))
                    result = [] if value is None else [{"metric": {}, "value": [fake.own_evaluated_at, value]}]
                body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})
                self._answer(200, body.encode())

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def fleet_queries(self) -> list[str]:
        return [query for query in self.queries if FLEET in query]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prometheus() -> Iterator[FakePrometheus]:
    server = FakePrometheus()
    yield server
    server.close()


def deployment(
    name: str, namespace: str = "search", url: str | None = None, interval: int = 15, **metrics: Any
) -> InferenceDeployment:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["metadata"].update(name=name, namespace=namespace)
    doc["spec"]["scaling"]["intervalSeconds"] = interval
    doc["spec"]["scaling"]["metrics"] = {**metrics, **({"prometheusUrl": url} if url else {})}
    return InferenceDeployment.model_validate(doc)


def test_the_per_deployment_defaults_are_the_crds_and_the_fleet_form_groups_every_one() -> None:
    defaults = MetricQueries()
    assert {field: getattr(defaults, field) for field in DEFAULT_QUERIES} == DEFAULT_QUERIES
    assert set(FLEET_QUERIES) == {*QUERIED, "sample_time"}
    for field, query in FLEET_QUERIES.items():
        assert FLEET in query and "$" not in query, field


@pytest.mark.parametrize("spec_url", [False, True], ids=["--prometheus-url", "prometheusUrl"])
async def test_one_read_serves_every_deployment_and_each_takes_its_row(
    prometheus: FakePrometheus, spec_url: bool
) -> None:
    url = prometheus.url if spec_url else None
    deps = [
        deployment("bert", url=url),
        deployment("gpt", url=url),  # no busy ratio: that signal missing
        deployment("ghost", url=url),  # no series at all: no row in any answer
        deployment("bert", namespace="other", url=url),  # bert's name, another namespace: no row
    ]
    grouped = PrometheusMetrics(None if spec_url else prometheus.url)
    # Asked at once, as concurrent reconciles do: they wait for the one read under way.
    answers = await asyncio.gather(*(grouped.snapshot(dep, NOW) for dep in deps))
    assert len(prometheus.queries) == len(FLEET_QUERIES)
    assert prometheus.fleet_queries == prometheus.queries

    # The same snapshots (and reasons) as each deployment's own queries give.
    prometheus.queries.clear()
    own = PrometheusMetrics(None if spec_url else prometheus.url, group_default_queries=False)
    expected = [await own.snapshot(dep, NOW) for dep in deps]
    assert len(prometheus.queries) == len(deps) * len(FLEET_QUERIES) and not prometheus.fleet_queries
    assert answers == expected

    bert, gpt, ghost, other = answers
    assert bert[0] is not None and (bert[0].queue_depth, bert[0].in_flight, bert[0].utilization) == (2, 5, 0.7)
    assert bert[0].time == NOW - 3  # the sample time of bert's row
    assert gpt[0] is not None and gpt[0].utilization is None and gpt[1] == "signals missing: utilization"
    for snapshot, reason in (ghost, other):
        assert snapshot is None and reason.startswith(f"Prometheus at {prometheus.url} returned no samples")
    grouped.close()
    own.close()


async def test_a_read_serves_for_its_validity_then_the_next_snapshot_reads_again(prometheus: FakePrometheus) -> None:
    clock = ManualClock()
    metrics = PrometheusMetrics(prometheus.url, clock=clock)
    bert, gpt = deployment("bert"), deployment("gpt")
    await metrics.snapshot(bert, NOW)
    assert len(prometheus.queries) == len(FLEET_QUERIES)
    clock.now += FLEET_READ_MAX_AGE_SECONDS
    snapshot, _ = await metrics.snapshot(gpt, NOW)
    assert snapshot is not None and len(prometheus.queries) == len(FLEET_QUERIES)  # the same read
    clock.now += 0.5
    await metrics.snapshot(gpt, NOW)
    assert len(prometheus.queries) == 2 * len(FLEET_QUERIES)
    # A deployment evaluated every 2 s takes a read at most 1 s old: each evaluation reads anew.
    clock.now += 1.5
    snapshot, _ = await metrics.snapshot(deployment("bert", interval=2), NOW)
    assert snapshot is not None and len(prometheus.queries) == 3 * len(FLEET_QUERIES)
    metrics.close()


async def test_a_failed_read_backs_off_every_deployment_on_its_endpoint(prometheus: FakePrometheus) -> None:
    clock = ManualClock()
    metrics = PrometheusMetrics(None, clock=clock)
    deps = [deployment(name, url=prometheus.url) for name in ("bert", "gpt", "ghost")]
    prometheus.failing = True
    answers = await asyncio.gather(*(metrics.snapshot(dep, NOW) for dep in deps))
    assert len(prometheus.queries) == 1  # one read, stopped at its first failure
    assert {reason for _, reason in answers} == {
        f"Prometheus at {prometheus.url} unavailable: PrometheusApiClientException: HTTP 503"
    }
    assert all(snapshot is None for snapshot, _ in answers)
    backoff = metrics.backoff(prometheus.url, own=False)
    assert backoff is not None and backoff.failures == 1

    # Backing off: nothing asked, whichever deployment asks, even with Prometheus back.
    prometheus.failing = False
    clock.now += 1
    for dep in deps:
        snapshot, reason = await metrics.snapshot(dep, NOW)
        assert snapshot is None and "backing off" in reason
    assert len(prometheus.queries) == 1
    # Then one read probes, and serves them all.
    clock.now += BACKOFF_SECONDS
    answers = await asyncio.gather(*(metrics.snapshot(dep, NOW) for dep in deps))
    assert len(prometheus.queries) == 1 + len(FLEET_QUERIES)
    assert answers[0][0] is not None and answers[1][0] is not None
    assert metrics.backoff(prometheus.url, own=False) is None
    metrics.close()


async def test_a_fleet_answer_that_is_not_an_instant_vector_is_said_so_not_read_as_missing(
    prometheus: FakePrometheus,
) -> None:
    # Rows of a range vector (a proxy or a rule answering something else) hold no one value per
    # deployment: the read fails as malformed, and does not read as signals the pods did not report.
    metrics = PrometheusMetrics(None, clock=ManualClock())
    prometheus.fleet_as_matrix = True
    snapshot, reason = await metrics.snapshot(deployment("bert", url=prometheus.url), NOW)
    assert snapshot is None
    assert reason == f"Prometheus at {prometheus.url} unavailable: ValueError: an answer of an unexpected shape"
    metrics.close()


#: The usual override: a longer arrival-rate window (for a 30 s scrape).
LONGER_RATE = 'sum(rate(neuronserve_requests_total{namespace="$namespace",deployment="$name"}[2m]))'


async def test_a_deployment_with_one_overridden_query_asks_that_one_and_takes_the_others_rows(
    prometheus: FakePrometheus,
) -> None:
    metrics = PrometheusMetrics(prometheus.url)
    custom = deployment("bert", arrivalRate=LONGER_RATE)
    answers = await asyncio.gather(metrics.snapshot(custom, NOW), metrics.snapshot(deployment("gpt"), NOW))
    # One shared read for both, and custom's one query of its own.
    assert sorted(prometheus.fleet_queries) == sorted(FLEET_QUERIES.values())
    own_queries = [query for query in prometheus.queries if query not in prometheus.fleet_queries]
    assert own_queries == [render(LONGER_RATE, "search", "bert")]
    snapshot, reason = answers[0]
    assert snapshot is not None and reason == "metrics read"
    assert (snapshot.arrival_rate, snapshot.queue_depth, snapshot.utilization) == (40.5, 2, 0.7)

    # The same snapshot (and reason) as asking all of custom's queries itself.
    everything_own = PrometheusMetrics(prometheus.url, group_default_queries=False)
    assert await everything_own.snapshot(custom, NOW) == answers[0]
    metrics.close()
    everything_own.close()


async def test_a_snapshot_from_the_shared_read_and_its_own_queries_is_dated_by_its_oldest_part(
    prometheus: FakePrometheus,
) -> None:
    metrics = PrometheusMetrics(prometheus.url)
    custom = deployment("bert", arrivalRate=LONGER_RATE)
    snapshot, _ = await metrics.snapshot(custom, NOW)
    assert snapshot is not None and snapshot.time == NOW - 3  # the sample time, from the shared read
    assert len(prometheus.fleet_queries) == len(FLEET_QUERIES) == len(prometheus.queries) - 1
    # Its own query evaluated before the shared read's sample time: that is the snapshot's time.
    prometheus.own_evaluated_at = NOW - 10
    fresh = PrometheusMetrics(prometheus.url)
    snapshot, _ = await fresh.snapshot(custom, NOW)
    assert snapshot is not None and snapshot.time == NOW - 10
    metrics.close()
    fresh.close()


async def test_a_turned_off_signal_stays_off_and_a_spelled_out_default_is_the_default(
    prometheus: FakePrometheus,
) -> None:
    metrics = PrometheusMetrics(prometheus.url)
    turned_off = deployment("bert", arrivalPeak="")
    snapshot, reason = await metrics.snapshot(turned_off, NOW)
    assert prometheus.queries == prometheus.fleet_queries and len(prometheus.queries) == len(FLEET_QUERIES)
    assert snapshot is not None and snapshot.arrival_peak is None and snapshot.arrival_rate == 40.5
    assert reason == "metrics read"  # a signal turned off is not missing
    everything_own = PrometheusMetrics(prometheus.url, group_default_queries=False)
    assert await everything_own.snapshot(turned_off, NOW) == (snapshot, reason)
    everything_own.close()

    # The default spelled out for this deployment is the default: the read already there serves it.
    prometheus.queries.clear()
    spelled = deployment("gpt", arrivalRate=render(DEFAULT_QUERIES["arrival_rate"], "search", "gpt"))
    snapshot, _ = await metrics.snapshot(spelled, NOW)
    assert snapshot is not None and snapshot.arrival_rate == 3 and not prometheus.queries
    metrics.close()


async def test_a_deployment_with_every_query_overridden_asks_no_shared_read(prometheus: FakePrometheus) -> None:
    metrics = PrometheusMetrics(prometheus.url)
    overrides: dict[str, Any] = {
        MetricQueries.model_fields[field].alias or field: f"({query})" for field, query in DEFAULT_QUERIES.items()
    }
    snapshot, _ = await metrics.snapshot(deployment("bert", **overrides), NOW)
    assert snapshot is not None and snapshot.queue_depth == 2
    assert not prometheus.fleet_queries and len(prometheus.queries) == len(FLEET_QUERIES)
    assert all('deployment="bert"' in query for query in prometheus.queries)
    metrics.close()


async def test_a_reconcile_cancelled_while_waiting_leaves_the_read_to_the_others(prometheus: FakePrometheus) -> None:
    metrics = PrometheusMetrics(prometheus.url)
    first = asyncio.create_task(metrics.snapshot(deployment("bert"), NOW))
    second = asyncio.create_task(metrics.snapshot(deployment("gpt"), NOW))
    await asyncio.sleep(0)  # both waiting for the read the first started
    first.cancel()
    snapshot, reason = await second
    assert snapshot is not None and snapshot.queue_depth == 0, reason
    assert len(prometheus.queries) == len(FLEET_QUERIES)
    metrics.close()


async def test_a_deployment_stored_with_an_earlier_releases_defaults_takes_the_shared_read(
    prometheus: FakePrometheus,
) -> None:
    metrics = PrometheusMetrics(prometheus.url)
    fields = MetricQueries.model_fields
    earlier: dict[str, Any] = {fields[field].alias or field: queries[-1] for field, queries in FORMER_DEFAULTS.items()}
    snapshot, reason = await metrics.snapshot(deployment("bert", **earlier), NOW)
    assert prometheus.queries == prometheus.fleet_queries and len(prometheus.queries) == len(FLEET_QUERIES)
    assert snapshot is not None and reason == "metrics read"
    assert (snapshot.queue_depth, snapshot.in_flight, snapshot.arrival_rate) == (2, 5, 40.5)
    metrics.close()
