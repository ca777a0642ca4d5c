"""The reconcile's pure plan: the same inputs give the same outputs, and a steady fleet writes nothing."""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.planning.compile import CompileObservation, DanglingRecord, StoredArtifact, compile_request
from neuronfleet.planning.fleet import (
    CreatePlaceholder,
    CreatePod,
    DeletePod,
    FleetPolicy,
    PodView,
    Relabel,
    apply_actions,
)
from neuronfleet.planning.observation import (
    DeploymentMemory,
    Observation,
    StatusMemory,
    corrupt_annotations,
    manifest_refused,
    seen_status,
)
from neuronfleet.planning.placement import Candidate, Headroom
from neuronfleet.planning.reasons import Reason, Refusal
from neuronfleet.planning.reconcile_plan import (
    DeleteCompileJob,
    DeleteHeldJobPods,
    StartCompileJob,
    decide_targets,
    plan_reconcile,
    status_after_apply,
    status_events,
)
from neuronfleet.planning.signals import MetricSnapshot
from neuronfleet.planning.status import KEPT_PLACEMENT_NOTE, status_patch

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def deployment(**spec: Any) -> InferenceDeployment:
    manifest = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    manifest["metadata"].update({"namespace": "ns", "generation": 1})
    manifest["spec"].update(spec)
    return InferenceDeployment.model_validate(manifest)


MANUAL = {"scaling": {"mode": "Manual", "replicas": 2, "minReplicas": 0}, "warmPool": {"mode": "Off"}}


def compiled(dep: InferenceDeployment, **changes: Any) -> CompileObservation:
    request = compile_request(dep.spec, "/store", "fp")
    stored = StoredArtifact("c" * 64, "/store/cccc", "d" * 64, "cpu")
    return replace(CompileObservation(request, stored, job_name="job-now"), **changes)


def one_template(candidate: Candidate) -> str:
    return "t" * 10


def template_per_type(candidate: Candidate) -> str:
    """As the operator's: the pod template follows the placement (its instance-type affinity)."""
    return hashlib.sha256(candidate.name.encode()).hexdigest()[:10]


def plan(
    dep: InferenceDeployment,
    observation: Observation,
    memory: DeploymentMemory,
    status: dict[str, Any],
    template_of: Callable[[Candidate], str] = one_template,
) -> Any:
    return plan_reconcile(dep, observation, memory, StatusMemory.from_status(status), FleetPolicy(), template_of)


def test_a_new_deployment_creates_its_pods_and_scales_once_then_holds_still() -> None:
    dep = deployment(**MANUAL)
    first = plan(dep, Observation(T0, compile=compiled(dep)), DeploymentMemory(), {})
    assert [type(a) for a in first.actions] == [CreatePod, CreatePod]
    assert first.status["desiredReplicas"] == 2 and first.status["placement"]["instanceType"] == "inf2.xlarge"
    events = status_events(StatusMemory.from_status({}), first.status, first.scale_reason)
    assert [e.reason for e in events] == [Reason.SCALED]

    # The pods exist (not yet bound); the status as written is read back: nothing more to do or say.
    pods = tuple(apply_actions([], first.actions, T0))
    later = Observation(T0 + timedelta(seconds=10), pods=pods, compile=compiled(dep))
    second = plan(dep, later, first.memory, first.status)
    assert second.actions == ()
    again = plan(dep, replace(later, now=T0 + timedelta(seconds=20)), second.memory, second.status)
    assert status_patch(second.status, again.status) is None
    assert status_events(StatusMemory.from_status(second.status), again.status, again.scale_reason) == []


def test_auto_mode_without_metrics_keeps_one_message_between_and_across_decisions() -> None:
    dep = deployment(scaling={"mode": "Auto", "minReplicas": 1, "maxReplicas": 3, "intervalSeconds": 15})
    status: dict[str, Any]
    memory, status = DeploymentMemory(), {}
    statuses = []
    for second in (0, 5, 10, 15, 20, 30, 45):
        observation = Observation(T0 + timedelta(seconds=second), compile=compiled(dep))
        result = plan(dep, observation, memory, status)
        memory, status = result.memory, result.status
        statuses.append(status)
    scaling = {next(c["message"] for c in s["conditions"] if c["type"] == "ScalingActive") for s in statuses}
    assert len(scaling) == 1 and scaling.pop().startswith("no metrics source configured; metrics missing")
    assert all(status_patch(a, b) is None for a, b in itertools.pairwise(statuses[1:]))


def test_an_unreadable_source_starts_no_job_and_older_jobs_are_superseded() -> None:
    dep = deployment(**MANUAL)
    blocked = compiled(dep, stored=None, source_problem="NoSuchBucket: the bucket does not exist")
    result = plan(dep, Observation(T0, compile=blocked), DeploymentMemory(), {})
    assert result.compile_actions == ()
    compiled_condition = next(c for c in result.status["conditions"] if c["type"] == "Compiled")
    assert (compiled_condition["status"], compiled_condition["reason"]) == ("False", "SourceUnreadable")
    assert "NoSuchBucket" in compiled_condition["message"]

    fresh = compiled(dep, stored=None, job_phase="running", running_jobs=("job-now", "job-old"))
    actions = plan(dep, Observation(T0, compile=fresh), DeploymentMemory(), {}).compile_actions
    assert actions == (DeleteCompileJob("job-old"),)
    absent = compiled(dep, stored=None, running_jobs=("job-old",))
    actions = plan(dep, Observation(T0, compile=absent), DeploymentMemory(), {}).compile_actions
    assert actions == (StartCompileJob(absent.request, "job-now"), DeleteCompileJob("job-old"))
    # A held Job's live pods are deleted on every reconcile while any is left (a failed call, an
    # operator stop, is made good on the next one), whatever else the compile does.
    held = compiled(dep, stored=None, job_phase="running", held_job_pods=(("job-old", ("job-old-x",)),))
    actions = plan(dep, Observation(T0, compile=held), DeploymentMemory(), {}).compile_actions
    assert actions == (DeleteHeldJobPods("job-old", ("job-old-x",)),)
    unread = Observation(T0, compile=held, compile_error="the store is unavailable")
    assert plan(dep, unread, DeploymentMemory(), {}).compile_actions == (DeleteHeldJobPods("job-old", ("job-old-x",)),)


def test_a_dangling_record_compiles_again_with_a_marked_job_and_a_warning() -> None:
    dep = deployment(**MANUAL)
    serving = StoredArtifact("c" * 64, "/store/cccc", "d" * 64, "cpu")
    gone = DanglingRecord(serving, None)
    status = plan(dep, Observation(T0, compile=compiled(dep)), DeploymentMemory(), {}).status
    # The finished Job that wrote the record is still there: replaced, its Event says why.
    finished = compiled(dep, stored=None, dangling=gone, job_phase="succeeded")
    result = plan(dep, Observation(T0, compile=finished), DeploymentMemory(), status)
    assert result.compile_actions == (DeleteCompileJob("job-now", gone.describe()),)
    compiled_condition = next(c for c in result.status["conditions"] if c["type"] == "Compiled")
    assert (compiled_condition["status"], compiled_condition["reason"]) == ("False", "ArtifactGone")
    assert "/store/cccc recorded for this request is gone (manifest missing)" in compiled_condition["message"]
    events = status_events(StatusMemory.from_status(status), result.status, result.scale_reason)
    assert [(e.type, e.reason) for e in events] == [("Warning", Reason.ARTIFACT_GONE)]
    assert result.status["artifact"]["uri"] == "/store/cccc"  # its running pods keep serving
    # Once gone, the new Job carries the mark of a republish.
    absent = compiled(dep, stored=None, dangling=gone)
    actions = plan(dep, Observation(T0, compile=absent), DeploymentMemory(), result.status).compile_actions
    assert actions == (StartCompileJob(absent.request, "job-now", gone),)


def test_a_compile_that_ends_with_its_artifact_posts_compile_succeeded_once() -> None:
    dep = deployment(**MANUAL)
    running = compiled(dep, stored=None, job_phase="running")
    rounds = [
        Observation(T0, compile=running),
        Observation(T0 + timedelta(seconds=10), compile=compiled(dep, job_phase="succeeded")),
        Observation(T0 + timedelta(seconds=20), compile=compiled(dep, job_phase="succeeded")),
    ]
    status: dict[str, Any]
    memory, status, posted = DeploymentMemory(), {}, []
    for observation in rounds:
        result = plan(dep, observation, memory, status)
        posted.append(
            [
                e
                for e in status_events(StatusMemory.from_status(status), result.status, "", result.compile_succeeded)
                if e.reason == Reason.COMPILE_SUCCEEDED
            ]
        )
        memory, status = result.memory, result.status
    assert posted[0] == [] and posted[2] == []
    assert [(e.type, e.message) for e in posted[1]] == [
        ("Normal", "compiled: revision cccccccccc (cpu backend) at /store/cccc")
    ]
    # The Job writes its record, then ends: a round may see the artifact stored while the Job still
    # runs, and the next one ArtifactReady before. Said on the first of them, once.
    assert _compile_succeeded_events(
        dep, [rounds[0], Observation(T0, compile=compiled(dep, job_phase="running")), *rounds[1:]]
    ) == [
        [],
        ["compiled: revision cccccccccc (cpu backend) at /store/cccc"],
        [],
        [],
    ]
    # An artifact found stored already (a shared cache): nothing was compiled, nothing said.
    cached = plan(dep, Observation(T0, compile=compiled(dep)), DeploymentMemory(), {})
    assert cached.compile_succeeded is None
    # A republish of the artifact served (gone from the store, compiled again to the same one) is said.
    gone = DanglingRecord(StoredArtifact("c" * 64, "/store/cccc", "d" * 64, "cpu"), None)
    republishing = plan(dep, Observation(T0, compile=compiled(dep, stored=None, dangling=gone)), memory, status)
    assert republishing.status["artifact"] == status["artifact"]
    republished = plan(dep, Observation(T0, compile=compiled(dep, job_phase="succeeded")), memory, republishing.status)
    assert republished.compile_succeeded == compiled(dep).stored


def _compile_succeeded_events(dep: InferenceDeployment, rounds: list[Observation]) -> list[list[str]]:
    """The CompileSucceeded messages each round posts, each round's status read back by the next."""
    status: dict[str, Any]
    memory, status, posted = DeploymentMemory(), {}, []
    for observation in rounds:
        result = plan(dep, observation, memory, status)
        events = status_events(
            StatusMemory.from_status(status), result.status, result.scale_reason, result.compile_succeeded
        )
        posted.append([e.message for e in events if e.reason == Reason.COMPILE_SUCCEEDED])
        memory, status = result.memory, result.status
    return posted


