"""Comparisons: every policy over one workload, each baseline swept over its main target.

Each policy family has one main target and a grid of settings (geometric, chosen independently of
any trace) that includes the family's documented default:

- ``ours``: ``scaling.targetUtilization`` u with ``targetQueueDepth`` 10 u (default 0.8 and 8, the CR
  defaults; the rest of the CR defaults, warm pool Auto with its bounds opened);
- ``ours-nowarm``: the same with the warm pool Off (what the warm pool adds or costs);
- ``hpa``: target utilization (default 0.5, the Kubernetes HPA walkthrough; HPA has none);
- ``keda``: threshold of queued + in-flight requests per pod (default 8: KEDA has none, so the
  CR's ``targetQueueDepth`` default);
- ``kpa``: target concurrency per pod (default 70 = 100 x 0.7 target utilization);
- ``ray``: ``target_ongoing_requests`` (default 2);
- ``static``: replicas as a share of the oracle's peak (default 1.0: static peak provisioning).

Ours gets exactly the same treatment as the baselines: one swept target, no other tuning. Every
policy runs with the same ``min_replicas`` (1) and ``max_replicas`` and starts from the same ready
fleet. :func:`best` picks, per family, the cheapest setting reaching the SLO target.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from neuronfleet.sim import baselines, engine, oracle
from neuronfleet.sim.policies import DEFAULT_OURS, Policy, Static, ours_from_policy_file
from neuronfleet.sim.profiles import Profile
from neuronfleet.sim.workload import Workload

FAMILIES = ("ours", "ours-nowarm", "hpa", "keda", "kpa", "ray", "static")

GRIDS: dict[str, tuple[float, ...]] = {
    "ours": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    "ours-nowarm": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    "hpa": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    "keda": (4, 8, 16, 32, 64, 128),
    "kpa": (5, 10, 20, 40, 70, 140),
    "ray": (1, 2, 4, 8, 16, 32),
    "static": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
}
#: Ours has two targets (queue depth is primary, utilization the guardrail); its one swept knob moves
#: both in the CR defaults' ratio (8 requests per replica at 0.8), like KPA's target x utilization.
OURS_QUEUE_PER_UTILIZATION = 10.0

DEFAULTS: dict[str, float] = {
    "ours": 0.8,
    "ours-nowarm": 0.8,
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


def _fmt(value: float) -> str:
    return f"{value:g}"


def cases(
    families: Sequence[str],
    max_replicas: int,
    oracle_peak: int,
    sweep: bool = True,
    policy_files: Sequence[tuple[str, dict[str, Any]]] = (),
) -> list[Case]:
    """The cases to run: each family at its default (and its grid with ``sweep``), plus policy files."""
    out: list[Case] = []
    for family in families:
        grid = GRIDS[family] if sweep else (DEFAULTS[family],)
        for value in grid:
            out.append(_case(family, value, value == DEFAULTS[family], max_replicas, oracle_peak))
    for label, data in policy_files:
        out.append(Case("ours", label, False, _from_file(data, max_replicas, label)))
    return out


def _from_file(data: dict[str, Any], max_replicas: int, label: str, family: str = "ours") -> Callable[[], Policy]:
    def make() -> Policy:
        policy = ours_from_policy_file(data, max_replicas, label)
        policy.name = family
        return policy

    return make


def _case(family: str, value: float, default: bool, max_replicas: int, oracle_peak: int) -> Case:
    setting = _fmt(value)
    low = 1
    if family in ("ours", "ours-nowarm"):
        data = {
            "scaling": {
                **DEFAULT_OURS["scaling"],
                "targetUtilization": value,
                "targetQueueDepth": OURS_QUEUE_PER_UTILIZATION * value,
            },
            "warmPool": DEFAULT_OURS["warmPool"] if family == "ours" else {"mode": "Off"},
        }
        return Case(family, setting, default, _from_file(data, max_replicas, setting, family))
    if family == "hpa":
        return Case(family, setting, default, lambda: baselines.Hpa(value, low, max_replicas, setting))
    if family == "keda":
        return Case(family, setting, default, lambda: baselines.Keda(value, low, max_replicas, setting))
    if family == "kpa":
        return Case(family, setting, default, lambda: baselines.Kpa(value, low, max_replicas, setting))
    if family == "ray":
        return Case(family, setting, default, lambda: baselines.RayServe(value, low, max_replicas, setting))
    if family == "static":
        replicas = max(1, math.ceil(oracle_peak * value))
        return Case(family, f"{replicas}={setting}xpeak", default, lambda: Static(replicas, setting))
    raise ValueError(f"unknown policy {family!r}; known: {', '.join(FAMILIES)}")


@dataclass
class Outcome:
    """One case's result with its bookkeeping."""

    case: Case
    result: engine.RunResult


def start_replicas(schedule: Sequence[int], seconds: int = 60) -> int:
    """The common starting fleet: the oracle's largest count in the first minute."""
    return max(1, max(schedule[:seconds]))


def run_cases(
    workload: Workload,
    profile: Profile,
    todo: Sequence[Case],
    seed: int,
    start: int,
    on_done: Callable[[Outcome], None] | None = None,
    on_progress: Callable[[float], None] | None = None,
    measure_from: float = 0.0,
) -> list[Outcome]:
    outcomes = []
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


def run_oracle(
    workload: Workload, profile: Profile, seed: int, measure_from: float = 0.0
) -> tuple[engine.RunResult, list[int]]:
    result, schedule = oracle.run(workload, profile, seed, measure_from)
    return result, [int(x) for x in schedule.tolist()]
