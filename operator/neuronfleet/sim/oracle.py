"""Two clairvoyant oracles: the instant one (a lower bound, infeasible) and the feasible one.

Both know every future arrival. Like every policy, both are billed from the measured start to the
trace's last arrival, not over the tail simulated after it (:mod:`neuronfleet.sim.engine`).

**Instant oracle** (``oracle``, "lower bound (infeasible)"). Its schedule (replicas per second) is
the least capacity whose queue never holds more than one latency budget of work: with ``L`` = SLO
minus the service time (the largest batch latency plus the batch delay; for an LLM profile the
99th percentile of time to first token), second ``s`` gets ``ceil(max over windows [t, t + L)
starting in s of work / L)`` replicas, and at least its own second's work. It is then run through
the same engine; seconds whose requests still miss the SLO get one more replica, up to
:data:`REFINEMENTS` times. Capacity switches every second, starts instantly and is billed by the
replica-second: no physical fleet can do that, so its cost is a floor no policy can reach.
Workloads kept per second (multi-day traces, see :mod:`neuronfleet.sim.workload`) size each
window from the second's Poisson bins instead, :data:`WINDOW_SIGMAS` standard deviations above
their mean: every wait then stays within the budget by construction, and both oracles' attainment
is reported as 1 without simulating them (the bins a tight schedule would make the engine
refine are nearly every second of a multi-day trace; ``tests/unit/test_sim_oracle.py`` checks
the construction through the engine on a short workload).

**Feasible oracle** (``oracle-feasible``, the headline yardstick). It must serve the instant
oracle's schedule (as whole nodes), but every launch pays the profile's mean cold start ``T``
(node provisioning + scheduling + image pull + runtime init + artifact load + warm-up), billed from
launch, and nodes are billed whole, per second, with EC2's 60 s minimum. Knowing the future, it
launches each node ``T`` before it is needed and keeps a node through an idle gap when that is
cheaper than a relaunch: a gap of ``g`` seconds costs ``g`` node-seconds kept, ``T`` relaunched.

Exactness. The node demand ``D(t)`` splits into levels: level ``l`` is needed while ``D(t) >= l``.
Cost is node-seconds plus ``T`` per launch, and both split over levels, so the optimum is the sum
of each level's optimum (the layered decomposition of offline right-sizing with a uniform
switching cost; Lin et al., "Dynamic right-sizing for power-proportional data centers", 2011):
within a level, each gap between two needed runs is bridged exactly when it is shorter than ``T``.
With ``T`` above 60 s a run is always billed longer than the EC2 minimum, so the minimum never
changes a decision; it is still applied. The nodes running at t = 0 (the common starting fleet
every policy gets) are already launched. So is a node needed sooner than ``T`` after t = 0: no
launch within the replay could serve it, and it is billed from t = 0 without a launch, the terms
on which a static fleet starts (all its nodes ready at t = 0). Billing it from a launch before
t = 0 instead would price capacity no fleet in the replay can have: on a half-hour span of bursty
traffic that oracle cost more than a static fleet meeting the SLO. The serving capacity (bridged
runs included) runs through the engine for its attainment, which is never below the instant
oracle's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from neuronfleet.planning.rounding import ROUND_OFF, ceil_whole
from neuronfleet.sim import engine
from neuronfleet.sim.fleet import MIN_BILLED_SECONDS
from neuronfleet.sim.metrics import MetricsView
from neuronfleet.sim.policies import Observed, Targets
from neuronfleet.sim.profiles import Profile
from neuronfleet.sim.scaledown import ScaleDownBy
from neuronfleet.sim.workload import BLOCK_SECONDS, PER_SECOND, Workload

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

REFINEMENTS = 3
#: Windows of a per-second workload are sized this many standard deviations above their mean.
WINDOW_SIGMAS = 4.0
#: Cold-start phases a launch pays, in order.
LAUNCH_PHASES = ("node", "scheduling", "pull", "init", "load", "warmup")


class Oracle:
    """Marker policy for the engine's schedule mode (it never decides)."""

    interval = math.inf
    start_replicas: int | None = None
    #: Unused: its schedule replaces the fleet.
    scale_down: ScaleDownBy = "operator"
    reads_cold_starts = False

    def __init__(self, name: str = "oracle", setting: str = "clairvoyant") -> None:
        self.name = name
        self.setting = setting

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
    seconds = workload.seconds
    if not workload.materialized:
        return _schedule_from_seconds(workload, window)
    need = np.zeros(seconds)
    # Block by block (a multi-day workload is not held per bin), each block seeing the next bins:
    # as many whole seconds as its last windows reach into (one, unless the budget exceeds a second).
    ahead = max(1, math.ceil(window / PER_SECOND))
    for first in range(0, seconds, BLOCK_SECONDS):
        stop = min(seconds, first + BLOCK_SECONDS)
        work = workload.fine_works(first, min(seconds, stop + ahead))
        padded = np.zeros((stop - first) * PER_SECOND + window)
        padded[: min(len(work), len(padded))] = work[: len(padded)]
        sums = np.convolve(padded, np.ones(window), mode="full")[window - 1 : window - 1 + (stop - first) * PER_SECOND]
        need[first:stop] = sums.reshape(stop - first, PER_SECOND).max(axis=1) / (window * dt)
    return _whole_replicas(np.maximum(need, workload.work_s))


