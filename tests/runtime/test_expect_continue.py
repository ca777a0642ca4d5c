"""``Expect: 100-continue``: the server refuses before the client sends its body when it would refuse
the request anyway (here a full queue: 429), and says 100 Continue otherwise.

A real server on 127.0.0.1 over the emulated replica's contract, its device held by a gate; the
client asking to continue is a raw socket that sends only its headers until it is answered.
"""

from __future__ import annotations

import json
import socket

import aiohttp

from neuronserve.emulated import BERT_BASE, synthetic_manifest
from neuronserve.server import ServeConfig
from runtime_support import GatedEcho, LiveServer, scrape_metrics, wait_for

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
HEAD = (
    f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    f"Content-Length: {len(BODY)}\r\nExpect: 100-continue\r\n\r\n"
).encode()


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _read_until(sock: socket.socket, end: bytes) -> bytes:
    data = b""
    while end not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


async def _post(url: str) -> int:
    async with aiohttp.ClientSession() as session, session.post(url + INFER, data=BODY) as response:
        return response.status


async def test_a_full_queue_refuses_before_the_body_and_room_says_continue() -> None:
    device = GatedEcho()
    with LiveServer(synthetic_manifest(BERT_BASE, MODEL), device, ServeConfig(max_queue=1)) as server:
        assert server.state is not None
        state = server.state
        # With room, the client is told to continue, and its request is served once it runs.
        with _connect(server.url) as sock:
            sock.sendall(HEAD)
            assert _read_until(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 100 Continue\r\n")
            sock.sendall(BODY)
            wait_for(lambda: device.ran == [1], 10, "the first request to run")
            # One request executing (held at the gate), one queued: the queue (1) is full.
            held = server.start_soon(_post(server.url))
            wait_for(lambda: server.call(lambda: state.batcher is not None and state.batcher.full), 10, "a full queue")
            rejected = scrape_metrics(server.url)["neuronserve_requests_total{outcome=rejected}"]
            with _connect(server.url) as asking:
                asking.sendall(HEAD)
                head, _, body = _read_until(asking, b"}").partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 429 "), head
            assert json.loads(body)["error"] == "the queue is full (1 requests waiting)"
            assert scrape_metrics(server.url)["neuronserve_requests_total{outcome=rejected}"] - rejected == 1
            device.gate.set()
            assert _read_until(sock, b"}").startswith(b"HTTP/1.1 200 OK")
            assert held.result(timeout=10) == 200


def test_an_expectation_other_than_100_continue_is_a_json_417_counted() -> None:
    device = GatedEcho()
    device.gate.set()
    with LiveServer(synthetic_manifest(BERT_BASE, MODEL), device, ServeConfig()) as server:
        before = scrape_metrics(server.url)["neuronserve_requests_total{outcome=bad_request}"]
        with _connect(server.url) as sock:
            sock.sendall(HEAD.replace(b"100-continue", b"200-ok"))
            head, _, body = _read_until(sock, b"}").partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 417 "), head
        assert json.loads(body) == {"error": "unknown Expect: '200-ok' (only 100-continue is)"}
        assert scrape_metrics(server.url)["neuronserve_requests_total{outcome=bad_request}"] - before == 1
