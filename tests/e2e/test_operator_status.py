"""The status tells the truth and only changes when something changed (the real operator, sandbox)."""

from __future__ import annotations

import asyncio
from typing import Any

import boto3
import pytest
from kubernetes_asyncio import client as k8s
from operator_harness import OperatorHarness, example, ready

from neuronfleet.api.v1alpha1 import GROUP, PLURAL, VERSION
from neuronfleet.planning.status import KEPT_PLACEMENT_NOTE

NS = "status"


def manual(name: str, replicas: int = 1, **overrides: Any) -> dict[str, Any]:
    manifest = example(
        "bert-embeddings",
        scaling={"mode": "Manual", "replicas": replicas, "minReplicas": 0},
        warmPool={"mode": "Off"},
        **overrides,
    )
    manifest["metadata"]["name"] = name
    return manifest


async def test_a_spec_that_becomes_unservable_keeps_the_placement_of_the_pods_that_serve(
    harness: OperatorHarness,
) -> None:
    """Regression: the counts (and /scale) read 0 while the pods of the last valid spec served; then
    status.placement left the object (and with it the sticky instance type) while they still ran
    there. It stays, saying it is the last valid spec's."""
    manifest = harness.localize(manual("stale"), namespace=NS)
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(
        lambda: (
            (harness.deployment(NS, "stale").get("status") or {}).get("placement", {}).get("instanceType")
            == "inf2.xlarge"
        ),
        timeout=60,
        what="placed on inf2.xlarge",
    )
    await harness.wait(lambda: harness.condition(NS, "stale", "Ready").get("status") == "True", timeout=60)

    await harness.patch_spec(NS, "stale", {"model": {"neuronCoresPerReplica": 4}})
    await harness.wait(
        lambda: harness.condition(NS, "stale", "Scheduled").get("reason") == "NoInstanceTypeFits",
        timeout=60,
        what="Scheduled=False NoInstanceTypeFits",
    )
    status = harness.deployment(NS, "stale")["status"]
    assert status["placement"]["instanceType"] == "inf2.xlarge"
    assert status["placement"]["reason"].startswith(KEPT_PLACEMENT_NOTE), status["placement"]
    # The pods of the last valid spec are left as they were, and still counted: they serve.
    serving = [p for p in harness.pods(NS, "stale", "active") if ready(p)]
    assert len(serving) == 1
    assert (status["replicas"], status["readyReplicas"]) == (1, 1), status
    assert harness.condition(NS, "stale", "Available")["status"] == "True"
    ready_condition = harness.condition(NS, "stale", "Ready")
    assert (ready_condition["status"], ready_condition["reason"]) == ("False", "NoInstanceTypeFits")
    assert "the pods of the last valid spec, if any, are left as they were" in ready_condition["message"]
    custom = k8s.CustomObjectsApi(await harness.api())
    scale = await custom.get_namespaced_custom_object_scale(GROUP, VERSION, NS, PLURAL, "stale")
    assert scale["status"]["replicas"] == 1

    # Fixed: placed afresh, on the same type, the same pod serving on.
    await harness.patch_spec(NS, "stale", {"model": {"neuronCoresPerReplica": 1}})
    await harness.wait(lambda: harness.condition(NS, "stale", "Ready").get("status") == "True", timeout=60)
    placement = harness.deployment(NS, "stale")["status"]["placement"]
    assert placement["instanceType"] == "inf2.xlarge" and not placement["reason"].startswith(KEPT_PLACEMENT_NOTE)
    assert [p["metadata"]["uid"] for p in harness.pods(NS, "stale", "active")] == [serving[0]["metadata"]["uid"]]


def resource_version(harness: OperatorHarness, name: str) -> str:
    return str(harness.deployment(NS, name)["metadata"]["resourceVersion"])


async def test_an_idle_deployment_gets_no_status_write_and_no_event(harness: OperatorHarness) -> None:
    """Auto mode with no metrics source: nothing changes, so nothing is written or posted."""
    manifest = harness.localize(manual("idle"), namespace=NS)
    manifest["spec"]["scaling"] = {"mode": "Auto", "minReplicas": 1, "maxReplicas": 3, "intervalSeconds": 15}
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(lambda: harness.condition(NS, "idle", "Ready").get("status") == "True", timeout=90)
    assert harness.condition(NS, "idle", "ScalingActive")["reason"] == "MetricsUnavailable"
    await asyncio.sleep(30)  # let the last pod events settle (fake time)
    before, events = resource_version(harness, "idle"), len(harness.events(NS, "idle"))
    reconciles = harness.context.reconciles if harness.context else 0
    since = len(harness.cluster.request_log)

    await asyncio.sleep(600)  # 40 autoscaler intervals, 300 reconcile intervals (fake time)
    assert harness.context is not None and harness.context.reconciles > reconciles + 100
    assert resource_version(harness, "idle") == before, "the status was written with nothing changed"
    assert len(harness.events(NS, "idle")) == events
    # Status writes carry the resourceVersion they were planned from; Kopf's own patches (its finalizer
    # and annotations) made before must not send an idle fleet into conflicts and reads again.
    idle = [r for r in harness.cluster.request_log[since:] if r.resource == PLURAL and r.name == "idle"]
    assert [(r.method, r.subresource, r.code) for r in idle] == [], "an idle fleet's object was written or read"
    conflicts = [r for r in harness.cluster.request_log if r.resource == PLURAL and r.code == 409]
    assert len(conflicts) <= 1, conflicts  # the first write, planned from the body before Kopf's finalizer


