"""`neuronfleet run`: start the operator (Kopf) with its clients, against a cluster or the sandbox.

:func:`operator_tasks` is also what the tests and the sandbox demo use: it starts Kopf's tasks in
the caller's event loop (``kopf.spawn_tasks``), so only Kopf's own tasks stop with it.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import re
import shlex
import socket
import sys
import urllib.parse
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import kopf
import yaml

# Kopf's matcher is not public API: kopf is pinned (pyproject) and the unit tests pin the cases that
# matter here (test_operator_own_account), so a change of its semantics fails them.
from kopf._cogs.structs.references import NamespaceName, match_namespace
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import ConfigException

from neuronfleet import __version__
from neuronfleet.api.v1alpha1 import DEFAULT_IMAGE, SERVICE_ACCOUNT_NAME_MAX_LENGTH, SERVICE_ACCOUNT_NAME_PATTERN
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.handlers import OperatorContext, kopf_settings, registry
from neuronfleet.kube.builders import BuilderConfig
from neuronfleet.kube.client import UNANSWERED, KubeClient, connection_pool_size, kubeconfig_files
from neuronfleet.metrics.operator_metrics import OperatorMetrics
from neuronfleet.metrics.operator_metrics import serve as serve_metrics
from neuronfleet.metrics.prometheus_auth import CredentialsError, PrometheusCredentials, amp_region
from neuronfleet.planning.admission import OperatorAccount, own_default_problem
from neuronfleet.planning.labels import LABEL_DEPLOYMENT
from neuronfleet.planning.placement import (
    DAEMONSET_HEADROOM_CPU,
    DAEMONSET_HEADROOM_MEMORY,
    Headroom,
    QuantityError,
    parse_cpu_millis,
    parse_memory_mib,
)
from neuronfleet.planning.prometheus_urls import AllowListError, PrometheusUrlPolicy
from neuronfleet.reconcile import MetricsSource, OperatorSettings, Reconciler, utc_now

logger = logging.getLogger(__name__)


async def build_context(
    settings: OperatorSettings,
    kubeconfig: str | os.PathLike[str] | None = None,
    metrics: MetricsSource | None = None,
    store: ArtifactStore | None = None,
    clock: Callable[[], datetime] = utc_now,
) -> OperatorContext:
    # A connection for each reconcile that may run at once, and some for the rest.
    kube = await KubeClient.connect(kubeconfig, connections=connection_pool_size(settings.max_concurrent_reconciles))
    context = OperatorContext(Reconciler(kube, store or ArtifactStore(), settings, metrics, clock))
    context.kubeconfig = Path(kubeconfig) if kubeconfig is not None else None
    return context


async def operator_tasks(
    context: OperatorContext,
    *,
    namespaces: Sequence[str] = (),
    peering_name: str | None = None,
    priority: int = 0,
    liveness_endpoint: str | None = None,
    stop_flag: asyncio.Event | None = None,
    in_process: bool = False,
) -> Collection[asyncio.Task[Any]]:
    """Kopf's tasks for this operator; run them with ``kopf.run_tasks``; ``stop_flag`` stops them.

    ``in_process``: the operator shares its process with others (tests, the sandbox demo); see
    :func:`neuronfleet.handlers.kopf_settings`.
    """
    return await kopf.spawn_tasks(
        settings=kopf_settings(in_process=in_process),
        stop_flag=stop_flag,
        registry=registry,
        memo=kopf.Memo(context=context),
        clusterwide=not namespaces,
        namespaces=list(namespaces),
        standalone=peering_name is None,
        peering_name=peering_name,
        priority=priority,
        liveness_endpoint=liveness_endpoint,
    )


#: Kopf's peering API: its CRDs come with the chart (peering.createCRDs), the object with it too
#: (peering.createObject), or by hand.
PEERING_GROUP = "kopf.dev"
PEERING_VERSION = "v1"
CLUSTER_PEERING_PLURAL = "clusterkopfpeerings"
NAMESPACED_PEERING_PLURAL = "kopfpeerings"
#: A peering check that got an error answer or none (these calls do not go through KubeClient._json,
#: so aiohttp's own errors come through as they are).
_CHECK_FAILED: tuple[type[Exception], ...] = (ApiException, aiohttp.ClientError, *UNANSWERED)
#: Seconds between two checks for a missing peering object, until it is there.
PEERING_RECHECK_SECONDS = 60.0
#: A namespace name, as opposed to one of Kopf's patterns (``team-*``, ``!kube-system``), which
#: is not checked.
_NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


_PAUSED = "it reconciles nothing meanwhile, though its liveness endpoint answers"
_CHART = (
    "The Helm chart creates it (peering.createObject=true: a first install right after the operator's pods "
    "start, so wait a moment; `helm upgrade` creates one that is missing)"
)


def _create_peering(name: str, namespace: str | None) -> str:
    kind = "KopfPeering" if namespace else "ClusterKopfPeering"
    body = f'{{"apiVersion": "{PEERING_GROUP}/{PEERING_VERSION}", "kind": "{kind}", "metadata": {{"name": "{name}"}}}}'
    return f"echo '{body}' | kubectl{f' -n {namespace}' if namespace else ''} create -f -"


async def missing_peering(kube: KubeClient, name: str, namespaces: Sequence[str] = ()) -> list[str]:
    """What Kopf's peering lacks to let this operator act: one message each (what is missing, what
    that does, how to create it); empty when nothing.

    With ``--peering`` Kopf pauses the operator until it sees the named peering object: the
    ClusterKopfPeering (cluster-wide) or a KopfPeering in each watched namespace, where one missing
    pauses it in every namespace. A watched namespace that does not exist pauses nothing until it is
    created. Namespace patterns (``team-*``) are not checked. Raises :data:`_CHECK_FAILED` errors
    (e.g. a 403).
    """
    no_crds = (
        "the kopf.dev peering CRDs are not installed ({kind} is not served): Kopf pauses this operator until "
        f"they are ({_PAUSED}). The Helm chart installs them (peering.createCRDs=true), then the peering object"
    )
    async with asyncio.timeout(kube.request_timeout):
        if not namespaces:
            try:
                found = await kube.custom.list_cluster_custom_object(
                    PEERING_GROUP, PEERING_VERSION, CLUSTER_PEERING_PLURAL, field_selector=f"metadata.name={name}"
                )
            except ApiException as error:
                if error.status != 404:
                    raise
                return [no_crds.format(kind="ClusterKopfPeering")]
            if found.get("items"):
                return []
            return [
                f"ClusterKopfPeering {name} does not exist: Kopf pauses this operator until it does ({_PAUSED}). "
                f"{_CHART}; by hand: {_create_peering(name, None)}"
            ]
        names = [namespace for namespace in namespaces if _NAMESPACE_NAME.fullmatch(namespace)]
        if not names:
            return []
        existing = {ns.metadata.name for ns in (await kube.core.list_namespace()).items}
        missing = []
        for namespace in names:
            if namespace not in existing:
                missing.append(
                    f"watched namespace {namespace} does not exist: once it is created, Kopf pauses this operator "
                    f"in every namespace until KopfPeering {name} exists there too. {_CHART}; by hand: "
                    f"{_create_peering(name, namespace)}"
                )
                continue
            try:
                found = await kube.custom.list_namespaced_custom_object(
                    PEERING_GROUP,
                    PEERING_VERSION,
                    namespace,
                    NAMESPACED_PEERING_PLURAL,
                    field_selector=f"metadata.name={name}",
                )
            except ApiException as error:
                if error.status != 404:
                    raise
                return [no_crds.format(kind="KopfPeering")]
            if not found.get("items"):
                missing.append(
                    f"KopfPeering {name} does not exist in namespace {namespace}: Kopf pauses this operator, in "
                    f"every namespace it watches, until it does ({_PAUSED}). {_CHART}; by hand: "
                    f"{_create_peering(name, namespace)}"
                )
        return missing


async def watch_peering(
    kube: KubeClient,
    name: str,
    namespaces: Sequence[str] = (),
    *,
    recheck_seconds: float = PEERING_RECHECK_SECONDS,
) -> None:
    """Log what Kopf's peering lacks (a warning for each new problem) until nothing is missing.

    Without this, an operator whose peering object is missing sits idle with nothing in its log
    after its login. A check that fails (the role cannot list peering objects) is logged once and
    ends the watch: the operator runs on.
    """
    reported: list[str] = []
    while True:
        try:
            missing = await missing_peering(kube, name, namespaces)
        except _CHECK_FAILED as error:
            reason = f"{error.status} {error.reason}" if isinstance(error, ApiException) else str(error)
            logger.warning("could not check Kopf's peering object %r: %s", name, reason)
            return
        for problem in missing:
            if problem not in reported:
                logger.warning("peering %r: %s", name, problem)
        if reported and not missing:
            logger.info("peering %r: nothing is missing now: Kopf lets one replica act", name)
        if not missing:
            return
        reported = missing
        await asyncio.sleep(recheck_seconds)


#: Seconds between two checks of a refused pod list, until it is allowed.
POD_READS_RECHECK_SECONDS = 60.0


async def refused_pod_reads(kube: KubeClient, namespaces: Sequence[str] = ()) -> list[str]:
    """Where the operator may not list the pods it watches: one message each; empty when nowhere.

    Kopf starts no handler until its index of the operator's pods
    (:func:`neuronfleet.handlers.pods_on_nodes`) has listed them in every namespace it watches: a
    namespace where RBAC refuses the list holds up every InferenceDeployment, in every namespace,
    with no status and no Event, only Kopf's retries in its log. The chart's roles allow it; a
    hand-made role may not. Namespace patterns (``team-*``) are not checked. Raises
    :data:`_CHECK_FAILED` errors other than a 403.
    """
    selector = LABEL_DEPLOYMENT  # the pods Kopf watches: those with the label, whatever its value
    effect = (
        "Kopf reconciles nothing, in any namespace, until it can (it lists them before its first handler "
        "runs); allow list and watch of pods to the operator's ServiceAccount there (the Helm chart's roles do)"
    )
    async with asyncio.timeout(kube.request_timeout):
        if not namespaces:
            try:
                await kube.core.list_pod_for_all_namespaces(label_selector=selector, limit=1)
            except ApiException as error:
                if error.status != 403:
                    raise
                return [f"the operator may not list pods across the cluster ({error.reason}): {effect}"]
            return []
        refused = []
        for namespace in (n for n in namespaces if _NAMESPACE_NAME.fullmatch(n)):
            try:
                await kube.core.list_namespaced_pod(namespace, label_selector=selector, limit=1)
            except ApiException as error:
                if error.status != 403:
                    raise
                refused.append(f"the operator may not list pods in namespace {namespace} ({error.reason}): {effect}")
        return refused


async def watch_pod_reads(
    kube: KubeClient, namespaces: Sequence[str] = (), *, recheck_seconds: float = POD_READS_RECHECK_SECONDS
) -> None:
    """Log an error for each namespace where the pod list is refused (see :func:`refused_pod_reads`),
    again each time the set changes, until none is; a check that fails otherwise is logged once and
    ends the watch (Kopf's own retries go on)."""
    reported: list[str] = []
    while True:
        try:
            refused = await refused_pod_reads(kube, namespaces)
        except _CHECK_FAILED as error:
            reason = f"{error.status} {error.reason}" if isinstance(error, ApiException) else str(error)
            logger.warning("could not check that the operator may list its pods: %s", reason)
            return
        for problem in refused:
            if problem not in reported:
                logger.error("%s", problem)
        if reported and not refused:
            logger.info("the operator may list its pods in every namespace it watches now")
        if not refused:
            return
        reported = refused
        await asyncio.sleep(recheck_seconds)


#: Every ``NEURONFLEET_*`` variable ``run`` reads (:func:`resolve_defaults`). Any other is refused at
#: start-up: a chart newer than the operator's image sets variables the image does not read (the
#: Prometheus URL allow-list, the refusal of query overrides), and the operator would run without
#: them, silently.
KNOWN_VARIABLES = frozenset(
    {
        "NEURONFLEET_ARTIFACT_STORE",
        "NEURONFLEET_NEURON_SCHEDULER",
        "NEURONFLEET_PROMETHEUS_URL",
        "NEURONFLEET_PROMETHEUS_BEARER_TOKEN_FILE",
        "NEURONFLEET_PROMETHEUS_USERNAME",
        "NEURONFLEET_PROMETHEUS_PASSWORD_FILE",
        "NEURONFLEET_PROMETHEUS_CA_FILE",
        "NEURONFLEET_PROMETHEUS_SIGV4_REGION",
        "NEURONFLEET_PROMETHEUS_REFUSE_QUERY_OVERRIDES",
        "NEURONFLEET_PROMETHEUS_ALLOWED_URLS",
        "NEURONFLEET_MODEL_SERVER_IMAGE",
        "NEURONFLEET_DAEMONSET_HEADROOM_CPU",
        "NEURONFLEET_DAEMONSET_HEADROOM_MEMORY",
        "NEURONFLEET_COMPILE_SERVICE_ACCOUNT",
        "NEURONFLEET_SERVING_SERVICE_ACCOUNT",
        "NEURONFLEET_DEVICE_GROUP_ID",
        "NEURONFLEET_OPERATOR_SERVICE_ACCOUNT",
        "NEURONFLEET_OPERATOR_NAMESPACE",
    }
)


#: The variables the kubelet sets in every pod for each Service of its namespace (its "service
#: links", pkg/kubelet/envvars): the Service's name upper-cased with '-' as '_', then a suffix.
#: A Service named ``neuronfleet`` or ``neuronfleet-<x>`` (the operator names one after each
#: InferenceDeployment) gives ``NEURONFLEET_*`` names that are no settings. Each form, with what
#: its value is; a name may have more than one form (a Service ``a-service`` gives A_SERVICE_PORT).
_SERVICE = r"[A-Z](?:[A-Z0-9_]*[A-Z0-9])?"
_SERVICE_LINKS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str], str], bool]], ...] = (
    (re.compile(rf"{_SERVICE}_SERVICE_HOST"), lambda _, value: _is_ip(value)),
    (re.compile(rf"{_SERVICE}_SERVICE_PORT(?:_[A-Z0-9](?:[A-Z0-9_]*[A-Z0-9])?)?"), lambda _, value: _is_port(value)),
    (re.compile(rf"{_SERVICE}_PORT"), lambda _, value: _is_link_url(value)),
    (
        re.compile(rf"{_SERVICE}_PORT_(?P<port>[0-9]+)_(?P<protocol>TCP|UDP|SCTP)"),
        lambda m, value: _is_link_url(value, m["protocol"].lower(), m["port"]),
    ),
    (
        re.compile(rf"{_SERVICE}_PORT_[0-9]+_(?P<protocol>TCP|UDP|SCTP)_PROTO"),
        lambda m, value: value == m["protocol"].lower(),
    ),
    (re.compile(rf"{_SERVICE}_PORT_(?P<port>[0-9]+)_(?:TCP|UDP|SCTP)_PORT"), lambda m, value: value == m["port"]),
    (re.compile(rf"{_SERVICE}_PORT_[0-9]+_(?:TCP|UDP|SCTP)_ADDR"), lambda _, value: _is_ip(value)),
)


