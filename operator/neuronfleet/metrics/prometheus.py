"""Read the autoscaler's signals from Prometheus (prometheus-api-client) as a typed snapshot.

The queries are the spec's ``scaling.metrics`` (defaults match the names ``neuronserve`` exports;
``$namespace`` and ``$name`` are replaced by the resource's). Each signal is one instant query; an
empty query turns its signal off. One more, ``sampleTime``, says when the newest sample was
scraped: an instant query answers samples up to Prometheus' lookback (5 minutes) old stamped with
the query's time, so the snapshot is dated by the samples, and ``staleAfterSeconds`` can tell.

Missing data is never a zero: an empty result (no series, e.g. every target down: Prometheus marks
its series stale after a failed scrape) makes that signal ``None``, and the scaling policy then
holds instead of scaling down. A query Prometheus refuses (400 or 422: a typo) makes only its own
signal ``None``, and the reason names its ``scaling.metrics`` field. Prometheus unreachable, timing
out or failing (5xx) makes the whole snapshot unavailable, with the reason, which the status shows
as ScalingActive=False.
prometheus-api-client is synchronous (requests), so queries run in a worker thread.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from neuronfleet.api.v1alpha1 import InferenceDeployment, MetricQueries
from neuronfleet.planning.signals import QUERIED, SIGNALS, MetricSnapshot


def render(query: str, namespace: str, name: str) -> str:
    """A query template with the resource's namespace and name filled in."""
    return query.replace("$namespace", namespace).replace("$name", name)


def queries_for(dep: InferenceDeployment) -> dict[str, str]:
    metrics: MetricQueries = dep.spec.scaling.metrics
    namespace = dep.metadata.namespace or "default"
    # An empty query turns its signal off (missing, as if it returned nothing) without a round trip.
    return {
        signal: render(getattr(metrics, signal), namespace, dep.name)
        for signal in QUERIED
        if getattr(metrics, signal).strip()
    }


#: The spec field (under scaling.metrics) each signal's query comes from.
SIGNAL_FIELDS = {signal: MetricQueries.model_fields[signal].alias or signal for signal in QUERIED}

_REFUSED = re.compile(r"^HTTP Status Code (400|422) \((?P<body>.*)\)$", re.DOTALL)


def query_refusal(message: str) -> str | None:
    """Prometheus' reason for refusing a query (400 bad_data, 422 execution), from the client's
    exception text; None when the failure is not the query's (5xx, 503: Prometheus unavailable)."""
    match = _REFUSED.match(message)
    if match is None:
        return None
    body = match["body"]
    with contextlib.suppress(ValueError, SyntaxError):
        body = ast.literal_eval(body).decode(errors="replace")  # the client writes repr(bytes)
    with contextlib.suppress(ValueError):
        answer = json.loads(body)
        if isinstance(answer, dict) and answer.get("error"):
            return f"Prometheus refused the query: {answer['error']}"[:300]
    return f"Prometheus refused the query: {body}"[:300]


@dataclass(frozen=True)
class QueryResult:
    value: float | None
    evaluated_at: float | None


def _scalar(result: list[Any]) -> QueryResult:
    """One number from an instant query's result: the sum over an instant vector's series, or a
    scalar's value (a query may wrap its sum in ``scalar()``); None when empty, not a number (a
    string) or not finite (NaN, or Inf from a division by zero, is no measurement)."""
    if not result:
        return QueryResult(None, None)
    samples: list[list[Any]]
    if len(result) == 2 and not isinstance(result[0], dict):
        # A scalar (or string) result is one [time, "value"] pair, not a list of series.
        samples = [result]
    else:
        samples = [series["value"] for series in result if isinstance(series, dict) and "value" in series]
    if not samples:
        return QueryResult(None, None)
    total = 0.0
    evaluated_at = None
    for stamp, raw in samples:
        try:
            value = float(raw)
        except (TypeError, ValueError):  # a string result: no number to read
            return QueryResult(None, float(stamp))
        if not math.isfinite(value):
            return QueryResult(None, float(stamp))
        total += value
        evaluated_at = float(stamp)
    return QueryResult(total, evaluated_at)


