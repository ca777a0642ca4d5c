"""Who picks the pods a scale-down takes: the operator's drain order, a ReplicaSet's rank, Ray Serve.

Hand-built fleets at 2-4 replicas per node, where the orders take different pods and so leave
different nodes billed; then the engine, which gives each policy its deleter's order.
"""

from __future__ import annotations

import numpy as np
import pytest

from neuronfleet.sim import engine, runner
from neuronfleet.sim.fleet import Fleet, Node, Pod
from neuronfleet.sim.metrics import MetricsView
from neuronfleet.sim.policies import Observed, Targets
from neuronfleet.sim.profiles import Profile, load_profile
from neuronfleet.sim.scaledown import ReadyPod, ScaleDownBy, ray_serve_order, replicaset_order
from neuronfleet.sim.trace import Trace
from neuronfleet.sim.workload import build

DRAIN = 5.0
EMPTY = 30.0


def profile(per_node: int) -> Profile:
    return load_profile("bert-base").model_copy(update={"replicas_per_node": per_node, "drain_seconds": DRAIN})


def hand_built(layout: dict[str, list[float]], per_node: int, scale_down: ScaleDownBy) -> Fleet:
    """Ready nodes launched an hour ago, each with serving pods ready at the given (negative) times;
    pod ``<node>/<i>`` is the i-th of its node's list."""
    fleet = Fleet(profile(per_node), np.random.default_rng(0), empty_node_seconds=EMPTY, scale_down=scale_down)
    for node_name, readies in layout.items():
        node = Node(node_name, launched_at=-3600.0, ready_at=-3500.0, slots=per_node, image_at=-3400.0)
        fleet.nodes[node_name] = node
        for i, ready_at in enumerate(readies):
            pod = Pod(
                f"{node_name}/{i}", "active", ready_at - 20.0, node_name, ready_at=ready_at, bound_at=ready_at - 20.0
            )
            fleet.pods[pod.name] = pod
            node.pods.add(pod.name)
    fleet.targets = (len(fleet.pods), 0, 0)
    fleet.version += 1
    return fleet


def scale_to(fleet: Fleet, active: int) -> set[str]:
    """Scale the fleet to ``active`` at t=0; the pods that went."""
    before = set(fleet.pods)
    fleet.set_targets(0.0, active=active, warm=0, placeholders=0)
    return before - set(fleet.pods)


def run_until(fleet: Fleet, until: float) -> None:
    now = 0.0
    while (nxt := fleet.next_event(now)) <= until:
        now = max(nxt, now + 1e-6)
        fleet.advance(now)
    fleet.advance(until)


def test_at_two_per_node_a_replicaset_thins_the_full_node_where_the_operator_empties_one() -> None:
    layout = {"a": [-900.0, -800.0], "b": [-700.0]}
    ours, rs = hand_built(layout, 2, "operator"), hand_built(layout, 2, "replicaset")
    assert scale_to(ours, 2) == {"b/0"}
    # The ReplicaSet ranks a's pods first (two of the Deployment's pods there, one on b), a/1 the
    # more recently ready of them.
    assert scale_to(rs, 2) == {"a/1"}
    run_until(ours, 100.0)
    run_until(rs, 100.0)
    # b drains 5 s, stays empty 30 s, and goes: billed 35 s; the ReplicaSet's fleet keeps both nodes.
    assert (ours.counts(100.0).nodes, rs.counts(100.0).nodes) == (1, 2)
    assert ours.node_seconds == pytest.approx(100.0 + DRAIN + EMPTY)
    assert rs.node_seconds == pytest.approx(200.0)


def test_at_four_per_node_one_replicaset_sync_takes_both_pods_off_the_fuller_node() -> None:
    layout = {"a": [-10.0, -1000.0, -10000.0], "b": [-50.0, -60.0]}
    ours, rs = hand_built(layout, 4, "operator"), hand_built(layout, 4, "replicaset")
    assert scale_to(ours, 3) == {"b/0", "b/1"}
    # Ranks are counted once per sync (a: 3, b: 2), so both come off a, the most recently ready
    # first. Counted again after the first deletion (a: 2, b: 2), b's fresher pods would go next.
    assert scale_to(rs, 3) == {"a/0", "a/1"}
    run_until(ours, 60.0)
    run_until(rs, 60.0)
    assert (ours.counts(60.0).nodes, rs.counts(60.0).nodes) == (1, 2)
    assert rs.node_seconds - ours.node_seconds == pytest.approx(60.0 - DRAIN - EMPTY)