def _ip_version(text: str) -> int | None:
    """4 or 6 for an IP address, None for anything else (a host name)."""
    try:
        return ipaddress.ip_address(text).version
    except ValueError:
        return None


def _is_ip(text: str) -> bool:
    return _ip_version(text) is not None


def _is_port(text: str) -> bool:
    return text.isascii() and text.isdigit() and 0 < int(text) <= 65535


def _is_link_url(text: str, protocol: str | None = None, port: str | None = None) -> bool:
    """``tcp://10.0.0.1:80`` or ``udp://[fd00::1]:53``, as the kubelet writes a service link."""
    scheme, sep, address = text.partition("://")
    host, colon, number = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return (
        bool(sep and colon)
        and scheme in ("tcp", "udp", "sctp")
        and (protocol is None or scheme == protocol)
        and _is_port(number)
        and (port is None or number == port)
        and _is_ip(host)
    )


def is_service_link(name: str, value: str) -> bool:
    """Whether ``name=value`` is a variable the kubelet sets for a Service of the pod's namespace.

    The name and the value must both have a link's form (the value an IP, a port or
    ``tcp://IP:port``), so that a misspelt setting (``NEURONFLEET_PROMETHEUS_URLS=http://...``) is
    still refused.
    """
    for pattern, value_fits in _SERVICE_LINKS:
        match = pattern.fullmatch(name)
        if match is not None and value_fits(match, value):
            return True
    return False


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """The ``NEURONFLEET_*`` names in ``environ`` that ``run`` does not read, sorted (the kubelet's
    service links left out)."""
    return sorted(
        name
        for name, value in environ.items()
        if name.startswith("NEURONFLEET_") and name not in KNOWN_VARIABLES and not is_service_link(name, value)
    )


