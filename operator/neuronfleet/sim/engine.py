"""The simulation: a fluid FIFO queue on 10 ms bins where it queues, whole seconds where it cannot.

Method. Arrivals and their work (replica-seconds, :mod:`neuronfleet.sim.workload`) are counted
per second and, where needed, per ``dt`` = 10 ms bin. The active replicas form one FIFO queue
served at ``C * dt`` replica-seconds per bin, ``C`` = serving replicas (the Service spreads requests
over them; pooling them is a slight optimism against per-replica queues, the same for every
policy). Between fleet events (a decision, a pod or node turning ready, a drain ending) ``C`` is
constant, and the backlog follows Lindley's recursion ``Q[n] = max(0, Q[n-1] + work[n] - C dt)``,
computed for a whole segment at once from a cumulative sum and its running minimum. When the
backlog passes the queue bound (``max_queue`` requests per serving replica; none without
replicas) a bin's excess arrivals are rejected (429), and that segment is recomputed bin by bin.

Two resolutions, one queue. A second is advanced whole when its queue starts empty, its work is
at most :data:`COARSE_LOAD` of the serving capacity and its busiest 10 ms bin (taken
:data:`BIN_SIGMAS` standard deviations above the mean of Poisson bins) still fits in one bin's
service: then nothing queues in it on bins either. Its requests see the batch latency of the
bucket the dynamic batcher runs at that second's rate, and its in-flight and busy-ratio metrics
are the expectation, over its bins, of what the bins would report (the batcher's buckets make
them nonlinear in the rate). Every other second (and each second after it until the queue is
empty again) runs on 10 ms bins: a busy episode, whose FIFO waits are computed when it ends (the
queue empty again) from cumulative accepted arrivals and departures (FIFO virtual time at the
bin's midpoint: +-5 ms). A backlogged second is advanced whole too when its queue starts with more
than :data:`DEEP_BACKLOG_SECONDS` of the fleet's service and cannot refuse (an unbounded router or
activator queue, or room for the second's work): the queue cannot empty within it, so it grows by
the second's work less the fleet's service, and the episode's accounting takes its arrivals as
spread evenly over its bins (the bins' Poisson noise is all it leaves out: a few requests' worth
of a backlog of seconds). An overloaded controller (Knative's limit cycle on the 14-day trace)
spends hours a day there. ``coarse=False`` runs every second on bins: the reference the
whole-second paths are tested against (within 0.1 point of attainment). A fleet far from
saturation, as most of a multi-day trace is, costs one vector operation per segment.

Latency. Batch profiles add the batch latency of the bucket the dynamic batcher would run at that
load (the largest while backlogged) and half the batch-fill wait; LLM profiles add each request's
own time to first token. Every request is counted: per bin or second with its weight (batch, whose
latency percentiles come from a log histogram of 0.5 % resolution) or one by one (LLM).

Controllers' request paths (attributes a policy may carry): ``max_ongoing_requests`` caps what a
replica runs at once (Ray Serve: the batcher cannot form larger batches, so a replica's throughput
is that of the largest allowed batch) and ``router_queue_unbounded`` holds the rest in the
router's queue without 429 (Ray Serve's ``max_queued_requests`` -1); ``activator_in_path`` (Knative
with the activator buffering) also holds excess requests instead of refusing them.

The policy runs every ``policy.interval`` seconds on metrics per second
(:mod:`neuronfleet.sim.metrics`); its targets go to the :class:`~neuronfleet.sim.fleet.Fleet`.
Cost is node-seconds x the catalog's on-demand price (the schedule mode's replica-seconds for the
instant oracle), billed over the span attainment is measured on: from ``measure_from`` to the
second of the trace's last arrival (:attr:`~neuronfleet.sim.workload.Workload.trace_seconds`). The
:data:`~neuronfleet.sim.workload.TAIL_SECONDS` after it are simulated, so that late requests'
latency counts, but not billed: there the feasible oracle scales down and a static fleet cannot,
which is no cost of serving the trace (on 20 minutes it put a static fleet holding the oracle's
capacity at 1.09x the oracle).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from sortedcontainers import SortedList

from neuronfleet.planning import coldstart
from neuronfleet.planning.rounding import ROUND_OFF, ceil_whole
from neuronfleet.sim.fleet import Fleet
from neuronfleet.sim.metrics import MetricsView
from neuronfleet.sim.policies import MIN_COLD_START_SAMPLES, Observed, Policy
from neuronfleet.sim.profiles import Profile
from neuronfleet.sim.workload import PER_SECOND, Workload

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: Every policy starts from the same ready fleet and decides only once it has this much metric history.
WARMUP_SECONDS = 60.0
#: Points of the latency CDF kept for plots.
CDF_POINTS = 200
#: A second is advanced whole when its queue starts empty and its work is at most this share of capacity.
COARSE_LOAD = 0.9
#: ... and its busiest 10 ms bin, this many standard deviations above the mean, fits in a bin's service.
BIN_SIGMAS = 4.0
#: Whole seconds served ahead of the policy's next decision (see :meth:`SecondsSimulation.serve`).
AHEAD_SECONDS = 120
#: Seconds of 10 ms bins computed at once while the queue holds a backlog (see :class:`_FineChunk`).
FINE_CHUNK_SECONDS = 16
#: Backlog (replica-seconds) below which the queue counts as empty.
EMPTY = 1e-9
#: A backlogged second is advanced whole when its queue starts with more than this many seconds of
#: the fleet's service and cannot refuse (see :meth:`SecondsSimulation._deep`).
DEEP_BACKLOG_SECONDS = 1.0
#: A busy episode longer than this is closed even with a backlog (its unserved tail counts as late).
MAX_EPISODE_SECONDS = 3600
#: Requests an upstream buffer (router queue, activator) holds beyond the replicas' queues.
UPSTREAM_BUFFER_REQUESTS = 1e9
#: Latency histogram: log-spaced bins from 1 us to 10^7 ms.
_HIST_LO, _HIST_HI, _HIST_BINS = -3.0, 7.0, 2000


@dataclass
class RunResult:
    """One policy at one setting over one workload."""

    policy: str
    setting: str
    requests: float
    served: float
    rejected: float
    within_slo: float
    cold_start_misses: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    replica_hours: float
    chip_hours: float
    usd: float
    sim_wall_s: float
    timeline: dict[str, list[float]] = field(default_factory=dict)
    cdf_ms: list[float] = field(default_factory=list)
    last_reason: str = ""
    #: Seconds of history pass before the measured span (0: the whole run is measured).
    measured_from: float = 0.0
    #: CPU seconds of the run (wall time depends on what else the machine runs).
    sim_cpu_s: float = 0.0
    #: Seconds with an arrival that missed the SLO or was refused (for the oracles' refinement).
    late_seconds: BoolArray | None = field(default=None, repr=False)
    #: Seconds advanced on 10 ms bins (the rest were advanced whole).
    fine_seconds: int = 0
    #: What the policy says a report must tell (its ``notes()``: e.g. a maxReplicas that capped it).
    notes: tuple[str, ...] = ()

    @property
    def slo_attainment(self) -> float:
        return self.within_slo / self.requests if self.requests else 1.0

    @property
    def usd_per_million(self) -> float:
        return self.usd / self.requests * 1e6 if self.requests else 0.0


# ---------------------------------------------------------------------------- queue kernels


def lindley(work: FloatArray, q0: float, per_bin: float, bound: float) -> tuple[FloatArray, FloatArray]:
    """Backlog after each bin and work refused per bin, for a constant service ``per_bin`` > 0.

    ``Q[n] = min(bound, max(0, Q[n-1] + work[n] - per_bin))``, the excess over ``bound`` refused.
    Between hitting one barrier and the other it is a one-sided reflection, computed vectorized
    from a cumulative sum and its running minimum (below the bound: reflected at 0; at the bound:
    ``bound - Q`` reflected at 0, the reflection being what is refused). An overloaded queue
    switches barriers rarely; past :data:`_MAX_PHASES` switches it goes bin by bin.
    """
    x = work - per_bin
    n = len(x)
    q = np.empty(n)
    rejected = np.zeros(n)
    level, i, phases = q0, 0, 0
    if q0 > bound:
        # Fewer replicas than a moment ago: the backlog sits above the new bound.
        phases = _MAX_PHASES
    while i < n:
        phases += 1
        if phases > _MAX_PHASES:
            _lindley_loop(work, level, per_bin, bound, i, q, rejected)
            break
        # Below the bound: reflected at 0 until the backlog passes the bound.
        s = level + x[i:].cumsum()
        low = s - np.minimum(np.minimum.accumulate(s), 0.0)
        over = np.flatnonzero(low > bound)
        if not len(over):
            q[i:] = low
            break
        j = int(over[0])
        q[i : i + j] = low[:j]
        rejected[i + j] = low[j] - bound
        q[i + j] = level = bound
        i += j + 1
        if i >= n:
            break
        # At the bound: the room left (bound - Q) is reflected at 0 until the queue empties.
        s = (-x[i:]).cumsum()
        floor = np.minimum(np.minimum.accumulate(s), 0.0)
        room = s - floor
        empty = np.flatnonzero(room > bound)
        stop = int(empty[0]) if len(empty) else n - i
        q[i : i + stop] = bound - room[:stop]
        refused = -np.diff(np.concatenate(([0.0], floor[:stop])))
        rejected[i : i + stop] = refused
        i += stop
        if i < n:
            q[i] = level = 0.0
            i += 1
    return q, rejected


#: Barrier switches :func:`lindley` computes vectorized before going bin by bin.
_MAX_PHASES = 64


def _lindley_loop(
    work: FloatArray, level: float, per_bin: float, bound: float, start: int, q: FloatArray, rejected: FloatArray
) -> None:
    for i in range(start, len(work)):
        arriving = float(work[i])
        level = level + arriving - per_bin
        if level < 0.0:
            level = 0.0
        if level > bound:
            refused = min(arriving, level - max(bound, 0.0))
            rejected[i] = refused
            level -= refused
        q[i] = level


def fifo_waits(accepted: FloatArray, departed: FloatArray, dt: float, backlog: float = 0.0) -> FloatArray:
    """Seconds each bin's (midpoint) accepted arrival waits, behind ``backlog`` queued before (inf: never)."""
    cum_accepted = accepted.cumsum()
    cum_departed = departed.cumsum()
    position = backlog + cum_accepted - accepted / 2
    leave = cum_departed.searchsorted(position - 1e-12, side="left")
    served = leave < len(cum_departed)
    leave_c = np.minimum(leave, len(cum_departed) - 1)
    before = np.where(leave_c > 0, cum_departed[np.maximum(leave_c - 1, 0)], 0.0)
    within = np.where(departed[leave_c] > 0, (position - before) / np.maximum(departed[leave_c], 1e-30), 0.5)
    leave_time = (leave_c + np.minimum(np.maximum(within, 0.0), 1.0)) * dt
    arrive_time = (np.arange(len(position)) + 0.5) * dt
    wait = np.maximum(leave_time - arrive_time, 0.0)
    wait[~served] = np.inf
    return np.asarray(wait, dtype=np.float64)


