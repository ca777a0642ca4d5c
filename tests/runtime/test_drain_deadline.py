"""A draining server exits within its grace period (plus the answers' hand-over), before the
kubelet's SIGKILL, even when a batch runs past the grace period and a client is still uploading.

The operator gives ``neuronserve`` the pod's grace period less ``SHUTDOWN_MARGIN_SECONDS``; the
kubelet kills the process at the pod's grace period. A server that waits for the device and then
waits the whole grace period again for open connections is killed with its answers unsent.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import threading
from typing import Any

from neuronfleet.kube.builders import SHUTDOWN_MARGIN_SECONDS
from runtime_support import ServeProcess, http_json, scrape_metrics, wait_for

GRACE_SECONDS = 8
# bert-base's batch of one takes 1 ms on a NeuronCore: 20 s here, well past the grace period.
SLOW_DEVICE = ["--device", "emulated-neuroncore", "--profile", "bert-base", "--emulated-time-scale", "20000"]
BODY = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["a stuck batch"]}]})


def test_a_batch_past_the_grace_period_and_a_slow_upload_do_not_outlast_the_pods_grace(serve_process: Any) -> None:
    process: ServeProcess = serve_process([*SLOW_DEVICE, "--grace-seconds", str(GRACE_SECONDS)])
    process.wait_listening(60)
    wait_for(lambda: http_json(process.url, "GET", "/v2/health/ready")[0] == 200, 60, "the server to be ready")

    stuck: dict[str, Any] = {}

    def send_stuck_request() -> None:
        stuck["answer"] = http_json(process.url, "POST", "/v2/models/bert-base/infer", BODY.encode())

    sender = threading.Thread(target=send_stuck_request, daemon=True)
    sender.start()
    wait_for(
        lambda: scrape_metrics(process.url)["neuronserve_inflight_requests"] >= 1, 30, "the request to reach the device"
    )
    # A client that sends its headers and half its body, then nothing: its handler waits for the rest.
    uploader = socket.create_connection(("127.0.0.1", process.port))
    try:
        uploader.sendall(
            b"POST /v2/models/bert-base/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {2 * len(BODY)}\r\n\r\n".encode()
            + BODY.encode()
        )
        process.proc.send_signal(signal.SIGTERM)
        kubelet_kills_at = GRACE_SECONDS + SHUTDOWN_MARGIN_SECONDS
        try:
            code = process.wait_exit(timeout=kubelet_kills_at)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running {kubelet_kills_at} s after SIGTERM:\n{process.log}") from None
    finally:
        with contextlib.suppress(OSError):
            uploader.close()

    assert code == 0, process.log
    sender.join(timeout=10)
    status, _, doc = stuck["answer"]
    assert (status, doc["error"]) == (503, "the server shut down while this request ran")
    assert "grace period ran out with connections still open" in process.log
    assert "drained (grace period ran out)" in process.log
    assert "Traceback" not in process.log
