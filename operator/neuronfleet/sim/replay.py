"""Trace replay against a live fleet: the simulator's fluid queue, served by the replicas ready now.

The sandbox demo runs the real operator on the emulated cluster, but no model server runs in its
pods. :class:`ReplayLoad` stands in for the traffic and for Prometheus: it is the simulator's queue
(:class:`neuronfleet.sim.engine.Simulation`, Lindley's recursion on 10 ms bins) fed by a scaled
trace and served, second by second, by however many active pods the cluster reports ready. Its
:meth:`ReplayLoad.snapshot` implements the operator's ``MetricsSource`` protocol with the same
sampling as the simulator's policies see (:meth:`neuronfleet.sim.metrics.MetricsView.snapshot`:
gauges taken ``scrape_delay`` seconds earlier, arrival rate over one minute).

Times: the operator asks with Unix seconds; ``origin`` is the Unix time of replay second 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.planning.rounding import ROUND_OFF, ceil_whole
from neuronfleet.planning.signals import MetricSnapshot
from neuronfleet.sim.engine import Simulation, _weighted_quantiles
from neuronfleet.sim.policies import DEFAULT_SCRAPE_DELAY
from neuronfleet.sim.profiles import BatchPoint, Profile
from neuronfleet.sim.workload import Workload


def per_replica_profile(profile: Profile, neuron_cores_per_replica: int, max_queue: int | None = None) -> Profile:
    """``profile`` for a replica holding ``neuron_cores_per_replica`` NeuronCores.

    Throughput scales with the replica's share of the profile's NeuronCores (bert-base's published
    figures are for a whole inf2.xlarge, 2 NeuronCores, running one replica); latencies stay.
    """
    if profile.kind != "batch" or not profile.batches:
        raise ValueError(f"profile {profile.name!r}: only batch profiles can be split by NeuronCores")
    cores_per_profile_replica = profile.instance.neuroncores / profile.replicas_per_node
    share = neuron_cores_per_replica / cores_per_profile_replica
    batches = [
        BatchPoint(batch=p.batch, throughput_per_s=p.throughput_per_s * share, latency_ms=p.latency_ms)
        for p in profile.batches
    ]
    update: dict[str, object] = {
        "name": f"{profile.name}/{neuron_cores_per_replica}nc",
        "batches": batches,
        "replicas_per_node": max(1, round(profile.replicas_per_node / share)),
    }
    if max_queue is not None:
        update["max_queue"] = max_queue
    return profile.model_copy(update=update)


@dataclass(frozen=True)
class ReplayTotals:
    """Figures of the replay so far (requests that arrived in the replayed span)."""

    requests: float
    served: float
    rejected: float
    within_slo: float
    p50_ms: float
    p99_ms: float

    @property
    def slo_attainment(self) -> float:
        return self.within_slo / self.requests if self.requests else 1.0


class ReplayLoad:
    """The workload's queue, advanced on demand with ``serving()`` replicas; a ``MetricsSource``."""

    def __init__(
        self,
        workload: Workload,
        profile: Profile,
        serving: Callable[[], int],
        *,
        duration: float,
        measure_from: float = 0.0,
        scrape_delay: float = DEFAULT_SCRAPE_DELAY,
    ) -> None:
        self.workload = workload
        self.profile = profile
        self.serving = serving
        self.duration = duration
        #: Replay seconds before which arrivals are a lead-in, left out of :meth:`totals`.
        self.measure_from = measure_from
        self.scrape_delay = scrape_delay
        self.sim = Simulation(workload, profile)
        self.origin: float | None = None
        self._bin = 0
        self._end_bin = min(workload.bins, ceil_whole(duration / workload.dt))

    def start(self, origin: float) -> None:
        """Replay second 0 is ``origin`` (Unix seconds)."""
        self.origin = origin

    def elapsed(self, now: float) -> float:
        """Replay seconds at Unix time ``now`` (0 before the start)."""
        return 0.0 if self.origin is None else max(0.0, now - self.origin)

    @property
    def simulated(self) -> float:
        """Replay seconds already simulated."""
        return self._bin * self.workload.dt

    def advance(self, now: float) -> None:
        """Serve the bins up to ``now`` (Unix seconds) with the replicas serving at this moment.

        Called often (every simulated second): between two calls the serving count is taken as
        constant, as the simulator does between fleet events.
        """
        target = min(self.workload.bins, int(self.elapsed(now) / self.workload.dt + ROUND_OFF))
        if target <= self._bin:
            return
        self.sim.serve(self._bin, target, max(0, self.serving()), False)
        self._bin = target

    async def snapshot(self, dep: InferenceDeployment, now: float) -> tuple[MetricSnapshot | None, str]:
        """The operator's metrics, as Prometheus would return them for the replayed traffic."""
        if self.origin is None:
            # No traffic yet: an idle fleet reports zeros, not an outage.
            return MetricSnapshot(time=now, queue_depth=0.0, in_flight=0.0, arrival_rate=0.0, utilization=0.0), ""
        self.advance(now)
        snap = self.sim.view.snapshot(min(self.elapsed(now), self.simulated), self.scrape_delay, self.serving())
        if snap.queue_depth is None:
            snap = MetricSnapshot(time=snap.time, queue_depth=0.0, in_flight=0.0, arrival_rate=0.0, utilization=0.0)
        return replace(snap, time=self.origin + snap.time), ""

    # ---------------------------------------------------------------------------- read-outs

    def demand(self, at: float, window: float = 5.0) -> float:
        """Arrivals per second over the ``window`` seconds of replay time before ``at``."""
        dt = self.workload.dt
        last = min(self._end_bin, int(at / dt + ROUND_OFF))
        first = max(0, last - max(1, round(window / dt)))
        if last <= first:
            return 0.0
        return float(self.workload.count[first:last].sum()) / ((last - first) * dt)

    def queue_depth(self) -> float:
        """Requests queued at the last simulated bin."""
        return float(self.sim.queue_requests[self._bin - 1]) if self._bin > 0 else 0.0

    def utilization(self) -> float:
        return float(self.sim.utilization[self._bin - 1]) if self._bin > 0 else 0.0

    def totals(self) -> ReplayTotals:
        """Requests, rejections and latency of the arrivals replayed so far (the simulator's method)."""
        stop = min(self._bin, self._end_bin)
        first = min(stop, int(self.measure_from / self.workload.dt + ROUND_OFF))
        count = self.workload.count[first:stop]
        work = self.workload.work[first:stop]
        with np.errstate(invalid="ignore", divide="ignore"):
            reject_share = np.where(work > 0, self.sim.rejected[first:stop] / work, 0.0)
        rejected = count * reject_share
        served = count - rejected
        latency_ms = self.sim.waits()[first:stop] * 1e3 + self.sim.service_ms[first:stop]
        within = np.where(latency_ms <= self.profile.slo_ms, served, 0.0)
        finite = np.isfinite(latency_ms) & (served > 0)
        p50 = p99 = math.nan
        if finite.any():
            p50, p99 = (
                float(x) for x in _weighted_quantiles(latency_ms[finite], served[finite], np.array([0.5, 0.99]))
            )
        return ReplayTotals(
            requests=float(count.sum()),
            served=float(served.sum()),
            rejected=float(rejected.sum()),
            within_slo=float(within.sum()),
            p50_ms=p50,
            p99_ms=p99,
        )
