"""Fleet plan properties (hypothesis): idempotence, convergence, no duplicates, ready never drops,
loaded standby kept through a rollout until new standby is loaded or its own deadline passes.

The cluster is simulated with :func:`apply_actions` plus a world step that makes some pending
pods ready, lets draining pods finish their work and advances time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from neuronfleet.planning.fleet import (
    Action,
    CreatePlaceholder,
    CreatePod,
    FleetPlan,
    FleetPolicy,
    FleetTarget,
    PodPhase,
    PodView,
    Relabel,
    apply_actions,
    plan_fleet,
)
from neuronfleet.planning.labels import ROLES, ArtifactRevision, FleetRevision, serving_pod_name

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
OLD = ArtifactRevision("aaaaaaaaaa", "s3://a/old/")
NEW = ArtifactRevision("bbbbbbbbbb", "s3://a/new/")
TEMPLATE = "tmpl000000"
POLICY = FleetPolicy(drain_grace_seconds=60, min_drain_seconds=5)
UNREADY_PHASES: list[PodPhase] = ["Pending", "Pending", "Running", "Failed"]
PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def pod_views(draw: st.DrawFn, index: int) -> PodView:
    role = draw(st.sampled_from(ROLES))
    ready = draw(st.booleans())
    phase: PodPhase = "Running" if ready else draw(st.sampled_from(UNREADY_PHASES))
    return PodView(
        name=f"seed-{index}",
        role=role,
        revision=None if role == "placeholder" else draw(st.sampled_from([OLD.id, NEW.id])),
        template=draw(st.sampled_from([TEMPLATE, TEMPLATE, "other00000"])),
        phase=phase,
        ready=ready and role != "placeholder",
        deleting=draw(st.booleans()) and draw(st.booleans()),
        ready_at=NOW - timedelta(seconds=draw(st.integers(0, 600))) if ready else None,
        node=f"node-{index % 3}" if ready or phase == "Running" else None,
        zone=draw(st.sampled_from(["us-east-1a", "us-east-1b", None])),
        node_lost=draw(st.integers(0, 9)) == 0,
        in_flight=draw(st.sampled_from([None, 0, 3])),
        drain_started_at=draw(st.sampled_from([None, NOW - timedelta(seconds=30), NOW - timedelta(seconds=120)])),
        # Only a warm pod carries the old-standby stamp: every other relabel removes it.
        kept_since=draw(st.sampled_from([None, None, NOW - timedelta(seconds=30), NOW - timedelta(days=3)]))
        if role == "warm"
        else None,
    )


@st.composite
def fleets(draw: st.DrawFn) -> list[PodView]:
    count = draw(st.integers(0, 10))
    return [draw(pod_views(i)) for i in range(count)]


targets = st.builds(
    FleetTarget,
    template=st.just(TEMPLATE),
    artifact=st.sampled_from([NEW, NEW, NEW, None]),
    active=st.integers(0, 6),
    warm=st.integers(0, 3),
    placeholders=st.integers(0, 2),
)


def ready_active(pods: list[PodView]) -> int:
    return sum(1 for p in pods if p.role == "active" and p.ready and not p.deleting and not p.broken)


def current_count(pods: list[PodView]) -> int:
    """Live pods of the target revision and template that serve or stand by."""
    return sum(
        1
        for p in pods
        if p.role in ("active", "warm")
        and p.revision == NEW.id
        and p.template == TEMPLATE
        and not p.broken
        and not p.deleting
    )


def new_loading(pods: list[PodView]) -> int:
    """Live serving pods of the target revision and template not ready yet."""
    return sum(
        1
        for p in pods
        if p.role in ("active", "warm")
        and p.revision == NEW.id
        and p.template == TEMPLATE
        and not p.ready
        and not p.deleting
        and not p.broken
    )


def _live(pods: list[PodView]) -> list[PodView]:
    return [p for p in pods if not p.deleting and not p.broken]


def _is_new(pod: PodView) -> bool:
    return (pod.revision, pod.template) == (NEW.id, TEMPLATE)


def check_standby_kept(
    before: list[PodView],
    plan: FleetPlan,
    after: list[PodView],
    target: FleetTarget,
    policy: FleetPolicy,
    now: datetime,
) -> None:
    """A step keeps loaded standby as a Deployment with maxUnavailable 0 keeps its pods, within bounds.

    The loaded warm pods (of any revision) stay, or go active, up to the pool wanted: an old one
    goes only once a new one is loaded in its place, or, outside a hold, once it has been kept for
    the progress deadline (its own clock, ``kept_since``). Outside a hold every old one kept
    carries that clock after the step, and none is kept past it; no other pod keeps a stamp. The
    old ones kept never exceed what the new loaded ones leave of the pool, and are what the summary
    says; an old one promoted never takes the actives beyond the target; the serving pods stay
    within active + warm + the new pods loading (at most the surge, in a paced rollout); planning again on the
    result relabels and deletes nothing (no promote/demote flip).
    """
    live_before, live_after = _live(before), _live(after)
    loaded_before = sum(p.role == "warm" and p.ready for p in live_before)
    loaded_after = sum(p.role == "warm" and p.ready for p in live_after)
    promoted = {
        a.name for a in plan.actions if isinstance(a, Relabel) and (a.previous_role, a.role) == ("warm", "active")
    }
    deadline = policy.progress_deadline_seconds
    expired = [
        p
        for p in live_before
        if p.role == "warm"
        and p.ready
        and not _is_new(p)
        and p.kept_since is not None
        and (now - p.kept_since).total_seconds() >= deadline
    ]
    released = 0 if target.hold_creations is not None else len(expired)
    assert loaded_after + len(promoted) + released >= min(target.warm, loaded_before), (
        "loaded standby deleted, not replaced"
    )
    new_loaded_warm = sum(p.role == "warm" and p.ready and _is_new(p) for p in live_after)
    old_warm = [p for p in live_after if p.role == "warm" and not _is_new(p)]
    assert len(old_warm) <= max(0, target.warm - new_loaded_warm), "old standby kept beside a full new pool"
    assert plan.summary.kept_outdated_warm == len(old_warm)
    if target.hold_creations is None:
        assert all(p.ready for p in old_warm), "a loading old warm pod is no standby"
        assert all(p.kept_since is not None for p in old_warm), "old standby kept without its clock"
        assert all((now - p.kept_since).total_seconds() < deadline for p in old_warm if p.kept_since), (
            "old standby kept past its own deadline"
        )
    else:
        assert not [p for p in old_warm if p.kept_since is not None], "a deadline running while nothing can replace"
    assert not [p for p in live_after if p.kept_since is not None and (_is_new(p) or p.role != "warm")], (
        "a stamp left on a pod that is no old standby"
    )
    actives_after = [p for p in live_after if p.role == "active"]
    assert sum(p.ready for p in actives_after) <= target.active
    if any(not _is_new(p) for p in live_before if p.name in promoted):
        assert len(actives_after) <= target.active, "old standby promoted beyond the target"
    serving = [p for p in live_after if p.role in ("active", "warm")]
    assert len(serving) <= target.active + target.warm + new_loading(after)
    if policy.max_surge and plan.summary.rolling_out:
        # So within active + warm + the surge, once the pods loading before are loaded.
        assert new_loading(after) <= max(policy.max_surge, new_loading(before))
    # The next plan changes no role and deletes nothing; it may create more new pods only when the
    # last old pod left with this step (the surge paces a rollout's creations, not a scale-up's).
    again = plan_fleet("svc", target, after, now, policy)
    assert not [a for a in again.actions if not isinstance(a, CreatePod)], "the next plan undoes this one"
    assert not again.actions or (policy.max_surge and not again.summary.rolling_out)


UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient aws.amazon.com/neuroncore."


def world_step(
    pods: list[PodView],
    now: datetime,
    becomes_ready: list[bool],
    never_loads: frozenset[str] = frozenset(),
    flapping: bool = False,
) -> list[PodView]:
    """Kubernetes catches up: chosen pending pods get a node and become ready; drains finish. Pods
    named in ``never_loads`` stay unschedulable (no room for them). ``flapping``: the ready new
    actives' readiness flaps (their Ready condition moves to now each step)."""
    stepped = []
    for index, pod in enumerate(pods):
        if flapping and pod.ready and pod.role == "active" and _is_new(pod):
            pod = replace(pod, ready_at=now)
        if pod.name in never_loads and not pod.ready:
            pod = replace(pod, phase="Pending", node=None, unschedulable_message=UNSCHEDULABLE)
        elif pod.role == "placeholder":
            pod = replace(pod, phase="Running", node=pod.node or "node-2")
        elif not pod.ready and not pod.broken and becomes_ready[index % len(becomes_ready)]:
            pod = replace(pod, ready=True, phase="Running", ready_at=now, node=pod.node or "node-2")
        if pod.role == "draining":
            pod = replace(pod, in_flight=0)
        stepped.append(pod)
    return stepped


