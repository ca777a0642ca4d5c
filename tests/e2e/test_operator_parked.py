"""Parking a model as the CRD advises (``scaling.mode`` Manual, replicas 0) leaves no pod on an Inf2
node: its Auto warm pool goes too, and ``status.warmPool.reason`` says why.

Reviewer's finding: parked so, a model with an Auto warm pool kept its ``minPods`` warm pod running,
and with it an inf2 node.
"""

from __future__ import annotations

from operator_harness import OperatorHarness, example

from neuronfleet.api.v1alpha1 import GROUP

ROLE = f"{GROUP}/role"


async def test_a_parked_model_keeps_no_warm_pod(harness: OperatorHarness) -> None:
    doc = example(
        "bert-embeddings",
        scaling={"mode": "Auto", "minReplicas": 1, "maxReplicas": 2},
        warmPool={"mode": "Auto", "minPods": 1, "maxPods": 2, "maxNodePlaceholders": 1},
    )
    doc["metadata"]["name"] = "parked"
    await harness.apply(harness.localize(doc))

    def serving_pods() -> list[tuple[str, str]]:
        # The compile Job's pod has no role: it is no serving, warm or placeholder pod.
        return sorted(
            (p["metadata"]["labels"][ROLE], p["metadata"]["name"])
            for p in harness.pods("default", "parked")
            if ROLE in p["metadata"]["labels"]
        )

    await harness.wait(lambda: harness.pods("default", "parked", "warm"), 600, "a warm pod beside the replica")
    await harness.patch_spec("default", "parked", {"scaling": {"mode": "Manual", "replicas": 0, "minReplicas": 0}})

    def parked() -> bool:
        warm_pool = (harness.deployment("default", "parked").get("status") or {}).get("warmPool") or {}
        return not serving_pods() and str(warm_pool.get("reason", "")).startswith("parked: Manual replicas 0")

    await harness.wait_settled("default", "parked", parked, 600, "no pod left once parked")
    warm_pool = harness.deployment("default", "parked")["status"]["warmPool"]
    assert (warm_pool["desiredPods"], warm_pool["desiredPlaceholders"]) == (0, 0), warm_pool
