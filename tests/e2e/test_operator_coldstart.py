"""Measured cold starts on the sandbox: phases in status, and the Auto warm pool sized from them.

Two deployments with the same scripted demand (a metrics source replaying a sawtooth of queue
depth, so the scaling decisions and the warm pool's demand history are identical) run on two
instance types whose kubelets have different configured start-up delays. Both report their phases
in ``status.coldStart`` close to the configured delays; the slow one, whose measured pod cold start
is far beyond the target, keeps more warm pods than the fast one. A pod that flips its readiness
hours into its life, found so by a restarted operator, is no cold start (it is logged). Under
looptime.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from operator_harness import NEURON_SCHEDULER, REPO, OperatorHarness, example

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.planning.signals import MetricSnapshot
from neuronfleet.sandbox import ColdStartProfile, NodeGroup, SandboxCluster

NS = "coldstart"
FAST = ColdStartProfile(image_pull_s=4.0, container_start_s=1.0, readiness_s=5.0, shutdown_s=0.5, jitter=0.05)
SLOW = ColdStartProfile(image_pull_s=40.0, container_start_s=2.0, readiness_s=120.0, shutdown_s=0.5, jitter=0.05)
PROVISIONING_DELAY = 45.0
TARGET_QUEUE_DEPTH = 16
#: The scripted demand: active replicas worth of queue, stepping 1..5 every 40 s in a 200 s cycle.
STEP_SECONDS = 40.0
LEVELS = 5


class SawtoothMetrics:
    """A metrics source whose queue depth follows the same sawtooth for every deployment."""

    def __init__(self, start: float) -> None:
        self.start = start

    async def snapshot(self, dep: InferenceDeployment, now: float) -> tuple[MetricSnapshot | None, str]:
        level = 1 + int((now - self.start) // STEP_SECONDS) % LEVELS
        return MetricSnapshot(now, queue_depth=level * TARGET_QUEUE_DEPTH, in_flight=0.0, utilization=0.0), "scripted"


class ScriptedHarness(OperatorHarness):
    """The operator harness with the scripted sawtooth demand as its metrics source."""

    def __init__(self, cluster: SandboxCluster, workdir: Path, interval: float) -> None:
        super().__init__(cluster, workdir, interval, metrics=lambda: SawtoothMetrics(cluster.clock.wall().timestamp()))


@pytest.fixture
async def scripted(tmp_path: Path) -> AsyncIterator[ScriptedHarness]:
    groups = [
        NodeGroup("fast", "inf2.xlarge", count=0, zones=("us-east-1a",), max_nodes=12),
        NodeGroup("slow", "inf2.8xlarge", count=0, zones=("us-east-1a",), max_nodes=12),
    ]
    async with SandboxCluster(
        node_groups=groups,
        crd_dir=REPO / "crds",
        cold_start_profiles={("inf2.xlarge", None): FAST, ("inf2.8xlarge", None): SLOW},
        provisioning_delay_s=PROVISIONING_DELAY,
        consolidation_delay_s=600.0,
        neuron_scheduler_name=NEURON_SCHEDULER,
    ) as cluster:
        harness = ScriptedHarness(cluster, tmp_path, interval=5.0)
        try:
            await harness.start()
            yield harness
        finally:
            await harness.close()


def manifest(harness: OperatorHarness, name: str, instance_type: str, nodepool: str) -> dict[str, Any]:
    doc = example(
        "bert-embeddings",
        scaling={
            "mode": "Auto",
            "minReplicas": 1,
            "maxReplicas": 20,
            "targetQueueDepth": TARGET_QUEUE_DEPTH,
            "intervalSeconds": 5,
            "panicWindowSeconds": 0,
            # The sawtooth must take the fleet down as well as up, so that new pods (and nodes) keep
            # coming: the CRD's default 30-minute scale-down delay would hold its peak for the whole test.
            "scaleDownDelaySeconds": 0,
        },
        warmPool={
            "mode": "Auto",
            "minPods": 0,
            "maxPods": 6,
            "maxNodePlaceholders": 0,
            "coverage": 0.9,
            "coldStartTargetSeconds": 10,
            "assumedPodColdStartSeconds": 30,
        },
        placement={"instanceTypes": [instance_type], "nodeSelector": {"karpenter.sh/nodepool": nodepool}},
    )
    doc["metadata"]["name"] = name
    return harness.localize(doc, namespace=NS)


def cold_start(harness: OperatorHarness, name: str) -> dict[str, Any]:
    return dict((harness.deployment(NS, name).get("status") or {}).get("coldStart") or {})


def warm_pool(harness: OperatorHarness, name: str) -> dict[str, Any]:
    return dict((harness.deployment(NS, name).get("status") or {}).get("warmPool") or {})


def close(measured: float | None, expected: float, slack: float) -> bool:
    return measured is not None and math.isclose(measured, expected, abs_tol=slack)


async def test_phases_in_status_and_the_auto_warm_pool_follows_the_measured_cold_start(
    scripted: ScriptedHarness,
) -> None:
    harness = scripted
    for name, itype, pool in (("fast", "inf2.xlarge", "fast"), ("slow", "inf2.8xlarge", "slow")):
        doc = manifest(harness, name, itype, pool)
        harness.precompile(doc)
        await harness.apply(doc)

    # Both measure at least 3 pods; pods that waited for a new node give node samples. Both node
    # groups start empty, so each deployment's first pod waits for a whole provisioning, and it is
    # never scaled away (the sawtooth never goes below one replica, and scale-down keeps the unready
    # pods furthest along: the first got the first node). Later pods may join a node already on its
    # way (a few seconds' wait), so the percentiles interpolate: wait until one p90 covers at least
    # half a node's provisioning.
    try:
        await harness.wait(
            lambda: (
                all(cold_start(harness, n).get("pod", {}).get("samples", 0) >= 3 for n in ("fast", "slow"))
                and all(cold_start(harness, n).get("node", {}).get("samples", 0) >= 1 for n in ("fast", "slow"))
                and max(cold_start(harness, n).get("node", {}).get("p90Seconds", 0) for n in ("fast", "slow"))
                >= PROVISIONING_DELAY / 2
            ),
            # Fake time (looptime): a generous deadline costs seconds.
            timeout=2400,
            what="3 pod samples on each deployment and a node sample of a whole provisioning",
        )
    except TimeoutError as timed_out:
        # Say what was measured, so that a rare miss can be traced from the CI log alone.
        raise AssertionError(
            f"{timed_out}; fast: {cold_start(harness, 'fast')}; slow: {cold_start(harness, 'slow')}"
        ) from timed_out
    fast, slow = cold_start(harness, "fast"), cold_start(harness, "slow")
    assert fast["instanceType"] == "inf2.xlarge" and slow["instanceType"] == "inf2.8xlarge"
    # Load (container running -> Ready) is the configured readiness phase, within jitter and the
    # timestamps' one-second resolution.
    assert close(fast["load"]["p50Seconds"], FAST.readiness_s, 1.5), fast
    assert close(slow["load"]["p50Seconds"], SLOW.readiness_s, 0.05 * SLOW.readiness_s + 1), slow
    # Start (scheduled -> running) is at most a pull plus the container start (pulls are cached per node).
    for measured, profile in ((fast, FAST), (slow, SLOW)):
        assert profile.container_start_s - 1 <= measured["start"]["p50Seconds"]
        assert measured["start"]["p90Seconds"] <= (profile.image_pull_s + profile.container_start_s) * 1.05 + 1
        # Node provisioning: at most the configured delay plus the provisioner's reaction; a pod
        # created while a node was already on its way waits only for the rest of it, so the
        # percentiles interpolate between partial and whole waits.
        node = measured["node"]
        assert 0 < node["p50Seconds"] <= node["p90Seconds"] <= PROVISIONING_DELAY + 15, measured
    assert max(m["node"].get("p90Seconds", 0) for m in (fast, slow)) >= PROVISIONING_DELAY / 2
    assert slow["pod"]["p90Seconds"] > SLOW.readiness_s > fast["pod"]["p90Seconds"]

    # The same demand history, different measured cold starts: the slow type keeps more warm pods.
    def pod_cold_start_used(pool: dict[str, Any]) -> float:
        found = re.search(r"pod cold start (\d+)s", pool.get("reason", ""))
        return float(found.group(1)) if found else math.nan

    def sized() -> tuple[dict[str, Any], dict[str, Any]] | None:
        f, s = warm_pool(harness, "fast"), warm_pool(harness, "slow")
        measured = pod_cold_start_used(s) > SLOW.readiness_s and pod_cold_start_used(f) < 30
        return (f, s) if measured and s.get("desiredPods", 0) > f.get("desiredPods", 0) else None

    fast_pool, slow_pool = await harness.wait(
        sized, timeout=600, what="the slow type's warm pool to outgrow the fast's"
    )
    # The assumed 30 s no longer applies to either: each uses its own measured p90.
    assert pod_cold_start_used(fast_pool) == pytest.approx(fast["pod"]["p90Seconds"], abs=8)
    assert slow_pool["desiredPods"] >= 1, slow_pool


async def test_a_readiness_flip_found_by_a_restarted_operator_is_no_cold_start(
    harness: OperatorHarness, caplog: pytest.LogCaptureFixture
) -> None:
    # A pod serving for hours goes unready for a minute and back while the operator is down. The
    # restarted operator has no memory of which pods it measured: it reads the pod's Ready time,
    # hours after its container started, and measured that as a cold start of hours.
    caplog.set_level(logging.INFO, logger="neuronfleet.reconcile")
    doc = example("bert-embeddings", scaling={"mode": "Manual", "replicas": 3}, warmPool={"mode": "Off"})
    doc["metadata"]["name"] = "flips"
    doc = harness.localize(doc, namespace=NS)
    harness.precompile(doc)
    await harness.apply(doc)
    await harness.wait(
        lambda: cold_start(harness, "flips").get("load", {}).get("samples", 0) >= 3,
        timeout=1200,
        what="3 measured cold starts",
    )
    before = cold_start(harness, "flips")
    await harness.crash()
    kubelet = harness.cluster.kubelet
    assert kubelet is not None
    flipped = harness.pods(NS, "flips", "active")[0]["metadata"]["name"]
    await asyncio.sleep(3 * 3600)  # looptime: the pods serve for 3 h (fake time)
    assert kubelet.set_ready(NS, flipped, False)
    await asyncio.sleep(60)
    assert kubelet.set_ready(NS, flipped, True)

    await harness.start()

    def flip_refused() -> bool:
        return any(
            f"pod {flipped} not measured as a cold start" in record.getMessage()
            and "startup budget 1805s" in record.getMessage()
            for record in caplog.records
        )

    await harness.wait(flip_refused, timeout=300, what="the restarted operator refusing the flip")
    # Measuring the 2 other pods again is not enough to replace the 3 samples the status counted:
    # it keeps (and the warm pool would size from) the figures the operator before it wrote.
    assert cold_start(harness, "flips") == before
    # Three pods more: 5 measured since stand alone, and the flip is not among them.
    await harness.scale(NS, "flips", 6)
    after = await harness.wait(
        lambda: (now := cold_start(harness, "flips")).get("load", {}).get("samples", 0) >= 5 and now,
        timeout=1200,
        what="the restarted operator's own measured cold starts",
    )
    budget = 1800 + 5  # the operator's startup probe (180 x 10 s) and one readiness period
    assert after["load"]["samples"] == 5, after
    assert after["load"]["p90Seconds"] < budget and after["pod"]["p90Seconds"] < budget, after
