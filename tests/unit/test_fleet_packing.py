"""Fleet plan, packing: what a shrink removes empties whole nodes, counting every pod on each node.

A node is billed whole, and Karpenter's ``WhenEmpty`` consolidation removes it only once no pod is
left on it: a warm pod or a placeholder keeps it as surely as a serving pod does. So whichever
active pod is drained, warm pod or placeholder deleted, the node counts are over every pod of the
deployment on it (active, warm, placeholder; draining ones are leaving), and the other deployments'
pods there (``neighbours``: several models share the Inf2 nodes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from neuronfleet.planning.fleet import (
    DeletePlaceholder,
    DeletePod,
    FleetTarget,
    PodView,
    Relabel,
    apply_actions,
    plan_fleet,
)
from neuronfleet.planning.labels import ArtifactRevision

NOW = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)
ARTIFACT = ArtifactRevision("aaaaaaaaaa", "s3://artifacts/bert/aaaaaaaaaa/")
TEMPLATE = "t0t0t0t0t0"


def target(active: int, warm: int = 0, placeholders: int = 0) -> FleetTarget:
    return FleetTarget(TEMPLATE, ARTIFACT, active=active, warm=warm, placeholders=placeholders)


def serving(name: str, role: str, node: str | None, *, ready_minutes: float = 5, ready: bool = True) -> PodView:
    return PodView(
        name,
        role,  # type: ignore[arg-type]
        ARTIFACT.id,
        TEMPLATE,
        phase="Running" if ready else "Pending",
        ready=ready,
        created_at=NOW - timedelta(minutes=30),
        ready_at=NOW - timedelta(minutes=ready_minutes) if ready else None,
        node=node,
        zone="z1" if node is not None else None,
        in_flight=0,
    )


def placeholder(name: str, node: str | None, template: str = TEMPLATE) -> PodView:
    return PodView(
        name,
        "placeholder",
        template=template,
        phase="Running" if node else "Pending",
        created_at=NOW,
        node=node,
        zone="z1" if node is not None else None,
    )


def nodes_after(
    pods: Sequence[PodView], fleet: FleetTarget, neighbours: Mapping[str, int] | None = None
) -> dict[str, list[str]]:
    """The pods left on each node once the plan is applied and its draining pods are gone
    (``neighbours``: other deployments' pods per node, which stay)."""
    plan = plan_fleet("bert", fleet, pods, NOW, neighbours=neighbours or {})
    after = apply_actions(pods, plan.actions, NOW)
    # Applied as planned, the plan has nothing more to do (no pod flips back and forth).
    assert plan_fleet("bert", fleet, after, NOW, neighbours=neighbours or {}).actions == ()
    left: dict[str, list[str]] = {}
    for pod in after:
        if pod.node is not None and pod.role != "draining":
            left.setdefault(pod.node, []).append(pod.name)
    return {node: sorted(names) for node, names in sorted(left.items())}


def test_shrinking_placeholders_keeps_the_one_beside_a_serving_pod() -> None:
    # Two slots a node: ph-0 and ph-1 fill node-b, ph-2 sits beside the active pod. Kept by name,
    # ph-0 stayed alone on node-b: a whole node billed while status.placement said 1 node.
    pods = [
        serving("a0", "active", "node-a"),
        placeholder("ph-0", "node-b"),
        placeholder("ph-1", "node-b"),
        placeholder("ph-2", "node-a"),
    ]
    assert nodes_after(pods, target(1, placeholders=1)) == {"node-a": ["a0", "ph-2"]}


def test_shrinking_placeholders_empties_the_emptiest_node_first() -> None:
    # No serving pod beside any: ph-0 alone on node-c goes (by name it stayed), the two sharing
    # node-b stay.
    pods = [placeholder("ph-0", "node-c"), placeholder("ph-1", "node-b"), placeholder("ph-2", "node-b")]
    assert nodes_after(pods, target(0, placeholders=2)) == {"node-b": ["ph-1", "ph-2"]}


def test_shrinking_placeholders_deletes_unbound_ones_before_any_on_a_node() -> None:
    # An unbound placeholder holds nothing: it goes before the one alone on its node.
    pods = [placeholder("ph-0", None), placeholder("ph-1", "node-b"), serving("a0", "active", "node-a")]
    plan = plan_fleet("bert", target(1, placeholders=1), pods, NOW)
    assert [a.name for a in plan.actions if isinstance(a, DeletePlaceholder)] == ["ph-0"]


def test_scale_down_drains_the_active_whose_node_then_empties() -> None:
    # node-a: active a0 and warm w0; node-b: active a1 alone. Counting actives only, both nodes held
    # one and a0 went by name, leaving w0 on node-a and a1 on node-b.
    pods = [serving("a0", "active", "node-a"), serving("a1", "active", "node-b"), serving("w0", "warm", "node-a")]
    assert nodes_after(pods, target(1, warm=1)) == {"node-a": ["a0", "w0"]}


def test_scale_down_keeps_in_the_pool_the_surplus_active_on_the_fuller_node() -> None:
    # Two actives share node-a, one is alone on node-b; one stays active and one joins the pool: the
    # one to join is a0 or a1 (node-a), so a2 drains and node-b empties.
    pods = [serving("a0", "active", "node-a"), serving("a1", "active", "node-a"), serving("a2", "active", "node-b")]
    plan = plan_fleet("bert", target(1, warm=1), pods, NOW)
    assert [a.name for a in plan.actions if isinstance(a, Relabel) and a.role == "draining"] == ["a2"]
    assert list(nodes_after(pods, target(1, warm=1))) == ["node-a"]


def test_shrinking_the_warm_pool_deletes_the_warm_pod_alone_on_its_node() -> None:
    # w1 has been ready the longest, which used to keep it; it is alone on node-c, while w0 shares
    # node-b with a placeholder that stays: deleting w1 frees node-c.
    pods = [
        serving("a0", "active", "node-a"),
        serving("w0", "warm", "node-b", ready_minutes=5),
        placeholder("ph-0", "node-b"),
        serving("w1", "warm", "node-c", ready_minutes=50),
    ]
    plan = plan_fleet("bert", target(1, warm=1, placeholders=1), pods, NOW)
    assert [a.name for a in plan.actions if isinstance(a, DeletePod)] == ["w1"]
    assert list(nodes_after(pods, target(1, warm=1, placeholders=1))) == ["node-a", "node-b"]


def test_shrinking_the_warm_pool_still_deletes_a_loading_pod_before_a_loaded_one() -> None:
    # Readiness comes first: the loaded w1 alone on node-c stays, the loading w0 beside a0 goes.
    pods = [
        serving("a0", "active", "node-a"),
        serving("w0", "warm", "node-a", ready=False),
        serving("w1", "warm", "node-c"),
    ]
    plan = plan_fleet("bert", target(1, warm=1), pods, NOW)
    assert [a.name for a in plan.actions if isinstance(a, DeletePod)] == ["w0"]


def test_scale_down_keeps_a_surplus_active_in_the_pool_over_a_warm_pod_alone_on_its_node() -> None:
    # Both actives share node-a and w0 is alone on node-b: keeping w0 in the pool (loaded pods
    # already warm first) and draining a1 left both nodes; a1 joining the pool in its place, w0
    # deleted, frees node-b. Either is loaded standby.
    pods = [serving("a0", "active", "node-a"), serving("a1", "active", "node-a"), serving("w0", "warm", "node-b")]
    assert list(nodes_after(pods, target(1, warm=1))) == ["node-a"]


def test_shrinking_the_warm_pool_recounts_a_node_as_its_warm_pods_go() -> None:
    # Three warm pods fill node-b, w4 shares node-c with ph-0 (which stays). Counted before any
    # deletion, node-b looked the fullest and kept w1 alone on it: node-b and node-c stayed billed.
    # Counting only the pods that stay (ph-0) and then each one kept, w4 stays and node-b empties.
    pods = [
        serving("a0", "active", "node-a"),
        serving("w1", "warm", "node-b"),
        serving("w2", "warm", "node-b"),
        serving("w3", "warm", "node-b"),
        serving("w4", "warm", "node-c"),
        placeholder("ph-0", "node-c"),
    ]
    assert nodes_after(pods, target(1, warm=1, placeholders=1)) == {"node-a": ["a0"], "node-c": ["ph-0", "w4"]}


def test_shrinking_the_warm_pool_keeps_the_pods_beside_a_placeholder_over_the_longest_ready() -> None:
    # node-b (w1, w2) and node-c (w3, ph-0) both hold two; w1 has been ready the longest. Only ph-0
    # stays whatever the pool keeps: w3 beside it frees node-b.
    pods = [
        serving("a0", "active", "node-a"),
        serving("w1", "warm", "node-b", ready_minutes=50),
        serving("w2", "warm", "node-b"),
        serving("w3", "warm", "node-c"),
        placeholder("ph-0", "node-c"),
    ]
    assert nodes_after(pods, target(1, warm=1, placeholders=1)) == {"node-a": ["a0"], "node-c": ["ph-0", "w3"]}


def test_shrinking_the_warm_pool_onto_new_nodes_keeps_the_fullest_node_whole() -> None:
    # No pod that stays sits beside any warm pod: the pool fills the node holding the most of them
    # (node-c) before it keeps one alone elsewhere, whatever pod has been ready the longest.
    pods = [
        serving("a0", "active", "node-a"),
        serving("w1", "warm", "node-b", ready_minutes=50),
        serving("w2", "warm", "node-c"),
        serving("w3", "warm", "node-c"),
    ]
    assert nodes_after(pods, target(1, warm=2)) == {"node-a": ["a0"], "node-c": ["w2", "w3"]}


def test_scale_down_counts_only_the_warm_pods_the_pool_keeps() -> None:
    # Active 2 -> 1 while the pool goes 2 -> 0; ph-0 (1 wanted) sits beside a1 on node-b. Counted,
    # w0 and w1 (deleted by this very plan) made node-a look the fuller, so a1 was drained and a0
    # kept: node-a (a0) and node-b (ph-0 alone) both stayed. Keeping a1 empties node-a.
    pods = [
        serving("a0", "active", "node-a"),
        serving("w0", "warm", "node-a"),
        serving("w1", "warm", "node-a"),
        serving("a1", "active", "node-b"),
        placeholder("ph-0", "node-b"),
    ]
    assert nodes_after(pods, target(1, warm=0, placeholders=1)) == {"node-b": ["a1", "ph-0"]}


# Another model's pod on a node keeps it billed (review r9): what a shrink removes is what empties a
# node counting those too. Each case below removed the pod beside the other model before.


def test_scale_down_drains_the_active_alone_rather_than_the_one_beside_another_model() -> None:
    # a0 (the newest: drained first on a tie) shares node-a with model B's pod; a1 is alone on node-b.
    pods = [serving("a0", "active", "node-a", ready_minutes=1), serving("a1", "active", "node-b")]
    assert nodes_after(pods, target(1)) == {"node-b": ["a1"]}
    assert nodes_after(pods, target(1), {"node-a": 1}) == {"node-a": ["a0"]}


def test_shrinking_the_warm_pool_keeps_the_warm_pod_beside_another_model() -> None:
    # w0 has been ready the longest, alone on node-b; w1 shares node-c with model B's pod.
    pods = [
        serving("a0", "active", "node-a"),
        serving("w0", "warm", "node-b", ready_minutes=50),
        serving("w1", "warm", "node-c", ready_minutes=5),
    ]
    assert nodes_after(pods, target(1, warm=1)) == {"node-a": ["a0"], "node-b": ["w0"]}
    assert nodes_after(pods, target(1, warm=1), {"node-c": 1}) == {"node-a": ["a0"], "node-c": ["w1"]}


def test_shrinking_placeholders_keeps_the_one_beside_another_model() -> None:
    # ph-0 alone on node-b, ph-1 beside model B's pod on node-c (kept by name before: ph-0 stayed).
    pods = [serving("a0", "active", "node-a"), placeholder("ph-0", "node-b"), placeholder("ph-1", "node-c")]
    assert nodes_after(pods, target(1, placeholders=1)) == {"node-a": ["a0"], "node-b": ["ph-0"]}
    assert nodes_after(pods, target(1, placeholders=1), {"node-c": 1}) == {"node-a": ["a0"], "node-c": ["ph-1"]}


@pytest.mark.parametrize(
    ("placeholder_template", "hold"),
    [
        ("oldoldoldo", None),  # of an earlier placement: replaced
        (TEMPLATE, None),  # of this one, but none is wanted
        ("oldoldoldo", "the served artifact is gone from the store"),  # serving pods held, placeholders not
    ],
)
def test_scale_down_counts_no_placeholder_this_plan_deletes(placeholder_template: str, hold: str | None) -> None:
    # Active 3 -> 2 with two warm pods kept; ph sits beside a1 on node-d and is deleted by this very
    # plan. Counted as staying, it made node-d look the fuller: a1 joined the pool in w1's place and
    # node-d stayed billed for a1 alone. Draining a1 empties node-d.
    pods = [
        serving("a0", "active", "node-a", ready_minutes=50),
        serving("a1", "active", "node-d", ready_minutes=50),
        serving("a2", "active", "node-a", ready_minutes=1),
        serving("w0", "warm", "node-b", ready_minutes=50),
        serving("w1", "warm", "node-b", ready_minutes=1),
        placeholder("ph", "node-d", template=placeholder_template),
    ]
    fleet = replace(target(2, warm=2), hold_creations=hold)
    assert nodes_after(pods, fleet) == {"node-a": ["a0", "a2"], "node-b": ["w0", "w1"]}
    # A placeholder that stays keeps node-d whatever is drained: a1 may as well stay beside it.
    kept = nodes_after([*pods[:-1], placeholder("ph", "node-d")], target(2, warm=2, placeholders=1))
    assert kept["node-d"] == ["a1", "ph"] and len(kept) == 3
