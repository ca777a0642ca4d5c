"""Other deployments' pods on the fleet's nodes, as the operator counts them for the plan's ``neighbours``:
from Kopf's index of the pods it watches (:func:`~neuronfleet.kube.observe.node_held` per pod), kept
here by Kopf's own indexer, so that what a pod's index entry becomes on a change is Kopf's doing."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime
from typing import Any

from kopf._core.engines.indexing import Key, OperatorIndexer

from neuronfleet.kube.jobs import LABEL_COMPILE_REQUEST
from neuronfleet.kube.observe import neighbours, node_held, observe_cluster
from neuronfleet.planning.labels import LABEL_DEPLOYMENT, LABEL_MANAGED_BY, LABEL_ROLE, MANAGED_BY


def pod(namespace: str, deployment: str, node: str | None, role: str = "active", **extra: Any) -> dict[str, Any]:
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_DEPLOYMENT: deployment, LABEL_ROLE: role, **extra.pop("labels", {})}
    status = {"phase": extra.pop("phase", "Running")}
    return {
        "metadata": {
            "name": f"{deployment}-{node}-{role}-{len(labels)}",
            "namespace": namespace,
            "uid": f"{namespace}-{deployment}-{node}-{role}-{sorted(extra)}-{sorted(labels.items())}",
            "labels": labels,
            "ownerReferences": [{"controller": True, "uid": f"uid-{namespace}-{deployment}"}],
            **extra,
        },
        "spec": {"nodeName": node} if node else {},
        "status": status,
    }


def _indexed(pods: list[dict[str, Any]]) -> OperatorIndexer:
    indexer = OperatorIndexer()
    for p in pods:
        indexer.replace(_key(p), node_held(p))
    return indexer


def _key(p: dict[str, Any]) -> Key:
    return (p["metadata"]["namespace"], p["metadata"]["name"], p["metadata"]["uid"])


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
        pod("b", "llm", "n2", phase="Succeeded"),
        pod("b", "llm", "n2", phase="Failed"),
        pod("b", "llm", None),
        pod("b", "llm", "n2", labels={LABEL_COMPILE_REQUEST: "r"}),
        # Not neuronfleet's (no managed-by label): not counted.
        pod("b", "llm", "n2", labels={LABEL_MANAGED_BY: "someone-else"}),
        pod("b", "other", "n3"),
    ]
    index = _indexed(pods).index
    assert neighbours(index, "a", "emb", {"n1", "n2"}) == {"n1": 2, "n2": 1}
    assert neighbours(index, "b", "llm", {"n1", "n2"}) == {"n1": 2, "n2": 1}
    assert neighbours(index, "b", "other", {"n3"}) == {}
    assert neighbours(index, "b", "other", {"n4"}) == {}


def test_a_pod_leaves_the_index_when_it_stops_holding_its_node() -> None:
    """Kopf re-runs the index function on each event of a pod and keeps what it returns: a pod
    that turns draining (or is being deleted, or ends) must leave its node's entry, not stay."""
    mine, other = pod("a", "emb", "n1"), pod("b", "llm", "n1")
    indexer = _indexed([mine, other])
    assert neighbours(indexer.index, "a", "emb", {"n1"}) == {"n1": 1}
    draining = copy.deepcopy(other)
    draining["metadata"]["labels"][LABEL_ROLE] = "draining"
    indexer.replace(_key(other), node_held(draining))
    assert neighbours(indexer.index, "a", "emb", {"n1"}) == {}
    indexer.replace(_key(other), node_held(other))  # back (a drain undone): counted again
    assert neighbours(indexer.index, "a", "emb", {"n1"}) == {"n1": 1}
    indexer.discard(_key(other))  # what Kopf does on its DELETED event
    assert neighbours(indexer.index, "a", "emb", {"n1"}) == {}


class _Kube:
    """The deployment's pod list and the node list; any other request fails the test."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.calls: list[str] = []

    async def list_pods(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        self.calls.append("list_pods")
        return self.pods

    async def list_nodes(self, fresh: bool = False) -> list[dict[str, Any]]:
        self.calls.append("list_nodes")
        return [{"metadata": {"name": name, "labels": {}}} for name in ("n1", "n2")]

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"observe made a request it must not: {name}")


async def test_observe_counts_neighbours_from_the_index_without_a_request() -> None:
    """Review r10: the neighbours came from a LIST of every neuronfleet pod, sent by the reconciles
    themselves: a slow one held every reconcile up to its timeout, a failed one (a 429) was sent
    again by the next reconcile, and each parsed thousands of whole pods on the event loop. They
    come from Kopf's pod index now: the reconcile reads its nodes' entries and sends nothing more."""
    mine = pod("a", "emb", "n1")
    others = [pod("b", "llm", "n1"), pod("b", "llm", "n2"), pod("a", "emb", "n2", labels={LABEL_ROLE: "warm"})]
    index = _indexed([mine, *others]).index
    kube = _Kube([mine])
    observed = await asyncio.wait_for(
        observe_cluster(kube, "a", "emb", None, "uid-a-emb", datetime.now(UTC), occupancy=index),
        timeout=5,
    )
    assert observed.neighbours == {"n1": 1}  # n2 holds none of the fleet's pods: not asked
    assert kube.calls == ["list_pods", "list_nodes"]
    # Without the index (a Reconciler outside Kopf, as in unit tests): no neighbours, no request.
    kube.calls.clear()
    observed = await observe_cluster(kube, "a", "emb", None, "uid-a-emb", datetime.now(UTC))
    assert observed.neighbours == {}
    assert kube.calls == ["list_pods", "list_nodes"]