def _schedule_from_seconds(workload: Workload, window: int) -> IntArray:
    per_window = workload.count_s * window / PER_SECOND
    with np.errstate(invalid="ignore", divide="ignore"):
        work_each = np.where(workload.count_s > 0, workload.work_s / workload.count_s, 0.0)
    busiest = (per_window + WINDOW_SIGMAS * np.sqrt(per_window)) * work_each / (window * workload.dt)
    return _whole_replicas(np.maximum(busiest, workload.work_s))


def _whole_replicas(need: FloatArray) -> IntArray:
    """The replicas (at least one) that serve ``need`` replicas of work: a need summed to a whole
    number plus round-off (7.0000000000000036 from 100 bins of 0.07) is that number, not one more."""
    replicas = np.ceil(need - ROUND_OFF).astype(np.int64)
    return np.asarray(np.maximum(replicas, 1), dtype=np.int64)


def _timeline(schedule: IntArray, profile: Profile, step: int = 60) -> dict[str, list[float]]:
    serving = [float(x) for x in schedule[::step]]
    return {
        "t": [float(t) for t in range(0, len(schedule), step)],
        "serving": serving,
        "active": serving,
        "warm": [0.0] * len(serving),
        "placeholders": [0.0] * len(serving),
        "nodes": [math.ceil(x / profile.replicas_per_node) for x in serving],
    }


def by_construction(
    workload: Workload, profile: Profile, schedule: IntArray, measure_from: float, policy: Oracle
) -> engine.RunResult:
    """An oracle's result on a per-second workload, without simulating it (module docstring)."""
    first = ceil_whole(measure_from)
    requests = float(workload.count_s[first:].sum())
    # Billed up to the trace's end, as the engine bills every policy (not the tail after it).
    replica_seconds = float(schedule[first : workload.trace_seconds].sum())
    node_hours = replica_seconds / 3600 / profile.replicas_per_node
    return engine.RunResult(
        policy=policy.name,
        setting=policy.setting,
        requests=requests,
        served=requests,
        rejected=0.0,
        within_slo=requests,
        cold_start_misses=0.0,
        p50_ms=math.nan,
        p99_ms=math.nan,
        max_ms=math.nan,
        replica_hours=replica_seconds / 3600,
        chip_hours=node_hours * profile.instance.chips,
        usd=node_hours * profile.instance.usd_per_hour,
        sim_wall_s=0.0,
        timeline=_timeline(schedule[first : workload.seconds], profile),
        measured_from=float(first),
    )


def run(
    workload: Workload, profile: Profile, seed: int, measure_from: float = 0.0
) -> tuple[engine.RunResult, IntArray]:
    """Run the instant oracle, refining its schedule where requests still miss; returns the result and schedule."""
    schedule = initial_schedule(workload, profile)
    if not workload.materialized:
        return by_construction(workload, profile, schedule, measure_from, Oracle()), schedule
    result = engine.run(
        workload, profile, Oracle(), start_replicas=0, seed=seed, schedule=schedule, measure_from=measure_from
    )
    for _ in range(REFINEMENTS):
        assert result.late_seconds is not None
        misses = result.late_seconds[: len(schedule)]
        if not misses.any():
            break
        schedule = schedule + misses.astype(np.int64)
        result = engine.run(
            workload, profile, Oracle(), start_replicas=0, seed=seed, schedule=schedule, measure_from=measure_from
        )
    return result, schedule


