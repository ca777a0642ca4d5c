"""``neuronfleet simulate``: replay a request trace through simulated Inf2 fleets under each policy.

Wired into the CLI by :func:`register`. Bad input (trace, profile, policy file, options) ends with
a one-line error and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from neuronfleet.sim import report, runner
from neuronfleet.sim.profiles import BUILTIN, Profile, ProfileError, dump_profile, load_profile
from neuronfleet.sim.trace import Trace, TraceError, load, with_history_pass
from neuronfleet.sim.workload import Workload, build, factor_for_peak

DESCRIPTION = """\
Replay a request trace (CSV: a timestamp column, optional context/generated token columns)
through a simulated Inf2 fleet, once per autoscaling policy, and compare SLO attainment, latency,
rejected requests, replica- and chip-hours and $ per million inferences.

Policies: ours (the operator's scaling + warm-pool code, called as the operator calls it), hpa
(Kubernetes HPA on utilization), keda (Prometheus scaler on queue depth), kpa (Knative), ray (Ray
Serve), static (fixed replicas) and the clairvoyant oracle (knows the future, no cold starts; the
cost floor). Each policy is swept over its main target; the cheapest setting reaching the SLO
target is marked. The trace's rate is scaled by replicating each arrival (with seeded jitter), so
bursts keep their shape and length. Runs are seeded and deterministic.
"""

EPILOG = """\
examples:
  neuronfleet simulate --trace traces/azure-llm-2023-conv.csv
  neuronfleet simulate --trace t.csv --profile llama-2-7b --peak-replicas 20 --policies ours,kpa --no-sweep
  neuronfleet simulate --trace t.csv --policy my-tuning.yaml --out sim-out
  neuronfleet simulate --dump-profile bert-base > my-profile.yaml

A policy file holds an InferenceDeployment's `scaling` and `warmPool` sections (camelCase, as in
the CR; a whole CR with `spec:` works too). A profile file has the fields that --dump-profile prints.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``simulate`` subcommand."""
    p = subparsers.add_parser(
        "simulate",
        help="replay a request trace through simulated Inf2 fleets and compare autoscaling policies",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--trace", metavar="CSV", help="request trace (required unless --dump-profile)")
    p.add_argument(
        "--profile",
        action="append",
        metavar="NAME|FILE",
        help=f"model profile, built-in ({', '.join(BUILTIN)}) or a YAML/JSON file; repeatable (default: bert-base)",
    )
    rate = p.add_mutually_exclusive_group()
    rate.add_argument(
        "--peak-replicas",
        type=float,
        default=50.0,
        metavar="N",
        help="scale the trace so its busiest minute needs N replicas (default: 50)",
    )
    rate.add_argument("--rate-factor", type=float, metavar="K", help="replicate each arrival K times instead")
    p.add_argument(
        "--jitter", type=float, default=1.0, metavar="S", help="copies of an arrival spread over S seconds (default: 1)"
    )
    p.add_argument("--duration", type=float, metavar="S", help="use only the first S seconds of the trace")
    p.add_argument(
        "--history-pass",
        action="store_true",
        help="replay the trace once before the measured pass, so policies that learn from history "
        "(the warm pool) start it as in steady operation",
    )
    p.add_argument(
        "--policies",
        default=",".join(runner.FAMILIES),
        metavar="LIST",
        help=f"comma-separated subset of {','.join(runner.FAMILIES)} (default: all; the oracle always runs)",
    )
    p.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML with the CR's scaling and warmPool sections: one more tuning of ours; repeatable",
    )
    p.add_argument("--no-sweep", action="store_true", help="run each policy at its default setting only")
    p.add_argument(
        "--max-replicas", type=int, metavar="N", help="max replicas for every policy (default: 2 x oracle peak)"
    )
    p.add_argument("--slo-ms", type=float, metavar="MS", help="latency SLO (default: the profile's)")
    p.add_argument(
        "--slo-target", type=float, default=0.99, metavar="F", help="attainment a setting must reach (default: 0.99)"
    )
    p.add_argument("--seed", type=int, default=1, help="random seed (default: 1)")
    p.add_argument(
        "--out", type=Path, default=Path("sim-out"), metavar="DIR", help="output directory (default: sim-out)"
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--dump-profile", metavar="NAME", help="print a built-in profile as YAML and exit")
    p.set_defaults(func=main)


class UsageError(ValueError):
    """Bad options or input files."""


def _policy_file(path: str) -> tuple[str, dict[str, Any]]:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise UsageError(f"{path}: cannot read policy file: {error}") from None
    if isinstance(data, dict) and isinstance(data.get("spec"), dict):
        data = data["spec"]
    if not isinstance(data, dict) or not ({"scaling", "warmPool"} & data.keys()):
        raise UsageError(f"{path}: expected a mapping with `scaling` and/or `warmPool` sections")
    unknown = set(data) - {"scaling", "warmPool"}
    data = {k: v for k, v in data.items() if k not in unknown}
    try:
        runner.cases(["ours"], 10, 1, sweep=False, policy_files=[(Path(path).stem, data)])[-1].make()
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in error.errors())
        raise UsageError(f"{path}: {problems}") from None
    return Path(path).stem, data


def _truncated(trace: Trace, seconds: float) -> Trace:
    keep = trace.arrivals <= seconds
    if not keep.any():
        raise UsageError(f"--duration {seconds:g}: no arrivals in that span")
    return Trace(
        trace.arrivals[keep],
        trace.context_tokens[keep] if trace.context_tokens is not None else None,
        trace.generated_tokens[keep] if trace.generated_tokens is not None else None,
        trace.source,
    )


def _run_with_progress(
    console: Console,
    label: str,
    workload: Workload,
    profile: Profile,
    todo: list[runner.Case],
    seed: int,
    start: int,
    measure_from: float,
) -> list[runner.Outcome]:
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
    )
    outcomes: list[runner.Outcome] = []
    with Progress(*columns, console=console, transient=True) as progress:
        overall = progress.add_task(f"{label}: {len(todo)} runs", total=len(todo))
        current = progress.add_task("", total=1.0)
        for case in todo:
            progress.update(current, description=f"  {case.family} {case.setting}", completed=0.0)
            outcomes += runner.run_cases(
                workload,
                profile,
                [case],
                seed,
                start,
                on_progress=lambda fraction: progress.update(current, completed=fraction),
                measure_from=measure_from,
            )
            progress.advance(overall)
    return outcomes


def main(args: argparse.Namespace) -> int:
    console = Console(width=None if sys.stdout.isatty() else 200)
    err = Console(stderr=True, soft_wrap=True)
    try:
        return _main(args, console)
    except (UsageError, TraceError, ProfileError) as error:
        err.print(f"[red]error:[/red] {error}", highlight=False)
        return 2


def _main(args: argparse.Namespace, console: Console) -> int:
    if args.dump_profile:
        sys.stdout.write(dump_profile(args.dump_profile))
        return 0
    if not args.trace:
        raise UsageError("--trace CSV is required (see --help)")
    families = [f.strip() for f in args.policies.split(",") if f.strip()]
    bad = [f for f in families if f not in runner.FAMILIES]
    if bad:
        raise UsageError(f"unknown policies {bad}; choose from {', '.join(runner.FAMILIES)}")
    for name, value in (("--peak-replicas", args.peak_replicas), ("--rate-factor", args.rate_factor)):
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise UsageError(f"{name} must be a positive number")
    if args.jitter < 0 or not 0 < args.slo_target <= 1:
        raise UsageError("--jitter must be >= 0 and --slo-target in (0, 1]")
    policy_files = [_policy_file(path) for path in args.policy]
    trace = load(args.trace)
    if args.duration:
        trace = _truncated(trace, args.duration)
    profiles = [load_profile(name) for name in (args.profile or ["bert-base"])]

    # The bundled Azure trace is CC-BY 4.0: its attribution goes with every report made from it.
    attribution = report.ATTRIBUTION if "azure" in Path(trace.source).name.lower() else None
    doc: dict[str, Any] = {"trace": trace.source, "attribution": attribution, "profiles": {}, "cases": []}
    for profile in profiles:
        if args.slo_ms:
            profile = profile.model_copy(update={"slo_ms": args.slo_ms})
        factor = args.rate_factor or factor_for_peak(trace, profile, args.peak_replicas)
        console.print(
            f"[bold]{profile.name}[/bold] on {profile.instance_type}: {len(trace):,} trace requests x {factor:.4g} "
            f"(jitter {args.jitter:g} s), SLO {profile.slo_ms:g} ms"
        )
        replayed, measure_from = with_history_pass(trace) if args.history_pass else (trace, 0.0)
        workload = build(replayed, profile, factor, args.jitter, args.seed)
        oracle_result, schedule = runner.run_oracle(workload, profile, args.seed, measure_from)
        max_replicas = args.max_replicas or max(2, 2 * max(schedule))
        todo = runner.cases(families, max_replicas, max(schedule), sweep=not args.no_sweep, policy_files=policy_files)
        start = runner.start_replicas(schedule)
        t0 = time.perf_counter()
        outcomes = _run_with_progress(console, profile.name, workload, profile, todo, args.seed, start, measure_from)
        chosen = runner.best(outcomes, args.slo_target)
        rows = report.records(profile, outcomes, oracle_result, chosen)
        console.print(report.table(f"{profile.name}: all runs", rows, profile.slo_ms, args.slo_target))
        best_rows = [r for r in rows if r["best"]]
        console.print(
            report.table(f"{profile.name}: best setting per policy", best_rows, profile.slo_ms, args.slo_target)
        )
        doc["profiles"][profile.name] = {
            "rate_factor": factor,
            "history_pass": bool(args.history_pass),
            "requests": workload.requests,
            "oracle_peak_replicas": max(schedule),
            "max_replicas": max_replicas,
            "slo_ms": profile.slo_ms,
            "assumptions": profile.assumptions,
            "wall_s": round(time.perf_counter() - t0, 2),
        }
        doc["cases"].extend(rows)
        if not args.no_plots:
            shown = {family: o.result for family, o in chosen.items()}
            shown["oracle"] = oracle_result
            report.plot_timeline(args.out / f"{profile.name}-timeline.png", workload, profile, shown, schedule)
            report.plot_cdf(args.out / f"{profile.name}-latency-cdf.png", profile, shown)
    report.write_json(args.out / "simulate.json", doc)
    console.print(f"wrote {args.out}/simulate.json" + ("" if args.no_plots else " and PNG plots"))
    if attribution:
        console.print(f"[dim]{attribution}[/dim]")
    return 0


def run_cli(argv: list[str] | None = None) -> int:
    """Run ``simulate`` standalone (what ``neuronfleet simulate`` does once the CLI wires it in)."""
    parser = argparse.ArgumentParser(prog="neuronfleet")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(["simulate", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))