@PROPERTY_SETTINGS
@given(pods=fleets(), target=targets, remove_deleted=st.booleans())
def test_applying_the_plan_then_replanning_yields_nothing(
    pods: list[PodView], target: FleetTarget, remove_deleted: bool
) -> None:
    policy = POLICY
    plan = plan_fleet("svc", target, pods, NOW, policy)
    after = apply_actions(pods, plan.actions, NOW, remove_deleted=remove_deleted)
    assert plan_fleet("svc", target, after, NOW, policy).actions == ()


@PROPERTY_SETTINGS
@given(pods=fleets(), target=targets)
def test_no_duplicates_and_never_more_current_pods_than_needed(pods: list[PodView], target: FleetTarget) -> None:
    plan = plan_fleet("svc", target, pods, NOW, POLICY)
    names = [a.name for a in plan.actions]
    assert len(names) == len(set(names))
    observed = {p.name for p in pods}
    assert not [a.name for a in plan.actions if isinstance(a, CreatePod | CreatePlaceholder) and a.name in observed]
    after = [p for p in apply_actions(pods, plan.actions, NOW) if not p.deleting and not p.broken]
    current = [p for p in after if p.role in ("active", "warm") and p.revision == NEW.id and p.template == TEMPLATE]
    if target.artifact is not None:
        assert len(current) == target.active + target.warm
        assert sum(p.role == "active" for p in current) <= target.active
    placeholders = [p for p in after if p.role == "placeholder"]
    assert len(placeholders) == target.placeholders


