"""Promotion and drain order of pods."""

from __future__ import annotations

from neuronfleet.planning.promotion import PodInfo, drain_order, promotion_order


def pod(
    name: str, node: str = "n", zone: str = "a", ready: float | None = 0.0, inflight: float = 0.0, rev: str = "r2"
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
    assert names(promotion_order(warm, active, "r2")) == ["w-b-packed", "w-b-old", "w-b-fresh", "w-a"]


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
