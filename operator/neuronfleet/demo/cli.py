"""``neuronfleet demo`` (also ``neuronfleet sandbox demo``): the command line of the one-command tour."""

from __future__ import annotations

import argparse
import contextlib
import math
from pathlib import Path
from typing import Any

from rich.console import Console

from neuronfleet.demo.options import (
    DEFAULT_EXAMPLE,
    DEFAULT_TRACE,
    LIVE_MINUTES,
    LIVE_START_MINUTE,
    DemoError,
    DemoOptions,
    DemoStopped,
)
from neuronfleet.demo.orchestration import run_demo
from neuronfleet.demo.outdir import MARKER_NAME
from neuronfleet.demo.report import print_summary
from neuronfleet.sandbox.dirlock import SandboxBusy


def _figure(text: str, *, zero: bool) -> float:
    """A finite number, positive (or >= 0 when ``zero``): argparse's refusal otherwise, in one line."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number {'>= 0' if zero else '> 0'}")
    return value


def positive(text: str) -> float:
    return _figure(text, zero=False)


def non_negative(text: str) -> float:
    return _figure(text, zero=True)


def _cmd_demo(args: argparse.Namespace) -> int:
    console = Console(highlight=False)
    if not console.is_terminal:
        # CI logs: one line per figure rather than rich's default 80 columns.
        console = Console(highlight=False, width=140)
    # soft_wrap: a path in an error stays whole, not cut at the 80th column.
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    live = not args.no_live and console.is_terminal
    real = args.load == "real"
    slice_args: dict[str, float] = {}
    if args.minutes is not None:
        slice_args["live_minutes" if real else "minutes"] = args.minutes
    if args.start_minute is not None:
        slice_args["live_start_minute" if real else "start_minute"] = args.start_minute
    options = DemoOptions(
        load=args.load,
        trace=args.trace,
        speed=args.speed,
        example=args.example,
        out=args.out,
        live=live,
        skip_compile=args.skip_compile,
        peak_replicas=args.peak_replicas,
        lead_in_minutes=args.lead_in,
        seed=args.seed,
        peak_rps=args.peak_rps,
        **slice_args,
    )
    try:
        result = run_demo(options, console)
    except DemoStopped as exc:
        # Stopped by a closed terminal (SIGHUP) perhaps: one that no longer takes writes (EIO).
        with contextlib.suppress(OSError):
            err.print(f"neuronfleet demo: {exc}", markup=False)
        return exc.exit_status
    except DemoError as exc:
        err.print(f"neuronfleet demo: {exc}", markup=False)
        return 1
    except SandboxBusy as exc:
        # Its sandbox keeps its kubeconfig and work files in --out: another run is using them.
        err.print(f"neuronfleet demo: {exc}: stop it, or pass --out elsewhere", markup=False)
        return 1
    print_summary(result, console, options.out)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--load",
        choices=["real", "simulated"],
        default="real",
        help="real (default): an open-loop client sends the trace's requests in real time through the sandbox's "
        "router to real neuronserve processes (emulated NeuronCore device), Prometheus scrapes them and the "
        "operator scales from it; latency is measured at the client. simulated: the simulator's queue stands for "
        "the load and for Prometheus, in compressed time (--speed)",
    )
    parser.add_argument(
        "--trace",
        type=Path,
        default=None,
        help=f"CSV trace to replay (default: the Azure LLM 2023 conversation trace shipped as {DEFAULT_TRACE.name})",
    )
    parser.add_argument(
        "--minutes",
        type=positive,
        default=None,
        help=f"trace minutes to replay from --start-minute, measured (default: {LIVE_MINUTES:g} real, 20 simulated); "
        "a slice that runs past the trace's end is refused (the shipped trace lasts 58.36 min)",
    )
    parser.add_argument(
        "--start-minute",
        type=non_negative,
        default=None,
        help=f"trace minute to start at (default: {LIVE_START_MINUTE:g} real: a rise to the trace's busiest 30 s, "
        "then a lasting drop; 22 simulated: the busiest stretch and the drop after it)",
    )
    parser.add_argument(
        "--peak-rps",
        type=positive,
        default=360.0,
        help="real load: superpose copies of the trace until its busiest 30 s reach this many requests/s "
        "(default: 360, what this 2-core class of machine carries with the fleet)",
    )
    parser.add_argument(
        "--lead-in",
        type=non_negative,
        default=3.0,
        help="simulated load: trace minutes before --start-minute replayed first and not measured (default: 3; "
        "0: the fleet meets the traffic at minReplicas)",
    )
    parser.add_argument(
        "--speed", type=positive, default=10.0, help="simulated load: simulated seconds per wall second (default: 10)"
    )
    parser.add_argument(
        "--example", type=Path, default=DEFAULT_EXAMPLE, help="the InferenceDeployment (default: %(default)s)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("demo-out"),
        help="the demo's directory (default: demo-out). It must be new, empty or an earlier demo's (which the "
        f"demo marks with {MARKER_NAME}); any other is refused before anything is written. The demo writes there, "
        "replacing an earlier demo's: report.md, summary.json, timeline.png, operator.log, kubeconfig (the "
        "sandbox's), artifacts/ (the artifact store, emptied first), sandbox.lock (while it runs), with --load "
        "simulated --skip-compile model-placeholder/, with --load real sandbox/ (pods' and Prometheus' work "
        "files), arrivals.npy, request.json, client.json and client.log (the load generator's); nothing else",
    )
    parser.add_argument(
        "--no-live",
        action="store_true",
        help="print a line per minute instead of the live view (also when stdout is not a terminal)",
    )
    parser.add_argument(
        "--skip-compile",
        action="store_true",
        help="with --load simulated: record a compiled artifact instead of compiling all-MiniLM-L6-v2 on this "
        "CPU (said so on the console); real load serves a real model, so it needs the compile",
    )
    parser.add_argument(
        "--peak-replicas",
        type=positive,
        default=9.0,
        help="simulated load: scale the trace so its busiest minute needs this many replicas at full throughput "
        "(default: 9)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulated load's random draws (default: 0)")
    parser.set_defaults(func=_cmd_demo)


def _sandbox_actions(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> Any:
    """The ``sandbox`` command's sub-commands, if `neuronfleet sandbox` is registered already."""
    sandbox = sub.choices.get("sandbox")
    if sandbox is None or sandbox._subparsers is None:
        return None
    for action in sandbox._subparsers._group_actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``neuronfleet demo`` and, when the sandbox command is there, ``neuronfleet sandbox demo``."""
    description = (
        "A one-command tour: the sandbox cluster with Inf2 node groups, the real operator, the example "
        "InferenceDeployment (compiled for real on CPU), and a public trace replayed as load: by default real "
        "requests in real time to real model servers (emulated NeuronCore device) scraped by Prometheus, or "
        "(--load simulated) the simulator's queue in compressed time; a live view, then a summary and a report "
        "(report.md, timeline.png, summary.json) that says how each figure was obtained."
    )
    add_arguments(sub.add_parser("demo", help="run the sandbox demo (same as `sandbox demo`)", description=description))
    actions = _sandbox_actions(sub)
    if actions is not None and "demo" not in actions.choices:
        add_arguments(actions.add_parser("demo", help="the one-command tour", description=description))
