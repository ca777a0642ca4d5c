"""The Prometheus reader on answers of every shape: a scalar, a non-finite value, a matrix.

A query is the user's to write (``scaling.metrics``); whatever Prometheus answers to it must become
a number or a missing signal, never an exception that stops the reconcile (no status, no pods).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.metrics.prometheus import REASON_CHARS, PrometheusMetrics, _scalar
from neuronfleet.planning.observation import DeploymentMemory
from neuronfleet.planning.reconcile_plan import decide_targets
from neuronfleet.planning.signals import MetricSnapshot
from neuronserve.metrics import BusyTracker

REPO = Path(__file__).resolve().parents[2]
NOW = 1_700_000_000.0


def _busy_ratio_from_neuronserve_counter(batch: float = 4.0, scrape: float = 15.0) -> float:
    """The highest ``rate(neuronserve_device_busy_seconds_total[1m])`` (over one core) of a device
    that is never idle, running ``batch``-second batches back to back, scraped every ``scrape`` s:
    neuronserve credits a batch's busy time when it ends, so a window's 4 samples (45 s end to end)
    can span 12 batches' credit; rate() is read here as the increase over the samples' span."""
    tracker = BusyTracker(window_seconds=10, clock=lambda: 0.0)
    samples, ended = [], 0.0
    for at in (7 + scrape * k for k in range(40)):
        while ended + batch <= at:
            tracker.started(ended)
            tracker.finished(ended, ended + batch)
            ended += batch
        samples.append((at, tracker.busy_seconds_total))
    return max(
        (last - first) / (end - start) for (start, first), (end, last) in zip(samples, samples[3:], strict=False)
    )


def _vector(*values: str) -> dict[str, Any]:
    return {
        "resultType": "vector",
        "result": [{"metric": {"pod": f"p{i}"}, "value": [NOW, v]} for i, v in enumerate(values)],
    }


#: What the fake Prometheus answers, by a word the query holds.
ANSWERS: dict[str, dict[str, Any]] = {
    "queue": {"resultType": "scalar", "result": [NOW, "12"]},
    "inflight": _vector("3", "4"),
    "arrivals": _vector("+Inf"),
    "busy": {"resultType": "matrix", "result": [{"metric": {}, "values": [[NOW - 15, "0.5"], [NOW, "0.6"]]}]},
    "peak": {"resultType": "string", "result": [NOW, "not a number"]},
    "timestamp": _vector(str(NOW - 20)),  # sampleTime: the newest sample is 20 s old
    "count(": _vector("2"),  # reporting: pods reporting ready
    "ratio_per_pod": _vector("0.9", "0.9"),  # a busy ratio not averaged: one series per pod
    "ratio_over_one": _vector("1.8"),  # a busy ratio summed over two pods
    "ratio_near_one": _vector("1.02"),  # a busy ratio a little over 1: counters read a scrape apart
    "ratio_at_most": _vector("1.5"),  # the most a busy ratio reads (RATIO_MOST)
    # neuronserve's own busy counter's rate, a device busy all the time: above 1 in some windows
    "ratio_from_counter": _vector(str(_busy_ratio_from_neuronserve_counter())),
    "stamp_per_pod": _vector(str(NOW - 20), str(NOW - 50)),  # sampleTime not aggregated
}


def _own_queries() -> PrometheusMetrics:
    """A reader asking every query of the deployment itself: the fake answers one deployment's
    queries (no rows by namespace and deployment), and these tests leave the pods-reporting and
    sample-time queries at their defaults, which would otherwise come from the fleet-wide read."""
    return PrometheusMetrics(None, group_default_queries=False)


#: Queries holding this word are refused as Prometheus refuses a typo (400 bad_data).
TYPO = "bad_query_typo"


class FakePrometheus(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        query = parse_qs(urlsplit(self.path).query).get("query", [""])[0]
        if TYPO in query:
            error = {"status": "error", "errorType": "bad_data", "error": '1:5: parse error: unexpected "("'}
            self._answer(400, json.dumps(error).encode())
            return
        data = next(answer for word, answer in ANSWERS.items() if word in query)
        self._answer(200, json.dumps({"status": "success", "data": data}).encode())

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakePrometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_a_scalar_a_vector_an_infinity_a_matrix_and_a_string_become_numbers_or_missing(
    prometheus: str,
) -> None:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["spec"]["scaling"]["metrics"] = {
        "prometheusUrl": prometheus,
        "queueDepth": "scalar(sum(queue))",
        "inFlight": "sum(inflight)",
        "arrivalRate": "sum(arrivals) / 0",
        "utilization": "busy[1m]",
        "arrivalPeak": 'label_replace(peak, "a", "b", "", "")',
    }
    snapshot, reason = await _own_queries().snapshot(InferenceDeployment.model_validate(doc), NOW)
    assert snapshot is not None, reason
    assert (snapshot.queue_depth, snapshot.in_flight) == (12.0, 7.0)
    assert snapshot.arrival_rate is None and snapshot.utilization is None and snapshot.arrival_peak is None
    # Every configured signal that came back empty is named: the arrival rate too (the autoscaler's
    # primary signal once the service rate is known), or the status read "metrics read" without it.
    assert reason == "signals missing: arrival_rate, utilization, arrival_peak"
    assert snapshot.time == NOW - 20  # dated by the samples, not by the queries' evaluation


def test_non_finite_values_are_missing() -> None:
    assert _scalar([NOW, "NaN"]).value is None
    assert _scalar(_vector("1", "-Inf")["result"]).value is None
    snapshot = MetricSnapshot(time=time.time(), queue_depth=math.inf, utilization=0.5)
    assert snapshot.queue_depth is None and snapshot.utilization == 0.5


def _with_queries(prometheus: str, **queries: str) -> InferenceDeployment:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["spec"]["scaling"]["metrics"] = {"prometheusUrl": prometheus, **queries}
    return InferenceDeployment.model_validate(doc)


async def test_a_query_prometheus_refuses_costs_its_own_signal_and_names_its_field(prometheus: str) -> None:
    # A typo in one query threw away every signal, and the reason blamed Prometheus.
    dep = _with_queries(
        prometheus,
        queueDepth="scalar(sum(queue))",
        inFlight="sum(inflight)",
        utilization=f"avg({TYPO}(",
        arrivalRate="",
        arrivalPeak="",
    )
    snapshot, reason = await _own_queries().snapshot(dep, NOW)
    assert snapshot is not None, reason
    assert (snapshot.queue_depth, snapshot.in_flight, snapshot.utilization) == (12.0, 7.0, None)
    assert reason == (
        "signals missing: utilization; "
        'spec.scaling.metrics.utilization: Prometheus refused the query: 1:5: parse error: unexpected "("'
    )


async def test_when_every_query_is_refused_the_reason_names_the_fields(prometheus: str) -> None:
    dep = _with_queries(prometheus, queueDepth=f"{TYPO}(", inFlight=f"{TYPO}(", utilization="", arrivalRate="")
    dep.spec.scaling.metrics.arrival_peak = ""
    snapshot, reason = await _own_queries().snapshot(dep, NOW)
    assert snapshot is None
    assert reason.startswith("spec.scaling.metrics.queueDepth: Prometheus refused the query: 1:5: parse error")
    assert "; spec.scaling.metrics.inFlight: " in reason


#: What an internal endpoint (not Prometheus) a spec's prometheusUrl may point at answers.
INTERNAL_BODY = b"internal-only: db_password=hunter2"


class InternalEndpoint(BaseHTTPRequestHandler):
    """Answers every query with the server's ``status`` and ``body`` (set by the test)."""

    def do_GET(self) -> None:
        server: Any = self.server
        self.send_response(server.status)
        self.send_header("Content-Type", server.content_type)
        self.send_header("Content-Length", str(len(server.body)))
        self.end_headers()
        self.wfile.write(server.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _one_query(url: str) -> InferenceDeployment:
    """Only queueDepth asked (no pods-reporting count, no sample time either): its answer alone
    makes the reason."""
    dep = _with_queries(
        url, queueDepth="sum(queue)", inFlight="", utilization="", arrivalRate="", reporting="", sampleTime=""
    )
    dep.spec.scaling.metrics.arrival_peak = ""
    return dep


@pytest.fixture
def endpoint() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), InternalEndpoint)
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    server.content_type = "text/plain"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("status", [400, 422, 500, 503])
async def test_an_error_answers_body_is_not_copied_into_the_reason(endpoint: Any, status: int) -> None:
    # A namespace user may point prometheusUrl at any endpoint the operator reaches; its error
    # body went into the status: "HTTP Status Code 400 (b'internal-only: db_password=...')".
    endpoint.status, endpoint.body = status, INTERNAL_BODY
    dep = _one_query(endpoint.url)
    snapshot, reason = await PrometheusMetrics(None).snapshot(dep, NOW)
    assert snapshot is None
    assert "db_password" not in reason and "internal-only" not in reason
    if status in (400, 422):  # a refusal of the query: its code only
        assert reason.startswith(f"spec.scaling.metrics.queueDepth: Prometheus refused the query (HTTP {status})")
    else:
        assert reason == f"Prometheus at {endpoint.url} unavailable: PrometheusApiClientException: HTTP {status}"