@pytest.mark.parametrize("between", ["store unavailable", "jobs unread", "source unreadable"])
def test_compile_succeeded_is_posted_when_a_round_between_could_not_read_the_pipeline(between: str) -> None:
    # It was posted only on Compiling -> ArtifactReady: a round in between that read the store or the
    # Jobs list as unavailable (or the source as unreadable) made it StoreUnavailable ->
    # ArtifactReady, and the compile that ended was never said.
    dep = deployment(**MANUAL)
    running = compiled(dep, stored=None, job_phase="running", running_jobs=("job-now",))
    blip = {
        "store unavailable": Observation(T0 + timedelta(seconds=10), compile=None, compile_error="cannot list now"),
        "jobs unread": Observation(
            T0 + timedelta(seconds=10), compile=running, compile_error="compile Jobs: 503 Service Unavailable"
        ),
        "source unreadable": Observation(
            T0 + timedelta(seconds=10),
            compile=replace(
                running,
                request=compile_request(dep.spec, "/store", None),
                job_phase="absent",
                job_name="job-unlisted",
                source_problem="AccessDenied: Access Denied",
            ),
        ),
    }[between]
    done = compiled(dep, job_phase="succeeded")
    rounds = [
        Observation(T0, compile=running),
        blip,
        Observation(T0 + timedelta(seconds=20), compile=done),
        Observation(T0 + timedelta(seconds=30), compile=done),
    ]
    assert _compile_succeeded_events(dep, rounds) == [
        [],
        [],
        ["compiled: revision cccccccccc (cpu backend) at /store/cccc"],
        [],
    ]


def test_compile_succeeded_is_not_posted_for_a_spec_reverted_to_a_stored_artifact() -> None:
    # v1 compiles; the spec goes back to v0, whose artifact is stored (and served meanwhile): nothing
    # was compiled, whether v0's own compile Job is still kept (a day) or gone.
    manual = {"mode": "Manual", "replicas": 1, "minReplicas": 0}
    v0 = deployment(scaling=manual, warmPool={"mode": "Off"})
    model = {**v0.spec.model.model_dump(by_alias=True, exclude_none=True), "source": "s3://acme-models/bert-v2/"}
    v1 = deployment(scaling=manual, warmPool={"mode": "Off"}, model=model)
    v0_running = compiled(v0, stored=None, job_phase="running", running_jobs=("job-now",))
    v1_running = compiled(v1, stored=None, job_phase="running", job_name="job-v1", running_jobs=("job-v1",))
    v1_done = compiled(v1, stored=StoredArtifact("e" * 64, "/store/eeee", "f" * 64, "cpu"), job_phase="succeeded")
    scenarios = {
        # Reverted while v1 compiles: v0 is the artifact served.
        "while compiling, v0's Job gone": [(v0, compiled(v0)), (v1, v1_running), (v0, compiled(v0))],
        "while compiling, v0's Job kept": [
            (v0, v0_running),
            (v0, compiled(v0, job_phase="succeeded")),
            (v1, v1_running),
            (v0, compiled(v0, job_phase="succeeded", running_jobs=("job-v1",))),
        ],
        # Reverted once v1 serves: v0's Job, kept a day, is no compile of this round.
        "after v1 served, v0's Job kept": [
            (v0, v0_running),
            (v0, compiled(v0, job_phase="succeeded")),
            (v1, v1_running),
            (v1, v1_done),
            (v0, compiled(v0, job_phase="succeeded")),
        ],
    }
    v0_said = ["compiled: revision cccccccccc (cpu backend) at /store/cccc"]
    v1_said = ["compiled: revision eeeeeeeeee (cpu backend) at /store/eeee"]
    expected = {
        "while compiling, v0's Job gone": [[], [], []],
        "while compiling, v0's Job kept": [[], v0_said, [], []],
        "after v1 served, v0's Job kept": [[], v0_said, [], v1_said, []],
    }
    for name, rounds in scenarios.items():
        status: dict[str, Any]
        memory, status, messages = DeploymentMemory(), {}, []
        for dep, observed in rounds:
            result = plan(dep, Observation(T0, compile=observed), memory, status)
            events = status_events(
                StatusMemory.from_status(status), result.status, result.scale_reason, result.compile_succeeded
            )
            messages.append([e.message for e in events if e.reason == Reason.COMPILE_SUCCEEDED])
            memory, status = result.memory, result.status
        assert messages == expected[name], name


def test_a_failed_source_listing_supersedes_no_running_compile() -> None:
    # Without the listing the request key lacks the source's fingerprint, so it differs from the
    # running Job's although nothing changed: deleting that Job would throw away hours of compile.
    dep = deployment(**MANUAL)
    blip = compiled(
        dep, stored=None, source_problem="SlowDown: please reduce your request rate", running_jobs=("job-old",)
    )
    result = plan(dep, Observation(T0, compile=blip), DeploymentMemory(), {})
    assert result.compile_actions == ()


def test_the_plan_reads_its_time_from_the_observation_only() -> None:
    dep = deployment(**MANUAL)
    at = Observation(datetime(2030, 1, 1, tzinfo=UTC), compile=compiled(dep))
    result = plan(dep, at, DeploymentMemory(), {})
    assert result.status["lastScaleTime"] == "2030-01-01T00:00:00Z"
    assert {c["lastTransitionTime"] for c in result.status["conditions"]} == {"2030-01-01T00:00:00Z"}


def test_durable_memory_reads_only_its_fields_and_tolerates_garbage() -> None:
    memory = StatusMemory.from_status(
        {
            "desiredReplicas": "two",
            "placement": "inf2",
            "artifact": {"uri": 3},
            "conditions": [1, {"type": "Ready"}],
            "ignoredReplicas": -1,
            "rollout": {"target": "d690df74", "startedAt": "yesterday"},
        }
    )
    assert memory == StatusMemory(conditions=({"type": "Ready"},))
    assert StatusMemory.from_status({"rollout": {"startedAt": "2026-11-30T12:00:00Z"}}).rollout is None
    # A time without a zone (written by hand) is read as UTC.
    rollout = StatusMemory.from_status({"rollout": {"target": "d690df74", "startedAt": "2026-11-30T12:00:00"}}).rollout
    assert rollout is not None and (rollout.target, rollout.started_at) == ("d690df74", T0)
    assert rollout.progressed_at is None
    # The progress recorded is read back; an unreadable one is none (the start still counts).
    section = {"target": "d690df74", "startedAt": "2026-11-30T12:00:00Z", "progressedAt": "2026-11-30T12:05:00Z"}
    rollout = StatusMemory.from_status({"rollout": section}).rollout
    assert rollout is not None and rollout.progressed_at == T0 + timedelta(minutes=5)
    rollout = StatusMemory.from_status({"rollout": {**section, "progressedAt": 7}}).rollout
    assert rollout is not None and rollout.started_at == T0 and rollout.progressed_at is None


def test_a_stale_body_is_read_as_the_status_last_written() -> None:
    before, after = {"desiredReplicas": 0}, {"desiredReplicas": 2}
    memory = DeploymentMemory(written=(before, after), written_version="7")
    assert seen_status(before, memory, "5") == (after, "7")  # written from the version of our write
    assert seen_status(after, memory, "7") == (after, "7")
    assert seen_status({"desiredReplicas": 5}, memory, "9") == ({"desiredReplicas": 5}, "9")
    # A reconcile that wrote twice: a body at its first write is older than its second.
    between = {"desiredReplicas": 1}
    twice = DeploymentMemory(written=(before, after), written_version="7", superseded_versions=frozenset({"5", "6"}))
    assert seen_status(between, twice, "6") == (after, "7")
    assert seen_status(between, twice, "8") == (between, "8")


def test_a_corrupt_json_annotation_is_found() -> None:
    key = "serving.neuronfleet.dev/last-handled-configuration"
    assert corrupt_annotations({key: '{"spec": {}}'}) == ()
    assert corrupt_annotations({key: "{nope"}) == (key,)
    assert corrupt_annotations({"other": "{nope"}) == ()


def busy(now: float) -> MetricSnapshot:
    return MetricSnapshot(time=now, queue_depth=40.0, in_flight=8.0, utilization=0.9)


def test_a_held_decision_is_bounded_by_a_max_replicas_lowered_between_decisions() -> None:
    auto = {"mode": "Auto", "minReplicas": 1, "maxReplicas": 10, "intervalSeconds": 600, "panicWindowSeconds": 0}
    dep = deployment(scaling=auto, warmPool={"mode": "Auto", "minPods": 1, "maxPods": 4})
    targets, memory = decide_targets(dep.spec, DeploymentMemory(), busy(0), "", 2, 2, 0.0)
    assert targets.scale.desired > 3
    # maxReplicas lowered a minute later: the autoscaler is not due for nine more minutes, but no
    # desired count, status or fleet may go past the bound meanwhile.
    lowered = deployment(scaling={**auto, "maxReplicas": 3}, warmPool={"mode": "Auto", "minPods": 1, "maxPods": 4})
    held, memory = decide_targets(lowered.spec, memory, None, "not due", targets.scale.desired, 2, 60.0)
    assert held.scale.desired == 3
    assert targets.scale.demand is not None and targets.scale.demand > 3
    assert held.scale.demand == 3  # the demand the warm pool sizes from is bounded with it
    assert held.warm.pods == 1 and held.warm.node_placeholders == 0
    raised = deployment(scaling={**auto, "minReplicas": 8}, warmPool={"mode": "Off"})
    held, _ = decide_targets(raised.spec, memory, None, "not due", 3, 2, 120.0)
    assert (held.scale.desired, held.scale.demand) == (8, 8)


def test_a_snapshot_with_no_usable_signal_is_not_reported_as_metrics_read() -> None:
    # Prometheus answered, but with samples older than staleAfterSeconds (pods that stopped
    # reporting stay in an instant query's answers for five minutes): the autoscaler holds, and
    # ScalingActive must say so rather than "MetricsRead".
    dep = deployment(scaling={"mode": "Auto", "minReplicas": 1, "maxReplicas": 5}, warmPool={"mode": "Off"})
    now = T0.timestamp()
    stale = MetricSnapshot(time=now - 300, queue_depth=1.0, in_flight=1.0, utilization=0.5)

    def scaling_active(snapshot: MetricSnapshot) -> dict[str, Any]:
        observation = Observation(T0, compile=compiled(dep), metrics=snapshot, metrics_problem="metrics read")
        result = plan(dep, observation, DeploymentMemory(), {})
        return next(c for c in result.status["conditions"] if c["type"] == "ScalingActive")

    condition = scaling_active(stale)
    assert (condition["status"], condition["reason"]) == ("False", "MetricsUnavailable")
    assert condition["message"].startswith("metrics missing")
    condition = scaling_active(replace(stale, time=now))
    assert (condition["status"], condition["reason"]) == ("True", "MetricsRead")


