"""Status conditions as Kubernetes controllers maintain them."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def set_condition(obj: Obj, condition: Obj) -> None:
    """Replace the condition of the same type, keeping lastTransitionTime if the status is unchanged."""
    status = obj.setdefault("status", {})
    conditions = status.setdefault("conditions", [])
    for i, existing in enumerate(conditions):
        if existing.get("type") == condition["type"]:
            if existing.get("status") == condition.get("status") and existing.get("lastTransitionTime"):
                condition = {**condition, "lastTransitionTime": existing["lastTransitionTime"]}
            conditions[i] = condition
            return
    conditions.append(condition)


def disruption_target(reason: str, message: str, now: str) -> Obj:
    """The DisruptionTarget condition Kubernetes sets on a pod it is about to delete for a
    disruption (preemption, an eviction, the pod GC), which a Job's pod failure policy reads."""
    return {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }
