"""PodDisruptionBudgets as the eviction API applies them (``pods/eviction``).

An eviction of a Ready pod covered by a PDB is refused with 429 when it would leave fewer healthy
pods than ``minAvailable`` (or more unavailable than ``maxUnavailable``); integer and percentage
values are supported. ``DisruptionController`` keeps each PDB's ``status`` current.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from typing import Any

from neuronfleet.sandbox.clock import run_controller
from neuronfleet.sandbox.conditions import set_condition
from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.selectors import selector_from_dict
from neuronfleet.sandbox.store import Obj, Store, WatchEvent


def _ready(pod: Obj) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _resolve(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        fraction = float(value[:-1]) / 100.0 * total
        return math.ceil(fraction) if round_up else math.floor(fraction)
    return int(value)


def disruptions_allowed(pdb: Obj, pods: list[Obj]) -> tuple[int, int, int]:
    """(disruptions allowed, desired healthy, currently healthy) for the pods ``pdb`` selects."""
    spec = pdb.get("spec") or {}
    expected = len(pods)
    healthy = sum(1 for p in pods if _ready(p))
    if "minAvailable" in spec:
        desired = _resolve(spec["minAvailable"], expected, round_up=True)
    elif "maxUnavailable" in spec:
        desired = max(0, expected - _resolve(spec["maxUnavailable"], expected, round_up=True))
    else:
        desired = 0
    return max(0, healthy - desired), desired, healthy


def check_eviction(store: Store, pod: Obj) -> None:
    """Raise 429 TooManyRequests if evicting ``pod`` would violate a PodDisruptionBudget."""
    if not _ready(pod):
        return  # evicting an unhealthy pod never reduces availability
    namespace = pod["metadata"]["namespace"]
    pods = [p for p in store.iter(store.resource("", "pods"), namespace)]
    for pdb in store.iter(store.resource("policy", "poddisruptionbudgets"), namespace):
        selector = selector_from_dict((pdb.get("spec") or {}).get("selector"))
        if selector.empty or not selector.matches(pod["metadata"].get("labels")):
            continue
        covered = [p for p in pods if selector.matches(p["metadata"].get("labels"))]
        allowed, desired, healthy = disruptions_allowed(pdb, covered)
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


class DisruptionController:
    """Keeps PodDisruptionBudget ``status`` current, as kube-controller-manager's disruption
    controller does: expectedPods, currentHealthy, desiredHealthy, disruptionsAllowed and the
    DisruptionAllowed condition."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._pdbs = store.resource("policy", "poddisruptionbudgets")
        self._pods = store.resource("", "pods")
        self._wake = asyncio.Event()
        store.listeners.append(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        if event.resource in (("", "pods"), ("policy", "poddisruptionbudgets")):
            self._wake.set()

    async def run(self) -> None:
        await run_controller("disruption controller", self.sync, self._wake, None)

    def sync(self) -> None:
        now = self.store.clock.timestamp()
        for pdb in list(self.store.iter(self._pdbs)):
            meta = pdb["metadata"]
            selector = selector_from_dict((pdb.get("spec") or {}).get("selector"))
            pods = (
                []
                if selector.empty
                else [
                    p
                    for p in self.store.iter(self._pods, meta["namespace"])
                    if selector.matches(p["metadata"].get("labels"))
                ]
            )
            allowed, desired, healthy = disruptions_allowed(pdb, pods)
            status = {
                "observedGeneration": meta.get("generation", 1),
                "disruptionsAllowed": allowed,
                "currentHealthy": healthy,
                "desiredHealthy": desired,
                "expectedPods": len(pods),
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