def test_requests_that_cannot_be_read_are_degraded_with_the_field_not_a_failed_reconcile() -> None:
    # The CRD's pattern refuses "-1Gi"; an object stored under an older CRD, or a spec from
    # elsewhere, still reaches the planner, which reports it instead of raising on every reconcile.
    dep = deployment(**MANUAL)
    runtime = dep.spec.runtime.model_copy(update={"memory": "-1Gi"})
    dep = dep.model_copy(update={"spec": dep.spec.model_copy(update={"runtime": runtime})})
    result = plan(dep, Observation(T0, compile=compiled(dep)), DeploymentMemory(), {})
    assert result.actions == ()
    degraded = next(c for c in result.status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True"
    assert "spec.runtime.memory: '-1Gi' is not a memory quantity" in degraded["message"]
    assert result.status["observedGeneration"] == 1


def test_a_manual_deployment_with_an_auto_warm_pool_is_told_why_it_keeps_only_min_pods() -> None:
    # Manual scaling measures no demand, so Auto sizing has nothing to size from.
    dep = deployment(scaling={"mode": "Manual", "replicas": 2}, warmPool={"mode": "Auto", "minPods": 1})
    result = plan(dep, Observation(T0, compile=compiled(dep)), DeploymentMemory(), {})
    reason = result.status["warmPool"]["reason"]
    assert "scaling.mode Manual does not measure: only minPods are kept (use warmPool.mode Fixed)" in reason


def test_a_warning_event_when_the_autoscaler_loses_its_metrics_and_none_for_manual_scaling() -> None:
    def scaling(reason: str) -> dict[str, Any]:
        status = "False" if reason != "MetricsRead" else "True"
        return {"conditions": [{"type": "ScalingActive", "status": status, "reason": reason, "message": "why"}]}

    lost = status_events(StatusMemory.from_status(scaling("MetricsRead")), scaling("MetricsUnavailable"), "")
    assert [(e.type, e.reason, e.message) for e in lost] == [("Warning", Reason.METRICS_UNAVAILABLE, "why")]
    still = StatusMemory.from_status(scaling("MetricsUnavailable"))
    assert status_events(still, scaling("MetricsUnavailable"), "") == []
    assert status_events(StatusMemory.from_status({}), scaling("ManualScaling"), "") == []


def test_a_normal_event_once_when_the_autoscaler_reads_metrics_again() -> None:
    def scaling(reason: str, message: str = "why") -> dict[str, Any]:
        status = "False" if reason != "MetricsRead" else "True"
        return {"conditions": [{"type": "ScalingActive", "status": status, "reason": reason, "message": message}]}

    for holding in ("MetricsUnavailable", "PrometheusUrlNotAllowed", "PrometheusQueryNotAllowed"):
        # Each round's status is read back as the next round's durable memory.
        rounds = [scaling("MetricsRead"), scaling(holding), scaling(holding), scaling("MetricsRead", "3 replicas")]
        rounds.append(scaling("MetricsRead", "4 replicas"))
        events = [
            (e.type, e.reason, e.message)
            for before, after in itertools.pairwise(rounds)
            for e in status_events(StatusMemory.from_status(before), after, "")
        ]
        assert events == [
            ("Warning", Reason(holding), "why"),
            (
                "Normal",
                Reason.METRICS_RECOVERED,
                f"metrics read again (was {holding}); the autoscaler decides again: 3 replicas",
            ),
        ]
    # Not for a switch from Manual mode, nor for a new deployment: nothing was lost.
    for before in (scaling("ManualScaling"), {}):
        assert status_events(StatusMemory.from_status(before), scaling("MetricsRead"), "") == []


def test_a_failed_job_asked_to_run_differently_is_replaced_and_the_event_says_why() -> None:
    dep = deployment(**MANUAL)
    failed = compiled(
        dep, stored=None, job_phase="failed", job_message="OOMKilled", job_spec="old", wanted_job_spec="new"
    )
    (action,) = plan(dep, Observation(T0, compile=failed), DeploymentMemory(), {}).compile_actions
    assert isinstance(action, DeleteCompileJob) and action.name == "job-now"
    # Not "the spec or the model source changed": the request is the same, its Job's run is not.
    assert "failed" in action.why and "compile-retry" in action.why


def test_a_prometheus_url_the_allow_list_refuses_is_its_own_reason_held_between_decisions_and_warned_once() -> None:
    dep = deployment(scaling={"mode": "Auto", "minReplicas": 1, "maxReplicas": 3, "intervalSeconds": 15})
    refused = "spec.scaling.metrics.prometheusUrl (at http://10.0.0.1:80) is not requested: ..."
    status: dict[str, Any]
    memory, status = DeploymentMemory(), {}
    events, conditions = [], []
    for second in (0, 5, 15):
        observation = Observation(
            T0 + timedelta(seconds=second),
            compile=compiled(dep),
            metrics_problem=refused,
            metrics_problem_reason=Reason.PROMETHEUS_URL_NOT_ALLOWED,
        )
        result = plan(dep, observation, memory, status)
        events += status_events(StatusMemory.from_status(status), result.status, result.scale_reason)
        memory, status = result.memory, result.status
        conditions.append(condition_of(status, "ScalingActive"))
    assert {(c["status"], c["reason"]) for c in conditions} == {("False", "PrometheusUrlNotAllowed")}
    assert all(c["message"].startswith(refused) and "holding" in c["message"] for c in conditions)
    warnings = [e for e in events if e.type == "Warning"]
    assert [(e.reason, e.message) for e in warnings] == [(Reason.PROMETHEUS_URL_NOT_ALLOWED, conditions[0]["message"])]
    # Allowed again (the spec's URL removed, or the allow-list widened): metrics are read.
    snapshot = MetricSnapshot(time=T0.timestamp() + 30, queue_depth=1.0, in_flight=1.0, utilization=0.5)
    observation = Observation(T0 + timedelta(seconds=30), compile=compiled(dep), metrics=snapshot)
    result = plan(dep, observation, memory, status)
    assert condition_of(result.status, "ScalingActive")["reason"] == "MetricsRead"
    # Unavailable for another cause after a refusal is a change of reason: warned of too.
    lost = Observation(T0 + timedelta(seconds=45), compile=compiled(dep), metrics_problem="Prometheus down")
    after = plan(dep, lost, result.memory, result.status)
    events = status_events(StatusMemory.from_status(status), after.status, after.scale_reason)
    assert condition_of(after.status, "ScalingActive")["reason"] == "MetricsUnavailable"
    assert [e.reason for e in events if e.type == "Warning"] == [Reason.METRICS_UNAVAILABLE]


def condition_of(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def rounds(
    dep: InferenceDeployment,
    compile: CompileObservation,
    pods: tuple[Any, ...],
    memory: Any,
    status: dict[str, Any],
    template_of: Callable[[Candidate], str] = one_template,
) -> tuple[Any, tuple[Any, ...], list[dict[str, Any]]]:
    """Plan and apply until nothing is left to do; every pod made becomes ready, drained pods empty."""
    statuses, result = [], None
    now = T0
    for _ in range(12):
        now += timedelta(seconds=10)
        result = plan(dep, Observation(now, pods=pods, compile=compile), memory, status, template_of)
        memory, status = result.memory, result.status
        statuses.append(status)
        if not result.actions:
            break
        after = apply_actions(list(pods), result.actions, now)
        pods = tuple(replace(p, ready=True, phase="Running", node="n1", ready_at=now, in_flight=0) for p in after)
    return result, pods, statuses


def test_ready_waits_for_the_current_spec_to_be_compiled_and_rolled_out_available_does_not() -> None:
    dep = deployment(**MANUAL)
    steady, pods, _ = rounds(dep, compiled(dep), (), DeploymentMemory(), {})
    assert condition_of(steady.status, "Ready")["status"] == "True"
    assert steady.status["updatedReplicas"] == 2

    # Generation 2 asks for another compile: the old revision keeps serving meanwhile.
    dep2 = dep.model_copy(update={"metadata": dep.metadata.model_copy(update={"generation": 2})})
    waiting = compiled(dep2, stored=None, job_phase="running")
    result, pods, _ = rounds(dep2, waiting, pods, steady.memory, steady.status)
    ready, available = condition_of(result.status, "Ready"), condition_of(result.status, "Available")
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == ("False", "Compiling", 2)
    assert (available["status"], available["reason"]) == ("True", "ReplicasReady")
    assert available["lastTransitionTime"] == condition_of(steady.status, "Available")["lastTransitionTime"]
    assert (result.status["readyReplicas"], result.status["updatedReplicas"]) == (2, 0)

    # Compiled: the new revision rolls out (Ready False RollingOut), then is served (Ready True).
    new = compiled(dep2, stored=StoredArtifact("e" * 64, "/store/eeee", "f" * 64, "cpu"))
    result, pods, statuses = rounds(dep2, new, pods, result.memory, result.status)
    assert ("False", "RollingOut") in {
        (condition_of(s, "Ready")["status"], condition_of(s, "Ready")["reason"]) for s in statuses
    }
    assert all(condition_of(s, "Available")["status"] == "True" for s in statuses)
    assert (condition_of(result.status, "Ready")["status"], result.status["updatedReplicas"]) == ("True", 2)
    assert {p.revision for p in pods if p.role == "active"} == {"eeeeeeeeee"}


def test_no_pod_is_created_of_an_artifact_known_gone_until_it_is_republished() -> None:
    # Regression: replacements of failed pods (and scale-ups) were created of the served artifact
    # that the store no longer had; they crash-looped until the republish landed.
    dep = deployment(**MANUAL)
    steady, pods, _ = rounds(dep, compiled(dep), (), DeploymentMemory(), {})
    gone = DanglingRecord(StoredArtifact("c" * 64, "/store/cccc", "d" * 64, "cpu"), None)
    failed = pods[0].name
    pods = (replace(pods[0], phase="Failed", ready=False), *pods[1:])
    republishing = compiled(dep, stored=None, dangling=gone, job_phase="running")
    later = Observation(T0 + timedelta(minutes=5), pods=pods, compile=republishing)
    result = plan(dep, later, steady.memory, steady.status)
    assert [(type(a).__name__, a.name) for a in result.actions] == [("DeletePod", failed)]
    available = condition_of(result.status, "Available")
    assert (available["status"], available["reason"]) == ("False", "ReplicasNotReady")
    assert available["message"] == (
        "1/2 active replicas ready; 1 new active pod held: the artifact of revision cccccccccc is gone from the "
        "store; no new pod could load it until it is republished (see Compiled)"
    )
    assert condition_of(result.status, "Ready")["reason"] == "ArtifactGone"
    assert result.status["artifact"]["uri"] == "/store/cccc"  # the running pod keeps serving it

    # Republished (stored as recorded again): the replacement is created.
    survivors = tuple(p for p in pods if p.name != failed)
    back = plan(dep, replace(later, pods=survivors, compile=compiled(dep)), result.memory, result.status)
    assert [(type(a), getattr(a, "role", "")) for a in back.actions] == [(CreatePod, "active")]
    assert "held" not in condition_of(back.status, "Available")["message"]


def test_a_spec_that_fits_no_instance_type_still_counts_the_pods_that_serve() -> None:
    # Regression: neuronCoresPerReplica 4 with only inf2.xlarge allowed, on a running deployment,
    # zeroed replicas and readyReplicas (and /scale's status.replicas) while the old pods served.
    dep = deployment(**MANUAL, placement={"instanceTypes": ["inf2.xlarge"]})
    steady, pods, _ = rounds(dep, compiled(dep), (), DeploymentMemory(), {})
    model = dep.spec.model.model_copy(update={"neuron_cores_per_replica": 4})
    unfit = dep.model_copy(update={"spec": dep.spec.model_copy(update={"model": model})})
    result = plan(unfit, Observation(T0 + timedelta(minutes=5), pods=pods), steady.memory, steady.status)
    assert result.actions == () and result.candidate is None
    status = result.status
    assert (status["replicas"], status["readyReplicas"], status["updatedReplicas"]) == (2, 2, 0)
    ready, available = condition_of(status, "Ready"), condition_of(status, "Available")
    assert (ready["status"], ready["reason"]) == ("False", "NoInstanceTypeFits")
    assert ready["message"] == (
        "the spec fits no allowed instance type (spec.placement.instanceTypes; see Degraded): "
        "the pods of the last valid spec, if any, are left as they were"
    )
    assert (available["status"], available["reason"], available["message"]) == (
        "True",
        "ReplicasReady",
        "2/2 active replicas ready",
    )
    # The pods that serve still run where they were placed: said, and remembered (sticky type).
    kept = status["placement"]
    assert kept == {**steady.status["placement"], "reason": KEPT_PLACEMENT_NOTE + steady.status["placement"]["reason"]}
    again = plan(unfit, Observation(T0 + timedelta(minutes=6), pods=pods), result.memory, status)
    assert status_patch(status, again.status) is None  # said once, not prefixed again every round


def test_a_spec_that_fits_nothing_keeps_the_sticky_type_so_fixing_it_moves_no_pod() -> None:
    # Regression: status.placement (the durable memory of the instance type) left the object while the
    # spec fit nothing; once the spec was fixed the fleet moved to the cheapest type, a rollout of every
    # pod for a saving the sticky placement would have judged too small.
    def placed(replicas: int, types: list[str]) -> InferenceDeployment:
        dep = deployment(
            scaling={"mode": "Manual", "replicas": replicas, "minReplicas": 0},
            warmPool={"mode": "Off"},
            placement={"instanceTypes": types},
        )
        model = dep.spec.model.model_copy(update={"neuron_cores_per_replica": 8})
        return dep.model_copy(update={"spec": dep.spec.model_copy(update={"model": model})})

    both = ["inf2.24xlarge", "inf2.48xlarge"]
    # 3 replicas of 8 cores: one 48xlarge is cheapest. At 4 the two types tie: the fleet stays.
    dep3, dep4 = placed(3, both), placed(4, both)
    three, pods, _ = rounds(dep3, compiled(dep3), (), DeploymentMemory(), {}, template_per_type)
    four, pods, _ = rounds(dep4, compiled(dep4), pods, three.memory, three.status, template_per_type)
    assert four.status["placement"]["instanceType"] == "inf2.48xlarge"
    assert "kept the current type" in four.status["placement"]["reason"]

    unfit = placed(4, ["inf2.xlarge"])
    later = Observation(T0 + timedelta(minutes=5), pods=pods)
    broken = plan(unfit, later, four.memory, four.status, template_per_type)
    assert broken.actions == () and condition_of(broken.status, "Scheduled")["reason"] == "NoInstanceTypeFits"
    assert broken.status["placement"]["instanceType"] == "inf2.48xlarge"

    fixed = placed(4, both)
    again = plan(fixed, replace(later, compile=compiled(fixed)), broken.memory, broken.status, template_per_type)
    assert again.actions == ()  # no pod moves
    assert again.status["placement"]["instanceType"] == "inf2.48xlarge"


def test_a_blocked_first_compile_says_why_instead_of_waiting() -> None:
    # Regression: with an unreadable source or no instance type fitting, Ready read AwaitingArtifact
    # "no compiled artifact yet" and Compiled Unknown Pending, which the guide calls transient.
    dep = deployment(**MANUAL)
    unreadable = compiled(dep, stored=None, source_problem="NoSuchBucket: the bucket does not exist")
    status = plan(dep, Observation(T0, compile=unreadable), DeploymentMemory(), {}).status
    blocked = "cannot compile: spec.model.source is unreadable (see Degraded)"
    assert (condition_of(status, "Ready")["reason"], condition_of(status, "Ready")["message"]) == (
        "SourceUnreadable",
        blocked,
    )
    available = condition_of(status, "Available")
    assert (available["status"], available["reason"]) == ("False", "AwaitingArtifact")
    assert available["message"] == f"no compiled artifact: {blocked}"

    model = dep.spec.model.model_copy(update={"neuron_cores_per_replica": 4})
    unfit = dep.model_copy(
        update={
            "spec": dep.spec.model_copy(
                update={
                    "model": model,
                    "placement": dep.spec.placement.model_copy(update={"instance_types": ["inf2.xlarge"]}),
                }
            )
        }
    )
    status = plan(unfit, Observation(T0), DeploymentMemory(), {}).status
    compiled_condition = condition_of(status, "Compiled")
    assert (compiled_condition["status"], compiled_condition["reason"]) == ("False", "NoInstanceTypeFits")
    assert compiled_condition["message"] == (
        "not compiled: the spec fits no allowed instance type (spec.placement.instanceTypes; see Degraded)"
    )
    assert condition_of(status, "Ready")["reason"] == "NoInstanceTypeFits"
    assert condition_of(status, "Available")["message"] == (
        "no compiled artifact: the spec fits no allowed instance type (spec.placement.instanceTypes; see Degraded)"
    )

    # A compile under way is a wait, and said so.
    running = compiled(dep, stored=None, job_phase="running")
    status = plan(dep, Observation(T0, compile=running), DeploymentMemory(), {}).status
    assert condition_of(status, "Available")["message"] == "no compiled artifact yet (see Compiled)"
    assert condition_of(status, "Ready")["message"] == "compiling this spec's artifact (see Compiled)"


def test_replicas_set_in_auto_mode_are_said_to_be_ignored_once() -> None:
    # Regression: `kubectl scale` in Auto mode set spec.scaling.replicas to 5 while desiredReplicas
    # stayed 2, and nothing said why. Accepted (no CEL rule: switching Manual -> Auto must not force
    # an edit of replicas), but said: in ScalingActive's message and by one Event.
    auto = {"mode": "Auto", "minReplicas": 2, "maxReplicas": 10, "intervalSeconds": 15}
    dep = deployment(scaling=auto)
    first = plan(dep, Observation(T0, compile=compiled(dep)), DeploymentMemory(), {})
    assert "ignored" not in condition_of(first.status, "ScalingActive")["message"]

    def scaled(replicas: int, mode: str = "Auto") -> InferenceDeployment:
        return deployment(scaling={**auto, "mode": mode, "replicas": replicas})

    later = Observation(T0 + timedelta(seconds=5), compile=compiled(dep))
    result = plan(scaled(5), later, first.memory, first.status)
    scaling_active = condition_of(result.status, "ScalingActive")
    assert scaling_active["message"].endswith("; spec.scaling.replicas (5) is ignored in Auto mode")
    assert result.status["desiredReplicas"] == 2
    events = status_events(StatusMemory.from_status(first.status), result.status, result.scale_reason)
    assert [(e.type, e.reason) for e in events] == [("Normal", Reason.REPLICAS_IGNORED)]
    assert events[0].message.startswith("spec.scaling.replicas (5) is ignored in Auto mode: ")
    assert "(2 now)" in events[0].message and "spec.scaling.mode to Manual" in events[0].message
    # Once: the next rounds write and say nothing more; a new value is said again.
    again = plan(scaled(5), replace(later, now=T0 + timedelta(seconds=10)), result.memory, result.status)
    assert status_patch(result.status, again.status) is None
    assert status_events(StatusMemory.from_status(result.status), again.status, again.scale_reason) == []
    changed = plan(scaled(6), replace(later, now=T0 + timedelta(seconds=12)), again.memory, again.status)
    events = status_events(StatusMemory.from_status(again.status), changed.status, changed.scale_reason)
    assert [e.reason for e in events] == [Reason.REPLICAS_IGNORED]

    # Switching Manual -> Auto with replicas left set: the message says it, no Event (the switch is known).
    manual = plan(scaled(3, "Manual"), Observation(T0, compile=compiled(dep)), DeploymentMemory(), {})
    switched = plan(scaled(3), later, manual.memory, manual.status)
    assert "spec.scaling.replicas (3) is ignored" in condition_of(switched.status, "ScalingActive")["message"]
    events = status_events(StatusMemory.from_status(manual.status), switched.status, switched.scale_reason)
    assert Reason.REPLICAS_IGNORED not in [e.reason for e in events]


def test_replicas_ignored_compares_the_status_values_not_the_message_words() -> None:
    # The Event used to read the value back out of the ScalingActive message with a regex: a reworded
    # message would have silenced it (or repeated it every round).
    def auto(ignored: int | None, message: str = "autoscaling: 2 active replicas wanted") -> dict[str, Any]:
        scaling = {"type": "ScalingActive", "status": "True", "reason": "MetricsRead", "message": message}
        return {"desiredReplicas": 2, "conditions": [scaling]} | (
            {} if ignored is None else {"ignoredReplicas": ignored}
        )

    said = status_events(StatusMemory.from_status(auto(None)), auto(5, "reworded"), "")
    assert [(e.reason, e.message.split(":")[0]) for e in said] == [
        (Reason.REPLICAS_IGNORED, "spec.scaling.replicas (5) is ignored in Auto mode")
    ]
    misleading = "spec.scaling.replicas (6) is ignored in Auto mode"
    assert status_events(StatusMemory.from_status(auto(5, misleading)), auto(5), "") == []
    assert [e.reason for e in status_events(StatusMemory.from_status(auto(5)), auto(6, misleading), "")] == [
        Reason.REPLICAS_IGNORED
    ]

    # The value is in the status in Auto mode only (Manual mode takes it), and read back as durable memory.
    dep = deployment(scaling={"mode": "Auto", "minReplicas": 2, "maxReplicas": 10, "replicas": 5})
    status = plan(dep, Observation(T0, compile=compiled(dep)), DeploymentMemory(), {}).status
    assert status["ignoredReplicas"] == 5 and StatusMemory.from_status(status).ignored_replicas == 5
    manual = deployment(**MANUAL)
    assert (
        "ignoredReplicas" not in plan(manual, Observation(T0, compile=compiled(manual)), DeploymentMemory(), {}).status
    )


def test_degraded_clearing_posts_one_recovered_event() -> None:
    def degraded(status: str, reason: str) -> dict[str, Any]:
        return {"conditions": [{"type": "Degraded", "status": status, "reason": reason, "message": "why"}]}

    cleared = status_events(
        StatusMemory.from_status(degraded("True", "CrashLoopBackOff")), degraded("False", "AsExpected"), ""
    )
    assert [(e.type, e.reason, e.message) for e in cleared] == [
        ("Normal", Reason.RECOVERED, "no longer degraded (was CrashLoopBackOff)")
    ]
    still = StatusMemory.from_status(degraded("False", "AsExpected"))
    assert status_events(still, degraded("False", "AsExpected"), "") == []
    assert status_events(StatusMemory.from_status({}), degraded("False", "AsExpected"), "") == []


def test_the_first_size_of_a_new_deployment_is_said_to_be_its_initial_size() -> None:
    # Regression: the first Scaled Event read "desired active replicas 0 -> 2: metrics missing (...):
    # holding 2", a scale-up from a fleet that never was.
    dep = deployment(scaling={"mode": "Auto", "minReplicas": 2, "maxReplicas": 4})
    first = plan(dep, Observation(T0, compile=compiled(dep)), DeploymentMemory(), {})
    events = status_events(StatusMemory.from_status({}), first.status, first.scale_reason)
    [scaled] = [e for e in events if e.reason == Reason.SCALED]
    assert scaled.message.startswith("initial size: 2 desired active replicas (metrics missing")
    assert first.status["lastScaleReason"].startswith("initial size: ")
    # A later change is a change.
    later = plan(
        deployment(scaling={"mode": "Manual", "replicas": 3}),
        Observation(T0, compile=compiled(dep)),
        first.memory,
        first.status,
    )
    [scaled] = status_events(StatusMemory.from_status(first.status), later.status, later.scale_reason)
    assert scaled.message == "desired active replicas 2 -> 3: manual: replicas 3"
    assert later.status["lastScaleReason"] == "manual: replicas 3"


def test_manual_mode_without_replicas_says_minreplicas_runs_not_that_replicas_set_it() -> None:
    # Regression: "replicas set by spec.scaling.replicas: 2" with the field unset, while the scale
    # subresource (kubectl scale --current-replicas) read it as 0.
    dep = deployment(scaling={"mode": "Manual", "minReplicas": 2, "maxReplicas": 4}, warmPool={"mode": "Off"})
    result = plan(dep, Observation(T0, compile=compiled(dep)), DeploymentMemory(), {})
    assert result.status["desiredReplicas"] == 2
    scaling = next(c for c in result.status["conditions"] if c["type"] == "ScalingActive")
    assert (scaling["reason"], scaling["message"]) == (
        "ManualScaling",
        "spec.scaling.replicas is not set: minReplicas 2 (the scale subresource reads 0 until replicas is set)",
    )
    [scaled] = status_events(StatusMemory.from_status({}), result.status, result.scale_reason)
    assert scaled.message == (
        "initial size: 2 desired active replicas (manual: spec.scaling.replicas is not set: minReplicas 2)"
    )
    # Set, it is what the message names.
    set_ = plan(deployment(**MANUAL), Observation(T0, compile=compiled(dep)), DeploymentMemory(), {})
    scaling = next(c for c in set_.status["conditions"] if c["type"] == "ScalingActive")
    assert scaling["message"] == "replicas set by spec.scaling.replicas: 2"
    # Above maxReplicas (an object stored before the CRD refused it): bounded, and said so.
    over = deployment(scaling={"mode": "Manual", "replicas": 1, "maxReplicas": 2}, warmPool={"mode": "Off"})
    over.spec.scaling.replicas = 7
    result = plan(over, Observation(T0, compile=compiled(over)), DeploymentMemory(), {})
    scaling = next(c for c in result.status["conditions"] if c["type"] == "ScalingActive")
    assert scaling["message"] == "replicas set by spec.scaling.replicas: 7, bounded to maxReplicas 2"
    assert result.scale_reason == "manual: replicas 7, bounded to maxReplicas 2"


def test_the_operators_daemonset_allowance_decides_what_fits_a_node() -> None:
    # The allowance is the operator's setting (neuronfleet run --daemonset-headroom-cpu): a plan
    # that ignored it sized replicas for the default 500m whatever the cluster's DaemonSets take.
    dep = deployment(**MANUAL)
    observation = Observation(T0, compile=compiled(dep))
    fits = plan_reconcile(
        dep, observation, DeploymentMemory(), StatusMemory.from_status({}), FleetPolicy(), one_template
    )
    assert fits.status["placement"]["instanceType"] == "inf2.xlarge"
    whole_node = Headroom(cpu_millis=3920, memory_mib=512)  # an inf2.xlarge's allocatable CPU
    crowded = plan_reconcile(
        dep, observation, DeploymentMemory(), StatusMemory.from_status({}), FleetPolicy(), one_template, whole_node
    )
    scheduled = condition_of(crowded.status, "Scheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", Reason.NO_INSTANCE_TYPE_FITS)
    assert not any(isinstance(a, CreatePod) for a in crowded.actions)


def test_replicas_needing_contiguous_cores_without_a_neuron_scheduler_are_warned_of_in_scheduled() -> None:
    dep = deployment(
        scaling={"mode": "Manual", "replicas": 2, "minReplicas": 0},
        warmPool={"mode": "Off"},
        model={**deployment().spec.model.model_dump(by_alias=True, exclude_none=True), "neuronCoresPerReplica": 4},
        placement={"instanceTypes": ["inf2.24xlarge"]},
    )

    def scheduled(default_scheduler: str | None) -> dict[str, Any]:
        status: dict[str, Any] = {}
        pods: tuple[Any, ...] = ()
        result: Any = None
        for second in (10, 20):
            observation = Observation(T0 + timedelta(seconds=second), pods=pods, compile=compiled(dep))
            result = plan_reconcile(
                dep,
                observation,
                DeploymentMemory() if result is None else result.memory,
                StatusMemory.from_status(status),
                FleetPolicy(),
                one_template,
                default_scheduler_name=default_scheduler,
            )
            status = result.status
            after = apply_actions(list(pods), result.actions, observation.now)
            pods = tuple(replace(p, ready=True, phase="Running", node="n1", ready_at=observation.now) for p in after)
        return condition_of(status, "Scheduled")

    warned = scheduled(None)
    assert warned["status"] == "True"
    assert "warning: replicas of 4 NeuronCores on inf2.24xlarge" in warned["message"]
    assert "need the Neuron scheduler extension" in warned["message"]
    assert "warning" not in scheduled("my-scheduler")["message"]


def test_a_fleet_is_not_moved_to_a_cheaper_type_in_the_middle_of_a_scale_up_but_once_its_size_holds() -> None:
    # 8-core replicas, one warm: 1 active + 1 warm run on two inf2.24xlarge; 2 active + 1 warm cost
    # a third less on one inf2.48xlarge. Moving then was a new template: the warm pod the scale-up
    # was to promote was deleted as outdated, and 3 pods waited for nodes of the other type.
    manifest = yaml.safe_load((REPO / "examples" / "llama2-7b-chat.yaml").read_text())
    manifest["metadata"]["generation"] = 1
    manifest["spec"]["scaling"] = {"mode": "Manual", "replicas": 1, "minReplicas": 0}
    manifest["spec"]["warmPool"] = {"mode": "Fixed", "pods": 1, "nodePlaceholders": 0}
    dep = InferenceDeployment.model_validate(manifest)
    compile = compiled(dep)
    result, pods, _ = rounds(dep, compile, (), DeploymentMemory(), {}, template_per_type)
    assert result.status["placement"]["instanceType"] == "inf2.24xlarge"
    assert sorted(p.role for p in pods) == ["active", "warm"]
    warm_pod = next(p.name for p in pods if p.role == "warm")

    bigger = dep.model_copy(deep=True)
    bigger.spec.scaling.replicas = 2
    now = T0 + timedelta(hours=1)
    up = plan(bigger, Observation(now, pods=pods, compile=compile), result.memory, result.status, template_per_type)
    assert up.status["placement"]["instanceType"] == "inf2.24xlarge"
    assert "kept the current type while the fleet's size changes" in up.status["placement"]["reason"]
    assert Relabel(warm_pod, "active", "warm", "promoted: the fleet needs it active") in up.actions
    assert not any(isinstance(a, DeletePod) for a in up.actions)

    # Settled: the same size 29 minutes on, it stays; 30 minutes on, it moves (a warm-then-swap rollout).
    after = tuple(
        replace(p, ready=True, phase="Running", node="n1", ready_at=now)
        for p in apply_actions(list(pods), up.actions, now)
    )
    for minutes, expected in ((29, "inf2.24xlarge"), (30, "inf2.48xlarge")):
        later = now + timedelta(minutes=minutes)
        held = plan(bigger, Observation(later, pods=after, compile=compile), up.memory, up.status, template_per_type)
        assert held.status["placement"]["instanceType"] == expected, minutes


@pytest.mark.parametrize("warm_pool", [{"mode": "Off"}, {"mode": "Auto", "maxPods": 4}])
def test_a_steady_fleet_writes_its_status_with_its_checkpoints_not_on_every_decision(warm_pool: Any) -> None:
    # The ScalingActive message lists each signal's value, which jitters with the traffic (and the
    # trend signal comes and goes with the line's slope): rewritten on every decision, a fleet whose
    # size never changed wrote its status ~60 times an hour. An Auto warm pool's reason (the
    # history's samples and span) did the same, ~150 times an hour.
    rng = random.Random(1)
    dep = deployment(
        scaling={"mode": "Auto", "minReplicas": 1, "maxReplicas": 40, "intervalSeconds": 15}, warmPool=warm_pool
    )
    status: dict[str, Any]
    pods: tuple[PodView, ...]
    memory, status, pods = DeploymentMemory(), {}, ()
    writes, messages = 0, set()
    for tick in range(480):  # two hours of decisions; the second is counted
        # Decisions come at the first reconcile at least intervalSeconds after the last: 15 or 17 s.
        now = T0 + timedelta(seconds=16 * tick + tick % 2)
        rate = 800 * rng.uniform(0.97, 1.03)
        snapshot = MetricSnapshot(
            time=now.timestamp(),
            queue_depth=rng.choice([0.0, 1.0, 2.0]),
            in_flight=3.0,
            arrival_rate=rate,
            utilization=0.5,
            arrival_peak=rate * 1.1,
        )
        result = plan(dep, Observation(now, pods=pods, compile=compiled(dep), metrics=snapshot), memory, status)
        pods = tuple(
            replace(p, ready=True, phase="Running", node="n1") for p in apply_actions(list(pods), result.actions, now)
        )
        if tick >= 240:
            writes += status_patch(status, result.status) is not None
            messages.add(condition_of(result.status, "ScalingActive")["message"])
        memory, status = result.memory, result.status
    assert result.status["desiredReplicas"] == status["desiredReplicas"]
    assert writes <= 12 + 3, writes  # a checkpoint every 5 minutes, and what else changed
    assert 1 < len(messages) <= 13  # the figures are renewed, with the checkpoints

    # A decision that changes the count is said at once.
    busier = MetricSnapshot(
        time=(now := now + timedelta(seconds=17)).timestamp(),
        queue_depth=0.0,
        in_flight=3.0,
        arrival_rate=4000.0,
        utilization=0.5,
        arrival_peak=4400.0,
    )
    up = plan(dep, Observation(now, pods=pods, compile=compiled(dep), metrics=busier), memory, status)
    assert up.status["desiredReplicas"] > status["desiredReplicas"]
    assert condition_of(up.status, "ScalingActive")["message"] != condition_of(status, "ScalingActive")["message"]


def _steady_hour(dep: InferenceDeployment, compile: CompileObservation, memory: Any, status: dict[str, Any]) -> Any:
    """An hour of steady traffic, decided every 15 s; the last plan."""
    pods: tuple[Any, ...] = ()
    result: Any = None
    for tick in range(240):
        now = T0 + timedelta(seconds=15 * tick)
        snapshot = MetricSnapshot(
            time=now.timestamp(), queue_depth=0.0, in_flight=3.0, arrival_rate=800.0, utilization=0.5
        )
        result = plan(dep, Observation(now, pods=pods, compile=compile, metrics=snapshot), memory, status)
        pods = tuple(
            replace(p, ready=True, phase="Running", node="n1") for p in apply_actions(list(pods), result.actions, now)
        )
        memory, status = result.memory, result.status
    return result


def test_a_service_rate_learned_on_one_revision_is_not_kept_nor_resumed_on_another() -> None:
    # A new artifact (another model, other buckets) serves at another rate: a rate kept from the old
    # one sized a model twice as slow at half its need for a day.
    dep = deployment(scaling={"mode": "Auto", "minReplicas": 1, "maxReplicas": 40, "intervalSeconds": 15})
    old = compiled(dep)
    learned = _steady_hour(dep, old, DeploymentMemory(), {})
    section = learned.status["autoscaler"]
    assert section["serviceRatePerReplica"] > 0
    assert section["serviceRateKey"].startswith(f"{old.stored.revision} on inf2.xlarge")  # type: ignore[union-attr]

    new = replace(old, stored=StoredArtifact("e" * 64, "/store/eeee", "f" * 64, "cpu"))
    later = T0 + timedelta(hours=1, seconds=15)
    snapshot = MetricSnapshot(
        time=later.timestamp(), queue_depth=0.0, in_flight=3.0, arrival_rate=800.0, utilization=0.5
    )
    # The same operator, and one restarted from the status: neither sizes the new revision by the old rate.
    for memory in (learned.memory, DeploymentMemory()):
        result = plan(dep, Observation(later, compile=new, metrics=snapshot), memory, learned.status)
        assert result.memory.scaling_state.service_rate is None
        assert "autoscaler" not in result.status


def test_pods_are_pinned_to_the_recorded_manifest_and_roll_when_it_is_republished() -> None:
    dep = deployment(**MANUAL)
    first = plan(dep, Observation(T0, compile=compiled(dep)), DeploymentMemory(), {})
    assert [a.revision.artifact.sha256 for a in first.actions if isinstance(a, CreatePod)] == ["d" * 64] * 2
    assert first.status["artifact"]["sha256"] == "d" * 64
    pods = tuple(replace(p, ready=True, phase="Running") for p in apply_actions([], first.actions, T0))
    # The compile Job republished the artifact under the same cache key: another manifest recorded.
    republished = compiled(dep, stored=StoredArtifact("c" * 64, "/store/cccc", "e" * 64, "cpu"))
    later = Observation(T0 + timedelta(seconds=10), pods=pods, compile=republished)
    second = plan(dep, later, first.memory, first.status)
    creates = [a for a in second.actions if isinstance(a, CreatePod)]
    assert [(a.role, a.revision.artifact.sha256) for a in creates] == [("warm", "e" * 64)] * 2
    assert second.status["artifact"]["sha256"] == "e" * 64


def test_a_pod_refusing_the_manifest_it_is_pinned_to_calls_for_a_fresh_store_check() -> None:
    stored = StoredArtifact("c" * 64, "/store/cccc", "d" * 64, "cpu")
    refused = PodView("p0", "warm", "cccccccccc", "t", phase="Running", artifact_sha256="d" * 64, last_exit_code=4)
    assert manifest_refused([refused], stored)
    assert not manifest_refused([replace(refused, last_exit_code=2)], stored)  # another failure
    assert not manifest_refused([replace(refused, artifact_sha256="e" * 64)], stored)  # pinned to another
    assert not manifest_refused([replace(refused, ready=True)], stored)  # serving again (lastState lingers)
    assert not manifest_refused([replace(refused, deleting=True)], stored)
    assert not manifest_refused([refused], None)


def test_pods_held_for_a_replaced_artifact_say_it_was_replaced_not_gone() -> None:
    dep = deployment(**MANUAL)
    serving = StoredArtifact("c" * 64, "/store/cccc", "d" * 64, "cpu")
    status = plan(dep, Observation(T0, compile=compiled(dep)), DeploymentMemory(), {}).status
    for record, why in (
        (DanglingRecord(serving, None), "the artifact of revision cccccccccc is gone from the store"),
        (
            DanglingRecord(serving, "e" * 64),
            "the artifact of revision cccccccccc was replaced in the store (another manifest)",
        ),
        # The recorded manifest is there, but a file it lists was deleted.
        (
            DanglingRecord(serving, "d" * 64, ("model-b1-s8.pt: missing",)),
            "files of the artifact of revision cccccccccc are gone from the store",
        ),
    ):
        dangling = compiled(dep, stored=None, dangling=record, job_phase="running")
        result = plan(dep, Observation(T0, compile=dangling), DeploymentMemory(), status)
        assert not [a for a in result.actions if isinstance(a, CreatePod)]
        available = next(c for c in result.status["conditions"] if c["type"] == "Available")
        assert f"2 new active pods held: {why}" in available["message"], available


def test_the_placement_counts_the_nodes_and_cost_of_every_pod_it_creates_placeholders_included() -> None:
    # 2 active + 1 warm + 2 placeholders of 1 core, 2 to an inf2.xlarge: 3 nodes. The placeholders
    # were left out: 2 nodes ($1.52/h) were reported for the 5 pods created.
    dep = deployment(
        scaling={"mode": "Manual", "replicas": 2, "minReplicas": 0},
        warmPool={"mode": "Fixed", "pods": 1, "nodePlaceholders": 2},
    )
    result = plan(dep, Observation(T0, compile=compiled(dep)), DeploymentMemory(), {})
    created = [a for a in result.actions if isinstance(a, (CreatePod, CreatePlaceholder))]
    assert len(created) == 5 and sum(isinstance(a, CreatePlaceholder) for a in created) == 2
    placement = result.status["placement"]
    assert (placement["replicasPerNode"], placement["nodes"]) == (2, 3)
    assert placement["usdPerHour"] == pytest.approx(3 * 0.7582)
    assert "3 node(s) for 5 pod(s)" in placement["reason"]


def test_a_fleet_scaled_to_zero_takes_no_node_unless_it_keeps_standby() -> None:
    # 0 replicas and no standby were reported as 1 node at $0.76/h.
    dep = deployment(scaling={"mode": "Manual", "replicas": 0, "minReplicas": 0}, warmPool={"mode": "Off"})
    result = plan(dep, Observation(T0, compile=compiled(dep)), DeploymentMemory(), {})
    assert result.actions == ()
    placement = result.status["placement"]
    # The type stays known (the one a first replica goes on, and the sticky type).
    assert (placement["instanceType"], placement["nodes"], placement["usdPerHour"]) == ("inf2.xlarge", 0, 0.0)
    assert placement["reason"].startswith("no pod to place: 0 nodes, $0.00/h")
    # A placeholder alone holds a node, and is paid for.
    dep = deployment(
        scaling={"mode": "Manual", "replicas": 0, "minReplicas": 0},
        warmPool={"mode": "Fixed", "pods": 0, "nodePlaceholders": 1},
    )
    result = plan(dep, Observation(T0, compile=compiled(dep)), DeploymentMemory(), {})
    assert [type(a) for a in result.actions] == [CreatePlaceholder]
    assert (result.status["placement"]["nodes"], result.status["placement"]["usdPerHour"]) == (1, 0.7582)


def test_placeholders_are_held_and_not_priced_while_no_artifact_can_be_compiled() -> None:
    # Spare nodes are kept for a compile under way (they are wanted once it ends), but not for a
    # spec that cannot compile: nothing would ever run on them, and each costs an Inf2 node.
    dep = deployment(
        scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0},
        warmPool={"mode": "Fixed", "pods": 1, "nodePlaceholders": 2},
    )
    compiling = compiled(dep, stored=None, job_phase="running")
    first = plan(dep, Observation(T0, compile=compiling), DeploymentMemory(), {})
    assert [type(a) for a in first.actions] == [CreatePlaceholder, CreatePlaceholder]
    per_node = first.status["placement"]["replicasPerNode"]
    node_usd = first.status["placement"]["usdPerHour"] / first.status["placement"]["nodes"]
    assert first.status["placement"]["nodes"] == -(-4 // per_node)  # 1 active, 1 warm, 2 placeholders
    pods = tuple(apply_actions([], first.actions, T0))

    unreadable = compiled(dep, stored=None, source_problem="no objects under s3://acme-models/gone/")
    failed = compiled(dep, stored=None, job_phase="failed", job_message="neuronx-cc: OOMKilled")
    missing = compiled(dep, stored=None, job_phase="succeeded")
    for blocked in (unreadable, failed, missing):
        fresh = plan(dep, Observation(T0, compile=blocked), DeploymentMemory(), {})
        assert fresh.actions == ()
        # The ones made while it compiled are deleted: nothing will run on their nodes.
        result = plan(dep, Observation(T0, pods=pods, compile=blocked), first.memory, first.status)
        assert sorted(type(a).__name__ for a in result.actions) == ["DeletePlaceholder", "DeletePlaceholder"]
        for status in (fresh.status, result.status):
            placement = status["placement"]
            # The active and the warm pod still count: they are wanted once the spec can compile.
            assert placement["nodes"] == -(-2 // per_node) < first.status["placement"]["nodes"]
            assert placement["usdPerHour"] == pytest.approx(placement["nodes"] * node_usd)
            warm = next(c for c in status["conditions"] if c["type"] == "WarmPoolReady")
            assert warm["reason"] == "WarmPoolFilling"
            assert "2 placeholders held: no artifact to serve: " in warm["message"], warm["message"]
            assert status["warmPool"]["desiredPlaceholders"] == 2  # the pool still wants them once it can


def test_placeholders_stay_while_a_compile_job_runs_whatever_the_source_listing_said() -> None:
    # A listing that failed once (access revoked for a moment, an S3 error read as a denial) while a
    # first compile ran deleted every placeholder, and the next round made them again: a flap of
    # spare Inf2 nodes, and status.placement jumping between the two sizes. The Job runs on (a round
    # without the listing supersedes nothing): its artifact comes, and the spare nodes are wanted then.
    dep = deployment(
        scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0},
        warmPool={"mode": "Fixed", "pods": 0, "nodePlaceholders": 2},
    )
    running = compiled(dep, stored=None, job_phase="running", job_name="job-fp", running_jobs=("job-fp",))
    unlisted = replace(
        running,
        request=compile_request(dep.spec, "/store", None),
        job_phase="absent",
        job_name="job-nofp",
        source_problem="AccessDenied: Access Denied",
    )
    first = plan(dep, Observation(T0, compile=running), DeploymentMemory(), {})
    assert [type(a) for a in first.actions] == [CreatePlaceholder, CreatePlaceholder]
    pods = tuple(apply_actions([], first.actions, T0))
    memory, status = first.memory, first.status
    for index, observed in enumerate((unlisted, running, unlisted), start=1):
        result = plan(dep, Observation(T0 + timedelta(seconds=30 * index), pods=pods, compile=observed), memory, status)
        assert result.actions == (), (index, result.actions)
        assert result.compile_actions == ()  # the running Job is not superseded either
        assert result.status["placement"] == first.status["placement"]
        warm = next(c for c in result.status["conditions"] if c["type"] == "WarmPoolReady")
        assert "held" not in warm["message"], warm["message"]
        memory, status = result.memory, result.status
    # Once no Job runs, the unreadable source holds them as before.
    ended = replace(unlisted, running_jobs=())
    result = plan(dep, Observation(T0 + timedelta(seconds=120), pods=pods, compile=ended), memory, status)
    assert sorted(type(a).__name__ for a in result.actions) == ["DeletePlaceholder", "DeletePlaceholder"]
    # A running Job whose pod the API server refuses makes no artifact: that holds them too.
    refused = replace(running, pod_refused=Refusal(Reason.SERVICE_ACCOUNT_MISSING, "no account"))
    result = plan(dep, Observation(T0 + timedelta(seconds=150), pods=pods, compile=refused), memory, status)
    assert sorted(type(a).__name__ for a in result.actions) == ["DeletePlaceholder", "DeletePlaceholder"]


# ---------------------------------------------------------------------------- RolloutStalled's clock

E_ARTIFACT = StoredArtifact("e" * 64, "/store/eeee", "f" * 64, "cpu")
STALLED = "has not become ready within the progress deadline"


def degraded_message(status: dict[str, Any]) -> str:
    return str(condition_of(status, "Degraded").get("message") or "")


def test_a_rollout_whose_new_pods_are_all_refused_is_stalled_after_the_progress_deadline() -> None:
    # Regression: with no pod of the new revision ever created (a quota the old pods fill refuses
    # every one), the rollout had no start and was never reported stalled, however long it lasted.
    dep = deployment(**MANUAL)  # progressDeadlineSeconds: 1800 (the default)
    steady, pods, _ = rounds(dep, compiled(dep), (), DeploymentMemory(), {})
    memory, status = steady.memory, steady.status
    new = compiled(dep, stored=E_ARTIFACT)
    start = T0 + timedelta(hours=3)
    refusal = Refusal(Reason.POD_CREATION_REFUSED, 'pods "x" is forbidden: exceeded quota: pods')
    said = {}
    for seconds in (0, 15, 600, 1200, 1800, 1801, 1900):
        observation = Observation(start + timedelta(seconds=seconds), pods=pods, compile=new)
        result = plan(dep, observation, memory, status)
        assert any(isinstance(a, CreatePod) for a in result.actions)  # each refused: nothing changes
        status, memory = status_after_apply(result, dep, StatusMemory.from_status(status), (refusal,), (), observation)
        said[seconds] = STALLED in degraded_message(status)
    assert said == {0: False, 15: False, 600: False, 1200: False, 1800: False, 1801: True, 1900: True}
    assert condition_of(status, "Degraded")["reason"] == "PodCreationRefused"  # the first trouble said


def test_a_rollback_to_pods_made_long_ago_is_not_stalled_at_once() -> None:
    # Regression: a spec reverted to the revision whose old standby the rollout kept has "current"
    # pods created and ready hours ago: the rollout back read as past its deadline on its first
    # reconcile (Degraded RolloutStalled, a Warning Event) although it had just begun.
    dep = deployment(**{**MANUAL, "warmPool": {"mode": "Fixed", "pods": 1, "nodePlaceholders": 0}})
    steady, pods, _ = rounds(dep, compiled(dep), (), DeploymentMemory(), {})
    (old_warm,) = [p for p in pods if p.role == "warm"]
    rolled = T0 + timedelta(hours=5)
    new_pod = PodView(
        "bert-new",
        "active",
        revision="eeeeeeeeee",
        template="t" * 10,
        phase="Running",
        ready=True,
        created_at=rolled,
        ready_at=rolled + timedelta(minutes=5),
        node="n2",
        artifact_sha256="f" * 64,
    )
    loading = replace(new_pod, name="bert-new-w", role="warm", ready=False, ready_at=None)
    # Rolled out to the new revision, whose warm pod is still loading: the old one is kept as standby.
    on_new = (new_pod, replace(new_pod, name="bert-new-1"), loading, old_warm)
    during = plan(
        dep,
        Observation(rolled + timedelta(minutes=10), pods=on_new, compile=compiled(dep, stored=E_ARTIFACT)),
        steady.memory,
        steady.status,
    )
    assert STALLED not in degraded_message(during.status)
    # The spec goes back: the old standby (made hours ago) is current again, the new pods outdated.
    back = plan(
        dep,
        Observation(rolled + timedelta(minutes=11), pods=on_new, compile=compiled(dep)),
        during.memory,
        during.status,
    )
    assert any(isinstance(a, Relabel) for a in back.actions)  # rolling back: the old pod is promoted
    assert STALLED not in degraded_message(back.status), degraded_message(back.status)


def test_the_rollout_start_is_written_once_kept_while_it_lasts_and_removed_when_it_ends() -> None:
    dep = deployment(**MANUAL)
    steady, pods, _ = rounds(dep, compiled(dep), (), DeploymentMemory(), {})
    assert "rollout" not in steady.status
    new = compiled(dep, stored=E_ARTIFACT)
    start = T0 + timedelta(hours=1, microseconds=250_000)
    first = plan(dep, Observation(start, pods=pods, compile=new), steady.memory, steady.status)
    target = first.status["rollout"]["target"]
    assert first.status["rollout"] == {"target": target, "startedAt": "2026-11-30T13:00:00Z"}
    assert any(p.name.startswith(f"{dep.name}-{target}-") for p in apply_actions(pods, first.actions, start))
    # The new pods load (not ready yet): reconciles meanwhile write nothing.
    loading = tuple(apply_actions(list(pods), first.actions, start))
    later = plan(dep, Observation(start + timedelta(seconds=30), pods=loading, compile=new), first.memory, first.status)
    assert later.actions == ()
    again = plan(dep, Observation(start + timedelta(seconds=45), pods=loading, compile=new), later.memory, later.status)
    assert later.status["rollout"] == first.status["rollout"]
    assert status_patch(later.status, again.status) is None
    # The new pods load; the rollout goes on with the same start (and, once they are ready, the
    # progress they made) until it completes, when the section goes (an explicit null in the patch).
    now = start + timedelta(minutes=5)
    pods = tuple(replace(p, ready=True, phase="Running", node="n1", ready_at=now) for p in loading)
    written: list[Any]
    result, written, patches = again, [], []
    while result.actions or "rollout" in result.status:
        assert len(written) < 10, "the rollout did not complete"
        now += timedelta(seconds=10)
        before = result.status
        result = plan(dep, Observation(now, pods=pods, compile=new), result.memory, before)
        written.append(result.status.get("rollout"))
        patches.append(status_patch(before, result.status) or {})
        after = apply_actions(list(pods), result.actions, now)
        pods = tuple(replace(p, ready=True, phase="Running", node="n1", in_flight=0) for p in after)
    ended = written.index(None)
    progressed = {**first.status["rollout"], "progressedAt": "2026-11-30T13:05:00Z"}
    assert ended > 0 and written == [progressed] * ended + [None] * (len(written) - ended)
    assert patches[ended]["rollout"] is None
    # The progress is written once, by the first reconcile that sees the new pods ready.
    assert patches[0]["rollout"] == {"progressedAt": "2026-11-30T13:05:00Z"}
    assert all("rollout" not in patch for patch in patches[1:ended] + patches[ended + 1 :])
    assert {p.revision for p in pods} == {"eeeeeeeeee"}


def test_an_operator_upgraded_mid_rollout_starts_the_rollouts_clock_at_its_first_reconcile() -> None:
    # A status written before status.rollout existed: the pods' times are not trusted (they would
    # make a rollback stalled at once); the first reconcile is the start, so a rollout stalled for
    # hours is reported one progress deadline after the upgrade, and never falsely at once.
    dep = deployment(**MANUAL)
    steady, pods, _ = rounds(dep, compiled(dep), (), DeploymentMemory(), {})
    new = compiled(dep, stored=E_ARTIFACT)
    began = T0 + timedelta(hours=1)
    first = plan(dep, Observation(began, pods=pods, compile=new), steady.memory, steady.status)
    stuck = tuple(apply_actions(list(pods), first.actions, began))  # the new pods never load
    upgraded = began + timedelta(hours=2)
    old_status = {key: value for key, value in first.status.items() if key != "rollout"}
    result = plan(dep, Observation(upgraded, pods=stuck, compile=new), DeploymentMemory(), old_status)
    assert result.status["rollout"]["startedAt"] == "2026-11-30T15:00:00Z"
    assert STALLED not in degraded_message(result.status)
    memory, status = result.memory, result.status
    for seconds, stalled in ((1800, False), (1801, True)):
        result = plan(dep, Observation(upgraded + timedelta(seconds=seconds), pods=stuck, compile=new), memory, status)
        assert (STALLED in degraded_message(result.status)) is stalled, seconds
        assert result.status["rollout"] == status["rollout"]
        memory, status = result.memory, result.status


@pytest.mark.parametrize(
    "blip",
    [
        pytest.param(
            {"compile": None, "compile_error": "cannot read s3://store/requests/x.json: SlowDown"}, id="store"
        ),
        pytest.param({"compile_error": "compile Jobs: 503 Service Unavailable"}, id="jobs-list"),
        pytest.param({"source_problem": "cannot list s3://acme-models/bert/: AccessDenied"}, id="source"),
    ],
)
def test_a_failed_read_does_not_forget_a_failed_compile(blip: dict[str, Any]) -> None:
    """status.compileFailure is what keeps a failed compile from running again once Kubernetes has
    deleted its Job (a day later): one round that could not read the store, the compile Jobs or the
    model source knows nothing new of that attempt, and wrote the failure as null, so the next round
    started the failed compile again by itself."""
    dep = deployment(**MANUAL)
    failed = compiled(dep, stored=None, job_phase="failed", job_message="BackoffLimitExceeded: exit 1")
    first = plan(dep, Observation(T0, compile=failed), DeploymentMemory(), {})
    assert first.status["compileFailure"]
    gone = replace(failed, job_phase="absent", job_message="")
    second = plan(dep, Observation(T0 + timedelta(days=1), compile=gone), first.memory, first.status)
    assert second.compile_actions == () and second.status["compileFailure"] == first.status["compileFailure"]

    at = T0 + timedelta(days=1, seconds=10)
    source_problem = blip.pop("source_problem", None)
    if source_problem is not None:
        # The listing failed: the request key lacks the fingerprint (another attempt), no Job either way.
        blip["compile"] = replace(
            gone, request=compile_request(dep.spec, "/store", None), source_problem=source_problem
        )
    else:
        blip.setdefault("compile", gone)
    third = plan(dep, Observation(at, **blip), second.memory, second.status)
    assert third.status.get("compileFailure") == first.status["compileFailure"]
    assert "compileFailure" not in (status_patch(second.status, third.status) or {})

    fourth = plan(dep, Observation(at + timedelta(seconds=10), compile=gone), third.memory, third.status)
    assert not any(isinstance(a, StartCompileJob) for a in fourth.compile_actions), "the failed compile ran again"
    assert fourth.status.get("compileFailure") == first.status["compileFailure"]


def test_the_status_says_which_image_compiled_the_artifact_served() -> None:
    """status.artifact.compileImage: what an operator reads back to take a record under an older
    request key for this image (tests/unit/test_compile_image_upgrade.py); kept for the artifact still
    served while another image compiles."""
    dep = deployment(**MANUAL)
    observed = compiled(dep)
    first = plan(dep, Observation(T0, compile=observed), DeploymentMemory(), {})
    assert first.status["artifact"]["compileImage"] == observed.request.image
    other = compile_request(dep.spec, "/store", "fp", "registry.example/neuronserve:2-neuron")
    compiling = replace(observed, request=other, stored=None, job_phase="running")
    second = plan(dep, Observation(T0 + timedelta(seconds=10), compile=compiling), first.memory, first.status)
    assert second.status["artifact"] == first.status["artifact"]


def test_a_source_unreadable_after_its_compile_keeps_a_ready_fleet_ready() -> None:
    """The observation found the spec's artifact by the fingerprint the status keeps (the source can
    no longer be listed): served, Compiled and Ready stay True, and the Compiled message says the
    source cannot be read (a change to it would not be seen)."""
    dep = deployment(**MANUAL)
    ok = compiled(dep)
    first = plan(dep, Observation(T0, compile=ok), DeploymentMemory(), {})
    assert first.status["artifact"]["sourceFingerprint"] == "fp"
    unreadable = replace(ok, source_problem="no objects under s3://acme-models/bert/")
    second = plan(dep, Observation(T0 + timedelta(seconds=10), compile=unreadable), first.memory, first.status)
    compiled_condition = next(c for c in second.status["conditions"] if c["type"] == "Compiled")
    assert (compiled_condition["status"], compiled_condition["reason"]) == ("True", "ArtifactReady")
    assert "cannot be read" in compiled_condition["message"]
    assert second.status["artifact"] == first.status["artifact"]
    assert not any(isinstance(a, StartCompileJob) for a in second.compile_actions)


#: What the metrics reader says of a snapshot read with the utilization override refused (a typo).
REFUSED_UTILIZATION = (
    "signals missing: utilization; "
    "spec.scaling.metrics.utilization: Prometheus refused the query: 1:42: parse error: unclosed left brace"
)


def test_a_query_refused_while_other_signals_are_read_is_named_in_scaling_active_and_warned_once() -> None:
    # A reviewer's reproduction: the typo costs the busy ratio, which the autoscaler needs to measure
    # the service rate and, until then, to scale down; ScalingActive said only "no scale-down:
    # utilization missing", for good, and no Event told of it.
    dep = deployment(scaling={"mode": "Auto", "minReplicas": 1, "maxReplicas": 10, "intervalSeconds": 15})
    memory, status = DeploymentMemory(), {"desiredReplicas": 8}
    warnings, messages = [], []
    for second in range(0, 24 * 3600, 15 * 40):  # a day of decisions, one every 10 minutes looked at
        now = T0 + timedelta(seconds=second)
        snapshot = MetricSnapshot(time=now.timestamp(), queue_depth=0.0, in_flight=4.0, arrival_rate=10.0)
        observation = Observation(now, compile=compiled(dep), metrics=snapshot, metrics_problem=REFUSED_UTILIZATION)
        result = plan(dep, observation, memory, status)
        events = status_events(StatusMemory.from_status(status), result.status, result.scale_reason)
        warnings += [e for e in events if e.type == "Warning"]
        memory, status = result.memory, result.status
        messages.append(condition_of(status, "ScalingActive"))
    # The fleet is held (a missing signal never shrinks it), and the status says why, naming the field.
    assert status["desiredReplicas"] == 8
    assert all(c["reason"] == "MetricsRead" for c in messages)
    assert all("spec.scaling.metrics.utilization: Prometheus refused the query" in c["message"] for c in messages)
    assert "no scale-down: utilization missing" in messages[-1]["message"]
    # One Warning for the day, not one per decision.
    assert [e.reason for e in warnings] == [Reason.METRICS_QUERY_REFUSED]
    assert "spec.scaling.metrics.utilization: Prometheus refused the query" in warnings[0].message

    # Fixed: the message drops it, and nothing more is posted; refused again later: warned again.
    def round_at(second: int, problem: str) -> list[Any]:
        nonlocal memory, status
        now = T0 + timedelta(days=1, seconds=second)
        snapshot = MetricSnapshot(now.timestamp(), queue_depth=0.0, in_flight=4.0, arrival_rate=10.0, utilization=0.1)
        if "utilization" in problem:
            snapshot = replace(snapshot, utilization=None)
        observation = Observation(now, compile=compiled(dep), metrics=snapshot, metrics_problem=problem)
        result = plan(dep, observation, memory, status)
        events = status_events(StatusMemory.from_status(status), result.status, result.scale_reason)
        memory, status = result.memory, result.status
        return [e.reason for e in events if e.type == "Warning"]

    assert round_at(0, "metrics read") == []
    assert "refused" not in condition_of(status, "ScalingActive")["message"]
    assert round_at(15, "metrics read") == []
    assert round_at(30, REFUSED_UTILIZATION) == [Reason.METRICS_QUERY_REFUSED]
    # Another field refused is news: warned of too.
    other = REFUSED_UTILIZATION.replace("utilization: Prometheus", "queueDepth: Prometheus")
    assert round_at(45, other) == [Reason.METRICS_QUERY_REFUSED]
    assert round_at(60, other) == []


def test_a_refusal_that_holds_the_autoscaler_is_warned_of_once_as_metrics_unavailable() -> None:
    # Every signal refused: no snapshot, ScalingActive MetricsUnavailable (its Warning names the
    # fields); no second Warning for the same refusal, nor when other signals come back with it.
    dep = deployment(scaling={"mode": "Auto", "minReplicas": 1, "maxReplicas": 10, "intervalSeconds": 15})
    refused = REFUSED_UTILIZATION.partition("; ")[2]
    memory, status, warnings = DeploymentMemory(), {"desiredReplicas": 3}, []
    for second, snapshot in ((0, None), (15, None), (30, MetricSnapshot(0, queue_depth=0.0, in_flight=4.0))):
        now = T0 + timedelta(seconds=second)
        if snapshot is not None:
            snapshot = replace(snapshot, time=now.timestamp())
        problem = refused if snapshot is None else REFUSED_UTILIZATION
        observation = Observation(now, compile=compiled(dep), metrics=snapshot, metrics_problem=problem)
        result = plan(dep, observation, memory, status)
        warnings += [
            e.reason
            for e in status_events(StatusMemory.from_status(status), result.status, result.scale_reason)
            if e.type == "Warning"
        ]
        memory, status = result.memory, result.status
    assert warnings == [Reason.METRICS_UNAVAILABLE]
    assert condition_of(status, "ScalingActive")["reason"] == "MetricsRead"
    assert "spec.scaling.metrics.utilization" in condition_of(status, "ScalingActive")["message"]
