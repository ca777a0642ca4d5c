"""``neuronfleet simulate``: replay a request trace through simulated Inf2 fleets under each policy.

Wired into the CLI by :func:`register`. Bad input (trace, profile, policy file, options) ends with
a one-line error and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from neuronfleet.api.crd import openapi_schema
from neuronfleet.api.v1alpha1 import API_VERSION, KIND, MetricQueries, ScalingSpec
from neuronfleet.api.validation import (
    load_manifests,
    not_utf8_message,
    validate_manifest,
    whole_floats_to_int,
    yaml_error_message,
)
from neuronfleet.command_flags import add_headroom_flags
from neuronfleet.planning.fit import fit_problems
from neuronfleet.planning.placement import (
    DAEMONSET_HEADROOM,
    Headroom,
    QuantityError,
    headroom_from_quantities,
)
from neuronfleet.planning.rounding import ceil_whole
from neuronfleet.planning.signals import QUERIED
from neuronfleet.sim import report, runner
from neuronfleet.sim.oracle import launch_seconds
from neuronfleet.sim.policies import DEFAULT_SCRAPE_DELAY, crd_max_replicas
from neuronfleet.sim.profiles import BUILTIN, Profile, ProfileError, dump_profile, load_profile
from neuronfleet.sim.trace import (
    MAX_SPAN_SECONDS,
    TIME_UNITS,
    Trace,
    TraceError,
    describe,
    load,
    unit_note,
    with_history_pass,
)
from neuronfleet.sim.workload import (
    ARRIVALS,
    RATE_MODEL_WINDOW_SECONDS,
    SUPERPOSE_SPREAD_SECONDS,
    Workload,
    build,
    factor_for_peak,
)

DESCRIPTION = """\
Replay a request trace (CSV: a timestamp column, optional context/generated token columns)
through a simulated Inf2 fleet, once per autoscaling policy, and compare SLO attainment, latency,
rejected requests, replica- and chip-hours and $ per million inferences.

Policies: ours (the operator's scaling + warm-pool code at the CRD's defaults, so the warm pool
Off, called as the operator calls it), ours-warm (the same with warmPool mode Auto), hpa
(Kubernetes HPA on utilization), keda (Prometheus scaler on queue depth), kpa (Knative, with its
activator), ray (Ray Serve, with max_ongoing_requests and the router's queue) and static (fixed
replicas). Each is swept over its main target; the cheapest setting
reaching the SLO target is marked. Runs are seeded and deterministic.

Arrivals (--arrivals): a small trace becomes a fleet's traffic at K x its rate (--peak-replicas N
sets K so that the mean work of the trace's busiest minute keeps N replicas 100 % busy at full
batch; meeting the SLO through the bursts within that minute takes more: each run's header prints
the clairvoyant oracle's peak). superpose (default): K independent copies of the trace, each
shifted by a random offset within --superpose-spread seconds and wrapped: K tenants of the same
kind; the daily cycle stays, second-scale noise shrinks as 1/sqrt(K). rate: a Poisson process at
K x the trace's rate over --rate-window seconds: the shape above the window, nothing below.
replicate: every arrival copied K times within --jitter seconds: each request becomes a pulse of
K (perfectly correlated clients), a stress case.

Oracles: both know the future. The feasible oracle (the "x feasible" column, the headline) serves
the SLO with whole nodes, launching each one a full cold start (node + image pull + load) ahead,
billed per second from launch with EC2's 60 s minimum, and keeps a node through a gap when that
is cheaper than relaunching. The instant oracle ("x LB") switches replicas every second with no
cold start and pays replica-seconds: a lower bound no fleet can reach. Both are sized to answer
every request within the SLO, not only the --slo-target share: a policy letting the rest miss
(1 % at the default 0.99) can cost less than the feasible oracle (x feasible below 1). On workloads over about 11 hours
(4 million 10 ms bins, history pass included) the oracles are not simulated: their schedules meet
the SLO by construction, their attainment is reported as 1 and their latencies as "-".

