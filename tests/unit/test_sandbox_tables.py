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
