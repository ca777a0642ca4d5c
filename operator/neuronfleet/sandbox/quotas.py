"""What a ResourceQuota counts of a pod, in the words of kube-apiserver's quota admission (pure).

The store's pod admission (:meth:`neuronfleet.sandbox.store.Store._check_resource_quotas`) asks these:
which of a quota's hard resources are pods' (pkg/quota/v1/evaluator/core/pods.go, podResources and
isExtendedResourceNameForQuota), what one pod uses of them (podComputeUsageHelper: containers summed,
init containers' maximum), which of the cpu and memory ones a container leaves unset (Constraints),
and a quantity as the API server prints it (resource.Quantity's canonical String()).
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from neuronfleet.sandbox.nodes import quantity

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


def namespace_quota_usage(pods: Iterable[dict[str, Any]]) -> dict[str, Decimal]:
    """What ``pods`` (a namespace's) use of every resource a quota can cap: the sum over those not
    terminal (Succeeded, Failed). A pod being deleted counts until it is gone (the real evaluator,
    QuotaV1Pod, stops at its deletionTimestamp plus grace period, by when the sandbox's kubelet has
    had it removed)."""
    used: dict[str, Decimal] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
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
