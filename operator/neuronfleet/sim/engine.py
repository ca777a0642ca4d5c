"""The simulation: a fluid FIFO queue on 10 ms bins, advanced between fleet events with numpy.

Method. Arrivals and their work (replica-seconds, :mod:`neuronfleet.sim.workload`) are binned at
``dt`` = 10 ms. The active replicas form one FIFO queue served at ``C * dt`` replica-seconds per
bin, ``C`` = serving replicas (the Service spreads requests over them; pooling them is a slight
optimism against per-replica queues, the same for every policy). Between fleet events (a
decision, a pod or node turning ready, a drain ending) ``C`` is constant, and the backlog follows
Lindley's recursion ``Q[n] = max(0, Q[n-1] + work[n] - C dt)``, computed for a whole segment at
once from a cumulative sum and its running minimum. When the backlog passes the queue bound
(``max_queue`` requests per serving replica; none without replicas) a bin's excess arrivals are
rejected (429), and that segment is recomputed bin by bin.

Latency. Served work leaves in FIFO order, so a request's wait is the time between its arrival
and the moment cumulative departures reach its place in cumulative accepted arrivals (FIFO
virtual time, taken at its bin's midpoint: +-5 ms). Batch profiles add the batch latency of the
bucket the dynamic batcher would run at that load (the largest while backlogged) and half the
batch-fill wait; LLM profiles add each request's own time to first token. Every request is
counted: per bin with its weight (batch) or one by one (LLM).

The policy runs every ``policy.interval`` seconds on metrics the engine derived from these series
(:mod:`neuronfleet.sim.metrics`); its targets go to the :class:`~neuronfleet.sim.fleet.Fleet`.
Cost is node-seconds x the catalog's on-demand price (the oracle pays replica-seconds).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from neuronfleet.sim.fleet import Fleet
from neuronfleet.sim.metrics import MetricsView
from neuronfleet.sim.policies import Observed, Policy, p90
from neuronfleet.sim.profiles import Profile
from neuronfleet.sim.workload import Workload

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Every policy starts from the same ready fleet and decides only once it has this much metric history.
WARMUP_SECONDS = 60.0
#: Points of the latency CDF kept for plots.
CDF_POINTS = 200


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

    @property
    def slo_attainment(self) -> float:
        return self.within_slo / self.requests if self.requests else 1.0

    @property
    def usd_per_million(self) -> float:
        return self.usd / self.requests * 1e6 if self.requests else 0.0


class Simulation:
    """The state of one run: per-bin series, the fleet, the policy."""

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
        if profile.kind == "batch":
            batches = profile.efficient_batches()
            self._thr = np.array([p.throughput_per_s for p in batches])
            self._lat = np.array([p.latency_ms for p in batches])
            self._size = np.array([float(p.batch) for p in batches])
            self._best = float(self._thr[-1])

    def serve(self, start: int, stop: int, replicas: int, cold: bool) -> None:
        """Advance bins ``[start, stop)`` with ``replicas`` serving."""
        if stop <= start:
            return
        w = self.w
        dt = w.dt
        work = w.work[start:stop]
        q0 = self.queue[start - 1] if start > 0 else 0.0
        per_bin = replicas * dt
        bound = replicas * self.profile.max_queue * w.mean_work
        rejected = np.zeros(stop - start)
        if replicas > 0:
            s = np.cumsum(work - per_bin)
            q = s - np.minimum(np.minimum.accumulate(s), -q0)
            np.maximum(q, 0.0, out=q)
            if q.max() > bound:
                q, rejected = self._bounded(work, q0, per_bin, bound)
        else:
            # No endpoints: new requests are refused; anything queued waits for capacity.
            q = np.full(stop - start, q0)
            rejected = work.copy()
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
        busy = departed / per_bin
        if self.profile.kind == "batch":
            rate = w.count[start:stop] / (dt * replicas)
            index = np.minimum(np.searchsorted(self._thr, rate), len(self._thr) - 1)
            index[q > 1e-12] = len(self._thr) - 1
            size = self._size[index]
            fill = np.where(
                rate > 0, np.minimum(self.profile.max_batch_delay_ms, size / np.maximum(rate, 1e-9) * 1e3), 0
            )
            fill[size == 1] = 0.0
            self.service_ms[start:stop] = self._lat[index] + fill / 2
            throughput = departed / dt * self._best
            self.in_flight[start:stop] = throughput * self._lat[index] / 1e3
            self.utilization[start:stop] = np.minimum(1.0, throughput / (replicas * self._thr[index]))
        else:
            assert self.profile.llm is not None
            self.in_flight[start:stop] = busy * replicas * self.profile.llm.slots
            self.utilization[start:stop] = np.minimum(1.0, busy)

    @staticmethod
    def _bounded(work: FloatArray, q0: float, per_bin: float, bound: float) -> tuple[FloatArray, FloatArray]:
        # Bin by bin: the two-sided reflection has no closed cumulative form (only overloaded segments).
        q = np.empty(len(work))
        rejected = np.zeros(len(work))
        level = q0
        for i, arriving in enumerate(work.tolist()):
            level = level + arriving - per_bin
            if level < 0.0:
                level = 0.0
            if level > bound:
                refused = min(arriving, level - max(bound, 0.0))
                rejected[i] = refused
                level -= refused
            q[i] = level
        return q, rejected

    # ---------------------------------------------------------------------------- latency

    def waits(self) -> FloatArray:
        """Seconds each bin's (midpoint) accepted arrival waits in the FIFO queue (inf: never served)."""
        dt = self.w.dt
        cum_accepted = np.cumsum(self.accepted)
        cum_departed = np.cumsum(self.departed)
        position = cum_accepted - self.accepted / 2
        leave = np.searchsorted(cum_departed, position - 1e-12, side="left")
        served = leave < len(cum_departed)
        leave_c = np.minimum(leave, len(cum_departed) - 1)
        before = np.where(leave_c > 0, cum_departed[np.maximum(leave_c - 1, 0)], 0.0)
        within = np.where(
            self.departed[leave_c] > 0, (position - before) / np.maximum(self.departed[leave_c], 1e-30), 0.5
        )
        leave_time = (leave_c + np.clip(within, 0.0, 1.0)) * dt
        arrive_time = (np.arange(len(position)) + 0.5) * dt
        wait = np.maximum(leave_time - arrive_time, 0.0)
        wait[~served] = np.inf
        return np.asarray(wait, dtype=np.float64)


