"""The simulated fleet: cold-start phases, promotion, placeholders, drain and node removal, billing."""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import timedelta

import numpy as np
import pytest

from neuronfleet.planning.fleet import PodView
from neuronfleet.sim.fleet import EPOCH, Fleet, _deleter_order
from neuronfleet.sim.profiles import Profile, load_profile
from neuronfleet.sim.scaledown import ReadyPod, replicaset_order

PHASES = {"node": 100, "scheduling": 1, "pull": 50, "init": 2, "load": 3, "warmup": 4}


def fixed_profile() -> Profile:
    bert = load_profile("bert-base")
    return bert.model_copy(
        update={
            "cold_start": bert.cold_start.model_copy(update=PHASES),
            "promote_seconds": 2.0,
            "drain_seconds": 5.0,
        }
    )


def run_until(fleet: Fleet, until: float) -> None:
    now = 0.0
    while True:
        nxt = fleet.next_event(now)
        if nxt > until:
            break
        now = max(nxt, now + 1e-6)
        fleet.advance(now)
    fleet.advance(until)


def test_new_pod_pays_node_pull_and_start_phases() -> None:
    fleet = Fleet(fixed_profile(), np.random.default_rng(0))
    fleet.set_targets(0.0, active=1, warm=0, placeholders=0)
    assert fleet.counts(0.0).nodes == 1
    run_until(fleet, 159.9)
    assert fleet.serving(159.9) == 0
    run_until(fleet, 160.0)  # node 100 + scheduling 1 + pull 50 + init 2 + load 3 + warm-up 4
    assert fleet.serving(160.0) == 1
    assert fleet.pod_cold_starts == [pytest.approx(60.0)]  # bound at 100 s, ready at 160 s
    assert fleet.node_cold_starts == [pytest.approx(100.0)]


def test_a_node_launched_later_records_its_launch_to_ready_time() -> None:
    # The samples the warm pool's p90 reads: the node's own cold start, whatever the clock reads.
    fleet = Fleet(fixed_profile(), np.random.default_rng(0))
    fleet.set_targets(500.0, active=1, warm=0, placeholders=0)
    assert fleet.node_cold_starts == [pytest.approx(100.0)]
    now = 500.0
    while (nxt := fleet.next_event(now)) <= 660.0:
        now = max(nxt, now + 1e-6)
        fleet.advance(now)
    assert fleet.serving(660.0) == 1
    assert fleet.pod_cold_starts == [pytest.approx(60.0)]


def test_a_pod_bound_as_its_node_turns_ready_is_the_fleets_next_event() -> None:
    # The fleet keeps its counts and its next event for its version: binding the pod must move the
    # version, or the run would not see the pod turn ready until some other change.
    fleet = Fleet(fixed_profile(), np.random.default_rng(0))
    fleet.set_targets(0.0, active=1, warm=0, placeholders=0)
    assert fleet.next_event(0.0) == 100.0  # the node
    fleet.advance(100.0)
    assert fleet.counts(100.0).starting_active == 1
    assert fleet.next_event(100.0) == 160.0  # bound at 100 s: scheduling, pull, init, load, warm-up
    fleet.advance(160.0)
    assert fleet.counts(160.0).serving == 1


def test_warm_pods_are_promoted_in_seconds() -> None:
    fleet = Fleet(fixed_profile(), np.random.default_rng(0))
    fleet.start_ready(2)
    fleet.set_targets(0.0, active=2, warm=1, placeholders=0)
    run_until(fleet, 200.0)
    assert fleet.counts(200.0).warm_ready == 1
    fleet.set_targets(200.0, active=3, warm=1, placeholders=0)
    assert fleet.serving(201.0) == 2
    assert fleet.serving(202.0) == 3  # promote_seconds later, without a cold start
    counts = fleet.counts(202.0)
    assert counts.warm == 1 and counts.warm_ready == 0  # the pool refills with a new pod


def test_placeholder_node_is_taken_by_a_serving_pod() -> None:
    fleet = Fleet(fixed_profile(), np.random.default_rng(0))
    fleet.start_ready(1)
    fleet.set_targets(0.0, active=1, warm=0, placeholders=1)
    run_until(fleet, 200.0)  # the placeholder's node is up and has pulled the image
    fleet.set_targets(200.0, active=2, warm=0, placeholders=1)
    # Bound at once on the placeholder's node, image present: 1 + 2 + 3 + 4 s.
    run_until(fleet, 210.0)
    assert fleet.serving(210.0) == 2
    assert fleet.counts(210.0).nodes == 3  # the evicted placeholder got a new node


