"""High availability: two operator instances with Kopf peering on one sandbox cluster.

Both run the real operator (Kopf + reconcile) in this process, peering through a
ClusterKopfPeering as the chart deploys them (``--peering neuronfleet``), with distinct priorities
(the chart draws one per replica: Kopf pauses every instance that sees a live peer of the same
priority). The test checks:

- only the higher-priority instance acts: the standby's reconcile count stays 0 while the active one
  lives, through the fleet coming up and many reconciles of the active one;
- a crash of the active instance (its keep-alives stop; no goodbye) hands over to the standby once
  the crashed peer's keep-alive expires, i.e. within the peering lifetime (plus one keep-alive
  round); the standby then reconciles and serves a scale-up;
- a clean stop (Kopf removes itself from the peering) hands over at once;
- at no moment are there more pods than the spec asks for (no duplicates from two actors).

Kopf's peering compares keep-alive timestamps with the wall clock (``datetime.now``), not the loop's
clock, so this test runs in real time (looptime off) with a short peering lifetime.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_peering import LIFETIME, NS, WARM, Instance, PodCeiling, converged, ha_manifest, peers
from operator_harness import OperatorHarness

from neuronfleet.sandbox import SandboxCluster

ACTIVE = 2


@pytest.mark.looptime(False)
@pytest.mark.timeout(120)
async def test_one_instance_acts_and_a_crash_hands_over(
    peering_cluster: SandboxCluster, silenced: set[str], tmp_path: Path
) -> None:
    cluster = peering_cluster
    harness = OperatorHarness(cluster, tmp_path)
    await harness.ensure_priority_classes()
    active = Instance(harness, "operator-a", priority=200)
    standby = Instance(harness, "operator-b", priority=100)
    try:
        await active.start()
        await standby.start()
        await harness.wait(lambda: {"operator-a", "operator-b"} <= set(peers(cluster)), timeout=30, what="both peers")

        manifest = ha_manifest(harness, ACTIVE)
        name = manifest["metadata"]["name"]
        harness.precompile(manifest)
        ceiling = PodCeiling(cluster, name)
        await harness.apply(manifest)
        await harness.wait(lambda: converged(harness, name, ACTIVE), timeout=60, what="the fleet up")
        # Several more of the active instance's periodic reconciles: the standby still did none.
        seen = active.reconciles
        await harness.wait(lambda: active.reconciles >= seen + 3, timeout=30, what="more reconciles")
        assert active.reconciles > 0
        assert standby.reconciles == 0

        # The active instance dies. Its last keep-alive expires within LIFETIME; the standby takes over.
        await active.crash(silenced)
        crashed_at = cluster.clock.monotonic()
        await harness.wait(
            lambda: standby.reconciles > 0, timeout=LIFETIME + 5, what="the standby acting after the crash"
        )
        assert cluster.clock.monotonic() - crashed_at >= 0  # took over only after the crash
        # The new leader serves changes: a scale-up through the scale subresource.
        await harness.scale(NS, name, ACTIVE + 1)
        await harness.wait(lambda: converged(harness, name, ACTIVE + 1), timeout=60, what="scaled up by the standby")
        assert ceiling.most == ACTIVE + 1 + WARM, f"{ceiling.most} pods existed at once"
        assert converged(harness, name, ACTIVE + 1)
    finally:
        await active.close()
        await standby.close()
        await harness.close()


@pytest.mark.looptime(False)
@pytest.mark.timeout(120)
async def test_a_clean_stop_hands_over_at_once(
    peering_cluster: SandboxCluster, silenced: set[str], tmp_path: Path
) -> None:
    cluster = peering_cluster
    harness = OperatorHarness(cluster, tmp_path)
    await harness.ensure_priority_classes()
    active = Instance(harness, "operator-a", priority=200)
    standby = Instance(harness, "operator-b", priority=100)
    try:
        await active.start()
        await standby.start()
        manifest = ha_manifest(harness, 1)
        name = manifest["metadata"]["name"]
        harness.precompile(manifest)
        ceiling = PodCeiling(cluster, name)
        await harness.apply(manifest)
        await harness.wait(lambda: converged(harness, name, 1), timeout=60, what="the fleet up")
        assert standby.reconciles == 0

        await active.stop()
        goodbye = peers(cluster).get("operator-a")
        assert goodbye is None or goodbye.get("lifetime") == 0, goodbye
        # Kopf's goodbye (lifetime 0) marks the peer dead at once: no need to wait out LIFETIME.
        await harness.wait(lambda: standby.reconciles > 0, timeout=LIFETIME + 5, what="the standby acting")
        await harness.scale(NS, name, 2)
        await harness.wait(lambda: converged(harness, name, 2), timeout=60, what="scaled up by the standby")
        assert ceiling.most == 2 + WARM, f"{ceiling.most} pods existed at once"
    finally:
        await active.close()
        await standby.close()
        await harness.close()
