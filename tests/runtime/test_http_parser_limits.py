"""What aiohttp's HTTP parser refuses before any handler runs: the header sizes the server takes, and
how the requests it cannot parse are answered and logged.

A gateway in front of the replicas adds headers (a bearer token, a JWT with many claims, tracing
baggage) past aiohttp's default of 8,190 bytes a field; the server takes up to
``MAX_HEADER_FIELD_BYTES`` (64 KiB) a field and a request line as long. A request that does not
parse (past those limits, a bad Content-Length or chunk size, Content-Length with
Transfer-Encoding) is answered by aiohttp itself, before the server's middleware: a text/plain 400
(documented as the exception to the JSON error body), logged as one WARNING line, not an ERROR
with a traceback (a client's mistake, not the server's failure).
"""

from __future__ import annotations

import json
import logging
import socket
import urllib.parse
from collections.abc import Iterator

import pytest

from neuronserve.emulated import BERT_BASE, EmulatedDevice, synthetic_manifest
from neuronserve.server import MAX_HEADER_FIELD_BYTES, ServeConfig
from runtime_support import LiveServer

INFER = "/v2/models/bert-base/infer"
BODY = json.dumps(
    {
        "inputs": [
            {"name": "input_ids", "datatype": "INT64", "shape": [1, 3], "data": [1, 2, 3]},
            {"name": "attention_mask", "datatype": "INT64", "shape": [1, 3], "data": [1, 1, 1]},
        ]
    }
).encode()
HEAD = f"POST {INFER} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    manifest = synthetic_manifest(BERT_BASE, "bert-base")
    with LiveServer(manifest, EmulatedDevice(BERT_BASE, manifest), ServeConfig()) as live:
        yield live


def _exchange(url: str, request: bytes) -> tuple[bytes, bytes]:
    """``request`` sent as is on a connection of its own; the answer's head and body."""
    parsed = urllib.parse.urlsplit(url)
    with socket.create_connection((parsed.hostname, parsed.port), timeout=30) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return head, body


def _with_header(name: str, size: int) -> bytes:
    return (f"{HEAD}{name}: {'a' * size}\r\nContent-Length: {len(BODY)}\r\n\r\n").encode() + BODY


@pytest.mark.parametrize("size", [9_000, 60_000])
def test_a_header_as_large_as_gateways_add_is_served(server: LiveServer, size: int) -> None:
    # 9 KB: a bearer token or tracing baggage just past aiohttp's default; 60 KB: Envoy's default
    # limit for all the headers of a request.
    head, body = _exchange(server.url, _with_header("Authorization", size))
    assert head.startswith(b"HTTP/1.1 200"), head
    assert json.loads(body)["outputs"][0]["shape"] == [1, 768]


def test_a_request_line_as_long_as_a_header_is_served(server: LiveServer) -> None:
    request = f"POST {INFER}?trace={'a' * 9_000} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    head, _ = _exchange(server.url, f"{request}Content-Length: {len(BODY)}\r\n\r\n".encode() + BODY)
    assert head.startswith(b"HTTP/1.1 200"), head


UNPARSABLE = {
    "a header past the limit": _with_header("Authorization", MAX_HEADER_FIELD_BYTES + 1),
    "a bad Content-Length": f"{HEAD}Content-Length: 12x\r\n\r\n".encode() + BODY,
    "Content-Length and Transfer-Encoding": (
        f"{HEAD}Content-Length: {len(BODY)}\r\nTransfer-Encoding: chunked\r\n\r\n".encode() + BODY
    ),
    "a bad chunk size": f"{HEAD}Transfer-Encoding: chunked\r\n\r\nzz\r\n".encode() + BODY + b"\r\n0\r\n\r\n",
}


@pytest.mark.parametrize("request_bytes", UNPARSABLE.values(), ids=UNPARSABLE.keys())
def test_a_request_that_does_not_parse_gets_400_and_one_warning_line(
    server: LiveServer, request_bytes: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
        head, body = _exchange(server.url, request_bytes)
    # aiohttp's own answer (no handler or middleware runs): the documented exception to the JSON body.
    assert head.split(b"\r\n")[0] in (b"HTTP/1.0 400 Bad Request", b"HTTP/1.1 400 Bad Request"), head
    assert body
    records = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert [(r.levelno, r.exc_info) for r in records] == [(logging.WARNING, None)], [
        (r.levelname, r.getMessage(), r.exc_text or r.exc_info) for r in records
    ]
    message = records[0].getMessage()
    assert message.startswith("refused a request that does not parse (400) from 127.0.0.1: "), message
    assert "\n" not in message
