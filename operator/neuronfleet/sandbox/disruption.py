"""PodDisruptionBudgets as the eviction API applies them (``pods/eviction``).

An eviction of a Ready pod covered by a PDB is refused with 429 when it would leave fewer healthy
pods than ``minAvailable`` (or more unavailable than ``maxUnavailable``); integer and percentage
values are supported. As kube-apiserver's eviction handler: a pod that has ended, is Pending or is
being deleted is deleted without a look at any budget; a Running pod that is not Ready is evicted
when its budget's ``unhealthyPodEvictionPolicy`` is AlwaysAllow, or (IfHealthyBudget, the default)
when the budget has its desired healthy pods, and otherwise only as a healthy one would be; a pod
two budgets select is refused with 500. A budget's empty selector (``{}``) selects every pod of its
namespace and a missing one none (policy/v1). ``DisruptionController`` keeps each PDB's ``status``
current.

The pods expected are counted as kube-controller-manager's disruption controller counts them: the
selected pods for an integer ``minAvailable``; otherwise (``maxUnavailable``, a percentage) the
replicas of the pods' controllers, read as their ``/scale`` reads them (a custom resource's
``specReplicasPath``, 0 when unset), and no disruption at all when that comes to 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from typing import Any

from neuronfleet.sandbox.clock import run_controller
from neuronfleet.sandbox.conditions import disruption_target, set_condition
from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.nodes import pod_has_ended, pod_is_ready
from neuronfleet.sandbox.resources import json_path_value
from neuronfleet.sandbox.selectors import LabelSelector, selector_from_dict
from neuronfleet.sandbox.store import Obj, Store, WatchEvent


def _ready(pod: Obj) -> bool:
    """Healthy to a budget: Ready, and not being deleted."""
    return not pod["metadata"].get("deletionTimestamp") and pod_is_ready(pod)


def _resolve(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        fraction = float(value[:-1]) / 100.0 * total
        return math.ceil(fraction) if round_up else math.floor(fraction)
    return int(value)


def _counts_selected_pods(spec: Obj) -> bool:
    """An integer minAvailable: the budget counts the pods it selects, not their controllers' scale."""
    return "minAvailable" in spec and not isinstance(spec["minAvailable"], str)


def controllers_scale(store: Store, pods: list[Obj]) -> int:
    """The replicas the pods' controllers want, as the disruption controller reads them: each
    controller once, through its scale subresource (a custom resource's ``specReplicasPath``;
    ``spec.replicas`` of a built-in one); a controller without either counts 0, pods without one none."""
    total = 0
    seen: set[str] = set()
    for pod in pods:
        for ref in pod["metadata"].get("ownerReferences") or []:
            if not ref.get("controller") or ref.get("uid") in seen:
                continue
            seen.add(ref.get("uid", ""))
            group = ref.get("apiVersion", "").rpartition("/")[0]
            rt = next((r for r in store.resources.values() if r.group == group and r.kind == ref.get("kind")), None)
            owner = store.try_get(rt, pod["metadata"].get("namespace"), ref.get("name", "")) if rt else None
            if rt is None or owner is None:
                continue
            if rt.scale is not None:
                total += int(json_path_value(owner, rt.scale.spec_replicas_path) or 0)
            elif isinstance((owner.get("spec") or {}).get("replicas"), int):
                total += owner["spec"]["replicas"]
    return total


def disruptions_allowed(pdb: Obj, pods: list[Obj], store: Store | None = None) -> tuple[int, int, int, int]:
    """(disruptions allowed, desired healthy, currently healthy, expected) for the pods ``pdb``
    selects; ``store`` reads their controllers' scale (without it, the pods are the expected ones)."""
    spec = pdb.get("spec") or {}
    expected = len(pods) if store is None or _counts_selected_pods(spec) else controllers_scale(store, pods)
    healthy = sum(1 for p in pods if _ready(p))
    if "minAvailable" in spec:
        desired = _resolve(spec["minAvailable"], expected, round_up=True)
    elif "maxUnavailable" in spec:
        desired = max(0, expected - _resolve(spec["maxUnavailable"], expected, round_up=True))
    else:
        desired = 0
    # As the disruption controller: no pods expected, no disruption allowed.
    allowed = max(0, healthy - desired) if expected > 0 else 0
    return allowed, desired, healthy, expected


def budget_selector(pdb: Obj) -> LabelSelector | None:
    """The pods a budget selects (policy/v1: an empty selector every pod, a missing one none, nor
    one that does not parse)."""
    raw = (pdb.get("spec") or {}).get("selector")
    if raw is None:
        return None
    try:
        return selector_from_dict(raw)
    except ApiError:
        return None