Held-out scoring: --tune-fraction F sweeps every family (static included) on the first F of the
trace, picks each one's cheapest setting reaching the SLO target, and reports that setting on the
rest (replayed after the tuning part, which serves as history); --tune-on A --score-on B tunes on
trace A and scores on trace B. Each span, tuning and scored (or the whole trace, after --duration,
in an in-sample run), must last one cold start of the profile (the sum of its phases' means) and
hold 100 trace requests. Cases carry "phase": "in-sample" (no held-out scoring: chosen and
reported on the same data), else "tune" or "score"; per family the JSON says whether cost and
attainment moved monotonically with its target.
"""

EPILOG = """\
examples:
  neuronfleet simulate --trace ../shared/traces/azure-llm-2023-conv.csv
  neuronfleet simulate --trace ../shared/traces/nasa-http-1995-jul01-14.csv --arrivals rate --tune-fraction 0.5
  neuronfleet simulate --tune-on ../shared/traces/azure-llm-2023-conv.csv \\
      --score-on ../shared/traces/nasa-http-1995-jul01-14.csv
  neuronfleet simulate --trace t.csv --profile llama-2-7b --peak-replicas 20 --policies ours,kpa --no-sweep
  neuronfleet simulate --trace t.csv --policy my-tuning.yaml --out sim-out
  neuronfleet simulate --dump-profile bert-base > my-profile.yaml

The shared traces live in ../shared/traces/ (relative to the repository's root; see the README
there for their sources and licences).

A policy file holds an InferenceDeployment's `scaling` and `warmPool` sections (camelCase, as in
the CR; a whole CR with `spec:` works too), checked as `neuronfleet validate` checks a CR: unknown
keys and the CRD's rules (minReplicas <= maxReplicas, ...) are errors; a whole CR is checked whole
(every section; another kind is refused), its apiVersion, kind and metadata filled in if left
out, and refused, as validate refuses it, when no allowed instance type holds a replica or a CPU
limit is below the pods' request (its fleet cannot exist), beside the DaemonSet allowance of
--daemonset-headroom-cpu/--daemonset-headroom-memory (give the operator's, as to validate; they
judge only that: the simulated nodes hold the profile's replicas_per_node). Fields it sets that
a run does not use (scaling.latencySloMs, scaling.metrics but staleAfterSeconds, a CR's other
sections) are named in a note. A profile file has the fields that --dump-profile prints.
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
    p.add_argument(
        "--trace", metavar="CSV", help="request trace (required unless --dump-profile or --tune-on/--score-on)"
    )
    p.add_argument(
        "--arrivals",
        choices=ARRIVALS,
        default="superpose",
        help="how the trace is scaled up to the fleet: superpose (default), rate or replicate (see above)",
    )
    p.add_argument(
        "--rate-window",
        type=_positive_seconds,
        metavar="S",
        help=f"rate only: window of the rate model's rate estimate (default: {RATE_MODEL_WINDOW_SECONDS:g}); "
        "refused with another --arrivals",
    )
    p.add_argument(
        "--superpose-spread",
        type=_positive_seconds,
        metavar="S",
        help=f"superpose only: copies are shifted by up to S seconds (default: {SUPERPOSE_SPREAD_SECONDS:g}); "
        "refused with another --arrivals",
    )
    held = p.add_mutually_exclusive_group()
    held.add_argument(
        "--tune-fraction",
        type=float,
        metavar="F",
        help="held-out scoring: tune on the first F of the trace, score on the rest (which must last one cold "
        "start of the profile and hold 100 trace requests)",
    )
    held.add_argument("--tune-on", metavar="CSV", help="held-out scoring: tune on this trace (with --score-on)")
    p.add_argument("--score-on", metavar="CSV", help="held-out scoring: report the chosen settings on this trace")
    p.add_argument(
        "--jobs",
        type=int,
        default=runner.default_jobs(),
        metavar="N",
        help="simulations run in parallel (default: the CPUs available)",
    )
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
        help="scale the trace so that the mean work of its busiest minute keeps N replicas 100 %% busy at full "
        "batch (LLM: every slot busy); the SLO needs more at the peak: the header prints the clairvoyant "
        "oracle's (default: 50)",
    )
    rate.add_argument("--rate-factor", type=float, metavar="K", help="scale the trace's rate by K instead")
    p.add_argument(
        "--jitter",
        type=_non_negative_seconds,
        metavar="S",
        help=f"replicate only: copies of an arrival spread over S seconds (default: {JITTER_SECONDS:g}); "
        "refused with another --arrivals",
    )
    p.add_argument(
        "--time-unit",
        choices=TIME_UNITS,
        help="unit of numeric trace times: s (default), ms or us (date-times are read as such); "
        "relative times that read as a sparse multi-day trace in the default get a note",
    )
    p.add_argument("--duration", type=_positive_seconds, metavar="S", help="use only the first S seconds of the trace")
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
        help=f"comma-separated subset of {','.join(runner.FAMILIES)} (default: all; the oracles always run; "
        "empty: only the --policy files)",
    )
    p.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML with the CR's scaling and warmPool sections (or a whole CR): ours at that tuning, a policy "
        "of its own named after the file (my-tuning.yaml: my-tuning), chosen, scored and plotted beside ours' "
        "sweep; a built-in policy's name (ours, hpa, ...) is refused in any case (HPA too); repeatable",
    )
    p.add_argument("--no-sweep", action="store_true", help="run each policy at its default setting only")
    # A --policy file is refused when its replica fits no allowed type beside the operator's DaemonSet
    # allowance: judged at the default alone, a CR the operator runs under the chart's
    # operator.daemonSetHeadroom (and `validate` takes with these flags) was refused here.
    add_headroom_flags(p)
    p.add_argument(
        "--max-replicas",
        type=int,
        metavar="N",
        help=f"max replicas for every built-in policy (default: 2 x oracle peak; ours at most "
        f"{crd_max_replicas()}, the CRD's limit); a --policy file runs with its own scaling.maxReplicas, "
        f"else the CRD's default ({CRD_SCALING_DEFAULTS.max_replicas}), as the operator would",
    )
    p.add_argument("--slo-ms", type=float, metavar="MS", help="latency SLO (default: the profile's)")
    p.add_argument(
        "--slo-target", type=float, default=0.99, metavar="F", help="attainment a setting must reach (default: 0.99)"
    )
    p.add_argument("--seed", type=_non_negative_int, default=1, metavar="N", help="random seed, >= 0 (default: 1)")
    p.add_argument(
        "--out", type=Path, default=Path("sim-out"), metavar="DIR", help="output directory (default: sim-out)"
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--dump-profile", metavar="NAME", help="print a built-in profile as YAML and exit")
    p.set_defaults(func=main)


class UsageError(ValueError):
    """Bad options or input files."""


def _seconds(zero_allowed: bool) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds, above 0 (or at least 0 if ``zero_allowed``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
        if not (math.isfinite(value) and (value >= 0 if zero_allowed else value > 0)):
            wanted = "a number of seconds >= 0" if zero_allowed else "a positive number of seconds"
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text}")
        return value

    return parse


_positive_seconds = _seconds(zero_allowed=False)
_non_negative_seconds = _seconds(zero_allowed=True)


def _non_negative_int(text: str) -> int:
    """An option's value that must be a whole number >= 0 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text}")
    return value


#: The CRD's scaling defaults (a policy file's maxReplicas left out is its default, as in a cluster).
CRD_SCALING_DEFAULTS = ScalingSpec()
#: --arrivals replicate: copies of an arrival spread over this many seconds by default.
JITTER_SECONDS = 1.0
#: The sections of a policy file: an InferenceDeployment's, camelCase as in the CR.
POLICY_SECTIONS = ("scaling", "warmPool")
#: The top-level keys of a whole InferenceDeployment given as a policy file.
RESOURCE_KEYS = ("apiVersion", "kind", "metadata", "spec", "status")


#: Spec fields of a whole CR that the simulator does not take from a policy file, with what governs
#: the same thing in a run instead (fields not listed are not modelled at all).
GOVERNED_ELSEWHERE: dict[str, str] = {
    "scaling.latencySloMs": "--slo-ms, default the profile's slo_ms",
    "model.neuronCoresPerReplica": "the profile's replicas_per_node and service times",
    "model.batchBuckets": "the profile's batches",
    "model.sequenceBuckets": "the profile's batches or llm section",
    "runtime.maxQueue": "the profile's max_queue",
    "runtime.maxBatchDelayMs": "the profile's max_batch_delay_ms",
    "placement.instanceTypes": "the profile's instance_type",
}


#: The one ``scaling.metrics`` field a run uses: the simulated samples are 10 s old at each decision
#: (:data:`~neuronfleet.sim.policies.DEFAULT_SCRAPE_DELAY`), and ``scaling.decide`` drops older ones.
USED_METRICS_FIELDS = ("staleAfterSeconds",)
#: The queries a run models when empty: the signal is turned off, never asked, as in the operator
#: (:func:`~neuronfleet.planning.scaling.as_read`). Any other text is not modelled.
OFF_WHEN_EMPTY = tuple(MetricQueries.model_fields[name].alias or name for name in QUERIED)


def unused_spec_fields(spec: dict[str, Any], where: str = "spec.") -> str:
    """The fields a CR's ``spec`` (or a policy file) sets that a run does not use, as one line ('' if
    none): every field outside ``scaling``/``warmPool``; ``scaling.latencySloMs`` (attainment is
    measured against ``--slo-ms`` or the profile's SLO, so a CR's own would otherwise look applied);
    and ``scaling.metrics`` but its ``staleAfterSeconds`` and its empty queries (the simulator computes
    each signal as the default queries read it: a Prometheus URL or a custom query changes nothing; an
    empty one turns its signal off, as in the operator)."""
    governed, unmodelled = [], []
    for section, value in spec.items():
        if section == "warmPool":
            continue
        for key in value if isinstance(value, dict) else [None]:
            field = section if key is None else f"{section}.{key}"
            if field in GOVERNED_ELSEWHERE:
                governed.append(f"{where}{field} (set by {GOVERNED_ELSEWHERE[field]})")
            elif field == "scaling.metrics":
                queries = value[key] if isinstance(value[key], dict) else {}
                unmodelled += [
                    f"{where}{field}.{name}"
                    for name, query in queries.items()
                    if name not in USED_METRICS_FIELDS
                    and not (name in OFF_WHEN_EMPTY and isinstance(query, str) and not query.strip())
                ]
            elif section != "scaling":
                unmodelled.append(f"{where}{field}")
    parts = [", ".join(governed)] if governed else []
    if unmodelled:
        parts.append("not modelled: " + ", ".join(unmodelled))
    return "; ".join(parts)


def _policy_file(
    path: str, notes: list[str] | None = None, headroom: Headroom = DAEMONSET_HEADROOM
) -> tuple[str, dict[str, Any]]:
    """A policy file's ``scaling`` and ``warmPool`` sections, checked as ``neuronfleet validate``
    checks a CR (schema with unknown fields refused, then the CRD's CEL rules, then whether its
    fleet can exist beside the DaemonSet allowance ``headroom``, ``--daemonset-headroom-cpu/-memory``:
    :func:`~neuronfleet.planning.fit.fit_problems`); UsageError if not.
    A whole CR (``spec`` present) is checked whole, as the API server would check it: an unknown
    field or a broken rule outside the two sections is refused too, and so is another kind.
    For a whole CR, a line naming the spec fields the simulator does not use goes to ``notes``."""
    try:
        # Read as kubectl reads a manifest (a plain 1e3 is a number), so a file `validate` takes runs here.
        documents = load_manifests(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise UsageError(f"{path}: cannot read policy file: {not_utf8_message(error)}") from None
    except OSError as error:
        raise UsageError(f"{path}: cannot read policy file: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise UsageError(f"{path}: cannot read policy file: {yaml_error_message(error)}") from None
    if len(documents) > 1:
        # A manifest with a Namespace beside its InferenceDeployment: the simulator wants the latter.
        documents = [doc for doc in documents if isinstance(doc, dict) and doc.get("kind") == KIND]
        if len(documents) != 1:
            raise UsageError(
                f"{path}: holds several YAML documents and {len(documents)} InferenceDeployments; "
                "a policy file is one mapping of `scaling`/`warmPool`, or holds one InferenceDeployment"
            )
    data = documents[0] if documents else None
    allowed: Collection[str] = POLICY_SECTIONS
    where = ""
    whole = data if isinstance(data, dict) and "spec" in data else None
    if whole is not None:
        # A whole InferenceDeployment: the simulator uses its spec's scaling and warmPool.
        _refuse_unknown(path, whole, RESOURCE_KEYS, "")
        _refuse_other_kind(path, whole)
        data, where = whole["spec"], "spec."
        allowed = tuple(_spec_fields())
        if not isinstance(data, dict):
            raise UsageError(f"{path}: `spec` must be a mapping, got {type(data).__name__}")
    if isinstance(data, dict):
        _refuse_unknown(path, data, allowed, where)
    if not isinstance(data, dict) or not (set(POLICY_SECTIONS) & data.keys()):
        raise UsageError(f"{path}: expected a mapping with `{where}scaling` and/or `{where}warmPool` sections")
    sections: dict[str, Any] = {}
    for name in POLICY_SECTIONS:
        value = data.get(name)
        if value is not None and not isinstance(value, dict):
            raise UsageError(
                f"{path}: `{where}{name}` must be a mapping of its fields "
                f"(e.g. `{name}: {{mode: Auto}}`), got {type(value).__name__} {value!r}"
            )
        # A whole-number float (minReplicas: 2.0, maxReplicas: 1e3) is the integer the API server stores.
        sections[name] = whole_floats_to_int(value or {}, _spec_fields()[name])
    # Run as the operator would run the CR: a maxReplicas left out is the CRD's default (the API
    # server stores it), not the run's --max-replicas or twice the oracle's peak.
    defaulted = "maxReplicas" not in sections["scaling"]
    sections["scaling"].setdefault("maxReplicas", CRD_SCALING_DEFAULTS.max_replicas)
    problems = _cr_problems(whole, headroom) if whole is not None else _policy_problems(sections, headroom)
    if problems:
        default = (
            f" ({where}scaling.maxReplicas is not set: the CRD's default, {CRD_SCALING_DEFAULTS.max_replicas}, applies)"
            if defaulted and any("maxReplicas" in problem for problem in problems)
            else ""
        )
        raise UsageError(f"{path}: " + "; ".join(problems) + default)
    unused = unused_spec_fields(data, where)
    if unused and notes is not None:
        notes.append(f"{path}: fields the simulator does not use: {unused}")
    stale = (sections["scaling"].get("metrics") or {}).get("staleAfterSeconds")
    if isinstance(stale, int | float) and stale <= DEFAULT_SCRAPE_DELAY and notes is not None:
        notes.append(_stale_note(f"{path}: {where}", stale))
    return Path(path).stem, sections


def _stale_note(where: str, stale: float) -> str:
    """What a staleAfterSeconds at or below the modelled sample age does here, and in a cluster."""
    here = (
        "every sample counts as missing at every decision, so the fleet holds its size as with metrics missing"
        if stale < DEFAULT_SCRAPE_DELAY
        else "every sample is just within it"
    )
    return (
        f"{where}scaling.metrics.staleAfterSeconds {stale:g} is at or below the age the simulator gives every "
        f"sample ({DEFAULT_SCRAPE_DELAY:g} s at each decision: a 15 s scrape, half of it on average, plus the "
        f"query): {here}; in a cluster samples are 0-15 s old when read, so the operator would hold (never scale "
        f"down) only while the newest is older than {stale:g} s, and scale on the others"
    )


def _spec_fields() -> dict[str, Any]:
    """The CRD's schema of each spec field, by name."""
    fields: dict[str, Any] = openapi_schema()["properties"]["spec"]["properties"]
    return fields


