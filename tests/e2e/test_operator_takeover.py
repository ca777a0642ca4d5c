"""A restarted operator (or a new leader) keeps what its predecessor held: on the sandbox, under looptime.

Two Auto deployments whose metrics never give an arrival rate, so no service rate is learned and
the status holds no checkpoint (``status.autoscaler``), as on a new deployment, revision or
placement:

- ``held``: busy, then idle; its 300 s scale-down window holds the fleet. The operator is killed
  inside the window and started again: the new one holds the fleet for the rest of the window,
  where it used to drop it to ``minReplicas`` at its first decision;
- ``pool``: a sawtooth demand the fleet follows (no scale-down window), so the Auto warm pool covers
  the growth. After the restart the warm pods are kept (its demand history was lost with the
  process), where they used to be deleted at the first decision.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from operator_harness import NEURON_SCHEDULER, REPO, OperatorHarness, example, inf2_node_groups

from neuronfleet.api.v1alpha1 import GROUP, InferenceDeployment
from neuronfleet.planning.signals import MetricSnapshot
from neuronfleet.sandbox import ColdStartProfile, SandboxCluster

NS = "takeover"
TARGET_QUEUE_DEPTH = 16
#: The sawtooth: replicas worth of queue, stepping 1..LEVELS every STEP_SECONDS.
STEP_SECONDS = 20.0
LEVELS = 5
HELD_REPLICAS = 6
#: A pod cold start (~1 min) well beyond the warm pool's 10 s target, so that the pool covers the
#: sawtooth's growth within it.
SLOW_START = ColdStartProfile(image_pull_s=10.0, container_start_s=1.0, readiness_s=50.0, shutdown_s=0.5, jitter=0.05)


class Demand:
    """The scripted metrics: ``held`` busy at HELD_REPLICAS until :attr:`busy` is cleared, ``pool``
    a sawtooth; each deployment's decisions (one snapshot each) are counted."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.busy = True
        self.decisions: Counter[str] = Counter()

    def source(self) -> Demand:
        return self

    async def snapshot(self, dep: InferenceDeployment, now: float) -> tuple[MetricSnapshot | None, str]:
        name = dep.name
        self.decisions[name] += 1
        if name == "held":
            level = HELD_REPLICAS if self.busy else 0
        else:
            level = 1 + int((now - self.start) // STEP_SECONDS) % LEVELS
        return MetricSnapshot(now, queue_depth=level * TARGET_QUEUE_DEPTH, in_flight=0.0, utilization=0.0), "scripted"


@pytest.fixture
async def scripted(tmp_path: Path) -> AsyncIterator[tuple[OperatorHarness, Demand]]:
    async with SandboxCluster(
        node_groups=inf2_node_groups(),
        crd_dir=REPO / "crds",
        cold_start=SLOW_START,
        provisioning_delay_s=5.0,
        neuron_scheduler_name=NEURON_SCHEDULER,
    ) as cluster:
        demand = Demand(cluster.clock.wall().timestamp())
        harness = OperatorHarness(cluster, tmp_path, interval=5.0, metrics=demand.source)
        try:
            await harness.start()
            yield harness, demand
        finally:
            await harness.close()


def manifest(harness: OperatorHarness, name: str, scale_down_delay: int, pool: dict[str, Any]) -> dict[str, Any]:
    doc = example(
        "bert-embeddings",
        scaling={
            "mode": "Auto",
            "minReplicas": 1,
            "maxReplicas": 12,
            "targetQueueDepth": TARGET_QUEUE_DEPTH,
            "intervalSeconds": 5,
            "panicWindowSeconds": 0,
            "scaleDownDelayMode": "Fixed",
            "scaleDownDelaySeconds": scale_down_delay,
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": scale_down_delay}},
        },
        warmPool=pool,
    )
    doc["metadata"]["name"] = name
    return harness.localize(doc, namespace=NS)


def status(harness: OperatorHarness, name: str) -> dict[str, Any]:
    return dict(harness.deployment(NS, name).get("status") or {})


def live_pods(harness: OperatorHarness, name: str, role: str | None = None) -> set[str]:
    """Names of the deployment's pods (of ``role``) not being deleted."""
    return {p["metadata"]["name"] for p in harness.pods(NS, name, role)}


async def test_a_restarted_operator_holds_the_fleet_and_the_warm_pool_it_finds(
    scripted: tuple[OperatorHarness, Demand],
) -> None:
    harness, demand = scripted
    held = manifest(harness, "held", 300, {"mode": "Off"})
    pool = manifest(
        harness,
        "pool",
        0,
        {
            "mode": "Auto",
            "minPods": 0,
            "maxPods": 4,
            "maxNodePlaceholders": 0,
            "coverage": 0.9,
            "coldStartTargetSeconds": 10,
            "assumedPodColdStartSeconds": 60,
        },
    )
    for doc in (held, pool):
        harness.precompile(doc)
        await harness.apply(doc)

    await harness.wait(
        lambda: (
            status(harness, "held").get("readyReplicas") == HELD_REPLICAS
            and len(live_pods(harness, "pool", "warm")) >= 2
            and status(harness, "pool").get("warmPool", {}).get("desiredPods", 0) >= 2
        ),
        timeout=1200,
        what=f"{HELD_REPLICAS} ready replicas of held, 2 warm pods of pool",
    )
    # Idle: the old operator holds the fleet in its window (it decides a few times first).
    demand.busy = False
    seen = demand.decisions["held"]
    await harness.wait(lambda: demand.decisions["held"] >= seen + 3, timeout=60, what="3 decisions on idle")
    assert status(harness, "held")["desiredReplicas"] == HELD_REPLICAS
    assert "autoscaler" not in status(harness, "held") and "autoscaler" not in status(harness, "pool")

    await harness.crash()
    warm = live_pods(harness, "pool", "warm")
    kept = status(harness, "pool")["warmPool"]["desiredPods"]
    await harness.start()
    seen_each = dict(demand.decisions)
    await harness.wait(
        lambda: all(demand.decisions[n] >= seen_each[n] + 4 for n in ("held", "pool")),
        timeout=120,
        what="4 decisions of the restarted operator on each deployment",
    )
    after = status(harness, "held")
    assert after["desiredReplicas"] == HELD_REPLICAS, after.get("lastScaleReason")
    assert status(harness, "pool")["warmPool"]["desiredPods"] >= kept, status(harness, "pool")["warmPool"]
    # The pool found is kept: its pods (promoted, when the demand rose, is fine), or as many warm pods.
    # Which pods: the sawtooth's scale-downs demote active pods into the pool, and the fleet plan may
    # then delete a found warm pod rather than a demoted one (seen once in a loaded CI run; the pool's
    # size held). A scale-down of more active pods than the pool takes drains the rest, so a
    # draining pod is not a fault; a found warm pod draining counts as gone. Before the hold, the pool
    # fell to minPods (0) at the first decision.
    kept_roles = {"active", "warm"}
    remaining = {
        p["metadata"]["name"]
        for p in harness.pods(NS, "pool")
        if p["metadata"]["labels"][f"{GROUP}/role"] in kept_roles
    }
    gone = warm - remaining
    warm_now = live_pods(harness, "pool", "warm")
    assert not gone or len(warm_now) >= kept, f"gone after the restart: {sorted(gone)}; warm now {sorted(warm_now)}"

    # The window ends 300 s after the takeover at the latest: the idle fleet is then released.
    await harness.wait(
        lambda: status(harness, "held").get("desiredReplicas") == 1, timeout=400, what="held released to 1"
    )
