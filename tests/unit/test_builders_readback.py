"""Read-back: pods built from plan actions, as the API returns them, parse to the same fleet view.

The round trip plan -> build -> (API-server fields) -> parse -> plan must yield no new actions,
which is what keeps the operator's reconcile idempotent against real pod objects.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.kube.builders import object_for_action, parse_pod, pod_template_hash, relabel_patch
from neuronfleet.planning.fleet import (
    CreatePlaceholder,
    CreatePod,
    DeletePod,
    FleetPolicy,
    FleetTarget,
    Relabel,
    plan_fleet,
)
from neuronfleet.planning.labels import ANNOTATION_DRAIN_STARTED, ANNOTATION_KEPT_SINCE, LABEL_ROLE, ArtifactRevision
from neuronfleet.planning.placement import plan_for_spec
from neuronfleet.sandbox.patching import merge_patch

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ARTIFACT = ArtifactRevision("cccccccccc", "s3://artifacts/bert/cccccccccc/")


def deployment() -> InferenceDeployment:
    dep = InferenceDeployment.model_validate(yaml.safe_load((REPO / "examples/bert-embeddings.yaml").read_text()))
    dep.metadata.uid = "uid-1"
    return dep


def as_stored(pod: dict[str, Any], *, ready: bool, node: str | None = "ip-10-0-0-1") -> dict[str, Any]:
    """The pod as the API server would return it after scheduling (and readiness)."""
    stored = copy.deepcopy(pod)
    stored["metadata"]["creationTimestamp"] = "2026-11-30T11:50:00Z"
    if node:
        stored["spec"]["nodeName"] = node
    stored["status"] = {
        "phase": "Running" if node else "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "True" if node else "False"},
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": "2026-11-30T11:55:00Z"},
        ],
    }
    return stored


def test_parse_reads_role_revision_readiness_and_node_state() -> None:
    dep = deployment()
    plan = plan_for_spec(dep.spec, 2)
    assert plan.chosen is not None
    template = pod_template_hash(dep, plan.chosen)
    target = FleetTarget(template, ARTIFACT, active=1)
    create = plan_fleet(dep.name, target, [], NOW).actions[0]
    assert isinstance(create, CreatePod)
    stored = as_stored(object_for_action(dep, plan.chosen, create), ready=True)
    view = parse_pod(stored, node_names={"ip-10-0-0-1"})
    assert (view.name, view.role, view.revision, view.template) == (create.name, "active", ARTIFACT.id, template)
    assert view.ready and view.phase == "Running" and not view.node_lost
    assert view.ready_at == datetime(2026, 11, 30, 11, 55, tzinfo=UTC)
    assert parse_pod(stored, node_names={"another-node"}).node_lost
    # The API server sets deletionTimestamp to when the grace period ends (the kubelet kills then).
    stored["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:00Z"
    assert parse_pod(stored).deleting
    assert parse_pod(stored).grace_ends_at == datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_parse_reports_unschedulable_and_image_pull_problems() -> None:
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "labels": {"serving.neuronfleet.dev/role": "warm"}},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/2 nodes are available: 2 Insufficient aws.amazon.com/neuroncore.",
                }
            ],
        },
    }
    view = parse_pod(pod)
    assert view.unschedulable_message == "0/2 nodes are available: 2 Insufficient aws.amazon.com/neuroncore."
    pod["spec"] = {"nodeName": "n1"}
    pod["status"]["containerStatuses"] = [
        {"name": "neuronserve", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "pull access denied"}}}
    ]
    view = parse_pod(pod)
    assert (view.waiting_reason, view.waiting_message) == ("ImagePullBackOff", "pull access denied")


def test_a_crash_looping_pod_says_why_its_server_exited_and_which_manifest_it_is_pinned_to() -> None:
    dep = deployment()
    plan = plan_for_spec(dep.spec, 2)
    assert plan.chosen is not None
    pinned = ArtifactRevision(ARTIFACT.id, ARTIFACT.uri, "a" * 64)
    create = plan_fleet(dep.name, FleetTarget(pod_template_hash(dep, plan.chosen), pinned, 1), [], NOW).actions[0]
    assert isinstance(create, CreatePod)
    stored = as_stored(object_for_action(dep, plan.chosen, create), ready=False)
    refusal = f"neuronserve: the manifest at {pinned.uri} has sha256 {'b' * 64}, not the pinned {'a' * 64}"
    stored["status"]["containerStatuses"] = [
        {
            "name": "neuronserve",
            "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
            # FallbackToLogsOnError: the log's tail, the server's fatal line last.
            "lastState": {"terminated": {"exitCode": 4, "reason": "Error", "message": f"INFO listening\n{refusal}\n"}},
        }
    ]
    view = parse_pod(stored)
    assert view.artifact_sha256 == pinned.sha256
    assert view.last_exit_code == 4
    assert view.waiting_reason == "CrashLoopBackOff"
    assert view.waiting_message == f"back-off 40s restarting failed container; last exit (code 4): {refusal}"
    # An injected sidecar: the kubelet sorts containerStatuses by name, so istio-proxy comes first
    # (its exit code was read as the server's, and the refusal went unseen).
    sidecar = {"name": "istio-proxy", "ready": True, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
    stored["status"]["containerStatuses"].insert(0, sidecar)
    assert parse_pod(stored).last_exit_code == 4
    sidecar["lastState"] = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    assert parse_pod(stored).last_exit_code == 4


def test_a_long_last_line_is_quoted_whole_up_to_its_limit_and_cut_with_an_ellipsis_past_it() -> None:
    from neuronfleet.kube.builders import MAX_LAST_LINE

    def quoted(last_line: str) -> str:
        crashed = {
            "name": "neuronserve",
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
            "lastState": {"terminated": {"exitCode": 1, "message": f"INFO listening\n{last_line}\n"}},
        }
        view = parse_pod({"metadata": {"name": "p"}, "status": {"containerStatuses": [crashed]}})
        assert view.waiting_message is not None
        return view.waiting_message.removeprefix("back-off; last exit (code 1): ")

    assert quoted("x" * MAX_LAST_LINE) == "x" * MAX_LAST_LINE
    assert quoted("x" * (MAX_LAST_LINE + 1)) == "x" * (MAX_LAST_LINE - 3) + "..."


def test_unknown_role_label_is_read_as_draining() -> None:
    view = parse_pod({"metadata": {"name": "p", "labels": {"serving.neuronfleet.dev/role": "hero"}}})
    assert view.role == "draining"


def test_plan_build_parse_plan_round_trip_is_idempotent() -> None:
    dep = deployment()
    placement = plan_for_spec(dep.spec, 4)
    assert placement.chosen is not None
    template = pod_template_hash(dep, placement.chosen)
    target = FleetTarget(template, ARTIFACT, active=2, warm=1, placeholders=1)
    first = plan_fleet(dep.name, target, [], NOW)
    stored = {}
    for action in first.actions:
        assert isinstance(action, CreatePod | CreatePlaceholder)
        stored[action.name] = as_stored(object_for_action(dep, placement.chosen, action), ready=True)
    views = [parse_pod(pod, node_names={"ip-10-0-0-1"}) for pod in stored.values()]
    assert plan_fleet(dep.name, target, views, NOW).actions == ()

    # Scale down to 1: a relabel patch applied to the stored object reads back as draining.
    smaller = FleetTarget(template, ARTIFACT, active=1, warm=1, placeholders=1)
    down = plan_fleet(dep.name, smaller, views, NOW)
    drains = [a for a in down.actions if isinstance(a, Relabel)]
    assert len(drains) == 1
    patch = relabel_patch(drains[0])
    pod = stored[drains[0].name]
    pod["metadata"]["labels"].update(patch["metadata"]["labels"])
    pod["metadata"].setdefault("annotations", {}).update(patch["metadata"]["annotations"])
    views = [parse_pod(p, node_names={"ip-10-0-0-1"}) for p in stored.values()]
    drained = next(v for v in views if v.name == drains[0].name)
    assert drained.role == "draining" and drained.drain_started_at == NOW
    assert plan_fleet(dep.name, smaller, views, NOW + timedelta(seconds=1)).actions == ()


def merge_metadata(pod: dict[str, Any], patch: dict[str, Any]) -> None:
    """The patch applied as the API server applies a JSON merge patch (the sandbox's RFC 7386 code)."""
    pod.update(merge_patch(pod, patch))


def test_the_old_standby_stamp_is_written_read_back_and_cleared() -> None:
    # The rollout's kept standby: the stamp the plan writes reads back as the pod's clock (so the next
    # plan does not stamp again, and the deadline counts from it); promoting the pod removes it.
    dep = deployment()
    placement = plan_for_spec(dep.spec, 4)
    assert placement.chosen is not None
    template = pod_template_hash(dep, placement.chosen)
    target = FleetTarget(template, ARTIFACT, active=1, warm=1)
    stored = {}
    for action in plan_fleet(dep.name, target, [], NOW).actions:
        assert isinstance(action, CreatePod)
        stored[action.name] = as_stored(object_for_action(dep, placement.chosen, action), ready=True)
    views = [parse_pod(pod, node_names={"ip-10-0-0-1"}) for pod in stored.values()]
    rollout = FleetTarget(template, ArtifactRevision("dddddddddd", "s3://artifacts/bert/dddddddddd/"), 1, 1)
    stamps = [a for a in plan_fleet(dep.name, rollout, views, NOW).actions if isinstance(a, Relabel)]
    assert [(a.role, a.kept_since) for a in stamps] == [("warm", NOW)]
    merge_metadata(stored[stamps[0].name], relabel_patch(stamps[0]))
    views = [parse_pod(p, node_names={"ip-10-0-0-1"}) for p in stored.values()]
    assert next(v for v in views if v.name == stamps[0].name).kept_since == NOW
    later = plan_fleet(dep.name, rollout, views, NOW + timedelta(minutes=1)).actions
    assert not [a for a in later if isinstance(a, Relabel)]
    promote = Relabel(stamps[0].name, "active", "warm", "promoted")
    merge_metadata(stored[stamps[0].name], relabel_patch(promote))
    assert parse_pod(stored[stamps[0].name]).kept_since is None


def test_stamps_written_by_hand_without_a_zone_read_as_utc_and_plan() -> None:
    # An SRE's `kubectl annotate` without a zone: read as UTC, not as a naive datetime that the
    # plan's aware clock cannot be compared with (every plan raised TypeError: no reconcile).
    dep = deployment()
    placement = plan_for_spec(dep.spec, 4)
    assert placement.chosen is not None
    template = pod_template_hash(dep, placement.chosen)
    stored = {}
    for action in plan_fleet(dep.name, FleetTarget(template, ARTIFACT, active=2, warm=1), [], NOW).actions:
        assert isinstance(action, CreatePod)
        stored[action.name] = as_stored(object_for_action(dep, placement.chosen, action), ready=True)
    by_role = sorted(stored, key=lambda n: stored[n]["metadata"]["labels"][LABEL_ROLE])
    active_name, drained_name, warm_name = by_role
    stored[warm_name]["metadata"].setdefault("annotations", {})[ANNOTATION_KEPT_SINCE] = "2026-11-30T11:00:00"
    drained = stored[drained_name]["metadata"]
    drained["labels"][LABEL_ROLE] = "draining"
    drained.setdefault("annotations", {})[ANNOTATION_DRAIN_STARTED] = "2026-11-30 11:30:00"
    views = {v.name: v for v in (parse_pod(p, node_names={"ip-10-0-0-1"}) for p in stored.values())}
    assert views[warm_name].kept_since == datetime(2026, 11, 30, 11, 0, tzinfo=UTC)
    assert views[drained_name].drain_started_at == datetime(2026, 11, 30, 11, 30, tzinfo=UTC)
    rollout = FleetTarget(template, ArtifactRevision("dddddddddd", "s3://artifacts/bert/dddddddddd/"), 1, 1)
    plan = plan_fleet(dep.name, rollout, views.values(), NOW, FleetPolicy(progress_deadline_seconds=600))
    # Kept since an hour ago, past the deadline: released; draining for half an hour: deleted.
    assert {a.name for a in plan.actions if isinstance(a, DeletePod)} == {warm_name, drained_name}
    assert active_name not in {a.name for a in plan.actions if not isinstance(a, CreatePod)}


def test_only_a_placeholder_of_another_account_reads_as_of_no_template() -> None:
    # A placeholder made before placeholders took the serving pods' account ran as the namespace's
    # default: it reads as of no template, so the plan replaces it. Serving pods keep theirs, whatever
    # account they run as (the account is part of their template hash).
    def pod(role: str, account: str | None) -> dict[str, Any]:
        labels = {"serving.neuronfleet.dev/role": role, "serving.neuronfleet.dev/template-hash": "t1"}
        spec = {"serviceAccountName": account} if account else {}
        return {"metadata": {"name": f"{role}-{account}", "labels": labels}, "spec": spec}

    assert parse_pod(pod("placeholder", None), placeholder_account="my-serving").template is None
    assert parse_pod(pod("placeholder", "default"), placeholder_account="my-serving").template is None
    assert parse_pod(pod("placeholder", "my-serving"), placeholder_account="my-serving").template == "t1"
    assert parse_pod(pod("placeholder", None), placeholder_account=None).template == "t1"
    assert parse_pod(pod("placeholder", "default"), placeholder_account=None).template == "t1"
    assert parse_pod(pod("placeholder", "my-serving"), placeholder_account=None).template is None
    for role in ("active", "warm", "draining"):
        assert parse_pod(pod(role, "my-serving"), placeholder_account=None).template == "t1"
        assert parse_pod(pod(role, None), placeholder_account="my-serving").template == "t1"
