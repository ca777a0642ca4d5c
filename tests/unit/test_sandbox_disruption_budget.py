"""The pods a PodDisruptionBudget expects, as kube-controller-manager's disruption controller reads
them: the replicas of the pods' controllers (each once; a built-in controller's ``spec.replicas``,
found by its group and kind), a percentage taken of that (rounded up), an integer ``minAvailable``
counting the selected pods instead, and a controller that is gone counting nothing."""

from __future__ import annotations

from typing import Any

from neuronfleet.sandbox.clock import Clock
from neuronfleet.sandbox.disruption import disruptions_allowed
from neuronfleet.sandbox.store import Store


def _owned_pods(store: Store, owner: dict[str, Any], count: int) -> list[dict[str, Any]]:
    reference = {
        "apiVersion": "apps/v1",
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    return [
        {
            "metadata": {"name": f"p{i}", "namespace": "default", "ownerReferences": [reference]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
        for i in range(count)
    ]


def _controllers() -> tuple[Store, dict[str, Any]]:
    """A ReplicaSet of 4 replicas, beside a Deployment of the same name and group with 10."""
    store = Store(Clock())
    replica_set = store.create(
        store.resource("apps", "replicasets"),
        "default",
        {"kind": "ReplicaSet", "metadata": {"name": "model"}, "spec": {"replicas": 4}},
    )
    store.create(
        store.resource("apps", "deployments"),
        "default",
        {"kind": "Deployment", "metadata": {"name": "model"}, "spec": {"replicas": 10}},
    )
    return store, {**replica_set, "kind": "ReplicaSet"}


def test_a_percentage_is_of_the_controllers_replicas_read_by_group_and_kind() -> None:
    store, replica_set = _controllers()
    pods = _owned_pods(store, replica_set, 3)  # one of the 4 is missing
    # maxUnavailable 25 % of 4 (the ReplicaSet's, not the Deployment's 10): 1, so 3 desired.
    budget = {"spec": {"maxUnavailable": "25%"}}
    assert disruptions_allowed(budget, pods, store) == (0, 3, 3, 4)
    # minAvailable 50 % of 4, rounded up: 2 desired of the 3 healthy.
    assert disruptions_allowed({"spec": {"minAvailable": "50%"}}, pods, store) == (1, 2, 3, 4)
    # An integer minAvailable counts the pods selected, not the controller's scale.
    assert disruptions_allowed({"spec": {"minAvailable": 1}}, pods, store) == (2, 1, 3, 3)


def test_pods_whose_controller_is_gone_expect_nothing() -> None:
    store, replica_set = _controllers()
    pods = _owned_pods(store, {**replica_set, "metadata": {**replica_set["metadata"], "name": "gone"}}, 2)
    assert disruptions_allowed({"spec": {"maxUnavailable": 1}}, pods, store) == (0, 0, 2, 0)