class PrometheusMetrics:
    """A metrics source for the reconcile; one client per Prometheus URL."""

    def __init__(self, default_url: str | None) -> None:
        self.default_url = default_url
        self._clients: dict[str, PrometheusConnect] = {}

    def _client(self, url: str) -> PrometheusConnect:
        if url not in self._clients:
            # No retries: a slow or absent Prometheus must not stall the reconcile; the next tick
            # asks again. (retry=None would mean the library's default: 3 retries with back-off,
            # about 6 s per query against a closed port.) TLS is verified (disable_ssl=False):
            # REQUESTS_CA_BUNDLE names a private CA.
            self._clients[url] = PrometheusConnect(url=url, disable_ssl=False, retry=Retry(total=0))
        return self._clients[url]

    def _query_all(
        self, url: str, queries: dict[str, str], timeout: float
    ) -> tuple[dict[str, QueryResult], dict[str, str]]:
        """Each signal's result, and why Prometheus refused the queries it refused (by signal)."""
        client = self._client(url)
        results: dict[str, QueryResult] = {}
        refused: dict[str, str] = {}
        for signal, query in queries.items():
            try:
                results[signal] = _scalar(client.custom_query(query, timeout=timeout))
            except PrometheusApiClientException as exc:
                reason = query_refusal(str(exc))
                if reason is None:
                    raise  # not the query: Prometheus itself failed
                refused[signal] = reason
        return results, refused

    def _sample_time(self, url: str, query: str, timeout: float) -> float | None:
        return _scalar(self._client(url).custom_query(query, timeout=timeout)).value

    async def snapshot(self, dep: InferenceDeployment, now: float) -> tuple[MetricSnapshot | None, str]:
        url = dep.spec.scaling.metrics.prometheus_url or self.default_url
        if not url:
            return None, "no Prometheus URL configured (scaling.metrics.prometheusUrl or --prometheus-url)"
        timeout = dep.spec.scaling.metrics.timeout_seconds
        namespace = dep.metadata.namespace or "default"
        sample_query = render(dep.spec.scaling.metrics.sample_time, namespace, dep.name).strip()
        queries = queries_for(dep)
        try:
            results, refused = await asyncio.wait_for(
                asyncio.to_thread(self._query_all, url, queries, timeout), timeout=timeout * len(QUERIED) + 1
            )
            sampled = (
                await asyncio.wait_for(asyncio.to_thread(self._sample_time, url, sample_query, timeout), timeout + 1)
                if sample_query
                else None
            )
        except (
            requests.RequestException,
            PrometheusApiClientException,
            TimeoutError,
            ValueError,
            KeyError,
            TypeError,  # an answer of an unexpected shape (e.g. a matrix from a range selector)
        ) as exc:
            return None, f"Prometheus at {url} unavailable: {type(exc).__name__}: {str(exc)[:200]}"
        # A query Prometheus refuses (a typo in one of scaling.metrics) costs its own signal only,
        # and the reason names the field to fix.
        refusals = "; ".join(f"spec.scaling.metrics.{SIGNAL_FIELDS[s]}: {why}" for s, why in refused.items())
        # The pods-reporting count alone is no signal to decide on.
        if all(result.value is None for signal, result in results.items() if signal in SIGNALS):
            return None, refusals or f"Prometheus at {url} returned no samples for {dep.name}"
        stamps = [r.evaluated_at for r in results.values() if r.evaluated_at is not None]
        if sampled is not None:
            # The samples' own age: the queries' stamp is their evaluation time, however old the data.
            stamps.append(sampled)
        values = {signal: results[signal].value if signal in results else None for signal in QUERIED}
        snapshot = MetricSnapshot(time=min(stamps) if stamps else now, **values)
        # Every configured signal that came back empty or refused (the arrival rate too: the
        # autoscaler's primary signal once it knows the service rate), not only those a scale-down
        # needs before that.
        missing = [signal for signal in SIGNALS if signal in queries and getattr(snapshot, signal) is None]
        reason = f"signals missing: {', '.join(missing)}" if missing else "metrics read"
        return snapshot, f"{reason}; {refusals}" if refusals else reason
