"""What a ResourceQuota counts of a pod, in the words of kube-apiserver's quota admission (pure).

The store's pod admission (:meth:`neuronfleet.sandbox.store.Store._check_resource_quotas`) asks these:
which of a quota's hard resources are pods' (pkg/quota/v1/evaluator/core/pods.go, podResources and
isExtendedResourceNameForQuota), what one pod uses of them (podComputeUsageHelper: containers summed,
init containers' maximum), which of the cpu and memory ones a container leaves unset (Constraints),
and a quantity as the API server prints it (resource.Quantity's canonical String()). Also which
pods a quota's ``scopes`` and ``scopeSelector`` take in (pods.go, podMatchesScopeFunc: every scope
kube-apiserver knows is emulated) and the quota's spec validation of them (pkg/apis/core/validation,
validateResourceQuotaScopes and validateScopedResourceSelectorRequirement).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from neuronfleet.api.validation import go_quote
from neuronfleet.sandbox.nodes import pod_has_ended, quantity

#: Resources of pods a quota can cap by name (pods.go, podResources; ``count/pods`` is not emulated).
POD_RESOURCES = frozenset(
    {
        "pods",
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
    }
)

#: pods.go's validationSet: a quota capping one of these refuses a container that sets no value of
#: it ("it was a mistake ... do not add more resources to this list").
MUST_SPECIFY = frozenset({"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"})

_NATIVE_DOMAIN = "kubernetes.io/"


def _extended(resource: str) -> bool:
    """Not a native resource (helper.IsNativeResource: one with no domain, or kubernetes.io's)."""
    return "/" in resource and _NATIVE_DOMAIN not in resource


def quota_tracks_for_pods(name: str) -> bool:
    """Whether a quota's hard resource ``name`` counts pods (MatchingResources): a pod resource, or an
    extended resource's request (``requests.aws.amazon.com/neuroncore``: only requests are allowed)."""
    return name in POD_RESOURCES or (name.startswith("requests.") and _extended(name.removeprefix("requests.")))


def _container_usage(container: dict[str, Any]) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    # The API's defaulting: a request left unset is its limit.
    requests = {**limits, **(resources.get("requests") or {})}
    usage: dict[str, Decimal] = {}
    for native in ("cpu", "memory", "ephemeral-storage"):
        if native in requests:
            usage[native] = usage[f"requests.{native}"] = quantity(requests[native])
        if native in limits:
            usage[f"limits.{native}"] = quantity(limits[native])
    for name, value in requests.items():
        if _extended(str(name)):
            usage[f"requests.{name}"] = quantity(value)
    return usage


def pod_quota_usage(spec: dict[str, Any]) -> dict[str, Decimal]:
    """What a pod of ``spec`` takes of each resource a quota can cap (pod overhead not emulated)."""
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for name, value in _container_usage(container).items():
            total[name] = total.get(name, Decimal(0)) + value
    for container in spec.get("initContainers") or []:
        for name, value in _container_usage(container).items():
            total[name] = max(total.get(name, Decimal(0)), value)
    total["pods"] = Decimal(1)
    return total


def namespace_quota_usage(
    pods: Iterable[dict[str, Any]], quota_spec: dict[str, Any] | None = None
) -> dict[str, Decimal]:
    """What ``pods`` (a namespace's; with ``quota_spec``, those in its scopes) use of every resource a
    quota can cap: the sum over those not terminal (Succeeded, Failed). A pod being deleted counts
    until it is gone (the real evaluator, QuotaV1Pod, stops at its deletionTimestamp plus grace
    period, by when the sandbox's kubelet has had it removed)."""
    used: dict[str, Decimal] = {}
    for pod in pods:
        if pod_has_ended(pod):
            continue
        if quota_spec is not None and not pod_in_quota_scopes(quota_spec, pod.get("spec") or {}):
            continue
        for name, value in pod_quota_usage(pod.get("spec") or {}).items():
            used[name] = used.get(name, Decimal(0)) + value
    return used


def quota_status(hard: dict[str, Any], used: dict[str, Decimal]) -> dict[str, Any]:
    """A quota's ``status`` as the quota controller writes it: its hard and what is used of each."""
    return {
        "hard": dict(hard),
        "used": {
            name: format_quantity(used.get(name, Decimal(0)), name) for name in hard if quota_tracks_for_pods(name)
        },
    }


def quota_constraint_problem(spec: dict[str, Any], tracked: set[str]) -> str:
    """pods.go's Constraints: ``must specify <resource> for: <containers>; ...`` (resources and
    container names sorted, names joined by commas) for the cpu and memory resources of ``tracked``
    a container sets no value of; empty when none."""
    required = tracked & MUST_SPECIFY
    missing: dict[str, set[str]] = {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        for resource in required - _container_usage(container).keys():
            missing.setdefault(resource, set()).add(str(container.get("name", "")))
    if not missing:
        return ""
    return "must specify " + "; ".join(f"{r} for: {','.join(sorted(missing[r]))}" for r in sorted(missing))


_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DECIMAL = (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3), ("", 0), ("m", -3), ("u", -6), ("n", -9))


def format_quantity(value: Decimal, resource: str) -> str:
    """``value`` as resource.Quantity prints it: memory and storage in the largest binary unit that
    divides it (``8Gi``), else decimal units (``2``, ``500m``, ``1500``); zero is ``0``."""
    if value == 0:
        return "0"
    binary = resource.endswith(("memory", "ephemeral-storage")) or resource.startswith("requests.hugepages-")
    if binary and value == value.to_integral_value():
        for suffix, factor in _BINARY:
            if value % factor == 0:
                return f"{int(value // factor)}{suffix}"
        return str(int(value))
    for suffix, exponent in _DECIMAL:
        scaled = value.scaleb(-exponent)
        if scaled == scaled.to_integral_value() and (exponent <= 0 or scaled % 1000 != 0 or suffix == "E"):
            return f"{int(scaled)}{suffix}"
    return f"{int(value.scaleb(9).to_integral_value(rounding='ROUND_CEILING'))}n"


#: The scopes kube-apiserver knows (helper.IsStandardResourceQuotaScope).
SCOPES = ("Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass", "CrossNamespacePodAffinity")
#: Scopes that only ``Exists`` may select in a scopeSelector (they are properties of a pod, not values).
_EXISTS_ONLY = ("Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "CrossNamespacePodAffinity")
#: What a scoped quota may cap among the standard quota resources (IsResourceQuotaScopeValidForResource):
#: pods, and cpu and memory; BestEffort pods only. Extended resources (NeuronCores) are not standard
#: ones, so any scope may cap them.
_SCOPED_RESOURCES = frozenset(
    {"pods", "cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}
)
#: helper.IsStandardQuotaResourceName (hugepages by prefix).
_STANDARD_QUOTA_RESOURCES = frozenset(
    {
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.storage",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
        "resourcequotas",
        "services",
        "replicationcontrollers",
        "secrets",
        "persistentvolumeclaims",
        "configmaps",
        "services.nodeports",
        "services.loadbalancers",
    }
)
_EXISTS_ONLY_MESSAGE = (
    "must be 'Exist' when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, "
    "ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity"
)


def _scope_selectors(quota_spec: dict[str, Any]) -> list[dict[str, Any]]:
    """generic.getScopeSelectorsFromQuota: each of ``scopes`` as an ``Exists``, then the scopeSelector's."""
    selectors = [{"scopeName": scope, "operator": "Exists"} for scope in quota_spec.get("scopes") or []]
    return selectors + list((quota_spec.get("scopeSelector") or {}).get("matchExpressions") or [])


def _best_effort(spec: dict[str, Any]) -> bool:
    """qos.GetPodQOS is BestEffort: no container sets a non-zero cpu or memory request or limit."""
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for side in ("requests", "limits"):
            for name in ("cpu", "memory"):
                value = (resources.get(side) or {}).get(name)
                if value is not None and quantity(value) > 0:
                    return False
    return True


def _cross_namespace_affinity(spec: dict[str, Any]) -> bool:
    """usesCrossNamespacePodAffinity: a pod (anti-)affinity term naming namespaces or a namespaceSelector."""
    affinity = spec.get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        terms = affinity.get(kind) or {}
        required = terms.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        preferred = [
            (t or {}).get("podAffinityTerm") or {}
            for t in terms.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        ]
        if any(
            (term or {}).get("namespaces") or (term or {}).get("namespaceSelector") is not None
            for term in [*required, *preferred]
        ):
            return True
    return False


def _pod_in_scope(selector: dict[str, Any], spec: dict[str, Any]) -> bool:
    """pods.go's podMatchesScopeFunc for one selector; an unknown scope matches no pod."""
    scope = selector.get("scopeName")
    deadline = spec.get("activeDeadlineSeconds")
    terminating = isinstance(deadline, int) and deadline >= 0
    if scope == "Terminating":
        return terminating
    if scope == "NotTerminating":
        return not terminating
    if scope == "BestEffort":
        return _best_effort(spec)
    if scope == "NotBestEffort":
        return not _best_effort(spec)
    if scope == "CrossNamespacePodAffinity":
        return _cross_namespace_affinity(spec)
    if scope == "PriorityClass":
        # A label selector on {"PriorityClass": <name>}, the map empty without a PriorityClass: NotIn
        # and DoesNotExist then match, as a label selector's do for a label that is absent.
        name = spec.get("priorityClassName") or ""
        values = [str(v) for v in selector.get("values") or []]
        operator = selector.get("operator")
        if operator == "In":
            return bool(name) and name in values
        if operator == "NotIn":
            return not name or name not in values
        if operator == "Exists":
            return bool(name)
        if operator == "DoesNotExist":
            return not name
    return False


def pod_in_quota_scopes(quota_spec: dict[str, Any], spec: dict[str, Any]) -> bool:
    """Whether a quota of ``quota_spec`` counts a pod of ``spec`` (generic.Matches: every scope must
    take the pod in; a quota without scopes takes in every pod)."""
    return all(_pod_in_scope(selector, spec) for selector in _scope_selectors(quota_spec))


def _go_strings(type_name: str, values: Any) -> str:
    """A string slice as Go's ``%#v`` prints it (``[]string{"a", "b"}``; nil as ``[]string(nil)``)."""
    if values is None:
        return f"[]{type_name}(nil)"
    return f"[]{type_name}{{" + ", ".join(go_quote(str(v)) for v in values) + "}"


def _go_scope_selector(selector: dict[str, Any]) -> str:
    """``*core.ScopeSelector`` as field errors print it (dereferenced, then ``%#v``)."""
    items = ", ".join(
        "core.ScopedResourceSelectorRequirement{"
        f"ScopeName:{go_quote(str(req.get('scopeName') or ''))}, "
        f"Operator:{go_quote(str(req.get('operator') or ''))}, "
        f"Values:{_go_strings('string', req.get('values'))}}}"
        for req in selector.get("matchExpressions") or []
    )
    expressions = "[]core.ScopedResourceSelectorRequirement(nil)"
    if selector.get("matchExpressions") is not None:
        expressions = f"[]core.ScopedResourceSelectorRequirement{{{items}}}"
    return f"core.ScopeSelector{{MatchExpressions:{expressions}}}"


def quota_scope_problems(quota_spec: dict[str, Any]) -> list[tuple[str, str]]:
    """The field errors kube-apiserver's validation finds in a quota's ``scopes`` and
    ``scopeSelector``, as (field, message), in its order and words: an unknown scope, a scope that
    cannot cap one of the ``hard`` resources (a PriorityClass-scoped quota of
    ``requests.ephemeral-storage``), conflicting scopes, a selector operator or values that do not fit."""
    hard = sorted(str(k) for k in quota_spec.get("hard") or {})
    standard = [
        k for k in hard if k in _STANDARD_QUOTA_RESOURCES or k.startswith(("hugepages-", "requests.hugepages-"))
    ]

    def valid_for(scope: Any, resource: str) -> bool:
        if scope == "BestEffort":
            return resource == "pods"
        return scope not in SCOPES or resource in _SCOPED_RESOURCES

    problems: list[tuple[str, str]] = []
    scopes = quota_spec.get("scopes")
    if scopes:
        shown = _go_strings("core.ResourceQuotaScope", scopes)
        for scope in scopes:
            if scope not in SCOPES:
                problems.append(("spec.scopes", f"Invalid value: {shown}: unsupported scope"))
            for resource in standard:
                if not valid_for(scope, resource):
                    problems.append(("spec.scopes", f"Invalid value: {shown}: unsupported scope applied to resource"))
        if _conflicting({str(s) for s in scopes}):
            problems.append(("spec.scopes", f"Invalid value: {shown}: conflicting scopes"))
    selector = quota_spec.get("scopeSelector")
    if isinstance(selector, dict):
        path = "spec.scopeSelector.matchExpressions"
        names = set()
        for req in selector.get("matchExpressions") or []:
            scope, operator, values = req.get("scopeName"), req.get("operator"), req.get("values")
            if scope not in SCOPES:
                problems.append(
                    (
                        f"{path}.scopeName",
                        f"Invalid value: {go_quote(str(scope or ''))}: unsupported scope",
                    )
                )
            for resource in standard:
                if not valid_for(scope, resource):
                    problems.append(
                        (path, f"Invalid value: {_go_scope_selector(selector)}: unsupported scope applied to resource")
                    )
            shown_operator = go_quote(str(operator or ""))
            if scope in _EXISTS_ONLY and operator != "Exists":
                problems.append((f"{path}.operator", f"Invalid value: {shown_operator}: {_EXISTS_ONLY_MESSAGE}"))
            if operator in ("In", "NotIn"):
                if not values:
                    problems.append(
                        (
                            f"{path}.values",
                            "Required value: must be at least one value when `operator` is 'In' or 'NotIn' "
                            "for scope selector",
                        )
                    )
            elif operator in ("Exists", "DoesNotExist"):
                if values:
                    problems.append(
                        (
                            f"{path}.values",
                            f"Invalid value: {_go_strings('string', values)}: must be no value when `operator` is "
                            "'Exist' or 'DoesNotExist' for scope selector",
                        )
                    )
            else:
                problems.append((f"{path}.operator", f"Invalid value: {shown_operator}: not a valid selector operator"))
            names.add(str(scope))
        if _conflicting(names):
            # The Go code shows the quota's ``scopes`` here, not the selector.
            shown = _go_strings("core.ResourceQuotaScope", quota_spec.get("scopes"))
            problems.append((path, f"Invalid value: {shown}: conflicting scopes"))
    return problems


def _conflicting(scopes: set[str]) -> bool:
    return {"BestEffort", "NotBestEffort"} <= scopes or {"Terminating", "NotTerminating"} <= scopes


#: The pattern resource.ParseQuantity's errors quote (splitREString), and the quantities it parses:
#: sign, digits with at most one dot, then one suffix it can interpret (binary, decimal SI, or a
#: decimal exponent).
QUANTITY_PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_PARSABLE = re.compile(r"[+-]?[0-9]*(\.[0-9]*)?(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?")
_EXPONENTS = {"k": "e3", "M": "e6", "G": "e9", "T": "e12", "P": "e15", "E": "e18", "m": "e-3", "u": "e-6", "n": "e-9"}


def quantity_decode_error(hard: dict[str, Any]) -> str:
    """resource.Quantity's UnmarshalJSON error for the first value of ``hard`` it cannot parse (the
    API server fails to decode the object: 400, not a field error); empty when all parse. A JSON
    number is a quantity, null a zero one; any other value is parsed as its JSON text, and fails."""
    for value in hard.values():
        if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
            continue
        text = value.strip() if isinstance(value, str) else json.dumps(value)
        if not text or _PARSABLE.fullmatch(text) is None:
            return f"quantities must match the regular expression '{QUANTITY_PATTERN}'"
    return ""


def canonical_quantity(text: str) -> str:
    """A parsed quantity as resource.Quantity's String() prints it, in the format its suffix chose:
    binary (``Ki``...), decimal exponent (``e3``), else decimal SI."""
    value = quantity(text)
    if re.search(r"[KMGTPE]i$", text):
        return format_quantity(value, "memory")
    shown = format_quantity(value, "cpu")
    if re.search(r"[0-9.][eE][+-]?[0-9]+$", text):
        suffix = shown.lstrip("-0123456789")
        return shown.removesuffix(suffix) + _EXPONENTS.get(suffix, "")
    return shown


def quota_hard_problems(hard: dict[str, Any]) -> list[tuple[str, str]]:
    """ValidateResourceQuotaSpec's field errors on ``hard`` (each key in sorted order; Go walks a
    map): a negative quantity, in its words. Call after :func:`quantity_decode_error` found none."""
    problems = []
    for name in sorted(hard, key=str):
        value = hard[name]
        if value is None:
            continue
        text = value.strip() if isinstance(value, str) else json.dumps(value)
        if quantity(text) < 0:
            problems.append(
                (
                    f"spec.hard[{name}]",
                    f'Invalid value: "{canonical_quantity(text)}": must be greater than or equal to 0',
                )
            )
    return problems
