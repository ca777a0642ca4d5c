"""The operator leaves its compile Job's pod alone: it is the Job's, not a fleet pod to drain.

The compile pod carries the deployment label (so `kubectl get pods -l` finds it with the fleet),
but no role: read as a fleet pod it would be relabeled draining and deleted after the drain grace,
killing a compile that takes longer than that. Here the emulated compile container runs 120 s,
four times the harness's 30 s drain grace.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from operator_harness import OperatorHarness, example

from neuronfleet.api.v1alpha1 import GROUP
from neuronfleet.sandbox import ColdStartProfile
from neuronfleet.sandbox.store import WatchEvent

NS = "compile-pod"
SLOW_COMPILE = ColdStartProfile(image_pull_s=2.0, container_start_s=0.5, readiness_s=3.0, run_s=120.0, jitter=0.0)


async def test_a_long_compile_pod_is_never_relabeled_nor_deleted_by_the_operator(harness: OperatorHarness) -> None:
    assert harness.cluster.kubelet is not None
    harness.cluster.kubelet.profiles[(None, None)] = SLOW_COMPILE
    manifest = harness.localize(
        example(
            "bert-embeddings", scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0}, warmPool={"mode": "Off"}
        ),
        namespace=NS,
    )
    changes: list[tuple[str, dict[str, str], bool, str]] = []

    def record(event: WatchEvent) -> None:
        meta = event.obj["metadata"]
        if event.resource == ("", "pods") and "job-name" in (meta.get("labels") or {}):
            phase = (event.obj.get("status") or {}).get("phase", "")
            changes.append((event.type, dict(meta.get("labels") or {}), bool(meta.get("deletionTimestamp")), phase))

    harness.cluster.store.listeners.append(record)
    try:
        await harness.apply(manifest)
        await harness.wait(
            lambda: any(phase == "Succeeded" for *_, phase in changes), timeout=400, what="the compile pod to finish"
        )
    finally:
        harness.cluster.store.listeners.remove(record)

    assert changes, "a compile pod ran"
    assert all(f"{GROUP}/role" not in labels for _, labels, _, _ in changes), "the operator relabeled the compile pod"
    finished = next(i for i, (*_, phase) in enumerate(changes) if phase == "Succeeded")
    before = changes[:finished]
    assert not any(kind == "DELETED" or deleting for kind, _, deleting, _ in before), "deleted while compiling"


async def test_a_compile_pod_the_api_server_refuses_is_named_in_the_compiled_condition(
    harness: OperatorHarness,
) -> None:
    # A ResourceQuota refuses the Job's pod: the Job controller makes none and says why in a
    # FailedCreate Event only. The Compiled condition read "compile Job running" until the Job's
    # deadline (1-2 h), then DeadlineExceeded without the cause; then "the API server may be refusing
    # it". It now quotes the Event, naming the quota and the field that sets what it counts. The
    # sandbox's quota admission refuses it (spec.compile.memory is 8Gi by default).
    await harness.ensure_namespace("refused")
    core = await harness.client(k8s.CoreV1Api)
    await core.create_namespaced_resource_quota(
        "refused", {"metadata": {"name": "compute"}, "spec": {"hard": {"requests.memory": "4Gi"}}}
    )
    quota = (
        "exceeded quota: compute, requested: requests.memory=8Gi, used: requests.memory=0, limited: requests.memory=4Gi"
    )
    manifest = harness.localize(
        example(
            "bert-embeddings", scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0}, warmPool={"mode": "Off"}
        ),
        namespace="refused",
    )
    await harness.apply(manifest)
    name = manifest["metadata"]["name"]

    def compiled() -> dict[str, Any]:
        return harness.condition("refused", name, "Compiled")

    await harness.wait(lambda: "compile Job running" in compiled().get("message", ""), timeout=60, what="the Job")
    assert "its pod is waiting" not in compiled()["message"]  # a young Job is only running
    await harness.wait(
        lambda: compiled().get("reason") == "PodCreationRefused", timeout=300, what="Compiled PodCreationRefused"
    )
    assert compiled()["status"] == "False"
    (job,) = harness.cluster.list("jobs", "refused", group="batch")
    refused = f'pods "{job["metadata"]["name"]}-" is forbidden: {quota}'
    assert compiled()["message"] == (
        "the API server refuses the compile Job's pod, so the compile Job makes no pod (the Job controller keeps "
        f"trying): {refused} (the pod would take the namespace over ResourceQuota compute: lower spec.compile.memory, "
        "or raise the quota or free some of it; kubectl describe resourcequota compute -n refused)"
    )
    assert harness.condition("refused", name, "Degraded")["reason"] == "PodCreationRefused"
    await harness.wait(
        lambda: [
            e
            for e in harness.cluster.list("events", "refused")
            if e.get("reason") == "PodCreationRefused" and e["involvedObject"]["name"] == name
        ],
        timeout=60,
        what="a Warning Event",
    )


async def test_a_superseded_compile_job_held_by_a_finalizer_is_deleted_once(harness: OperatorHarness) -> None:
    # Another controller (an audit or backup tool, a queueing system) holds a finalizer on the compile
    # Job, so after the operator's DELETE it stays, Terminating. It was still listed as running: the
    # operator deleted it again, with another CompileSuperseded Event, on every reconcile (30 in 50 s).
    # A Job being deleted is now no running Job: deleted once, one Event, and the new request's Job is
    # made meanwhile (a new name: it need not wait for another controller's finalizer). Its pod kept
    # compiling: the garbage collector deletes a Background delete's dependents only once the owner
    # is gone, and the Job controller manages no Job being deleted; the operator now deletes it.
    assert harness.cluster.kubelet is not None
    harness.cluster.kubelet.profiles[(None, None)] = SLOW_COMPILE
    manifest = harness.localize(
        example(
            "bert-embeddings", scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0}, warmPool={"mode": "Off"}
        ),
        namespace="held",
    )
    name = manifest["metadata"]["name"]
    await harness.apply(manifest)

    def jobs() -> list[dict[str, Any]]:
        return harness.cluster.list("jobs", "held", group="batch")

    await harness.wait(jobs, timeout=60, what="a compile Job")
    (old,) = (job["metadata"]["name"] for job in jobs())

    def old_pods() -> list[dict[str, Any]]:
        pods = harness.cluster.list("pods", "held")
        return [p for p in pods if (p["metadata"].get("labels") or {}).get("job-name") == old]

    await harness.wait(
        lambda: [p for p in old_pods() if (p.get("status") or {}).get("phase") == "Running"],
        timeout=60,
        what="the compile pod running",
    )
    batch = await harness.client(k8s.BatchV1Api)
    await batch.patch_namespaced_job(
        old, "held", {"metadata": {"finalizers": ["example.com/audit"]}}, _content_type="application/merge-patch+json"
    )
    await harness.patch_spec("held", name, {"model": {**manifest["spec"]["model"], "batchBuckets": [1, 2, 4, 8]}})
    await harness.wait(lambda: len(jobs()) == 2, timeout=60, what="the new request's compile Job")
    assert harness.context is not None
    started = harness.context.reconciles
    await harness.wait(
        lambda: harness.context is not None and harness.context.reconciles >= started + 5,
        timeout=120,
        what="five more reconciles",
    )

    held = harness.cluster.get("jobs", old, "held", group="batch")
    assert held is not None and held["metadata"].get("deletionTimestamp"), "the old Job stays, Terminating"
    deletes = [r for r in harness.cluster.request_log if r.method == "DELETE" and r.resource == "jobs"]
    assert [r.name for r in deletes] == [old]
    superseded = [
        e["message"] for e in harness.cluster.list("events", "held") if e.get("reason") == "CompileSuperseded"
    ]
    assert len(superseded) == 1, superseded
    assert old in superseded[0]
    assert "example.com/audit" in superseded[0], "the Event says what holds the Job"
    assert not [p for p in old_pods() if not p["metadata"].get("deletionTimestamp")], "the old compile runs on"
    assert "deleted, ending the compile" in superseded[0], "the Event says the compile's pod was deleted"


async def test_a_held_compile_jobs_pod_left_by_a_failed_call_is_deleted_on_a_later_reconcile(
    harness: OperatorHarness,
) -> None:
    # The held Job's pods were deleted only in the reconcile that DELETEd the Job: one 503 there (or
    # an operator stop between) left the superseded compile running for as long as the finalizer held
    # the Job. The plan now deletes a held Job's live pods on every reconcile until none is left.
    assert harness.cluster.kubelet is not None
    harness.cluster.kubelet.profiles[(None, None)] = SLOW_COMPILE
    manifest = harness.localize(
        example(
            "bert-embeddings", scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0}, warmPool={"mode": "Off"}
        ),
        namespace="held503",
    )
    name = manifest["metadata"]["name"]
    await harness.apply(manifest)

    def jobs() -> list[dict[str, Any]]:
        return harness.cluster.list("jobs", "held503", group="batch")

    await harness.wait(jobs, timeout=60, what="a compile Job")
    (old,) = (job["metadata"]["name"] for job in jobs())

    def old_pods() -> list[dict[str, Any]]:
        pods = harness.cluster.list("pods", "held503")
        return [p for p in pods if (p["metadata"].get("labels") or {}).get("job-name") == old]

    await harness.wait(
        lambda: [p for p in old_pods() if (p.get("status") or {}).get("phase") == "Running"],
        timeout=60,
        what="the compile pod running",
    )
    assert harness.context is not None
    kube = harness.context.reconciler.kube
    real = kube.delete_pod
    failed: list[str] = []

    async def delete_pod(namespace: str, name: str, grace_period_seconds: int | None = None) -> bool:
        if name.startswith(old) and not failed:
            failed.append(name)
            raise ApiException(status=503, reason="Service Unavailable")  # one transient failure
        return await real(namespace, name, grace_period_seconds)

    # Replacing a method of the live client is the point (mypy still checks it against KubeApi's).
    kube.delete_pod = delete_pod  # type: ignore[method-assign]
    batch = await harness.client(k8s.BatchV1Api)
    await batch.patch_namespaced_job(
        old,
        "held503",
        {"metadata": {"finalizers": ["example.com/audit"]}},
        _content_type="application/merge-patch+json",
    )
    await harness.patch_spec("held503", name, {"model": {**manifest["spec"]["model"], "batchBuckets": [1, 2, 4, 8]}})
    await harness.wait(lambda: len(jobs()) == 2, timeout=60, what="the new request's compile Job")
    started = harness.context.reconciles
    await harness.wait(
        lambda: harness.context is not None and harness.context.reconciles >= started + 5,
        timeout=120,
        what="five more reconciles",
    )

    assert failed, "the injected failure was met"
    assert not [p for p in old_pods() if not p["metadata"].get("deletionTimestamp")], "the old compile runs on"
    superseded = [
        e["message"] for e in harness.cluster.list("events", "held503") if e.get("reason") == "CompileSuperseded"
    ]
    assert len(superseded) == 1, superseded
    assert "retried on the next reconcile" in superseded[0]
