"""The `neuronfleet` command line: one entry point for every job the project does.

Subcommands register themselves from the module that owns their work (``register(subparsers)``),
so this file only assembles them and turns failures into clear messages and exit codes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from rich.console import Console
from rich.markup import escape

from neuronfleet import __version__
from neuronfleet.api.crd import CRD_FILENAME, crd_yaml
from neuronfleet.api.v1alpha1 import GROUP, KIND, InferenceDeployment
from neuronfleet.api.validation import (
    Problem,
    is_json_stream,
    load_manifests,
    not_utf8_message,
    validate_manifest,
    yaml_error_message,
)
from neuronfleet.command_flags import add_headroom_flags
from neuronfleet.planning.catalog import INF2_INSTANCE_TYPES
from neuronfleet.planning.fit import fit_problems, pod_counts
from neuronfleet.planning.placement import (
    DAEMONSET_HEADROOM,
    UNLESS_OPERATOR_SCHEDULER,
    Headroom,
    QuantityError,
    headroom_from_quantities,
    needs_from_spec,
    plan_placement,
    scheduler_warning,
)
from neuronfleet.planning.prometheus_queries import REFUSE_OVERRIDES_SETTING, overridden_queries, query_override_refusal
from neuronfleet.planning.prometheus_urls import ALLOW_LIST_SETTING, AllowListError, PrometheusUrlPolicy, url_target

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

#: Where `make crds` writes the generated CRD: the repository copy and the Helm chart's copy.
CRD_TARGET_DIRS = ("crds", "charts/neuronfleet/crds")


# --------------------------------------------------------------------------------------------- crds


def _cmd_crds(args: argparse.Namespace) -> int:
    text = crd_yaml()
    if not args.write:
        sys.stdout.write(text)
        return 0
    root = Path(args.root)
    for target in CRD_TARGET_DIRS:
        path = root / target / CRD_FILENAME
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except OSError as error:
            err_console.print(f"error: cannot write {path}: {error.strerror or error}", markup=False)
            return 2
        console.print(f"wrote {path}", markup=False)
    return 0


def _register_crds(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "crds",
        help="print the InferenceDeployment CRD generated from the typed API",
        description="Render the CustomResourceDefinition from neuronfleet.api (the single source of truth).",
    )
    p.add_argument("--write", action="store_true", help="write crds/ and charts/neuronfleet/crds/ instead of printing")
    p.add_argument("--root", default=".", help="repository root for --write (default: current directory)")
    p.set_defaults(func=_cmd_crds)


# ----------------------------------------------------------------------------------------- validate


@dataclass
class DocumentResult:
    """The outcome of validating one YAML document."""

    source: str
    name: str | None = None
    problems: list[Problem] = field(default_factory=list)
    summary: str = ""
    #: Why the document was not validated (another kind of object, a list of no items); empty when it was.
    skipped: str = ""
    #: What may go wrong with a valid manifest (it passes all the same).
    warnings: list[str] = field(default_factory=list)


def _manifest_files(paths: Iterable[str]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            # Only the folder itself: sub-folders (e.g. examples/invalid) are named explicitly.
            yield from sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        else:
            yield path


def _catalog_problems(model: InferenceDeployment, headroom: Headroom) -> list[Problem]:
    """Why the fleet cannot exist (:func:`fit_problems`: no allowed instance type holds a replica, or
    a CPU limit below the pods' request), each at the field path its message starts with."""
    problems = []
    for text in fit_problems(model.spec, headroom):
        path, _, message = text.partition(": ")
        problems.append(Problem(path, message) if message else Problem("spec", text))
    return problems


def _scheduler_warning(model: InferenceDeployment, neuron_scheduler: str | None, headroom: Headroom) -> str | None:
    """The placement planner's warning (:func:`scheduler_warning`) at the first replica count the spec
    can reach whose placement needs the Neuron scheduler extension, when the pods would name none.

    The chosen instance type depends on the replica count (an 8xlarge for one replica, a 48xlarge
    for many), so every pod count the operator can place the fleet for is planned (:func:`pod_counts`).
    """
    spec = model.spec
    if spec.placement.scheduler_name or neuron_scheduler:
        return None
    needs = needs_from_spec(spec)  # the caller checked the quantities (fit_problems)
    for replicas in pod_counts(spec):
        plan = plan_placement(needs, spec.placement.instance_types, replicas, headroom=headroom)
        warning = scheduler_warning(plan, None)
        if warning:
            return f"at {replicas} pod(s): {warning}{UNLESS_OPERATOR_SCHEDULER}"
    return None


def _packing_warning(model: InferenceDeployment) -> str | None:
    """A warning for a core count that is neither a power of two nor a whole node's cores.

    Replicas of one deployment pack on the chip ring as they are (like-sized blocks), but beside
    other deployments' pods of other sizes the ring can fragment, and Karpenter, which does not see
    the Neuron scheduler extension's choices, can leave a pod pending on a node it counts as having
    room (FACTS.md: use like-sized, power-of-two requests).
    """
    cores = model.spec.model.neuron_cores_per_replica
    whole_nodes = sorted({t.neuroncores for t in INF2_INSTANCE_TYPES.values()})
    if cores & (cores - 1) == 0 or cores in whole_nodes:
        return None
    return (
        f"spec.model.neuronCoresPerReplica {cores} is neither a power of two nor a whole node's cores "
        f"({', '.join(map(str, whole_nodes))}): where other deployments' pods share its nodes, the chip ring "
        "can fragment, and Karpenter, which does not see the Neuron scheduler's choices, may leave a pod "
        "pending on a node it counts as having room; prefer 1, 2, 4, 8 or 16, or a whole node"
    )


def _prometheus_url_warning(model: InferenceDeployment, url_policy: PrometheusUrlPolicy | None) -> str | None:
    """What the operator will do with the spec's own ``scaling.metrics.prometheusUrl``, when it matters:
    credentials in it (plain text in the object), one that ``url_policy`` (the operator's
    ``--prometheus-allowed-url``) refuses, or, with no allow-list given, a URL no allow-list can judge
    (any list refuses it; an operator without one, the default, requests it)."""
    url = model.spec.scaling.metrics.prometheus_url
    if not url:
        return None
    target = url_target(url)
    refusal = url_policy.refusal(url) if url_policy is not None else None
    if refusal is not None:
        return f"{refusal}; the deployment would hold its replicas (ScalingActive PrometheusUrlNotAllowed)"
    if target is None:
        # Without an allow-list (the default) the operator requests it: say only what a list would do.
        return (
            "spec.scaling.metrics.prometheusUrl is not an http(s) URL that an allow-list of Prometheus URLs can "
            "judge (a plain host name or IP address, no spaces, backslashes, ';', '.'/'..' segments): an operator "
            f"with any allow-list ({ALLOW_LIST_SETTING}) would not request it and the deployment would hold its "
            "replicas (ScalingActive PrometheusUrlNotAllowed); one without (the default) requests it"
        )
    netloc = url.partition("://")[2].partition("/")[0]
    if "@" in netloc or "?" in url:
        return (
            f"spec.scaling.metrics.prometheusUrl (at {target.origin}) carries credentials or a query string, plain "
            "text in the object for anyone who may read it; leave it unset to use the operator's Prometheus, whose "
            "credentials come from a Secret (a spec's URL never gets them)"
        )
    return None


def _query_override_finding(model: InferenceDeployment, refused: bool) -> Problem | str | None:
    """What the operator will do with the spec's own scaling.metrics queries when it names no
    prometheusUrl (they run against the operator's Prometheus): with ``refused`` (the operator's
    ``--prometheus-refuse-query-overrides``), a problem, as it would not run them; else a warning, as
    it runs them for this deployment alone and an operator with the setting would not. None when
    there are none, the spec names its own Prometheus, or it does not scale on metrics (Manual)."""
    scaling = model.spec.scaling
    if scaling.mode != "Auto" or scaling.metrics.prometheus_url:
        return None
    if refused:
        refusal = query_override_refusal(scaling.metrics)
        return Problem("spec.scaling.metrics", refusal) if refusal is not None else None
    overridden = overridden_queries(scaling.metrics)
    if not overridden:
        return None
    names = ", ".join(f"spec.scaling.metrics.{name}" for name in overridden)
    verb, it = ("differs", "it") if len(overridden) == 1 else ("differ", "them")
    return (
        f"{names} {verb} from the default and spec.scaling.metrics.prometheusUrl is unset: the operator sends {it} "
        "to its own Prometheus, with its credentials, for this deployment alone (a query left at its default comes "
        f"from the shared fleet-wide read), and an operator with {REFUSE_OVERRIDES_SETTING} asks this deployment "
        "nothing (ScalingActive PrometheusQueryNotAllowed: the autoscaler holds its replicas). Remove the override "
        "(an empty query turns its signal off), or name a Prometheus of your own in spec.scaling.metrics.prometheusUrl"
    )


def _other_kind(doc: object) -> str:
    """``Kind/name`` of a Kubernetes object of another API group (a Namespace beside the manifest), else "".

    Objects of this API group with another kind stay errors: they are typos of the kind.
    """
    if not isinstance(doc, dict):
        return ""
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str) or not kind or kind == KIND:
        return ""
    if api_version.split("/")[0] == GROUP:
        return ""
    metadata = doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return f"{kind}/{name}" if name else kind


#: The kind of the API server's list of InferenceDeployments: ``kubectl apply -f`` applies its items
#: one by one, as those of the v1 List that ``kubectl get -o yaml`` writes.
LIST_KIND = f"{KIND}List"


def _list_items(doc: object) -> list[object] | None:
    """The items of a v1 List or of this group's InferenceDeploymentList (any version), else None.
    An item of the latter naming neither apiVersion nor kind gets the list's apiVersion and the item
    kind, as kubectl's decoder gives them (the API server's list names them once). A list without an
    ``items`` list is left as a document (kubectl cannot apply it either)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        return None
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if (api_version, kind) == ("v1", "List"):
        return list(doc["items"])
    if not isinstance(api_version, str) or kind != LIST_KIND or api_version.rpartition("/")[0] != GROUP:
        return None
    return [
        {"apiVersion": api_version, "kind": KIND, **item}
        if isinstance(item, dict) and not item.get("apiVersion") and not item.get("kind")
        else item
        for item in doc["items"]
    ]


def _documents(documents: list[object], source: str) -> Iterator[tuple[str, object, tuple[int, ...]]]:
    """Each document of a file as ``kubectl apply -f`` applies them: with its label and its place
    (its index, then each item index within lists), a list (:func:`_list_items`) replaced by its
    items (labelled ``file#n.items[i]``; lists in lists too, as kubectl flattens them), but for a
    list of no items, kept to be noted as skipped."""
    for index, doc in enumerate(documents):
        label = source if len(documents) == 1 else f"{source}#{index + 1}"
        yield from _flattened(doc, label, f"{source}#{index + 1}", (index,))


def _flattened(
    doc: object, label: str, list_label: str, place: tuple[int, ...]
) -> Iterator[tuple[str, object, tuple[int, ...]]]:
    """``doc`` (labelled ``label``), or the items of the list it is, each labelled under ``list_label``."""
    items = _list_items(doc)
    if not items:
        yield label, doc, place
        return
    for index, item in enumerate(items):
        item_label = f"{list_label}.items[{index}]"
        yield from _flattened(item, item_label, item_label, (*place, index))


def _skip_note(doc: object) -> str:
    """Why a document is not validated (a list of no items, an object of another group), else ""."""
    if _list_items(doc) == []:
        kind = doc.get("kind") if isinstance(doc, dict) else None
        return f"skipped {kind}: no items"
    other = _other_kind(doc)
    return f"skipped {other}: not an InferenceDeployment" if other else ""


def _object_key(doc: object) -> tuple[str | None, str] | None:
    """(namespace, name) of the InferenceDeployment a document applies to, else None (no name to
    compare, or another object: kubectl apply makes one object of two documents only when their API
    group and kind are the same too; the version is not part of the object's identity). A missing
    namespace is None: the one it is applied to (kubectl's ``-n``, else the context's), the same for
    every such document of one apply and unknown beside a document naming its own."""
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        return None
    api_version = doc.get("apiVersion")
    if not isinstance(api_version, str) or api_version.rpartition("/")[0] != GROUP:
        return None
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict):
        return None
    name, namespace = metadata.get("name"), metadata.get("namespace")
    if not isinstance(name, str) or not name:
        return None
    return (namespace if isinstance(namespace, str) and namespace else None), name


def _duplicate_problem(key: tuple[str | None, str], first: str) -> Problem:
    namespace, name = key
    named = f"{namespace}/{name}" if namespace else f"{name} (no metadata.namespace: the namespace it is applied to)"
    return Problem(
        "metadata.name",
        f"{named} is also defined in {first}: kubectl apply applies both to one object and keeps the last",
    )


def validate_files(
    paths: Iterable[str],
    neuron_scheduler: str | None = None,
    headroom: Headroom = DAEMONSET_HEADROOM,
    url_policy: PrometheusUrlPolicy | None = None,
    refuse_query_overrides: bool = False,
) -> list[DocumentResult]:
    """Validate every InferenceDeployment document in the given files and folders.

    Documents of other kinds (a Namespace in the same file) are returned with ``skipped`` set. The
    items of a list document (a v1 List, an InferenceDeploymentList) are validated as documents of
    their own, labelled ``file#n.items[i]`` (:func:`_documents`); a list of no items is skipped.
    ``neuron_scheduler`` is the operator's ``--neuron-scheduler``, when known: valid documents whose
    replicas need the Neuron scheduler extension and name no scheduler get a warning. ``headroom``
    is the operator's DaemonSet allowance, which explicit CPU and memory requests must fit beside.
    ``url_policy`` is the operator's allow-list of spec Prometheus URLs, when known: a spec URL it
    refuses is warned about. Queries of a spec's own run against the operator's Prometheus are
    warned about, and are a problem with ``refuse_query_overrides`` (the operator's
    ``--prometheus-refuse-query-overrides``). An InferenceDeployment of the namespace and name of an
    earlier one (:func:`_object_key`) is a problem naming the earlier: applied together, one object
    gets both and keeps the last.
    """
    results: list[DocumentResult] = []
    # Each object's first document: its label, and the file and place it was read from (a file
    # named twice, or a directory and a file in it, is not a second definition).
    defined: dict[tuple[str | None, str], tuple[str, tuple[Path, tuple[int, ...]]]] = {}
    for path in _manifest_files(paths):
        source = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            results.append(DocumentResult(source, problems=[Problem("", f"cannot read: {exc.strerror}")]))
            continue
        except UnicodeDecodeError as exc:
            results.append(DocumentResult(source, problems=[Problem("", not_utf8_message(exc))]))
            continue
        try:
            documents = load_manifests(text)
        except yaml.YAMLError as exc:
            results.append(DocumentResult(source, problems=[Problem("", yaml_error_message(exc))]))
            continue
        if not documents:
            results.append(DocumentResult(source, problems=[Problem("", "no YAML documents in the file")]))
        for label, doc, place in _documents(documents, source):
            note = _skip_note(doc)
            if note:
                results.append(DocumentResult(label, skipped=note))
                continue
            model, problems = validate_manifest(doc, from_yaml=not is_json_stream(text))
            result = DocumentResult(label, problems=problems)
            if model is not None:
                result.name = model.name
                if not problems:
                    result.problems = _catalog_problems(model, headroom)
                queries = _query_override_finding(model, refuse_query_overrides) if not problems else None
                if isinstance(queries, Problem):
                    result.problems.append(queries)
                if not result.problems:
                    warnings = (
                        _scheduler_warning(model, neuron_scheduler, headroom),
                        _packing_warning(model),
                        _prometheus_url_warning(model, url_policy),
                        queries,
                    )
                    result.warnings = [warning for warning in warnings if isinstance(warning, str)]
                spec = model.spec
                result.summary = (
                    f"{spec.model.neuron_cores_per_replica} NeuronCores/replica, "
                    f"scaling {spec.scaling.mode} {spec.scaling.min_replicas}..{spec.scaling.max_replicas}, "
                    f"warm pool {spec.warm_pool.mode}"
                )
            key = _object_key(doc)
            if key is not None:
                origin = (path.resolve(), place)
                first = defined.setdefault(key, (label, origin))
                if first[1] != origin:
                    result.problems.append(_duplicate_problem(key, first[0]))
            results.append(result)
    return results


def _cmd_validate(args: argparse.Namespace) -> int:
    try:
        headroom = headroom_from_quantities(args.daemonset_headroom_cpu, args.daemonset_headroom_memory)
    except QuantityError as error:
        err_console.print(f"error: --daemonset-headroom-cpu/--daemonset-headroom-memory: {error}", markup=False)
        return 2
    try:
        url_policy = (
            PrometheusUrlPolicy.from_entries(args.prometheus_allowed_url) if args.prometheus_allowed_url else None
        )
    except AllowListError as error:
        err_console.print(f"error: --prometheus-allowed-url: {error}", markup=False)
        return 2
    everything = validate_files(
        args.filename, args.neuron_scheduler, headroom, url_policy, args.prometheus_refuse_query_overrides
    )
    results = [result for result in everything if not result.skipped]
    failed = 0
    for result in everything:
        if result.skipped:
            if not args.quiet:
                console.print(f"- {result.source}: {result.skipped}", markup=False)
        elif result.problems:
            failed += 1
            named = f"{result.source} ({result.name})" if result.name else result.source
            console.print(f"[red]✗[/red] {escape(named)}")
            for problem in result.problems:
                console.print(f"    {problem}", markup=False)
        else:
            if not args.quiet:
                console.print(f"[green]✓[/green] {escape(f'{result.source}: {result.name}: {result.summary}')}")
            # Also when quiet: a warning is about what the operator will do with the manifest.
            for warning in result.warnings:
                console.print(f"[yellow]![/yellow] {escape(result.source)}: warning: {escape(warning)}")
    if not results:
        err_console.print("no InferenceDeployment manifests found" if everything else "no manifests found")
        return 1
    skipped = len(everything) - len(results)
    console.print(f"{len(results) - failed} valid, {failed} invalid" + (f", {skipped} skipped" if skipped else ""))
    return 1 if failed else 0


def _register_validate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "validate",
        help="check InferenceDeployment manifests offline (schema, CEL rules, Inf2 catalog)",
        description="Validate manifests against the generated CRD schema and its CEL rules, exactly as the "
        "API server would, then check that some allowed Inf2 instance type can hold the model. "
        "Prints every problem with its field path; exits 1 if any.",
    )
    p.add_argument(
        "-f",
        "--filename",
        action="extend",
        nargs="+",
        required=True,
        metavar="FILE_OR_DIR",
        help="manifests to check: files, or directories of *.yaml and *.yml (repeatable)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print only problems, warnings and the total")
    p.add_argument(
        "--neuron-scheduler",
        metavar="NAME",
        help="the operator's --neuron-scheduler (chart: operator.neuronSchedulerName), if it runs with one: "
        "without it, replicas that need the Neuron scheduler extension (more than one NeuronCore, not a "
        "whole node) and name no spec.placement.schedulerName are warned about",
    )
    p.add_argument(
        "--prometheus-allowed-url",
        action="append",
        metavar="PREFIX",
        help="the operator's --prometheus-allowed-url (chart: operator.prometheusAllowedUrls), repeatable: a "
        "spec.scaling.metrics.prometheusUrl outside it is warned about (the operator would not request it)",
    )
    p.add_argument(
        "--prometheus-refuse-query-overrides",
        action="store_true",
        help="the operator runs with --prometheus-refuse-query-overrides (chart: "
        "operator.prometheusRefuseQueryOverrides): a spec in Auto mode naming no spec.scaling.metrics.prometheusUrl "
        "whose queries differ from the defaults is an error (the operator would run none of them and hold its "
        "replicas); without the flag it is a warning",
    )
    add_headroom_flags(p)
    p.set_defaults(func=_cmd_validate)


# ---------------------------------------------------------------------------------------- assembly


#: Subcommands owned by other modules, and the extra each needs beyond the operator's.
OPTIONAL_COMMANDS = (
    ("plan", "neuronfleet.plan_command", "neuronfleet"),
    ("simulate", "neuronfleet.sim.command", "neuronfleet"),
    ("sandbox", "neuronfleet.sandbox.command", "neuronfleet[sandbox]"),
    ("run", "neuronfleet.run_command", "neuronfleet[operator]"),
    ("demo", "neuronfleet.demo.cli", "neuronfleet[sandbox]"),
)
#: The subcommands this file registers itself.
OWN_COMMANDS = ("validate", "crds")
#: Modules that register under another command too: the demo module adds `sandbox demo`.
ALSO_REGISTERS = {"sandbox": ("demo",)}


def _optional_registrars(
    command: str | None = None,
) -> tuple[list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]], list[str]]:
    """The registrars that import, and a note for each that needs a package this install lacks.

    With ``command`` (the one the command line names), only the modules that register under it
    are imported: importing all of them to list them (the sandbox, the simulator, the operator's
    Kopf) took over a second before any command began, and kept them in the operator's memory.
    The operator image installs only the operator's extra: the sandbox and the demo must not take
    `neuronfleet run` down with them.
    """
    wanted = {command, *ALSO_REGISTERS.get(command, ())} if command is not None else None
    registrars, missing = [], []
    for name, module_name, extra in OPTIONAL_COMMANDS:
        if wanted is not None and name not in wanted:
            continue
        try:
            module = __import__(module_name, fromlist=["register"])
        except ImportError as exc:
            if exc.name and exc.name.startswith("neuronfleet"):
                raise  # our own code is broken: say so, loudly
            missing.append(f"{name}: needs {exc.name} (pip install '{extra}')")
            continue
        registrars.append(module.register)
    return registrars, missing


def named_command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names when it is one this CLI has (its first argument: the top
    level takes no option but ``-h`` and ``--version``); None otherwise, when every command is
    registered so that help and errors list them all."""
    known = {name for name, _, _ in OPTIONAL_COMMANDS} | set(OWN_COMMANDS)
    return argv[0] if argv and argv[0] in known else None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv``, one holding only the command it names (see
    :func:`_optional_registrars`), else every command."""
    parser = argparse.ArgumentParser(
        prog="neuronfleet",
        description="Serve models on AWS Inf2: an operator for InferenceDeployments, its local sandbox, "
        "and a simulator for scaling policies.",
    )
    parser.add_argument("--version", action="version", version=f"neuronfleet {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    command = named_command(argv) if argv is not None else None
    registrars, missing = _optional_registrars(command)
    if command is not None and missing:
        # Its module lacks a package: the whole parser, whose epilog says which and how to get it.
        return build_parser()
    for register in [*registrars, _register_validate, _register_crds]:
        register(sub)
    if missing:
        parser.epilog = "Unavailable in this install: " + "; ".join(missing)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
    finally:
        release_hung_up_streams()
    return code


def release_hung_up_streams() -> None:
    """Point stdout and stderr at /dev/null when they can no longer be written (a closed terminal).

    After a hang-up every write to the terminal fails (EIO), and text a failed write left in a
    stream's buffer stays there: Python's flush at exit fails again and turns the command's exit
    status into 120. A terminal that is gone reads nothing, so that text goes to /dev/null instead."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            try:
                descriptor = stream.fileno()
            except (OSError, ValueError):
                continue
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, descriptor)
            os.close(null)
            with contextlib.suppress(OSError):
                stream.flush()


if __name__ == "__main__":
    raise SystemExit(main())