def _refuse_unknown(path: str, data: dict[Any, Any], allowed: Collection[str], where: str) -> None:
    unknown = [f"`{where}{key}`" for key in data if key not in allowed]
    if unknown:
        raise UsageError(
            f"{path}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
            f"expected {', '.join(f'`{where}{key}`' for key in allowed)}"
        )


def _policy_problems(sections: dict[str, Any], headroom: Headroom) -> list[str]:
    """What ``neuronfleet validate`` says about the sections, in an InferenceDeployment that holds them."""
    scaling = dict(sections["scaling"])
    manifest = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "policy"},
        "spec": {"model": {"source": "s3://policy-file/model/"}, "scaling": scaling, "warmPool": sections["warmPool"]},
    }
    return [problem.removeprefix("spec.") for problem in _manifest_problems(manifest, headroom)]


def _refuse_other_kind(path: str, resource: dict[Any, Any]) -> None:
    """UsageError for a whole object that is not an InferenceDeployment (a Deployment's ``spec`` ran
    as a policy); an apiVersion or kind left out is taken for the InferenceDeployment's."""
    api_version, kind = resource.get("apiVersion", API_VERSION), resource.get("kind", KIND)
    if (api_version, kind) != (API_VERSION, KIND):
        raise UsageError(
            f"{path}: a {kind} ({api_version}), not an {KIND} ({API_VERSION}): a policy file holds an "
            f"{KIND}'s `scaling`/`warmPool` sections, or the whole {KIND}"
        )


