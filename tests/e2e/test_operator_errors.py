"""Specs the schema accepts but the cluster cannot satisfy: a clear condition and an Event each,
while the operator keeps serving the other InferenceDeployments.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from operator_harness import REPO, OperatorHarness, example, ready

NS = "errors"


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
        lambda: any(e["reason"] == "NoInstanceTypeFits" and e["type"] == "Warning" for e in harness.events(NS, name)),
        timeout=60,
        what="a Warning Event",
    )
    assert not harness.pods(NS, name), "pods were created for a model no node can hold"
    await harness.wait(
        lambda: harness.condition(NS, neighbour, "Ready").get("status") == "True",
        timeout=90,
        what="the neighbour keeps being served",
    )


UNPULLABLE_IMAGE = "registry.example.com/does-not-exist:1.0"


@pytest.mark.parametrize(
    ("override", "needle", "reason"),
    [
        pytest.param(
            {"placement": {"schedulerName": "no-such-scheduler"}},
            "no-such-scheduler",
            "NotScheduled",
            id="scheduler-nobody-runs",
        ),
        pytest.param(
            {"runtime": {"image": UNPULLABLE_IMAGE}}, "does-not-exist", "ImagePullBackOff", id="image-never-pulls"
        ),
    ],
)
async def test_pods_that_cannot_start(
    harness: OperatorHarness, override: dict[str, Any], needle: str, reason: str
) -> None:
    neighbour = await _healthy_neighbour(harness)
    assert harness.cluster.kubelet is not None
    harness.cluster.kubelet.unpullable_images.add(UNPULLABLE_IMAGE)
    manifest = harness.localize(
        example(
            "bert-embeddings",
            scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0},
            warmPool={"mode": "Off"},
            **override,
        ),
        namespace=NS,
    )
    harness.precompile(manifest)
    await harness.apply(manifest)
    name = manifest["metadata"]["name"]

    def reported() -> bool:
        degraded = harness.condition(NS, name, "Degraded")
        return degraded.get("status") == "True" and needle in degraded.get("message", "")

    await harness.wait(reported, timeout=600, what=f"Degraded names {needle}")
    assert harness.condition(NS, name, "Degraded")["reason"] == reason
    assert harness.condition(NS, name, "Ready")["status"] == "False"
    assert not any(ready(p) for p in harness.pods(NS, name))
    if reason == "NotScheduled":
        assert all(not p["spec"].get("nodeName") for p in harness.pods(NS, name)), "bound without a scheduler"
    await harness.wait(
        lambda: any(e.get("reason") == reason and e.get("type") == "Warning" for e in harness.events(NS, name)),
        timeout=120,
        what="a Warning Event",
    )
    await harness.wait(
        lambda: harness.condition(NS, neighbour, "Ready").get("status") == "True",
        timeout=90,
        what="the neighbour keeps being served",
    )
    assert all(ready(p) for p in harness.pods(NS, neighbour))


async def test_a_service_of_the_same_name_made_by_someone_else_is_left_alone_and_reported(
    harness: OperatorHarness,
) -> None:
    # Helm (or a person) made a Service called as the deployment's would be; patching our labels and
    # selector into it would break what it serves, and its owner would patch it back.
    manifest = harness.localize(
        example(
            "bert-embeddings", scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0}, warmPool={"mode": "Off"}
        ),
        namespace=NS,
    )
    name = manifest["metadata"]["name"]
    theirs = {
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "Helm"}},
        "spec": {"selector": {"app": "legacy-embeddings"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    await harness.ensure_namespace(NS)
    harness.cluster.create("services", theirs, NS)
    harness.precompile(manifest)
    await harness.apply(manifest)

    await harness.wait(
        lambda: "belongs to no controller" in harness.condition(NS, name, "Degraded").get("message", ""),
        timeout=90,
        what="Degraded names the Service it will not touch",
    )
    assert harness.condition(NS, name, "Degraded")["reason"] == "ReconcileError"
    service = harness.cluster.get("services", name, NS)
    assert service is not None
    assert service["spec"]["selector"] == {"app": "legacy-embeddings"}
    assert service["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "Helm"}
    await harness.wait(
        lambda: harness.condition(NS, name, "Ready").get("status") == "True",
        timeout=90,
        what="the deployment is served all the same",
    )
