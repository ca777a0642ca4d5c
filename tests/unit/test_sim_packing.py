"""The simulated operator empties whole nodes as the operator's plan does: warm pods and
placeholders count on their node when it drains an active pod, deletes a warm pod or a placeholder.

Hand-built fleets at two replicas per node; each shrink leaves one node empty, which consolidation
then removes (the same fleets as the plan's tests in test_fleet_packing.py).
"""

from __future__ import annotations

import numpy as np

from neuronfleet.sim.fleet import Fleet, Node, Pod, Role
from neuronfleet.sim.profiles import load_profile

DRAIN = 5.0
EMPTY = 30.0


def hand_built(layout: dict[str, list[tuple[str, Role, float]]], slots: int = 2) -> Fleet:
    """Ready nodes of ``slots`` launched an hour ago holding pods ``(name, role, ready_at)`` (negative times)."""
    profile = load_profile("bert-base").model_copy(update={"replicas_per_node": slots, "drain_seconds": DRAIN})
    fleet = Fleet(profile, np.random.default_rng(0), empty_node_seconds=EMPTY, scale_down="operator")
    counts = {"active": 0, "warm": 0, "placeholder": 0}
    for node_name, pods in layout.items():
        node = Node(node_name, launched_at=-3600.0, ready_at=-3500.0, slots=slots, image_at=-3400.0)
        fleet.nodes[node_name] = node
        for name, role, ready_at in pods:
            fleet.pods[name] = Pod(name, role, ready_at - 20.0, node_name, ready_at=ready_at, bound_at=ready_at - 20.0)
            node.pods.add(name)
            counts[role] += 1
    fleet.targets = (counts["active"], counts["warm"], counts["placeholder"])
    fleet.version += 1
    return fleet


def nodes_after(fleet: Fleet, active: int, warm: int, placeholders: int) -> dict[str, list[str]]:
    """Shrink at t=0 and let drains end and empty nodes go; what each node left holds."""
    fleet.set_targets(0.0, active=active, warm=warm, placeholders=placeholders)
    now = 0.0
    while (nxt := fleet.next_event(now)) <= 100.0:
        now = max(nxt, now + 1e-6)
        fleet.advance(now)
    fleet.advance(100.0)
    return {name: sorted(node.pods) for name, node in sorted(fleet.nodes.items())}


def test_scale_down_drains_the_active_whose_node_then_empties() -> None:
    # a0 is the most recently ready, so counting actives alone (one a node) drained it, beside w0.
    fleet = hand_built(
        {"node-a": [("a0", "active", -10.0), ("w0", "warm", -900.0)], "node-b": [("a1", "active", -900.0)]}
    )
    assert nodes_after(fleet, active=1, warm=1, placeholders=0) == {"node-a": ["a0", "w0"]}


def test_scale_down_keeps_in_the_pool_the_surplus_active_on_the_fuller_node() -> None:
    fleet = hand_built(
        {"node-a": [("a0", "active", -900.0), ("a1", "active", -800.0)], "node-b": [("a2", "active", -10.0)]}
    )
    assert list(nodes_after(fleet, active=1, warm=1, placeholders=0)) == ["node-a"]


def test_shrinking_the_warm_pool_deletes_the_warm_pod_alone_on_its_node() -> None:
    # w0, beside the active pod, is the most recently ready: newest first, it went and node-c stayed.
    fleet = hand_built(
        {"node-a": [("a0", "active", -900.0), ("w0", "warm", -10.0)], "node-c": [("w1", "warm", -900.0)]}
    )
    assert nodes_after(fleet, active=1, warm=1, placeholders=0) == {"node-a": ["a0", "w0"]}


def test_shrinking_placeholders_keeps_the_one_beside_a_serving_pod() -> None:
    # By name, ph-0 (beside a0) went and ph-1 kept node-b.
    fleet = hand_built(
        {
            "node-a": [("a0", "active", -900.0), ("ph-0", "placeholder", -900.0)],
            "node-b": [("ph-1", "placeholder", -900.0)],
        }
    )
    assert nodes_after(fleet, active=1, warm=0, placeholders=1) == {"node-a": ["a0", "ph-0"]}


def test_scale_down_keeps_a_surplus_active_in_the_pool_over_a_warm_pod_alone_on_its_node() -> None:
    fleet = hand_built(
        {"node-a": [("a0", "active", -900.0), ("a1", "active", -800.0)], "node-b": [("w0", "warm", -900.0)]}
    )
    assert list(nodes_after(fleet, active=1, warm=1, placeholders=0)) == ["node-a"]


def test_shrinking_the_warm_pool_recounts_a_node_as_its_warm_pods_go() -> None:
    # Three slots a node. Counted before any deletion, node-b (three warm pods) looked the fullest
    # and kept w1 alone on it; w4 beside the placeholder that stays is the one to keep.
    fleet = hand_built(
        {
            "node-a": [("a0", "active", -900.0)],
            "node-b": [("w1", "warm", -900.0), ("w2", "warm", -900.0), ("w3", "warm", -900.0)],
            "node-c": [("w4", "warm", -900.0), ("ph-0", "placeholder", -900.0)],
        },
        slots=3,
    )
    assert nodes_after(fleet, active=1, warm=1, placeholders=1) == {"node-a": ["a0"], "node-c": ["ph-0", "w4"]}


def test_scale_down_counts_only_the_warm_pods_the_pool_keeps() -> None:
    # Active 2 -> 1, pool 2 -> 0: w0 and w1, deleted in the same step, made node-a look the fuller,
    # so a1 drained beside the placeholder that stays; keeping a1 empties node-a.
    fleet = hand_built(
        {
            "node-a": [("a0", "active", -900.0), ("w0", "warm", -900.0), ("w1", "warm", -900.0)],
            "node-b": [("a1", "active", -900.0), ("ph-0", "placeholder", -900.0)],
        },
        slots=3,
    )
    assert nodes_after(fleet, active=1, warm=0, placeholders=1) == {"node-b": ["a1", "ph-0"]}
