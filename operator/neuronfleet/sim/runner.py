"""Comparisons: every policy over one workload, each baseline swept over its main target.

Each policy family has one main target and a grid of settings (geometric, chosen independently of
any trace) that includes the family's documented default:

- ``ours``: ``scaling.targetUtilization`` u with ``targetQueueDepth`` in the CRD defaults' ratio
  (default: the CRD's own values); everything else at the CRD's defaults, so with the warm pool
  Off, its default mode (``maxReplicas`` is the run's, as for every policy);
- ``ours-warm``: the same with ``warmPool.mode: Auto`` at the CRD's other warm-pool defaults
  (what the Auto warm pool adds or costs);
- ``hpa``: target utilization (default 0.5, the Kubernetes HPA walkthrough; HPA has none);
- ``keda``: threshold of queued + in-flight requests per pod (default 8: KEDA has none, so the
  CR's ``targetQueueDepth`` default);
- ``kpa``: target concurrency per pod (default 70 = 100 x 0.7 target utilization);
- ``ray``: ``target_ongoing_requests`` (default 2);
- ``static``: replicas as a share of the (tuning data's) oracle peak (default 1.0: peak provisioning).

Ours gets exactly the same treatment as the baselines: one swept target, no other tuning. Every
policy runs with the same ``min_replicas`` (1) and ``max_replicas`` and starts from the same ready
fleet. :func:`best` picks, per family, the cheapest setting reaching the SLO target. Each
``--policy`` file is a family of its own, named after the file: it is chosen and scored on its own,
beside ours' sweep, never in its place.

Held-out scoring (:func:`score`): each family is swept and chosen on tuning data, then its chosen
case (static keeps its replica count) runs on scoring data. :func:`monotonicity` says, per family,
whether cost and attainment move monotonically with the swept target.

Runs are independent: :func:`run_cases` runs them in ``jobs`` worker processes (forked, so the
workload is shared, not copied; the 10 ms bins each worker draws are its own, kept within its share
of :data:`~neuronfleet.sim.workload.BLOCK_CACHE_BYTES`); Ctrl-C stops them within 1 % of their runs.
"""

from __future__ import annotations

import math
import multiprocessing
import multiprocessing.synchronize
import os
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuronfleet.api.v1alpha1 import ScalingSpec
from neuronfleet.sim import baselines, engine, oracle
from neuronfleet.sim.policies import Policy, Static, ours_from_policy_file
from neuronfleet.sim.profiles import Profile
from neuronfleet.sim.workload import Workload

FAMILIES = ("ours", "ours-warm", "hpa", "keda", "kpa", "ray", "static")
#: The families that run the operator's own code (ours' maxReplicas limit applies to them).
OURS_FAMILIES = ("ours", "ours-warm")
#: Families a release no longer has, with what to run instead.
RETIRED: dict[str, str] = {
    "ours-nowarm": "it ran the same policy as ours (the CRD's warm pool default is mode Off); "
    "ours-warm runs ours with warmPool mode Auto",
}

GRIDS: dict[str, tuple[float, ...]] = {
    "ours": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    "ours-warm": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    "hpa": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    "keda": (4, 8, 16, 32, 64, 128),
    "kpa": (5, 10, 20, 40, 70, 140),
    "ray": (1, 2, 4, 8, 16, 32),
    "static": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
}
#: What each family's setting is (its swept knob), for the reports' legends.
KNOBS: dict[str, str] = {
    "ours": "scaling.targetUtilization (targetQueueDepth moves with it)",
    "ours-warm": "scaling.targetUtilization, warmPool mode Auto",
    "hpa": "HPA's target average utilization",
    "keda": "KEDA's threshold of queued + in-flight requests per pod",
    "kpa": "KPA's concurrency target per pod (x 0.7 utilization applied)",
    "ray": "Ray Serve's target_ongoing_requests",
    "static": "replicas=share x the oracle's peak",
}
#: A --policy file's case: a family of its own named after the file's stem (tuned, chosen, scored
#: and plotted on its own, never in place of ours' sweep), its setting the file's name.
POLICY_FILE_KNOB = "a --policy file (ours with its scaling and warmPool)"
#: Names a policy file may not take as its family: the built-in families' (a file "hpa.yaml" would
#: read as HPA's row), the retired ones' and the oracles'.
RESERVED_NAMES = (*FAMILIES, *RETIRED, "oracle", "oracle-feasible")
_CRD_SCALING = ScalingSpec()
#: Ours has two targets (the utilization of the measured service rate, and the queue depth that
#: counts as a burst, which also sizes the fleet until the service rate is measured); its one swept
#: knob moves both in the CRD defaults' ratio, like KPA's target x utilization.
OURS_QUEUE_PER_UTILIZATION = _CRD_SCALING.target_queue_depth / _CRD_SCALING.target_utilization