def _not_read(unknown: Sequence[str]) -> str:
    what = f"{unknown[0]} is not a variable" if len(unknown) == 1 else f"{', '.join(unknown)} are not variables"
    return f"{what} this operator (neuronfleet {__version__}) reads"


def check_variables(environ: Mapping[str, str]) -> None:
    """RunSetupError naming the ``NEURONFLEET_*`` variables ``run`` does not read, if any."""
    unknown = unknown_variables(environ)
    if not unknown:
        return
    raise RunSetupError(
        f"{_not_read(unknown)}: its image may be older than the chart that "
        "set it (build and push the operator's image from the chart's checkout under a new tag, then set "
        'image.tag: docs/install-eks.md, "Upgrade"), or the name is misspelt'
    )


#: What ``neuronfleet sandbox up`` writes beside its kubeconfig: where its S3 and artifact store are.
SANDBOX_ENV_FILE = "sandbox.env"
DEFAULT_ARTIFACT_STORE = "/var/lib/neuronfleet/artifacts"


def load_sandbox_env(kubeconfig: Path | None) -> dict[str, str]:
    """Variables from ``sandbox.env`` beside the kubeconfig (the first of
    :func:`~neuronfleet.kube.client.kubeconfig_files`), set where the environment lacks them.

    ``neuronfleet sandbox up`` writes ``export NAME=value`` lines there (its S3 endpoint and
    credentials, the artifact store); explicit flags and variables still win. Returns what was set.
    RunSetupError for a ``NEURONFLEET_*`` name there that ``run`` does not read, as for the
    environment's (:func:`check_variables`, which runs before this file is read).
    """
    if kubeconfig is None:
        return {}
    path = kubeconfig.expanduser().resolve().parent / SANDBOX_ENV_FILE
    try:
        text = path.read_text()
    except OSError:
        return {}
    loaded = {}
    for line in text.splitlines():
        name, sep, value = line.removeprefix("export ").partition("=")
        if not sep or line.lstrip().startswith("#") or name in os.environ:
            continue
        loaded[name.strip()] = " ".join(shlex.split(value))
    unknown = unknown_variables(loaded)
    if unknown:
        raise RunSetupError(
            f"{path}: {_not_read(unknown)}: the name is misspelt, or another version's `neuronfleet sandbox up` "
            "wrote the file"
        )
    os.environ.update(loaded)
    if loaded:
        logger.info("read %s: %s", path, ", ".join(sorted(loaded)))
    return loaded


