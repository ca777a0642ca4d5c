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

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kopf
import pytest
from kopf._core.engines import peering

from conftest import FAST_START, OperatorHarness, example, ready
from neuronfleet.api.v1alpha1 import GROUP
from neuronfleet.handlers import OperatorContext
from neuronfleet.run_command import build_context, operator_tasks
from neuronfleet.sandbox import NodeGroup, SandboxCluster
from neuronfleet.sandbox.store import WatchEvent

REPO = Path(__file__).resolve().parents[2]
NS = "ha"
PEERING = "neuronfleet"
#: Seconds a keep-alive is valid (Kopf's default is 60; short here because the test runs in real time).
LIFETIME = 4
ACTIVE, WARM = 2, 1


class Instance:
    """One operator instance with its own peering identity and priority (one pod of the chart)."""

    def __init__(self, harness: OperatorHarness, identity: str, priority: int) -> None:
        self.harness = harness
        self.identity = identity
        self.priority = priority
        self.context: OperatorContext | None = None
        self.tasks: list[asyncio.Task[Any]] = []

    async def start(self) -> None:
        cluster = self.harness.cluster
        self.context = await build_context(self.harness.settings, cluster.kubeconfig_path, clock=cluster.clock.wall)
        # Kopf takes its peering identity from $POD_ID when it spawns its tasks (as in the chart).
        previous = os.environ.get("POD_ID")
        os.environ["POD_ID"] = self.identity
        try:
            self.tasks = list(
                await operator_tasks(
                    self.context,
                    peering_name=PEERING,
                    priority=self.priority,
                    in_process=True,
                )
            )
        finally:
            if previous is None:
                os.environ.pop("POD_ID", None)
            else:
                os.environ["POD_ID"] = previous

    @property
    def reconciles(self) -> int:
        return self.context.reconciles if self.context is not None else 0

    async def crash(self, silenced: set[str]) -> None:
        """A killed pod: no goodbye in the peering object, tasks gone wherever they were."""
        silenced.add(self.identity)
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks = []

    async def stop(self) -> None:
        """A clean exit: cancelled, Kopf's keep-alive task writes its goodbye (lifetime 0) on the way out."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks = []

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.context is not None:
            await self.context.reconciler.kube.close()


@pytest.fixture
def silenced(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Identities whose peering writes are dropped: a crashed process writes nothing more.

    Cancelling Kopf's tasks runs its keep-alive's ``finally`` (a last write with lifetime 0, its
    clean-exit goodbye); a SIGKILLed pod never gets there. Dropping that write emulates the kill.
    """
    identities: set[str] = set()
    real_touch = peering.touch

    async def touch(*, identity: peering.Identity, **kwargs: Any) -> None:
        if identity not in identities:
            await real_touch(identity=identity, **kwargs)

    monkeypatch.setattr(peering, "touch", touch)

    def settings() -> kopf.OperatorSettings:
        configured = real_settings()
        configured.peering.lifetime = LIFETIME
        return configured

    real_settings = kopf.OperatorSettings
    monkeypatch.setattr(kopf, "OperatorSettings", settings)
    return identities


@pytest.fixture
async def cluster() -> AsyncIterator[SandboxCluster]:
    groups = [NodeGroup("inf2-serving", "inf2.xlarge", count=3, zones=("us-east-1a", "us-east-1b"), max_nodes=6)]
    async with SandboxCluster(
        node_groups=groups,
        crd_dir=REPO / "crds",
        kopf_peering=True,
        cold_start=FAST_START,
        provisioning_delay_s=2.0,
        neuron_scheduler_name="my-scheduler",
    ) as cluster:
        cluster.create("clusterkopfpeerings", {"metadata": {"name": PEERING}}, group="kopf.dev")
        yield cluster