@PROPERTY_SETTINGS
@given(pods=fleets(), target=targets)
def test_ready_active_never_drops_below_the_count_before_a_step(pods: list[PodView], target: FleetTarget) -> None:
    plan = plan_fleet("svc", target, pods, NOW, POLICY)
    floor = min(ready_active(pods), target.active)
    state = pods
    # Every prefix of the actions, as the adapter applies them one by one.
    for action in plan.actions:
        state = apply_actions(state, [action], NOW)
        assert ready_active(state) >= floor, f"after {action}"


@PROPERTY_SETTINGS
@given(
    pods=fleets(),
    target=targets.filter(lambda t: t.artifact is not None),
    readiness=st.lists(st.booleans(), min_size=1, max_size=8),
    max_surge=st.sampled_from([0, 0, 1, 2]),
)
def test_reconcile_loop_converges_to_the_target(
    pods: list[PodView], target: FleetTarget, readiness: list[bool], max_surge: int
) -> None:
    policy = replace(POLICY, max_surge=max_surge)
    now = NOW
    state = pods
    floor = min(ready_active(pods), target.active)
    for step in range(40):
        plan = plan_fleet("svc", target, state, now, policy)
        before = state
        for action in plan.actions:
            state = apply_actions(state, [action], now)
            assert ready_active(state) >= min(floor, target.active)
        check_standby_kept(before, plan, state, target, policy, now)
        floor = max(floor, ready_active(state))
        if not plan.actions and plan.summary.converged and not plan.summary.draining:
            break
        # Some pods become ready each step; after a while every pod does (nothing hangs forever).
        state = world_step(state, now, readiness if step < 5 else [True])
        # Deleted pods linger one step with a deletionTimestamp, as terminating pods do.
        state = [p for p in state if not p.deleting]
        now += timedelta(seconds=10)
    else:
        raise AssertionError(f"no fixed point: {plan.actions}")
    live = [p for p in state if not p.deleting]
    assert sum(p.role == "active" and p.ready and p.revision == NEW.id for p in live) == target.active
    assert sum(p.role == "warm" and p.ready and p.revision == NEW.id for p in live) == target.warm
    assert sum(p.role == "placeholder" for p in live) == target.placeholders
    assert len(live) == target.active + target.warm + target.placeholders
    assert all(p.template == TEMPLATE for p in live)


