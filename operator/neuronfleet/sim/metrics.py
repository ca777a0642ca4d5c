"""What the policies can observe of a simulated run: per-bin series, sampled like the real sources.

The engine fills the arrays as simulated time advances (per second in
:func:`neuronfleet.sim.engine.run`: queue gauge at the end of each second, queue, in-flight and
busy ratio averaged over it; per 10 ms bin in the replay); a policy deciding at ``now`` reads them
only up to ``now - delay``:

- :meth:`MetricsView.snapshot` is what the operator's Prometheus reader returns
  (:class:`~neuronfleet.planning.signals.MetricSnapshot`): queue depth and in-flight requests as
  gauges at the sample time, arrival rate as ``rate(...[1m])``, device-busy ratio averaged over the
  scrape interval, arrival peak as the runtime's busiest-stretch gauge. ``delay`` models scrape
  interval plus query lag.
- :meth:`MetricsView.mean_load` is a windowed average of queued + in-flight requests, what
  Knative's autoscaler (scraping queue-proxies every second) and Ray Serve (replicas pushing their
  ongoing requests) compute.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from neuronfleet.api.default_queries import ARRIVAL_RATE_WINDOW_SECONDS
from neuronfleet.planning.rounding import ROUND_OFF
from neuronfleet.planning.signals import PEAK_WINDOW_SECONDS, MetricSnapshot, busiest_rate, peak_stretch_seconds

FloatArray = npt.NDArray[np.float64]

#: Prometheus scrape interval of the runtime's /metrics (the utilization gauge averages over it).
SCRAPE_INTERVAL_SECONDS = 15.0


class MetricsView:
    """Read access to the series of one run, as of the engine's progress."""

    def __init__(
        self,
        dt: float,
        count: FloatArray,
        queue_requests: FloatArray,
        in_flight: FloatArray,
        utilization: FloatArray,
        queue_mean: FloatArray | None = None,
    ) -> None:
        self.dt = dt
        self.count = count
        self.queue_requests = queue_requests
        self.in_flight = in_flight
        self.utilization = utilization
        #: Mean queue over each bin (for windowed averages); the gauge samples when not given.
        self.queue_mean = queue_requests if queue_mean is None else queue_mean

    def _bin(self, t: float) -> int:
        return int(t / self.dt + ROUND_OFF) - 1

    def snapshot(self, now: float, delay: float, serving: int | None = None) -> MetricSnapshot:
        """The Prometheus view at ``now``: samples taken ``delay`` seconds earlier (none before t=0).

        With ``serving`` (the replicas taking traffic), also the arrival peak; see :meth:`arrival_peak`.
        """
        at = now - delay
        k = self._bin(at)
        if k < 0:
            return MetricSnapshot(time=at)
        rate_bins = max(1, round(ARRIVAL_RATE_WINDOW_SECONDS / self.dt))
        util_bins = max(1, round(SCRAPE_INTERVAL_SECONDS / self.dt))
        first = max(0, k + 1 - rate_bins)
        # ufunc reductions, not the arrays' sum() and mean(): the same figures without their Python
        # frames (every decision reads them).
        rate = float(np.add.reduce(self.count[first : k + 1])) / ((k + 1 - first) * self.dt)
        busy = self.utilization[max(0, k + 1 - util_bins) : k + 1]
        util = float(np.add.reduce(busy) / len(busy))
        return MetricSnapshot(
            time=at,
            queue_depth=float(self.queue_requests[k]),
            in_flight=float(self.in_flight[k]),
            arrival_rate=rate,
            utilization=util,
            arrival_peak=self.arrival_peak(k, rate, serving) if serving else None,
        )

    def arrival_peak(self, k: int, rate: float, serving: int) -> float:
        """``sum(neuronserve_arrivals_peak_per_second)`` as of bin ``k``: the busiest stretch of the
        last minute's whole seconds, the stretch as long as a replica at its share of ``rate`` needs.

        The fleet's busiest stretch stands for the sum of the replicas' own: equal when bursts hit
        every replica together (a load balancer spreads them), below it by the replicas' Poisson noise
        otherwise (about 5 % at most, by the stretch's length), which the fluid fleet does not draw.
        """
        per_second = max(1, round(1.0 / self.dt))
        seconds = min(PEAK_WINDOW_SECONDS, (k + 1) // per_second)
        if seconds <= 0:
            return rate
        counts = self.count[k + 1 - seconds * per_second : k + 1].reshape(seconds, per_second).sum(axis=1)
        return busiest_rate(counts.tolist(), peak_stretch_seconds(rate / serving))

    def mean_load(self, now: float, window: float, delay: float) -> float | None:
        """Average queued + in-flight requests over ``window`` seconds ending ``delay`` before ``now``."""
        k = self._bin(now - delay)
        if k < 0:
            return None
        first = max(0, k + 1 - max(1, round(window / self.dt)))
        q = self.queue_mean[first : k + 1]
        f = self.in_flight[first : k + 1]
        return float((np.add.reduce(q) + np.add.reduce(f)) / len(q))