def _normal_cdf(z: FloatArray) -> FloatArray:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): numpy has no erf.
    x = np.abs(z) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-x * x)
    return np.asarray(0.5 * (1.0 + np.sign(z) * erf), dtype=np.float64)


def _normal_pdf(z: FloatArray) -> FloatArray:
    return np.asarray(np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi), dtype=np.float64)


class BatchModel:
    """The dynamic batcher of a batch profile, optionally capped at ``max_batch`` requests at once."""

    def __init__(self, profile: Profile, max_batch: int | None = None) -> None:
        batches = profile.efficient_batches()
        self.best = float(batches[-1].throughput_per_s)
        allowed = [p for p in batches if max_batch is None or p.batch <= max_batch] or batches[:1]
        self.thr = np.array([p.throughput_per_s for p in allowed])
        self.lat = np.array([p.latency_ms for p in allowed])
        self.size = np.array([float(p.batch) for p in allowed])
        #: A replica's capacity in work units (1 / best throughput each) per second.
        self.speed = float(self.thr[-1]) / self.best
        self.max_delay_ms = profile.max_batch_delay_ms

    def expected_bin_metrics(self, count_s: FloatArray, replicas: int, dt: float) -> tuple[FloatArray, FloatArray]:
        """Per second: in-flight requests and busy ratio averaged over its bins, as the 10 ms queue
        computes them when nothing waits (each bin's batch bucket set by that bin's arrivals).

        A second's bins hold ~Poisson(m = count / bins) arrivals; the expectations over that
        distribution (normal approximation, continuity-corrected; exact enough where it matters,
        hundreds of arrivals per bin, and exact where every bin falls in the first bucket) stand
        for the average over the second's bins, which the batcher's nonlinearity makes differ
        from the metrics at the second's mean rate.
        """
        per_second = round(1.0 / dt)
        m = count_s / per_second
        sd = np.sqrt(np.maximum(m, 1e-12))
        # E[X 1{X <= k}] for each bucket's upper edge k, in arrivals per bin: one row per edge, every
        # edge in one pass (a stretch is often a few seconds long, and a pass per edge cost its numpy
        # calls again each stretch); the last bucket takes all.
        z = ((self.thr[:-1] * dt * replicas + 0.5)[:, None] - m) / sd
        partial = [*(m * _normal_cdf(z) - sd * _normal_pdf(z)), m]
        in_flight = np.zeros(len(m))
        utilization = np.zeros(len(m))
        below = np.zeros(len(m))
        for i, upto in enumerate(partial):
            share = np.maximum(upto - below, 0.0)
            below = np.maximum(below, upto)
            in_flight += share / dt * self.lat[i] / 1e3
            utilization += share / (dt * replicas * self.thr[i])
        return in_flight, np.minimum(1.0, utilization)

    def service(
        self, rate_per_replica: FloatArray, backlogged: BoolArray | None
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per bin or second: service ms (batch + half the fill wait), batch latency ms, and throughput/s."""
        index = np.minimum(self.thr.searchsorted(rate_per_replica), len(self.thr) - 1)
        if backlogged is not None:
            index[backlogged] = len(self.thr) - 1
        size = self.size[index]
        with np.errstate(divide="ignore", invalid="ignore"):
            fill = np.where(
                rate_per_replica > 0,
                np.minimum(self.max_delay_ms, size / np.maximum(rate_per_replica, 1e-9) * 1e3),
                0.0,
            )
        fill[size == 1] = 0.0
        return self.lat[index] + fill / 2, self.lat[index], self.thr[index]

    def served_metrics(
        self,
        departed_per_s: FloatArray | float,
        latency_ms: FloatArray | float,
        bucket: FloatArray | float,
        replicas: int,
    ) -> tuple[FloatArray, FloatArray]:
        """In-flight requests and busy ratio of ``replicas`` serving ``departed_per_s`` work units a
        second at a batch bucket of ``latency_ms`` and throughput ``bucket`` (per bin, or one second)."""
        throughput = departed_per_s * self.best
        return np.asarray(throughput * latency_ms / 1e3), np.minimum(1.0, throughput / (replicas * bucket))


class Simulation:
    """A fine (10 ms) fluid queue over a materialized workload: the trace replay's model.

    :func:`run` uses :class:`SecondsSimulation`, which calls the same kernels on busy episodes only.
    """

    def __init__(self, workload: Workload, profile: Profile) -> None:
        self.w = workload
        self.profile = profile
        n = workload.bins
        self.queue = np.zeros(n)
        self.accepted = np.zeros(n)
        self.departed = np.zeros(n)
        self.rejected = np.zeros(n)
        self.in_flight = np.zeros(n)
        self.utilization = np.zeros(n)
        self.service_ms = np.zeros(n)
        self.capacity = np.zeros(n, dtype=np.int64)
        self.cold = np.zeros(n, dtype=bool)
        self.queue_requests = np.zeros(n)
        self.view = MetricsView(workload.dt, workload.count, self.queue_requests, self.in_flight, self.utilization)
        self.batch = BatchModel(profile) if profile.kind == "batch" else None

    def serve(self, start: int, stop: int, replicas: int, cold: bool) -> None:
        """Advance bins ``[start, stop)`` with ``replicas`` serving."""
        if stop <= start:
            return
        w = self.w
        dt = w.dt
        work = w.work[start:stop]
        q0 = self.queue[start - 1] if start > 0 else 0.0
        per_bin = replicas * dt
        if replicas > 0:
            q, rejected = lindley(work, q0, per_bin, replicas * self.profile.max_queue * w.mean_work)
        else:
            # No endpoints: new requests are refused; anything queued waits for capacity.
            q, rejected = np.full(stop - start, q0), work.copy()
        accepted = work - rejected
        previous = np.concatenate(([q0], q[:-1]))
        departed = np.maximum(previous + accepted - q, 0.0)
        self.queue[start:stop] = q
        self.accepted[start:stop] = accepted
        self.rejected[start:stop] = rejected
        self.departed[start:stop] = departed
        self.capacity[start:stop] = replicas
        self.cold[start:stop] = cold
        self.queue_requests[start:stop] = q / w.mean_work
        if replicas == 0:
            return
        if self.batch is not None:
            service, lat, thr = self.batch.service(w.count[start:stop] / (dt * replicas), q > 1e-12)
            self.service_ms[start:stop] = service
            throughput = departed / dt * self.batch.best
            self.in_flight[start:stop] = throughput * lat / 1e3
            self.utilization[start:stop] = np.minimum(1.0, throughput / (replicas * thr))
        else:
            assert self.profile.llm is not None
            busy = departed / per_bin
            self.in_flight[start:stop] = busy * replicas * self.profile.llm.slots
            self.utilization[start:stop] = np.minimum(1.0, busy)

    def waits(self) -> FloatArray:
        """Seconds each bin's (midpoint) accepted arrival waits in the FIFO queue (inf: never served)."""
        return fifo_waits(self.accepted, self.departed, self.w.dt)


def _second_means(bins: FloatArray, seconds: int) -> FloatArray:
    """Each second's mean of its 10 ms bins: what ``mean(axis=1)`` computes, without its Python frame."""
    return np.asarray(np.add.reduce(bins.reshape(seconds, PER_SECOND), axis=1) / PER_SECOND, dtype=np.float64)


def _weighted_quantiles(values: FloatArray, weights: FloatArray, qs: FloatArray) -> FloatArray:
    order = np.argsort(values, kind="stable")
    v, cw = values[order], np.cumsum(weights[order])
    if cw[-1] <= 0:
        return np.full(len(qs), np.nan)
    index = np.searchsorted(cw, qs * cw[-1], side="left")
    return np.asarray(v[np.minimum(index, len(v) - 1)], dtype=np.float64)


def _hist_index(latency_ms: FloatArray) -> IntArray:
    x = np.log10(np.maximum(latency_ms, 10**_HIST_LO))
    return np.minimum(((x - _HIST_LO) / (_HIST_HI - _HIST_LO) * _HIST_BINS).astype(np.int64), _HIST_BINS - 1)


def _hist_value(index: IntArray) -> FloatArray:
    return np.asarray(10 ** (_HIST_LO + (index + 0.5) * (_HIST_HI - _HIST_LO) / _HIST_BINS), dtype=np.float64)


#: One commit of a busy episode on 10 ms bins: its first second, then per bin its arrivals, work,
#: accepted work, departed work, service ms and cold flag.
_EpisodePart = tuple[int, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, BoolArray]


@dataclass
class _DeepRun:
    """Seconds ``[start, start + seconds)`` of a busy episode advanced whole in a deep backlog, with
    ``replicas`` serving: turned into 10 ms bins (:meth:`SecondsSimulation._deep_bins`) when the
    episode ends."""

    start: int
    seconds: int
    replicas: int
    cold: bool


@dataclass
class _FineChunk:
    """Seconds ``[start, stop)`` computed on 10 ms bins for one fleet (``key``), from the backlog
    the queue had at ``start``: committed a control-loop tick at a time, the rest kept while the
    fleet stays the same (a tick every 1-2 s would otherwise pay a dozen numpy calls per second).
    What a second holds depends only on its arrivals, the fleet and the backlog before it, so a
    chunk continued is the chunk that would be computed there again, but for float rounding."""

    start: int
    stop: int
    key: tuple[int, bool, bool]
    q: FloatArray
    count: FloatArray
    work: FloatArray
    accepted: FloatArray
    departed: FloatArray
    service: FloatArray
    queue_end: FloatArray
    queue_mean: FloatArray
    in_flight: FloatArray
    utilization: FloatArray


class SecondsSimulation:
    """The run's queue: whole seconds where nothing can wait, 10 ms busy episodes elsewhere."""

    def __init__(self, workload: Workload, profile: Profile, *, measure_from: int = 0, coarse: bool = True) -> None:
        self.w = workload
        self.profile = profile
        self.coarse = coarse
        self.measure_from = measure_from
        n = workload.seconds
        self.queue_end = np.zeros(n)
        self.queue_mean = np.zeros(n)
        self.in_flight = np.zeros(n)
        self.utilization = np.zeros(n)
        self.capacity = np.zeros(n, dtype=np.int64)
        self.late = np.zeros(n, dtype=bool)
        self.fine = np.zeros(n, dtype=bool)
        self.cold = np.zeros(n, dtype=bool)
        self._ahead_until = 0
        self._ahead_as: tuple[int, bool] = (-1, False)
        # Per second, the busiest 10 ms bin :meth:`_quiet` compares with a bin's service: it
        # depends on the arrivals alone, and a policy's every decision asks for the next seconds.
        count, work = workload.count_s, workload.work_s
        with np.errstate(invalid="ignore", divide="ignore"):
            per_bin = count / PER_SECOND
            self._busiest = np.where(count > 0, (per_bin + BIN_SIGMAS * np.sqrt(per_bin)) * work / count, 0.0)
        #: Per fleet size, the last stretch of seconds it served whole, with their metrics (batch
        #: profiles; see :meth:`serve`).
        self._whole_kept: dict[int, tuple[int, int, FloatArray | None, FloatArray | None]] = {}
        #: The rest of the last fine chunk, from ``_pending[1]`` on (see :class:`_FineChunk`).
        self._pending: tuple[_FineChunk, int] | None = None
        self._chunk_seconds = FINE_CHUNK_SECONDS
        self.view = MetricsView(
            1.0, workload.count_s, self.queue_end, self.in_flight, self.utilization, queue_mean=self.queue_mean
        )
        self.batch = BatchModel(profile) if profile.kind == "batch" else None
        self.unbounded = False
        self.q = 0.0
        self._episode: list[_EpisodePart | _DeepRun] = []
        self._episode_backlog = 0.0
        self._episode_seconds = 0
        # Totals over measured requests (batch); LLM profiles keep per-bin waits and refusals instead.
        self.requests = self.rejected = self.within = self.cold_miss = 0.0
        self.max_ms = 0.0
        self.hist = np.zeros(_HIST_BINS)
        self.llm = profile.kind == "llm"
        if self.llm:
            self.wait_bins = np.zeros(workload.bins)
            self.refused_bins = np.zeros(workload.bins)
            self.cold_bins = np.zeros(workload.bins, dtype=bool)

    def set_request_path(self, max_ongoing: int | None, unbounded: bool) -> None:
        """Apply a controller's request path (see the module docstring)."""
        if self.batch is not None and max_ongoing is not None:
            self.batch = BatchModel(self.profile, max_ongoing)
            self._whole_kept.clear()  # another capacity per replica: other quiet seconds, other metrics
        self.unbounded = unbounded

    @property
    def speed(self) -> float:
        return self.batch.speed if self.batch is not None else 1.0

    # ------------------------------------------------------------------ advancing

    def serve(self, start: int, stop: int, replicas: int, cold: bool) -> None:
        """Advance seconds ``[start, stop)`` with ``replicas`` serving.

        Whole seconds are served ahead (up to :data:`AHEAD_SECONDS`, never past a second that needs
        bins): a later call with the same fleet returns at once, one with another fleet serves
        those seconds again (what they hold depends only on the second's arrivals and the fleet,
        and no policy has read them: metrics are read before ``now``). A fleet back at a size that
        served a stretch whole serves the rest of that stretch from what it computed then (its
        seconds are quiet for that size still): Knative's fleet changes at most ticks, back and
        forth, and each change computed two minutes again.
        """
        stop = min(stop, self.w.seconds)
        if self._pending is not None and (self._pending[1], self._pending[0].key) != (
            start,
            (replicas, cold, self.unbounded),
        ):
            self._pending = None
        if start < self._ahead_until and (replicas, cold) == self._ahead_as:
            if stop <= self._ahead_until:
                return
            start = self._ahead_until
        self._ahead_until = 0
        s = start
        capacity = replicas * self.speed
        while s < stop:
            if self.q <= EMPTY and self.coarse:
                if replicas == 0 and not self.unbounded:
                    self._close()
                    self._whole(s, stop, 0, cold)
                    s = stop
                    continue
                kept = self._whole_kept.get(replicas)
                if kept is not None and kept[0] <= s < kept[1]:
                    quiet, n = True, kept[1] - s
                else:
                    horizon = min(self.w.seconds, max(stop, s + AHEAD_SECONDS))
                    safe = self._quiet(s, horizon, capacity)
                    flips = np.flatnonzero(safe != safe[0])
                    quiet, n = bool(safe[0]), int(flips[0]) if len(flips) else horizon - s
                if quiet:
                    self._close()
                    self._whole(s, s + n, replicas, cold)
                    if s + n > stop:
                        self._ahead_until, self._ahead_as = s + n, (replicas, cold)
                    s += n
                else:
                    n = min(n, stop - s)
                    self._fine(s, s + n, replicas, cold)
                    s += n
            else:
                deep = self._deep(s, stop, replicas, cold) if self.coarse else 0
                if deep:
                    s += deep
                    continue
                n = stop - s if not self.coarse else min(stop - s, FINE_CHUNK_SECONDS)
                self._fine(s, s + n, replicas, cold)
                s += n

    def _quiet(self, start: int, stop: int, capacity: float) -> BoolArray:
        """Seconds whose 10 ms bins will not queue: the second's work is at most :data:`COARSE_LOAD`
        of capacity and a bin :data:`BIN_SIGMAS` standard deviations above the mean (Poisson bins)
        still fits in one bin's service."""
        work = self.w.work_s[start:stop]
        busiest = self._busiest[start:stop]
        return np.asarray((work <= COARSE_LOAD * capacity) & (busiest <= capacity / PER_SECOND), dtype=bool)

    def _whole(self, start: int, stop: int, replicas: int, cold: bool) -> None:
        """Seconds where nothing waits: the metrics now; latency and totals at :meth:`finish`."""
        self.fine[start:stop] = False
        self.capacity[start:stop] = replicas
        self.cold[start:stop] = cold
        self.queue_end[start:stop] = 0.0
        self.queue_mean[start:stop] = 0.0
        if replicas == 0:
            self.in_flight[start:stop] = 0.0
            self.utilization[start:stop] = 0.0
            return
        if self.llm:
            assert self.profile.llm is not None
            work = self.w.work_s[start:stop]
            self.in_flight[start:stop] = work * self.profile.llm.slots
            self.utilization[start:stop] = np.minimum(1.0, work / replicas)
            self._whole_kept[replicas] = (start, stop, None, None)
            return
        assert self.batch is not None
        kept = self._whole_kept.get(replicas)
        if kept is not None and kept[2] is not None and kept[3] is not None and kept[0] <= start and stop <= kept[1]:
            at = start - kept[0]
            in_flight, utilization = kept[2][at : at + stop - start], kept[3][at : at + stop - start]
        else:
            in_flight, utilization = self.batch.expected_bin_metrics(self.w.count_s[start:stop], replicas, self.w.dt)
            self._whole_kept[replicas] = (start, stop, in_flight, utilization)
        self.in_flight[start:stop] = in_flight
        self.utilization[start:stop] = utilization

    def _whole_totals(self) -> None:
        """Latency and totals of every second advanced whole (one vector pass at the end)."""
        whole = np.flatnonzero(~self.fine & (self.w.count_s > 0))
        if not len(whole):
            return
        replicas = self.capacity[whole]
        cold = self.cold[whole]
        refused = replicas == 0
        if self.llm:
            for second in whole[refused].tolist():
                lo, hi = second * PER_SECOND, (second + 1) * PER_SECOND
                self.refused_bins[lo:hi] = self.w.fine_works(second, second + 1)
            self.cold_bins.reshape(self.w.seconds, PER_SECOND)[whole] = cold[:, None]
            return
        assert self.batch is not None
        count = self.w.count_s[whole].copy()
        count[whole < self.measure_from] = 0.0
        service, _, _ = self.batch.service(count / np.maximum(replicas, 1), None)
        ok = (service <= self.profile.slo_ms) & ~refused
        self.late[whole] = ~ok
        self._tally(count, np.where(refused, count, 0.0), np.where(refused, np.inf, service), ok, cold)

    def _tally(
        self, count: FloatArray, refused: FloatArray, latency_ms: FloatArray, ok: BoolArray, cold: bool | BoolArray
    ) -> None:
        served = count - refused
        within = np.where(ok, served, 0.0)
        # ufunc reductions, not the arrays' sum(): the same sums without a Python frame each (a
        # busy episode's accounting runs ~100,000 times in a 14-day run).
        self.requests += float(np.add.reduce(count))
        self.rejected += float(np.add.reduce(refused))
        self.within += float(np.add.reduce(within))
        self.cold_miss += float(np.add.reduce((count - within) * cold))
        finite = np.isfinite(latency_ms) & (served > 0)
        counted = latency_ms[finite]
        if len(counted):
            self.hist += np.bincount(_hist_index(counted), weights=served[finite], minlength=_HIST_BINS)
            self.max_ms = max(self.max_ms, float(counted.max()))

    def _deep(self, start: int, stop: int, replicas: int, cold: bool) -> int:
        """Advance whole the seconds from ``start`` (before ``stop``) whose backlog is deep: the
        queue starts with more than :data:`DEEP_BACKLOG_SECONDS` of the fleet's service, so it
        cannot empty within the second and every bin serves its full share, and it cannot refuse
        (no bound, or room for the second's work). Returns how many (0: none; batch profiles only).

        Within such a second the fluid queue is known without its bins: it grows by the second's
        work less the fleet's service, departures run at capacity and the batcher at its largest
        bucket. Its arrivals are taken as spread evenly over the second's bins (the fine engine
        draws them Poisson): the requests' waits (queued seconds behind a backlog of more than a
        second) move by the bins' noise, a few requests' worth of work. A pending fine chunk that
        covers the seconds is used instead: it is already computed.
        """
        if self.batch is None or replicas <= 0 or self._pending_covers(start, stop):
            return 0
        capacity = replicas * self.speed
        bound = math.inf if self.unbounded else replicas * self.profile.max_queue * self.w.mean_work
        mean_work = self.w.mean_work
        q = self.q
        second = start
        batch = self.batch
        # The fine engine's metrics while backlogged: departures at capacity, the largest bucket.
        in_flight, utilization = batch.served_metrics(capacity, float(batch.lat[-1]), float(batch.thr[-1]), replicas)
        while second < stop:
            work = float(self.w.work_s[second])
            if q <= capacity * DEEP_BACKLOG_SECONDS + EMPTY or q + work > bound:
                break
            # Bins n = 1..100 end at q + n/100 (work - capacity): their mean is at 101/200 of the way.
            self.queue_mean[second] = (q + (work - capacity) * (PER_SECOND + 1) / (2 * PER_SECOND)) / mean_work
            q += work - capacity
            self.queue_end[second] = q / mean_work
            second += 1
        taken = second - start
        if not taken:
            return 0
        self._pending = None
        if not self._episode:
            self._episode_backlog = self.q
        self.in_flight[start:second] = in_flight
        self.utilization[start:second] = utilization
        self.fine[start:second] = True
        self.capacity[start:second] = replicas
        self.cold[start:second] = cold
        last = self._episode[-1] if self._episode else None
        if isinstance(last, _DeepRun) and (last.start + last.seconds, last.replicas, last.cold) == (
            start,
            replicas,
            cold,
        ):
            last.seconds += taken
        else:
            self._episode.append(_DeepRun(start, taken, replicas, cold))
        self._episode_seconds += taken
        self.q = q if q > EMPTY else 0.0
        if self.q == 0.0 or self._episode_seconds >= MAX_EPISODE_SECONDS:
            self._close()
        return taken

    def _deep_bins(self, run: _DeepRun) -> _EpisodePart:
        """A deep run's seconds as 10 ms bins for the episode's accounting: each second's arrivals
        and work spread evenly over its bins, served at capacity, at the batcher's largest bucket."""
        assert self.batch is not None
        seconds = slice(run.start, run.start + run.seconds)
        count = np.repeat(self.w.count_s[seconds] / PER_SECOND, PER_SECOND)
        work = np.repeat(self.w.work_s[seconds] / PER_SECOND, PER_SECOND)
        departed = np.full(len(work), run.replicas * self.w.dt * self.speed)
        service, _, _ = self.batch.service(count / (self.w.dt * run.replicas), np.ones(len(count), dtype=bool))
        return run.start, count, work, work, departed, service, np.full(len(count), run.cold)

    def _pending_covers(self, start: int, stop: int) -> bool:
        """Whether the rest of the last fine chunk holds seconds ``[start, stop)``."""
        pending = self._pending
        return pending is not None and pending[1] == start and pending[0].stop >= stop

    def _fine(self, start: int, stop: int, replicas: int, cold: bool) -> None:
        """Advance seconds ``[start, stop)`` on 10 ms bins: from the pending chunk when it covers
        them, else from a new one that reaches past ``stop`` (:class:`_FineChunk`)."""
        pending, covers, self._pending = self._pending, self._pending_covers(start, stop), None
        if pending is not None and covers:
            chunk = pending[0]
        else:
            ahead = stop if not self.coarse else max(stop, start + self._chunk_seconds)
            chunk = self._fine_chunk(start, min(self.w.seconds, ahead), replicas, cold)
        self._commit(chunk, start, stop, cold)
        if stop < chunk.stop and self.q > 0.0:
            self._pending = (chunk, stop)
        # The next chunk reaches as far as this one was used, twice as far at most: the seconds
        # computed past a change of the fleet are thrown away.
        self._chunk_seconds = max(2, min(FINE_CHUNK_SECONDS, 2 * (stop - chunk.start)))

    def _fine_chunk(self, start: int, stop: int, replicas: int, cold: bool) -> _FineChunk:
        """Seconds ``[start, stop)`` on 10 ms bins from the current backlog (nothing recorded yet)."""
        w = self.w
        dt = w.dt
        count = w.fine_counts(start, stop)
        work = count * w.mean_work if w.fine_work is None else w.fine_works(start, stop)
        q0 = self.q
        per_bin = replicas * dt * self.speed
        if replicas > 0:
            bound = math.inf if self.unbounded else replicas * self.profile.max_queue * w.mean_work
            q, rejected = lindley(work, q0, per_bin, bound)
        else:
            q = np.full(len(work), q0)
            rejected = np.zeros(len(work)) if self.unbounded else work.copy()
            if self.unbounded:
                q = q0 + np.cumsum(work)
        accepted = work - rejected
        previous = np.concatenate(([q0], q[:-1]))
        departed = np.maximum(previous + accepted - q, 0.0)
        seconds = stop - start
        queue_end = q[PER_SECOND - 1 :: PER_SECOND] / w.mean_work
        queue_mean = _second_means(q, seconds) / w.mean_work
        service = np.zeros(len(work))
        if replicas > 0 and self.batch is not None:
            service, lat, thr = self.batch.service(count / (dt * replicas), q > 1e-12)
            in_flight_bins, util = self.batch.served_metrics(departed / dt, lat, thr, replicas)
            in_flight = _second_means(in_flight_bins, seconds)
            utilization = _second_means(util, seconds)
        elif replicas > 0:
            assert self.profile.llm is not None
            busy = departed / per_bin
            in_flight = (busy * replicas * self.profile.llm.slots).reshape(seconds, PER_SECOND).mean(1)
            utilization = np.minimum(1.0, busy).reshape(seconds, PER_SECOND).mean(axis=1)
        else:
            in_flight = utilization = np.zeros(seconds)
        return _FineChunk(
            start,
            stop,
            (replicas, cold, self.unbounded),
            q,
            count,
            work,
            accepted,
            departed,
            service,
            queue_end,
            queue_mean,
            in_flight,
            utilization,
        )

    def _commit(self, chunk: _FineChunk, start: int, stop: int, cold: bool) -> None:
        """Record seconds ``[start, stop)`` of ``chunk``: the metrics now, the requests when the
        busy episode ends (:meth:`_close`)."""
        lo, hi = start - chunk.start, stop - chunk.start
        bins = slice(lo * PER_SECOND, hi * PER_SECOND)
        if not self._episode:
            self._episode_backlog = self.q
        self.queue_end[start:stop] = chunk.queue_end[lo:hi]
        self.queue_mean[start:stop] = chunk.queue_mean[lo:hi]
        self.in_flight[start:stop] = chunk.in_flight[lo:hi]
        self.utilization[start:stop] = chunk.utilization[lo:hi]
        self.fine[start:stop] = True
        self.capacity[start:stop] = chunk.key[0]
        self.cold[start:stop] = cold
        count = chunk.count[bins]
        self._episode.append(
            (
                start,
                count,
                chunk.work[bins],
                chunk.accepted[bins],
                chunk.departed[bins],
                chunk.service[bins],
                np.full(len(count), cold),
            )
        )
        self._episode_seconds += stop - start
        last = float(chunk.q[hi * PER_SECOND - 1])
        self.q = last if last > EMPTY else 0.0
        if self.q == 0.0 or self._episode_seconds >= MAX_EPISODE_SECONDS:
            self._close()

    def _close(self) -> None:
        """Account a finished busy episode (see the module docstring)."""
        if not self._episode:
            return
        episode = [self._deep_bins(part) if isinstance(part, _DeepRun) else part for part in self._episode]
        start = episode[0][0]
        if len(episode) == 1:
            # Most episodes are one commit long (a burst the next tick has absorbed): its arrays as
            # they are, none of them written below (``count`` is copied before it is).
            count, work, accepted, departed, service, cold = episode[0][1:]
        else:
            parts = list(zip(*(e[1:] for e in episode), strict=True))
            count, work, accepted, departed, service, cold = (np.concatenate(p) for p in parts)
        self._episode = []
        self._episode_seconds = 0
        wait = fifo_waits(accepted, departed, self.w.dt, self._episode_backlog)
        self._episode_backlog = self.q
        share = np.divide(work - accepted, work, out=np.zeros(len(work)), where=work > 0)
        lo = start * PER_SECOND
        seconds = len(count) // PER_SECOND
        if self.llm:
            self.wait_bins[lo : lo + len(wait)] = wait
            self.refused_bins[lo : lo + len(wait)] = work - accepted
            self.cold_bins[lo : lo + len(wait)] = cold
            return
        latency_ms = wait * 1e3 + service
        ok = latency_ms <= self.profile.slo_ms
        bad = (count > 0) & (~ok | (share > 0))
        self.late[start : start + seconds] |= bad.reshape(seconds, PER_SECOND).any(axis=1)
        if self.measure_from > start:
            count = count.copy()
            count[: (self.measure_from - start) * PER_SECOND] = 0.0
        self._tally(count, count * share, latency_ms, ok, cold)

    # ------------------------------------------------------------------ results

    def finish(self) -> None:
        self._close()
        self._whole_totals()

    def totals(self) -> tuple[float, float, float, float, float, float, float, list[float]]:
        """requests, rejected, within SLO, cold misses, p50, p99, max, CDF (ms) of measured requests."""
        qs = np.linspace(0, 1, CDF_POINTS + 1)
        if self.llm:
            return self._llm_totals(qs)
        total = self.hist.sum()
        if total <= 0:
            return self.requests, self.rejected, self.within, self.cold_miss, math.nan, math.nan, math.nan, []
        cum = np.cumsum(self.hist)
        index = np.minimum(np.searchsorted(cum, qs * total, side="left"), _HIST_BINS - 1)
        cdf = _hist_value(index)
        cdf[-1] = self.max_ms
        p50, p99 = (float(_hist_value(np.array([np.searchsorted(cum, x * total)]))[0]) for x in (0.5, 0.99))
        return (
            self.requests,
            self.rejected,
            self.within,
            self.cold_miss,
            p50,
            p99,
            self.max_ms,
            [float(x) for x in cdf],
        )

    def _llm_totals(self, qs: FloatArray) -> tuple[float, float, float, float, float, float, float, list[float]]:
        w = self.w
        assert w.request_bin is not None and w.request_latency is not None
        rb = w.request_bin
        latency_ms = (self.wait_bins[rb] + w.request_latency) * 1e3
        measured = rb >= self.measure_from * PER_SECOND
        work = w.work
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(work > 0, self.refused_bins / work, 0.0)
        # The last arrivals of a bin are the ones refused when its queue was full.
        first_of_bin = np.searchsorted(rb, rb, side="left")
        rank = np.arange(len(rb)) - first_of_bin
        refused_all = rank >= np.round(w.count[rb] * (1 - share[rb]))
        ok_all = ~refused_all & (latency_ms <= self.profile.slo_ms)
        late_bins = np.zeros(w.bins, dtype=bool)
        late_bins[rb[~ok_all]] = True
        self.late |= late_bins.reshape(w.seconds, PER_SECOND).any(axis=1)
        refused = refused_all & measured
        served = ~refused & measured
        ok = ok_all & measured
        lat = latency_ms[served & np.isfinite(latency_ms)]
        p50, p99, worst = (float(np.quantile(lat, x)) if len(lat) else math.nan for x in (0.5, 0.99, 1.0))
        return (
            float(measured.sum()),
            float(refused.sum()),
            float(ok.sum()),
            float((~ok & measured & self.cold_bins[rb]).sum()),
            p50,
            p99,
            worst,
            np.quantile(lat, qs).tolist() if len(lat) else [],
        )


# ---------------------------------------------------------------------------- the run


class _RunningP90:
    """:func:`neuronfleet.sim.policies.p90` of a growing list of samples, kept sorted as it grows.

    In a sorted container, not a list: a run may launch a million pods over the 14-day trace, and
    inserting each into a sorted list (a move of half of it) took 53 of an overloaded Knative run's
    143 CPU-seconds, when every policy was given the p90. Only a policy that reads it is now
    (``reads_cold_starts``: ours)."""

    def __init__(self) -> None:
        self.sorted: SortedList[float] = SortedList()
        self.seen = 0

    def update(self, samples: list[float]) -> float | None:
        self.sorted.update(samples[self.seen :])
        self.seen = len(samples)
        # The operator's rule, without sorting the list again on every decision.
        return coldstart.estimate_sorted(self.sorted, MIN_COLD_START_SAMPLES)


def run(
    workload: Workload,
    profile: Profile,
    policy: Policy,
    *,
    start_replicas: int,
    seed: int,
    schedule: IntArray | None = None,
    progress: Callable[[float], None] | None = None,
    measure_from: float = 0.0,
    coarse: bool = True,
    node_schedule: bool = False,
) -> RunResult:
    """Simulate ``policy`` over ``workload``; ``schedule`` (replicas per second) replaces the fleet
    for the oracles: capacity follows it instantly and cost is replica-seconds (``node_schedule``:
    the schedule's whole nodes, billed by :mod:`neuronfleet.sim.oracle`, cost left at 0 here).

    Only requests arriving from ``measure_from`` on (rounded up to a whole second), and cost from
    then on, are reported: the time before is a history pass that lets policies that learn from
    history (the warm pool) start the measured span as they would in steady operation. Cost stops
    at the trace's end (``workload.trace_seconds``, module docstring); the simulation goes on
    through the tail.
    """
    wall = time.perf_counter()
    cpu = time.process_time()
    first = ceil_whole(measure_from)
    sim = SecondsSimulation(workload, profile, measure_from=first, coarse=coarse)
    sim.set_request_path(
        getattr(policy, "max_ongoing_requests", None), getattr(policy, "router_queue_unbounded", False)
    )
    seconds = workload.seconds
    end = min(seconds, workload.trace_seconds)
    rng = np.random.default_rng(seed)
    fleet = Fleet(profile, rng, scale_down=policy.scale_down)
    timeline: dict[str, list[float]] = {k: [] for k in ("t", "serving", "active", "warm", "placeholders", "nodes")}
    sample_every = max(5.0, 5.0 * round(seconds / 20_000 / 5.0))
    last_reason = ""

    if schedule is not None:
        changes = np.flatnonzero(np.diff(schedule[:seconds])) + 1
        bounds = [0, *changes.tolist(), min(seconds, len(schedule))]
        for a, b in itertools.pairwise(bounds):
            sim.serve(a, b, int(schedule[a]), False)
        measured = np.asarray(schedule[first:end], dtype=np.float64)
        replica_seconds = float(measured.sum())
        ts = np.arange(first, min(seconds, len(schedule)), int(sample_every))
        timeline["t"] = [float(t) for t in ts]
        timeline["serving"] = timeline["active"] = [float(schedule[t]) for t in ts]
        timeline["warm"] = timeline["placeholders"] = [0.0] * len(ts)
        timeline["nodes"] = [float(math.ceil(schedule[t] / profile.replicas_per_node)) for t in ts]
        node_hours = 0.0 if node_schedule else replica_seconds / 3600 / profile.replicas_per_node
        pod_hours = replica_seconds / 3600
    else:
        initial = policy.start_replicas if policy.start_replicas is not None else start_replicas
        fleet.start_ready(initial)
        policy.prime(initial, 0.0)
        now = 0.0
        next_tick = max(policy.interval, WARMUP_SECONDS)
        next_sample = float(first)
        base_node_seconds = base_pod_seconds = 0.0
        billed: tuple[float, float] | None = None  # node- and pod-seconds at the trace's end
        cold_measured: tuple[int, int] = (-1, -1)
        cold_p90: tuple[float | None, float | None] = (None, None)
        pod_p90, node_p90 = _RunningP90(), _RunningP90()
        measuring = first <= 0
        next_progress = 0.0
        while now < seconds:
            if not measuring and now >= first:
                fleet.account(now)
                base_node_seconds, base_pod_seconds = fleet.node_seconds, fleet.pod_seconds
                measuring = True
            if billed is None and now >= end:
                fleet.account(now)
                billed = fleet.node_seconds, fleet.pod_seconds
            counts = fleet.counts(now)
            if now >= next_sample:
                for key, value in (
                    ("t", now),
                    ("serving", counts.serving),
                    ("active", counts.active),
                    ("warm", counts.warm),
                    ("placeholders", counts.placeholders),
                    ("nodes", counts.nodes),
                ):
                    timeline[key].append(float(value))
                next_sample = now + sample_every
            until = min(
                next_tick,
                fleet.next_event(now),
                next_sample,
                first if not measuring else math.inf,
                end if billed is None else math.inf,
            )
            stop = min(seconds, max(int(now) + 1, ceil_whole(until)))
            sim.serve(int(now), stop, counts.serving, counts.starting_active > 0)
            now = float(stop)
            fleet.advance(now)
            if now >= next_tick - ROUND_OFF:
                # Cold-start percentiles change only when a new cold start is measured.
                cold_count = (len(fleet.pod_cold_starts), len(fleet.node_cold_starts))
                if policy.reads_cold_starts and cold_count != cold_measured:
                    cold_measured, cold_p90 = (
                        cold_count,
                        (pod_p90.update(fleet.pod_cold_starts), node_p90.update(fleet.node_cold_starts)),
                    )
                observed = Observed(fleet.counts(now), *cold_p90)
                targets = policy.decide(now, sim.view, observed)
                last_reason = targets.reason
                fleet.set_targets(now, targets.active, targets.warm, targets.placeholders)
                if hasattr(policy, "activator_in_path"):
                    sim.unbounded = bool(policy.activator_in_path)
                next_tick += policy.interval
                if progress is not None and now >= next_progress:
                    progress(now / seconds)
                    next_progress = now + seconds / 100
        if billed is None:
            fleet.account(float(seconds))
            billed = fleet.node_seconds, fleet.pod_seconds
        node_hours = max(0.0, billed[0] - base_node_seconds) / 3600
        pod_hours = max(0.0, billed[1] - base_pod_seconds) / 3600

    sim.finish()
    requests, rejected, within, cold_miss, p50, p99, worst, cdf = sim.totals()
    timeline["t"] = [t - first for t in timeline["t"]]
    return RunResult(
        policy=policy.name,
        setting=policy.setting,
        requests=requests,
        served=requests - rejected,
        rejected=rejected,
        within_slo=within,
        cold_start_misses=cold_miss,
        p50_ms=p50,
        p99_ms=p99,
        max_ms=worst,
        replica_hours=pod_hours,
        chip_hours=node_hours * profile.instance.chips,
        usd=node_hours * profile.instance.usd_per_hour,
        sim_wall_s=time.perf_counter() - wall,
        timeline=timeline,
        cdf_ms=cdf,
        last_reason=last_reason,
        measured_from=float(first),
        sim_cpu_s=time.process_time() - cpu,
        late_seconds=sim.late,
        fine_seconds=int(sim.fine.sum()),
        notes=tuple(policy.notes()) if hasattr(policy, "notes") else (),
    )
