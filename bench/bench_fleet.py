"""Fleet benchmark: every autoscaling policy on the Azure LLM conversation trace, for both profiles.

Writes bench/results/fleet.json (cases per profile, policy and setting, in the project's shape)
and, with --plots, PNG plots next to it. Each profile's trace is rate-scaled (each arrival
replicated with 1 s of seeded jitter) so that its busiest minute needs 50 replicas; every policy
is swept over its main target (see neuronfleet.sim.runner).

A second set of cases ("+history") replays the trace once before the measured pass for ours,
ours-nowarm and HPA, so the warm pool starts with an hour of demand history as in operation.

Goal figures (not asserted): for each profile, ours reaches >= 99 % SLO attainment at >= 25 % lower
$ per million inferences than every baseline's cheapest setting reaching 99 %, and costs <= 1.5x
the oracle; one policy over the one-hour trace at ~50 replicas simulates in <= 10 s.

Trace: Azure LLM inference trace 2023 (conversation), Microsoft Azure/AzurePublicDataset, CC-BY
4.0; cite Patel et al., "Splitwise: Efficient generative LLM inference using phase splitting",
ISCA 2024.

    .venv/bin/python bench/bench_fleet.py [--trace CSV] [--peak-replicas 50] [--plots]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from _common import RESULTS_DIR, write_result
from neuronfleet.sim import report, runner
from neuronfleet.sim.profiles import load_profile
from neuronfleet.sim.trace import load, with_history_pass
from neuronfleet.sim.workload import Workload, build, factor_for_peak

DEFAULT_TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "azure-llm-2023-conv.csv"
PROFILES = ("bert-base", "llama-2-7b")
BASELINES = ("hpa", "keda", "kpa", "ray", "static")
HISTORY_FAMILIES = ("ours", "ours-nowarm", "hpa")
SLO_TARGET = 0.99
JITTER_SECONDS = 1.0
SEED = 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--peak-replicas", type=float, default=50.0)
    parser.add_argument("--plots", action="store_true", help="also write PNG plots to bench/results/")
    args = parser.parse_args()
    if not args.trace.exists():
        print(f"error: trace {args.trace} not found (pass --trace)", file=sys.stderr)
        return 2
    trace = load(args.trace)
    cases: list[dict[str, Any]] = []
    figures: dict[str, float | int | str | None] = {}
    started = time.perf_counter()
    for name in PROFILES:
        profile = load_profile(name)
        factor = factor_for_peak(trace, profile, args.peak_replicas)
        workload = build(trace, profile, factor, JITTER_SECONDS, SEED)
        oracle_result, schedule = runner.run_oracle(workload, profile, SEED)
        peak = max(schedule)
        todo = runner.cases(runner.FAMILIES, 2 * peak, peak)
        outcomes = runner.run_cases(workload, profile, todo, SEED, runner.start_replicas(schedule))
        chosen = runner.best(outcomes, SLO_TARGET)
        rows = report.records(profile, outcomes, oracle_result, chosen)
        cases.extend(rows)
        figures.update(_goal_figures(name, rows, factor, workload.requests, peak))
        figures[f"{name}.windowed_p99_vs_global_p99"] = round(_windowed_p99_share(workload), 4)
        print(report.ATTRIBUTION)
        Console(width=200).print(
            report.table(f"{name}: best per policy", [r for r in rows if r["best"]], profile.slo_ms, SLO_TARGET)
        )
        # The warm pool learns from history; a one-hour trace starts it with none. Replay the trace
        # once first for the policies where that matters, with HPA as the reference.
        replayed, measure_from = with_history_pass(trace)
        history_workload = build(replayed, profile, factor, JITTER_SECONDS, SEED)
        history_oracle, _ = runner.run_oracle(history_workload, profile, SEED, measure_from)
        history_outcomes = runner.run_cases(
            history_workload,
            profile,
            runner.cases(HISTORY_FAMILIES, 2 * peak, peak),
            SEED,
            runner.start_replicas(schedule),
            measure_from=measure_from,
        )
        history_best = runner.best(history_outcomes, SLO_TARGET)
        for row in report.records(profile, history_outcomes, history_oracle, history_best):
            row["policy"] += "+history"
            row["name"] = f"{name}/{row['policy']}/{row['setting']}"
            cases.append(row)
            if row["best"]:
                figures[f"{name}.history.{row['policy']}.usd_per_million"] = row["usd_per_million"]
                figures[f"{name}.history.{row['policy']}.slo_attainment"] = row["slo_attainment"]
        if args.plots:
            shown = {family: o.result for family, o in chosen.items()}
            shown["oracle"] = oracle_result
            report.plot_timeline(RESULTS_DIR / f"fleet-{name}-timeline.png", workload, profile, shown, schedule)
            report.plot_cdf(RESULTS_DIR / f"fleet-{name}-latency-cdf.png", profile, shown)
    figures["bench_wall_s"] = round(time.perf_counter() - started, 1)
    params = {
        "trace": args.trace.name,
        "trace_attribution": report.ATTRIBUTION,
        "peak_replicas": args.peak_replicas,
        "jitter_s": JITTER_SECONDS,
        "seed": SEED,
        "slo_target": SLO_TARGET,
        "grids": {k: list(v) for k, v in runner.GRIDS.items()},
        "defaults": runner.DEFAULTS,
    }
    path = write_result("fleet", params, figures, cases)
    print(f"wrote {path}")
    for key, value in figures.items():
        print(f"  {key}: {value}")
    return 0


def _windowed_p99_share(workload: Workload, window_s: int = 300) -> float:
    """What even a well-informed autoscaler could save over a static fleet, as a ratio.

    Per second, the replicas that second's work needs; then the mean over time of the 99th
    percentile within the coming ``window_s`` seconds (a policy that knows the next five minutes
    and has no cold start, sized for the p99 second) divided by the 99th percentile over the whole
    trace (a static fleet sized the same way). 1 - this ratio bounds the saving of any windowed
    policy over static provisioning at the same burst coverage.
    """
    per = max(1, round(1.0 / workload.dt))
    seconds = int(workload.duration)
    demand = workload.work[: seconds * per].reshape(seconds, per).sum(axis=1)
    windowed = [np.percentile(demand[i : i + window_s], 99) for i in range(0, seconds, 5)]
    return float(np.mean(windowed) / np.percentile(demand, 99))


def _goal_figures(
    name: str, rows: list[dict[str, Any]], factor: float, requests: float, peak: int
) -> dict[str, float | int | str | None]:
    best = {r["policy"]: r for r in rows if r["best"]}
    ours = best["ours"]
    ours_ok = (ours["slo_attainment"] or 0) >= SLO_TARGET
    meeting = {p: r for p, r in best.items() if p in BASELINES and (r["slo_attainment"] or 0) >= SLO_TARGET}
    cheapest = min(meeting.values(), key=lambda r: r["usd_per_million"]) if meeting else None
    saving = 1 - ours["usd_per_million"] / cheapest["usd_per_million"] if cheapest and ours_ok else None
    default_ours = next(r for r in rows if r["policy"] == "ours" and r["default"])
    walls = [r["sim_wall_s"] for r in rows if r["policy"] != "oracle"]
    cpus = [r["sim_cpu_s"] for r in rows if r["policy"] != "oracle"]
    return {
        f"{name}.rate_factor": round(factor, 2),
        f"{name}.requests": round(requests),
        f"{name}.oracle_peak_replicas": peak,
        f"{name}.ours_best_setting": ours["setting"],
        f"{name}.ours_slo_attainment": ours["slo_attainment"],
        f"{name}.ours_usd_per_million": ours["usd_per_million"],
        f"{name}.ours_cost_vs_oracle": ours["cost_vs_oracle"],
        f"{name}.cheapest_baseline": f"{cheapest['policy']} {cheapest['setting']}" if cheapest else None,
        f"{name}.cheapest_baseline_usd_per_million": cheapest["usd_per_million"] if cheapest else None,
        f"{name}.ours_saving_vs_cheapest_baseline": round(saving, 4) if saving is not None else None,
        f"{name}.goal_saving_25pct_met": int(saving is not None and saving >= 0.25),
        f"{name}.goal_within_1_5x_oracle_met": int(ours_ok and ours["cost_vs_oracle"] <= 1.5),
        f"{name}.ours_default_sim_wall_s": default_ours["sim_wall_s"],
        f"{name}.max_sim_wall_s": max(walls),
        f"{name}.max_sim_cpu_s": max(cpus),
        f"{name}.goal_speed_10s_met": int(max(walls) <= 10.0),
    }


if __name__ == "__main__":
    raise SystemExit(main())