def resolve_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the flags left unset from the environment (after ``sandbox.env``), then the defaults.

    Done at run time, not in the parser, so that ``sandbox.env`` (read once the kubeconfig is known)
    can supply them; flags win over variables, variables over defaults.
    """
    args.artifact_store = args.artifact_store or os.environ.get("NEURONFLEET_ARTIFACT_STORE") or DEFAULT_ARTIFACT_STORE
    args.neuron_scheduler = args.neuron_scheduler or os.environ.get("NEURONFLEET_NEURON_SCHEDULER") or None
    args.prometheus_url = args.prometheus_url or os.environ.get("NEURONFLEET_PROMETHEUS_URL") or None
    for name in ("bearer_token_file", "username", "password_file", "ca_file", "sigv4_region"):
        attribute = f"prometheus_{name}"
        value = getattr(args, attribute) or os.environ.get(f"NEURONFLEET_{attribute.upper()}") or None
        setattr(args, attribute, value)
    if not args.prometheus_refuse_query_overrides:
        flag = os.environ.get("NEURONFLEET_PROMETHEUS_REFUSE_QUERY_OVERRIDES", "").strip().lower()
        if flag not in ("", "true", "false"):
            raise RunSetupError(f"NEURONFLEET_PROMETHEUS_REFUSE_QUERY_OVERRIDES is {flag!r}: true or false")
        args.prometheus_refuse_query_overrides = flag == "true"
    if not args.prometheus_allowed_url:
        # The variable is one list: entries separated by commas or whitespace.
        listed = os.environ.get("NEURONFLEET_PROMETHEUS_ALLOWED_URLS") or ""
        args.prometheus_allowed_url = listed.replace(",", " ").split()
    args.model_server_image = (
        args.model_server_image or os.environ.get("NEURONFLEET_MODEL_SERVER_IMAGE") or DEFAULT_IMAGE
    )
    args.daemonset_headroom_cpu = (
        args.daemonset_headroom_cpu or os.environ.get("NEURONFLEET_DAEMONSET_HEADROOM_CPU") or DAEMONSET_HEADROOM_CPU
    )
    args.daemonset_headroom_memory = (
        args.daemonset_headroom_memory
        or os.environ.get("NEURONFLEET_DAEMONSET_HEADROOM_MEMORY")
        or DAEMONSET_HEADROOM_MEMORY
    )
    args.compile_service_account = (
        args.compile_service_account or os.environ.get("NEURONFLEET_COMPILE_SERVICE_ACCOUNT") or None
    )
    args.serving_service_account = (
        args.serving_service_account or os.environ.get("NEURONFLEET_SERVING_SERVICE_ACCOUNT") or None
    )
    if args.device_group_id is None:
        args.device_group_id = os.environ.get("NEURONFLEET_DEVICE_GROUP_ID") or None
    args.operator_service_account = (
        args.operator_service_account or os.environ.get("NEURONFLEET_OPERATOR_SERVICE_ACCOUNT") or None
    )
    args.operator_namespace = args.operator_namespace or os.environ.get("NEURONFLEET_OPERATOR_NAMESPACE") or None
    return args


def device_group_id(args: argparse.Namespace) -> int | None:
    """The Neuron devices' group of the resolved flags; RunSetupError naming the setting if it is no
    group id (a variable, unlike a flag, is not checked by the parser)."""
    value = args.device_group_id
    if value is None or isinstance(value, int):
        return value
    try:
        return _device_gid(value)
    except argparse.ArgumentTypeError as error:
        raise RunSetupError(f"--device-group-id (env NEURONFLEET_DEVICE_GROUP_ID): {error}") from None


def _service_account_name(text: str) -> str:
    """An argparse type: a ServiceAccount name (a DNS-1123 subdomain), as a pod's serviceAccountName."""
    if len(text) > SERVICE_ACCOUNT_NAME_MAX_LENGTH or not re.fullmatch(SERVICE_ACCOUNT_NAME_PATTERN, text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a ServiceAccount name (lower-case letters, digits, '-' and '.', at most "
            f"{SERVICE_ACCOUNT_NAME_MAX_LENGTH} characters)"
        )
    return text


def workload_service_accounts(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The compile and serving ServiceAccounts of the resolved flags; RunSetupError naming the setting
    if one is not a name (a variable, unlike a flag, is not checked by the parser)."""
    names = []
    for flag, variable, value in (
        ("--compile-service-account", "NEURONFLEET_COMPILE_SERVICE_ACCOUNT", args.compile_service_account),
        ("--serving-service-account", "NEURONFLEET_SERVING_SERVICE_ACCOUNT", args.serving_service_account),
    ):
        try:
            names.append(_service_account_name(value) if value else None)
        except argparse.ArgumentTypeError as error:
            raise RunSetupError(f"{flag} (env {variable}): {error}") from None
    return names[0], names[1]


def namespace_watched(namespace: str, patterns: Sequence[str]) -> bool:
    """Whether Kopf, given ``patterns`` (the --namespace flags), watches ``namespace``: none watches
    every namespace, else any pattern matching it does, by Kopf's own matcher (globs, ``!`` excludes,
    comma-separated parts; a leading exclusion implies ``*``)."""
    return not patterns or any(match_namespace(NamespaceName(namespace), pattern) for pattern in patterns)


def operator_account(args: argparse.Namespace) -> OperatorAccount | None:
    """The operator's own ServiceAccount and namespace of the resolved flags (None: neither is set, as
    outside a pod); RunSetupError naming the setting if only one is set or one is not a name, or if
    --compile-service-account or --serving-service-account names the operator's own account while Kopf
    watches its namespace (:func:`namespace_watched`)."""
    name, namespace = args.operator_service_account, args.operator_namespace
    if not name and not namespace:
        return None
    if not (name and namespace):
        given, missing = (
            ("--operator-service-account", "--operator-namespace (env NEURONFLEET_OPERATOR_NAMESPACE)")
            if name
            else ("--operator-namespace", "--operator-service-account (env NEURONFLEET_OPERATOR_SERVICE_ACCOUNT)")
        )
        raise RunSetupError(
            f"{given} is set but {missing} is not: the operator refuses workloads that would run as its own "
            "account only knowing both (the chart sets both from the pod: spec.serviceAccountName, metadata.namespace)"
        )
    try:
        name = _service_account_name(name)
    except argparse.ArgumentTypeError as error:
        raise RunSetupError(f"--operator-service-account (env NEURONFLEET_OPERATOR_SERVICE_ACCOUNT): {error}") from None
    if len(namespace) > 63 or not _NAMESPACE_NAME.fullmatch(namespace):
        raise RunSetupError(
            f"--operator-namespace (env NEURONFLEET_OPERATOR_NAMESPACE): {namespace!r} is not a namespace name "
            "(lower-case letters, digits and '-', at most 63 characters)"
        )
    account = OperatorAccount(namespace, name)
    # Outside the operator's namespace a default account of that name is another object: refused only
    # where Kopf would watch that namespace.
    if namespace_watched(namespace, args.namespace or ()):
        problem = own_default_problem("compile", args.compile_service_account, account) or own_default_problem(
            "serving", args.serving_service_account, account
        )
        if problem:
            raise RunSetupError(problem)
    return account


def prometheus_url_policy(args: argparse.Namespace) -> PrometheusUrlPolicy:
    """The allow-list of spec Prometheus URLs of the resolved flags; RunSetupError naming the setting
    for an entry that is not ``scheme://host[:port][/path]``."""
    try:
        return PrometheusUrlPolicy.from_entries(args.prometheus_allowed_url or ())
    except AllowListError as error:
        raise RunSetupError(f"--prometheus-allowed-url (env NEURONFLEET_PROMETHEUS_ALLOWED_URLS): {error}") from None


