"""`neuronfleet plan`: show where a manifest's replicas would run and what each option costs.

Reads an InferenceDeployment manifest, validates it as the API server would
(:func:`neuronfleet.api.validation.validate_manifest`), runs the placement planner for the pods
the operator would keep (as it plans them): the active replicas (``--replicas``, else the spec's
``replicas``/``minReplicas``), the warm pods (``--warm``, else Fixed ``pods`` or Auto ``minPods``)
and the node placeholders (``--placeholders``, else Fixed ``nodePlaceholders``), and prints one
table row per allowed instance type: replicas per node and what limits it, the nodes all those pods
take, $/h, $ per pod-hour and $ per million inferences at ``--throughput`` requests per second per
active replica ("$/M inf.": warm pods and placeholders cost but do not serve). The chosen row is
marked and the plan's reason printed under the table (for 0 pods: no node and no cost, and the type
a first replica would go on), then a warning
when the chosen placement needs the Neuron scheduler extension and the pods would name no
scheduler (``--neuron-scheduler`` gives the operator's setting). Exit codes:
0 a placement exists, 1 no allowed type fits, 2 the manifest cannot be read or is invalid.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import annotated_types
import yaml
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from neuronfleet.api.v1alpha1 import InferenceDeployment, ScalingSpec, WarmPoolSpec
from neuronfleet.api.validation import load_manifests, not_utf8_message, validate_manifest, yaml_error_message
from neuronfleet.command_flags import add_headroom_flags
from neuronfleet.planning.admission import compile_cpu_limit_problem, serving_cpu_limit_problem
from neuronfleet.planning.placement import (
    UNLESS_OPERATOR_SCHEDULER,
    PlacementPlan,
    QuantityError,
    headroom_from_quantities,
    needs_from_spec,
    plan_placement,
    scheduler_warning,
)

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


class ManifestError(Exception):
    """A manifest that cannot be planned; the message says why."""


def load_manifest(path: str) -> InferenceDeployment:
    """The one InferenceDeployment in ``path``, validated; ManifestError with every problem otherwise."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ManifestError(f"{path}: cannot read: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ManifestError(f"{path}: {not_utf8_message(error)}") from None
    try:
        documents = load_manifests(text)
    except yaml.YAMLError as error:
        raise ManifestError(f"{path}: {yaml_error_message(error)}") from None
    deployments = [doc for doc in documents if isinstance(doc, dict) and doc.get("kind") == "InferenceDeployment"]
    if len(deployments) != 1:
        raise ManifestError(f"{path}: expected one InferenceDeployment document, found {len(deployments)}")
    model, problems = validate_manifest(deployments[0])
    if model is None or problems:
        lines = "\n".join(f"  {problem}" for problem in problems)
        raise ManifestError(f"{path}: invalid InferenceDeployment:\n{lines}")
    return model


def default_active(dep: InferenceDeployment) -> int:
    """Active replicas to plan for: spec.scaling.replicas, else minReplicas."""
    scaling = dep.spec.scaling
    return scaling.replicas if scaling.replicas is not None else scaling.min_replicas


def default_standby(dep: InferenceDeployment) -> tuple[int, int]:
    """Warm pods and node placeholders the operator keeps at least: Fixed's ``pods`` and
    ``nodePlaceholders``; Auto's ``minPods`` and no placeholder (the rest follows measured demand);
    none when Off."""
    pool = dep.spec.warm_pool
    if pool.mode == "Fixed":
        return pool.pods, pool.node_placeholders
    if pool.mode == "Auto":
        return pool.min_pods, 0
    return 0, 0


