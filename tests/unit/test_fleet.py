"""Fleet plan, by example: scale up and down, drain, revisions, failures, placeholders, names."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from neuronfleet.api.v1alpha1 import InferenceDeploymentSpec
from neuronfleet.planning.fleet import (
    Action,
    CreatePlaceholder,
    CreatePod,
    DeletePlaceholder,
    DeletePod,
    FleetPolicy,
    FleetTarget,
    PodView,
    Relabel,
    RolloutRecord,
    apply_actions,
    describe_action,
    plan_fleet,
    policy_for_spec,
    summarize_unplanned,
)
from neuronfleet.planning.labels import ArtifactRevision, FleetRevision, serving_pod_name

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
OLD = ArtifactRevision("aaaaaaaaaa", "s3://artifacts/bert/aaaaaaaaaa/")
NEW = ArtifactRevision("bbbbbbbbbb", "s3://artifacts/bert/bbbbbbbbbb/")
TEMPLATE = "t0t0t0t0t0"


def target(active: int, warm: int = 0, placeholders: int = 0, artifact: ArtifactRevision | None = OLD) -> FleetTarget:
    return FleetTarget(template=TEMPLATE, artifact=artifact, active=active, warm=warm, placeholders=placeholders)


def pod(
    name: str, role: str = "active", *, ready: bool = True, artifact: ArtifactRevision = OLD, **kw: object
) -> PodView:
    fields: dict[str, object] = {
        "phase": "Running" if ready else "Pending",
        "created_at": NOW - timedelta(minutes=10),
        "ready_at": NOW - timedelta(minutes=5) if ready else None,
        "node": "node-1" if ready else None,
    }
    fields.update(kw)
    return PodView(name, role, artifact.id, TEMPLATE, ready=ready, **fields)  # type: ignore[arg-type]


def apply_refusing_creations(pods: Sequence[PodView], actions: Sequence[Action], now: datetime) -> list[PodView]:
    """The plan applied as Reconciler.apply does when the API server refuses every creation (a
    quota the old pods fill): in order, stopping at the first refused create."""
    applied: list[Action] = []
    for action in actions:
        if isinstance(action, CreatePod | CreatePlaceholder):
            break
        applied.append(action)
    return apply_actions(pods, applied, now)


def kinds(actions: Sequence[Action]) -> list[str]:
    return [a.kind for a in actions]


def roles(pods: Sequence[PodView]) -> Counter[str]:
    return Counter(p.role for p in pods)


def test_empty_fleet_creates_active_warm_and_placeholders_and_is_then_idempotent() -> None:
    plan = plan_fleet("bert", target(2, warm=1, placeholders=1), [], NOW)
    creates = [a for a in plan.actions if isinstance(a, CreatePod)]
    assert [(a.name, a.role) for a in creates] == [
        (serving_pod_name("bert", FleetRevision(OLD, TEMPLATE), 0), "active"),
        (serving_pod_name("bert", FleetRevision(OLD, TEMPLATE), 1), "active"),
        (serving_pod_name("bert", FleetRevision(OLD, TEMPLATE), 2), "warm"),
    ]
    assert sum(isinstance(a, CreatePlaceholder) for a in plan.actions) == 1
    after = apply_actions([], plan.actions, NOW)
    assert plan_fleet("bert", target(2, warm=1, placeholders=1), after, NOW).actions == ()


def test_planning_twice_on_the_same_view_asks_for_the_same_names() -> None:
    # After a crash the operator re-plans on the same (possibly stale) view: same names -> 409.
    first = plan_fleet("bert", target(3, warm=1), [pod("bert-x-0")], NOW)
    second = plan_fleet("bert", target(3, warm=1), [pod("bert-x-0")], NOW)
    assert first.actions == second.actions
    assert len({a.name for a in first.actions}) == len(first.actions)


def test_names_held_by_pods_the_fleet_does_not_control_are_skipped() -> None:
    # A re-created deployment's predecessor left slots 0 and 2 of the same revision behind.
    def name(slot: int) -> str:
        return serving_pod_name("bert", FleetRevision(OLD, TEMPLATE), slot)

    plan = plan_fleet("bert", target(2), [], NOW, taken_names=[name(0), name(2)])
    assert [a.name for a in plan.actions if isinstance(a, CreatePod)] == [name(1), name(3)]


def test_no_artifact_yet_creates_only_placeholders() -> None:
    plan = plan_fleet("bert", target(2, warm=1, placeholders=2, artifact=None), [], NOW)
    assert kinds(plan.actions) == ["create-placeholder", "create-placeholder"]
    assert not plan.summary.revision_known


def test_scale_up_promotes_ready_warm_first_then_creates_active_and_refills_pool() -> None:
    pods = [pod("a0"), pod("a1"), pod("w0", "warm")]
    plan = plan_fleet("bert", target(5, warm=1), pods, NOW)
    assert plan.actions[0] == Relabel("w0", "active", "warm", "promoted: the fleet needs it active")
    creates = [a for a in plan.actions if isinstance(a, CreatePod)]
    assert Counter(a.role for a in creates) == Counter({"active": 2, "warm": 1})
    assert kinds(plan.actions) == ["relabel", "create-pod", "create-pod", "create-pod"]


def test_unready_warm_pod_is_not_promoted() -> None:
    pods = [pod("a0"), pod("w0", "warm", ready=False)]
    plan = plan_fleet("bert", target(2, warm=1), pods, NOW)
    # w0 stays the (loading) pool; the active deficit gets a new pod that serves once ready.
    assert [(a.kind, getattr(a, "role", None)) for a in plan.actions] == [("create-pod", "active")]
    # If w0 is ready before the new pod, it is promoted and the new pod takes its place in the pool.
    after = apply_actions(pods, plan.actions, NOW)
    after = [replace(p, ready=True, ready_at=NOW) if p.name == "w0" else p for p in after]
    swapped = plan_fleet("bert", target(2, warm=1), after, NOW)
    assert {(a.name, a.role) for a in swapped.actions if isinstance(a, Relabel)} == {
        ("w0", "active"),
        (plan.actions[0].name, "warm"),
    }


def test_a_ready_warm_pod_replaces_a_loading_active_one() -> None:
    pods = [pod("a0", ready=False), pod("w0", "warm")]
    plan = plan_fleet("bert", target(1, warm=1), pods, NOW)
    assert set(plan.actions) == {
        Relabel("w0", "active", "warm", "promoted: the fleet needs it active"),
        Relabel("a0", "warm", "active", "demoted into the warm pool"),
    }


def test_scale_down_drains_and_deletes_only_after_the_drain() -> None:
    pods = [pod(f"a{i}", in_flight=3) for i in range(5)] + [pod("w0", "warm")]
    plan = plan_fleet("bert", target(1, warm=1), pods, NOW)
    drains = [a for a in plan.actions if isinstance(a, Relabel)]
    assert len(drains) == 4
    assert all(a.role == "draining" and a.drain_started_at == NOW for a in drains)
    assert not any(isinstance(a, DeletePod) for a in plan.actions)
    after = apply_actions(pods, plan.actions, NOW)
    assert roles(after) == Counter({"draining": 4, "active": 1, "warm": 1})
    # Still busy a little later: nothing is deleted.
    assert plan_fleet("bert", target(1, warm=1), after, NOW + timedelta(seconds=30)).actions == ()
    # Two have finished their work: those two go; the others wait for the grace period.
    idle = {d.name for d in drains[:2]}
    drained = [replace(p, in_flight=0) if p.name in idle else p for p in after]
    later = plan_fleet("bert", target(1, warm=1), drained, NOW + timedelta(seconds=30))
    assert {a.name for a in later.actions if isinstance(a, DeletePod)} == idle
    # After the grace period the busy ones go too.
    policy = FleetPolicy(drain_grace_seconds=60)
    final = plan_fleet("bert", target(1, warm=1), drained, NOW + timedelta(seconds=61), policy)
    assert {a.name for a in final.actions if isinstance(a, DeletePod)} == {d.name for d in drains}


def test_idle_draining_pod_waits_for_endpoints_to_drop_it() -> None:
    draining = pod("d0", "draining", in_flight=0, drain_started_at=NOW)
    policy = FleetPolicy(min_drain_seconds=5)
    assert plan_fleet("bert", target(0), [draining], NOW + timedelta(seconds=2), policy).actions == ()
    assert kinds(plan_fleet("bert", target(0), [draining], NOW + timedelta(seconds=5), policy).actions) == [
        "delete-pod"
    ]


def test_a_draining_pod_whose_work_is_not_observed_goes_once_endpoints_have_dropped_it() -> None:
    # The operator does not read a pod's in-flight count: waiting for it kept the node for the
    # whole grace period (then SIGTERM gave the pod that period again).
    draining = pod("d0", "draining", drain_started_at=NOW)
    assert draining.in_flight is None
    policy = FleetPolicy(min_drain_seconds=5, drain_grace_seconds=600)
    assert plan_fleet("bert", target(0), [draining], NOW + timedelta(seconds=2), policy).actions == ()
    gone = plan_fleet("bert", target(0), [draining], NOW + timedelta(seconds=5), policy).actions
    assert [(a.kind, a.name, a.reason) for a in gone if isinstance(a, DeletePod)] == [
        ("delete-pod", "d0", "out of the Service: the model server finishes its accepted requests on SIGTERM")
    ]
    # One that reports work in flight still waits for it.
    busy = replace(draining, in_flight=2)
    assert plan_fleet("bert", target(0), [busy], NOW + timedelta(seconds=300), policy).actions == ()


def test_scale_down_fills_an_empty_pool_with_a_surplus_active_pod() -> None:
    pods = [pod("a0"), pod("a1"), pod("a2")]
    plan = plan_fleet("bert", target(1, warm=1), pods, NOW)
    assert Counter((a.kind, getattr(a, "role", "")) for a in plan.actions) == Counter(
        {("relabel", "warm"): 1, ("relabel", "draining"): 1}
    )


def test_new_revision_warms_new_pods_first_without_touching_old_actives() -> None:
    pods = [pod(f"old{i}") for i in range(3)]
    plan = plan_fleet("bert", target(3, artifact=NEW), pods, NOW)
    assert all(isinstance(a, CreatePod) and a.role == "warm" and a.revision.artifact == NEW for a in plan.actions)
    assert len(plan.actions) == 3
    assert plan.summary.rolling_out


def test_new_revision_swaps_one_for_one_as_new_pods_become_ready() -> None:
    pods = [pod(f"old{i}") for i in range(3)] + [
        pod("new0", "warm", artifact=NEW),
        pod("new1", "warm", artifact=NEW, ready=False),
        pod("new2", "warm", artifact=NEW, ready=False),
    ]
    plan = plan_fleet("bert", target(3, artifact=NEW), pods, NOW)
    relabels = [a for a in plan.actions if isinstance(a, Relabel)]
    assert (relabels[0].name, relabels[0].role) == ("new0", "active")
    assert sum(a.role == "draining" for a in relabels) == 1
    after = apply_actions(pods, plan.actions, NOW)
    assert sum(p.role == "active" and p.ready for p in after) == 3
    assert sum(p.role == "active" and p.revision == OLD.id for p in after) == 2


def test_swap_completes_then_old_pods_drain() -> None:
    pods = [pod(f"old{i}") for i in range(2)] + [pod(f"new{i}", "warm", artifact=NEW) for i in range(2)]
    plan = plan_fleet("bert", target(2, artifact=NEW), pods, NOW)
    promotions = [a for a in plan.actions if isinstance(a, Relabel) and a.role == "active"]
    drains = [a for a in plan.actions if isinstance(a, Relabel) and a.role == "draining"]
    assert len(promotions) == 2 and len(drains) == 2
    # Promotions come first: applied in order, ready active never drops.
    assert plan.actions.index(promotions[-1]) < plan.actions.index(drains[0])


def test_old_warm_and_unready_old_active_pods_are_deleted_at_once() -> None:
    pods = [pod("old0"), pod("old1", ready=False), pod("oldw", "warm")]
    plan = plan_fleet("bert", target(1, artifact=NEW), pods, NOW)
    assert {a.name for a in plan.actions if isinstance(a, DeletePod)} == {"old1", "oldw"}
    assert not any(isinstance(a, Relabel) for a in plan.actions)


def test_a_rollout_keeps_the_loaded_old_standby_until_new_standby_is_loaded() -> None:
    # A spec change with a warm pool, paced by the surge: the old loaded warm pod stays standby
    # (minutes of loading on Neuron without one otherwise); the loading one is no standby yet.
    policy = FleetPolicy(max_surge=1)
    rollout = target(1, warm=1, artifact=NEW)
    pods = [pod("a0"), pod("w0", "warm"), pod("w1", "warm", ready=False)]
    plan = plan_fleet("bert", rollout, pods, NOW, policy)
    assert [a.name for a in plan.actions if isinstance(a, DeletePod)] == ["w1"]
    # w0 is stamped as kept (its own clock for the progress deadline).
    # w1 serves nothing: it goes before the creation, which a quota it fills could refuse.
    assert kinds(plan.actions) == ["relabel", "delete-pod", "create-pod"]
    assert plan.summary.kept_outdated_warm == 1
    state = [p for p in apply_actions(pods, plan.actions, NOW) if not p.deleting]
    assert plan_fleet("bert", rollout, state, NOW, policy).actions == ()
    # The first new pod is loaded: it replaces the old active (swap); the old standby stays.
    state = [replace(p, ready=True, phase="Running", ready_at=NOW) for p in state]
    swap = plan_fleet("bert", rollout, state, NOW, policy)
    assert {(a.name, a.role) for a in swap.actions if isinstance(a, Relabel)} == {
        (state[-1].name, "active"),
        ("a0", "draining"),
    }
    assert not any(isinstance(a, DeletePod) and a.name == "w0" for a in swap.actions)
    assert swap.summary.kept_outdated_warm == 1
    assert sum(isinstance(a, CreatePod) and a.role == "warm" for a in swap.actions) == 1
    state = [p for p in apply_actions(state, swap.actions, NOW) if p.role != "draining"]
    # Loading, the new warm pod is no standby yet: the old one stays until it is loaded...
    assert plan_fleet("bert", rollout, state, NOW, policy).actions == ()
    # ...and goes in the plan that sees it loaded.
    state = [replace(p, ready=True, phase="Running", ready_at=NOW) for p in state]
    done = plan_fleet("bert", rollout, state, NOW, policy)
    assert [(a.kind, a.name) for a in done.actions] == [("delete-pod", "w0")]
    assert done.summary.kept_outdated_warm == 0


def test_a_rollout_promotes_the_kept_old_standby_into_the_capacity_a_lost_pod_leaves() -> None:
    # The rule the held rollout follows, in any rollout: the loaded old warm pod serves in place of
    # the lost active pod while the new ones load, and never beyond the target.
    rollout = target(2, warm=1, artifact=NEW)
    pods = [pod("a0", node="gone", node_lost=True), pod("a1"), pod("w0", "warm"), pod("w1", "warm")]
    plan = plan_fleet("bert", rollout, pods, NOW)
    assert [(a.name, a.role) for a in plan.actions if isinstance(a, Relabel)] == [("w0", "active"), ("w1", "warm")]
    assert Counter(a.role for a in plan.actions if isinstance(a, CreatePod)) == Counter({"warm": 3})
    assert plan.summary.kept_outdated_warm == 1  # w1: still standby
    after = [p for p in apply_actions(pods, plan.actions, NOW) if not p.deleting]
    assert sum(p.role == "active" for p in after) == 2
    assert plan_fleet("bert", rollout, after, NOW).actions == (), "no flip"


def test_an_unschedulable_replacement_keeps_the_old_standby_until_the_progress_deadline() -> None:
    # The old loaded warm pod may hold the only spare node: kept until the new one is loaded, the
    # new one would never be (a deadlock: the rollout never ends). An unschedulable pod alone is no
    # sign of it (a node autoscaler adds a node for it: the wait the standby covers); the progress
    # deadline, counted from when the pod was first kept, lets the old pod go.
    rollout = target(1, warm=1, artifact=NEW)
    policy = FleetPolicy(progress_deadline_seconds=1800)
    stuck = pod("n-w", "warm", ready=False, artifact=NEW, unschedulable_message="0/2 nodes are available")
    pods = [pod("n-a", artifact=NEW), pod("o-w", "warm", kept_since=NOW - timedelta(minutes=5)), stuck]
    waiting = plan_fleet("bert", rollout, pods, NOW, policy)
    assert waiting.actions == () and waiting.summary.kept_outdated_warm == 1
    assert plan_fleet("bert", rollout, pods, NOW + timedelta(minutes=24), policy).actions == ()
    later = NOW + timedelta(minutes=25)  # kept for 30 minutes
    past = plan_fleet("bert", rollout, pods, later, policy)
    assert [(a.kind, a.name) for a in past.actions] == [("delete-pod", "o-w")]
    assert past.summary.kept_outdated_warm == 0
    after = [p for p in apply_actions(pods, past.actions, later) if not p.deleting]
    assert not plan_fleet("bert", rollout, after, later, policy).summary.rolling_out


def test_the_old_standby_goes_once_the_rollout_is_past_its_progress_deadline() -> None:
    # A replacement that loads for ever (crash-looping) is caught by the same rule; RolloutStalled
    # (the rollout's own clock, since the last new pod became ready) is reported as well.
    rollout = target(1, warm=1, artifact=NEW)
    policy = FleetPolicy(progress_deadline_seconds=1800)
    loading = pod("n-w", "warm", ready=False, artifact=NEW, node="node-2", phase="Running")
    kept = pod("o-w", "warm", kept_since=NOW - timedelta(minutes=10))
    pods = [pod("n-a", artifact=NEW, ready_at=NOW - timedelta(minutes=20)), kept, loading]
    within = plan_fleet("bert", rollout, pods, NOW, policy)
    assert within.actions == () and within.summary.kept_outdated_warm == 1
    later = NOW + timedelta(minutes=21)  # kept for 31 minutes
    began = RolloutRecord(FleetRevision(NEW, TEMPLATE).key, NOW - timedelta(minutes=40))
    past = plan_fleet("bert", rollout, pods, later, policy, rollout=began)
    assert past.summary.rollout_stalled(later, 1800)
    assert [(a.kind, a.name) for a in past.actions] == [("delete-pod", "o-w")]


def test_a_lost_active_is_replaced_by_the_old_actives_still_serving_before_the_old_standby() -> None:
    # Three actives wanted, one old one lost, one new pod loaded: the new one is promoted and both
    # old actives keep serving; draining one to promote the old standby in its place spends the
    # standby for nothing.
    rollout = target(3, warm=1, artifact=NEW)
    pods = [pod("o-a1"), pod("o-a2"), pod("o-w", "warm"), pod("n-w1", "warm", artifact=NEW)]
    plan = plan_fleet("bert", rollout, pods, NOW)
    assert [(a.name, a.role) for a in plan.actions if isinstance(a, Relabel)] == [("n-w1", "active"), ("o-w", "warm")]
    assert plan.summary.kept_outdated_warm == 1
    after = [p for p in apply_actions(pods, plan.actions, NOW) if not p.deleting]
    assert sum(p.role == "active" and p.ready for p in after) == 3
    assert plan_fleet("bert", rollout, after, NOW).actions == (), "no flip"


def test_the_old_standby_is_promoted_over_an_unready_active_as_a_current_one_would_be() -> None:
    # The only active stops being ready (a probe failing): a loaded warm pod is promoted in its
    # place, the old revision's kept standby as a current one (the unready active joins the pool).
    rollout = target(1, warm=1, artifact=NEW)
    unready = pod("n-a", ready=False, artifact=NEW, node="node-1", phase="Running")
    loading = pod("n-w", "warm", ready=False, artifact=NEW, node="node-3", phase="Running")
    pods = [unready, pod("o-w", "warm"), loading]
    plan = plan_fleet("bert", rollout, pods, NOW)
    assert [(a.name, a.role) for a in plan.actions if isinstance(a, Relabel)] == [("o-w", "active"), ("n-a", "warm")]
    assert not [a for a in plan.actions if isinstance(a, DeletePod | CreatePod)]
    after = [p for p in apply_actions(pods, plan.actions, NOW) if not p.deleting]
    assert plan_fleet("bert", rollout, after, NOW).actions == (), "no flip"
    # Once the new pod is ready it is promoted and the old one drains, as in any rollout.
    loaded = [replace(p, ready=True, ready_at=NOW) if p.name == "n-a" else p for p in after]
    swap = plan_fleet("bert", rollout, loaded, NOW)
    assert {(a.name, a.role) for a in swap.actions if isinstance(a, Relabel)} == {
        ("n-a", "active"),
        ("o-w", "draining"),
    }


def test_the_kept_old_standby_is_stamped_and_goes_at_its_own_deadline_with_no_new_pod_at_all() -> None:
    # New pods refused (a quota the old pods fill): no current pod ever exists, so no rollout clock
    # could start; the kept pod's own clock, stamped by the plan that first keeps it, still ends.
    rollout = target(1, warm=1, artifact=NEW)
    policy = FleetPolicy(progress_deadline_seconds=600)
    pods = [pod("o-a"), pod("o-w", "warm")]
    first = plan_fleet("bert", rollout, pods, NOW, policy)
    stamps = [a for a in first.actions if isinstance(a, Relabel)]
    assert [(a.name, a.role, a.previous_role, a.kept_since) for a in stamps] == [("o-w", "warm", "warm", NOW)]
    assert first.summary.kept_outdated_warm == 1
    # The creations are refused and the apply stops at the first: the stamp still lands.
    state = apply_refusing_creations(pods, first.actions, NOW)
    assert [p.kept_since for p in state if p.name == "o-w"] == [NOW]
    assert plan_fleet("bert", rollout, state, NOW + timedelta(seconds=599), policy).summary.kept_outdated_warm == 1
    assert not [a for a in plan_fleet("bert", rollout, state, NOW, policy).actions if isinstance(a, Relabel)]
    later = NOW + timedelta(seconds=600)
    past = plan_fleet("bert", rollout, state, later, policy)
    assert ("delete-pod", "o-w") in [(a.kind, a.name) for a in past.actions]
    assert past.summary.kept_outdated_warm == 0
    # The release lands too, though the creations are still refused.
    assert "o-w" not in [p.name for p in apply_refusing_creations(state, past.actions, later)]


def test_a_stamp_in_the_future_is_written_again_as_now_and_keeps_no_standby_past_the_deadline() -> None:
    # A skewed clock or a hand-written annotation a day ahead: read as it is, the old standby would
    # be kept a day past the deadline; it is stamped again with the plan's now.
    rollout = target(1, warm=1, artifact=NEW)
    policy = FleetPolicy(progress_deadline_seconds=600)
    pods = [pod("o-a"), pod("o-w", "warm", kept_since=NOW + timedelta(days=1))]
    first = plan_fleet("bert", rollout, pods, NOW, policy)
    assert [(a.name, a.kept_since) for a in first.actions if isinstance(a, Relabel)] == [("o-w", NOW)]
    state = apply_refusing_creations(pods, first.actions, NOW)
    later = NOW + timedelta(seconds=600)
    assert "o-w" not in [
        p.name
        for p in apply_refusing_creations(state, plan_fleet("bert", rollout, state, later, policy).actions, later)
    ]


def test_a_drain_start_in_the_future_is_recorded_again_as_now() -> None:
    pods = [pod("a0"), pod("d0", "draining", drain_started_at=NOW + timedelta(days=1), in_flight=0)]
    policy = FleetPolicy(min_drain_seconds=30)
    first = plan_fleet("bert", target(1), pods, NOW, policy)
    assert [(a.name, a.role, a.drain_started_at) for a in first.actions if isinstance(a, Relabel)] == [
        ("d0", "draining", NOW)
    ]
    state = apply_actions(pods, first.actions, NOW)
    later = NOW + timedelta(seconds=30)
    assert [
        a.name for a in plan_fleet("bert", target(1), state, later, policy).actions if isinstance(a, DeletePod)
    ] == ["d0"]


def test_a_rollback_keeps_the_standby_of_the_revision_left_until_it_is_replaced() -> None:
    # Mid-rollout OLD -> NEW, the user rolls back: OLD's pods were made days ago, but the NEW
    # standby left behind is kept from now on, not deleted at once with nothing loaded in its place.
    back = target(2, warm=1, artifact=OLD)
    policy = FleetPolicy(progress_deadline_seconds=600)
    days = NOW - timedelta(days=3)
    pods = [
        pod("o-a", created_at=days, ready_at=days),
        pod("n-a", artifact=NEW),
        pod("n-w", "warm", artifact=NEW),
    ]
    plan = plan_fleet("bert", back, pods, NOW, policy)
    assert not any(isinstance(a, DeletePod) and a.name == "n-w" for a in plan.actions)
    assert ("n-w", NOW) in [(a.name, a.kept_since) for a in plan.actions if isinstance(a, Relabel)]
    assert plan.summary.kept_outdated_warm == 1


def test_a_flapping_new_active_does_not_keep_the_old_standby_past_its_deadline() -> None:
    # The new active's readiness flapped a minute ago (ready_at moved) and the new warm pod
    # crash-loops: the old standby, kept for three deadlines, goes all the same.
    rollout = target(1, warm=1, artifact=NEW)
    policy = FleetPolicy(progress_deadline_seconds=600)
    crashing = pod(
        "n-w", "warm", ready=False, artifact=NEW, node="node-3", phase="Running", waiting_reason="CrashLoopBackOff"
    )
    flapped = pod("n-a", artifact=NEW, ready_at=NOW - timedelta(minutes=1))
    kept = pod("o-w", "warm", kept_since=NOW - timedelta(minutes=30))
    plan = plan_fleet("bert", rollout, [flapped, crashing, kept], NOW, policy)
    assert [(a.kind, a.name) for a in plan.actions] == [("delete-pod", "o-w")]
    event = describe_action(plan.actions[0])
    assert event is not None
    assert event.message == "deleted pod o-w: new revision: old standby kept for the progress deadline (600s)"


def test_a_pod_current_again_loses_its_standby_stamp() -> None:
    # Kept as old standby, then rolled back to: its stamp means nothing now, and left in place it
    # would release the pod at once in the next rollout.
    pods = [pod("a0"), pod("w0", "warm", kept_since=NOW - timedelta(hours=2))]
    plan = plan_fleet("bert", target(1, warm=1), pods, NOW)
    assert [(a.name, a.role, a.kept_since) for a in plan.actions if isinstance(a, Relabel)] == [("w0", "warm", None)]
    after = apply_actions(pods, plan.actions, NOW)
    assert plan_fleet("bert", target(1, warm=1), after, NOW).actions == ()


def test_an_active_pushed_out_by_the_old_standby_is_not_cut_for_a_pending_warm_pod() -> None:
    # The kept old warm pod is promoted over the loading active; the active it pushes out is
    # running (loading for minutes) and ranks before the pending warm pods, which have no node yet.
    rollout = target(2, warm=1, artifact=NEW)
    pending = {"phase": "Pending", "node": None, "created_at": NOW - timedelta(minutes=1)}
    pods = [
        pod("n-a1", artifact=NEW),
        pod("n-a2", ready=False, artifact=NEW, node="node-2", phase="Running"),
        pod("o-w1", "warm"),
        pod("n-w1", "warm", ready=False, artifact=NEW, **pending),
        pod("n-w2", "warm", ready=False, artifact=NEW, **pending),
    ]
    plan = plan_fleet("bert", rollout, pods, NOW)
    assert ("o-w1", "active") in [(a.name, a.role) for a in plan.actions if isinstance(a, Relabel)]
    deleted = [a.name for a in plan.actions if isinstance(a, DeletePod)]
    assert "n-a2" not in deleted
    assert deleted == ["n-w2"]


def test_max_surge_limits_new_pods_loading_at_once() -> None:
    pods = [pod(f"old{i}") for i in range(4)]
    policy = FleetPolicy(max_surge=1)
    plan = plan_fleet("bert", target(4, artifact=NEW), pods, NOW, policy)
    assert kinds(plan.actions) == ["create-pod"]
    after = apply_actions(pods, plan.actions, NOW)
    assert plan_fleet("bert", target(4, artifact=NEW), after, NOW, policy).actions == ()


def test_failed_pod_is_deleted_and_replaced_under_a_new_name() -> None:
    revision = FleetRevision(OLD, TEMPLATE)
    failed_name = serving_pod_name("bert", revision, 0)
    pods = [pod(failed_name, phase="Failed", ready=False), pod(serving_pod_name("bert", revision, 1))]
    plan = plan_fleet("bert", target(2), pods, NOW)
    assert DeletePod(failed_name, "replacing: pod phase Failed") in plan.actions
    creates = [a for a in plan.actions if isinstance(a, CreatePod)]
    assert [a.name for a in creates] == [serving_pod_name("bert", revision, 2)]
    assert plan.summary.replaced[0].name == failed_name


def test_held_creations_make_no_serving_pod_but_the_rest_of_the_plan_goes_on() -> None:
    # The served artifact is gone from the store: a new pod could not load it (it would crash-loop).
    held = replace(target(4, warm=1, placeholders=1), hold_creations="the artifact is gone")
    pods = [
        pod("a0", phase="Failed", ready=False),
        pod("a1"),
        pod("w0", "warm"),
        pod("d0", "draining", in_flight=0, drain_started_at=NOW - timedelta(minutes=1)),
    ]
    plan = plan_fleet("bert", held, pods, NOW)
    assert not any(isinstance(a, CreatePod) for a in plan.actions)
    assert DeletePod("a0", "replacing: pod phase Failed") in plan.actions  # broken pods still go
    assert Relabel("w0", "active", "warm", "promoted: the fleet needs it active") in plan.actions  # loaded already
    assert any(isinstance(a, DeletePod) and a.name == "d0" for a in plan.actions)  # drains finish
    assert sum(isinstance(a, CreatePlaceholder) for a in plan.actions) == 1  # loads no model
    summary = plan.summary
    assert (summary.held_active, summary.held_warm, summary.hold_reason) == (2, 1, "the artifact is gone")
    # Scale-down still works while held; nothing is said held when nothing would be created.
    down = plan_fleet("bert", replace(held, active=0, warm=0, placeholders=0), [pod("a1", in_flight=2)], NOW)
    assert [(a.kind, getattr(a, "role", "")) for a in down.actions] == [("relabel", "draining")]
    assert (down.summary.held_active, down.summary.held_warm, down.summary.hold_reason) == (0, 0, None)
    # Only the warm pool held (the active set is whole): the reason is said all the same.
    pool_only = plan_fleet("bert", replace(held, active=1, placeholders=0), [pod("a1")], NOW).summary
    assert (pool_only.held_active, pool_only.held_warm, pool_only.held_placeholders) == (0, 1, 0)
    assert pool_only.hold_reason == "the artifact is gone"
    # Without the hold the same fleet is made whole again.
    creates = [a for a in plan_fleet("bert", replace(held, hold_creations=None), pods, NOW).actions]
    assert Counter(a.role for a in creates if isinstance(a, CreatePod)) == Counter({"active": 2, "warm": 1})


def test_held_rollout_keeps_the_outdated_warm_pool_and_placeholders_it_cannot_replace() -> None:
    # A spec change starts a rollout the API server refuses (cpuLimit below the request): the old
    # standby (loaded warm pods, spare-node placeholders) stays until the new pods can be made.
    held = replace(
        target(1, warm=2, placeholders=1, artifact=NEW), hold_creations="cpuLimit below request", hold_placeholders=True
    )
    old_ph = PodView("bert-ph-old-0", "placeholder", template="other", phase="Running", node="n1")
    pods = [pod("a0"), pod("w0", "warm"), pod("w1", "warm", ready=False), old_ph]
    plan = plan_fleet("bert", held, pods, NOW)
    assert not any(isinstance(a, (DeletePod, DeletePlaceholder, CreatePod, CreatePlaceholder)) for a in plan.actions)
    summary = plan.summary
    assert (summary.held_placeholders, summary.kept_outdated_warm, summary.kept_outdated_placeholders) == (1, 2, 1)
    # Once the hold ends the normal rollout replaces them, paced by the surge.
    free = replace(held, hold_creations=None, hold_placeholders=False)
    after = plan_fleet("bert", free, pods, NOW, FleetPolicy(max_surge=1)).actions
    # (The loaded old warm pod stays standby until a new one is loaded, as in any rollout.)
    assert {a.name for a in after if isinstance(a, (DeletePod, DeletePlaceholder))} == {"w1", "bert-ph-old-0"}
    assert sum(isinstance(a, CreatePod) for a in after) == 1


def test_a_hold_stops_the_old_standbys_clock_and_it_starts_again_once_released() -> None:
    # Kept for most of the deadline, then creations are held (nothing could replace the pod): it is
    # not released meanwhile, and once the hold ends it gets the whole deadline again.
    policy = FleetPolicy(progress_deadline_seconds=600)
    free = target(1, warm=1, artifact=NEW)
    held = replace(free, hold_creations="cpuLimit below request")
    pods = [pod("a0"), pod("w0", "warm", kept_since=NOW - timedelta(seconds=590))]
    during = plan_fleet("bert", held, pods, NOW + timedelta(hours=1), policy)
    assert [(a.name, a.kept_since) for a in during.actions if isinstance(a, Relabel)] == [("w0", None)]
    assert not [a for a in during.actions if isinstance(a, DeletePod)]
    state = apply_actions(pods, during.actions, NOW + timedelta(hours=1))
    later = NOW + timedelta(hours=2)
    after = plan_fleet("bert", free, state, later, policy)
    assert ("w0", later) in [(a.name, a.kept_since) for a in after.actions if isinstance(a, Relabel)]
    assert not [a for a in after.actions if isinstance(a, DeletePod)]


def test_the_old_standby_promoted_beside_a_kept_old_active_never_takes_the_actives_beyond_the_target() -> None:
    # Two actives wanted: the old ready active stays (the ready count needs it) and the old warm pod
    # is promoted beside it; both new actives, still waiting for a node, join the pool, instead of
    # one staying active as a third (found by the property test's held world).
    rollout = target(2, artifact=NEW)
    pods = [
        pod("o-a"),
        pod("o-w", "warm"),
        pod("n-a1", ready=False, artifact=NEW),
        pod("n-a2", ready=False, artifact=NEW),
    ]
    for step in (rollout, replace(rollout, hold_creations="cpuLimit below request")):
        plan = plan_fleet("bert", step, pods, NOW)
        after = [p for p in apply_actions(pods, plan.actions, NOW) if not p.deleting]
        assert sorted(p.name for p in after if p.role == "active") == ["o-a", "o-w"]
        assert sorted(p.name for p in after if p.role == "warm") == ["n-a1", "n-a2"]
        assert plan_fleet("bert", step, after, NOW).actions == (), "no flip"


HELD = "spec.runtime.cpuLimit is below the pods' CPU request"


def test_held_rollout_promotes_kept_standby_into_the_capacity_a_lost_pod_leaves() -> None:
    # The only active pod's node is lost while new pods are held: the loaded old warm pod kept as
    # standby serves, as standby does (it sat idle with no pod serving before).
    held = replace(target(1, warm=1, artifact=NEW), hold_creations=HELD)
    pods = [pod("a0", node="gone", node_lost=True), pod("w0", "warm")]
    plan = plan_fleet("bert", held, pods, NOW)
    assert Relabel("w0", "active", "warm", "promoted: new pods are held, the fleet needs it active") in plan.actions
    assert not any(isinstance(a, (CreatePod, CreatePlaceholder)) for a in plan.actions)
    assert plan.summary.held_active == 0 and plan.summary.held_rollout == 1 and plan.summary.held_warm == 1
    after = [p for p in apply_actions(pods, plan.actions, NOW) if not p.deleting]
    again = plan_fleet("bert", held, after, NOW)
    assert again.actions == () and again.summary.ready_active == 1, "kept serving, no flip-flop"
    # Never beyond the target: a second loaded old warm pod stays standby.
    two = plan_fleet("bert", held, [*pods, pod("w1", "warm")], NOW)
    assert sum(isinstance(a, Relabel) and a.role == "active" for a in two.actions) == 1
    assert two.summary.kept_outdated_warm == 1


def test_held_rollout_keeps_an_old_active_pod_not_ready_for_a_moment() -> None:
    # A container restarting (Running, not ready) while new pods are held: deleted, nothing could
    # replace it, and a fleet of one had no pod at all until the hold ended.
    held = replace(target(1, artifact=NEW), hold_creations=HELD)
    restarting = [pod("a0", ready=False)]
    plan = plan_fleet("bert", held, restarting, NOW)
    assert plan.actions == () and plan.summary.held_active == 0
    two = plan_fleet("bert", replace(held, active=2), [pod("a0"), pod("a1", ready=False)], NOW)
    assert not any(isinstance(a, DeletePod) for a in two.actions)
    # A loaded old warm pod serves in its place first; the restarting one goes as a surplus.
    both = plan_fleet("bert", replace(held, warm=1), [pod("a0", ready=False), pod("w0", "warm")], NOW)
    assert [a.name for a in both.actions if isinstance(a, Relabel) and a.role == "active"] == ["w0"]
    assert [a.name for a in both.actions if isinstance(a, DeletePod)] == ["a0"]


def test_held_rollout_keeps_the_loaded_old_warm_pods_first() -> None:
    # More old warm pods than the pool (it shrank): the loaded one stays, not the first by name.
    held = replace(target(1, warm=1, artifact=NEW), hold_creations=HELD)
    pods = [pod("a0"), pod("w0", "warm", ready=False), pod("w1", "warm")]
    deleted = [a.name for a in plan_fleet("bert", held, pods, NOW).actions if isinstance(a, DeletePod)]
    assert deleted == ["w0"]


def test_held_placeholders_keep_those_on_nodes_and_count_only_those_kept() -> None:
    # An old template's placeholders on nodes and a new one not scheduled, the new ones held: the
    # spare nodes stay held, and the warm pool does not count one the same plan deletes (it said
    # "2 placeholders on nodes", True, then "1/2", False, under the same hold).
    held = replace(
        target(1, placeholders=2, artifact=NEW), hold_creations="cpuLimit below request", hold_placeholders=True
    )
    pending_new = PodView("bert-ph-new-0", "placeholder", template=TEMPLATE, phase="Pending", node=None)
    old = [PodView(f"bert-ph-old-{i}", "placeholder", template="other", phase="Running", node=f"n{i}") for i in (0, 1)]
    pods = [pod("a0"), pending_new, *old]
    plan = plan_fleet("bert", held, pods, NOW)
    assert [(a.name, a.reason) for a in plan.actions if isinstance(a, DeletePlaceholder)] == [
        (
            "bert-ph-new-0",
            "not on a node: placeholders of the earlier placement on nodes are kept while new ones are held",
        )
    ]
    assert (plan.summary.spare_nodes, plan.summary.held_placeholders, plan.summary.kept_outdated_placeholders) == (
        2,
        2,
        2,
    )
    after = [p for p in apply_actions(pods, plan.actions, NOW) if not p.deleting]
    again = plan_fleet("bert", held, after, NOW)
    assert again.actions == () and again.summary.spare_nodes == 2
    # One on a node of each template and one wanted: the earlier template's goes first, as any
    # rollout would replace it.
    bound_new = replace(pending_new, phase="Running", node="n2")
    one = plan_fleet("bert", replace(held, placeholders=1), [pod("a0"), bound_new, old[0]], NOW)
    assert [a.name for a in one.actions if isinstance(a, DeletePlaceholder)] == ["bert-ph-old-0"]
    # Without the hold, a surplus placeholder on a node is not counted as the pool's.
    surplus = [PodView(f"p{i}", "placeholder", template=TEMPLATE, phase="Running", node=f"n{i}") for i in range(3)]
    plain = plan_fleet("bert", target(0, placeholders=1), surplus, NOW).summary
    assert (plain.placeholders_bound, plain.spare_nodes) == (3, 1)


def test_pod_on_a_vanished_node_is_force_deleted_and_replaced() -> None:
    pods = [pod("a0", node="gone", node_lost=True), pod("a1")]
    plan = plan_fleet("bert", target(2), pods, NOW)
    delete = next(a for a in plan.actions if isinstance(a, DeletePod))
    assert (delete.name, delete.grace_period_seconds) == ("a0", 0)
    assert sum(isinstance(a, CreatePod) and a.role == "active" for a in plan.actions) == 1


def test_pods_being_deleted_count_for_nothing_but_keep_their_names() -> None:
    revision = FleetRevision(OLD, TEMPLATE)
    terminating = pod(serving_pod_name("bert", revision, 0), deleting=True)
    plan = plan_fleet("bert", target(1), [terminating], NOW)
    assert [a.name for a in plan.actions] == [serving_pod_name("bert", revision, 1)]


def test_a_deleted_draining_pod_counts_as_draining_while_its_grace_period_runs() -> None:
    # Deleted (SIGTERM sent), the pod's server still finishes the requests it accepted, for up to
    # its grace period: it is still draining, though no longer in any other count.
    drained = pod("d1", "draining", drain_started_at=NOW - timedelta(seconds=12), deleting=True)
    terminating = replace(drained, grace_ends_at=NOW + timedelta(seconds=50))
    plan = plan_fleet("bert", target(1), [pod("a0"), terminating], NOW)
    assert (plan.summary.draining, plan.summary.active) == (1, 1)
    assert plan.actions == ()  # nothing waits for it: it is gone when the kubelet is done
    assert plan.summary.converged
    # Past its grace period it is stuck (its node gone, the kubelet not answering): not draining,
    # and not held for ever in the count.
    stuck = replace(drained, grace_ends_at=NOW - timedelta(seconds=1))
    assert plan_fleet("bert", target(1), [pod("a0"), stuck], NOW).summary.draining == 0
    # A deleted pod whose node is gone, or whose server has exited, finishes nothing.
    lost = replace(terminating, node="gone", node_lost=True)
    exited = replace(terminating, phase="Succeeded")
    assert plan_fleet("bert", target(1), [pod("a0"), lost, exited], NOW).summary.draining == 0
    # A deleted pod of another role is not draining (a warm one has no work; an active one is
    # replaced, and still in the Service's endpoints until they drop it).
    deleted_active = pod("a1", deleting=True, grace_ends_at=NOW + timedelta(seconds=50))
    assert plan_fleet("bert", target(1), [pod("a0"), deleted_active], NOW).summary.draining == 0


def test_an_unplanned_fleet_counts_a_deleted_draining_pod_in_its_grace_period_too() -> None:
    terminating = pod("d1", "draining", deleting=True, grace_ends_at=NOW + timedelta(seconds=50))
    stuck = replace(terminating, name="d2", grace_ends_at=NOW - timedelta(seconds=1))
    summary = summarize_unplanned(
        [pod("a0"), terminating, stuck],
        NOW,
        desired_active=1,
        desired_warm=0,
        desired_placeholders=0,
        revision_known=True,
    )
    assert (summary.draining, summary.active) == (1, 1)


def test_an_unplanned_fleet_counts_each_role_as_it_is() -> None:
    # No plan is made (the spec fits no instance type): the status still reports the pods as they
    # are, a loading warm pod as warm but not ready, a loading active one as active but not ready.
    pods = [
        pod("a0"),
        pod("a1", ready=False),
        pod("w0", "warm"),
        pod("w1", "warm", ready=False),
        pod("w2", "warm", ready=False),
        PodView("p0", "placeholder", template=TEMPLATE, phase="Running", node="node-2"),
    ]
    summary = summarize_unplanned(
        pods, NOW, desired_active=3, desired_warm=2, desired_placeholders=1, revision_known=True
    )
    assert (summary.active, summary.ready_active) == (2, 1)
    assert (summary.warm, summary.warm_ready) == (3, 1)
    assert (summary.placeholders, summary.draining) == (1, 0)


def test_placeholders_follow_the_template() -> None:
    stale = PodView("bert-ph-old-0", "placeholder", template="other", phase="Running", node="n1")
    plan = plan_fleet("bert", target(0, placeholders=1), [stale], NOW)
    assert DeletePlaceholder("bert-ph-old-0", "placement changed") in plan.actions
    assert sum(isinstance(a, CreatePlaceholder) for a in plan.actions) == 1
    surplus = [PodView(f"p{i}", "placeholder", template=TEMPLATE) for i in range(3)]
    plan = plan_fleet("bert", target(0, placeholders=1), surplus, NOW)
    assert [a.name for a in plan.actions if isinstance(a, DeletePlaceholder)] == ["p1", "p2"]


def test_template_change_rolls_pods_like_a_new_artifact() -> None:
    pods = [replace(pod("a0"), template="before")]
    plan = plan_fleet("bert", target(1), pods, NOW)
    assert [(a.kind, getattr(a, "role", "")) for a in plan.actions] == [("create-pod", "warm")]


PINNED = replace(OLD, sha256="a" * 64)
REPUBLISHED = replace(OLD, sha256="b" * 64)


def test_a_manifest_republished_under_the_same_revision_rolls_the_pods_to_it() -> None:
    # Same revision id and URI, another manifest sha256 recorded: the pods pinned to the old one
    # would serve other bytes than the status says (or refuse to start); warm-then-swap to the new.
    pods = [replace(pod(f"a{i}"), artifact_sha256=PINNED.sha256) for i in range(2)]
    assert plan_fleet("bert", target(2, artifact=PINNED), pods, NOW).actions == ()
    plan = plan_fleet("bert", target(2, artifact=REPUBLISHED), pods, NOW)
    creates = [a for a in plan.actions if isinstance(a, CreatePod)]
    assert [(a.role, a.revision.artifact.sha256) for a in creates] == [("warm", REPUBLISHED.sha256)] * 2
    assert {a.name for a in creates}.isdisjoint(p.name for p in pods)
    assert plan.summary.rolling_out
    after = apply_actions(pods, plan.actions, NOW)
    assert all(p.artifact_sha256 == REPUBLISHED.sha256 for p in after if p.name not in {q.name for q in pods})


def test_pods_made_before_pinning_roll_once_and_unpinned_targets_keep_them() -> None:
    unpinned = [pod("a0")]  # no manifest-sha256 annotation: made by an operator before pinning
    assert plan_fleet("bert", target(1), unpinned, NOW).actions == ()  # no sha256 recorded: current
    plan = plan_fleet("bert", target(1, artifact=PINNED), unpinned, NOW)
    assert [(a.kind, getattr(a, "role", "")) for a in plan.actions] == [("create-pod", "warm")]
    after = apply_actions(unpinned, plan.actions, NOW)
    assert plan_fleet("bert", target(1, artifact=PINNED), after, NOW).actions == ()  # once


def test_draining_pod_without_a_recorded_start_gets_one() -> None:
    plan = plan_fleet("bert", target(0), [pod("d0", "draining")], NOW)
    assert plan.actions == (Relabel("d0", "draining", "draining", "drain start was not recorded", NOW),)


def test_summary_counts_and_problems() -> None:
    pods = [
        pod("a0"),
        pod(
            "a1", ready=False, unschedulable_message="0/3 nodes are available: 3 Insufficient aws.amazon.com/neuroncore"
        ),
        pod("w0", "warm", ready=False, node="n1", waiting_reason="ImagePullBackOff", waiting_message="not found"),
        pod("d0", "draining", drain_started_at=NOW),
        PodView("ph0", "placeholder", template=TEMPLATE),
    ]
    summary = plan_fleet("bert", target(2, warm=1, placeholders=1), pods, NOW).summary
    assert (summary.active, summary.ready_active, summary.warm, summary.warm_ready) == (2, 1, 1, 0)
    assert (summary.draining, summary.placeholders, summary.outdated) == (1, 1, 0)
    assert [p.name for p in summary.unschedulable] == ["a1"]
    assert [(p.name, p.reason) for p in summary.stuck] == [("w0", "ImagePullBackOff")]
    assert not summary.converged


def test_rollout_creates_active_pods_for_capacity_the_old_revision_lost() -> None:
    # 3 wanted; only old0 still serves; new0 is loading and will take one slot when ready.
    pods = [pod("old0"), pod("old1", ready=False), pod("new0", "warm", artifact=NEW, ready=False)]
    plan = plan_fleet("bert", target(3, artifact=NEW), pods, NOW)
    assert DeletePod("old1", "new revision: outdated active pod") in plan.actions
    created = Counter(a.role for a in plan.actions if isinstance(a, CreatePod))
    # One active pod for the lost capacity, one warm pod that will be swapped in for old0.
    assert created == Counter({"active": 1, "warm": 1})


def test_default_policy_promotes_into_the_thinnest_zone_and_drains_the_fullest() -> None:
    policy = FleetPolicy()
    pods = [
        pod("a0", zone="us-east-1a", node="n1"),
        pod("a1", zone="us-east-1a", node="n2"),
        pod("a2", zone="us-east-1b", node="n3", ready_at=NOW - timedelta(minutes=1)),
        pod("wa", "warm", zone="us-east-1a", node="n1"),
        pod("wb", "warm", zone="us-east-1b", node="n4"),
    ]
    up = plan_fleet("bert", target(4, warm=1), pods, NOW, policy)
    assert [a.name for a in up.actions if isinstance(a, Relabel)] == ["wb"]
    down = plan_fleet("bert", target(2, warm=2), pods, NOW, policy)
    drained = [a.name for a in down.actions if isinstance(a, Relabel) and a.role == "draining"]
    assert len(drained) == 1
    assert drained[0] in ("a0", "a1")  # from us-east-1a, which has two active pods


def _active_after(plan_pods: list[PodView], fleet: FleetTarget) -> Counter[str | None]:
    plan = plan_fleet("bert", fleet, plan_pods, NOW)
    leaving = {
        a.name for a in plan.actions if isinstance(a, DeletePod) or (isinstance(a, Relabel) and a.role != "active")
    }
    promoted = {a.name for a in plan.actions if isinstance(a, Relabel) and a.role == "active"}
    return Counter(p.zone for p in plan_pods if (p.role == "active" and p.name not in leaving) or p.name in promoted)


def test_pods_the_plan_removes_do_not_tilt_the_zones_of_the_pods_it_keeps() -> None:
    # Outdated actives in a rollout and loading actives pushed out of the active set leave with this
    # very plan: counted as staying, they made every pod kept come from the other zone.
    new = [pod(f"new-{z}{i}", artifact=NEW, zone=z, node=f"n{z}{i}") for z in "ab" for i in range(2)]
    old = [pod(f"old{i}", zone="a", node=f"oa{i}") for i in range(3)]
    assert _active_after(old + new, target(2, artifact=NEW)) == Counter({"a": 1, "b": 1})
    loading = [pod(f"load-b{i}", artifact=NEW, ready=False, zone="b", node=f"lb{i}") for i in range(3)]
    assert _active_after(new + loading, target(2, artifact=NEW)) == Counter({"a": 1, "b": 1})


def test_a_rollout_swap_promotes_into_both_zones_when_the_old_pods_were_in_one() -> None:
    old = [pod(f"old{i}", zone="a", node=f"oa{i}") for i in range(3)]
    warm = [pod(f"w{z}{i}", "warm", artifact=NEW, zone=z, node=f"w{z}{i}") for z in "ab" for i in range(3)]
    plan = plan_fleet("bert", target(3, artifact=NEW), old + warm, NOW)
    promoted = [a.name for a in plan.actions if isinstance(a, Relabel) and a.role == "active"]
    assert Counter(name[1] for name in promoted) == Counter({"a": 2, "b": 1})


def test_pod_no_scheduler_acts_on_is_reported_after_the_timeout() -> None:
    waiting = pod("a0", ready=False, node=None, scheduler_name="neuron-scheduler", created_at=NOW)
    early = plan_fleet("bert", target(1), [waiting], NOW + timedelta(seconds=60)).summary
    assert early.stuck == ()
    late = plan_fleet("bert", target(1), [waiting], NOW + timedelta(seconds=180)).summary
    assert [(p.name, p.reason) for p in late.stuck] == [("a0", "NotScheduled")]
    assert "'neuron-scheduler'" in late.stuck[0].message
    # Its message goes to the Scheduled and Degraded conditions: it must not change from one
    # reconcile to the next while nothing changes (it counted the seconds waited: a status write each).
    later = plan_fleet("bert", target(1), [waiting], NOW + timedelta(seconds=185)).summary
    assert later.stuck == late.stuck
    assert f"since {NOW.strftime('%Y-%m-%dT%H:%M:%SZ')}" in late.stuck[0].message


def test_policy_from_the_spec() -> None:
    spec = InferenceDeploymentSpec.model_validate(
        {
            "model": {"source": "s3://models/bert/"},
            "scaling": {"mode": "Manual", "replicas": 3, "minReplicas": 1},
            "warmPool": {"mode": "Fixed", "pods": 2, "nodePlaceholders": 1},
            "runtime": {"terminationGracePeriodSeconds": 90},
            "rollout": {"maxSurge": 2, "progressDeadlineSeconds": 600},
        }
    )
    policy = policy_for_spec(spec)
    assert (policy.drain_grace_seconds, policy.max_surge, policy.progress_deadline_seconds) == (90.0, 2, 600.0)


def test_every_action_has_an_event_description() -> None:
    plan = plan_fleet("bert", target(1, placeholders=1), [pod("a0"), pod("a1"), pod("a2", phase="Failed")], NOW)
    described = [(e.reason, e.message) for e in map(describe_action, plan.actions) if e is not None]
    assert len(described) == len(plan.actions)
    # Equal pods drain in name order: a0 goes, a1 stays.
    assert ("Draining", "a0: active -> draining (scale-down: draining)") in described
    assert ("DeletedPod", "deleted pod a2: replacing: pod phase Failed") in described
    assert any(reason == "CreatedPlaceholder" for reason, _ in described)
    demote = Relabel("a1", "warm", "active", "demoted into the warm pool")
    event = describe_action(demote)
    assert event is not None and event.reason == "Demoted"  # the one name, as the operator posts it


def test_a_relabel_that_keeps_the_role_posts_no_event() -> None:
    # The kept standby's stamp, its removal (current again, or creations held) and a drain start
    # recorded again change no pod's part: posted, they read as Demoted "warm -> warm" or Draining,
    # which troubleshooting.md defines as an active going back to the pool or leaving the Service.
    stamp = plan_fleet("bert", target(1, warm=1, artifact=NEW), [pod("o-a"), pod("o-w", "warm")], NOW).actions
    current_again = plan_fleet(
        "bert", target(1, warm=1), [pod("a0"), pod("w0", "warm", kept_since=NOW - timedelta(hours=2))], NOW
    ).actions
    held = replace(target(1, warm=1, artifact=NEW), hold_creations="held")
    clear = plan_fleet("bert", held, [pod("o-a"), pod("o-w", "warm", kept_since=NOW)], NOW).actions
    redrain = plan_fleet("bert", target(1), [pod("a0"), pod("d0", "draining")], NOW).actions
    same_role = [a for a in (*stamp, *current_again, *clear, *redrain) if isinstance(a, Relabel)]
    assert [(a.name, a.previous_role, a.role) for a in same_role] == [
        ("o-w", "warm", "warm"),
        ("w0", "warm", "warm"),
        ("o-w", "warm", "warm"),
        ("d0", "draining", "draining"),
    ]
    assert [describe_action(a) for a in same_role] == [None] * 4


def test_rollout_that_does_not_progress_is_reported_stalled() -> None:
    pods = [pod("old0"), pod("new0", "warm", artifact=NEW, ready=False, created_at=NOW)]
    summary = plan_fleet("bert", target(1, artifact=NEW), pods, NOW).summary
    assert summary.rolling_out and summary.rollout_started_at == NOW
    assert not summary.rollout_stalled(NOW + timedelta(seconds=1800), 1800)
    assert summary.rollout_stalled(NOW + timedelta(seconds=1801), 1800)
    done = plan_fleet("bert", target(1, artifact=NEW), [pod("new0", artifact=NEW)], NOW).summary
    assert not done.rollout_stalled(NOW + timedelta(days=1), 1800)


NEW_KEY = FleetRevision(NEW, TEMPLATE).key


def test_the_rollout_record_is_kept_for_its_target_made_for_a_new_one_and_dropped_when_done() -> None:
    # As a Deployment's Progressing condition: the start is recorded once (the operator writes it to
    # status.rollout and passes it back) and kept while the rollout to that target goes on.
    rolling = [pod("old0"), pod("new0", "warm", artifact=NEW, ready=False, created_at=NOW - timedelta(hours=2))]
    first = plan_fleet("bert", target(1, artifact=NEW), rolling, NOW).summary
    # No record read (a first reconcile, or an operator upgraded from one that kept none): it begins now,
    # not when the new pod was created.
    assert first.rollout == RolloutRecord(NEW_KEY, NOW)
    later = NOW + timedelta(minutes=10)
    steady = plan_fleet("bert", target(1, artifact=NEW), rolling, later, rollout=first.rollout).summary
    assert steady.rollout == first.rollout  # the same value: nothing to write on this reconcile
    # Another target (a record of a rollout to OLD, e.g. before the spec moved on): a new start.
    other = RolloutRecord(FleetRevision(OLD, TEMPLATE).key, NOW - timedelta(hours=1))
    assert plan_fleet("bert", target(1, artifact=NEW), rolling, later, rollout=other).summary.rollout == (
        RolloutRecord(NEW_KEY, later)
    )
    # A start in the future (a skewed clock, a hand-written value) is made now.
    ahead = RolloutRecord(NEW_KEY, later + timedelta(hours=1))
    assert plan_fleet("bert", target(1, artifact=NEW), rolling, later, rollout=ahead).summary.rollout == (
        RolloutRecord(NEW_KEY, later)
    )
    # Done (no outdated active or warm pod left): no record.
    done = plan_fleet("bert", target(1, artifact=NEW), [pod("new0", artifact=NEW)], later, rollout=first.rollout)
    assert done.summary.rollout is None and done.summary.rollout_started_at is None
    # A republished manifest (same revision id, another sha256) is another target.
    pinned = replace(NEW, sha256="e" * 64)
    assert FleetRevision(pinned, TEMPLATE).key != NEW_KEY


def test_a_rollout_with_no_new_pod_is_stalled_once_past_the_deadline_from_its_recorded_start() -> None:
    # Every creation refused (a quota the old pods fill) or held: no pod of the new revision exists,
    # and the rollout is stalled all the same once its recorded start is past the deadline.
    pods = [pod("old0"), pod("old1", "warm")]
    began = RolloutRecord(NEW_KEY, NOW - timedelta(minutes=30))
    summary = plan_fleet("bert", target(1, warm=1, artifact=NEW), pods, NOW, rollout=began).summary
    assert summary.rollout == began and not summary.rollout_stalled(NOW, 1800)
    assert summary.rollout_stalled(NOW + timedelta(seconds=1), 1800)
    held = replace(target(1, warm=1, artifact=NEW), hold_creations="the artifact is gone from the store")
    summary = plan_fleet("bert", held, pods, NOW + timedelta(seconds=1), rollout=began).summary
    assert summary.rollout == began and summary.rollout_stalled(NOW + timedelta(seconds=1), 1800)


def test_a_rollback_counts_from_its_own_start_not_from_pods_ready_long_ago() -> None:
    # The old standby, made and ready hours ago, is current again: readiness from before the
    # rollout began is no progress, and the rollout back is not stalled until a deadline after it.
    standby = pod("old-w", "warm", created_at=NOW - timedelta(hours=6), ready_at=NOW - timedelta(hours=6))
    pods = [pod("new0", artifact=NEW), pod("new1", artifact=NEW), standby]
    back = plan_fleet("bert", target(2, warm=1), pods, NOW, rollout=RolloutRecord(NEW_KEY, NOW - timedelta(hours=1)))
    summary = back.summary
    assert summary.rollout == RolloutRecord(FleetRevision(OLD, TEMPLATE).key, NOW)
    assert summary.rollout_progressed_at == NOW
    assert not summary.rollout_stalled(NOW + timedelta(seconds=1800), 1800)
    assert summary.rollout_stalled(NOW + timedelta(seconds=1801), 1800)


def test_summary_counts_serving_pods_without_a_node() -> None:
    pods = [pod("a0"), pod("a1", ready=False, node=None), PodView("ph0", "placeholder", template=TEMPLATE)]
    assert plan_fleet("bert", target(2, placeholders=1), pods, NOW).summary.unbound == 1


def test_scale_down_with_nothing_ready_keeps_the_pods_furthest_along() -> None:
    """8 -> 2 with no pod ready (as reported: two ContainerCreating pods kept, six Running deleted)."""
    running = [pod(f"r{i}", ready=False, phase="Running", node=f"n{i % 3}") for i in range(6)]
    creating = [pod(f"c{i}", ready=False, phase="Pending", node=f"n{i}") for i in range(2)]
    plan = plan_fleet("bert", target(2), creating + running, NOW)
    deleted = {a.name for a in plan.actions if isinstance(a, DeletePod)}
    assert len(deleted) == 6
    assert {"c0", "c1"} <= deleted, "a pod still pulling its image was kept over a loading one"
    # Bound before unbound: 8 -> 5 deletes the waiting pods first.
    waiting = [pod(f"w{i}", ready=False, phase="Pending", node=None) for i in range(2)]
    plan = plan_fleet("bert", target(5), waiting + creating + running[:4], NOW)
    deleted = {a.name for a in plan.actions if isinstance(a, DeletePod)}
    assert deleted == {"w0", "w1", "c0"} or deleted == {"w0", "w1", "c1"}


def test_a_slow_rollout_that_keeps_progressing_is_not_stalled() -> None:
    # maxSurge 1 over a large fleet takes longer than the progress deadline in all; the deadline
    # (spec.rollout.progressDeadlineSeconds: "has not progressed for this long") runs from the last
    # new-revision pod that became ready, not from the rollout's start.
    pods = [
        pod("old0"),
        pod("old1"),
        pod("new0", artifact=NEW, created_at=NOW - timedelta(minutes=40), ready_at=NOW - timedelta(minutes=10)),
        pod("new1", "warm", artifact=NEW, ready=False, created_at=NOW - timedelta(minutes=9)),
    ]
    began = RolloutRecord(FleetRevision(NEW, TEMPLATE).key, NOW - timedelta(minutes=40))
    summary = plan_fleet("bert", target(3, artifact=NEW), pods, NOW, rollout=began).summary
    assert summary.rolling_out and summary.rollout_started_at == NOW - timedelta(minutes=40)
    assert not summary.rollout_stalled(NOW, 1800)
    assert not summary.rollout_stalled(NOW + timedelta(minutes=20), 1800)
    assert summary.rollout_stalled(NOW + timedelta(minutes=21), 1800)


def test_progress_made_stays_made_when_the_pod_that_made_it_is_unready_or_lost_again() -> None:
    # A rollout that progressed 10 minutes ago read as stalled the moment its newest ready pod failed
    # one readiness check (or lost its node): progress was read again from the pods ready right now.
    began = RolloutRecord(NEW_KEY, NOW - timedelta(minutes=45))
    newest = pod("new1", artifact=NEW, created_at=began.started_at, ready_at=NOW - timedelta(minutes=10))
    pods = [
        pod("old0"),
        pod("new0", artifact=NEW, created_at=began.started_at, ready_at=began.started_at + timedelta(minutes=10)),
        newest,
        pod("new2", "warm", artifact=NEW, ready=False, created_at=NOW - timedelta(minutes=9)),
    ]
    seen = plan_fleet("bert", target(3, artifact=NEW), pods, NOW, rollout=began).summary
    assert seen.rollout == replace(began, progressed_at=NOW - timedelta(minutes=10))
    for gone in (replace(newest, ready=False), replace(newest, node_lost=True)):
        later = NOW + timedelta(seconds=30)
        summary = plan_fleet(
            "bert", target(3, artifact=NEW), [*pods[:2], gone, pods[3]], later, rollout=seen.rollout
        ).summary
        assert summary.rollout == seen.rollout  # nothing new to write
        assert not summary.rollout_stalled(later, 1800)
        assert summary.rollout_stalled(NOW + timedelta(minutes=20, seconds=1), 1800)
    # A recorded progress before the rollout's start is not believed.
    odd = replace(began, progressed_at=began.started_at - timedelta(minutes=1))
    summary = plan_fleet("bert", target(3, artifact=NEW), [pods[0], pods[3]], NOW, rollout=odd).summary
    assert summary.rollout == began and summary.rollout_progressed_at == began.started_at
    # One in the future (written by a clock ahead of this one) is progress made now, not lost: the
    # pod that made it may be unready by now (a reviewer's case: it read as stalled at once).
    ahead = replace(began, progressed_at=NOW + timedelta(seconds=2))
    summary = plan_fleet("bert", target(3, artifact=NEW), [pods[0], pods[3]], NOW, rollout=ahead).summary
    assert summary.rollout == replace(began, progressed_at=NOW) and not summary.rollout_stalled(NOW, 1800)


def test_outdated_pods_that_serve_nothing_go_before_the_creations_a_quota_may_refuse() -> None:
    # Hypothesis found it (test_fleet_properties): a rollout to 0 active + 1 warm whose every creation
    # is refused (the old pods fill the quota) kept an old warm pod that never loaded for ever: its
    # deletion came after the refused creation, where the apply stops.
    pods = [pod("old-w0", "warm", ready=False, phase="Pending", node=None), pod("old-a0")]
    plan = plan_fleet("bert", target(1, warm=1, artifact=NEW), pods, NOW)
    names = [(type(a).__name__, a.name) for a in plan.actions if isinstance(a, DeletePod | CreatePod)]
    assert names.index(("DeletePod", "old-w0")) < min(i for i, (kind, _) in enumerate(names) if kind == "CreatePod")
    # A ready old active still goes only after (it is drained once the new pods serve).
    assert ("DeletePod", "old-a0") not in names


def test_the_operator_waits_the_specs_drain_delay_before_deleting_a_drained_pod() -> None:
    """The pod it relabels draining leaves the Service's endpoints, which a load balancer with IP
    targets follows only after its deregistration lag: the operator deletes the pod (SIGTERM) no
    sooner than spec.runtime.drainDelaySeconds, the time the spec says that lag takes."""
    spec = InferenceDeploymentSpec.model_validate(
        {
            "model": {"source": "s3://models/bert/"},
            "runtime": {"terminationGracePeriodSeconds": 120, "drainDelaySeconds": 30},
        }
    )
    policy = policy_for_spec(spec, FleetPolicy(min_drain_seconds=1))
    assert policy.min_drain_seconds == 30
    for in_flight in (0, None):
        draining = pod("d0", "draining", in_flight=in_flight, drain_started_at=NOW)
        assert plan_fleet("bert", target(0), [draining], NOW + timedelta(seconds=29), policy).actions == ()
        assert kinds(plan_fleet("bert", target(0), [draining], NOW + timedelta(seconds=30), policy).actions) == [
            "delete-pod"
        ]


def test_a_replaced_old_standby_and_the_pool_demotion_go_before_the_creations_a_quota_may_refuse() -> None:
    # Hypothesis found it (test_fleet_properties): scaled to 0 active with a pool of 1 and a spare
    # node, every creation refused (a quota). The ready new active is surplus and joins the pool,
    # which so has no room left for the old warm pod; but the demotion and the old pod's deletion
    # came after the refused placeholder creation, where the apply stops: the old pod stayed for
    # ever, and so did an active pod the spec no longer wanted.
    pods = [pod("old-w0", "warm"), pod("new-a0", artifact=NEW, node="node-2")]
    rollout = target(0, warm=1, placeholders=1, artifact=NEW)
    plan = plan_fleet("bert", rollout, pods, NOW)
    assert any(isinstance(a, CreatePlaceholder) for a in plan.actions)
    state = [p for p in apply_refusing_creations(pods, plan.actions, NOW) if not p.deleting]
    assert [(p.name, p.role) for p in state] == [("new-a0", "warm")]
    # The old one goes only once the new one is in the pool in its place.
    order = [(type(a).__name__, a.name) for a in plan.actions]
    assert order.index(("Relabel", "new-a0")) < order.index(("DeletePod", "old-w0"))
    again = plan_fleet("bert", rollout, state, NOW)
    assert kinds(again.actions) == ["create-placeholder"]


def test_a_scale_down_drains_and_deletes_behind_a_creation_the_api_server_refuses() -> None:
    # A placeholder the quota refuses at every reconcile must not hold back the rest: the surplus
    # ready active is drained, and a drained pod is deleted (it kept its node, and the quota).
    pods = [pod("a0"), pod("a1", node="node-2"), pod("d0", "draining", drain_started_at=NOW - timedelta(minutes=2))]
    scaled = target(1, placeholders=1)
    plan = plan_fleet("bert", scaled, pods, NOW)
    state = [p for p in apply_refusing_creations(pods, plan.actions, NOW) if not p.deleting]
    assert sorted(roles(state).elements()) == ["active", "draining"]
    assert "d0" not in {p.name for p in state}


def test_a_scale_down_mid_scale_up_deletes_the_newest_loading_pods_whatever_their_names() -> None:
    # Review r17 finding 1: among loading pods equally far along, the plan kept the highest names
    # (the drain order's last tie-break) and deleted the oldest, the closest to ready. A ReplicaSet
    # deletes the newest first, and so does the simulator's fleet (sim/fleet.py ``_deletion_rank``).
    for newest in (("p-3", "p-4"), ("p-1", "p-2")):
        loading = [
            pod(
                name,
                ready=False,
                phase="Pending",
                node=f"node-{name}",
                created_at=NOW - timedelta(minutes=1 if name in newest else 5),
            )
            for name in ("p-1", "p-2", "p-3", "p-4")
        ]
        plan = plan_fleet("bert", target(3), [pod("p-0"), *loading], NOW)
        assert sorted(a.name for a in plan.actions if isinstance(a, DeletePod)) == list(newest)
        assert not [a for a in plan.actions if not isinstance(a, DeletePod)]


def test_a_scale_down_mid_scale_up_deletes_the_pods_least_far_along_before_older_ones() -> None:
    # How far along comes first (a running pod is kept over a newer-or-older pending one), then age.
    loading = [
        pod("p-1", ready=False, phase="Pending", node=None, created_at=NOW - timedelta(minutes=9)),
        pod("p-2", ready=False, phase="Running", node="node-2", created_at=NOW - timedelta(minutes=1)),
        pod("p-3", ready=False, phase="Pending", node="node-3", created_at=NOW - timedelta(minutes=8)),
        pod("p-4", ready=False, phase="Pending", node="node-4", created_at=NOW - timedelta(minutes=2)),
    ]
    plan = plan_fleet("bert", target(3), [pod("p-0"), *loading], NOW)
    assert sorted(a.name for a in plan.actions if isinstance(a, DeletePod)) == ["p-1", "p-4"]


def test_a_pod_view_describes_itself_to_the_orders_once_and_as_it_is() -> None:
    ready = PodView("p", "active", ready=True, ready_at=NOW, node="n1", zone="a", in_flight=3, revision="r")
    info = ready.info
    assert (info.name, info.node, info.zone, info.ready_since, info.in_flight, info.revision) == (
        "p",
        "n1",
        "a",
        NOW.timestamp(),
        3.0,
        "r",
    )
    assert ready.info is info  # kept: a plan orders a pod several times
    # An unready pod has no ready time whatever its stamp says; a copy describes its own fields.
    assert replace(ready, ready=False).info.ready_since is None
    assert replace(ready, node="n2").info.node == "n2"
    assert ready == replace(ready)  # the kept description is no field: views still compare by fields


def test_a_revision_key_is_the_hash_of_its_artifact_and_template() -> None:
    revision = FleetRevision(ArtifactRevision("rev-1", "s3://b/k", "abc"), "tmpl")
    assert revision.key == revision.key == hashlib.sha256(b"rev-1/tmpl/abc").hexdigest()[:8]
    assert FleetRevision(ArtifactRevision("rev-1", "s3://b/k"), "tmpl").key != revision.key