async def test_prometheus_json_error_gives_its_error_on_one_short_line(endpoint: Any) -> None:
    error = "query processing would load too many samples into memory\n" + "x" * 500
    body = {"status": "error", "errorType": "execution", "error": error}
    endpoint.status, endpoint.body, endpoint.content_type = 503, json.dumps(body).encode(), "application/json"
    dep = _one_query(endpoint.url)
    snapshot, reason = await PrometheusMetrics(None).snapshot(dep, NOW)
    assert snapshot is None
    prefix = f"Prometheus at {endpoint.url} unavailable: PrometheusApiClientException: HTTP 503: "
    assert reason.startswith(prefix + "query processing would load too many samples into memory x")
    assert "\n" not in reason and len(reason) == len(prefix) + REASON_CHARS


async def test_json_that_is_not_prometheus_error_format_is_not_copied(endpoint: Any) -> None:
    # An "error" field alone does not make the answer Prometheus': another service's JSON may hold one.
    endpoint.status, endpoint.content_type = 400, "application/json"
    endpoint.body = json.dumps({"error": "db_password=hunter2"}).encode()
    dep = _one_query(endpoint.url)
    snapshot, reason = await PrometheusMetrics(None).snapshot(dep, NOW)
    assert snapshot is None
    assert reason.startswith("spec.scaling.metrics.queueDepth: Prometheus refused the query (HTTP 400)")
    assert "db_password" not in reason