@PROPERTY_SETTINGS
@given(
    pods=fleets(),
    target=targets.filter(lambda t: t.artifact is not None and t.warm > 0),
    never_slots=st.sets(st.integers(0, 6), min_size=1, max_size=3),
    readiness=st.lists(st.booleans(), min_size=1, max_size=8),
    max_surge=st.sampled_from([0, 0, 1, 2]),
    refused=st.sampled_from([False, False, True]),
    flapping=st.booleans(),
)
# Found by Hypothesis: scaled to 0 active with a pool of 1, every creation refused (a quota), the
# new ready active (surplus: it joins the pool) replaces the old warm pod, whose release and the
# active's demotion both came after the refused placeholder creation, where the apply stops.
@example(
    pods=[
        PodView("seed-0", "warm", OLD.id, TEMPLATE, "Running", True, ready_at=NOW, node="node-0", zone="us-east-1a"),
        PodView("seed-1", "active", NEW.id, TEMPLATE, "Running", True, ready_at=NOW, node="node-1", zone="us-east-1a"),
    ],
    target=FleetTarget(TEMPLATE, NEW, active=0, warm=1, placeholders=1),
    never_slots={0},
    readiness=[False],
    max_surge=0,
    refused=True,
    flapping=False,
)
def test_new_pods_that_never_load_keep_no_old_standby_for_ever(
    pods: list[PodView],
    target: FleetTarget,
    never_slots: set[int],
    readiness: list[bool],
    max_surge: int,
    refused: bool,
    flapping: bool,
) -> None:
    """Some new pods never load (unschedulable: e.g. the old standby holds the only spare node),
    or none is ever made (``refused``: the API server refuses every creation, e.g. a quota), and
    the new actives' readiness may flap: each old warm pod is let go once kept for the progress
    deadline, so none is kept for ever and, once no old active is left, the rollout ends; every
    step still keeps the standby within the bounds of :func:`check_standby_kept`."""
    policy = replace(POLICY, max_surge=max_surge, progress_deadline_seconds=120)
    never_loads = frozenset(serving_pod_name("svc", FleetRevision(NEW, TEMPLATE), slot) for slot in never_slots)
    now = NOW
    state = pods
    floor = min(ready_active(pods), target.active)
    for step in range(40):
        plan = plan_fleet("svc", target, state, now, policy)
        before = state
        for action in plan.actions:
            if refused and isinstance(action, CreatePod | CreatePlaceholder):
                break  # as Reconciler.apply: the first refused create stops the rest of the plan
            state = apply_actions(state, [action], now)
            assert ready_active(state) >= min(floor, target.active)
        if not refused:
            check_standby_kept(before, plan, state, target, policy, now)
        floor = max(floor, ready_active(state))
        state = world_step(state, now, readiness if step < 5 else [True], never_loads, flapping)
        state = [p for p in state if not p.deleting]
        now += timedelta(seconds=10)
    live = _live(state)
    assert not [p.name for p in live if p.role == "warm" and not _is_new(p)], "old standby kept for ever"
    final = plan_fleet("svc", target, state, now, policy).summary
    if not any(p.role == "active" and not _is_new(p) for p in live):
        assert not final.rolling_out, "a rollout that never ends"


def test_relabels_come_before_the_demotions_they_make_safe() -> None:
    pods = [
        PodView("o", "active", OLD.id, TEMPLATE, "Running", True),
        PodView("n", "warm", NEW.id, TEMPLATE, "Running", True),
    ]
    plan = plan_fleet("svc", FleetTarget(TEMPLATE, NEW, 1), pods, NOW, POLICY)
    assert [(a.name, a.role) for a in plan.actions if isinstance(a, Relabel)] == [("n", "active"), ("o", "draining")]


