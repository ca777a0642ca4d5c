"""The operator's own metrics across a Kopf peering hand-over: a replica exports per-deployment
series only for the deployments whose daemons run on it.

A paused replica (a peer of higher priority runs) kept the last series of each deployment (stale
once the peer scaled), kept those of a deployment deleted while it was paused for good (it never
sees the DELETED event), and counted the peer's scale-up again in
``neuronfleet_scaling_decisions_total`` once it resumed (it remembered the desired count from before).

Real time, not looptime: Kopf's peering compares keep-alives with the wall clock.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_peering import NS, Instance, converged, ha_manifest
from operator_harness import OperatorHarness

from neuronfleet.api.v1alpha1 import GROUP, PLURAL
from neuronfleet.metrics.operator_metrics import OperatorMetrics
from neuronfleet.sandbox import SandboxCluster


def series(instance: Instance, name: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample the instance exports for the deployment ``name``."""
    assert instance.context is not None and instance.context.metrics is not None
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in instance.context.metrics.registry.collect()
        for s in family.samples
        if s.labels.get("name") == name
    }


def scale_ups(instance: Instance, name: str) -> float:
    assert instance.context is not None and instance.context.metrics is not None
    return sum(
        s.value
        for family in instance.context.metrics.registry.collect()
        for s in family.samples
        if s.name == "neuronfleet_scaling_decisions_total"
        and s.labels.get("name") == name
        and s.labels.get("direction") == "up"
    )


async def start_with_metrics(instance: Instance) -> None:
    context = await instance.start()
    context.metrics = OperatorMetrics()


@pytest.mark.looptime(False)
@pytest.mark.timeout(150)
async def test_a_paused_replica_exports_no_series_of_deployments_a_peer_runs_nor_of_deleted_ones(
    peering_cluster: SandboxCluster, silenced: set[str], tmp_path: Path
) -> None:
    cluster = peering_cluster
    harness = OperatorHarness(cluster, tmp_path)
    await harness.ensure_priority_classes()
    a = Instance(harness, "operator-a", priority=100)
    b = Instance(harness, "operator-b", priority=200)  # a new pod that outranks A
    try:
        await start_with_metrics(a)
        deleted = ha_manifest(harness, 1)
        kept = ha_manifest(harness, 1)
        kept["metadata"]["name"] = "kept"
        for manifest in (deleted, kept):
            harness.precompile(manifest)
            await harness.apply(manifest)
        name = deleted["metadata"]["name"]
        await harness.wait(lambda: converged(harness, name, 1), timeout=60, what="the fleet up, by A")
        await harness.wait(lambda: series(a, name), timeout=30, what="A's series of the deployment")

        await start_with_metrics(b)
        await harness.wait(lambda: b.reconciles > 0, timeout=30, what="B acting")
        # Paused, A drops the series of every deployment (B's are the current ones).
        await harness.wait(lambda: not series(a, name) and not series(a, "kept"), timeout=30, what="A's series gone")

        # Deleted while A is paused: A never sees the DELETED event.
        cluster.delete(PLURAL, name, NS, group=GROUP)
        await harness.wait(lambda: cluster.get(PLURAL, name, NS, group=GROUP) is None, timeout=60, what="deleted")
        await harness.wait(lambda: not series(b, name), timeout=30, what="B forgets the deleted deployment")

        await b.stop()  # B leaves: A resumes, and exports the deployment that is left
        await harness.wait(lambda: series(a, "kept"), timeout=30, what="A acting again")
        assert not series(a, name), "A exports a deployment deleted while it was paused"
    finally:
        await a.close()
        await b.close()
        await harness.close()


@pytest.mark.looptime(False)
@pytest.mark.timeout(150)
async def test_one_scale_up_is_counted_once_across_the_replicas(
    peering_cluster: SandboxCluster, silenced: set[str], tmp_path: Path
) -> None:
    cluster = peering_cluster
    harness = OperatorHarness(cluster, tmp_path)
    await harness.ensure_priority_classes()
    a = Instance(harness, "operator-a", priority=100)
    b = Instance(harness, "operator-b", priority=200)
    try:
        await start_with_metrics(a)
        manifest = ha_manifest(harness, 2)
        name = manifest["metadata"]["name"]
        harness.precompile(manifest)
        await harness.apply(manifest)
        await harness.wait(lambda: converged(harness, name, 2), timeout=60, what="the fleet up, by A")
        await start_with_metrics(b)
        await harness.wait(lambda: b.reconciles > 0, timeout=30, what="B acting")
        await harness.scale(NS, name, 3)  # one scale-up, B's decision
        await harness.wait(lambda: converged(harness, name, 3), timeout=60, what="scaled up by B")
        await harness.wait(lambda: scale_ups(b, name) == 1, timeout=30, what="B counting its scale-up")
        await b.stop()  # B leaves (its node is drained), scraped a last time before: A leads again
        seen = a.reconciles
        await harness.wait(lambda: a.reconciles >= seen + 2, timeout=30, what="A acting again")
        assert scale_ups(a, name) == 0, "A counts B's scale-up as its own scaling decision"
    finally:
        await a.close()
        await b.close()
        await harness.close()
