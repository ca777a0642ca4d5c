"""A graceful stop (SIGTERM, a rolling update of the operator) ends each object's loop at once.

Kopf asks a daemon to stop and cancels it ``cancellation_timeout`` (2 s) later, logging a WARNING
per object. A loop that sleeps between reconciles without listening for the request is cancelled:
with a thousand objects, a thousand warnings on every operator rollout, and a stop that takes the
full timeout.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from operator_harness import OperatorHarness, example, ready

NS = "shutdown"


# Real time, not looptime: a reconcile under way when the stop comes waits on sockets and aiohttp's
# executor thread, and looptime would let its clock run past Kopf's 2 s timeout meanwhile, which
# the operator's millisecond calls never do in real time.
@pytest.mark.looptime(False)
async def test_a_graceful_stop_ends_every_loop_without_cancelling_it(
    harness: OperatorHarness, caplog: pytest.LogCaptureFixture
) -> None:
    # Reconciles on changes only: a loop waits between them for longer than Kopf's grace.
    assert harness.context is not None
    reconciler = harness.context.reconciler
    reconciler.settings = replace(reconciler.settings, interval_seconds=600.0)
    for name in ("first", "second"):
        manifest = harness.localize(
            example("bert-embeddings", scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0}), namespace=NS
        )
        manifest["metadata"]["name"] = name
        harness.precompile(manifest)
        await harness.apply(manifest)
    for name in ("first", "second"):

        def active_ready(name: str = name) -> bool:
            return any(ready(p) for p in harness.pods(NS, name, "active"))

        await harness.wait(active_ready, timeout=90, what=f"{name} ready")
    caplog.set_level(logging.WARNING)
    caplog.clear()
    await harness.stop()
    cancelled = [r.getMessage() for r in caplog.records if "is cancelled" in r.getMessage()]
    assert not cancelled, cancelled
