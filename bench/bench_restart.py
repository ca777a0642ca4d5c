"""What an operator restart costs the fleet: ours at its defaults, restarted mid-run, with and without its checkpoint.

An operator restarts: a Helm upgrade, a node drained under it, a new leader. Its in-process
memory is lost. Before the autoscaler kept a checkpoint in the status (``status.autoscaler``:
the measured service rate and cold start, the scale-down delay and the day of history it was
learned from), a restarted autoscaler forgot the recommendations its scale-down window held (its
first decision could release them at once) and relearned the delay from minutes of history.

On ``bench_fleet``'s held-out scored spans (same workloads, seed and replica bound), ours at the
CRD's defaults runs three ways:

- ``steady``: no restart (``bench_fleet``'s ``ours_default``);
- ``restart-lost``: restarted with its memory lost (:meth:`Ours.restart` with ``resume=False``);
- ``restart-resumed``: restarted from its last checkpoint and the pool it wanted (:meth:`Ours.restart`,
  the operator's path: :func:`neuronfleet.planning.scaling.take_over`,
  :func:`neuronfleet.planning.warmpool.take_over`).

Both keep the cold starts measured (the simulated fleet's, not the policy's memory), as the operator
keeps them through ``status.coldStart`` (:func:`neuronfleet.planning.coldstart.take_over`).

NASA (the scored week): a restart every day at 04:00, 10:00 or 16:00 trace time (three runs of
each restarting kind). Conv (the scored half hour): one restart 10 minutes in.

Figures per scenario and restart time: attainment and cost against the feasible oracle, and the
change from ``steady``. Traces and attributions as in ``bench_fleet.py``.

    .venv/bin/python bench/bench_restart.py [--jobs N] [--only nasa-14d/superpose,...]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from typing import Any

from bench_fleet import PEAK_REPLICAS, PROFILE, SEED, SLO_TARGET, Scenario, load_traces, scenarios, window
from rich.console import Console
from rich.table import Table

from _common import write_result
from neuronfleet.sim import report, runner
from neuronfleet.sim.metrics import MetricsView
from neuronfleet.sim.policies import DEFAULT_OURS, Observed, Ours, Policy, Targets, ours_from_policy_file
from neuronfleet.sim.profiles import load_profile
from neuronfleet.sim.workload import build, factor_for_peak

HOUR = 3600
DAY = 24 * HOUR
#: Trace hours of the day at which the NASA runs restart the operator, one run per hour.
NASA_RESTART_HOURS = (4, 10, 16)
#: Conv: one restart this long into the scored half.
CONV_RESTART_AFTER_S = 600
KINDS = ("restart-lost", "restart-resumed")


class RestartingOurs(Ours):
    """Ours, with the operator restarted at each of ``restarts`` (seconds of the run)."""

    def __init__(self, base: Ours, restarts: tuple[float, ...], resume: bool) -> None:
        super().__init__(base.scaling_spec, base.warm_spec, base.setting, base.scrape_delay)
        self.restarts = sorted(restarts)
        self.resume = resume
        self.done = 0

    def decide(self, now: float, metrics: MetricsView, observed: Observed) -> Targets:
        while self.done < len(self.restarts) and now >= self.restarts[self.done]:
            self.done += 1
            self.restart(now, observed.counts.active, self.resume)
        return super().decide(now, metrics, observed)


def make_ours(max_replicas: int, label: str, restarts: tuple[float, ...], resume: bool) -> Callable[[], Policy]:
    def make() -> Policy:
        base = ours_from_policy_file(DEFAULT_OURS, max_replicas, label)
        return RestartingOurs(base, restarts, resume) if restarts else base

    return make


def restart_times(scenario: Scenario, measure_from: float, length: float) -> dict[str, tuple[float, ...]]:
    """Per label, the run's restart times (seconds since the run's start)."""
    if scenario.trace == "conv":
        return {f"{CONV_RESTART_AFTER_S // 60} min in": (measure_from + CONV_RESTART_AFTER_S,)}
    start = scenario.tune[0]
    out: dict[str, tuple[float, ...]] = {}
    for hour in NASA_RESTART_HOURS:
        first = math.ceil((start + measure_from - hour * HOUR) / DAY) * DAY + hour * HOUR - start
        out[f"daily {hour:02d}:00"] = tuple(t for t in range(int(first), int(length), DAY))
    return out


def run_scenario(scenario: Scenario, traces: dict[str, Any], jobs: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    profile = load_profile(PROFILE)
    full = traces[scenario.trace]
    factor = factor_for_peak(full, profile, PEAK_REPLICAS)
    # The replica bound as bench_fleet sets it: twice the tuning half's oracle peak.
    tune_w = build(window(full, *scenario.tune), profile, factor, 1.0, SEED, arrivals=scenario.arrivals)
    max_replicas = 2 * runner.run_oracles(tune_w, profile, SEED).peak
    run_w = build(
        window(full, scenario.tune[0], scenario.score[1]), profile, factor, 1.0, SEED, arrivals=scenario.arrivals
    )
    measure_from = scenario.score[0] - scenario.tune[0]
    oracles = runner.run_oracles(run_w, profile, SEED, measure_from)
    schedule: dict[str, tuple[float, ...]] = {"steady": ()}
    for when, times in restart_times(scenario, measure_from, scenario.score[1] - scenario.tune[0]).items():
        for kind in KINDS:
            schedule[f"{kind} {when}"] = times
    todo = [
        runner.Case("ours", label, label == "steady", make_ours(max_replicas, label, times, "resumed" in label))
        for label, times in schedule.items()
    ]
    outcomes = runner.run_cases(run_w, profile, todo, SEED, oracles.start, measure_from=measure_from, jobs=jobs)
    feasible = oracles.feasible.usd_per_million
    rows: list[dict[str, Any]] = []
    for outcome in outcomes:
        result = outcome.result
        rows.append(
            {
                "scenario": scenario.name,
                "run": outcome.case.setting,
                "restarts": len(schedule[outcome.case.setting]),
                "slo_attainment": round(result.slo_attainment, 6),
                "usd_per_million": round(result.usd_per_million, 5),
                "cost_vs_feasible_oracle": round(result.usd_per_million / feasible, 4),
            }
        )
    steady = rows[0]
    figures: dict[str, Any] = {}
    for row in rows:
        key = f"{scenario.name}.{row['run'].replace(' ', '_')}"
        figures[f"{key}.slo_attainment"] = row["slo_attainment"]
        figures[f"{key}.cost_vs_feasible_oracle"] = row["cost_vs_feasible_oracle"]
        if row is not steady:
            figures[f"{key}.attainment_points_vs_steady"] = round(
                100 * (row["slo_attainment"] - steady["slo_attainment"]), 3
            )
            figures[f"{key}.cost_vs_steady"] = round(row["usd_per_million"] / steady["usd_per_million"], 4)
    resumed = [r for r in rows if r["run"].startswith("restart-resumed")]
    lost = [r for r in rows if r["run"].startswith("restart-lost")]
    figures[f"{scenario.name}.resumed_lowest_attainment"] = min(r["slo_attainment"] for r in resumed)
    figures[f"{scenario.name}.lost_lowest_attainment"] = min(r["slo_attainment"] for r in lost)
    figures[f"{scenario.name}.resumed_reaches_99_everywhere"] = all(r["slo_attainment"] >= SLO_TARGET for r in resumed)
    figures[f"{scenario.name}.lost_reaches_99_everywhere"] = all(r["slo_attainment"] >= SLO_TARGET for r in lost)
    return figures, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=runner.default_jobs(), help="parallel simulations")
    parser.add_argument("--only", default="", help="comma-separated scenario names (default: all but replicate)")
    args = parser.parse_args()
    traces = load_traces()
    if traces is None:
        return 2
    console = Console(width=160)
    todo = [
        s
        for s in scenarios(False, math.ceil(traces["conv"].duration), math.ceil(traces["nasa"].duration))
        if s.arrivals != "replicate"
    ]
    if args.only:
        wanted = {name.strip() for name in args.only.split(",")}
        todo = [s for s in todo if s.name in wanted]
    params = {
        "profile": PROFILE,
        "peak_replicas": PEAK_REPLICAS,
        "seed": SEED,
        "slo_target": SLO_TARGET,
        "policy": "ours at the CRD's defaults",
        "nasa_restart_hours": list(NASA_RESTART_HOURS),
        "conv_restart_after_s": CONV_RESTART_AFTER_S,
        "scenarios": [{"name": s.name, "arrivals": s.arrivals, "tune_s": s.tune, "score_s": s.score} for s in todo],
        "trace_attribution": [report.ATTRIBUTION, report.NASA_ATTRIBUTION],
    }
    started = time.perf_counter()
    figures: dict[str, Any] = {}
    cases: list[dict[str, Any]] = []
    for scenario in todo:
        console.print(f"[bold]{scenario.name}[/bold]: scored {scenario.score}")
        scenario_figures, rows = run_scenario(scenario, traces, args.jobs)
        figures.update(scenario_figures)
        cases.extend(rows)
        table = Table("run", "SLO attainment", "x feasible oracle", title=f"{scenario.name}: operator restarts")
        for row in rows:
            table.add_row(row["run"], f"{100 * row['slo_attainment']:.2f} %", f"{row['cost_vs_feasible_oracle']:.3f}")
        console.print(table)
        figures["bench_wall_s"] = round(time.perf_counter() - started, 1)
        write_result("restart", params, figures, cases)
    figures["bench_wall_s"] = round(time.perf_counter() - started, 1)
    path = write_result("restart", params, figures, cases)
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
