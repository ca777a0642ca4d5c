"""Status: conditions from the fleet, merged so lastTransitionTime moves only when status flips."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from neuronfleet.api.v1alpha1 import Condition, InferenceDeploymentStatus
from neuronfleet.planning.compile import CompileDecision, StoredArtifact
from neuronfleet.planning.fleet import FleetSummary, FleetTarget, PodProblem, PodView, RolloutRecord, plan_fleet
from neuronfleet.planning.labels import ArtifactRevision
from neuronfleet.planning.placement import ReplicaNeeds, plan_placement
from neuronfleet.planning.reasons import Reason, Refusal
from neuronfleet.planning.status import (
    ConditionValue,
    LastScale,
    StatusInputs,
    build_status,
    compute_conditions,
    invalid_status,
    merge_conditions,
    status_patch,
    with_foreign_conditions,
)

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)

SERVING = FleetSummary(
    desired_active=2,
    desired_warm=1,
    desired_placeholders=0,
    active=2,
    ready_active=2,
    warm_ready=1,
    warm=1,
    draining=0,
    placeholders=0,
    current_ready_active=2,
    outdated=0,
    revision_known=True,
)
ARTIFACT = StoredArtifact("bbbbbbbbbb" + "0" * 54, "s3://artifacts/bert/bbbbbbbbbb/", "f" * 64, "cpu")
COMPILED = CompileDecision(False, ARTIFACT, "True", Reason.ARTIFACT_READY, "revision bbbbbbbbbb at s3://...")
COMPILING = CompileDecision(True, None, "Unknown", Reason.COMPILING, "compile Job starting")
PLACED = plan_placement(ReplicaNeeds(2), ["inf2.xlarge"], 3)


def inputs(**changes: object) -> StatusInputs:
    base = StatusInputs(generation=4, fleet=SERVING, placement=PLACED, compile=COMPILED)
    return replace(base, **changes)  # type: ignore[arg-type]


def by_type(values: list[ConditionValue]) -> dict[str, ConditionValue]:
    return {v.type: v for v in values}


def test_healthy_fleet_is_ready_and_not_degraded() -> None:
    conditions = by_type(compute_conditions(inputs()))
    assert [c for c in conditions] == [
        "Ready",
        "Available",
        "Compiled",
        "Scheduled",
        "ScalingActive",
        "WarmPoolReady",
        "Degraded",
    ]
    assert (conditions["Ready"].status, conditions["Ready"].reason) == ("True", "ReplicasReady")
    assert conditions["Ready"].message == "2/2 active replicas of revision bbbbbbbbbb ready"
    assert (conditions["Available"].status, conditions["Available"].reason) == ("True", "ReplicasReady")
    assert conditions["Compiled"].status == "True"
    assert conditions["Scheduled"].message == "every pod is bound to a node on inf2.xlarge"
    assert (conditions["ScalingActive"].status, conditions["ScalingActive"].reason) == ("False", "ManualScaling")
    assert conditions["WarmPoolReady"].status == "True"
    assert (conditions["Degraded"].status, conditions["Degraded"].reason) == ("False", "AsExpected")


def test_warm_pool_ready_says_whether_a_pool_is_wanted_and_whether_it_is_full() -> None:
    full = by_type(compute_conditions(inputs()))["WarmPoolReady"]  # 1 warm pod wanted, 1 ready
    assert (full.status, full.reason) == ("True", "WarmPoolFull")
    assert full.message == "1 warm pod ready, 0 placeholders on nodes"
    unwanted = replace(SERVING, desired_warm=0, warm_ready=0, warm=0)
    none = by_type(compute_conditions(inputs(fleet=unwanted)))["WarmPoolReady"]
    assert (none.status, none.reason, none.message) == ("True", "NoWarmPool", "no warm pods or placeholders wanted")


def test_no_fitting_instance_type_is_unscheduled_and_degraded_with_the_field_path() -> None:
    impossible = plan_placement(ReplicaNeeds(16, hbm_gib=200), ["inf2.xlarge", "inf2.24xlarge"], 1)
    conditions = by_type(compute_conditions(inputs(placement=impossible)))
    assert (conditions["Scheduled"].status, conditions["Scheduled"].reason) == ("False", "NoInstanceTypeFits")
    assert conditions["Degraded"].status == "True"
    assert conditions["Degraded"].message.startswith("spec.placement.instanceTypes: no allowed instance type")


def test_image_that_never_pulls_degrades_with_the_kubelet_reason() -> None:
    stuck = replace(SERVING, stuck=(PodProblem("bert-1", "ImagePullBackOff", 'Back-off pulling image "nope"'),))
    degraded = by_type(compute_conditions(inputs(fleet=stuck)))["Degraded"]
    assert (degraded.status, degraded.reason) == ("True", "ImagePullBackOff")
    assert "bert-1" in degraded.message and "nope" in degraded.message


def test_unschedulable_pods_and_unknown_scheduler_errors_are_reported() -> None:
    waiting = replace(SERVING, unschedulable=(PodProblem("bert-2", "Unschedulable", "0/3 nodes are available"),))
    conditions = by_type(
        compute_conditions(inputs(fleet=waiting, errors=('scheduler "neuron-scheduler" never bound pod bert-2',)))
    )
    assert (conditions["Scheduled"].status, conditions["Scheduled"].reason) == ("False", "Unschedulable")
    assert "0/3 nodes are available" in conditions["Scheduled"].message
    assert (conditions["Degraded"].status, conditions["Degraded"].reason) == ("True", "ReconcileError")


def test_a_wait_for_the_previous_objects_service_is_said_in_ready_not_degraded() -> None:
    # An object deleted and created again under the same name: the old Service awaits the garbage
    # collector. Ready keeps its status and says it; nothing is Degraded (no Warning Event).
    wait = "Service bert belongs to the previous InferenceDeployment bert (deleted; another uid), ..."
    conditions = by_type(compute_conditions(inputs(waits=(wait,))))
    assert (conditions["Ready"].status, conditions["Ready"].reason) == ("True", "ReplicasReady")
    assert conditions["Ready"].message == f"2/2 active replicas of revision bbbbbbbbbb ready; {wait}"
    assert (conditions["Degraded"].status, conditions["Degraded"].reason) == ("False", "AsExpected")


def test_awaiting_artifact_and_rollout() -> None:
    no_artifact = replace(SERVING, revision_known=False, ready_active=0, active=0)
    ready = by_type(compute_conditions(inputs(fleet=no_artifact, compile=COMPILING)))
    assert (ready["Ready"].status, ready["Ready"].reason) == ("False", "Compiling")
    assert (ready["Available"].status, ready["Available"].reason) == ("False", "AwaitingArtifact")
    assert (ready["Compiled"].status, ready["Compiled"].reason) == ("Unknown", "Compiling")
    # During a rollout the old revision serves the desired count: Available, not Ready.
    rolling = replace(SERVING, outdated=2, outdated_active=1, current_ready_active=1)
    during_rollout = by_type(compute_conditions(inputs(fleet=rolling)))
    assert (during_rollout["Ready"].status, during_rollout["Ready"].reason) == ("False", "RollingOut")
    assert during_rollout["Ready"].message == "1/2 active replicas on the new revision, 2 ready in all"
    assert (during_rollout["Available"].status, during_rollout["Available"].reason) == ("True", "ReplicasReady")


def _conditions_of_plan(target: FleetTarget, pods: list[PodView]) -> dict[str, ConditionValue]:
    summary = plan_fleet("svc", target, pods, T0).summary
    return by_type(compute_conditions(inputs(fleet=summary)))


def test_the_old_standby_alone_keeps_no_rollout_in_ready_and_the_pool_counts_after_the_plan() -> None:
    old, new, template = "aaaaaaaaaa", ARTIFACT.revision, "tmpl000000"
    loaded = {"phase": "Running", "ready": True, "ready_at": T0 - timedelta(minutes=1)}
    target = FleetTarget(template, ArtifactRevision(new, ARTIFACT.uri), active=1, warm=1)
    # Every active on the new revision and ready; the old loaded warm pod stays until the new one
    # (loading) is loaded: Ready says the actives serve, WarmPoolReady speaks for the pool.
    pods = [
        PodView("new-a", "active", new, template, node="n1", **loaded),  # type: ignore[arg-type]
        PodView("old-w", "warm", old, template, node="n2", **loaded),  # type: ignore[arg-type]
        PodView("new-w", "warm", new, template, "Running", node="n3"),
    ]
    conditions = _conditions_of_plan(target, pods)
    assert (conditions["Ready"].status, conditions["Ready"].reason) == ("True", "ReplicasReady")
    assert conditions["WarmPoolReady"].message == (
        "0/1 warm pods ready, 0/0 placeholders on nodes; 1 outdated warm pod kept until new ones are loaded"
    )
    # The ready new warm pod this plan promotes is no standby after it: the pool is not full.
    target = replace(target, active=2)
    pods = [
        PodView("new-a", "active", new, template, node="n1", **loaded),  # type: ignore[arg-type]
        PodView("new-w", "warm", new, template, node="n2", **loaded),  # type: ignore[arg-type]
        PodView("old-a", "active", old, template, node="n3", **loaded),  # type: ignore[arg-type]
        PodView("old-w", "warm", old, template, node="n4", **loaded),  # type: ignore[arg-type]
    ]
    conditions = _conditions_of_plan(target, pods)
    assert (conditions["WarmPoolReady"].status, conditions["WarmPoolReady"].reason) == ("False", "WarmPoolFilling")
    assert conditions["WarmPoolReady"].message == (
        "0/1 warm pods ready, 0/0 placeholders on nodes; 1 outdated warm pod kept until new ones are loaded"
    )
    assert (conditions["Ready"].status, conditions["Ready"].reason) == ("False", "RollingOut")


def test_warm_pool_filling_and_auto_scaling_without_metrics() -> None:
    filling = replace(SERVING, warm_ready=0)
    conditions = by_type(compute_conditions(inputs(fleet=filling, scaling_mode="Auto", metrics_available=False)))
    assert (conditions["WarmPoolReady"].status, conditions["WarmPoolReady"].message) == (
        "False",
        "0/1 warm pods ready, 0/0 placeholders on nodes",
    )
    assert (conditions["ScalingActive"].status, conditions["ScalingActive"].reason) == ("False", "MetricsUnavailable")


def test_merge_keeps_transition_time_when_status_holds_and_moves_it_on_a_flip() -> None:
    first = merge_conditions([], [ConditionValue("Ready", "False", Reason.REPLICAS_NOT_READY, "0/2")], T0, 1)
    assert first[0].last_transition_time == "2026-11-30T12:00:00Z"
    same = merge_conditions(first, [ConditionValue("Ready", "False", Reason.REPLICAS_NOT_READY, "1/2")], T1, 2)
    assert same[0].last_transition_time == "2026-11-30T12:00:00Z"
    assert (same[0].message, same[0].observed_generation) == ("1/2", 2)
    flipped = merge_conditions(same, [ConditionValue("Ready", "True", Reason.REPLICAS_READY, "2/2")], T1, 2)
    assert flipped[0].last_transition_time == "2026-11-30T12:05:00Z"


def test_merge_reads_wire_dicts_and_keeps_foreign_conditions() -> None:
    previous = [
        {"type": "Custom", "status": "True", "reason": "X", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "Degraded", "status": "False", "reason": "AsExpected", "lastTransitionTime": "2026-01-01T00:00:00Z"},
    ]
    merged = merge_conditions(previous, [ConditionValue("Degraded", "False", Reason.AS_EXPECTED)], T1, 3)
    assert [c.type for c in merged] == ["Degraded", "Custom"]
    assert merged[0].last_transition_time == "2026-01-01T00:00:00Z"
    assert merged[1] == Condition.model_validate(previous[0])


def test_build_status_is_a_valid_status_with_counts_selector_and_placement() -> None:
    status = build_status("bert", inputs(), [], T0)
    parsed = InferenceDeploymentStatus.model_validate(status)
    assert parsed.observed_generation == 4
    assert (parsed.replicas, parsed.ready_replicas, parsed.warm_replicas, parsed.desired_replicas) == (2, 2, 1, 2)
    assert parsed.selector == "serving.neuronfleet.dev/deployment=bert,serving.neuronfleet.dev/role=active"
    assert parsed.placement is not None and parsed.artifact is not None
    assert parsed.placement.instance_type == "inf2.xlarge"
    assert parsed.placement.nodes == 3
    assert parsed.artifact.revision == "bbbbbbbbbb"
    assert {c.type for c in parsed.conditions} >= {"Ready", "Degraded"}
    assert all(c.observed_generation == 4 for c in parsed.conditions)
    # Re-applying with the same inputs later changes no transition time.
    again = build_status("bert", inputs(), status["conditions"], T1)
    assert again["conditions"] == status["conditions"]


def test_pods_no_scheduler_acts_on_are_not_scheduled() -> None:
    message = "no scheduler has acted on the pod since 2026-01-01T00:00:00Z: is scheduler 'nope' running?"
    stuck = replace(SERVING, stuck=(PodProblem("bert-3", "NotScheduled", message),))
    conditions = by_type(compute_conditions(inputs(fleet=stuck)))
    assert (conditions["Scheduled"].status, conditions["Scheduled"].reason) == ("False", "NotScheduled")
    assert (conditions["Degraded"].status, conditions["Degraded"].reason) == ("True", "NotScheduled")
    assert "'nope'" in conditions["Degraded"].message


def test_pods_waiting_for_the_scheduler_are_not_yet_scheduled() -> None:
    waiting = replace(SERVING, unbound=2)
    scheduled = by_type(compute_conditions(inputs(fleet=waiting)))["Scheduled"]
    assert (scheduled.status, scheduled.reason, scheduled.message) == (
        "False",
        "Scheduling",
        "2 pods waiting for the scheduler",
    )


condition_values = st.lists(
    st.builds(
        ConditionValue,
        type=st.sampled_from(["Ready", "Compiled", "Scheduled", "ScalingActive", "WarmPoolReady", "Degraded"]),
        status=st.sampled_from(["True", "False", "Unknown"]),
        reason=st.sampled_from([Reason.COMPILING, Reason.AS_EXPECTED]),
        message=st.text(max_size=5),
    ),
    max_size=6,
    unique_by=lambda v: v.type,
)


@settings(max_examples=200, deadline=None)
@given(first=condition_values, second=condition_values)
def test_transition_time_moves_exactly_when_the_status_flips(
    first: list[ConditionValue], second: list[ConditionValue]
) -> None:
    before = merge_conditions([], first, T0, 1)
    after = merge_conditions(before, second, T1, 2)
    old = {c.type: c for c in before}
    new = {c.type: c for c in after}
    assert set(new) == set(old) | {v.type for v in second}
    for value in second:
        merged = new[value.type]
        assert (merged.status, merged.reason, merged.observed_generation) == (value.status, value.reason, 2)
        flipped = value.type not in old or old[value.type].status != value.status
        assert merged.last_transition_time == ("2026-11-30T12:05:00Z" if flipped else "2026-11-30T12:00:00Z")
    # Merging the same values again is a fixed point.
    assert merge_conditions(after, second, T1, 2) == after


def test_reasons_are_members_of_the_closed_set() -> None:
    for value in compute_conditions(inputs()):
        assert isinstance(value.reason, Reason)


def test_status_owns_every_section_and_drops_what_the_inputs_do_not_support() -> None:
    full = build_status("bert", inputs(last_scale=LastScale("2026-11-30T12:00:00Z", "manual")), [], T0)
    assert {"artifact", "placement", "lastScaleTime", "lastScaleReason"} <= set(full)
    assert full["artifact"]["cacheKey"].startswith("bbbbbbbbbb") and full["artifact"]["backend"] == "cpu"
    assert "metrics" not in full
    unplaced = build_status("bert", inputs(placement=None, compile=COMPILING), full["conditions"], T1)
    assert "placement" not in unplaced and "artifact" not in unplaced and "lastScaleTime" not in unplaced
    patch = status_patch(full, unplaced)
    assert patch is not None
    assert patch["placement"] is None and patch["artifact"] is None and patch["lastScaleReason"] is None


def test_status_patch_compares_both_ways() -> None:
    old = {"a": 1, "nested": {"x": 1, "y": 2}, "list": [1, 2]}
    assert status_patch(old, dict(old)) is None
    assert status_patch(old, {"a": 1, "nested": {"x": 1}, "list": [1, 2]}) == {"nested": {"y": None}}
    assert status_patch(old, {"a": 2, "nested": {"x": 1, "y": 2}, "list": [2]}) == {"a": 2, "list": [2]}
    assert status_patch({}, {"a": 1}) == {"a": 1}
    assert status_patch({"a": 1}, {}) == {"a": None}


def test_ready_never_reads_more_ready_than_desired() -> None:
    surplus = replace(SERVING, desired_active=15, ready_active=16, active=16, current_ready_active=16)
    conditions = by_type(compute_conditions(inputs(fleet=surplus)))
    assert conditions["Available"].message == "15/15 active replicas ready, 1 more being scaled down"
    assert conditions["Ready"].message == (
        "15/15 active replicas of revision bbbbbbbbbb ready, 1 more being scaled down"
    )


def test_no_pods_is_not_all_pods_scheduled() -> None:
    empty = replace(SERVING, active=0, ready_active=0, warm_ready=0, warm=0, current_ready_active=0)
    scheduled = by_type(compute_conditions(inputs(fleet=empty)))["Scheduled"]
    assert (scheduled.status, scheduled.reason) == ("False", Reason.PODS_NOT_CREATED)
    refused = Refusal(Reason.PRIORITY_CLASS_MISSING, "PriorityClass neuronfleet-active does not exist")
    conditions = by_type(compute_conditions(inputs(fleet=empty, refusals=(refused,))))
    assert (conditions["Scheduled"].status, conditions["Scheduled"].reason) == ("False", "PriorityClassMissing")
    assert (conditions["Degraded"].reason, conditions["Degraded"].message) == (
        "PriorityClassMissing",
        "PriorityClass neuronfleet-active does not exist",
    )
    nothing = replace(empty, desired_active=0, desired_warm=0)
    assert by_type(compute_conditions(inputs(fleet=nothing)))["Scheduled"].reason == Reason.NO_PODS_WANTED


def test_an_unscheduled_placeholder_does_not_fill_the_warm_pool() -> None:
    pending = replace(SERVING, desired_placeholders=1, placeholders=1, placeholders_bound=0)
    warm = by_type(compute_conditions(inputs(fleet=pending)))["WarmPoolReady"]
    assert (warm.status, warm.reason) == ("False", "WarmPoolFilling")
    bound = replace(pending, placeholders_bound=1)
    assert by_type(compute_conditions(inputs(fleet=bound)))["WarmPoolReady"].status == "True"


def test_an_invalid_spec_is_not_ready_for_its_generation_and_keeps_the_rest() -> None:
    # A check that waits for observedGeneration and Ready must not pass on a refused spec.
    ready = {"type": "Ready", "status": "True", "reason": "ReplicasReady", "message": "2/2", "observedGeneration": 1}
    previous = {"observedGeneration": 1, "replicas": 2, "conditions": [ready]}
    new = invalid_status(previous, "spec.scaling.maxReplicas: not an integer", 2, T1)
    conditions = {c["type"]: c for c in new["conditions"]}
    assert new["observedGeneration"] == 2 and new["replicas"] == 2
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "InvalidSpec")
    assert conditions["Ready"]["observedGeneration"] == 2
    assert (conditions["Degraded"]["status"], conditions["Degraded"]["reason"]) == ("True", "InvalidSpec")
    assert "maxReplicas" in conditions["Degraded"]["message"]


OLD_ARTIFACT = StoredArtifact("aaaaaaaaaa" + "0" * 54, "s3://artifacts/bert/aaaaaaaaaa/", "e" * 64, "cpu")


def test_a_spec_whose_artifact_is_not_compiled_is_available_but_not_ready() -> None:
    # Regression: after a spec change that needs a new compile, Ready=True ReplicasReady stood beside
    # Compiled=False Compiling while the old revision served: `kubectl wait --for=condition=Ready`
    # (and Argo CD / Flux health) passed on a spec not rolled out. The old fleet is still Available.
    recompiling = CompileDecision(True, OLD_ARTIFACT, "False", Reason.COMPILING, "compile Job running")
    conditions = by_type(compute_conditions(inputs(compile=recompiling)))
    assert (conditions["Ready"].status, conditions["Ready"].reason) == ("False", "Compiling")
    assert conditions["Ready"].message == (
        "compiling this spec's artifact (see Compiled); revision aaaaaaaaaa keeps serving"
    )
    assert (conditions["Available"].status, conditions["Available"].reason) == ("True", "ReplicasReady")
    assert build_status("bert", inputs(compile=recompiling), [], T0)["updatedReplicas"] == 0
    assert build_status("bert", inputs(), [], T0)["updatedReplicas"] == 2


def test_ready_says_what_blocks_the_spec_and_points_to_the_condition_with_the_detail() -> None:
    cases = {
        Reason.SOURCE_UNREADABLE: ("False", "cannot compile: spec.model.source is unreadable (see Degraded)"),
        Reason.COMPILE_FAILED: ("False", "cannot compile: the compile of this spec failed (see Compiled"),
        Reason.ARTIFACT_MISSING: ("False", "this spec's compile Job succeeded but its artifact is not in the store"),
        Reason.ARTIFACT_GONE: ("False", "this spec's artifact is gone from the store"),
        # Whether the served artifact is the spec's cannot be told: Unknown, not a flip to False.
        Reason.STORE_UNAVAILABLE: ("Unknown", "the artifact store could not be read"),
    }
    for reason, (status, message) in cases.items():
        decision = CompileDecision(False, OLD_ARTIFACT, "False", reason, "detail")
        ready = by_type(compute_conditions(inputs(compile=decision)))["Ready"]
        assert (ready.status, ready.reason) == (status, reason)
        assert ready.message.startswith(message) and ready.message.endswith("revision aaaaaaaaaa keeps serving")
    impossible = plan_placement(ReplicaNeeds(16, hbm_gib=200), ["inf2.xlarge"], 1)
    conditions = by_type(compute_conditions(inputs(placement=impossible)))
    assert (conditions["Ready"].status, conditions["Ready"].reason) == ("False", "NoInstanceTypeFits")
    assert conditions["Ready"].message == (
        "the spec fits no allowed instance type (spec.placement.instanceTypes; see Degraded): "
        "the pods of the last valid spec, if any, are left as they were"
    )
    assert conditions["Available"].status == "True"


def test_scaled_to_zero_is_ready_only_once_the_spec_is_compiled() -> None:
    zero = replace(SERVING, desired_active=0, active=0, ready_active=0, current_ready_active=0)
    ready = by_type(compute_conditions(inputs(fleet=zero)))["Ready"]
    assert (ready.status, ready.reason) == ("True", "ScaledToZero")
    recompiling = CompileDecision(True, OLD_ARTIFACT, "False", Reason.COMPILING, "compile Job running")
    conditions = by_type(compute_conditions(inputs(fleet=zero, compile=recompiling)))
    assert (conditions["Ready"].status, conditions["Ready"].reason) == ("False", "Compiling")
    assert (conditions["Available"].status, conditions["Available"].reason) == ("True", "ScaledToZero")


def test_ready_flips_once_and_available_keeps_its_time_through_a_recompile() -> None:
    steady = build_status("bert", inputs(generation=1), [], T0)
    recompiling = CompileDecision(True, OLD_ARTIFACT, "False", Reason.COMPILING, "compile Job running")
    changed = build_status("bert", inputs(generation=2, compile=recompiling), steady["conditions"], T1)
    before = {c["type"]: c for c in steady["conditions"]}
    after = {c["type"]: c for c in changed["conditions"]}
    assert after["Ready"]["lastTransitionTime"] == "2026-11-30T12:05:00Z"
    assert after["Available"]["lastTransitionTime"] == before["Available"]["lastTransitionTime"]
    assert all(c["observedGeneration"] == 2 for c in changed["conditions"])
    assert (
        status_patch(
            changed, build_status("bert", inputs(generation=2, compile=recompiling), changed["conditions"], T1)
        )
        is None
    )


def test_a_placeholder_waiting_for_the_scheduler_is_not_scheduled() -> None:
    # Regression: a placeholder Pending unbound for 91 s stood beside Scheduled=True AllPodsScheduled.
    pending = replace(SERVING, desired_placeholders=1, placeholders=1, placeholders_bound=0)
    scheduled = by_type(compute_conditions(inputs(fleet=pending)))["Scheduled"]
    assert (scheduled.status, scheduled.reason, scheduled.message) == (
        "False",
        "Scheduling",
        "1 pod (1 placeholder) waiting for the scheduler",
    )
    both = replace(pending, unbound=1)
    assert by_type(compute_conditions(inputs(fleet=both)))["Scheduled"].message == (
        "2 pods (1 placeholder) waiting for the scheduler"
    )
    bound = replace(pending, placeholders_bound=1)
    assert by_type(compute_conditions(inputs(fleet=bound)))["Scheduled"].reason == "AllPodsScheduled"


def test_pods_wanted_before_the_first_artifact_are_not_no_pods_wanted() -> None:
    # Regression: desiredReplicas 2 before any artifact read Scheduled=True NoPodsWanted "no pods
    # wanted", which the guide explains as scaled to zero.
    waiting = replace(SERVING, desired_warm=0, revision_known=False, active=0, ready_active=0, warm=0, warm_ready=0)
    scheduled = by_type(compute_conditions(inputs(fleet=waiting, compile=COMPILING)))["Scheduled"]
    assert (scheduled.status, scheduled.reason, scheduled.message) == (
        "False",
        "AwaitingArtifact",
        "2 pods wanted once compiled (see Compiled)",
    )
    # Placeholders are made at once, before the artifact: bound, they are scheduled; the rest is said.
    held = replace(waiting, desired_placeholders=1, placeholders=1, placeholders_bound=1)
    scheduled = by_type(compute_conditions(inputs(fleet=held, compile=COMPILING)))["Scheduled"]
    assert (scheduled.status, scheduled.reason) == ("True", "AllPodsScheduled")
    assert scheduled.message.endswith("; 2 pods wanted once compiled (see Compiled)")


def test_pods_held_by_the_fleet_plan_are_said_where_the_capacity_is_short() -> None:
    why = "the artifact of revision bbbbbbbbbb is gone from the store"
    gone = CompileDecision(False, ARTIFACT, "False", Reason.ARTIFACT_GONE, "gone; compiling it again")
    short = replace(SERVING, ready_active=1, active=1, current_ready_active=1, warm_ready=0, warm=0)
    held = replace(short, held_active=1, held_warm=1, hold_reason=why)
    conditions = by_type(compute_conditions(inputs(fleet=held, compile=gone)))
    assert conditions["Available"].message == f"1/2 active replicas ready; 1 new active pod held: {why}"
    assert conditions["WarmPoolReady"].message == (
        f"0/1 warm pods ready, 0/0 placeholders on nodes; 1 new warm pod held: {why}"
    )
    assert conditions["Ready"].reason == Reason.ARTIFACT_GONE
    # A held rollout keeps the old standby: the pool says so.
    kept = by_type(compute_conditions(inputs(fleet=replace(held, kept_outdated_warm=2), compile=gone)))
    assert kept["WarmPoolReady"].message.endswith(f"held: {why}; 2 outdated warm pods kept while new ones are held")
    # Any rollout keeps the old loaded standby until new standby is loaded: nothing is held then.
    loading = by_type(compute_conditions(inputs(fleet=replace(short, kept_outdated_warm=1), compile=gone)))
    assert loading["WarmPoolReady"].message == (
        "0/1 warm pods ready, 0/0 placeholders on nodes; 1 outdated warm pod kept until new ones are loaded"
    )
    # Every serving pod gone (and held): Scheduled says why none is created.
    empty = replace(held, active=0, ready_active=0, current_ready_active=0, held_active=2)
    scheduled = by_type(compute_conditions(inputs(fleet=empty, compile=gone)))["Scheduled"]
    assert (scheduled.reason, scheduled.message) == ("PodsNotCreated", f"0/3 pods created yet; 3 new pods held: {why}")
    # Nothing held: the messages are as ever.
    plain = by_type(compute_conditions(inputs(fleet=short, compile=gone)))
    assert plain["Available"].message == "1/2 active replicas ready"


def test_the_rollout_section_is_the_record_the_fleet_plan_returns() -> None:
    # Written to the second (as Kubernetes writes times) and read back by the next reconcile's plan:
    # the same record writes the same section, so a rollout that does not progress writes nothing.
    record = RolloutRecord("d690df74", T0 + timedelta(microseconds=900_000))
    rolling = replace(SERVING, outdated=1, rollout=record)
    status = build_status("bert", inputs(fleet=rolling), [], T1)
    assert status["rollout"] == {"target": "d690df74", "startedAt": "2026-11-30T12:00:00Z"}
    assert status_patch(status, build_status("bert", inputs(fleet=rolling), status["conditions"], T1)) is None
    assert "rollout" not in build_status("bert", inputs(), [], T1)


def test_a_stalled_rollout_whose_actives_are_all_current_says_only_the_pool_is_behind() -> None:
    # Every active serves the new revision; an old warm pod is still kept while the new pool's pods
    # do not load: "the new revision has not become ready" would send the reader to the actives.
    pool_behind = replace(SERVING, warm_ready=0, outdated=1, outdated_active=0, kept_outdated_warm=1)
    degraded = by_type(compute_conditions(inputs(fleet=pool_behind, rollout_stalled=True)))["Degraded"]
    assert (degraded.status, degraded.reason) == ("True", "RolloutStalled")
    assert degraded.message == (
        "every active pod runs the new revision, but its warm pool has not become ready within the progress deadline"
    )
    actives_behind = replace(pool_behind, outdated=2, outdated_active=1)
    degraded = by_type(compute_conditions(inputs(fleet=actives_behind, rollout_stalled=True)))["Degraded"]
    assert degraded.message == "the new revision has not become ready within the progress deadline"


def test_the_status_written_takes_another_controllers_conditions_as_they_are_now() -> None:
    # The status planned from an older body carries that body's foreign conditions (merge_conditions
    # keeps them); written as planned it would undo what their controller changed since. What is
    # written is ours with the foreign ones as the object has them now: none, once removed.
    audited = {"type": "PolicyCompliant", "status": "True", "reason": "Audited"}
    ready = {"type": "Ready", "status": "True", "reason": "Ready"}
    compiled = {"type": "Compiled", "status": "True", "reason": "ArtifactReady"}
    ours = {"replicas": 2, "conditions": [ready, compiled, audited]}
    assert with_foreign_conditions(ours, {"conditions": [ready]}) == {"replicas": 2, "conditions": [ready, compiled]}
    renewed = {**audited, "status": "False", "reason": "Violation"}
    assert with_foreign_conditions(ours, {"conditions": [renewed, ready]}) == {
        "replicas": 2,
        "conditions": [ready, compiled, renewed],
    }
    # Our own conditions are listed in CONDITION_TYPES order, whatever order they came in.
    assert with_foreign_conditions({"conditions": [compiled, ready]}, {}) == {"conditions": [ready, compiled]}
