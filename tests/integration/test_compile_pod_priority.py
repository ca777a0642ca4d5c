"""A compile Job's pod beside the fleet's pods on an Inf2 node: it preempts no node placeholder.

A compile pod named no PriorityClass, so it had priority 0 and the default preemption policy:
where it did not fit it preempted a placeholder (-1) and took the spare Inf2 capacity the warm
pool keeps for serving replicas. It now names the chart's compile class (0, preemptionPolicy
Never). Run in the sandbox (its scheduler preempts as kube-scheduler does, admission resolves the
PriorityClass), with the classes ``neuronfleet sandbox`` and the chart create.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.kube.jobs import build_compile_job
from neuronfleet.planning.compile import compile_request
from neuronfleet.sandbox import ColdStartProfile, NodeGroup, SandboxCluster

pytestmark = pytest.mark.looptime

REPO = Path(__file__).resolve().parents[2]
PROFILE = ColdStartProfile(image_pull_s=20.0, container_start_s=2.0, readiness_s=30.0, shutdown_s=1.0, jitter=0.0)
NEURON_TOLERATION = {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}


def _compile_pod() -> dict[str, Any]:
    """The pod the Job controller makes from the compile Job's template (2 CPUs)."""
    dep = InferenceDeployment.model_validate(yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text()))
    dep.metadata.uid = "0f6c3f5e-1111-2222-3333-444455556666"
    dep.spec.compile.cpu, dep.spec.compile.memory = "2", "4Gi"
    template = build_compile_job(dep, compile_request(dep.spec, "s3://artifacts/compiled/"))["spec"]["template"]
    return {"metadata": {**template["metadata"], "name": "compile"}, "spec": template["spec"]}


def _placeholder() -> dict[str, Any]:
    """A node placeholder holding most of the node's CPU (3 of inf2.xlarge's 3.92 allocatable)."""
    return {
        "metadata": {"name": "placeholder"},
        "spec": {
            "priorityClassName": "neuronfleet-placeholder",
            "tolerations": [NEURON_TOLERATION],
            "containers": [
                {
                    "name": "placeholder",
                    "image": "neuronserve:1",
                    "command": ["sleep", "infinity"],
                    "resources": {
                        "requests": {"cpu": "3", "memory": "4Gi", "aws.amazon.com/neuroncore": "1"},
                        "limits": {"aws.amazon.com/neuroncore": "1"},
                    },
                }
            ],
        },
    }


def _scheduled_false(pod: dict[str, Any] | None) -> bool:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)


async def test_a_compile_pod_that_does_not_fit_waits_instead_of_preempting_a_placeholder() -> None:
    async with SandboxCluster(
        node_groups=[NodeGroup("inf2", "inf2.xlarge", count=1)],
        cold_start=PROFILE,
        run_provisioner=False,
        priority_classes=True,
    ) as cluster:
        cluster.create("pods", _placeholder(), "default")
        await cluster.wait_for(
            lambda: ((cluster.get("pods", "placeholder", "default") or {}).get("spec") or {}).get("nodeName"),
            timeout=120,
            what="placeholder bound",
        )
        cluster.create("pods", _compile_pod(), "default")

        def settled() -> bool:
            """The scheduler has decided: the compile pod is unschedulable, or the placeholder is going."""
            placeholder = cluster.get("pods", "placeholder", "default")
            return (
                placeholder is None
                or bool(placeholder["metadata"].get("deletionTimestamp"))
                or (_scheduled_false(cluster.get("pods", "compile", "default")))
            )

        await cluster.wait_for(settled, timeout=120, what="the compile pod scheduled or refused")
        placeholder = cluster.get("pods", "placeholder", "default")
        assert placeholder is not None and not placeholder["metadata"].get("deletionTimestamp"), "placeholder preempted"
        compile_pod = cluster.get("pods", "compile", "default")
        assert compile_pod is not None and not compile_pod["spec"].get("nodeName")
        assert (compile_pod["spec"]["priority"], compile_pod["spec"]["preemptionPolicy"]) == (0, "Never")
        assert cluster.scheduler is not None and cluster.scheduler.preemptions == 0
