"""Overload: a full queue answers 429 with Retry-After, the queue never grows past its bound, and
every accepted request still gets its correct answer.

The device is held busy by a gate around the real model runner, so nothing completes while the
requests arrive: how many are held is decided by the batch and queue bounds alone.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
import numpy as np
import numpy.typing as npt

from neuronserve.backend import ModelRunner
from neuronserve.manifest import Bucket
from neuronserve.server import ServeConfig
from runtime_support import MODEL_NAME, Fetched, LiveServer, Reference

MAX_QUEUE = 4
REQUESTS = 20


class GatedRunner:
    """The real runner, but each execution waits until the test opens the gate."""

    def __init__(self, inner: ModelRunner) -> None:
        self.inner = inner
        self.gate = threading.Event()
        self.rows_waiting = 0

    def run(self, requests: Sequence[Sequence[npt.NDArray[Any]]]) -> tuple[list[npt.NDArray[np.float32]], Bucket]:
        self.rows_waiting = sum(int(r[0].shape[0]) for r in requests)
        self.gate.wait(timeout=60)
        return self.inner.run(requests)

    def cost(self, rows: int, sequence: int) -> float | None:
        return self.inner.cost(rows, sequence)


async def _until(condition: Any, limit_seconds: float, what: Callable[[], str]) -> None:
    deadline = time.monotonic() + limit_seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what()}"
        await asyncio.sleep(0.01)


async def test_a_full_queue_answers_429_and_accepted_requests_complete(
    fetched: Fetched, model_runner: ModelRunner, reference: Reference
) -> None:
    gated = GatedRunner(model_runner)
    config = ServeConfig(max_batch_delay_ms=0, max_queue=MAX_QUEUE, retry_after_seconds=2)
    sentence = "overload is answered, never queued without bound"
    ids = reference.tokens(sentence)
    body = {
        "inputs": [
            {"name": "input_ids", "shape": [1, len(ids)], "datatype": "INT64", "data": ids},
            {"name": "attention_mask", "shape": [1, len(ids)], "datatype": "INT64", "data": [1] * len(ids)},
        ]
    }
    with LiveServer(fetched.manifest, gated, config) as server:
        assert server.state is not None and server.state.batcher is not None
        batcher = server.state.batcher
        rejected: list[tuple[int, str | None, dict[str, Any]]] = []
        failures: list[str] = []

        async with aiohttp.ClientSession() as session:

            async def one() -> tuple[int, str | None, dict[str, Any]]:
                try:
                    async with session.post(f"{server.url}/v2/models/{MODEL_NAME}/infer", json=body) as response:
                        result = (response.status, response.headers.get("Retry-After"), await response.json())
                except Exception as exc:
                    failures.append(repr(exc))
                    raise
                if result[0] == 429:
                    rejected.append(result)
                return result

            tasks = [asyncio.create_task(one()) for _ in range(REQUESTS)]
            try:
                # Every request is either held (executing behind the gate or queued) or refused.
                await _until(
                    lambda: (
                        gated.rows_waiting > 0 and gated.rows_waiting + batcher.queue_depth + len(rejected) == REQUESTS
                    ),
                    30,
                    lambda: (
                        f"every request to be held or refused: {gated.rows_waiting} rows executing, "
                        f"{batcher.queue_depth} queued, {len(rejected)} refused, client errors {failures}"
                    ),
                )
                held = gated.rows_waiting + batcher.queue_depth
                assert server.call(lambda: server.state.inflight if server.state else -1) == held
            finally:
                gated.gate.set()
            results = await asyncio.gather(*tasks)

    # The device holds at most one batch (4 rows) and the queue at most MAX_QUEUE: all else is refused.
    assert held <= 4 + MAX_QUEUE
    assert batcher.peak_queue_depth <= MAX_QUEUE
    statuses = sorted(status for status, _, _ in results)
    assert statuses == [200] * held + [429] * (REQUESTS - held)
    for _, retry_after, doc in rejected:
        assert retry_after == "2"
        assert "queue is full" in doc["error"]
    expected = reference.embed([sentence])[0]
    for status, _, doc in results:
        if status == 200:
            np.testing.assert_allclose(np.asarray(doc["outputs"][0]["data"]), expected, atol=1e-4)