def prometheus_credentials(args: argparse.Namespace) -> PrometheusCredentials:
    """The credentials of the resolved flags for ``--prometheus-url``; RunSetupError when they are
    set without that URL (they would be sent nowhere)."""

    def path(value: str | None) -> Path | None:
        return Path(value) if value else None

    credentials = PrometheusCredentials(
        bearer_token_file=path(args.prometheus_bearer_token_file),
        username=args.prometheus_username,
        password_file=path(args.prometheus_password_file),
        ca_file=path(args.prometheus_ca_file),
        sigv4_region=args.prometheus_sigv4_region,
    )
    given = (
        credentials.bearer_token_file or credentials.username or credentials.password_file or credentials.sigv4_region
    )
    if given and not args.prometheus_url:
        raise RunSetupError(
            "Prometheus credentials are set but --prometheus-url (env NEURONFLEET_PROMETHEUS_URL) is not: they are "
            "sent only to the operator's own Prometheus, never to a spec's scaling.metrics.prometheusUrl"
        )
    workspace_region = amp_region(args.prometheus_url or "")
    if credentials.sigv4_region and workspace_region and workspace_region != credentials.sigv4_region:
        raise RunSetupError(
            f"--prometheus-sigv4-region is {credentials.sigv4_region} but --prometheus-url is an AMP workspace in "
            f"{workspace_region}: AMP accepts only signatures for its own region"
        )
    if workspace_region and not credentials.sigv4_region:
        logger.warning(
            "--prometheus-url is an AMP workspace but --prometheus-sigv4-region is not set: AMP refuses unsigned "
            "requests (HTTP 403); set it to %s",
            workspace_region,
        )
    return credentials


def daemonset_headroom(args: argparse.Namespace) -> Headroom:
    """The DaemonSet allowance of the resolved flags; RunSetupError naming the setting if unreadable
    (a variable, unlike a flag, is not checked by the parser)."""
    try:
        cpu = parse_cpu_millis(args.daemonset_headroom_cpu)
    except QuantityError as error:
        raise RunSetupError(f"--daemonset-headroom-cpu (env NEURONFLEET_DAEMONSET_HEADROOM_CPU): {error}") from None
    try:
        memory = parse_memory_mib(args.daemonset_headroom_memory)
    except QuantityError as error:
        raise RunSetupError(
            f"--daemonset-headroom-memory (env NEURONFLEET_DAEMONSET_HEADROOM_MEMORY): {error}"
        ) from None
    return Headroom(cpu_millis=cpu, memory_mib=memory)


#: Logged once at start-up when the operator has no Neuron scheduler name: pods that need the
#: extension are created all the same, and nothing else in the operator's log would say why.
NO_NEURON_SCHEDULER = (
    "no Neuron scheduler name (--neuron-scheduler, env NEURONFLEET_NEURON_SCHEDULER, chart "
    "operator.neuronSchedulerName): pods of specs without spec.placement.schedulerName go to the default "
    "scheduler, which does not pick contiguous NeuronCores; replicas of more than one NeuronCore that do not "
    "take a whole node need the Neuron scheduler extension (docs/install-eks.md)"
)


class RunSetupError(Exception):
    """A setting ``run`` cannot act on (a port it cannot bind): reported in one line, exit code 2."""