def test_scale_down_demotes_to_the_warm_pool_then_drains_and_frees_nodes() -> None:
    fleet = Fleet(fixed_profile(), np.random.default_rng(0), empty_node_seconds=30.0)
    fleet.start_ready(4)
    fleet.set_targets(0.0, active=2, warm=1, placeholders=0)
    counts = fleet.counts(0.0)
    assert (counts.serving, counts.warm_ready) == (2, 1)  # one demoted, one drained
    assert counts.nodes == 4  # the drained pod's node is kept while it drains
    run_until(fleet, 5.0)
    # The emptied node's removal is the fleet's next change (the run need not wake each second).
    assert fleet.next_event(5.0) == 35.0
    run_until(fleet, 34.0)
    assert fleet.counts(34.0).nodes == 4  # drain 5 s, then 30 s empty
    run_until(fleet, 36.0)
    assert fleet.counts(36.0).nodes == 3
    # The removed node lived 35 s and is billed EC2's 60 s minimum.
    assert fleet.node_seconds == pytest.approx(3 * 36.0 + 60.0)
    # Pod-seconds (the report's replica-hours) count the draining pod while it drains.
    assert fleet.pod_seconds == pytest.approx(3 * 36.0 + 5.0)


def test_a_deleted_warm_pod_frees_its_node_at_once_without_a_drain() -> None:
    # Only a serving pod drains (requests may be in flight on it); a warm pod serves none, so its
    # deletion frees its node's slot at once and the node goes empty_node_seconds later.
    fleet = Fleet(fixed_profile(), np.random.default_rng(0), empty_node_seconds=30.0)
    fleet.start_ready(4)
    fleet.set_targets(0.0, active=3, warm=1, placeholders=0)
    run_until(fleet, 100.0)
    fleet.set_targets(100.0, active=3, warm=0, placeholders=0)
    assert fleet.counts(100.0).warm == 0
    assert fleet.next_event(100.0) == 130.0
    run_until(fleet, 131.0)
    assert fleet.counts(131.0).nodes == 3
    assert fleet.pod_seconds == pytest.approx(4 * 100.0 + 3 * 31.0)


def test_a_pods_view_equals_the_one_its_dataclass_makes() -> None:
    # The fleet fills its views' fields without PodView's __init__ (a frozen dataclass's is slow, and a
    # run makes millions): each must be the view __init__ makes from the fields the fleet sets, every
    # other field at __init__'s default, through every state a pod goes through here (pending, bound,
    # running, ready, warm, placeholder).
    fleet = Fleet(fixed_profile(), np.random.default_rng(0))
    fleet.start_ready(1)
    fleet.set_targets(0.0, active=2, warm=1, placeholders=1)
    assert not hasattr(PodView, "__post_init__")
    names = {f.name for f in fields(PodView)}
    seen: list[PodView] = []
    for now in (0.0, 100.5, 150.5, 158.0, 300.0):
        run_until(fleet, now)
        for pod in fleet.pods.values():
            view = fleet._view(pod, now)
            made = PodView(**{name: getattr(view, name) for name in SET_BY_THE_FLEET})
            assert view == made, pod.name
            assert {k: v for k, v in vars(view).items() if k in names} == vars(made), pod.name
            seen.append(view)
    assert {(v.role, v.phase, v.ready) for v in seen} >= {
        ("active", "Pending", False),
        ("active", "Running", False),
        ("active", "Running", True),
        ("warm", "Running", True),
        ("placeholder", "Running", True),
    }


#: The fields a simulated pod's view sets (the rest are the dataclass's defaults).
SET_BY_THE_FLEET = ("name", "role", "revision", "template", "phase", "ready", "created_at", "ready_at", "node")


def test_the_deleters_order_reads_a_pods_new_view_not_the_record_it_kept() -> None:
    # The deleters' record of each pod is kept with the view it was made from, and made again for
    # a new view of the pod (its readiness moved): a ReplicaSet takes the most recently ready first.
    known: dict[str, tuple[PodView, ReadyPod]] = {}
    drain = _deleter_order(replicaset_order, known)
    now = EPOCH + timedelta(seconds=100)

    def view(name: str, node: str, ready_after: float) -> PodView:
        at = EPOCH + timedelta(seconds=ready_after)
        return PodView(name=name, role="active", node=node, phase="Running", ready=True, ready_at=at, created_at=at)

    a, b = view("a", "n1", 10.0), view("b", "n2", 20.0)
    assert [p.name for p in drain([a, b], [], now)] == ["b", "a"]
    again = replace(a, ready_at=EPOCH + timedelta(seconds=30))
    assert [p.name for p in drain([again, b], [], now)] == ["a", "b"]
    assert known["a"][0] is again and known["a"][1].ready_at == 30.0


def test_a_pod_shows_running_from_the_instant_its_node_has_the_image() -> None:
    # The operator sees a pod Running (loading) once its image is pulled: from that instant on, as a
    # kubelet starts the container when the pull ends, not one event later.
    fleet = Fleet(fixed_profile(), np.random.default_rng(0))
    fleet.set_targets(0.0, active=1, warm=0, placeholders=0)
    run_until(fleet, 100.0)  # the node is up and the pod bound: scheduling 1 s, then the 50 s pull
    (pod,) = fleet.pods.values()
    assert pod.node is not None and fleet.nodes[pod.node].image_at == 151.0
    assert fleet._view(pod, 150.5).phase == "Pending"
    assert fleet._view(pod, 151.0).phase == "Running"
