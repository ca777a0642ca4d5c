"""Pytest plugin: operator replicas peering through Kopf on one sandbox cluster (the chart's HA).

Fixtures:
- ``peering_cluster``: a sandbox cluster with Kopf's peering CRDs and the ClusterKopfPeering
  ``neuronfleet`` (as the chart creates it), three inf2.xlarge nodes in two zones;
- ``silenced``: identities whose peering writes are dropped (a crashed process writes nothing more),
  with Kopf's peering lifetime shortened to :data:`LIFETIME` seconds.

:class:`Instance` is one operator replica (one pod of the chart) with its own peering identity and
priority. Kopf's peering compares keep-alive timestamps with the wall clock (``datetime.now``), not
the loop's clock, so tests using these run in real time (``@pytest.mark.looptime(False)``).
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
from operator_harness import FAST_START, OperatorHarness, example, ready

from neuronfleet.api.v1alpha1 import GROUP
from neuronfleet.handlers import OperatorContext
from neuronfleet.run_command import build_context, operator_tasks
from neuronfleet.sandbox import NodeGroup, SandboxCluster
from neuronfleet.sandbox.store import WatchEvent

REPO = Path(__file__).resolve().parent.parent
NS = "ha"
PEERING = "neuronfleet"
#: Seconds a keep-alive is valid (Kopf's default is 60; short here because the tests run in real time).
LIFETIME = 4
WARM = 1


class Instance:
    """One operator instance with its own peering identity and priority (one pod of the chart)."""

    def __init__(self, harness: OperatorHarness, identity: str, priority: int) -> None:
        self.harness = harness
        self.identity = identity
        self.priority = priority
        self.context: OperatorContext | None = None
        self.tasks: list[asyncio.Task[Any]] = []
        self.stop_flag = asyncio.Event()

    async def start(self) -> OperatorContext:
        cluster = self.harness.cluster
        self.context = await build_context(self.harness.settings, cluster.kubeconfig_path, clock=cluster.clock.wall)
        self.stop_flag = asyncio.Event()
        # Kopf takes its peering identity from $POD_ID when it spawns its tasks (as in the chart).
        previous = os.environ.get("POD_ID")
        os.environ["POD_ID"] = self.identity
        try:
            self.tasks = list(
                await operator_tasks(
                    self.context,
                    peering_name=PEERING,
                    priority=self.priority,
                    stop_flag=self.stop_flag,
                    in_process=True,
                )
            )
        finally:
            if previous is None:
                os.environ.pop("POD_ID", None)
            else:
                os.environ["POD_ID"] = previous
        return self.context

    @property
    def reconciles(self) -> int:
        return self.context.reconciles if self.context is not None else 0

    async def crash(self, silenced: set[str]) -> None:
        """A killed pod: no goodbye in the peering object, tasks gone wherever they were."""
        silenced.add(self.identity)
        await self.stop()

    async def stop(self) -> None:
        """A clean exit: cancelled, Kopf's keep-alive task writes its goodbye (lifetime 0) on the way out."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks = []

    async def sigterm(self) -> None:
        """SIGTERM, as ``kopf.run_tasks`` handles it: the stop flag ends one root task, the others are
        cancelled together (the keep-alive writes its goodbye, Kopf asks each daemon to stop and
        gives it its grace)."""
        self.stop_flag.set()
        _, pending = await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks = []

    async def close(self) -> None:
        await self.stop()
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
async def peering_cluster() -> AsyncIterator[SandboxCluster]:
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


def ha_manifest(harness: OperatorHarness, replicas: int) -> dict[str, Any]:
    """bert-embeddings in Manual mode with ``replicas`` active pods and :data:`WARM` warm ones."""
    return harness.localize(
        example(
            "bert-embeddings",
            scaling={"mode": "Manual", "replicas": replicas, "minReplicas": 0},
            warmPool={"mode": "Fixed", "pods": WARM, "nodePlaceholders": 0},
        ),
        namespace=NS,
    )


def converged(harness: OperatorHarness, name: str, active: int) -> bool:
    """``active`` active and :data:`WARM` warm pods, all ready, and no others."""
    pods = harness.pods(NS, name)
    roles = [p["metadata"]["labels"][f"{GROUP}/role"] for p in pods]
    return (
        roles.count("active") == active
        and roles.count("warm") == WARM
        and len(pods) == active + WARM
        and all(ready(p) for p in pods)
    )


def peers(cluster: SandboxCluster) -> dict[str, Any]:
    """The peering object's status: one entry per live peer."""
    obj = cluster.get("clusterkopfpeerings", PEERING, group="kopf.dev") or {}
    return dict(obj.get("status") or {})
