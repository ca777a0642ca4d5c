"""Promotion and drain order of pods."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from neuronfleet.planning.promotion import PodInfo, drain_order, promotion_order, release_order


def pod(
    name: str,
    node: str | None = "n",
    zone: str | None = "a",
    ready: float | None = 0.0,
    inflight: float = 0.0,
    rev: str = "r2",
) -> PodInfo:
    return PodInfo(name, node, zone, ready, inflight, rev)


def names(pods: list[PodInfo]) -> list[str]:
    return [p.name for p in pods]


def test_promote_target_revision_first() -> None:
    warm = [pod("old", rev="r1"), pod("new", rev="r2")]
    assert names(promotion_order(warm, [], "r2")) == ["new", "old"]


def test_promote_into_the_emptiest_zone_then_onto_busy_nodes_then_longest_ready() -> None:
    active = [pod("a1", node="n1", zone="a"), pod("a2", node="n2", zone="a"), pod("b1", node="n3", zone="b")]
    warm = [
        pod("w-a", node="n1", zone="a", ready=0),
        pod("w-b-fresh", node="n9", zone="b", ready=100),
        pod("w-b-old", node="n8", zone="b", ready=10),
        pod("w-b-packed", node="n3", zone="b", ready=500),
    ]
    # w-b-packed evens the zones (2 and 2), so the next goes to either: w-a's node already serves.
    assert names(promotion_order(warm, active, "r2")) == ["w-b-packed", "w-a", "w-b-old", "w-b-fresh"]


def test_drain_old_revision_then_crowded_zone_then_sparse_node_then_idle() -> None:
    active = [
        pod("a-shared-1", node="n1", zone="a"),
        pod("a-shared-2", node="n1", zone="a"),
        pod("a-alone-busy", node="n2", zone="a", inflight=5),
        pod("a-alone-idle", node="n3", zone="a", inflight=0),
        pod("b", node="n4", zone="b"),
        pod("old", node="n5", zone="b", rev="r1"),
    ]
    assert names(drain_order(active, "r2")) == [
        "old",
        "a-alone-idle",
        "a-alone-busy",
        "a-shared-1",
        "a-shared-2",
        "b",
    ]


def test_drain_youngest_first_on_ties_and_order_is_deterministic() -> None:
    active = [pod("x", node="n1", ready=10), pod("y", node="n2", ready=50), pod("z", node="n3", ready=None)]
    first = names(drain_order(active, "r2"))
    assert first == ["z", "y", "x"]
    assert names(drain_order(list(reversed(active)), "r2")) == first


def test_draining_several_pods_empties_whole_nodes() -> None:
    # Two pods on each of three nodes, one zone: counted once, every node holds 2 and the
    # youngest-first tie-break takes one pod from each of two nodes, freeing none.
    active = [
        pod("n1-old", node="n1", ready=10),
        pod("n1-new", node="n1", ready=60),
        pod("n2-old", node="n2", ready=20),
        pod("n2-new", node="n2", ready=50),
        pod("n3-old", node="n3", ready=30),
        pod("n3-new", node="n3", ready=40),
    ]
    first_two = {p.node for p in drain_order(active, "r2")[:2]}
    assert first_two == {"n1"}
    assert names(drain_order(active, "r2")) == ["n1-new", "n1-old", "n2-new", "n2-old", "n3-new", "n3-old"]


def test_draining_several_pods_keeps_the_zones_even() -> None:
    # Zone a holds 4, zone b 2: draining 2 takes one from a, then one from a again (3 > 2), then
    # alternates; counted once, all four of a's would go before any of b's.
    active = [pod(f"a{i}", node=f"na{i}", zone="a", ready=i) for i in range(4)]
    active += [pod(f"b{i}", node=f"nb{i}", zone="b", ready=i) for i in range(2)]
    zones = [p.zone for p in drain_order(active, "r2")]
    assert zones == ["a", "a", "a", "b", "a", "b"]


def test_promoting_several_pods_keeps_the_zones_even() -> None:
    active = [pod("a-active", node="na", zone="a")]
    warm = [pod(f"wa{i}", node=f"wa{i}", zone="a", ready=i) for i in range(3)]
    warm += [pod(f"wb{i}", node=f"wb{i}", zone="b", ready=i) for i in range(3)]
    zones = [p.zone for p in promotion_order(warm, active, "r2")]
    assert zones == ["b", "a", "b", "a", "b", "a"]


def test_promoting_several_pods_packs_onto_the_node_just_filled() -> None:
    # After the first promotion onto n1, its other warm pod is on a node now serving.
    warm = [pod("n1-a", node="n1", ready=1), pod("n2-a", node="n2", ready=2), pod("n1-b", node="n1", ready=3)]
    assert names(promotion_order(warm, [], "r2")) == ["n1-a", "n1-b", "n2-a"]


def test_drain_counts_the_others_but_never_returns_them() -> None:
    # The candidate on the node shared with a pod that stays frees nothing; the lone one does.
    stays = [pod("stays", node="n1", zone="a")]
    candidates = [pod("shares-n1", node="n1", zone="a"), pod("alone", node="n2", zone="a")]
    assert names(drain_order(candidates, "r2", stays)) == ["alone", "shares-n1"]


def test_drain_counts_warm_pods_and_placeholders_beside_in_their_node_not_their_zone() -> None:
    # A warm pod beside "shares-n1" keeps n1 whatever is drained: "alone" empties n2.
    candidates = [pod("shares-n1", node="n1", zone="a"), pod("alone", node="n2", zone="a")]
    assert names(drain_order(candidates, "r2", beside=[pod("warm", node="n1", zone="a")])) == ["alone", "shares-n1"]
    # Zone spread still comes first: pods beside count in no zone, so zone a (2 active) drains first.
    candidates = [pod("a1", node="n1", zone="a"), pod("a2", node="n2", zone="a"), pod("b1", node="n3", zone="b")]
    beside = [pod(f"ph{i}", node="n1", zone="a") for i in range(3)]
    assert names(drain_order(candidates, "r2", beside=beside))[0] == "a2"


def test_promote_onto_the_fuller_node_among_nodes_not_serving() -> None:
    # Neither node serves: w-ph shares its node with a placeholder, so it goes first even though
    # w-alone has been ready longer; the pool keeps that order, so a shrink deletes w-alone.
    warm = [pod("w-alone", node="n1", ready=0), pod("w-ph", node="n2", ready=50)]
    assert names(promotion_order(warm, [], "r2", beside=[pod("ph", node="n2")])) == ["w-ph", "w-alone"]


def test_release_unbound_then_priority_then_nodes_without_serving_then_emptiest() -> None:
    placeholders = [
        pod("beside-serving", node="n1"),
        pod("shares-n2-a", node="n2"),
        pod("shares-n2-b", node="n2"),
        pod("alone", node="n3"),
        pod("old-template", node="n4"),
        pod("unbound", node=None, zone=None),
    ]
    serving = [pod("active", node="n1")]

    def priority(p: PodInfo) -> int:
        return (0 if p.node is None else 2) + (0 if p.name == "old-template" else 1)

    assert names(release_order(placeholders, priority, serving)) == [
        "unbound",
        "old-template",
        "alone",
        "shares-n2-b",
        "shares-n2-a",
        "beside-serving",
    ]
    assert release_order(list(reversed(placeholders)), priority, serving) == release_order(
        placeholders, priority, serving
    )


# Another deployment's pods on a node keep it as surely as the deployment's own (review r9: with two
# models on the Inf2 nodes, the operator drained the pod beside the other model and kept the one
# alone on its node, so Karpenter's WhenEmpty consolidation removed nothing).


def test_drain_counts_other_deployments_pods_on_the_node() -> None:
    # "beside-b" is the newest (drained first on a tie), but model B's pod keeps n1 anyway.
    candidates = [pod("beside-b", node="n1", ready=10), pod("alone", node="n2", ready=0)]
    assert names(drain_order(candidates, "r2")) == ["beside-b", "alone"]
    assert names(drain_order(candidates, "r2", neighbours={"n1": 1})) == ["alone", "beside-b"]


def test_a_shrinking_pool_keeps_the_pod_beside_another_deployment() -> None:
    # Kept first: the pod beside B's (n2 is billed anyway), not the one ready the longest alone on n1.
    warm = [pod("w-alone", node="n1", ready=0), pod("w-beside-b", node="n2", ready=50)]
    assert names(promotion_order(warm, [], "r2", keeping=True)) == ["w-alone", "w-beside-b"]
    kept = promotion_order(warm, [], "r2", keeping=True, neighbours={"n2": 1})
    assert names(kept) == ["w-beside-b", "w-alone"]


def test_release_deletes_the_placeholder_alone_before_one_beside_another_deployment() -> None:
    # /tmp/rev-r9/release_order_demo.py: the highest name went first, leaving node-1 held by one placeholder.
    alone = pod("ma-ph-abc123-0", node="node-1")
    beside_b = pod("ma-ph-abc123-1", node="node-2")
    assert names(release_order([alone, beside_b], lambda p: 0)) == ["ma-ph-abc123-1", "ma-ph-abc123-0"]
    order = release_order([alone, beside_b], lambda p: 0, neighbours={"node-2": 1})
    assert names(order) == ["ma-ph-abc123-0", "ma-ph-abc123-1"]


def test_other_deployments_pods_count_as_many_pods_on_their_node() -> None:
    # n1 holds one of ours and three of others, n2 two of ours: draining from n2 empties it sooner.
    candidates = [pod("n1-a", node="n1"), pod("n2-a", node="n2"), pod("n2-b", node="n2")]
    assert names(drain_order(candidates, "r2"))[0] == "n1-a"
    assert set(names(drain_order(candidates, "r2", neighbours={"n1": 3}))[:2]) == {"n2-a", "n2-b"}


INF = float("inf")


def _recounted(
    candidates: list[PodInfo],
    counted: list[PodInfo],
    rank: Any,
    promote: bool,
    beside: list[PodInfo],
    keeping: bool = False,
    neighbours: dict[str, int] | None = None,
) -> list[PodInfo]:
    """An order by brute force: a full ranking on fresh counts before every pick. ``beside`` count
    in their node only, as do ``neighbours`` (other deployments' pods, per node name). A promotion
    leaves every pod on its node (``held`` never changes); a pool keeping its first picks deletes
    the rest, so there a node holds the pods that stay and those picked so far (recounted like a
    drain's), and ``room`` (candidates on the node) breaks ties."""
    left, taken, counted = list(candidates), [], list(counted)
    extra = Counter({(p.zone, p.node): (neighbours or {}).get(p.node, 0) for p in candidates if p.node is not None})
    held = Counter((p.zone, p.node) for p in (*candidates, *counted, *beside) if p.node is not None) + extra
    room = Counter((p.zone, p.node) for p in candidates if p.node is not None) if keeping else Counter()
    while left:
        zones = Counter(p.zone for p in counted)
        nodes = Counter((p.zone, p.node) for p in counted if p.node is not None)
        if not promote or keeping:
            held = nodes + Counter((p.zone, p.node) for p in beside if p.node is not None) + extra
        if keeping:
            # Ranked as -held then -room in one count: a fleet here has far fewer than 1000 pods.
            held = Counter({key: held[key] * 1000 + room[key] for key in held | room})
        best = min(left, key=lambda p: rank(p, zones, nodes, held))
        taken.append(best)
        left.remove(best)
        if promote:
            counted.append(best)
        else:
            counted.remove(best)
    return taken


def _drain_rank(p: PodInfo, zones: Counter[Any], nodes: Counter[Any], held: Counter[Any]) -> tuple[Any, ...]:
    return (
        p.revision == "r1",
        -zones[p.zone],
        held[p.zone, p.node] if p.node is not None else 0,
        p.in_flight,
        -(p.ready_since if p.ready_since is not None else INF),
        p.name,
        p.zone or "",
        p.node or "",
        p.in_flight,
        p.revision or "",
    )


def _promotion_rank(p: PodInfo, zones: Counter[Any], nodes: Counter[Any], held: Counter[Any]) -> tuple[Any, ...]:
    return (
        p.revision != "r1",
        zones[p.zone],
        0 if p.node is not None and nodes[p.zone, p.node] > 0 else 1,
        -held[p.zone, p.node] if p.node is not None else 0,
        p.ready_since if p.ready_since is not None else INF,
        p.name,
        p.zone or "",
        p.node or "",
        p.in_flight,
        p.revision or "",
    )


def _random_pod(rng: random.Random, name: str) -> PodInfo:
    return PodInfo(
        name,
        None if rng.random() < 0.15 else f"n{rng.randrange(5)}",
        None if rng.random() < 0.15 else rng.choice("abc"),
        None if rng.random() < 0.15 else float(rng.randrange(4)),
        float(rng.randrange(3)),
        rng.choice(["r1", "r2", None]),
    )


def test_the_orders_are_the_brute_force_recount() -> None:
    # Pods without a node, a zone or readiness, a node under two zone labels, and (every third
    # fleet) duplicate names: the fast greedy order must be the recount's, whatever the input order.
    rng = random.Random(7)
    for trial in range(600):
        duplicates = trial % 3 == 0
        candidates = [
            _random_pod(rng, f"p{rng.randrange(4)}" if duplicates else f"p{i}") for i in range(rng.randrange(0, 13))
        ]
        others = [_random_pod(rng, f"o{i}") for i in range(rng.randrange(0, 5))]
        beside = [_random_pod(rng, f"b{i}") for i in range(rng.randrange(0, 5))]
        # Every other fleet shares its nodes with other deployments' pods.
        near = {f"n{i}": rng.randrange(3) for i in range(5)} if trial % 2 else {}
        drained = drain_order(candidates, "r1", others, beside, near)
        assert drained == _recounted(candidates, candidates + others, _drain_rank, False, beside, neighbours=near)
        assert drain_order(list(reversed(candidates)), "r1", others, beside, near) == drained
        promoted = promotion_order(candidates, others, "r1", beside, neighbours=near)
        assert promoted == _recounted(candidates, others, _promotion_rank, True, beside, neighbours=near)
        assert promotion_order(list(reversed(candidates)), others, "r1", beside, neighbours=near) == promoted
        kept = promotion_order(candidates, others, "r1", beside, keeping=True, neighbours=near)
        assert kept == _recounted(candidates, others, _promotion_rank, True, beside, keeping=True, neighbours=near)
        reversed_kept = promotion_order(list(reversed(candidates)), others, "r1", beside, keeping=True, neighbours=near)
        assert reversed_kept == kept


def test_a_surplus_active_ranks_after_a_warm_pod_on_a_node_alike_and_before_one_alone() -> None:
    # The plan ranks its pool (warm pods and a scale-down's surplus actives) in this order.
    active = [pod("stays", node="n1")]
    candidates = [pod("surplus", node="n1", ready=0), pod("warm-beside", node="n1", ready=50)]
    candidates.append(pod("warm-alone", node="n2", ready=0))
    order = promotion_order(candidates, active, "r2", demoted={"surplus"})
    assert names(order) == ["warm-beside", "surplus", "warm-alone"]


def test_orders_of_one_candidate_or_none_return_them_as_given() -> None:
    # The short path taken where there is nothing to rank (most of a baseline's plans).
    others = [pod("a1", node="n1"), pod("a2", node="n2", zone="b")]
    only = pod("only", node="n2", zone="b")
    assert promotion_order([only], others, "r1", others) == [only]
    assert drain_order([only], "r1", others, others) == [only]
    assert release_order([only], lambda p: 0, others) == [only]
    assert promotion_order([], others, "r2") == drain_order([], "r2", others) == release_order([], lambda p: 0) == []
