"""The clairvoyant oracle: knows every future arrival, starts replicas instantly, pays replica-seconds.

Its schedule (replicas per second) is the least capacity whose queue never holds more than one
latency budget of work: with ``L`` = SLO minus the service time (the largest batch latency plus the
batch delay; for an LLM profile the 99th percentile of time to first token), second ``s`` gets
``ceil(max over windows [t, t + L) starting in s of work / L)`` replicas, and at least its own
second's work. It is then run through the same engine; seconds whose requests still miss the SLO
get one more replica, up to :data:`REFINEMENTS` times. The result meets the SLO for (nearly)
every request, so its cost is the lower bound for full attainment (slightly above the least cost
for 99 %), and no cold start, node granularity or decision delay is charged.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from neuronfleet.sim import engine
from neuronfleet.sim.metrics import MetricsView
from neuronfleet.sim.policies import Observed, Targets
from neuronfleet.sim.profiles import Profile
from neuronfleet.sim.workload import Workload

IntArray = npt.NDArray[np.int64]

REFINEMENTS = 3


class Oracle:
    """Marker policy for the engine's schedule mode (it never decides)."""

    name = "oracle"
    setting = "clairvoyant"
    interval = math.inf
    start_replicas: int | None = None

    def prime(self, replicas: int, now: float) -> None:
        return None

    def decide(self, now: float, metrics: MetricsView, observed: Observed) -> Targets:
        raise NotImplementedError("the oracle runs from its schedule")


def _service_allowance(workload: Workload, profile: Profile) -> float:
    if profile.kind == "batch":
        return (max(p.latency_ms for p in profile.efficient_batches()) + profile.max_batch_delay_ms) / 1e3
    assert workload.request_latency is not None
    return float(np.quantile(workload.request_latency, 0.99))


def initial_schedule(workload: Workload, profile: Profile) -> IntArray:
    """Replicas per second from the future arrivals (see the module docstring)."""
    dt = workload.dt
    budget = max(dt, profile.slo_ms / 1e3 - _service_allowance(workload, profile))
    window = max(1, int(budget / dt))
    per_second = max(1, round(1.0 / dt))
    seconds = math.ceil(workload.bins / per_second)
    padded = np.zeros(seconds * per_second + window)
    padded[: workload.bins] = workload.work
    sums = np.convolve(padded, np.ones(window), mode="full")[window - 1 : window - 1 + seconds * per_second]
    need = sums.reshape(seconds, per_second).max(axis=1) / (window * dt)
    own = padded[: seconds * per_second].reshape(seconds, per_second).sum(axis=1)
    replicas = np.ceil(np.maximum(need, own) - 1e-9).astype(np.int64)
    return np.asarray(np.maximum(replicas, 1), dtype=np.int64)


def run(
    workload: Workload, profile: Profile, seed: int, measure_from: float = 0.0
) -> tuple[engine.RunResult, IntArray]:
    """Run the oracle, refining its schedule where requests still miss; returns the result and schedule."""
    schedule = initial_schedule(workload, profile)
    result = engine.run(
        workload, profile, Oracle(), start_replicas=0, seed=seed, schedule=schedule, measure_from=measure_from
    )
    per_second = max(1, round(1.0 / workload.dt))
    for _ in range(REFINEMENTS):
        misses = _miss_seconds(workload, profile, schedule, seed, per_second)
        if not misses.any():
            break
        schedule = schedule + misses.astype(np.int64)
        result = engine.run(
            workload, profile, Oracle(), start_replicas=0, seed=seed, schedule=schedule, measure_from=measure_from
        )
    return result, schedule


def _miss_seconds(
    workload: Workload, profile: Profile, schedule: IntArray, seed: int, per_second: int
) -> npt.NDArray[np.bool_]:
    sim = engine.Simulation(workload, profile)
    for second, replicas in enumerate(schedule.tolist()):
        start = second * per_second
        if start >= workload.bins:
            break
        sim.serve(start, min(workload.bins, start + per_second), int(replicas), False)
    wait = sim.waits()
    if workload.request_bin is not None and workload.request_latency is not None:
        late = np.zeros(workload.bins, dtype=bool)
        bad = (wait[workload.request_bin] + workload.request_latency) * 1e3 > profile.slo_ms
        late[workload.request_bin[bad]] = True
    else:
        late = (wait * 1e3 + sim.service_ms > profile.slo_ms) & (workload.count > 0)
    late |= sim.rejected > 0
    padded = np.zeros(len(schedule) * per_second, dtype=bool)
    padded[: len(late)] = late
    return np.asarray(padded.reshape(len(schedule), per_second).any(axis=1))
