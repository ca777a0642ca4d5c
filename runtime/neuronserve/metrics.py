"""Prometheus metrics of one server, and the sliding-window device-busy ratio.

The metric names are a contract: the operator's default PromQL reads them. Namespace, deployment
and role labels are added by Prometheus relabeling from pod labels, never by the server.

- ``neuronserve_queue_depth``: requests accepted and waiting for a batch.
- ``neuronserve_inflight_requests``: requests accepted and not yet answered (queued + executing);
  zero means a draining replica can go.
- ``neuronserve_requests_total{outcome}``: ok | rejected (429 queue full, 503 not ready or
  draining) | bad_request (4xx) | error (5xx).
- ``neuronserve_batch_size``: rows per executed batch (before padding to the bucket).
- ``neuronserve_request_latency_seconds``: arrival to answer of successful infer requests.
- ``neuronserve_device_busy_ratio``: share of the last ``window`` seconds the device executed.
- ``neuronserve_ready``: 1 when the model is loaded, warmed and not draining.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

OUTCOMES = ("ok", "rejected", "bad_request", "error")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class BusyTracker:
    """Busy share of a sliding wall-clock window, from the executions' start and end times."""

    def __init__(self, window_seconds: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window_seconds
        self._clock = clock
        self._created = clock()
        self._intervals: collections.deque[tuple[float, float]] = collections.deque()
        self._running_since: float | None = None

    def started(self, at: float) -> None:
        self._running_since = at

    def finished(self, start: float, end: float) -> None:
        self._running_since = None
        self._intervals.append((start, end))

    def ratio(self) -> float:
        now = self._clock()
        horizon = now - self.window
        while self._intervals and self._intervals[0][1] <= horizon:
            self._intervals.popleft()
        busy = sum(min(end, now) - max(start, horizon) for start, end in self._intervals)
        if self._running_since is not None:
            busy += now - max(self._running_since, horizon)
        span = min(self.window, now - self._created)
        return min(1.0, max(0.0, busy / span)) if span > 0 else 0.0


class ServerMetrics:
    """The metrics of one server instance, in their own registry (tests run several in a process)."""

    def __init__(self, busy: BusyTracker) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.queue_depth = Gauge("neuronserve_queue_depth", "Requests accepted and waiting for a batch.", registry=r)
        self.inflight = Gauge(
            "neuronserve_inflight_requests", "Requests accepted and not yet answered (queued + executing).", registry=r
        )
        self.requests = Counter("neuronserve_requests", "Infer requests by outcome.", ["outcome"], registry=r)
        for outcome in OUTCOMES:
            self.requests.labels(outcome=outcome)
        self.batch_size = Histogram(
            "neuronserve_batch_size", "Rows per executed batch, before padding.", buckets=BATCH_BUCKETS, registry=r
        )
        self.latency = Histogram(
            "neuronserve_request_latency_seconds",
            "Arrival to answer of successful infer requests.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.busy = busy
        self.device_busy = Gauge(
            "neuronserve_device_busy_ratio",
            f"Share of the last {busy.window:g} s the device was executing a batch.",
            registry=r,
        )
        self.device_busy.set_function(busy.ratio)
        self.ready = Gauge("neuronserve_ready", "1 when loaded, warmed and not draining.", registry=r)

    def outcome(self, outcome: str) -> None:
        self.requests.labels(outcome=outcome).inc()
