"""A request the server admitted during its drain delay is answered, even when its body finishes
arriving after the delay ended: a large body still uploading, or a client told ``100 Continue``
that sends its body then. The server finishes what it accepted (README), and a request is accepted
once it is admitted, not once its body is whole: refusing it with 503 "the server is shutting down"
(a busy replica) or dropping its connection (an idle one, which then also sat out its grace period)
broke that.

Real ``neuronserve serve`` processes on the emulated device; the client is a raw socket, so the
test decides when each part of the request is sent. The body's last part is sent once the server
logs that the drain delay is over (a condition, not a sleep).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
from typing import Any

import pytest

from runtime_support import ServeProcess, http_json, scrape_metrics, wait_for

DELAY_SECONDS = 2
GRACE_SECONDS = 12
# bert-base's 16-row batch takes 10.9 ms on a NeuronCore: 5.45 s here, past the drain delay.
EMULATED = ["--device", "emulated-neuroncore", "--profile", "bert-base", "--emulated-time-scale", "500"]
INFER = "/v2/models/bert-base/infer"
DELAY_OVER = "drain delay over"


def _body(rows: int) -> bytes:
    text = {"name": "text", "datatype": "BYTES", "shape": [rows], "data": ["x"] * rows}
    return json.dumps({"inputs": [text]}).encode()


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (every answer while draining closes it)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.mark.parametrize(
    ("expect_continue", "busy"),
    [(True, True), (True, False), (False, True), (False, False)],
    ids=["100-continue-busy", "100-continue-idle", "slow-upload-busy", "slow-upload-idle"],
)
def test_a_request_admitted_in_the_delay_is_answered_when_its_body_ends_after_it(
    serve_process: Any, expect_continue: bool, busy: bool
) -> None:
    process: ServeProcess = serve_process(
        [*EMULATED, "--drain-delay-seconds", str(DELAY_SECONDS), "--grace-seconds", str(GRACE_SECONDS)]
    )
    process.wait_listening(60)
    wait_for(lambda: http_json(process.url, "GET", "/v2/health/ready")[0] == 200, 60, "the server to be ready")
    long_answer: dict[str, Any] = {}
    if busy:
        # A long batch in flight: the replica is still draining it when the body arrives.
        sender = threading.Thread(
            target=lambda: long_answer.setdefault("r", http_json(process.url, "POST", INFER, _body(16))), daemon=True
        )
        sender.start()
        wait_for(lambda: scrape_metrics(process.url)["neuronserve_inflight_requests"] >= 1, 30, "the long batch")

    body = _body(1)
    head = (
        f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", process.port), timeout=30) as client:
        process.proc.send_signal(signal.SIGTERM)
        # In the delay: not ready, still taking requests.
        wait_for(lambda: http_json(process.url, "GET", "/v2/health/ready")[0] == 503, 10, "readiness to turn false")
        assert DELAY_OVER not in process.log
        if expect_continue:
            client.sendall(head + b"Expect: 100-continue\r\n\r\n")
            assert client.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n")
            rest = body
        else:
            client.sendall(head + b"\r\n" + body[:10])
            rest = body[10:]
        wait_for(lambda: DELAY_OVER in process.log, 10, "the drain delay to end")
        client.sendall(rest)
        answer = _read_all(client)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:300]

    try:
        code = process.wait_exit(timeout=GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running {GRACE_SECONDS} s after SIGTERM:\n{process.log}") from None
    assert code == 0, process.log
    assert "drained (all work finished)" in process.log
    if busy:
        sender.join(timeout=10)
        assert long_answer["r"][0] == 200