@PROPERTY_SETTINGS
@given(
    pods=fleets(),
    target=targets.filter(lambda t: t.artifact is not None),
    crashes=st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=1, max_size=12),
)
def test_crashes_mid_apply_and_stale_replays_still_converge_without_extra_pods(
    pods: list[PodView], target: FleetTarget, crashes: list[tuple[float, bool]]
) -> None:
    """An operator stopped part-way through applying a plan, restarted on a stale view.

    Each step applies only a prefix of the plan (the crash); the restarted operator may plan
    on the view from before the crash (a stale cache) and apply that plan in full: creates that
    already happened answer 409 (no-op), relabels and deletes are idempotent. No create ever
    takes the current pods beyond the desired active + warm.
    """
    now = NOW
    state = pods
    floor = min(ready_active(pods), target.active)

    def apply_checked(actions: Sequence[Action]) -> None:
        nonlocal state
        for action in actions:
            state = apply_actions(state, [action], now)
            assert ready_active(state) >= floor
            if isinstance(action, CreatePod):
                assert current_count(state) <= target.active + target.warm

    for step in range(40):
        plan = plan_fleet("svc", target, state, now, POLICY)
        if not plan.actions and plan.summary.converged and not plan.summary.draining:
            break
        fraction, stale_replay = crashes[step % len(crashes)]
        before_crash = state
        done = int(len(plan.actions) * fraction) if step < len(crashes) else len(plan.actions)
        apply_checked(plan.actions[:done])
        if stale_replay:
            apply_checked(plan_fleet("svc", target, before_crash, now, POLICY).actions)
        floor = max(floor, min(ready_active(state), target.active))
        state = [p for p in world_step(state, now, [True]) if not p.deleting]
        now += timedelta(seconds=10)
    else:
        raise AssertionError(f"no fixed point: {plan.actions}")
    live = [p for p in state if not p.deleting]
    assert len(live) == target.active + target.warm + target.placeholders
    assert sum(p.role == "active" and p.ready for p in live) == target.active


@PROPERTY_SETTINGS
@given(
    pods=fleets(),
    target=targets.filter(lambda t: t.artifact is not None),
    hold_placeholders=st.booleans(),
    readiness=st.lists(st.booleans(), min_size=1, max_size=8),
    max_surge=st.sampled_from([0, 0, 1, 2]),
)
def test_a_held_rollout_keeps_old_standby_within_the_target_and_converges_once_released(
    pods: list[PodView], target: FleetTarget, hold_placeholders: bool, readiness: list[bool], max_surge: int
) -> None:
    held = replace(target, hold_creations="refused", hold_placeholders=hold_placeholders)
    policy = replace(POLICY, max_surge=max_surge)
    now = NOW
    state = pods
    floor = min(ready_active(pods), target.active)
    for _ in range(6):
        plan = plan_fleet("svc", held, state, now, policy)
        assert not [a for a in plan.actions if isinstance(a, CreatePod)]
        # Nothing replaces the pool while held: its healthy pods stay (up to its size) or go active.
        warm_before = sum(p.role == "warm" for p in state if not p.deleting and not p.broken)
        promoted = sum(isinstance(a, Relabel) and a.previous_role == "warm" for a in plan.actions)
        after = apply_actions(state, plan.actions, now)
        warm_after = sum(p.role == "warm" for p in after if not p.deleting and not p.broken)
        assert warm_after + promoted >= min(target.warm, warm_before)
        before = state
        for action in plan.actions:
            state = apply_actions(state, [action], now)
            assert ready_active(state) >= floor, f"after {action}"
        check_standby_kept(before, plan, state, held, policy, now)
        live = [p for p in state if not p.deleting and not p.broken]
        # What the hold keeps never exceeds what the spec asks for.
        outdated = [p for p in live if p.role != "placeholder" and (p.revision, p.template) != (NEW.id, TEMPLATE)]
        assert sum(p.role == "warm" for p in outdated) <= target.warm
        # (Ready: a rollout keeps an old ready active beside its loading replacement.)
        assert sum(p.role == "active" and p.ready for p in live) <= target.active
        placeholders = sum(p.role == "placeholder" for p in live)
        assert placeholders <= target.placeholders if hold_placeholders else placeholders == target.placeholders
        floor = max(floor, min(ready_active(state), target.active))
        state = [p for p in world_step(state, now, readiness) if not p.deleting]
        now += timedelta(seconds=10)
    # Released: the rollout replaces whatever the hold kept, paced by the surge, and nothing leaks.
    for _ in range(40):
        plan = plan_fleet("svc", target, state, now, policy)
        loading_before = new_loading(state)
        before = state
        for action in plan.actions:
            state = apply_actions(state, [action], now)
        check_standby_kept(before, plan, state, target, policy, now)
        if max_surge and plan.summary.rolling_out:
            assert new_loading(state) <= max(max_surge, loading_before)
        if not plan.actions and plan.summary.converged and not plan.summary.draining:
            break
        state = [p for p in world_step(state, now, [True]) if not p.deleting]
        now += timedelta(seconds=10)
    else:
        raise AssertionError(f"no fixed point: {plan.actions}")
    live = [p for p in state if not p.deleting]
    assert len(live) == target.active + target.warm + target.placeholders
    assert all(p.template == TEMPLATE for p in live)
    assert all(p.revision == NEW.id for p in live if p.role != "placeholder")