async def test_an_answer_of_an_unexpected_shape_is_not_quoted(endpoint: Any) -> None:
    # A 200 whose result is a pair of strings: float() of it raised "could not convert string to
    # float: 'db_password=hunter2'", and that text went into the status.
    endpoint.status, endpoint.content_type = 200, "application/json"
    data = {"resultType": "scalar", "result": ["db_password=hunter2", "1"]}
    endpoint.body = json.dumps({"status": "success", "data": data}).encode()
    dep = _one_query(endpoint.url)
    snapshot, reason = await PrometheusMetrics(None).snapshot(dep, NOW)
    assert snapshot is None
    assert reason == f"Prometheus at {endpoint.url} unavailable: ValueError: an answer of an unexpected shape"


def _utilization(prometheus: str, query: str, sample_time: str = "") -> InferenceDeployment:
    dep = _with_queries(
        prometheus,
        queueDepth="scalar(sum(queue))",
        inFlight="sum(inflight)",
        utilization=query,
        arrivalRate="",
        reporting="",
        sampleTime=sample_time,
    )
    dep.spec.scaling.metrics.arrival_peak = ""
    return dep


async def test_a_busy_ratio_of_several_series_is_missing_not_their_sum(prometheus: str) -> None:
    # A utilization override answering one series per pod (two pods at 0.9 busy) read as 1.8, and
    # the autoscaler sized the fleet for twice the load it had.
    snapshot, reason = await _own_queries().snapshot(_utilization(prometheus, "ratio_per_pod"), NOW)
    assert snapshot is not None, reason
    assert snapshot.utilization is None and (snapshot.queue_depth, snapshot.in_flight) == (12.0, 7.0)
    assert reason == (
        "signals missing: utilization; spec.scaling.metrics.utilization: the query answered 2 series "
        "where a ratio is one number: aggregate them, e.g. avg(...)"
    )


