"""Specs the schema accepts but the cluster cannot satisfy: a clear condition and an Event each,
while the operator keeps serving the other InferenceDeployments.
"""

from __future__ import annotations

from typing import Any

import yaml
from operator_harness import REPO, OperatorHarness, example, ready

NS = "errors"


def events_for(harness: OperatorHarness, name: str) -> list[dict[str, Any]]:
    events = harness.cluster.list("events", NS)
    return [e for e in events if (e.get("involvedObject") or e.get("regarding") or {}).get("name") == name]


async def _healthy_neighbour(harness: OperatorHarness) -> str:
    manifest = harness.localize(
        example(
            "bert-embeddings", scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0}, warmPool={"mode": "Off"}
        ),
        namespace=NS,
    )
    manifest["metadata"]["name"] = "neighbour"
    harness.precompile(manifest)
    await harness.apply(manifest)
    return "neighbour"


async def test_model_that_fits_no_allowed_instance_type(harness: OperatorHarness) -> None:
    neighbour = await _healthy_neighbour(harness)
    manifest = yaml.safe_load((REPO / "examples" / "invalid" / "fits-no-instance-type.yaml").read_text())
    manifest = harness.localize(manifest, namespace=NS)
    await harness.apply(manifest)
    name = manifest["metadata"]["name"]

    await harness.wait(
        lambda: harness.condition(NS, name, "Scheduled").get("status") == "False", timeout=60, what="Scheduled=False"
    )
    scheduled = harness.condition(NS, name, "Scheduled")
    assert scheduled["reason"] == "NoInstanceTypeFits"
    assert "no allowed instance type holds a replica of 16 NeuronCores" in scheduled["message"]
    assert harness.condition(NS, name, "Degraded")["status"] == "True"
    await harness.wait(
        lambda: any(e["reason"] == "NoInstanceTypeFits" and e["type"] == "Warning" for e in events_for(harness, name)),
        timeout=60,
        what="a Warning Event",
    )
    assert not harness.pods(NS, name), "pods were created for a model no node can hold"
    await harness.wait(
        lambda: harness.condition(NS, neighbour, "Ready").get("status") == "True",
        timeout=90,
        what="the neighbour keeps being served",
    )


async def test_scheduler_nobody_runs(harness: OperatorHarness) -> None:
    neighbour = await _healthy_neighbour(harness)
    manifest = harness.localize(
        example(
            "bert-embeddings",
            scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0},
            warmPool={"mode": "Off"},
            placement={"schedulerName": "no-such-scheduler"},
        ),
        namespace=NS,
    )
    harness.precompile(manifest)
    await harness.apply(manifest)
    name = manifest["metadata"]["name"]

    def reported() -> bool:
        degraded = harness.condition(NS, name, "Degraded")
        return degraded.get("status") == "True" and "no-such-scheduler" in degraded.get("message", "")

    await harness.wait(reported, timeout=600, what="Degraded names the scheduler")
    assert harness.condition(NS, name, "Degraded")["reason"] == "NotScheduled"
    assert harness.condition(NS, name, "Ready")["status"] == "False"
    assert all(not p["spec"].get("nodeName") for p in harness.pods(NS, name))
    await harness.wait(
        lambda: any(e.get("reason") == "NotScheduled" for e in events_for(harness, name)),
        timeout=120,
        what="a Warning Event",
    )
    await harness.wait(
        lambda: harness.condition(NS, neighbour, "Ready").get("status") == "True",
        timeout=90,
        what="the neighbour keeps being served",
    )
    assert all(ready(p) for p in harness.pods(NS, neighbour))


async def test_image_that_never_pulls(harness: OperatorHarness) -> None:
    neighbour = await _healthy_neighbour(harness)
    kubelet = harness.cluster.kubelet
    assert kubelet is not None
    kubelet.unpullable_images.add("registry.example.com/does-not-exist:1.0")
    manifest = harness.localize(
        example(
            "bert-embeddings",
            scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0},
            warmPool={"mode": "Off"},
            runtime={"image": "registry.example.com/does-not-exist:1.0"},
        ),
        namespace=NS,
    )
    harness.precompile(manifest)
    await harness.apply(manifest)
    name = manifest["metadata"]["name"]

    def reported() -> bool:
        degraded = harness.condition(NS, name, "Degraded")
        return degraded.get("status") == "True" and "does-not-exist" in degraded.get("message", "")

    await harness.wait(reported, timeout=300, what="Degraded names the image")
    degraded = harness.condition(NS, name, "Degraded")
    assert degraded["reason"] == "ImagePullBackOff"
    assert harness.condition(NS, name, "Ready")["status"] == "False"
    await harness.wait(
        lambda: any(
            e.get("reason") == "ImagePullBackOff" and e.get("type") == "Warning" for e in events_for(harness, name)
        ),
        timeout=120,
        what="a Warning Event",
    )
    await harness.wait(
        lambda: harness.condition(NS, neighbour, "Ready").get("status") == "True", timeout=90, what="the neighbour"
    )
