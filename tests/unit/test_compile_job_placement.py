"""Where a compile Job's pod may run, and what happens to it beside the fleet's pods.

The pod is evaluated with the sandbox scheduler's predicates (kube-scheduler's NodeAffinity filter
and score) against the labels real EKS nodes carry: Karpenter-launched or from a managed node group
(no ``karpenter.k8s.aws/*`` labels), amd64 or Graviton (arm64).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.kube.builders import build_priority_classes
from neuronfleet.kube.jobs import build_compile_job
from neuronfleet.planning.catalog import INF2_INSTANCE_TYPES
from neuronfleet.planning.compile import compile_request
from neuronfleet.sandbox.scheduling import node_matches, preferred_affinity_weight

REPO = Path(__file__).resolve().parents[2]


def _compile_pod() -> dict[str, Any]:
    dep = InferenceDeployment.model_validate(yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text()))
    dep.metadata.uid = "0f6c3f5e-1111-2222-3333-444455556666"
    job = build_compile_job(dep, compile_request(dep.spec, "s3://artifacts/compiled/"))
    return {"metadata": job["spec"]["template"]["metadata"], "spec": job["spec"]["template"]["spec"]}


def _karpenter(itype: str, arch: str) -> dict[str, str]:
    return {
        "node.kubernetes.io/instance-type": itype,
        "kubernetes.io/arch": arch,
        "karpenter.k8s.aws/instance-family": itype.split(".")[0],
        "karpenter.sh/nodepool": "pool",
    }


def _managed(itype: str, arch: str) -> dict[str, str]:
    return {"node.kubernetes.io/instance-type": itype, "kubernetes.io/arch": arch, "eks.amazonaws.com/nodegroup": "ng"}


NODES = {
    "karpenter inf2.xlarge": _karpenter("inf2.xlarge", "amd64"),
    "karpenter m7g.2xlarge (Graviton)": _karpenter("m7g.2xlarge", "arm64"),
    "karpenter m7i.2xlarge": _karpenter("m7i.2xlarge", "amd64"),
    "managed inf2.8xlarge": _managed("inf2.8xlarge", "amd64"),
    "managed c7g.4xlarge (Graviton)": _managed("c7g.4xlarge", "arm64"),
    "managed m5.2xlarge": _managed("m5.2xlarge", "amd64"),
}


def test_a_compile_pod_never_lands_on_an_arm64_node() -> None:
    """The Neuron image is amd64 only: on Graviton it fails with `exec format error` until its
    backoffLimit is spent, so an arm64 node must not be a candidate at all."""
    pod = _compile_pod()
    allowed = {name for name, labels in NODES.items() if node_matches(pod, labels)}
    assert allowed == {name for name, labels in NODES.items() if labels["kubernetes.io/arch"] == "amd64"}


@pytest.mark.parametrize("itype", sorted(INF2_INSTANCE_TYPES))
def test_a_compile_pod_prefers_an_ordinary_node_to_an_inf2_one_however_launched(itype: str) -> None:
    """Tracing needs no Neuron device: an ordinary node is preferred to an Inf2 one, Karpenter's
    (labelled with its instance family) or a managed node group's (only its instance type)."""
    pod = _compile_pod()
    ordinary = min(
        preferred_affinity_weight(pod, NODES[name]) for name in ("karpenter m7i.2xlarge", "managed m5.2xlarge")
    )
    for inf2 in (_karpenter(itype, "amd64"), _managed(itype, "amd64")):
        assert node_matches(pod, inf2), "a cluster of only Inf2 nodes must still compile"
        assert preferred_affinity_weight(pod, inf2) < ordinary, inf2


def test_a_compile_pod_preempts_nothing_and_a_disrupted_one_costs_no_retry() -> None:
    """Its PriorityClass (the operator's builder, which the chart and the sandbox install) sits
    between the placeholders and the serving pods and never preempts; a compile pod failed by a
    disruption (preempted by a serving pod, evicted by a drain or a consolidation) is retried
    without spending the Job's backoffLimit, which is for compiles that fail by themselves."""
    dep = InferenceDeployment.model_validate(yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text()))
    dep.metadata.uid = "0f6c3f5e-1111-2222-3333-444455556666"
    job = build_compile_job(dep, compile_request(dep.spec, "s3://artifacts/compiled/"))
    kubernetes_validate.validate(job, "1.34", strict=True)
    classes = {pc["metadata"]["name"]: pc for pc in build_priority_classes()}
    pod = job["spec"]["template"]["spec"]
    compile_class = classes[pod["priorityClassName"]]
    assert (compile_class["value"], compile_class["preemptionPolicy"]) == (0, "Never")
    assert classes["neuronfleet-placeholder"]["value"] < 0 < classes["neuronfleet-active"]["value"]
    # A pod failure policy needs the template's restartPolicy Never (the API server refuses it otherwise).
    assert pod["restartPolicy"] == "Never"
    assert job["spec"]["podFailurePolicy"]["rules"] == [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]
