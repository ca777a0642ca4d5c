"""Other deployments' pods on the fleet's nodes, as the operator counts them for the plan's ``neighbours``."""

from __future__ import annotations

from typing import Any

from neuronfleet.kube.jobs import LABEL_COMPILE_REQUEST
from neuronfleet.kube.observe import OccupancyReads, node_occupancy
from neuronfleet.planning.labels import LABEL_DEPLOYMENT, LABEL_ROLE


def pod(namespace: str, deployment: str, node: str | None, role: str = "active", **extra: Any) -> dict[str, Any]:
    labels = {LABEL_DEPLOYMENT: deployment, LABEL_ROLE: role, **extra.pop("labels", {})}
    return {
        "metadata": {"name": f"{deployment}-{node}-{role}", "namespace": namespace, "labels": labels, **extra},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": "Running"},
    }


def test_neighbours_are_the_pods_of_other_deployments_that_stay_on_the_fleets_nodes() -> None:
    pods = [
        pod("a", "emb", "n1"),
        pod("a", "emb", "n2", role="placeholder"),
        # Same name, another namespace: another deployment.
        pod("b", "emb", "n1"),
        pod("b", "llm", "n1", role="warm"),
        pod("b", "llm", "n2", role="placeholder"),
        # Leaving or not holding a node: not counted.
        pod("b", "llm", "n2", role="draining"),
        pod("b", "llm", "n2", deletionTimestamp="2026-12-05T03:00:00Z"),
        pod("b", "llm", None),
        pod("b", "llm", "n2", labels={LABEL_COMPILE_REQUEST: "r"}),
        pod("b", "other", "n3"),
    ]
    occupancy = node_occupancy(pods)
    assert occupancy.neighbours("a", "emb", {"n1", "n2"}) == {"n1": 2, "n2": 1}
    assert occupancy.neighbours("b", "llm", {"n1", "n2"}) == {"n1": 2, "n2": 1}
    assert occupancy.neighbours("b", "other", {"n3"}) == {}


def test_the_counts_are_made_once_per_list() -> None:
    reads = OccupancyReads()
    first = [pod("a", "emb", "n1")]
    assert reads.of(first) is reads.of(first)
    assert reads.of([*first, pod("b", "x", "n1")]).neighbours("a", "emb", {"n1"}) == {"n1": 1}
