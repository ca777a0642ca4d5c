"""The Table cells the sandbox serves ``kubectl get``, as kube-apiserver's printers fill them: ages in
apimachinery's HumanDuration, a pod's READY, STATUS and RESTARTS, a node's STATUS."""

from __future__ import annotations

from typing import Any

import pytest

from neuronfleet.sandbox.clock import Clock
from neuronfleet.sandbox.store import Store
from neuronfleet.sandbox.tables import human_duration, to_table

MINUTE, HOUR, DAY = 60, 3600, 86400


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-2, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (150, "2m30s"),
        (10 * MINUTE, "10m"),
        (3 * HOUR - 1, "179m"),
        (3 * HOUR, "3h"),
        (3 * HOUR + 30 * MINUTE, "3h30m"),
        (8 * HOUR + 30 * MINUTE, "8h"),
        (47 * HOUR, "47h"),
        (48 * HOUR, "2d"),
        (2 * DAY + 5 * HOUR, "2d5h"),
        (8 * DAY + 5 * HOUR, "8d"),
        (729 * DAY, "729d"),
        (730 * DAY, "2y"),
        (800 * DAY, "2y70d"),
        (8 * 365 * DAY + 10 * DAY, "8y"),
    ],
)
def test_an_age_reads_as_kubectl_shows_it(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown


def _cells(plural: str, obj: dict[str, Any]) -> dict[str, Any]:
    store = Store(Clock())
    rt = store.resource("", plural)
    table = to_table(rt, [obj], store.clock, "None", "1")
    return {c["name"]: cell for c, cell in zip(table["columnDefinitions"], table["rows"][0]["cells"], strict=True)}


def test_a_pods_row_counts_its_ready_containers_and_their_restarts() -> None:
    pod = {
        "metadata": {"name": "m", "creationTimestamp": "2026-12-06T00:00:00Z"},
        "spec": {"containers": [{"name": "server"}, {"name": "sidecar"}], "nodeName": "n1"},
        "status": {
            "phase": "Running",
            "podIP": "10.1.0.1",
            "containerStatuses": [
                {"name": "server", "ready": True, "restartCount": 1, "state": {"running": {}}},
                {
                    "name": "sidecar",
                    "ready": False,
                    "restartCount": 2,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                },
            ],
        },
    }
    cells = _cells("pods", pod)
    assert (cells["Ready"], cells["Status"], cells["Restarts"], cells["IP"], cells["Node"]) == (
        "1/2",
        "CrashLoopBackOff",
        "3",
        "10.1.0.1",
        "n1",
    )


def test_kubectl_get_shows_the_priority_0_columns_and_wide_adds_the_rest() -> None:
    store = Store(Clock())
    definitions = to_table(store.resource("", "pods"), [], store.clock, "None", "1")["columnDefinitions"]
    by_priority = {c["name"]: c["priority"] for c in definitions}
    assert by_priority == {"Name": 0, "Ready": 0, "Status": 0, "Restarts": 0, "Age": 0, "IP": 1, "Node": 1}


def test_a_kind_without_columns_of_its_own_shows_name_and_age() -> None:
    cells = _cells("configmaps", {"metadata": {"name": "settings", "creationTimestamp": "2026-12-06T00:00:00Z"}})
    assert list(cells) == ["Name", "Age"] and cells["Name"] == "settings" and cells["Age"] != "<unknown>"


def test_a_nodes_status_says_not_ready_and_cordoned() -> None:
    node = {
        "metadata": {"name": "n1", "creationTimestamp": "2026-12-06T00:00:00Z"},
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    }
    assert _cells("nodes", node)["Status"] == "NotReady,SchedulingDisabled"


def test_a_pods_status_is_its_reason_before_its_phase() -> None:
    def failed(**reason: str) -> dict[str, Any]:
        return {
            "metadata": {"name": "m", "creationTimestamp": "2026-12-06T00:00:00Z"},
            "spec": {"containers": [{"name": "server"}]},
            "status": {"phase": "Failed", **reason},
        }

    assert _cells("pods", failed(reason="Evicted"))["Status"] == "Evicted"
    assert _cells("pods", failed())["Status"] == "Failed"


def _pod(phase: str, *states: dict[str, Any], deleted: bool = False, **status: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "m", "creationTimestamp": "2026-12-06T00:00:00Z"}
    if deleted:
        metadata["deletionTimestamp"] = "2026-12-06T00:01:00Z"
    return {
        "metadata": metadata,
        "spec": {"containers": [{"name": f"c{i}"} for i in range(len(states))]},
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": f"c{i}", **state} for i, state in enumerate(states)],
            **status,
        },
    }


def test_a_pods_status_is_how_its_containers_ended_and_a_deleted_pod_that_ended_shows_that() -> None:
    completed = {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    error = {"state": {"terminated": {"exitCode": 143, "reason": "Error"}}}
    running = {"ready": True, "state": {"running": {}}}
    assert _cells("pods", _pod("Succeeded", completed))["Status"] == "Completed"
    assert _cells("pods", _pod("Failed", error))["Status"] == "Error"
    # The first container's end is what is shown.
    assert _cells("pods", _pod("Failed", error, completed))["Status"] == "Error"
    assert _cells("pods", _pod("Failed", completed, error))["Status"] == "Completed"
    no_reason = {"state": {"terminated": {"exitCode": 3}}}
    assert _cells("pods", _pod("Failed", no_reason))["Status"] == "ExitCode:3"
    signalled = {"state": {"terminated": {"exitCode": 137, "signal": 9}}}
    assert _cells("pods", _pod("Failed", signalled))["Status"] == "Signal:9"
    # A sidecar that completed beside a server still running: the pod is Running (or NotReady).
    ready = [{"type": "Ready", "status": "True"}]
    assert _cells("pods", _pod("Running", completed, running, conditions=ready))["Status"] == "Running"
    assert _cells("pods", _pod("Running", completed, running))["Status"] == "NotReady"
    # Deleted: Terminating until it ends; a finalizer's hold after its end shows how it ended.
    assert _cells("pods", _pod("Running", running, deleted=True))["Status"] == "Terminating"
    assert _cells("pods", _pod("Failed", error, deleted=True))["Status"] == "Error"
    assert _cells("pods", _pod("Running", running, deleted=True, reason="NodeLost"))["Status"] == "Unknown"