def _cr_problems(resource: dict[Any, Any], headroom: Headroom) -> list[str]:
    """What ``neuronfleet validate`` says about a whole InferenceDeployment (its schema, unknown
    fields and CEL rules, every section's, then whether its fleet can exist), with only an
    apiVersion, kind or metadata left out filled in: a policy file may be a CR's spec alone."""
    filled = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "policy"}, **resource}
    return _manifest_problems(filled, headroom)


def _manifest_problems(manifest: dict[str, Any], headroom: Headroom) -> list[str]:
    """A manifest's problems as ``validate`` finds them, each "field.path: message": the API server's
    checks, then, on a manifest that passes them, :func:`fit_problems` (no allowed instance type
    holds a replica, a CPU limit below the pods' request) beside the DaemonSet allowance the
    operator runs with (``headroom``): a run costs a fleet only if the operator could run it. (The
    simulated fleet itself is costed per node from the profile's ``replicas_per_node``, not placed,
    so the allowance judges the fit alone.)"""
    model, problems = validate_manifest(manifest)
    if problems or model is None:
        return [str(problem) for problem in problems]
    return fit_problems(model.spec, headroom)


def _truncated(trace: Trace, seconds: float) -> Trace:
    """The trace's first ``seconds`` (> 0). A loaded trace holds a request and its arrivals count from
    its first one, at 0, so the cut is never empty."""
    keep = trace.arrivals <= seconds
    return replace(
        trace,
        arrivals=trace.arrivals[keep],
        context_tokens=trace.context_tokens[keep] if trace.context_tokens is not None else None,
        generated_tokens=trace.generated_tokens[keep] if trace.generated_tokens is not None else None,
    )


def _note(text: str) -> None:
    """A plain progress line on stderr (stdout not a terminal; see :func:`_run_with_progress`)."""
    print(text, file=sys.stderr, flush=True)


def _oracles(label: str, workload: Workload, profile: Profile, seed: int, measure_from: float) -> runner.Oracles:
    """Both oracles; on a pipe, a line saying when they are done (the first step of every phase)."""
    started = time.perf_counter()
    oracles = runner.run_oracles(workload, profile, seed, measure_from)
    if not sys.stdout.isatty():
        _note(f"{label}: oracles done in {time.perf_counter() - started:.1f} s")
    return oracles


def _run_with_progress(
    console: Console,
    label: str,
    workload: Workload,
    profile: Profile,
    todo: list[runner.Case],
    seed: int,
    start: int,
    measure_from: float,
    jobs: int,
) -> list[runner.Outcome]:
    if not sys.stdout.isatty():
        # Rich draws no progress bar on a pipe or a CI log (and a transient one leaves nothing):
        # one plain line per finished run on stderr shows the run is alive, and what each costs.
        done = 0

        def finished(outcome: runner.Outcome) -> None:
            nonlocal done
            done += 1
            _note(
                f"{label}: run {done}/{len(todo)} done: {outcome.case.family} {outcome.case.setting} "
                f"in {outcome.result.sim_wall_s:.1f} s"
            )

        return runner.run_cases(
            workload, profile, todo, seed, start, on_done=finished, measure_from=measure_from, jobs=jobs
        )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
    )
    outcomes: list[runner.Outcome] = []
    with Progress(*columns, console=console, transient=True) as progress:
        overall = progress.add_task(escape(f"{label}: {len(todo)} runs"), total=len(todo))
        if jobs > 1:
            return runner.run_cases(
                workload,
                profile,
                todo,
                seed,
                start,
                on_done=lambda _: progress.advance(overall),
                measure_from=measure_from,
                jobs=jobs,
            )
        current = progress.add_task("", total=1.0)
        for case in todo:
            progress.update(current, description=escape(f"  {case.family} {case.setting}"), completed=0.0)
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
        # The output directory made by the argument check is not left behind, empty, by an error.
        _remove_empty(getattr(args, "created_out", []))
        err.print(f"[red]error:[/red] {escape(str(error))}", highlight=False)
        return 2
    except KeyboardInterrupt:
        # Nor by Ctrl-C (the CLI says "interrupted" and exits 130); a folder holding some output stays.
        _remove_empty(getattr(args, "created_out", []))
        raise


@dataclass
class Phase:
    """One workload's runs: the tuning sweep or the held-out scoring."""

    name: str
    label: str
    workload: Workload
    oracles: runner.Oracles
    outcomes: list[runner.Outcome]
    chosen: dict[str, runner.Outcome]
    rows: list[dict[str, Any]]
    measure_from: float


def _check(args: argparse.Namespace) -> None:
    if not (args.trace or args.tune_on or args.score_on):
        raise UsageError("--trace CSV is required (see --help)")
    if bool(args.tune_on) != bool(args.score_on):
        raise UsageError("--tune-on and --score-on go together")
    if args.tune_on and args.trace:
        raise UsageError("give either --trace or --tune-on/--score-on")
    if args.tune_fraction is not None and not 0 < args.tune_fraction < 1:
        raise UsageError("--tune-fraction must be between 0 and 1")
    for name, value in (("--peak-replicas", args.peak_replicas), ("--rate-factor", args.rate_factor)):
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise UsageError(f"{name} must be a positive number")
    if args.peak_replicas is not None and args.peak_replicas > crd_max_replicas():
        # Beyond what one InferenceDeployment scales to; and the fleet engine's time grows with it
        # (the rate model materializes nothing that a cap elsewhere would catch).
        raise UsageError(
            f"--peak-replicas {args.peak_replicas:g} is more than an InferenceDeployment scales to "
            f"(maxReplicas at most {crd_max_replicas()}): simulate one deployment's share of the traffic"
        )
    _arrival_options(args)
    if args.jitter > MAX_SPAN_SECONDS:
        raise UsageError(
            f"--jitter {args.jitter:g} s is longer than a trace may span ({MAX_SPAN_SECONDS / 86400:g} days)"
        )
    if not 0 < args.slo_target <= 1:
        raise UsageError(f"--slo-target must be in (0, 1], got {args.slo_target:g}")
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    if args.max_replicas is not None and args.max_replicas < 1:
        raise UsageError(f"--max-replicas must be at least 1, got {args.max_replicas}")
    if args.slo_ms is not None and not (args.slo_ms > 0 and math.isfinite(args.slo_ms)):
        raise UsageError(f"--slo-ms must be a positive number of milliseconds, got {args.slo_ms:g}")
    args.created_out = _output_directory(args.out)


#: Each arrivals model's own option: (option, attribute, its default). An option another model is
#: given changes nothing, so it is refused rather than ignored.
ARRIVAL_OPTIONS: dict[str, tuple[str, str, float]] = {
    "rate": ("--rate-window", "rate_window", RATE_MODEL_WINDOW_SECONDS),
    "superpose": ("--superpose-spread", "superpose_spread", SUPERPOSE_SPREAD_SECONDS),
    "replicate": ("--jitter", "jitter", JITTER_SECONDS),
}


def _arrival_options(args: argparse.Namespace) -> None:
    """UsageError for an option of another arrivals model than ``--arrivals``; then the defaults of
    those left out (None until here, so that a default is never taken for an option given)."""
    for model, (option, attribute, default) in ARRIVAL_OPTIONS.items():
        value = getattr(args, attribute, None)
        if value is not None and model != args.arrivals:
            raise UsageError(
                f"{option} is used by --arrivals {model} only; with --arrivals {args.arrivals} it would change "
                f"nothing: leave it out, or pass --arrivals {model}"
            )
        setattr(args, attribute, default if value is None else value)


def _output_directory(out: Path) -> list[Path]:
    """Make ``--out`` (and its missing parents) and check that files can be written in it, before
    any simulation runs; returns the directories made, outermost first. UsageError if it cannot be."""
    missing = [d for d in (out, *out.parents) if not d.exists()][::-1]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"--out {out}: not a directory") from None
    except OSError as error:
        _remove_empty(missing)
        raise UsageError(f"--out {out}: cannot create the output directory: {error.strerror or error}") from None
    if not out.is_dir():
        raise UsageError(f"--out {out}: not a directory")
    try:
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as error:
        _remove_empty(missing)
        raise UsageError(f"--out {out}: cannot write in the output directory: {error.strerror or error}") from None
    return missing


def _remove_empty(directories: list[Path]) -> None:
    """Remove the directories (innermost first) that are still empty."""
    for directory in reversed(directories):
        try:
            directory.rmdir()
        except OSError:
            return