def plan_table(plan: PlacementPlan, title: str) -> Table:
    """The plan as a rich table, one row per allowed instance type."""
    table = Table(title=title, title_justify="left")
    table.add_column("", no_wrap=True, min_width=1)
    table.add_column("instance type", no_wrap=True)
    for header in ("/node", "limit", "nodes", "$/h", "$/pod-h", "$/M inf."):
        justify: Any = "left" if header == "limit" else "right"
        table.add_column(header, justify=justify, no_wrap=True)
    for candidate in plan.candidates:
        marked = plan.chosen is not None and candidate.name == plan.chosen.name
        if not candidate.fits:
            table.add_row("✗", candidate.name, "0", "-", "-", "-", "-", "-")
            continue
        per_million = candidate.usd_per_million_inferences
        table.add_row(
            "→" if marked else "",
            candidate.name,
            str(candidate.replicas_per_node),
            "cores" if candidate.limited_by == "neuroncores" else candidate.limited_by or "",
            str(candidate.nodes),
            f"{candidate.usd_per_hour:.2f}",
            f"{candidate.usd_per_replica_hour:.3f}" if candidate.replicas else "-",
            f"{per_million:.4g}" if per_million is not None else "-",
            style="bold" if marked else None,
        )
    return table


def _field_maximum(model: type[BaseModel], field: str) -> int:
    """A typed API field's maximum (the CRD is generated from the typed API, so the two cannot drift apart)."""
    for item in model.model_fields[field].metadata:
        if isinstance(item, annotated_types.Le) and isinstance(item.le, int):
            return item.le
    raise AssertionError(f"{model.__name__}.{field} has no upper bound")


def max_replicas_bound() -> int:
    """The most active replicas a spec may ask for: spec.scaling.maxReplicas's maximum."""
    return _field_maximum(ScalingSpec, "max_replicas")


#: Per standby flag: the warm pool fields (Fixed's, Auto's most) whose maxima bound it.
STANDBY_FIELDS = {
    "--warm": (("pods", "pods"), ("max_pods", "maxPods")),
    "--placeholders": (("node_placeholders", "nodePlaceholders"), ("max_node_placeholders", "maxNodePlaceholders")),
}


def max_standby_bound(flag: str) -> int:
    """The most warm pods (``--warm``) or node placeholders (``--placeholders``) a spec may keep: the
    larger maximum of Fixed mode's count and Auto mode's most."""
    return max(_field_maximum(WarmPoolSpec, field) for field, _ in STANDBY_FIELDS[flag])


