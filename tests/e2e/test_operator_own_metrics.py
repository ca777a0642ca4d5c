"""The operator's own /metrics endpoint reports reconciles and the fleet its status describes."""

from __future__ import annotations

import aiohttp
from operator_harness import OperatorHarness, example
from prometheus_client.parser import text_string_to_metric_families

from neuronfleet.metrics.operator_metrics import OperatorMetrics, serve

NS = "metrics"


async def test_metrics_endpoint_follows_the_status(harness: OperatorHarness) -> None:
    assert harness.context is not None
    harness.context.metrics = OperatorMetrics()
    port = serve(harness.context.metrics, 0, address="127.0.0.1")
    manifest = harness.localize(example("batch-classifier-fixed", scaling={"replicas": 3}), namespace=NS)
    harness.precompile(manifest)
    await harness.apply(manifest)
    name = manifest["metadata"]["name"]
    await harness.wait(lambda: harness.condition(NS, name, "Ready").get("status") == "True", timeout=90, what="Ready")
    await harness.wait(lambda: harness.deployment(NS, name)["status"]["readyReplicas"] == 3, timeout=30, what="3")

    async def scrape() -> dict[tuple[str, str], float]:
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
        samples: dict[tuple[str, str], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.labels.get("name") == name:
                    keys = ("kind", "outcome", "direction", "reason")
                    label = next((sample.labels[k] for k in keys if k in sample.labels), "")
                    samples[(sample.name, label)] = sample.value
        return samples

    # The status reaches the store before its reconcile returns and records it: wait for two more.
    seen = harness.context.reconciles
    await harness.wait(
        lambda: harness.context is not None and harness.context.reconciles >= seen + 2,
        timeout=60,
        what="two more reconciles",
    )
    samples = await scrape()
    assert samples[("neuronfleet_replicas", "desired")] == 3
    assert samples[("neuronfleet_replicas", "ready")] == 3
    assert samples[("neuronfleet_reconciles_total", "ok")] >= 2
    # The Available condition: one series, labelled by its current reason.
    assert {k: v for k, v in samples.items() if k[0] == "neuronfleet_available"} == {
        ("neuronfleet_available", "ReplicasReady"): 1
    }

    await harness.scale(NS, name, 4)
    await harness.wait(lambda: harness.deployment(NS, name)["status"]["desiredReplicas"] == 4, timeout=60, what="4")
    seen = harness.context.reconciles
    await harness.wait(
        lambda: harness.context is not None and harness.context.reconciles >= seen + 2,
        timeout=60,
        what="two more reconciles",
    )
    samples = await scrape()
    assert samples[("neuronfleet_replicas", "desired")] == 4
    assert samples[("neuronfleet_scaling_decisions_total", "up")] == 1