async def test_a_busy_ratio_above_one_is_missing(prometheus: str) -> None:
    snapshot, reason = await _own_queries().snapshot(_utilization(prometheus, "sum(ratio_over_one)"), NOW)
    assert snapshot is not None and snapshot.utilization is None, reason
    assert reason == (
        "signals missing: utilization; spec.scaling.metrics.utilization: the busy ratio read 1.8, above 1.5: "
        "a sum where an average belongs? e.g. avg(...)"
    )
    # A little over 1 is a ratio of counters read a scrape apart, not a sum: a busy device.
    snapshot, reason = await _own_queries().snapshot(_utilization(prometheus, "avg(ratio_near_one)"), NOW)
    assert snapshot is not None and snapshot.utilization == 1.0 and reason == "metrics read"
    # Refused above 1.5, not at it.
    snapshot, reason = await _own_queries().snapshot(_utilization(prometheus, "avg(ratio_at_most)"), NOW)
    assert snapshot is not None and snapshot.utilization == 1.0 and reason == "metrics read"


async def test_the_busy_ratio_of_neuronserves_own_counter_is_read_as_busy(prometheus: str) -> None:
    # neuronserve credits a batch's busy time to neuronserve_device_busy_seconds_total when the batch
    # ends, so rate() over a window of a device never idle reads up to 1 + batch / window: 1.067 with
    # 4 s batches and a 15 s scrape. Refused above 1.05 as "a sum where an average belongs", the
    # busy ratio went missing in a quarter of the windows, just when the device was saturated.
    assert 1.05 < _busy_ratio_from_neuronserve_counter() < 1.5
    query = "rate(ratio_from_counter[1m])"
    snapshot, reason = await _own_queries().snapshot(_utilization(prometheus, query), NOW)
    assert snapshot is not None and snapshot.utilization == 1.0, reason
    assert reason == "metrics read"


async def test_a_sample_time_of_several_series_is_the_newest(prometheus: str) -> None:
    # Summed, two pods' sample times read as a time decades ahead: the snapshot was dated by its
    # queries' evaluation and its staleness went unseen.
    dep = _utilization(prometheus, "avg(ratio_near_one)", sample_time="stamp_per_pod")
    snapshot, reason = await _own_queries().snapshot(dep, NOW)
    assert snapshot is not None and snapshot.time == NOW - 20, reason


async def test_a_refused_query_is_named_in_scaling_active_not_only_in_the_readers_reason(prometheus: str) -> None:
    # The reader named the field; decide_targets dropped its reason whenever a snapshot came back, so
    # ScalingActive said only "no scale-down: utilization missing" (a reviewer's reproduction).
    dep = _with_queries(
        prometheus,
        queueDepth="scalar(sum(queue))",
        inFlight="sum(inflight)",
        utilization=f"avg({TYPO}(",
        arrivalRate="",
        arrivalPeak="",
    )
    dep.spec.scaling.min_replicas, dep.spec.scaling.max_replicas = 1, 10
    snapshot, reason = await _own_queries().snapshot(dep, NOW)
    targets, _ = decide_targets(dep.spec, DeploymentMemory(), snapshot, reason, 2, 2, NOW)
    assert targets.metrics_available
    assert "spec.scaling.metrics.utilization: Prometheus refused the query: 1:5: parse error" in targets.message