# ---------------------------------------------------------------------------- the feasible oracle


def launch_seconds(profile: Profile) -> float:
    """Mean seconds from a node's launch to its replica serving (every cold-start phase)."""
    return sum(profile.cold_start.dist(phase).mean() for phase in LAUNCH_PHASES)


@dataclass(frozen=True)
class FeasiblePlan:
    """The feasible oracle's nodes per second: serving (incl. bridged gaps) and billed (incl. launching)."""

    serving: IntArray
    billed_node_seconds: float
    launches: int


def feasible_plan(
    demand: IntArray, launch: float, start_nodes: int, first: int = 0, stop: int | None = None
) -> FeasiblePlan:
    """Least-cost nodes meeting ``demand`` (nodes per second), level by level (module docstring).

    Each launch is billed from ``launch`` seconds before its run serves; ``start_nodes`` nodes are
    running at t = 0; only billing from second ``first`` on, and before second ``stop`` (the
    trace's end; default: the demand's), counts. A run that serves sooner than
    ``launch`` after t = 0 could not have been launched within the replay: its node is taken as
    running at t = 0, billed from t = 0 without a launch, as a static fleet's nodes are.
    """
    seconds = len(demand)
    until = float(seconds if stop is None else stop)
    delta = np.zeros(seconds + 1, dtype=np.int64)
    billed = 0.0
    launches = 0
    for level in range(1, int(demand.max(initial=0)) + 1):
        on = np.concatenate(([False], demand >= level, [False]))
        edges = np.flatnonzero(np.diff(on.astype(np.int8)))
        starts, ends = edges[0::2], edges[1::2]
        # Bridge every gap shorter than a relaunch: keeping the node costs less than launching again.
        keep = starts[1:] - ends[:-1] < launch
        run_starts = np.concatenate((starts[:1], starts[1:][~keep]))
        run_ends = np.concatenate((ends[:-1][~keep], ends[-1:]))
        np.add.at(delta, run_starts, 1)
        np.add.at(delta, run_ends, -1)
        running_at_start = level <= start_nodes
        for a, b in zip(run_starts.tolist(), run_ends.tolist(), strict=True):
            already = (running_at_start and a == 0) or a < launch
            launched = 0.0 if already else a - launch
            launches += 0 if already else 1
            end = max(float(b), launched + (0.0 if already else MIN_BILLED_SECONDS))
            billed += max(0.0, min(end, until) - max(launched, float(first)))
    serving = np.cumsum(delta[:-1])
    return FeasiblePlan(np.asarray(serving, dtype=np.int64), billed, launches)


def run_feasible(
    workload: Workload,
    profile: Profile,
    instant_schedule: IntArray,
    start_replicas: int,
    seed: int,
    measure_from: float = 0.0,
) -> tuple[engine.RunResult, IntArray]:
    """The feasible oracle over ``workload``: its result (cost = billed whole nodes) and replicas per second."""
    per_node = profile.replicas_per_node
    demand = -(-instant_schedule // per_node)
    first = ceil_whole(measure_from)
    plan = feasible_plan(demand, launch_seconds(profile), -(-start_replicas // per_node), first, workload.trace_seconds)
    schedule = plan.serving * per_node
    policy = Oracle("oracle-feasible", f"clairvoyant, {launch_seconds(profile):.0f}s launches")
    if workload.materialized:
        result = engine.run(
            workload,
            profile,
            policy,
            start_replicas=0,
            seed=seed,
            schedule=schedule,
            measure_from=measure_from,
            node_schedule=True,
        )
    else:
        result = by_construction(workload, profile, schedule, measure_from, policy)
    node_hours = plan.billed_node_seconds / 3600
    result.chip_hours = node_hours * profile.instance.chips
    result.usd = node_hours * profile.instance.usd_per_hour
    result.replica_hours = node_hours * per_node
    return result, schedule