def _weighted_quantiles(values: FloatArray, weights: FloatArray, qs: FloatArray) -> FloatArray:
    order = np.argsort(values, kind="stable")
    v, cw = values[order], np.cumsum(weights[order])
    if cw[-1] <= 0:
        return np.full(len(qs), np.nan)
    index = np.searchsorted(cw, qs * cw[-1], side="left")
    return np.asarray(v[np.minimum(index, len(v) - 1)], dtype=np.float64)


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
) -> RunResult:
    """Simulate ``policy`` over ``workload``; ``schedule`` (replicas per second) replaces the fleet
    for the clairvoyant oracle: capacity follows it instantly and cost is replica-seconds.

    Only requests arriving from ``measure_from`` on, and cost from then on, are reported: the time
    before is a history pass that lets policies that learn from history (the warm pool) start the
    measured span as they would in steady operation.
    """
    wall = time.perf_counter()
    cpu = time.process_time()
    sim = Simulation(workload, profile)
    dt, bins = workload.dt, workload.bins
    rng = np.random.default_rng(seed)
    fleet = Fleet(profile, rng)
    timeline: dict[str, list[float]] = {k: [] for k in ("t", "serving", "active", "warm", "placeholders", "nodes")}
    last_reason = ""
    replica_seconds = 0.0

    if schedule is not None:
        per_second = max(1, round(1.0 / dt))
        for second, replicas in enumerate(schedule.tolist()):
            start = second * per_second
            if start >= bins:
                break
            sim.serve(start, min(bins, start + per_second), int(replicas), False)
            if second < measure_from:
                continue
            replica_seconds += replicas * min(1.0, (bins - start) * dt)
            for key, value in (("t", float(second)), ("serving", replicas), ("active", replicas)):
                timeline[key].append(float(value))
            for key in ("warm", "placeholders"):
                timeline[key].append(0.0)
            timeline["nodes"].append(replicas / profile.replicas_per_node)
        node_hours = replica_seconds / 3600 / profile.replicas_per_node
        pod_hours = replica_seconds / 3600
    else:
        initial = policy.start_replicas if policy.start_replicas is not None else start_replicas
        fleet.start_ready(initial)
        policy.prime(initial, 0.0)
        now = 0.0
        b = 0
        next_tick = max(policy.interval, WARMUP_SECONDS)
        next_sample = measure_from
        base_node_seconds = base_pod_seconds = 0.0
        cold_measured: tuple[int, int] = (-1, -1)
        cold_p90: tuple[float | None, float | None] = (None, None)
        measuring = measure_from <= 0.0
        while b < bins:
            if not measuring and now >= measure_from - 1e-9:
                fleet.account(now)
                base_node_seconds, base_pod_seconds = fleet.node_seconds, fleet.pod_seconds
                measuring = True
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
                next_sample = now + 5.0
            until = min(next_tick, fleet.next_event(now), measure_from if not measuring else math.inf)
            stop = min(bins, max(b + 1, math.ceil(until / dt - 1e-6)))
            sim.serve(b, stop, counts.serving, counts.starting_active > 0)
            b = stop
            now = b * dt
            fleet.advance(now)
            if now >= next_tick - 1e-9:
                # Cold-start percentiles change only when a new cold start is measured.
                measured = (len(fleet.pod_cold_starts), len(fleet.node_cold_starts))
                if measured != cold_measured:
                    cold_measured, cold_p90 = measured, (p90(fleet.pod_cold_starts), p90(fleet.node_cold_starts))
                observed = Observed(fleet.counts(now), *cold_p90)
                targets = policy.decide(now, sim.view, observed)
                last_reason = targets.reason
                fleet.set_targets(now, targets.active, targets.warm, targets.placeholders)
                next_tick += policy.interval
                if progress is not None:
                    progress(now / (bins * dt))
        fleet.account(bins * dt)
        node_hours = (fleet.node_seconds - base_node_seconds) / 3600
        pod_hours = (fleet.pod_seconds - base_pod_seconds) / 3600

    first = min(bins, math.ceil(measure_from / dt - 1e-9))
    timeline["t"] = [t - measure_from for t in timeline["t"]]
    result = _summarize(sim, workload, profile, policy, node_hours, pod_hours, timeline, last_reason, wall, first)
    result.measured_from = measure_from
    result.sim_cpu_s = time.process_time() - cpu
    return result