def _cmd_plan(args: argparse.Namespace) -> int:
    try:
        dep = load_manifest(args.filename)
        needs = needs_from_spec(dep.spec)
    except ManifestError as error:
        err_console.print(f"error: {error}", markup=False)
        return 2
    except QuantityError as error:
        err_console.print(f"error: {args.filename}: {error}", markup=False)
        return 2
    try:
        headroom = headroom_from_quantities(args.daemonset_headroom_cpu, args.daemonset_headroom_memory)
    except QuantityError as error:
        err_console.print(f"error: --daemonset-headroom-cpu/--daemonset-headroom-memory: {error}", markup=False)
        return 2
    for flag, value in (("--replicas", args.replicas), ("--warm", args.warm), ("--placeholders", args.placeholders)):
        if value is not None and value < 0:
            err_console.print(f"error: {flag} must be 0 or more")
            return 2
    # A count no spec can reach priced a fleet the operator never runs (100000 was taken).
    if args.replicas is not None and args.replicas > max_replicas_bound():
        err_console.print(
            f"error: --replicas {args.replicas} is above {max_replicas_bound()}, the most "
            "spec.scaling.maxReplicas allows"
        )
        return 2
    for flag, value in (("--warm", args.warm), ("--placeholders", args.placeholders)):
        if value is not None and value > max_standby_bound(flag):
            (_, fixed), (_, auto) = STANDBY_FIELDS[flag]
            err_console.print(
                f"error: {flag} {value} is above {max_standby_bound(flag)}, the most spec.warmPool.{fixed} and "
                f"{auto} allow"
            )
            return 2
    if args.throughput is not None and not 0 < args.throughput < math.inf:  # nan fails both
        err_console.print("error: --throughput must be a positive, finite number of inferences/s")
        return 2
    active = args.replicas if args.replicas is not None else default_active(dep)
    default_warm, default_placeholders = default_standby(dep)
    warm = args.warm if args.warm is not None else default_warm
    placeholders = args.placeholders if args.placeholders is not None else default_placeholders
    # As the operator plans them: the standby pods take node slots and cost, only the active serve.
    plan = plan_placement(
        needs,
        dep.spec.placement.instance_types,
        active + warm + placeholders,
        serving=active,
        throughput_rps=args.throughput,
        headroom=headroom,
    )
    title = f"{dep.name}: {active} replica(s) of {needs.describe()}"
    if warm or placeholders:
        title += f" + {warm} warm pod(s) + {placeholders} node placeholder(s) of the same size"
    if args.throughput:
        title += f", {args.throughput:g} inferences/s per active replica"
    # The replicas' shares of a node are what is left after this: say it beside the figures.
    title += f"; {headroom.cpu_millis}m CPU and {headroom.memory_mib}Mi per node left for DaemonSets"
    console.print(plan_table(plan, title))
    for candidate in plan.candidates:
        if not candidate.fits:
            console.print(f"✗ {candidate.name} does not fit: {', '.join(candidate.problems)}", markup=False)
    if plan.chosen is None:
        for problem in plan.problems:
            console.print(f"[red]✗[/red] {problem}", markup=True)
        return 1
    if plan.replicas == 0:
        console.print(
            f"chosen: none: 0 pods need no node ($0.00/h); a first replica would go on {plan.chosen.name}",
            markup=False,
        )
    else:
        console.print(f"chosen: {plan.reason}", markup=False)
    problems = [
        problem
        for problem in (
            serving_cpu_limit_problem(dep.spec.runtime, plan.chosen),
            compile_cpu_limit_problem(dep.spec.compile),
        )
        if problem
    ]
    for problem in problems:
        console.print(f"[red]✗[/red] {escape(problem)}", markup=True)
    warning = scheduler_warning(plan, dep.spec.placement.scheduler_name or args.neuron_scheduler)
    if warning:
        # The operator's own setting is known only when given here.
        unless = "" if args.neuron_scheduler else UNLESS_OPERATOR_SCHEDULER
        console.print(f"[yellow]warning:[/yellow] {escape(warning + unless)}")
    return 1 if problems else 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``plan`` to the ``neuronfleet`` command line."""
    parser = subparsers.add_parser(
        "plan",
        help="show the placement of a manifest's replicas on Inf2 and what each instance type costs",
        description="Score every allowed Inf2 instance type for the replica count and mark the cheapest "
        "(on-demand us-east-1 prices). Exit 0: placed; 1: no allowed type fits; 2: bad manifest.",
    )
    parser.add_argument("-f", "--filename", required=True, help="InferenceDeployment manifest (YAML)")
    parser.add_argument(
        "--replicas",
        type=int,
        help=f"active (serving) replicas to place, at most {max_replicas_bound()} (spec.scaling.maxReplicas's "
        "maximum; default: spec.scaling.replicas or minReplicas)",
    )
    parser.add_argument(
        "--warm",
        type=int,
        metavar="N",
        help=f"warm pods placed beside them, at most {max_standby_bound('--warm')} (spec.warmPool.pods's and "
        "maxPods' maximum; default: spec.warmPool.pods in Fixed mode, minPods in Auto, 0 when Off)",
    )
    parser.add_argument(
        "--placeholders",
        type=int,
        metavar="N",
        help=f"node placeholders placed beside them, at most {max_standby_bound('--placeholders')} "
        "(spec.warmPool.nodePlaceholders's and maxNodePlaceholders' maximum; default: "
        "spec.warmPool.nodePlaceholders in Fixed mode, else 0)",
    )
    parser.add_argument(
        "--throughput",
        type=float,
        metavar="RPS",
        help="inferences per second one active replica sustains; fills in $ per million inferences (the "
        "nodes of every pod, over what the active replicas serve)",
    )
    add_headroom_flags(parser)
    parser.add_argument(
        "--neuron-scheduler",
        metavar="NAME",
        help="the operator's --neuron-scheduler (chart: operator.neuronSchedulerName), if it runs with one: "
        "without it, a placement that needs the Neuron scheduler extension (more than one NeuronCore per "
        "replica, not a whole node) and names no spec.placement.schedulerName is warned about",
    )
    parser.set_defaults(func=_cmd_plan)
