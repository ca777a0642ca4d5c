"""Scheduling predicates shared by the scheduler and the provisioner (pure functions on objects).

Taints/tolerations, nodeSelector, required node affinity, resource fit, NeuronCore allocation on
the chip ring, and zone topology spread, following kube-scheduler's filter plugins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from neuronfleet.planning import catalog
from neuronfleet.sandbox.nodes import Resources, node_allocatable, pod_has_ended, pod_requests
from neuronfleet.sandbox.selectors import selector_from_dict

Obj = dict[str, Any]
#: Pod annotation listing the NeuronCore indices a pod was given on its node (as the device plugin
#: would export them in NEURON_RT_VISIBLE_CORES).
CORES_ANNOTATION = "neuronfleet.dev/neuroncores"


def labels_of(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def tolerates(pod: Obj, taint: Mapping[str, Any]) -> bool:
    for toleration in (pod.get("spec") or {}).get("tolerations") or []:
        if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
            continue
        operator = toleration.get("operator", "Equal")
        if operator == "Exists":
            if not toleration.get("key") or toleration.get("key") == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def untolerated_taint(pod: Obj, taints: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    for taint in taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(pod, taint):
            return taint
    return None


def _expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = str(expression.get("key"))
    operator = expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt") and key in labels and values:
        try:
            actual, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    return False


def node_matches(pod: Obj, labels: Mapping[str, str], node_name: str = "") -> bool:
    """nodeSelector and requiredDuringSchedulingIgnoredDuringExecution node affinity."""
    spec = pod.get("spec") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    for term in terms:
        expressions_ok = all(_expression_matches(e, labels) for e in term.get("matchExpressions") or [])
        fields_ok = all(
            _expression_matches({**e, "key": "metadata.name"}, {"metadata.name": node_name})
            for e in term.get("matchFields") or []
        )
        if (term.get("matchExpressions") or term.get("matchFields")) and expressions_ok and fields_ok:
            return True
    return False


def is_active(pod: Obj) -> bool:
    """Holds node resources: bound and not finished (terminating pods still hold them)."""
    return not pod_has_ended(pod)


def used_resources(pods: Iterable[Obj]) -> Resources:
    used: Resources = {}
    for pod in pods:
        for name, value in pod_requests(pod).items():
            used[name] = used.get(name, Decimal(0)) + value
    return used


def insufficient(pod: Obj, allocatable: Resources, used: Resources) -> list[str]:
    """Resource names the pod does not fit in (``Insufficient <name>``)."""
    missing = []
    for name, value in pod_requests(pod).items():
        if value <= 0:
            continue
        if used.get(name, Decimal(0)) + value > allocatable.get(name, Decimal(0)):
            missing.append(name)
    return missing


def cores_in_use(pods: Iterable[Obj]) -> set[int]:
    used: set[int] = set()
    for pod in pods:
        text = ((pod.get("metadata") or {}).get("annotations") or {}).get(CORES_ANNOTATION, "")
        for part in text.split(","):
            if part.strip().isdigit():
                used.add(int(part))
    return used


def allocate_cores(total: int, used: set[int], need: int, *, contiguous: bool, ring: bool) -> list[int] | None:
    """NeuronCore indices for a pod, or None.

    Contiguous allocation (the Neuron scheduler extension) takes a block of adjacent cores; on
    multi-chip instances the chips form a ring, so a block may wrap around. Among fitting blocks
    it takes the one in the smallest free run (best fit keeps large runs for large pods).
    """
    if need <= 0:
        return []
    free = [c for c in range(total) if c not in used]
    if len(free) < need:
        return None
    if not contiguous:
        return free[:need]
    starts = range(total) if ring else range(total - need + 1)
    best: tuple[int, int] | None = None
    for start in starts:
        block = [(start + i) % total for i in range(need)]
        if any(c in used for c in block):
            continue
        run = _free_run_length(total, used, start, ring)
        if best is None or (run, start) < best:
            best = (run, start)
    if best is None:
        return None
    return [(best[1] + i) % total for i in range(need)]


def _free_run_length(total: int, used: set[int], core: int, ring: bool) -> int:
    length = 1
    for step in (1, -1):
        current = core
        for _ in range(total - 1):
            nxt = current + step
            if ring:
                nxt %= total
            elif not 0 <= nxt < total:
                break
            if nxt in used or nxt == core:
                break
            length += 1
            current = nxt
    return min(length, total)


def node_cores(node: Obj) -> int:
    return int(node_allocatable(node).get(catalog.RESOURCE_NEURONCORE, Decimal(0)))


def node_chips(node: Obj) -> int:
    return int(node_allocatable(node).get(catalog.RESOURCE_NEURON_DEVICE, Decimal(0)))


def spread_violation(
    pod: Obj,
    node: Obj,
    nodes: list[Obj],
    pods_by_node: Mapping[str, list[Obj]],
    *,
    hard: bool,
    counts_cache: dict[int, dict[str, int]] | None = None,
) -> tuple[bool, int]:
    """Topology spread: (violates a DoNotSchedule constraint, skew penalty of ScheduleAnyway ones).

    The matching pods per domain depend on the pod and the cluster, not on the candidate node:
    ``counts_cache`` (one dict per pod and snapshot) keeps them across the nodes tried, which
    would otherwise cost nodes x (nodes + pods) per pod scheduled.
    """
    spec = pod.get("spec") or {}
    namespace = (pod.get("metadata") or {}).get("namespace")
    penalty = 0
    for index, constraint in enumerate(spec.get("topologySpreadConstraints") or []):
        is_hard = constraint.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
        key = str(constraint.get("topologyKey", ""))
        selector = selector_from_dict(constraint.get("labelSelector"))
        max_skew = int(constraint.get("maxSkew", 1))
        domain = labels_of(node).get(key)
        if domain is None:
            if is_hard and hard:
                return True, penalty
            continue
        domain_counts = counts_cache.get(index) if counts_cache is not None else None
        if domain_counts is None:
            domain_counts = {}
            for other in nodes:
                other_labels = labels_of(other)
                if key not in other_labels or not node_matches(pod, other_labels, other["metadata"]["name"]):
                    continue
                value = other_labels[key]
                domain_counts.setdefault(value, 0)
                for placed in pods_by_node.get(other["metadata"]["name"], []):
                    meta = placed.get("metadata") or {}
                    if (
                        meta.get("namespace") == namespace
                        and not meta.get("deletionTimestamp")
                        and selector.matches(meta.get("labels"))
                    ):
                        domain_counts[value] += 1
            if counts_cache is not None:
                counts_cache[index] = domain_counts
        counts = {**domain_counts}
        counts.setdefault(domain, 0)
        skew = counts[domain] + 1 - min(counts.values())
        if is_hard and hard and skew > max_skew:
            return True, penalty
        if not is_hard:
            penalty += counts[domain]
    return False, penalty


def preferred_affinity_weight(pod: Obj, labels: Mapping[str, str]) -> int:
    """Sum of the weights of the pod's preferred node-affinity terms the node matches."""
    node_affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    total = 0
    for term in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        expressions = (term.get("preference") or {}).get("matchExpressions") or []
        if expressions and all(_expression_matches(e, labels) for e in expressions):
            total += int(term.get("weight", 0))
    return total


def pod_affinity_violation(pod: Obj, node: Obj, nodes: list[Obj], pods_by_node: Mapping[str, list[Obj]]) -> str | None:
    """Required inter-pod affinity / anti-affinity (labelSelector, topologyKey, namespaces)."""
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    namespace = (pod.get("metadata") or {}).get("namespace")
    node_labels = labels_of(node)
    for kind, anti in (("podAffinity", False), ("podAntiAffinity", True)):
        for term in (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or []:
            key = str(term.get("topologyKey", ""))
            selector = selector_from_dict(term.get("labelSelector"))
            namespaces = set(term.get("namespaces") or [namespace])
            domain = node_labels.get(key)
            matched = False
            for other in nodes:
                if domain is None or labels_of(other).get(key) != domain:
                    continue
                for placed in pods_by_node.get(other["metadata"]["name"], []):
                    meta = placed.get("metadata") or {}
                    if meta.get("namespace") in namespaces and selector.matches(meta.get("labels")):
                        matched = True
            if anti and matched:
                return "node(s) didn't match pod anti-affinity rules"
            if not anti and not matched:
                return "node(s) didn't match pod affinity rules"
    return None