DEFAULTS: dict[str, float] = {
    "ours": _CRD_SCALING.target_utilization,
    "ours-warm": _CRD_SCALING.target_utilization,
    "hpa": 0.5,
    "keda": 8,
    "kpa": 70,
    "ray": 2,
    "static": 1.0,
}


@dataclass(frozen=True)
class Case:
    """One (policy, setting) to run."""

    family: str
    setting: str
    default: bool
    make: Callable[[], Policy]
    #: The swept target's value (NaN for policy files).
    value: float = math.nan

    @property
    def knob(self) -> str:
        """What the setting is (see :data:`KNOBS`)."""
        return KNOBS[self.family] if math.isfinite(self.value) else POLICY_FILE_KNOB


def _fmt(value: float) -> str:
    return f"{value:g}"


def cases(
    families: Sequence[str],
    max_replicas: int,
    oracle_peak: int,
    sweep: bool = True,
    policy_files: Sequence[tuple[str, str, dict[str, Any]]] = (),
) -> list[Case]:
    """The cases to run: each family at its default (and its grid with ``sweep``), plus policy files,
    given as (family, setting, sections): each file is a family of its own (see :data:`POLICY_FILE_KNOB`)."""
    out: list[Case] = []
    for family in families:
        for value in _grid(family, sweep):
            out.append(_case(family, value, value == DEFAULTS[family], max_replicas, oracle_peak))
    for family, setting, data in policy_files:
        out.append(Case(family, setting, False, _from_file(data, max_replicas, setting, family)))
    return out


def _grid(family: str, sweep: bool) -> tuple[float, ...]:
    """The values a family runs at: its grid (with its default) or, without ``sweep``, its default."""
    grid = GRIDS[family] if sweep else (DEFAULTS[family],)
    return grid if DEFAULTS[family] in grid else tuple(sorted((*grid, DEFAULTS[family])))


def policy_file_clashes(labels: Sequence[str]) -> list[tuple[str, str]]:
    """The policy-file family names that are reserved (:data:`RESERVED_NAMES`), case aside (``HPA``
    reads as ``hpa``), each with the reserved name it takes."""
    reserved = {name.casefold(): name for name in RESERVED_NAMES}
    return [(label, reserved[label.casefold()]) for label in labels if label.casefold() in reserved]


def _from_file(data: dict[str, Any], max_replicas: int, label: str, family: str = "ours") -> Callable[[], Policy]:
    def make() -> Policy:
        policy = ours_from_policy_file(data, max_replicas, label)
        policy.name = family
        return policy

    return make


def _case(family: str, value: float, default: bool, max_replicas: int, oracle_peak: int) -> Case:
    setting = _fmt(value)
    low = 1
    if family in OURS_FAMILIES:
        # The CRD's defaults but for the swept target (no simulator-only widening of the warm pool).
        data: dict[str, Any] = {
            "scaling": {"targetUtilization": value, "targetQueueDepth": OURS_QUEUE_PER_UTILIZATION * value},
            "warmPool": {} if family == "ours" else {"mode": "Auto"},
        }
        return Case(family, setting, default, _from_file(data, max_replicas, setting, family), value)
    if family == "hpa":
        return Case(family, setting, default, lambda: baselines.Hpa(value, low, max_replicas, setting), value)
    if family == "keda":
        return Case(family, setting, default, lambda: baselines.Keda(value, low, max_replicas, setting), value)
    if family == "kpa":
        return Case(family, setting, default, lambda: baselines.Kpa(value, low, max_replicas, setting), value)
    if family == "ray":
        return Case(family, setting, default, lambda: baselines.RayServe(value, low, max_replicas, setting), value)
    if family == "static":
        replicas = max(1, math.ceil(oracle_peak * value))
        return Case(family, f"{replicas}={setting}xpeak", default, lambda: Static(replicas, setting), value)
    raise ValueError(f"unknown policy {family!r}; known: {', '.join(FAMILIES)}")


