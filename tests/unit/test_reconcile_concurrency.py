"""Reconciles across objects are bounded: a burst of objects does not queue its API calls behind
the client's connection pool until they time out (a thousand created at once did)."""

from __future__ import annotations

import asyncio
from typing import Any

from neuronfleet.handlers import OperatorContext
from neuronfleet.planning.observation import DeploymentMemory
from neuronfleet.reconcile import OperatorSettings, ReconcileReport


class GatedReconciler:
    """Each reconcile waits for the gate; counts how many run at once."""

    def __init__(self, limit: int) -> None:
        self.settings = OperatorSettings(max_concurrent_reconciles=limit)
        self.gate = asyncio.Event()
        self.running = 0
        self.most = 0

    async def reconcile(self, body: Any, memory: DeploymentMemory, stopping: Any = None) -> ReconcileReport:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.gate.wait()
        finally:
            self.running -= 1
        return ReconcileReport((), (), {}, DeploymentMemory(), None, 0)


async def test_at_most_the_configured_reconciles_run_at_once() -> None:
    reconciler = GatedReconciler(limit=2)
    context = OperatorContext(reconciler)  # type: ignore[arg-type]
    tasks = [asyncio.create_task(context.reconcile({"metadata": {}}, "ns", f"model-{i}")) for i in range(5)]
    for _ in range(20):  # loop turns, not time: every task that can start has started
        await asyncio.sleep(0)
    assert reconciler.running == 2
    reconciler.gate.set()
    reports = await asyncio.gather(*tasks)
    assert len(reports) == 5 and context.reconciles == 5
    assert reconciler.most == 2


def test_the_default_bound_leaves_room_in_the_client_connection_pool() -> None:
    assert 1 <= OperatorSettings().max_concurrent_reconciles < 100


class Untouchable:
    """A client or store that fails the test when anything is asked of it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{name} called while the deployment is being deleted")


async def test_a_deployment_being_deleted_is_neither_read_nor_written() -> None:
    # The API server bumps the generation when it sets deletionTimestamp, which wakes a reconcile:
    # it would create pods and compile Jobs only for the garbage collector to remove them.
    from neuronfleet.reconcile import Reconciler

    reconciler = Reconciler(Untouchable(), Untouchable(), OperatorSettings())  # type: ignore[arg-type]
    body = {"metadata": {"name": "m", "namespace": "ns", "deletionTimestamp": "2026-12-03T00:00:00Z"}, "spec": {}}
    report = await reconciler.reconcile(body, DeploymentMemory())
    assert (report.actions, report.events, report.writes) == ((), (), 0)