def check_eviction(store: Store, pod: Obj) -> None:
    """Raise 429 TooManyRequests if evicting ``pod`` would violate a PodDisruptionBudget (500 if two
    select it), as kube-apiserver's eviction handler decides (see the module docstring)."""
    pending = (pod.get("status") or {}).get("phase") == "Pending"
    if pod_has_ended(pod) or pending or pod["metadata"].get("deletionTimestamp"):
        return  # canIgnorePDB: it disrupts nothing more
    namespace = pod["metadata"]["namespace"]
    budgets = []
    for pdb in store.iter(store.resource("policy", "poddisruptionbudgets"), namespace):
        selector = budget_selector(pdb)
        if selector is not None and selector.matches(pod["metadata"].get("labels")):
            budgets.append((pdb, selector))
    if len(budgets) > 1:
        raise ApiError(
            500, "", "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
        )
    pods = list(store.iter(store.resource("", "pods"), namespace))
    for pdb, selector in budgets:
        covered = [p for p in pods if selector.matches(p["metadata"].get("labels"))]
        allowed, desired, healthy, _ = disruptions_allowed(pdb, covered, store)
        if not _ready(pod):
            policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy")
            if policy == "AlwaysAllow" or (healthy >= desired and desired > 0):
                return  # it counts in neither healthy nor desired: the budget stays as it is
        if allowed <= 0:
            name = pdb["metadata"]["name"]
            raise ApiError(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
                {
                    "causes": [
                        {
                            "reason": "DisruptionBudget",
                            "message": f"The disruption budget {name} needs {desired} healthy pods "
                            f"and has {healthy} currently",
                        }
                    ]
                },
            )


def mark_evicted(store: Store, pod: Obj) -> None:
    """Set the DisruptionTarget condition an eviction gives the pod before deleting it (a Job's pod
    failure policy reads it)."""
    condition = disruption_target("EvictionByEvictionAPI", "Eviction API: evicting", store.clock.timestamp())
    meta = pod["metadata"]
    store.update(
        store.resource("", "pods"),
        meta["namespace"],
        meta["name"],
        lambda o: set_condition(o, condition),
        subresource="status",
    )


class DisruptionController:
    """Keeps PodDisruptionBudget ``status`` current, as kube-controller-manager's disruption
    controller does: expectedPods, currentHealthy, desiredHealthy, disruptionsAllowed and the
    DisruptionAllowed condition.

    Like that controller it works from events: a pod's change marks the budgets that select it
    (before or after the change), a budget's change marks that budget, and a round recomputes the
    marked ones only. Recomputing every budget on every pod change costs budgets x pods per change,
    which at a thousand deployments was most of the sandbox's CPU.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._pdbs = store.resource("policy", "poddisruptionbudgets")
        self._pods = store.resource("", "pods")
        self._wake = asyncio.Event()
        #: Budgets to recompute next round; None: all of them (the first round).
        self._marked: set[tuple[str, str]] | None = None
        #: Each budget's parsed selector, by (namespace, name), with the resourceVersion it was read at.
        self._selectors: dict[tuple[str, str], tuple[str, LabelSelector | None]] = {}
        store.listeners.append(self._on_event)

    def _selector(self, pdb: Obj) -> LabelSelector | None:
        """The budget's selector; None if it has none or it does not parse (the budget selects nothing)."""
        meta = pdb["metadata"]
        key, version = (meta["namespace"], meta["name"]), str(meta.get("resourceVersion", ""))
        cached = self._selectors.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        selector = budget_selector(pdb)
        self._selectors[key] = (version, selector)
        return selector

    def _mark(self, key: tuple[str, str]) -> None:
        if self._marked is not None:
            self._marked.add(key)
        self._wake.set()

    def _on_event(self, event: WatchEvent) -> None:
        meta = event.obj["metadata"]
        if event.resource == ("policy", "poddisruptionbudgets"):
            key = (meta["namespace"], meta["name"])
            if event.type == "DELETED":
                self._selectors.pop(key, None)
            else:
                self._mark(key)
        elif event.resource == ("", "pods"):
            labels = [meta.get("labels")]
            if event.old is not None:
                labels.append(event.old["metadata"].get("labels"))
            for pdb in self.store.iter(self._pdbs, meta.get("namespace")):
                selector = self._selector(pdb)
                if selector is not None and any(selector.matches(each) for each in labels):
                    self._mark((pdb["metadata"]["namespace"], pdb["metadata"]["name"]))

    async def run(self) -> None:
        await run_controller("disruption controller", self.sync, self._wake, None)

    def sync(self) -> None:
        now = self.store.clock.timestamp()
        marked, self._marked = self._marked, set()
        if marked is None:
            budgets = list(self.store.iter(self._pdbs))
        else:
            found = (self.store.try_get(self._pdbs, namespace, name) for namespace, name in sorted(marked))
            budgets = [pdb for pdb in found if pdb is not None]
        pods_in: dict[str, list[Obj]] = {}
        for pdb in budgets:
            meta = pdb["metadata"]
            selector = self._selector(pdb)
            if meta["namespace"] not in pods_in:
                pods_in[meta["namespace"]] = list(self.store.iter(self._pods, meta["namespace"]))
            pods = (
                []
                if selector is None
                else [p for p in pods_in[meta["namespace"]] if selector.matches(p["metadata"].get("labels"))]
            )
            allowed, desired, healthy, expected = disruptions_allowed(pdb, pods, self.store)
            status = {
                "observedGeneration": meta.get("generation", 1),
                "disruptionsAllowed": allowed,
                "currentHealthy": healthy,
                "desiredHealthy": desired,
                "expectedPods": expected,
            }
            condition = {
                "type": "DisruptionAllowed",
                "status": "True" if allowed > 0 else "False",
                "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
                "message": "",
                "observedGeneration": meta.get("generation", 1),
                "lastTransitionTime": now,
            }

            def write(o: Obj, status: dict[str, Any] = status, condition: dict[str, Any] = condition) -> None:
                current = o.get("status") or {}
                o["status"] = {**current, **status}
                set_condition(o, condition)

            with contextlib.suppress(ApiError):
                self.store.update(self._pdbs, meta["namespace"], meta["name"], write, subresource="status")