async def test_each_scale_is_one_event(harness: OperatorHarness) -> None:
    manifest = harness.localize(manual("scaled", replicas=2), namespace=NS)
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(lambda: harness.condition(NS, "scaled", "Ready").get("status") == "True", timeout=90)
    await asyncio.sleep(30)
    scaled = [e["message"] for e in harness.events(NS, "scaled", "Scaled")]
    assert len(scaled) == 1 and scaled[0].startswith("initial size: 2 desired active replicas ("), scaled
    created = harness.events(NS, "scaled", "CreatedPod")
    assert len(created) == 2, [e["message"] for e in created]


async def test_a_corrupted_kopf_annotation_is_reported_and_the_deployment_served(harness: OperatorHarness) -> None:
    manifest = harness.localize(manual("garbled"), namespace=NS)
    manifest["metadata"]["annotations"] = {f"{GROUP}/last-handled-configuration": '{"spec": {not json'}
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(
        lambda: harness.condition(NS, "garbled", "Degraded").get("reason") == "CorruptAnnotation",
        timeout=60,
        what="Degraded=True CorruptAnnotation",
    )
    assert "last-handled-configuration" in harness.condition(NS, "garbled", "Degraded")["message"]
    await harness.wait(lambda: harness.condition(NS, "garbled", "Ready").get("status") == "True", timeout=90)
    assert harness.events(NS, "garbled", "CorruptAnnotation")
    # No retry loop: once served, the object is left alone.
    await asyncio.sleep(30)
    before = resource_version(harness, "garbled")
    await asyncio.sleep(120)
    assert resource_version(harness, "garbled") == before


async def test_an_unreadable_s3_source_is_reported_and_no_job_started(
    harness: OperatorHarness, aws_env: pytest.MonkeyPatch
) -> None:
    # No credentials anywhere (a refused connection is not this: S3 may answer in a moment).
    monkeypatch = aws_env
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    # boto3's default session keeps the credentials it found for the process: an earlier test's
    # (moto's) would still sign, and the refused connection would read as StoreUnavailable.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    manifest = harness.localize(manual("from-s3"), namespace=NS)
    manifest["spec"]["model"]["source"] = "s3://acme-models/bert/"
    await harness.apply(manifest)
    await harness.wait(
        lambda: harness.condition(NS, "from-s3", "Compiled").get("reason") == "SourceUnreadable",
        timeout=60,
        what="Compiled=False SourceUnreadable",
    )
    compiled = harness.condition(NS, "from-s3", "Compiled")
    assert compiled["status"] == "False"
    assert "cannot read the model source s3://acme-models/bert/" in compiled["message"]
    assert harness.condition(NS, "from-s3", "Degraded")["reason"] == "SourceUnreadable"
    await asyncio.sleep(30)
    assert not harness.cluster.list("jobs", NS, group="batch"), "a compile Job was started for an unreadable source"
    assert harness.events(NS, "from-s3", "SourceUnreadable")


async def test_a_missing_priority_class_is_named_and_retried(harness: OperatorHarness) -> None:
    scheduling = k8s.SchedulingV1Api(await harness.api())
    await scheduling.delete_priority_class("neuronfleet-active")
    manifest = harness.localize(manual("unprioritized", replicas=2), namespace=NS)
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(
        lambda: harness.condition(NS, "unprioritized", "Scheduled").get("reason") == "PriorityClassMissing",
        timeout=60,
        what="Scheduled=False PriorityClassMissing",
    )
    scheduled = harness.condition(NS, "unprioritized", "Scheduled")
    assert scheduled["status"] == "False" and "PriorityClass neuronfleet-active does not exist" in scheduled["message"]
    assert harness.condition(NS, "unprioritized", "Degraded")["reason"] == "PriorityClassMissing"
    assert not harness.pods(NS, "unprioritized")

    await asyncio.sleep(300)  # long enough for any back-off to have grown (fake time)
    await harness.ensure_priority_classes()
    await harness.wait(lambda: len(harness.pods(NS, "unprioritized")) == 2, timeout=30, what="pods created within 30 s")
    await harness.wait(
        lambda: harness.condition(NS, "unprioritized", "Ready").get("status") == "True", timeout=90, what="Ready"
    )
    assert harness.condition(NS, "unprioritized", "Degraded")["status"] == "False"
