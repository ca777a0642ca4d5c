"""The metric snapshot the autoscaler decides on (pure data, no I/O).

The live operator's Prometheus reader and the fleet simulator both produce a
:class:`MetricSnapshot`; the scaling and warm-pool policies only ever see this type, so one
recorded sequence of snapshots drives both to the same decisions.

Every signal is optional: ``None`` means missing (the query returned nothing) or stale (the
sample is older than ``spec.scaling.metrics.stale_after_seconds``). The policies treat a missing
signal as "unknown", never as zero, so missing data can hold or grow the fleet but never shrink it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

#: The arrival peak's window: the busiest stretch of this many seconds is reported...
PEAK_WINDOW_SECONDS = 60
#: ... each stretch long enough to hold this many requests at a replica's mean rate (at least one
#: second): Poisson noise alone then moves a stretch's count by at most about 5 % (1/sqrt(400)), so
#: a replica serving a few requests a second does not report its noise as a burst.
PEAK_MIN_REQUESTS = 400


#: The snapshot's signals, each read by one query (``scaling.metrics``, same names in camelCase).
SIGNALS = ("queue_depth", "in_flight", "arrival_rate", "utilization", "arrival_peak")
#: Every field of the snapshot read by one query: the signals, and how many pods the samples cover.
QUERIED = (*SIGNALS, "reporting")
#: The signals a scale-down needs before a replica's service rate is measured.
NEEDED_UNMEASURED = ("queue_depth", "in_flight", "utilization")
#: ... and after: the arrival rate sizes the fleet and the queue shows bursts the rate averages away.
#: The in-flight count and the busy ratio no longer size it (the busy ratio only refines the service
#: rate), so their absence (an exporter without the in-flight gauge, a utilization query returning
#: nothing) must not hold a measured fleet at its peak.
NEEDED_MEASURED = ("arrival_rate", "queue_depth")


@dataclass(frozen=True)
class MetricSnapshot:
    """Fleet-wide signals of the active replicas at one instant.

    ``time`` is when the samples were taken, in seconds on the same clock as the ``now`` the
    policies get (Unix time in the operator, simulated time in the simulator).
    """

    time: float
    #: Requests waiting in the active replicas' queues (sum over replicas).
    queue_depth: float | None = None
    #: Requests being executed by the active replicas (sum over replicas).
    in_flight: float | None = None
    #: Requests per second arriving at the deployment.
    arrival_rate: float | None = None
    #: Device-busy ratio (0..1) averaged over the active replicas.
    utilization: float | None = None
    #: Requests per second in the busiest stretch of the last minute (a second, or as many seconds as
    #: hold :data:`PEAK_MIN_REQUESTS` at a replica's rate), summed over the replicas: the bursts
    #: the 1-minute arrival rate averages away.
    arrival_peak: float | None = None
    #: Ready active pods the samples come from (those reporting ``neuronserve_ready`` 1), or None when
    #: not read. Sums over whatever series exist read low when some pods' scrapes fail: fewer pods
    #: reporting than the operator counts ready makes the snapshot partial (see
    #: :meth:`partial`), which may grow the fleet but never shrink it.
    reporting: float | None = None

    def __post_init__(self) -> None:
        for name in QUERIED:
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                # A NaN, infinite (a division by zero in a query) or negative sample is a broken
                # exporter or query, not a measurement: store it as missing.
                object.__setattr__(self, name, None)

    @property
    def load(self) -> float | None:
        """Requests in the system (queued plus in flight), or None if either part is missing."""
        if self.queue_depth is None or self.in_flight is None:
            return None
        return self.queue_depth + self.in_flight

    def missing(self, measured: bool = False, off: Collection[str] = ()) -> tuple[str, ...]:
        """Names of the signals a scale-down needs that are absent.

        ``measured``: the autoscaler knows a replica's service rate, so the arrival rate is its primary
        signal and needed, and the in-flight and busy-ratio signals are not (they size the fleet until
        the service rate is measured, and not after: see :mod:`neuronfleet.planning.scaling`); before
        that the arrival rate is optional. ``off``: signals the spec turned off (an empty query); never
        read, they are not missing: counted so, they forbade every scale-down for good.
        """
        names = NEEDED_MEASURED if measured else NEEDED_UNMEASURED
        return tuple(name for name in names if getattr(self, name) is None and name not in off)

    def partial(self, ready: int) -> bool:
        """Whether the samples cover fewer pods than the ``ready`` active replicas (unknown: not partial).

        A pod turning ready shows here a scrape later than in the API, so a scale-up's first decisions
        after its pods turn ready may read partial: they hold the fleet, which is growing anyway.
        """
        return self.reporting is not None and self.reporting < ready

    def age(self, now: float) -> float:
        """Seconds between the samples and ``now``."""
        return now - self.time

    def without_stale(self, now: float, stale_after_seconds: float) -> MetricSnapshot:
        """This snapshot with every signal dropped when it is older than ``stale_after_seconds``."""
        if self.age(now) <= stale_after_seconds:
            return self
        return MetricSnapshot(time=self.time)  # every field but the time is a signal


def peak_stretch_seconds(mean_per_second: float) -> int:
    """How many seconds the arrival peak's stretches last at a replica's mean rate: enough to hold
    :data:`PEAK_MIN_REQUESTS` requests, from one second to the whole window."""
    if mean_per_second <= 0:
        return PEAK_WINDOW_SECONDS
    return max(1, min(PEAK_WINDOW_SECONDS, math.ceil(PEAK_MIN_REQUESTS / mean_per_second)))


def busiest_rate(per_second: Sequence[float], stretch: int) -> float:
    """Requests per second in the busiest run of ``stretch`` consecutive seconds of ``per_second``
    (counts of whole seconds, oldest first); the whole span's rate when it is shorter."""
    if not per_second:
        return 0.0
    stretch = max(1, min(stretch, len(per_second)))
    total = best = float(sum(per_second[:stretch]))
    for i in range(stretch, len(per_second)):
        total += per_second[i] - per_second[i - stretch]
        best = max(best, total)
    return best / stretch