def test_a_replicaset_ranks_a_crowded_node_above_the_newest_pod() -> None:
    layout = {"a": [-5000.0, -5000.0, -5000.0], "b": [-10.0]}
    assert scale_to(hand_built(layout, 4, "operator"), 3) == {"b/0"}
    taken = scale_to(hand_built(layout, 4, "replicaset"), 3)
    assert len(taken) == 1 and taken.pop().startswith("a/")


def test_within_one_rank_a_replicaset_takes_the_most_recently_ready_and_the_name_breaks_ties() -> None:
    pods = [
        ReadyPod(name, node, ready_at)
        for name, node, ready_at in (
            ("a/0", "a", -700.0),
            ("a/1", "a", -10.0),
            ("b/0", "b", -300.0),
            ("b/1", "b", -300.0),
            ("c/0", "c", -1.0),
        )
    ]
    ordered = replicaset_order(pods, {"a": 2, "b": 2, "c": 1})
    assert [p.name for p in ordered] == ["a/1", "b/0", "b/1", "a/0", "c/0"]


def test_ray_serve_stops_whole_nodes_fewest_replicas_first() -> None:
    # Two nodes of two replicas, ready times interleaved across them.
    layout = {"a": [-100.0, -300.0], "b": [-200.0, -400.0]}
    ray = hand_built(layout, 2, "ray-serve")
    # b first held a running replica (400 s ago), so it sorts first among equals; all of it goes.
    assert scale_to(ray, 2) == {"b/0", "b/1"}
    run_until(ray, 60.0)
    assert ray.counts(60.0).nodes == 1
    # Fewest running replicas first, newest first within a node, and a node before the next.
    pods = [
        ReadyPod(f"{node}/{i}", node, t)
        for node, times in {"a": [-5.0, -9.0], "c": [-1.0, -7.0, -3.0]}.items()
        for i, t in enumerate(times)
    ]
    assert [p.name for p in ray_serve_order(pods, {})] == ["a/0", "a/1", "c/0", "c/2", "c/1"]


def test_at_one_per_node_a_replicaset_takes_the_pods_the_operator_takes() -> None:
    # Every rank is 1: the most recently ready go first, as in the drain order (so runs at one
    # replica per node, bench_fleet's, do not change). Ray Serve stops the node that first ran a
    # replica: the oldest.
    layout = {"a": [-300.0], "b": [-200.0], "c": [-100.0], "d": [-50.0], "e": [-50.0]}
    taken = {who: scale_to(hand_built(layout, 1, who), 2) for who in ("operator", "replicaset", "ray-serve")}
    assert taken["operator"] == taken["replicaset"] == {"c/0", "d/0", "e/0"}
    assert taken["ray-serve"] == {"a/0", "b/0", "c/0"}


class ShrinksToTwo:
    """Three ready replicas (two nodes at two per node), asking for two from the first decision on."""

    name = "shrinks"
    setting = "2"
    interval = 15.0
    reads_cold_starts = False
    start_replicas: int | None = 3

    def __init__(self, scale_down: ScaleDownBy) -> None:
        self.scale_down = scale_down

    def prime(self, replicas: int, now: float) -> None:
        return None

    def decide(self, now: float, metrics: MetricsView, observed: Observed) -> Targets:
        return Targets(2)


def test_the_engine_scales_each_policy_down_in_its_deleters_order() -> None:
    per_node = profile(2)
    arrivals = np.sort(np.random.default_rng(1).random(600 * 5) * 600)
    workload = build(Trace(arrivals, None, None, "flat"), per_node, 1.0, 0.0, 1, arrivals="rate")
    runs = {
        who: engine.run(workload, per_node, ShrinksToTwo(who), start_replicas=3, seed=1)
        for who in ("operator", "replicaset")
    }
    hour = per_node.instance.usd_per_hour / 3600
    # The ReplicaSet takes a pod off the full node: both nodes stay for the whole trace.
    assert runs["replicaset"].usd == pytest.approx(2 * workload.trace_seconds * hour)
    # The operator drains the lone pod at the first decision (60 s): its node goes 35 s later.
    first = max(ShrinksToTwo.interval, engine.WARMUP_SECONDS)
    assert runs["operator"].usd == pytest.approx((workload.trace_seconds + first + DRAIN + EMPTY) * hour)


def test_each_family_scales_down_through_whoever_deletes_its_pods() -> None:
    deleters = {case.family: case.make().scale_down for case in runner.cases(runner.FAMILIES, 20, 10, sweep=False)}
    assert deleters == {
        "ours": "operator",
        "ours-warm": "operator",
        "hpa": "replicaset",
        "keda": "replicaset",
        "kpa": "replicaset",
        "static": "replicaset",
        "ray": "ray-serve",
    }