def _summarize(
    sim: Simulation,
    workload: Workload,
    profile: Profile,
    policy: Policy,
    node_hours: float,
    pod_hours: float,
    timeline: dict[str, list[float]],
    last_reason: str,
    wall: float,
    first: int = 0,
) -> RunResult:
    wait = sim.waits()
    slo_ms = profile.slo_ms
    # Arrivals before ``first`` belong to the history pass: they weigh nothing.
    count = workload.count.copy()
    count[:first] = 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        reject_share = np.where(workload.work > 0, sim.rejected / workload.work, 0.0)
    qs = np.linspace(0, 1, CDF_POINTS + 1)
    if workload.request_bin is not None and workload.request_latency is not None:
        rb = workload.request_bin
        latency_ms = (wait[rb] + workload.request_latency) * 1e3
        measured = rb >= first
        # The last arrivals of a bin are the ones refused when its queue was full.
        first_of_bin = np.searchsorted(rb, rb, side="left")
        rank = np.arange(len(rb)) - first_of_bin
        refused = (rank >= np.round(workload.count[rb] * (1 - reject_share[rb]))) & measured
        served = ~refused & measured
        ok = served & (latency_ms <= slo_ms)
        finite = served & np.isfinite(latency_ms)
        lat = latency_ms[finite]
        requests = float(measured.sum())
        rejected = float(refused.sum())
        within = float(ok.sum())
        cold_miss = float((~ok & measured & sim.cold[rb]).sum())
        p50, p99, worst = (float(np.quantile(lat, x)) if len(lat) else math.nan for x in (0.5, 0.99, 1.0))
        cdf = np.quantile(lat, qs).tolist() if len(lat) else []
    else:
        latency_ms = wait * 1e3 + sim.service_ms
        rejected_n = count * reject_share
        served_n = count - rejected_n
        ok_n = np.where(latency_ms <= slo_ms, served_n, 0.0)
        requests = float(count.sum())
        rejected = float(rejected_n.sum())
        within = float(ok_n.sum())
        cold_miss = float(((count - ok_n) * sim.cold).sum())
        finite = np.isfinite(latency_ms) & (served_n > 0)
        lat, weights = latency_ms[finite], served_n[finite]
        if len(lat):
            p50, p99, worst = (float(x) for x in _weighted_quantiles(lat, weights, np.array([0.5, 0.99, 1.0])))
            cdf = _weighted_quantiles(lat, weights, qs).tolist()
        else:
            p50 = p99 = worst = math.nan
            cdf = []
    served_total = requests - rejected
    return RunResult(
        policy=policy.name,
        setting=policy.setting,
        requests=requests,
        served=served_total,
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
        cdf_ms=[float(x) for x in cdf],
        last_reason=last_reason,
    )