def _main(args: argparse.Namespace, console: Console) -> int:
    if args.dump_profile:
        sys.stdout.write(dump_profile(args.dump_profile))
        return 0
    _check(args)
    families = [f.strip() for f in args.policies.split(",") if f.strip()]
    retired = [f for f in families if f in runner.RETIRED]
    if retired:
        raise UsageError(f"--policies: {retired[0]} is gone: {runner.RETIRED[retired[0]]}")
    bad = [f for f in families if f not in runner.FAMILIES]
    if bad:
        raise UsageError(f"unknown policies {bad}; choose from {', '.join(runner.FAMILIES)}")
    twice = next((f for i, f in enumerate(families) if f in families[:i]), None)
    if twice is not None:
        # Refused as two --policy files of one name are: `ours,ours` ran ours twice, two rows of one name.
        raise UsageError(
            f"--policies {args.policies!r} names {twice} twice; the outputs (simulate.json entries and plots) are "
            "keyed by a policy's name and each runs once: name it once"
        )
    if not families and not args.policy:
        # Only the oracles would run: a report comparing nothing.
        raise UsageError(
            f"--policies {args.policies!r} names no policy; choose from {', '.join(runner.FAMILIES)} "
            "(or run only --policy files)"
        )
    try:
        headroom = headroom_from_quantities(args.daemonset_headroom_cpu, args.daemonset_headroom_memory)
    except QuantityError as error:
        raise UsageError(f"--daemonset-headroom-cpu/--daemonset-headroom-memory: {error}") from None
    notes: list[str] = []
    policy_files = [_policy_file(path, notes, headroom) for path in args.policy]
    _refuse_duplicate_names(
        [(label, path) for (label, _), path in zip(policy_files, args.policy, strict=True)],
        "--policy",
        "a policy file's run is named after its file name: rename one of the files",
        casefold=True,
    )
    clashes = runner.policy_file_clashes([label for label, _ in policy_files])
    if clashes:
        label, reserved = clashes[0]
        path = args.policy[[name for name, _ in policy_files].index(label)]
        case = "" if label == reserved else f" ({reserved!r}, in another case)"
        # Refused rather than relabelled: a file's run is named after its file, in every table and output.
        raise UsageError(
            f"--policy {path} is named {label!r} (its file name), as a built-in policy or oracle is{case}: its "
            f"rows would read as that one's in the tables and in simulate.json's cases and chosen; rename the file "
            f"(e.g. {Path(path).with_stem('my-' + label).name})"
        )
    for note in notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
    time_unit = args.time_unit or "s"
    trace = load(args.trace or args.tune_on, time_unit)
    score_trace = load(args.score_on, time_unit) if args.score_on else None
    if args.time_unit is None:
        # Before --duration cuts them: the note is about how the file was read.
        unit_notes = [unit_note(read, time_unit) for read in (trace, score_trace) if read is not None]
        for unit_hint in filter(None, unit_notes):
            console.print(f"[yellow]note:[/yellow] {escape(unit_hint)}", highlight=False)
    if args.duration is not None:
        trace = _truncated(trace, args.duration)
        if score_trace is not None:
            score_trace = _truncated(score_trace, args.duration)
    profile_sources = args.profile or ["bert-base"]
    profiles = [load_profile(name) for name in profile_sources]
    _refuse_duplicate_names(
        [(profile.name, source) for profile, source in zip(profiles, profile_sources, strict=True)],
        "--profile",
        "give one of them its own `name` (a dumped and edited profile keeps the built-in one)",
    )
    for read in (trace, score_trace):
        if read is not None and read.columns is not None:
            # Columns are found by name: say which were taken and which not (a "tokens" column
            # is no context size, and was silently ignored).
            console.print(escape(f"columns of {Path(read.source).name}: {read.columns.describe()}"))
    split = 0
    if args.tune_fraction:
        split = math.floor(trace.duration * args.tune_fraction)
        if split < 1:
            raise UsageError(
                f"--tune-fraction {args.tune_fraction:g} of a {_whole_seconds(trace.duration)} trace leaves no "
                "whole second to tune on; use a larger fraction or a longer trace"
            )
    spans = _spans(args, trace, score_trace, split)
    for profile in profiles:
        for span in spans:
            _check_span(span, profile)

    # Public traces carry attributions: they go with every report made from them.
    attributions = [a for a in dict.fromkeys(report.attribution(t.source) for t in (trace, score_trace) if t) if a]
    doc: dict[str, Any] = {
        "trace": trace.source,
        "score_trace": score_trace.source if score_trace else None,
        "attribution": " | ".join(attributions) or None,
        "columns": {
            key: asdict(t.columns) if t is not None and t.columns is not None else None
            for key, t in (("trace", trace), ("score_trace", score_trace))
        },
        "arrivals": args.arrivals,
        "rate_window_s": args.rate_window if args.arrivals == "rate" else None,
        "superpose_spread_s": args.superpose_spread if args.arrivals == "superpose" else None,
        "held_out": (
            {"tune_fraction": args.tune_fraction}
            if args.tune_fraction
            else ({"tune_on": trace.source, "score_on": score_trace.source} if score_trace else None)
        ),
        "profiles": {},
        "cases": [],
    }
    for profile in profiles:
        if args.slo_ms is not None:
            profile = profile.model_copy(update={"slo_ms": args.slo_ms})
        t0 = time.perf_counter()
        factor = args.rate_factor or factor_for_peak(trace, profile, args.peak_replicas)
        # --peak-replicas sizes each trace on its own: a scoring trace gets its own factor.
        score_factor = (
            args.rate_factor or factor_for_peak(score_trace, profile, args.peak_replicas) if score_trace else None
        )
        traces = f"{'tuning trace' if score_trace else 'trace'} {_trace_line(trace, factor)}"
        if score_trace is not None and score_factor is not None:
            traces += f"; scoring trace {_trace_line(score_trace, score_factor)}"
        console.print(
            f"[bold]{escape(profile.name)}[/bold] on {escape(profile.instance_type)}: {escape(traces)}; "
            f"arrivals {args.arrivals}, SLO {profile.slo_ms:g} ms"
        )
        fastest = _fastest_answer(profile)
        if fastest is not None and profile.slo_ms < fastest[0]:
            console.print(
                f"  [yellow]note:[/yellow] {escape(f'SLO {profile.slo_ms:g} ms is below {profile.name}')}'s fastest "
                f"answer ({escape(f'{fastest[0]:g} ms, {fastest[1]}')}): no request can meet it, whatever the fleet",
                highlight=False,
            )
        defaults = [
            note for read in (trace, score_trace) if read is not None for note in _token_defaults(read, profile)
        ]
        for note in defaults:
            console.print(f"  [yellow]note:[/yellow] {escape(note)}")
        tune_trace = _truncated(trace, split - 1e-9) if args.tune_fraction else trace
        held_out = score_trace is not None or bool(args.tune_fraction)
        # Without held-out scoring the sweep is reported on the data it was chosen on: in-sample.
        tune = _phase(
            "tune" if held_out else "in-sample",
            "tuning" if held_out else "",
            tune_trace,
            profile,
            factor,
            args,
            families,
            [(label, Path(path).name, data) for (label, data), path in zip(policy_files, args.policy, strict=True)],
            console,
        )
        phases = [tune]
        if held_out:
            if score_trace is not None and score_factor is not None:
                scored = _score(score_trace, 0.0, tune, profile, score_factor, args, console)
            else:
                scored = _score(trace, float(split), tune, profile, factor, args, console)
            phases.append(scored)
        monotonic = runner.monotonicity(tune.outcomes)
        doc["profiles"][profile.name] = {
            "rate_factor": factor,
            "score_rate_factor": score_factor,
            "history_pass": bool(args.history_pass),
            "requests": _measured_requests(tune),
            "oracle_peak_replicas": tune.oracles.peak,
            # The autoscaling policies' ready fleet at the replay's start (the instant oracle's most in its
            # first minute; static starts with its own), of the tuning phase in a held-out run.
            "start_replicas": tune.oracles.start,
            "slo_ms": profile.slo_ms,
            "assumptions": [*profile.assumptions, *defaults],
            "chosen": {family: o.case.setting for family, o in tune.chosen.items()},
            "monotonic_in_target": monotonic,
            "phases": {
                p.name: {"requests": _measured_requests(p), "measured_from_s": p.measure_from, "label": p.label}
                for p in phases
            },
            "wall_s": round(time.perf_counter() - t0, 2),
        }
        for phase in phases:
            doc["cases"].extend(phase.rows)
        if not args.no_plots:
            shown_phase = phases[-1]
            shown = {o.case.family: o.result for o in shown_phase.chosen.values()}
            shown["oracle-feasible"] = shown_phase.oracles.feasible
            label = "in-sample" if shown_phase.name == "in-sample" else f"{shown_phase.name} phase"
            report.plot_timeline(
                args.out / f"{profile.name}-timeline.png",
                shown_phase.workload,
                profile,
                shown,
                shown_phase.oracles.schedule,
                label,
            )
            report.plot_cdf(
                args.out / f"{profile.name}-latency-cdf.png",
                profile,
                shown,
                args.arrivals,
                label,
            )
    report.write_json(args.out / "simulate.json", doc)
    console.print(escape(f"wrote {args.out}/simulate.json") + ("" if args.no_plots else " and PNG plots"))
    for text in attributions:
        console.print(f"[dim]{escape(text)}[/dim]")
    return 0


#: Trace requests a tuning or scored span must hold: with fewer than 100, one trace request (and the
#: copies the arrivals model makes of it) is more than 1 % of the span, the whole margin of the
#: default 99 % SLO target, so the choice or the verdict would rest on single requests.
MIN_SCORED_REQUESTS = 100


@dataclass(frozen=True)
class Span:
    """A stretch of trace a run tunes on, scores on or measures, and how a user would lengthen it."""

    #: The options that made it ("--trace t.csv cut to --duration 60").
    what: str
    seconds: float
    requests: int
    #: "tune on", "score on", or "measure" for an in-sample run (chosen and reported on one span).
    purpose: str
    #: How the remedy starts: "use", "tune on", "score on".
    verb: str
    #: A remedy besides a longer trace ("a smaller fraction"), named first.
    lever: str = ""
    #: Whether --duration cut it (a longer one is a remedy too).
    cut: bool = False


