"""Server-side printing: the ``meta.k8s.io/v1`` Table format ``kubectl get`` asks for.

CRDs get Name plus their ``additionalPrinterColumns`` (JSONPath via ``jsonpath-ng``); built-in
kinds get the columns ``kubectl get`` shows for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jsonpath_ng.exceptions import JsonPathParserError
from jsonpath_ng.ext.parser import parse as parse_jsonpath

from neuronfleet.sandbox.clock import Clock
from neuronfleet.sandbox.nodes import pod_is_ready
from neuronfleet.sandbox.resources import ResourceType

Obj = dict[str, Any]


def human_duration(seconds: float | None) -> str:
    """apimachinery's HumanDuration, what ``kubectl get`` shows as an age (``5m``, ``3h10m``, ``2d``)."""
    if seconds is None:
        return "<unknown>"
    s = int(seconds)
    # Up to a second ahead is clock skew, read as now; more is a time in the future.
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 730:
        return f"{d}d"
    if d < 365 * 8:
        return f"{d // 365}y{d % 365}d" if d % 365 else f"{d // 365}y"
    return f"{d // 365}y"


def _column(
    name: str, type_: str = "string", description: str = "", priority: int = 0, format_: str = ""
) -> dict[str, Any]:
    return {"name": name, "type": type_, "format": format_, "description": description, "priority": priority}


def _age(clock: Clock) -> Callable[[Obj], Any]:
    return lambda obj: human_duration(clock.seconds_since((obj.get("metadata") or {}).get("creationTimestamp")))


def _pod_ready(obj: Obj) -> str:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    total = len((obj.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_status(obj: Obj) -> str:
    """kubectl's STATUS of a pod, as kube-apiserver's printPod writes it: the pod's reason, else its
    phase, replaced by a container's waiting or terminated reason (the first container's wins);
    Completed reads Running (or NotReady) while another container still runs; Terminating for a
    deleted pod that has not ended (one that has, held by a finalizer, shows how it ended)."""
    status = obj.get("status") or {}
    phase = status.get("phase")
    reason = str(status.get("reason") or phase or "Unknown")
    running = False
    for container in reversed(status.get("containerStatuses") or []):
        state = container.get("state") or {}
        waiting, terminated = state.get("waiting") or {}, state.get("terminated")
        if waiting.get("reason"):
            reason = str(waiting["reason"])
        elif terminated is not None and terminated.get("reason"):
            reason = str(terminated["reason"])
        elif terminated is not None:
            signal = terminated.get("signal")
            reason = f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode', 0)}"
        elif container.get("ready") and "running" in state:
            running = True
    if reason == "Completed" and running:
        reason = "Running" if pod_is_ready(obj) else "NotReady"
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            return "Unknown"
        if phase not in ("Succeeded", "Failed"):
            return "Terminating"
    return reason


def _node_status(obj: Obj) -> str:
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    text = "Ready" if ready and ready.get("status") == "True" else "NotReady"
    if (obj.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def _event_object(obj: Obj) -> str:
    involved = obj.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


def _builtin_columns(rt: ResourceType, clock: Clock) -> list[tuple[dict[str, Any], Callable[[Obj], Any]]]:
    def name(obj: Obj) -> Any:
        return (obj.get("metadata") or {}).get("name", "")

    name_column = (_column("Name", description="Name of the object", format_="name"), name)
    age_column = (_column("Age", description="Time since creation"), _age(clock))
    if rt.key == ("", "pods"):
        return [
            name_column,
            (_column("Ready"), _pod_ready),
            (_column("Status"), _pod_status),
            (
                _column("Restarts", "string"),
                lambda o: str(
                    sum(int(c.get("restartCount", 0)) for c in (o.get("status") or {}).get("containerStatuses") or [])
                ),
            ),
            age_column,
            (_column("IP", priority=1), lambda o: (o.get("status") or {}).get("podIP", "<none>")),
            (_column("Node", priority=1), lambda o: (o.get("spec") or {}).get("nodeName", "<none>")),
        ]
    if rt.key == ("", "nodes"):
        return [
            name_column,
            (_column("Status"), _node_status),
            (_column("Roles"), lambda o: "<none>"),
            age_column,
            (_column("Version"), lambda o: ((o.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")),
            (
                _column("Instance-Type", priority=1),
                lambda o: ((o.get("metadata") or {}).get("labels") or {}).get("node.kubernetes.io/instance-type", ""),
            ),
        ]
    if rt.plural == "events":
        return [
            (
                _column("Last Seen"),
                lambda o: human_duration(clock.seconds_since(o.get("lastTimestamp") or o.get("eventTime"))),
            ),
            (_column("Type"), lambda o: o.get("type", "")),
            (_column("Reason"), lambda o: o.get("reason", "")),
            (_column("Object"), _event_object),
            (_column("Message"), lambda o: o.get("message", "")),
        ]
    if rt.key == ("", "namespaces"):
        return [name_column, (_column("Status"), lambda o: (o.get("status") or {}).get("phase", "")), age_column]
    return [name_column, age_column]


def _printer_columns(rt: ResourceType, clock: Clock) -> list[tuple[dict[str, Any], Callable[[Obj], Any]]]:
    columns: list[tuple[dict[str, Any], Callable[[Obj], Any]]] = [
        (
            _column("Name", description="Name must be unique within a namespace.", format_="name"),
            lambda o: (o.get("metadata") or {}).get("name", ""),
        )
    ]
    if not rt.printer_columns:
        return [*columns, (_column("Age"), _age(clock))]
    for spec in rt.printer_columns:
        type_ = str(spec.get("type", "string"))
        path = str(spec.get("jsonPath", ""))
        try:
            expression = parse_jsonpath("$" + path if path.startswith(".") else path)
        except (JsonPathParserError, Exception):
            expression = None

        def cell(obj: Obj, expression: Any = expression, type_: str = type_) -> Any:
            if expression is None:
                return None
            found = [m.value for m in expression.find(obj)]
            if not found:
                return None
            value = found[0]
            if type_ == "date":
                return human_duration(clock.seconds_since(str(value)))
            return value

        column_type = "string" if type_ == "date" else type_
        columns.append(
            (
                _column(
                    str(spec.get("name", "")),
                    column_type,
                    str(spec.get("description", "")),
                    int(spec.get("priority", 0)),
                    str(spec.get("format", "")),
                ),
                cell,
            )
        )
    return columns


def to_table(
    rt: ResourceType, objs: list[Obj], clock: Clock, include_object: str, resource_version: str
) -> dict[str, Any]:
    columns = _printer_columns(rt, clock) if rt.custom else _builtin_columns(rt, clock)
    rows = []
    for obj in objs:
        row: dict[str, Any] = {"cells": [fn(obj) for _, fn in columns]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata") or {},
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [definition for definition, _ in columns],
        "rows": rows,
    }