async def _run(args: argparse.Namespace) -> None:
    # Beside the first kubeconfig file, where kubectl (and `neuronfleet sandbox up`) writes.
    files = kubeconfig_files(args.kubeconfig)
    load_sandbox_env(files[0] if files else None)
    resolve_defaults(args)
    if not args.neuron_scheduler:
        logger.warning(NO_NEURON_SCHEDULER)
    headroom = daemonset_headroom(args)
    logger.info(
        "left for DaemonSets on every node: %dm CPU, %dMi memory (--daemonset-headroom-cpu/-memory)",
        headroom.cpu_millis,
        headroom.memory_mib,
    )
    compile_account, serving_account = workload_service_accounts(args)
    own_account = operator_account(args)
    if own_account is not None:
        logger.info(
            "the operator runs as ServiceAccount %s in namespace %s: specs there whose workloads would run as it "
            "are refused (InvalidSpec)",
            own_account.name,
            own_account.namespace,
        )
        if own_account.name == "default":
            logger.warning(
                "the operator runs as ServiceAccount default, namespace %s's default account: every pod there that "
                "names no account runs with the operator's rights (and IAM role), which the operator cannot refuse; "
                "run it as an account of its own (the chart's serviceAccount)",
                own_account.namespace,
            )
    device_group = device_group_id(args)
    url_policy = prometheus_url_policy(args)
    logger.info("Prometheus URLs: %s (--prometheus-allowed-url)", url_policy.describe())
    credentials = prometheus_credentials(args)
    settings = OperatorSettings(
        artifact_store=args.artifact_store,
        builder=BuilderConfig(
            default_scheduler_name=args.neuron_scheduler,
            model_server_image=args.model_server_image,
            daemonset_headroom=headroom,
            compile_service_account=compile_account,
            serving_service_account=serving_account,
            device_group_id=device_group,
        ),
        interval_seconds=args.interval,
        max_concurrent_reconciles=args.max_concurrent_reconciles,
        prometheus_urls=url_policy,
        refuse_query_overrides=args.prometheus_refuse_query_overrides,
        operator_account=own_account,
    )
    from neuronfleet.metrics.prometheus import PrometheusMetrics, redact_url

    # Built without --prometheus-url too: a spec's scaling.metrics.prometheusUrl is read on its own
    # (the CRD and the chart's NOTES say so); specs naming none then hold and say why.
    try:
        metrics = PrometheusMetrics(args.prometheus_url, credentials=credentials, url_policy=url_policy)
    except CredentialsError as error:
        raise RunSetupError(str(error)) from None
    if args.prometheus_url:
        logger.info("Prometheus at %s: %s", redact_url(args.prometheus_url), credentials.describe())
    else:
        logger.info("no --prometheus-url: Auto scaling reads only the Prometheus a spec names (prometheusUrl)")
    if args.prometheus_refuse_query_overrides:
        logger.info("only the default scaling.metrics queries run against --prometheus-url (query overrides refused)")
    context = await build_context(replace(settings), args.kubeconfig, metrics)
    if args.metrics_port is not None:
        context.metrics = OperatorMetrics()
        try:
            port = serve_metrics(context.metrics, args.metrics_port, args.metrics_address)
        except OSError as error:
            reason = error.strerror or str(error)
            raise RunSetupError(
                f"cannot serve metrics on {args.metrics_address} port {args.metrics_port}: {reason}"
            ) from None
        logger.info("operator metrics on %s port %d, /metrics", args.metrics_address, port)
    if args.liveness:
        check_liveness_endpoint(args.liveness)
    peering_watch = None
    if args.peering and isinstance(context.reconciler.kube, KubeClient):
        peering_watch = asyncio.create_task(watch_peering(context.reconciler.kube, args.peering, args.namespace or ()))
    pod_reads_watch = None
    if isinstance(context.reconciler.kube, KubeClient):
        pod_reads_watch = asyncio.create_task(watch_pod_reads(context.reconciler.kube, args.namespace or ()))
    tasks = await operator_tasks(
        context,
        namespaces=args.namespace or (),
        peering_name=args.peering,
        priority=args.priority,
        liveness_endpoint=args.liveness,
    )
    try:
        await kopf.run_tasks(tasks)
    finally:
        if peering_watch is not None:
            peering_watch.cancel()
        if pod_reads_watch is not None:
            pod_reads_watch.cancel()
        if metrics is not None:
            metrics.close()  # its query threads: a query under way ends with its timeout


def kubeconfig_problem(files: list[Path]) -> str | None:
    """Why ``run`` cannot read the kubeconfig ``files`` (none of them a file), or None."""
    if any(f.is_file() for f in files):
        return None
    return "is a directory" if len(files) == 1 and files[0].is_dir() else "not found"


#: Every line of the operator's log: the time, the logger, the message.
LOG_FORMAT = "%(asctime)s %(name)s %(message)s"


def configure_logging(*, verbose: bool) -> None:
    """The operator's log on stderr, in :data:`LOG_FORMAT`, with Kopf's per-object lines (logger
    ``kopf.objects``: "Handler 'deployment_changed' succeeded.") prefixed ``[namespace/name]`` as
    ``kopf run`` prints them: without it they do not say which object. Kopf's public
    :func:`kopf.configure` installs the formatter that reads the object Kopf passes with each line;
    lines of other loggers have no object and read as before. As :func:`logging.basicConfig` did:
    nothing when the root logger has handlers already (a program embedding the command, pytest)."""
    if logging.getLogger().handlers:
        return
    # Typed as LogFormat (its CLI choices), but kopf.configure takes a format string too (a custom
    # format, given to the same formatter): the operator's lines keep theirs.
    kopf.configure(verbose=verbose, log_format=LOG_FORMAT, log_prefix=True)  # type: ignore[arg-type]
    # kopf.configure also silences the asyncio logger unless in debug mode; its errors ("Task
    # exception was never retrieved") are the operator's to see, as they were with basicConfig.
    asyncio_logger = logging.getLogger("asyncio")
    asyncio_logger.propagate = True
    asyncio_logger.handlers[:] = [h for h in asyncio_logger.handlers if not isinstance(h, logging.NullHandler)]


def _cmd_run(args: argparse.Namespace) -> int:
    # A configuration that cannot be loaded ends with one line and exit code 2, never a traceback.
    try:
        check_variables(os.environ)
    except RunSetupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    files = kubeconfig_files(args.kubeconfig)
    kubeconfig = None if files is None else os.pathsep.join(str(f) for f in files)
    if files is not None and (problem := kubeconfig_problem(files)) is not None:
        print(
            f"error: kubeconfig {kubeconfig} {problem}: pass --kubeconfig or set KUBECONFIG to an existing file",
            file=sys.stderr,
        )
        return 2
    configure_logging(verbose=args.verbose)
    try:
        asyncio.run(_run(args))
    except KeyboardInterrupt:
        return 130
    except RunSetupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (ConfigException, yaml.YAMLError) as error:
        # A kubeconfig that is not YAML reaches here as the parser's error, not a ConfigException.
        detail = " ".join(str(error).split()).rstrip(".")
        if kubeconfig is None:
            print(f"error: in-cluster configuration: {detail}; check the pod's service account", file=sys.stderr)
        else:
            print(
                f"error: kubeconfig {kubeconfig}: {detail}; fix it or pass another with --kubeconfig", file=sys.stderr
            )
        return 2
    return 0


def _whole_number(low: int, high: int, what: str) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high], else a one-line error saying ``what``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range: {what}")
        return value

    return parse


_port = _whole_number(0, 65535, "a port is 0-65535 (0 picks a free one)")