def _spans(args: argparse.Namespace, trace: Trace, score_trace: Trace | None, split: int) -> list[Span]:
    """The spans a run must find long enough: both sides of a --tune-fraction split (a tuning span
    a moment long picks every family's setting on a few requests, as a scored one would judge it on
    them), both held-out traces, or the whole trace of an in-sample run (a trace of one request
    reached the SLO target and earned a ✓ on a single answer)."""
    cut = args.duration is not None
    after = f" cut to --duration {args.duration:g}" if cut else ""
    if args.tune_fraction:
        what = f"--tune-fraction {args.tune_fraction:g} of a {_whole_seconds(trace.duration)} trace"
        what += f" ({after.strip()})" if cut else ""
        scored = int((trace.arrivals >= split).sum())
        return [
            Span(what, trace.duration - split, scored, "score on", "use", "a smaller fraction", cut),
            Span(what, split, len(trace) - scored, "tune on", "use", "a larger fraction", cut),
        ]
    if score_trace is not None:
        return [
            Span(
                f"--score-on {score_trace.source}{after}",
                score_trace.duration,
                len(score_trace),
                "score on",
                "score on",
                cut=cut,
            ),
            Span(f"--tune-on {trace.source}{after}", trace.duration, len(trace), "tune on", "tune on", cut=cut),
        ]
    return [Span(f"--trace {trace.source}{after}", trace.duration, len(trace), "measure", "use", cut=cut)]


def _whole_seconds(seconds: float) -> str:
    """Seconds rounded down, with thousands separators: a span just short of a bound never reads as
    reaching it."""
    if 0 < seconds < 1:
        return "under 1 s"
    return f"{math.floor(seconds):,} s"


def _check_span(span: Span, profile: Profile) -> None:
    """UsageError if ``span`` is too short: shorter than one of ``profile``'s cold starts (no scale-up
    decided within it serves in it: only the starting fleet would be measured), or holding fewer
    than :data:`MIN_SCORED_REQUESTS` trace requests. The message names the limit missed."""
    # The sum of the phases' means, to the hundredth of a second the message prints: the bound
    # printed is the bound compared.
    cold_start = round(launch_seconds(profile), 2)
    short = span.seconds < cold_start
    few = span.requests < MIN_SCORED_REQUESTS
    if not (short or few):
        return
    kind = {"tune on": "tuning", "score on": "scored"}.get(span.purpose, "measured")
    needs = []
    if short:
        needs.append(f"last at least one cold start of {profile.name} ({cold_start:,.2f} s)")
    if few:
        needs.append(f"hold at least {MIN_SCORED_REQUESTS} trace requests")
    longer = {(True, False): "a longer trace", (False, True): "a trace with more requests"}.get(
        (short, few), "a longer trace with more requests"
    )
    remedies = [r for r in (span.lever, longer, "a longer --duration" if span.cut else "") if r]
    remedy = " or ".join([", ".join(remedies[:-1]), remedies[-1]] if len(remedies) > 1 else remedies)
    raise UsageError(
        f"{span.what} leaves {_whole_seconds(span.seconds)} and {span.requests:,} trace "
        f"request{'s' if span.requests != 1 else ''} to {span.purpose}; a {kind} span must {' and '.join(needs)}: "
        f"{span.verb} {remedy}"
    )


def _refuse_duplicate_names(named: list[tuple[str, str]], option: str, remedy: str, casefold: bool = False) -> None:
    """UsageError when two sources (files or built-in names) give the same name: outputs are keyed by
    it (simulate.json's entries, the PNGs' file names), so one would overwrite the other's. With
    ``casefold``, names differing only in case too (policy files, whose rows would be told apart by
    case alone)."""
    seen: dict[str, tuple[str, str]] = {}
    for name, source in named:
        key = name.casefold() if casefold else name
        if key in seen:
            first, first_source = seen[key]
            if first == name:
                raise UsageError(
                    f"{option} {first_source} and {option} {source} are both named {name!r}; the outputs "
                    f"(simulate.json entries and plots) are keyed by that name and would overwrite each other: {remedy}"
                )
            raise UsageError(
                f"{option} {first_source} and {option} {source} are named {first!r} and {name!r}, which differ only "
                f"in case: their rows in the tables and in simulate.json would be told apart by case alone: {remedy}"
            )
        seen[key] = (name, source)


def _token_defaults(trace: Trace, profile: Profile) -> list[str]:
    """For an LLM profile, the token counts its defaults stand in for because the trace has none."""
    if profile.llm is None:
        return []
    notes = []
    for counts, what, default in (
        (trace.context_tokens, "context", profile.llm.default_context_tokens),
        (trace.generated_tokens, "output", profile.llm.default_generated_tokens),
    ):
        if counts is None:
            notes.append(
                f"{Path(trace.source).name} has no {what}-token column: every request takes "
                f"{profile.name}'s default of {default:,g} {what} tokens"
            )
    return notes


def _trace_line(trace: Trace, factor: float) -> str:
    """A trace's name, what it holds and the factor its rate is scaled by, for the header."""
    return f"{Path(trace.source).name}: {describe(trace)}, x {factor:.4g}"


def _measured_requests(phase: Phase) -> float:
    """Requests of the phase's measured span (its workload also holds the history before it)."""
    first = ceil_whole(phase.measure_from)
    return float(phase.workload.count_s[first:].sum())


def _build(trace: Trace, profile: Profile, factor: float, args: argparse.Namespace) -> Workload:
    try:
        return build(
            trace,
            profile,
            factor,
            args.jitter,
            args.seed,
            arrivals=args.arrivals,
            rate_window=args.rate_window,
            spread=args.superpose_spread,
        )
    except ValueError as error:
        raise UsageError(str(error)) from None


