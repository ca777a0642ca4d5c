"""Prometheus metrics of one server, and the sliding-window device-busy ratio.

The metric names are a contract: the operator's default PromQL reads them. Namespace, deployment
and role labels are added by Prometheus relabeling from pod labels, never by the server.

- ``neuronserve_queue_depth``: requests accepted and waiting for a batch.
- ``neuronserve_inflight_requests``: requests accepted and not yet answered (queued + executing);
  zero means a draining replica can go.
- ``neuronserve_requests_total{outcome}``: one count per infer request, by its answer:
  ``ok`` (200), ``rejected`` (the server would not take it now: 429 queue full, 503 not ready,
  draining, shut down before it ran, or too many requests being received: ``--max-uploads``),
  ``bad_request`` (the client must change it: 400 invalid request or text the tokenizer refuses,
  404 unknown model or version, 413 too large) or
  ``model_error`` (500: the model raised on this request, alone; e.g. an input value outside what
  the model handles, which the artifact declares no range for) or ``error`` (500: the server
  failed anywhere else in answering, or the request failed on a device that has failed: see
  ``neuronserve.health``) or ``aborted`` (the client closed the connection before its
  answer: mid-body, queued or while its batch ran; nothing to answer, and not the server's failure.
  Its request leaves the queue at once and, unless its batch had started, never runs; also 408, a
  body not whole within ``--body-timeout-seconds``).
- ``neuronserve_arrivals_peak_per_second``: infer requests per second (any outcome) in the busiest
  second of the last minute; at a rate below 400 a second, in the busiest stretch of as many whole
  seconds as hold 400 requests at the minute's mean, so that Poisson noise is not read as a burst.
  The operator sizes for the sum over replicas beside the 1-minute rate.
- ``neuronserve_batch_size``: rows per batch the device runs (before padding to the bucket), failed
  ones included: each run of a failed batch split to find its failing request counts.
- ``neuronserve_request_latency_seconds``: arrival to answer of successful (200) infer requests
  only: refusals and failures are not in it, so an SLO's denominator is
  ``neuronserve_requests_total`` (every outcome), not this histogram's count. Buckets are dense
  from 25 to 100 ms, where latency SLOs of embedding models sit.
- ``neuronserve_device_busy_ratio``: share of the last ``window`` seconds the device executed,
  over its cores in rotation now (1.0: every core busy; ``neuronserve_device_cores``). A batch
  counts from when it starts executing (a model runner: holds a copy), not while it waits behind the
  ones executing or for a free copy; an emulated batch cut short (a failure, the drain) counts the
  time it ran, not the time booked for it.
- ``neuronserve_device_busy_seconds_total``: device time spent executing batches, summed over
  cores: its rate over ``neuronserve_device_cores`` is the long-run busy ratio (the rate alone
  reads up to the core count: about 2 on a saturated 2-core replica).
- ``neuronserve_device_cores``: how many batches the device executes at once now (a model runner:
  its copies in rotation, one per NeuronCore of a Neuron artifact not taken out, 1 on CPU; the
  emulated device: its profile's NeuronCores), the busy ratio's 1.0; 1 until a model is loaded.
- ``neuronserve_device_cores_out``: copies of a model runner's model (NeuronCores) taken out of
  rotation, each having failed batches in a row that another copy then ran (a failed core); the
  replica serves on the others, fewer batches at once (``neuronserve_device_cores`` counts those).
  A copy out runs one batch again after a cool-off (60 s, doubled after each failed re-test, at
  most 30 min) and is back in rotation, no longer counted here, if it runs it. 0 on CPU and emulated.
- ``neuronserve_device_info{device,profile,emulated}``: 1, saying what executes the batches:
  ``device="cpu"`` or ``"neuron"`` (the artifact's backend) or ``"emulated-neuroncore"`` with
  ``emulated="true"`` and the Inf2 profile whose service times it reproduces.
- ``neuronserve_ready``: 1 when the model is loaded, warmed and not draining, and the device has
  not failed.

Also the process' own ``process_*`` (CPU, memory, open files, start time) and ``python_info``.
No ``*_created`` series: nothing reads them, and they doubled the counters' and histograms' series.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

OUTCOMES = ("ok", "rejected", "bad_request", "model_error", "error", "aborted")
#: Dense from 25 to 100 ms, where the latency SLOs of embedding models sit (the quantiles interpolate
#: within a bucket).
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class BusyTracker:
    """Busy share of a sliding wall-clock window, from the executions' start and end times.

    ``capacity`` is how many executions the device runs at once (the emulated device: one per
    NeuronCore), or a function that says it now (a model runner's copies in rotation: a copy taken
    out lowers it); the ratio is busy time over the capacity now x the window, so 1.0 means every
    core busy. For a window after a core leaves, the busy time of the cores before can read above
    the capacity now: the ratio then reads 1.0 (capped) until that time leaves the window.
    """

    def __init__(
        self,
        window_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        capacity: int | Callable[[], int] = 1,
    ) -> None:
        self.window = window_seconds
        self.capacity = capacity
        self._clock = clock
        self._created = clock()
        self._intervals: collections.deque[tuple[float, float]] = collections.deque()
        self._running: list[float] = []
        self.busy_seconds_total = 0.0

    def cores(self) -> int:
        """The executions the device runs at once now (``capacity``, asked now if a function)."""
        return self.capacity() if callable(self.capacity) else self.capacity

    def started(self, at: float) -> None:
        self._running.append(at)

    def finished(self, start: float, end: float) -> None:
        """An execution that ``started`` at ``start`` ran until ``end``."""
        if start in self._running:
            self._running.remove(start)
        self._intervals.append((start, end))
        self.busy_seconds_total += end - start
        # Dropped here too, not only when /metrics reads the ratio: unscraped (no Prometheus, a
        # scrape outage), the list would grow by one per batch and the next scrape would pay for all.
        self._expire(self._clock() - self.window)

    def _expire(self, horizon: float) -> None:
        while self._intervals and self._intervals[0][1] <= horizon:
            self._intervals.popleft()

    def ratio(self) -> float:
        now = self._clock()
        horizon = now - self.window
        self._expire(horizon)
        busy = sum(min(end, now) - max(start, horizon) for start, end in self._intervals)
        busy += sum(now - max(since, horizon) for since in self._running)
        span = min(self.window, now - self._created) * self.cores()
        return min(1.0, max(0.0, busy / span)) if span > 0 else 0.0


#: The arrival peak's window and the fewest requests a stretch of it must hold at the mean rate
#: (the operator's ``planning.signals`` has the same two; a test keeps them equal).
PEAK_WINDOW_SECONDS = 60
PEAK_MIN_REQUESTS = 400


class ArrivalPeak:
    """Requests per second in the busiest stretch of the last ``window`` whole seconds.

    A stretch is one second, or as many as hold ``min_requests`` at the window's mean rate: at a
    few requests a second, a single busy second is noise (one request more is +30 %), not a burst.
    Counts are kept per whole second of ``clock``; the second under way is left out until it ends.
    Not locked: the request handlers record and ``/metrics`` reads on the server's event loop thread.
    The operator's ``planning.signals.busiest_rate`` slides the same way; the runtime may not import
    the operator, so the few lines are written twice and a test keeps the constants equal.
    """

    def __init__(
        self,
        window_seconds: int = PEAK_WINDOW_SECONDS,
        min_requests: int = PEAK_MIN_REQUESTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window = window_seconds
        self.min_requests = min_requests
        self._clock = clock
        self._created = int(clock())
        self._counts: collections.deque[list[int]] = collections.deque()

    def record(self) -> None:
        second = int(self._clock())
        if self._counts and self._counts[-1][0] == second:
            self._counts[-1][1] += 1
        else:
            self._counts.append([second, 1])
        while self._counts[0][0] <= second - self.window - 1:
            self._counts.popleft()

    def peak(self) -> float:
        now = int(self._clock())
        # Whole seconds only, and none before the tracker existed (a young server has fewer).
        first = max(now - self.window, self._created)
        seconds = now - first
        if seconds <= 0:
            return 0.0
        per_second = [0] * seconds
        for second, count in self._counts:
            if first <= second < now:
                per_second[second - first] = count
        total = sum(per_second)
        if total == 0:
            return 0.0
        stretch = max(1, min(seconds, math.ceil(self.min_requests * seconds / total)))
        running = best = sum(per_second[:stretch])
        for i in range(stretch, seconds):
            running += per_second[i] - per_second[i - stretch]
            best = max(best, running)
        return best / stretch


class ServerMetrics:
    """The metrics of one server instance, in their own registry (tests run several in a process)."""

    def __init__(self, busy: BusyTracker, arrivals: ArrivalPeak | None = None) -> None:
        # prometheus_client's switch is process-wide (no registry has its own); the server's
        # process exports this registry only.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry()
        r = self.registry
        # Read at each scrape (a few /proc reads), never on the request path.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        self.queue_depth = Gauge("neuronserve_queue_depth", "Requests accepted and waiting for a batch.", registry=r)
        self.inflight = Gauge(
            "neuronserve_inflight_requests", "Requests accepted and not yet answered (queued + executing).", registry=r
        )
        self.requests = Counter("neuronserve_requests", "Infer requests by outcome.", ["outcome"], registry=r)
        for outcome in OUTCOMES:
            self.requests.labels(outcome=outcome)
        self.batch_size = Histogram(
            "neuronserve_batch_size",
            "Rows per batch the device runs, failed ones included, before padding.",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.latency = Histogram(
            "neuronserve_request_latency_seconds",
            "Arrival to answer of successful (200) infer requests only; an SLO's denominator is "
            "neuronserve_requests_total (every outcome).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.busy = busy
        self.device_busy = Gauge(
            "neuronserve_device_busy_ratio",
            f"Share of the last {busy.window:g} s the device's cores were executing batches, averaged over "
            "the device's cores (the batches it executes at once, neuronserve_device_cores): 1 is every core "
            "busy all the time; one of two cores busy all the time is 0.5.",
            registry=r,
        )
        self.device_busy.set_function(busy.ratio)
        self.ready = Gauge(
            "neuronserve_ready", "1 when loaded, warmed and not draining, and the device has not failed.", registry=r
        )
        self.arrivals = arrivals if arrivals is not None else ArrivalPeak()
        self.arrivals_peak = Gauge(
            "neuronserve_arrivals_peak_per_second",
            f"Infer requests per second in the busiest second of the last {self.arrivals.window} s "
            f"(at a low rate, of as many seconds as hold {self.arrivals.min_requests} requests).",
            registry=r,
        )
        self.arrivals_peak.set_function(self.arrivals.peak)
        r.register(_BusySeconds(busy))
        self.device_cores = Gauge(
            "neuronserve_device_cores",
            "Batches the device executes at once now (a model runner: its copies of the model in rotation, "
            "a NeuronCore taken out lowers it): rate(neuronserve_device_busy_seconds_total) over this is "
            "the busy ratio.",
            registry=r,
        )
        self.device_cores.set_function(busy.cores)
        self.device_cores_out = Gauge(
            "neuronserve_device_cores_out",
            "Copies of the model (NeuronCores) taken out of rotation: each failed batches in a row that "
            "another copy then ran; the replica serves on the others, and re-tests each with one batch after "
            "a cool-off (60 s, doubled after each failed re-test, at most 30 min): back in rotation if it runs it.",
            registry=r,
        )
        self.device_cores_out.set(0)
        self.device_info = Gauge(
            "neuronserve_device_info",
            "What executes the batches (emulated=true: no model runs, service times from an Inf2 profile).",
            ["device", "profile", "emulated"],
            registry=r,
        )

    def set_device(self, device: str, profile: str = "", emulated: bool = False) -> None:
        self.device_info.clear()
        self.device_info.labels(device=device, profile=profile, emulated=str(emulated).lower()).set(1)

    def outcome(self, outcome: str) -> None:
        self.requests.labels(outcome=outcome).inc()
        self.arrivals.record()


class _BusySeconds(Collector):
    def __init__(self, busy: BusyTracker) -> None:
        self._busy = busy

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily(
            "neuronserve_device_busy_seconds", "Device time spent executing batches, summed over cores."
        )
        family.add_metric([], self._busy.busy_seconds_total)
        return [family]