#: The bounds of --interval, and of the chart's operator.reconcileIntervalSeconds.
MIN_RECONCILE_INTERVAL_S = 1.0
MAX_RECONCILE_INTERVAL_S = 3600.0


def _reconcile_interval(text: str) -> float:
    """An argparse type: seconds between reconciles, at least 1 and at most 3600 (as the chart allows).

    0 would reconcile every object in a busy loop, and so would any tiny fraction (1e-7 was taken):
    pod events wake a reconcile early anyway, so nothing needs a shorter period. nan and inf would
    never reconcile again.
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not MIN_RECONCILE_INTERVAL_S <= value <= MAX_RECONCILE_INTERVAL_S:  # also false for nan
        raise argparse.ArgumentTypeError(
            f"{text} is out of range: at least {MIN_RECONCILE_INTERVAL_S:g} and at most "
            f"{MAX_RECONCILE_INTERVAL_S:g} seconds"
        )
    return value


_positive_int = _whole_number(1, 1000, "1-1000, as the chart allows")
#: A group id the pods may take for the Neuron devices: not 0 (root's group), within Linux's gids.
_device_gid = _whole_number(1, 2**31 - 1, "a group id is 1 to 2147483647 (0, root's group, is refused)")


def _liveness_url(text: str) -> str:
    """An argparse type: an ``http://host:port/path`` URL, as Kopf's probe server reads it."""
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None
    if parts.scheme != "http":
        raise argparse.ArgumentTypeError(
            f"{text!r}: an http:// URL, e.g. http://0.0.0.0:8080/healthz (http://[::]:8080/healthz on an IPv6 cluster)"
        )
    return text


def _listen_address(text: str) -> str:
    """An argparse type: the address to serve the metrics on, an IP or a host name; an IPv6
    address may come in brackets, as in a URL (``[::]``), and is returned without them.

    Checked here, before anything connects: ``[::]`` was taken for a host name and failed only
    once the operator had connected to the API server.
    """
    address = text.strip()
    if address.startswith("[") and address.endswith("]"):
        inner = address[1:-1]
        if _is_ipv6(inner):
            return inner
        raise argparse.ArgumentTypeError(f"{text!r}: brackets hold an IPv6 address, e.g. [::]")
    if not address or any(c in address for c in "[]/ ") or (":" in address and not _is_ipv6(address)):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an address: an IP or a host name, e.g. 0.0.0.0 or :: (the port is --metrics-port)"
        )
    return address


def _is_ipv6(text: str) -> bool:
    return _ip_version(text) == 6