@dataclass
class Outcome:
    """One case's result with its bookkeeping."""

    case: Case
    result: engine.RunResult


def start_replicas(schedule: Sequence[int], seconds: int = 60) -> int:
    """The common starting fleet: the oracle's largest count in the first minute."""
    return max(1, max(schedule[:seconds]))


_FORKED: tuple[Workload, Profile, Sequence[Case], int, int, float] | None = None
#: Set by the parent to stop its workers' runs (inherited by the forked workers).
_STOP: multiprocessing.synchronize.Event | None = None


class Stopped(Exception):
    """A worker's run given up because the parent asked (see :func:`run_cases`)."""


def _stop_if_asked(_fraction: float) -> None:
    """A worker's run's progress callback (called at every 1 % of the simulated span): end the run
    if the parent was interrupted."""
    if _STOP is not None and _STOP.is_set():
        raise Stopped


def _run_one(index: int) -> engine.RunResult:
    assert _FORKED is not None
    workload, profile, todo, seed, start, measure_from = _FORKED
    result = engine.run(
        workload,
        profile,
        todo[index].make(),
        start_replicas=start,
        seed=seed,
        progress=_stop_if_asked,
        measure_from=measure_from,
    )
    result.late_seconds = None  # not needed back in the parent
    return result


def _leave_interrupts_to_the_parent() -> None:
    """A worker's initializer: ignore SIGINT. Ctrl-C signals the terminal's whole process group; a
    worker would return its KeyboardInterrupt as a run's result and take the next run, or die
    between runs with a traceback. The parent, interrupted too, stops the workers' runs itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def default_jobs() -> int:
    """Worker processes: one per CPU this process may use."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def run_cases(
    workload: Workload,
    profile: Profile,
    todo: Sequence[Case],
    seed: int,
    start: int,
    on_done: Callable[[Outcome], None] | None = None,
    on_progress: Callable[[float], None] | None = None,
    measure_from: float = 0.0,
    jobs: int = 1,
) -> list[Outcome]:
    """Run every case; with ``jobs`` > 1 in forked worker processes (results in ``todo``'s order)."""
    global _FORKED, _STOP
    outcomes: list[Outcome] = []
    if jobs > 1 and len(todo) > 1 and "fork" in multiprocessing.get_all_start_methods():
        _FORKED = (workload, profile, todo, seed, start, measure_from)
        context = multiprocessing.get_context("fork")
        # Each worker draws and keeps its own blocks of fine bins: the budget is the run's, shared out.
        budget = workload.block_cache.budget
        workload.block_cache.budget = budget // min(jobs, len(todo))
        _STOP = stop = context.Event()
        pool = ProcessPoolExecutor(
            max_workers=min(jobs, len(todo)), mp_context=context, initializer=_leave_interrupts_to_the_parent
        )
        try:
            # The workers fork at the first submit: SIGINT is held back meanwhile, so that a Ctrl-C
            # before a worker ignores it neither kills that worker (a traceback) nor is lost here.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                futures = {pool.submit(_run_one, index): index for index in range(len(todo))}
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
            # As each finishes (``on_done`` reports progress), returned in ``todo``'s order.
            finished: dict[int, Outcome] = {}
            for future in as_completed(futures):
                case = todo[futures[future]]
                result = future.result()
                result.setting = case.setting
                finished[futures[future]] = outcome = Outcome(case, result)
                if on_done is not None:
                    on_done(outcome)
        except BaseException:
            # Ctrl-C (KeyboardInterrupt) or a failed run: leaving the pool's ``with`` block waited
            # for every queued run (minutes on a long trace) before saying anything. The queued runs
            # are dropped and the running ones end at their next 1 % (a worker ended by a signal
            # instead can die writing its result, and the pool's reader waits for the rest forever).
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        else:
            pool.shutdown()
        finally:
            _FORKED = _STOP = None
            workload.block_cache.budget = budget
        return [finished[index] for index in range(len(todo))]
    for case in todo:
        result = engine.run(
            workload,
            profile,
            case.make(),
            start_replicas=start,
            seed=seed,
            progress=on_progress,
            measure_from=measure_from,
        )
        result.setting = case.setting
        outcome = Outcome(case, result)
        outcomes.append(outcome)
        if on_done is not None:
            on_done(outcome)
    return outcomes


