"""Uploads are bounded: at most ``--max-uploads`` requests are received at once (more get 503 with
Retry-After before their body is read), and a body that does not arrive whole within
``--body-timeout-seconds`` gets 408 and its connection closed, so stalled clients hold neither
memory nor a place for good.

A real server on 127.0.0.1 over the emulated replica's contract; stalled clients are raw sockets
that send headers and part of a body, then nothing.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable

import aiohttp

from neuronserve.emulated import BERT_BASE, synthetic_manifest
from neuronserve.server import ServeConfig
from runtime_support import GatedEcho, LiveServer, scrape_metrics

MODEL = "bert-base"
INFER = f"/v2/models/{MODEL}/infer"
BODY = json.dumps(
    {
        "inputs": [
            {"name": "input_ids", "shape": [1, 4], "datatype": "INT64", "data": [1, 2, 3, 4]},
            {"name": "attention_mask", "shape": [1, 4], "datatype": "INT64", "data": [1, 1, 1, 1]},
        ]
    }
).encode()


def _stalled_upload(url: str) -> socket.socket:
    """A client that sends its headers and half its body, then nothing more."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    head = f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n"
    sock.sendall(head.encode() + BODY[: len(BODY) // 2])
    return sock


def _until(condition: Callable[[], bool], what: str, limit_seconds: float = 20) -> None:
    deadline = time.monotonic() + limit_seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _outcome(metrics: dict[str, float], outcome: str) -> float:
    return metrics[f"neuronserve_requests_total{{outcome={outcome}}}"]


async def _post(url: str) -> tuple[int, str | None, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.post(url + INFER, data=BODY) as response:
        return response.status, response.headers.get("Retry-After"), await response.json()


async def test_past_max_uploads_a_request_gets_503_and_a_place_frees_when_an_upload_ends() -> None:
    device = GatedEcho()
    device.gate.set()
    config = ServeConfig(max_uploads=2, body_timeout_seconds=300, retry_after_seconds=4)
    with LiveServer(synthetic_manifest(BERT_BASE, MODEL), device, config) as server:
        assert server.state is not None
        state = server.state
        before = scrape_metrics(server.url)
        stalled = [_stalled_upload(server.url) for _ in range(2)]
        _until(lambda: server.call(lambda: state.uploads) == 2, "two uploads in progress")
        status, retry_after, doc = await _post(server.url)
        assert (status, retry_after) == (503, "4")
        assert doc["error"] == "too many requests being received (2, the server's --max-uploads)"
        stalled.pop().close()  # one stalled client gives up: its place is free again
        _until(lambda: server.call(lambda: state.uploads) == 1, "the abandoned upload to end")
        assert (await _post(server.url))[0] == 200
        stalled.pop().close()
        after = scrape_metrics(server.url)
        assert _outcome(after, "rejected") - _outcome(before, "rejected") == 1
        assert _outcome(after, "ok") - _outcome(before, "ok") == 1


async def test_a_stalled_upload_gets_408_and_its_connection_closed() -> None:
    device = GatedEcho()
    device.gate.set()
    config = ServeConfig(max_uploads=1, body_timeout_seconds=0.5)
    with LiveServer(synthetic_manifest(BERT_BASE, MODEL), device, config) as server:
        assert server.state is not None
        state = server.state
        before = scrape_metrics(server.url)
        with _stalled_upload(server.url) as sock:
            answer = b""
            while chunk := await asyncio.to_thread(sock.recv, 65536):  # b"": the server closed it
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 "), answer
        assert b"Connection: close" in head
        assert json.loads(body) == {
            "error": "the request body did not arrive whole within 0.5 s (the server's --body-timeout-seconds)"
        }
        # Its place is free again.
        assert server.call(lambda: state.uploads) == 0
        assert (await _post(server.url))[0] == 200
        after = scrape_metrics(server.url)
        assert _outcome(after, "aborted") - _outcome(before, "aborted") == 1