def check_liveness_endpoint(url: str) -> None:
    """Fail with one line if the liveness endpoint's address cannot be bound.

    Kopf binds it inside its own tasks, where a port in use ends in a traceback; checking first
    (and letting go at once) turns the common case into a clear error.
    """
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "localhost", parts.port or 80
    # An IPv6 address ([::] on an IPv6 cluster) needs an IPv6 socket: create_server's default is IPv4.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.create_server((host, port), family=family):
            pass
    except OSError as error:
        reason = os.strerror(error.errno) if error.errno else str(error)
        raise RunSetupError(f"cannot serve the liveness endpoint {url}: {reason}") from None


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run",
        help="run the operator against a cluster (in a pod: its service account; else $KUBECONFIG or ~/.kube/config)",
        description="Run the InferenceDeployment operator. In a pod it uses its service account; elsewhere "
        "--kubeconfig, else the files $KUBECONFIG lists (e.g. the one `neuronfleet sandbox up` writes), else "
        "~/.kube/config. Exec plugins (EKS's `aws eks get-token`) are run for every login.",
    )
    p.add_argument(
        "--kubeconfig",
        type=Path,
        help="kubeconfig to use (default: in a pod its service account, else $KUBECONFIG, else ~/.kube/config)",
    )
    p.add_argument("-n", "--namespace", action="append", help="watch only this namespace (repeatable; default: all)")
    p.add_argument(
        "--artifact-store",
        default=None,
        help="default store of compiled artifacts: s3://bucket/prefix or a directory "
        "(a spec's compile.artifactStore overrides it; env NEURONFLEET_ARTIFACT_STORE; "
        f"default {DEFAULT_ARTIFACT_STORE}). "
        f"Beside a sandbox's kubeconfig, {SANDBOX_ENV_FILE} supplies it and the S3 endpoint",
    )
    p.add_argument(
        "--neuron-scheduler",
        default=None,
        help="schedulerName of the Neuron scheduler extension for pods whose spec names none "
        "(env NEURONFLEET_NEURON_SCHEDULER); needed for replicas of more than one NeuronCore that do "
        "not take a whole node (contiguous cores), warned about at start-up when unset",
    )
    p.add_argument(
        "--model-server-image",
        default=None,
        help="image of the model server (neuronserve, a Neuron build on Inf2) for the serving, "
        "placeholder and compile pods of specs that name none (env NEURONFLEET_MODEL_SERVER_IMAGE; "
        f"default {DEFAULT_IMAGE})",
    )
    p.add_argument(
        "--daemonset-headroom-cpu",
        default=None,
        metavar="QUANTITY",
        help="CPU left on every Inf2 node for its DaemonSets, beside the replicas' shares of the rest "
        "(env NEURONFLEET_DAEMONSET_HEADROOM_CPU; default "
        f"{DAEMONSET_HEADROOM_CPU}): at least the sum of the DaemonSets' requests, or a node's last replica "
        "stays Pending (docs/install-eks.md measures it)",
    )
    p.add_argument(
        "--daemonset-headroom-memory",
        default=None,
        metavar="QUANTITY",
        help="memory left on every Inf2 node for its DaemonSets (env NEURONFLEET_DAEMONSET_HEADROOM_MEMORY; "
        f"default {DAEMONSET_HEADROOM_MEMORY})",
    )
    p.add_argument(
        "--compile-service-account",
        type=_service_account_name,
        default=None,
        metavar="NAME",
        help="ServiceAccount of the compile Jobs of specs that name none (spec.compile.serviceAccountName; env "
        "NEURONFLEET_COMPILE_SERVICE_ACCOUNT; default: the namespace's default account): the one account "
        "whose role writes the artifact store. It must exist in each workload namespace",
    )
    p.add_argument(
        "--serving-service-account",
        type=_service_account_name,
        default=None,
        metavar="NAME",
        help="ServiceAccount of the serving pods of specs that name none (spec.runtime.serviceAccountName; env "
        "NEURONFLEET_SERVING_SERVICE_ACCOUNT; default: the namespace's default account), with a read-only role "
        "on the artifact store. It must exist in each workload namespace",
    )
    p.add_argument(
        "--operator-service-account",
        default=None,
        metavar="NAME",
        help="the ServiceAccount this operator runs as (env NEURONFLEET_OPERATOR_SERVICE_ACCOUNT; the chart sets "
        "it from the pod's spec.serviceAccountName), with --operator-namespace: a spec in that namespace whose "
        "compile Job or serving pods would run as it is refused (Degraded InvalidSpec: they would get the "
        "operator's IAM role), and so is --compile-service-account or --serving-service-account naming it. "
        "Unset (outside a pod): nothing is refused",
    )
    p.add_argument(
        "--operator-namespace",
        default=None,
        metavar="NAMESPACE",
        help="the namespace this operator runs in (env NEURONFLEET_OPERATOR_NAMESPACE; the chart sets it from the "
        "pod's metadata.namespace), with --operator-service-account",
    )
    p.add_argument(
        "--device-group-id",
        type=_device_gid,
        default=None,
        metavar="GID",
        help="group that owns the Neuron devices (/dev/neuron*) on the nodes, when a udev rule makes them "
        'GROUP="neuron", MODE="0660" instead of the EKS AMI\'s 0666: serving pods and compile Jobs get it as a '
        "supplemental group, or their non-root user cannot open the devices (env NEURONFLEET_DEVICE_GROUP_ID; "
        "default none)",
    )
    p.add_argument(
        "--prometheus-url",
        default=None,
        help="Prometheus for the autoscaler's signals (a spec's scaling.metrics.prometheusUrl overrides it; "
        "env NEURONFLEET_PROMETHEUS_URL). Put no credentials in it: use the --prometheus-*-file flags",
    )
    p.add_argument(
        "--prometheus-bearer-token-file",
        default=None,
        metavar="PATH",
        help="file holding a bearer token sent to --prometheus-url only, never to a spec's prometheusUrl (env "
        "NEURONFLEET_PROMETHEUS_BEARER_TOKEN_FILE); read again when it changes, so a rotated token needs no restart",
    )
    p.add_argument(
        "--prometheus-username",
        default=None,
        metavar="NAME",
        help="HTTP basic auth user for --prometheus-url, with --prometheus-password-file (env "
        "NEURONFLEET_PROMETHEUS_USERNAME)",
    )
    p.add_argument(
        "--prometheus-password-file",
        default=None,
        metavar="PATH",
        help="file holding the basic auth password for --prometheus-url only (env "
        "NEURONFLEET_PROMETHEUS_PASSWORD_FILE); read again when it changes",
    )
    p.add_argument(
        "--prometheus-sigv4-region",
        default=None,
        metavar="REGION",
        help="sign requests to --prometheus-url with AWS SigV4 for Amazon Managed Service for Prometheus in REGION "
        "(env NEURONFLEET_PROMETHEUS_SIGV4_REGION), with the credentials botocore finds: on EKS the "
        "ServiceAccount's IAM role (IRSA or EKS Pod Identity), renewed before they expire; it needs "
        "aps:QueryMetrics. Not with a bearer token or basic auth; never sent to a spec's prometheusUrl",
    )
    p.add_argument(
        "--prometheus-ca-file",
        default=None,
        metavar="PATH",
        help="CA bundle (PEM) trusted besides the system's CAs (or REQUESTS_CA_BUNDLE's) to verify Prometheus' "
        "TLS certificate, for a private CA (env NEURONFLEET_PROMETHEUS_CA_FILE); for spec URLs too. Read again "
        "when it changes",
    )
    p.add_argument(
        "--prometheus-allowed-url",
        action="append",
        default=None,
        metavar="PREFIX",
        help="allow a spec's scaling.metrics.prometheusUrl under this scheme://host[:port][/path] (repeatable; env "
        "NEURONFLEET_PROMETHEUS_ALLOWED_URLS, comma-separated). Scheme, host and port must be equal (host exactly, "
        "never a suffix) and the path at or under PREFIX's on a '/' boundary. 'none' allows no spec URL. Default: "
        "any URL (a spec can then make the operator request any address it reaches). A URL not allowed is not "
        "requested: ScalingActive says PrometheusUrlNotAllowed and the autoscaler holds. A spec's URL is never "
        "followed through a redirect",
    )
    p.add_argument(
        "--prometheus-refuse-query-overrides",
        action="store_true",
        default=False,
        help="run only the default queries against --prometheus-url: a spec naming no prometheusUrl whose "
        "scaling.metrics queries differ from the defaults is asked nothing (they would run with the operator's "
        "credentials and their values show in its status); ScalingActive says PrometheusQueryNotAllowed and the "
        "autoscaler holds (env NEURONFLEET_PROMETHEUS_REFUSE_QUERY_OVERRIDES=true)",
    )
    p.add_argument(
        "--interval",
        type=_reconcile_interval,
        default=OperatorSettings.interval_seconds,
        help="seconds between reconciles of one object when nothing wakes it earlier (default %(default)g; at "
        "least 1, at most 3600)",
    )
    p.add_argument(
        "--max-concurrent-reconciles",
        type=_positive_int,
        default=OperatorSettings.max_concurrent_reconciles,
        metavar="N",
        help="reconciles running at once across objects, 1-1000 (default %(default)s); the operator's "
        "Kubernetes client may open this many connections to the API server, and 100 more",
    )
    p.add_argument("--peering", help="Kopf peering name for high availability (one instance acts)")
    p.add_argument(
        "--priority", type=int, default=0, help="peering priority of this instance (default 0; the highest acts)"
    )
    p.add_argument(
        "--liveness",
        type=_liveness_url,
        help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz (http://[::]:8080/healthz on an IPv6 cluster)",
    )
    p.add_argument(
        "--metrics-port",
        type=_port,
        default=None,
        help="serve the operator's own Prometheus metrics on this port (reconciles, errors, replicas)",
    )
    p.add_argument(
        "--metrics-address",
        type=_listen_address,
        default="0.0.0.0",
        metavar="ADDRESS",
        help="address the metrics are served on (default 0.0.0.0: IPv4; '::' or '[::]' on an IPv6 cluster, where "
        "pods have only an IPv6 address: the chart's ipFamily: IPv6 sets it)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.set_defaults(func=_cmd_run)
