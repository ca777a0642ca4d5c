"""A client that hangs up gives its place back: its handler is cancelled, its request leaves the
queue (or the batch being formed, or the batch waiting ahead) at once and never runs, it counts as
``aborted``, and the requests still connected are served and drained as before.

A real server on 127.0.0.1 over the emulated replica's contract (buckets 1-16 x 128), in front of a
device the test holds busy with a gate, so that what is queued is decided by the bounds alone.
Clients that hang up are raw sockets closed after sending their whole request.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from neuronserve.emulated import BERT_BASE, synthetic_manifest
from neuronserve.server import ServeConfig
from runtime_support import GatedEcho, LiveServer, scrape_metrics

MODEL = "bert-base"
INFER = f"/v2/models/{MODEL}/infer"


def _body(first_id: int, rows: int = 1) -> bytes:
    data = [first_id] * (rows * 4)
    return json.dumps(
        {
            "inputs": [
                {"name": "input_ids", "shape": [rows, 4], "datatype": "INT64", "data": data},
                {"name": "attention_mask", "shape": [rows, 4], "datatype": "INT64", "data": [1] * (rows * 4)},
            ]
        }
    ).encode()


async def _hang_up_later(url: str, body: bytes) -> asyncio.StreamWriter:
    """Send a whole infer request on a connection of its own; the writer, to close it (hang up)."""
    host, port = url.removeprefix("http://").split(":")
    _, writer = await asyncio.open_connection(host, int(port))
    head = f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    writer.write(head.encode() + body)
    await writer.drain()
    return writer


async def _until(condition: Callable[[], bool], what: Callable[[], str], limit_seconds: float = 20) -> None:
    deadline = time.monotonic() + limit_seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what()}"
        await asyncio.sleep(0.01)


def _outcomes(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {
        outcome: after[f"neuronserve_requests_total{{outcome={outcome}}}"]
        - before[f"neuronserve_requests_total{{outcome={outcome}}}"]
        for outcome in ("ok", "rejected", "aborted", "error", "model_error")
    }


async def test_clients_that_hang_up_free_their_queue_slots_never_run_and_count_as_aborted() -> None:
    manifest = synthetic_manifest(BERT_BASE, MODEL)
    device = GatedEcho()
    with LiveServer(manifest, device, ServeConfig(max_batch_delay_ms=0, max_queue=4)) as server:
        assert server.state is not None and server.state.batcher is not None
        state, batcher = server.state, server.state.batcher

        def held() -> tuple[int, int]:
            return server.call(lambda: (batcher.queue_depth, state.inflight))  # type: ignore[no-any-return]

        before = scrape_metrics(server.url)
        async with aiohttp.ClientSession() as session:

            async def infer(first_id: int) -> tuple[int, Any]:
                async with session.post(server.url + INFER, data=_body(first_id)) as response:
                    return response.status, await response.json()

            # A failure before the gate opens must not leave the device held (the teardown would hang).
            releasing = asyncio.get_running_loop().call_later(25, device.gate.set)
            executing = asyncio.create_task(infer(0))
            await _until(lambda: device.ran == [0], lambda: f"request 0 to execute (ran {device.ran})")
            # 16 rows: a full batch, handed to the executor at once to wait behind request 0; then
            # two more that wait in the queue.
            gone = [await _hang_up_later(server.url, _body(1, rows=16))]
            await _until(lambda: held() == (1, 2), lambda: f"a batch to wait ahead: (queued, inflight) {held()}")
            gone += [await _hang_up_later(server.url, _body(i)) for i in (2, 3)]
            await _until(lambda: held() == (3, 4), lambda: f"three requests queued: {held()}")
            for writer in gone:
                writer.close()
            await _until(lambda: held() == (0, 1), lambda: f"the hung-up requests to leave: {held()}")

            # Their slots are free: a full queue's worth of clients still connected is accepted.
            waiting = [asyncio.create_task(infer(i)) for i in (4, 5, 6, 7)]
            await _until(lambda: held() == (4, 5), lambda: f"four live requests queued: {held()}")
            # A drain that starts now answers every request still connected, and finishes.
            drained = asyncio.wrap_future(server.start_soon(state.drain(30.0)))
            device.gate.set()
            answers = await asyncio.gather(executing, *waiting)
            assert await asyncio.wait_for(drained, 30) is True
            releasing.cancel()

        assert [status for status, _ in answers] == [200] * 5, answers
        assert [doc["outputs"][0]["data"][0] for _, doc in answers] == [0, 4, 5, 6, 7]
        assert sorted(device.ran) == [0, 4, 5, 6, 7]  # the batch that waited ahead never ran
        after = scrape_metrics(server.url)
        assert _outcomes(before, after) == {"ok": 5, "rejected": 0, "aborted": 3, "error": 0, "model_error": 0}
        latency = "neuronserve_request_latency_seconds_count"
        assert after[latency] - before[latency] == 5


async def test_a_batch_whose_requests_all_hang_up_while_it_fills_is_dropped() -> None:
    manifest = synthetic_manifest(BERT_BASE, MODEL)
    device = GatedEcho()
    device.gate.set()
    # A batch delay far longer than the test: the batch being formed waits for more requests.
    with LiveServer(manifest, device, ServeConfig(max_batch_delay_ms=60_000, max_queue=4)) as server:
        assert server.state is not None and server.state.batcher is not None
        batcher = server.state.batcher

        def depth() -> int:
            return server.call(lambda: batcher.queue_depth)  # type: ignore[no-any-return]

        writer = await _hang_up_later(server.url, _body(1))
        await _until(lambda: depth() == 1, lambda: f"the request to be in the batch being formed ({depth()})")
        writer.close()
        await _until(lambda: depth() == 0, lambda: f"the batch being formed to empty ({depth()} queued)")
        # A full batch (16 rows) runs at once: the worker does not wait out the dropped batch's delay.
        async with (
            aiohttp.ClientSession() as session,
            session.post(server.url + INFER, data=_body(2, rows=16)) as response,
        ):
            assert response.status == 200, await response.text()
        assert device.ran == [2]


async def test_a_client_that_half_closes_after_its_request_counts_as_hung_up() -> None:
    # shutdown(SHUT_WR) sends the FIN a close() sends: the server cannot tell them apart without
    # writing, and takes both as a hang-up (as nginx's proxying and Go's net/http do). Answering
    # half-closed clients instead kept every hung-up client's request queued (the tests above failed).
    manifest = synthetic_manifest(BERT_BASE, MODEL)
    device = GatedEcho()
    device.gate.set()
    with LiveServer(manifest, device, ServeConfig(max_batch_delay_ms=60_000, max_queue=4)) as server:
        assert server.state is not None and server.state.batcher is not None
        batcher = server.state.batcher

        def depth() -> int:
            return server.call(lambda: batcher.queue_depth)  # type: ignore[no-any-return]

        before = scrape_metrics(server.url)
        writer = await _hang_up_later(server.url, _body(1))
        await _until(lambda: depth() == 1, lambda: f"the request to be in the batch being formed ({depth()})")
        writer.write_eof()
        await _until(lambda: depth() == 0, lambda: f"the half-closed client's request to leave ({depth()} queued)")
        writer.close()
        assert _outcomes(before, scrape_metrics(server.url))["aborted"] == 1
        assert device.ran == []