def best(outcomes: Sequence[Outcome], slo_target: float) -> dict[str, Outcome]:
    """Per family: the cheapest setting reaching ``slo_target`` attainment (else the highest attainment)."""
    chosen: dict[str, Outcome] = {}
    for family in dict.fromkeys(o.case.family for o in outcomes):
        mine = [o for o in outcomes if o.case.family == family]
        meeting = [o for o in mine if o.result.slo_attainment >= slo_target]
        if meeting:
            chosen[family] = min(meeting, key=lambda o: o.result.usd)
        else:
            chosen[family] = max(mine, key=lambda o: (o.result.slo_attainment, -o.result.usd))
    return chosen


@dataclass
class Oracles:
    """Both oracles of one workload (see :mod:`neuronfleet.sim.oracle`)."""

    instant: engine.RunResult
    feasible: engine.RunResult
    schedule: list[int]
    feasible_schedule: list[int]

    @property
    def peak(self) -> int:
        return max(self.schedule)

    @property
    def start(self) -> int:
        return start_replicas(self.schedule)


def run_oracle(
    workload: Workload, profile: Profile, seed: int, measure_from: float = 0.0
) -> tuple[engine.RunResult, list[int]]:
    """The instant oracle (lower bound) and its schedule."""
    result, schedule = oracle.run(workload, profile, seed, measure_from)
    return result, [int(x) for x in schedule.tolist()]


def run_oracles(workload: Workload, profile: Profile, seed: int, measure_from: float = 0.0) -> Oracles:
    """The instant oracle, then the feasible one serving its schedule with whole nodes and cold starts."""
    instant, schedule = oracle.run(workload, profile, seed, measure_from)
    # Every policy starts from the same ready fleet at t = 0 (history pass included): so does this one.
    start = start_replicas([int(x) for x in schedule.tolist()])
    feasible, feasible_schedule = oracle.run_feasible(
        workload,
        profile,
        schedule,
        start,
        seed,
        measure_from,
    )
    return Oracles(instant, feasible, [int(x) for x in schedule.tolist()], [int(x) for x in feasible_schedule.tolist()])


def score(
    chosen: dict[str, Outcome],
    workload: Workload,
    profile: Profile,
    seed: int,
    start: int,
    measure_from: float = 0.0,
    jobs: int = 1,
) -> list[Outcome]:
    """Each family's chosen case (chosen on tuning data) run on scoring data."""
    return run_cases(
        workload, profile, [o.case for o in chosen.values()], seed, start, measure_from=measure_from, jobs=jobs
    )


def monotonicity(outcomes: Sequence[Outcome]) -> dict[str, dict[str, bool | None]]:
    """Per swept family: whether cost and attainment are monotonic (either way) in the swept target.

    None when a family has fewer than three settings. Settings within 0.5 % of cost or 0.0005 of
    attainment of each other count as equal (run-to-run noise of a seeded fleet).
    """

    def monotone(values: list[float], tolerance: float) -> bool:
        steps = np.diff(values)
        return bool(np.all(steps <= tolerance) or np.all(steps >= -tolerance))

    out: dict[str, dict[str, bool | None]] = {}
    for family in dict.fromkeys(o.case.family for o in outcomes):
        swept = sorted(
            (o for o in outcomes if o.case.family == family and math.isfinite(o.case.value)), key=lambda o: o.case.value
        )
        if len(swept) < 3:
            out[family] = {"cost": None, "attainment": None}
            continue
        costs = [o.result.usd for o in swept]
        out[family] = {
            "cost": monotone(costs, 0.005 * max(costs)),
            "attainment": monotone([o.result.slo_attainment for o in swept], 0.0005),
        }
    return out