class PodCeiling:
    """The most pods of the deployment that existed at once (terminating ones excluded)."""

    def __init__(self, cluster: SandboxCluster, name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.most = 0
        cluster.store.listeners.append(self.observe)

    def observe(self, event: WatchEvent) -> None:
        if event.resource != ("", "pods"):
            return
        pods = [
            p
            for p in self.cluster.list("pods", NS)
            if (p["metadata"].get("labels") or {}).get(f"{GROUP}/deployment") == self.name
            and not p["metadata"].get("deletionTimestamp")
        ]
        self.most = max(self.most, len(pods))


def _manifest(harness: OperatorHarness, replicas: int) -> dict[str, Any]:
    return harness.localize(
        example(
            "bert-embeddings",
            scaling={"mode": "Manual", "replicas": replicas, "minReplicas": 0},
            warmPool={"mode": "Fixed", "pods": WARM, "nodePlaceholders": 0},
        ),
        namespace=NS,
    )


def _converged(harness: OperatorHarness, name: str, active: int) -> bool:
    pods = harness.pods(NS, name)
    roles = [p["metadata"]["labels"][f"{GROUP}/role"] for p in pods]
    return (
        roles.count("active") == active
        and roles.count("warm") == WARM
        and len(pods) == active + WARM
        and all(ready(p) for p in pods)
    )


def _peers(cluster: SandboxCluster) -> dict[str, Any]:
    obj = cluster.get("clusterkopfpeerings", PEERING, group="kopf.dev") or {}
    return dict(obj.get("status") or {})


@pytest.mark.looptime(False)
@pytest.mark.timeout(120)
async def test_one_instance_acts_and_a_crash_hands_over(
    cluster: SandboxCluster, silenced: set[str], tmp_path: Path
) -> None:
    harness = OperatorHarness(cluster, tmp_path)
    await harness.ensure_priority_classes()
    active = Instance(harness, "operator-a", priority=200)
    standby = Instance(harness, "operator-b", priority=100)
    try:
        await active.start()
        await standby.start()
        await harness.wait(lambda: {"operator-a", "operator-b"} <= set(_peers(cluster)), timeout=30, what="both peers")

        manifest = _manifest(harness, ACTIVE)
        name = manifest["metadata"]["name"]
        harness.precompile(manifest)
        ceiling = PodCeiling(cluster, name)
        await harness.apply(manifest)
        await harness.wait(lambda: _converged(harness, name, ACTIVE), timeout=60, what="the fleet up")
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
        await harness.wait(lambda: _converged(harness, name, ACTIVE + 1), timeout=60, what="scaled up by the standby")
        assert ceiling.most == ACTIVE + 1 + WARM, f"{ceiling.most} pods existed at once"
        assert _converged(harness, name, ACTIVE + 1)
    finally:
        await active.close()
        await standby.close()
        await harness.close()


@pytest.mark.looptime(False)
@pytest.mark.timeout(120)
async def test_a_clean_stop_hands_over_at_once(cluster: SandboxCluster, silenced: set[str], tmp_path: Path) -> None:
    harness = OperatorHarness(cluster, tmp_path)
    await harness.ensure_priority_classes()
    active = Instance(harness, "operator-a", priority=200)
    standby = Instance(harness, "operator-b", priority=100)
    try:
        await active.start()
        await standby.start()
        manifest = _manifest(harness, 1)
        name = manifest["metadata"]["name"]
        harness.precompile(manifest)
        ceiling = PodCeiling(cluster, name)
        await harness.apply(manifest)
        await harness.wait(lambda: _converged(harness, name, 1), timeout=60, what="the fleet up")
        assert standby.reconciles == 0

        await active.stop()
        goodbye = _peers(cluster).get("operator-a")
        assert goodbye is None or goodbye.get("lifetime") == 0, goodbye
        # Kopf's goodbye (lifetime 0) marks the peer dead at once: no need to wait out LIFETIME.
        await harness.wait(lambda: standby.reconciles > 0, timeout=LIFETIME + 5, what="the standby acting")
        await harness.scale(NS, name, 2)
        await harness.wait(lambda: _converged(harness, name, 2), timeout=60, what="scaled up by the standby")
        assert ceiling.most == 2 + WARM, f"{ceiling.most} pods existed at once"
    finally:
        await active.close()
        await standby.close()
        await harness.close()
