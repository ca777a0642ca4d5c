"""The status tells the truth and only changes when something changed (the real operator, sandbox)."""

from __future__ import annotations

from typing import Any

from operator_harness import OperatorHarness, example

NS = "status"


def events_for(harness: OperatorHarness, name: str, reason: str | None = None) -> list[dict[str, Any]]:
    events = harness.cluster.list("events", NS)
    return [
        e
        for e in events
        if (e.get("involvedObject") or e.get("regarding") or {}).get("name") == name
        and (reason is None or e.get("reason") == reason)
    ]


def manual(name: str, replicas: int = 1, **overrides: Any) -> dict[str, Any]:
    manifest = example(
        "bert-embeddings",
        scaling={"mode": "Manual", "replicas": replicas, "minReplicas": 0},
        warmPool={"mode": "Off"},
        **overrides,
    )
    manifest["metadata"]["name"] = name
    return manifest


async def test_a_spec_that_becomes_unservable_drops_its_placement(harness: OperatorHarness) -> None:
    """Regression: status.placement said inf2.xlarge after the spec stopped fitting any allowed type."""
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

    await harness.patch_spec(NS, "stale", {"model": {"neuronCoresPerReplica": 4}})
    await harness.wait(
        lambda: harness.condition(NS, "stale", "Scheduled").get("reason") == "NoInstanceTypeFits",
        timeout=60,
        what="Scheduled=False NoInstanceTypeFits",
    )
    status = harness.deployment(NS, "stale")["status"]
    assert "placement" not in status, status.get("placement")