def _phase(
    name: str,
    label: str,
    trace: Trace,
    profile: Profile,
    factor: float,
    args: argparse.Namespace,
    families: list[str],
    policy_files: list[tuple[str, str, dict[str, Any]]],
    console: Console,
) -> Phase:
    replayed, measure_from = with_history_pass(trace) if args.history_pass else (trace, 0.0)
    workload = _build(replayed, profile, factor, args)
    title = f"{profile.name} {args.arrivals}{f' ({label})' if label else ''}"
    oracles = _oracles(title, workload, profile, args.seed, measure_from)
    console.print(_scale_line(args, oracles.peak, label))
    _print_out_of_reach(console, oracles, profile, args.slo_target)
    autoscaled = [family for family in families if family != "static"] + [label for label, _, _ in policy_files]
    if name == "in-sample" and not measure_from and autoscaled:
        learns = bool(policy_files) or bool(set(runner.OURS_FAMILIES) & set(families))
        _print_cold_start_note(console, oracles.start, profile, learns)
    max_replicas = args.max_replicas or max(2, 2 * oracles.peak)
    if max_replicas > crd_max_replicas() and set(runner.OURS_FAMILIES) & set(families):
        console.print(
            f"[yellow]note:[/yellow] ours' maxReplicas defaults to {crd_max_replicas()} (the CRD's limit); "
            f"the other policies run with {max_replicas}"
        )
    todo = runner.cases(families, max_replicas, oracles.peak, sweep=not args.no_sweep, policy_files=policy_files)
    outcomes = _run_with_progress(
        console, title, workload, profile, todo, args.seed, oracles.start, measure_from, args.jobs
    )
    _print_run_notes(console, outcomes, label)
    chosen = runner.best(outcomes, args.slo_target)
    rows = report.records(profile, outcomes, oracles, chosen, name, args.arrivals)
    best_rows = [r for r in rows if r["best"]]
    if len(best_rows) == len(rows):
        # One run per policy (--no-sweep): the best settings are all the runs, one table says it.
        console.print(report.table(f"{title}: one setting per policy", rows, profile.slo_ms, args.slo_target))
    else:
        console.print(report.table(f"{title}: all runs", rows, profile.slo_ms, args.slo_target))
        console.print(report.table(f"{title}: best setting per policy", best_rows, profile.slo_ms, args.slo_target))
    return Phase(name, label, workload, oracles, outcomes, chosen, rows, measure_from)


def _fastest_answer(profile: Profile) -> tuple[float, str] | None:
    """The shortest latency ``profile`` can answer in, and what it is (None if it has none above 0)."""
    if profile.batches:
        point = min(profile.batches, key=lambda p: p.latency_ms)
        return point.latency_ms, f"its batch of {point.batch}"
    if profile.llm is not None and profile.llm.ttft_ms > 0:
        return profile.llm.ttft_ms, "its time to first token before any prompt token"
    return None


def _print_out_of_reach(console: Console, oracles: runner.Oracles, profile: Profile, slo_target: float) -> None:
    """A note when even the clairvoyant oracles miss the SLO target: no policy can reach it, and a
    table of ~ marks and 0 % would otherwise not say why."""
    reached = max(oracles.instant.slo_attainment, oracles.feasible.slo_attainment)
    if reached >= slo_target:
        return
    text = (
        f"even the clairvoyant oracles answer only {reached:.2%} of requests within the SLO ({profile.slo_ms:g} ms; "
        f"target {report.target_percent(slo_target)}): it is out of reach for {profile.name} on this trace, as "
        "sized per second with every arrival known (try a longer --slo-ms, a lower --slo-target or another profile)"
    )
    console.print(f"[yellow]note:[/yellow] {escape(text)}", highlight=False)


def _print_run_notes(console: Console, outcomes: list[runner.Outcome], label: str) -> None:
    """Each run's notes (a maxReplicas that capped what the demand asked for), naming the run."""
    where = f" ({label} data)" if label else ""
    for outcome in outcomes:
        for text in outcome.result.notes:
            console.print(
                f"[yellow]note:[/yellow] {escape(f'{outcome.case.family} {outcome.case.setting}{where}: {text}')}",
                highlight=False,
            )


def _print_cold_start_note(console: Console, start: int, profile: Profile, ours: bool) -> None:
    """Why an in-sample run's first cold start reads worse than the rest: nothing ran before it.
    Static starts with its own fleet ready (its setting), the autoscalers with the oracle's first
    minute; ``ours``: a policy of ours runs (it also starts without a measured service rate)."""
    learned = " (ours has no service rate or history yet)" if ours else ""
    console.print(
        f"  [yellow]note:[/yellow] in-sample from a cold start: every autoscaling policy starts with the same "
        f"{start} replicas ready (the instant oracle's most in the first minute; static with its own fleet) "
        f"and nothing learned{learned}; a launch takes {launch_seconds(profile):.0f} s on average, so demand "
        f"above {start} sooner than that waits for replicas no autoscaler can have ready. --history-pass starts "
        "them as in steady operation, --tune-fraction 0.5 scores a held-out half after the first as history",
        highlight=False,
    )


def _scale_line(args: argparse.Namespace, oracle_peak: int, label: str) -> str:
    """What the scale option sized, against the peak the SLO needs (the instant oracle's)."""
    where = f" ({label} data)" if label else ""
    if args.rate_factor:
        return f"  oracle peak {oracle_peak} replicas{where} at --rate-factor {args.rate_factor:g}"
    # --peak-replicas sizes mean work over a minute at full use; bursts within it and a latency
    # budget shorter than it need more (for llama-2-7b about twice as many).
    return (
        f"  oracle peak {oracle_peak} replicas{where}; --peak-replicas {args.peak_replicas:g} sizes the mean "
        "work of the busiest minute (replicas 100 % busy at full batch), not the peak the SLO needs"
    )


def _score(
    trace: Trace,
    measure_from: float,
    tune: Phase,
    profile: Profile,
    factor: float,
    args: argparse.Namespace,
    console: Console,
) -> Phase:
    """The tuning phase's chosen cases on the scoring data (from ``measure_from`` on)."""
    if args.history_pass and measure_from == 0.0:
        trace, measure_from = with_history_pass(trace)
    workload = _build(trace, profile, factor, args)
    title = f"{profile.name} {args.arrivals} (scored on held-out data)"
    oracles = _oracles(title, workload, profile, args.seed, measure_from)
    console.print(_scale_line(args, oracles.peak, "held-out"))
    _print_out_of_reach(console, oracles, profile, args.slo_target)
    start = oracles.start
    todo = [o.case for o in tune.chosen.values()]
    outcomes = _run_with_progress(console, title, workload, profile, todo, args.seed, start, measure_from, args.jobs)
    _print_run_notes(console, outcomes, "held-out")
    chosen = {o.case.family: o for o in outcomes}
    rows = report.records(profile, outcomes, oracles, chosen, "score", args.arrivals)
    console.print(
        report.table(
            f"{title}: each family's setting chosen on the tuning data",
            rows,
            profile.slo_ms,
            args.slo_target,
            chosen_elsewhere=True,
        )
    )
    return Phase("score", "held-out", workload, oracles, outcomes, chosen, rows, measure_from)


def run_cli(argv: list[str] | None = None) -> int:
    """Run ``simulate`` standalone (what ``neuronfleet simulate`` does once the CLI wires it in)."""
    parser = argparse.ArgumentParser(prog="neuronfleet")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(["simulate", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))
