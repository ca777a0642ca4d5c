"""A draining server exits within its grace period (plus the answers' hand-over), before the
kubelet's SIGKILL, even when a batch runs past the grace period and a client is still uploading,
on the emulated device and on a real model runner whose batch computes past it.

The operator gives ``neuronserve`` the pod's grace period less ``SHUTDOWN_MARGIN_SECONDS``; the
kubelet kills the process at the pod's grace period. A server that waits for the device and then
waits the whole grace period again for open connections is killed with its answers unsent.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from tiny_model import save_slow, save_slow_warm

from neuronfleet.api.v1alpha1 import SHUTDOWN_MARGIN_SECONDS
from neuronserve import cli
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


@pytest.fixture(scope="module")
def slow_artifact(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("slow")
    source = save_slow(root / "slow.pt")
    result = root / "result.json"
    argv = ["compile", "--source", str(source), "--store", str(root / "store"), "--name", "slow"]
    assert cli.main([*argv, "--batch-buckets", "1,4", "--sequence-buckets", "8", "--result-file", str(result)]) == 0
    uri: str = json.loads(result.read_text())["uri"]
    return uri


def test_a_model_batch_computing_past_the_grace_period_does_not_hold_the_exit(
    slow_artifact: str, serve_process: Any
) -> None:
    # The batch runs in the model runner's executor thread (TorchScript, minutes of work): the
    # drain answers its request at the deadline, and the process exits without waiting for it.
    grace = 2
    process: ServeProcess = serve_process(
        ["--artifact", slow_artifact, "--grace-seconds", str(grace), "--drain-delay-seconds", "0"]
    )
    process.wait_listening(60)
    wait_for(lambda: http_json(process.url, "GET", "/v2/health/ready")[0] == 200, 60, "the server to be ready")
    hung = {
        "inputs": [
            {"name": "input_ids", "datatype": "INT64", "shape": [1, 2], "data": [99, 40]},
            {"name": "attention_mask", "datatype": "INT64", "shape": [1, 2], "data": [1, 1]},
        ]
    }
    stuck: dict[str, Any] = {}

    def send_stuck_request() -> None:
        stuck["answer"] = http_json(process.url, "POST", "/v2/models/slow/infer", json.dumps(hung).encode())

    sender = threading.Thread(target=send_stuck_request, daemon=True)
    sender.start()
    # Executing (no longer queued): the batch is in the executor thread.
    wait_for(
        lambda: (
            (m := scrape_metrics(process.url))["neuronserve_inflight_requests"] == 1
            and m["neuronserve_queue_depth"] == 0
        ),
        30,
        "the request to reach the device",
    )
    process.proc.send_signal(signal.SIGTERM)
    kubelet_kills_at = grace + SHUTDOWN_MARGIN_SECONDS
    try:
        code = process.wait_exit(timeout=kubelet_kills_at)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running {kubelet_kills_at} s after SIGTERM:\n{process.log}") from None
    assert code == 0, process.log
    sender.join(timeout=10)
    status, _, doc = stuck["answer"]
    assert (status, doc["error"]) == (503, "the server shut down while this request ran")
    assert "drained (grace period ran out)" in process.log
    assert "Traceback" not in process.log


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) the process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_stop_during_a_warm_up_exits_cleanly_at_once(tmp_path: Path, serve_process: Any) -> None:
    # The warm-up runs inside TorchScript in the loader's daemon thread: stopped then, Python's
    # finalization met that thread and aborted the process (exit 134, "terminate called without
    # an active exception"), a pod in Error with a core dump instead of a clean exit.
    source = save_slow_warm(tmp_path / "slow-warm.pt")
    result = tmp_path / "result.json"
    argv = ["compile", "--source", str(source), "--store", str(tmp_path / "store"), "--name", "slow-warm"]
    # Batch 4: the compile's example rows have masks of several lengths (only the warm-up's are all 1).
    assert cli.main([*argv, "--batch-buckets", "4", "--sequence-buckets", "8", "--result-file", str(result)]) == 0
    uri = json.loads(result.read_text())["uri"]
    process: ServeProcess = serve_process(["--artifact", uri, "--grace-seconds", "2", "--drain-delay-seconds", "0"])
    process.wait_listening(60)
    # Warming: the loader has burnt a second and a half of CPU since listening (the tiny model
    # loads in a small fraction of that; its warm-up computes for minutes).
    listening = _cpu_seconds(process.proc.pid)
    wait_for(lambda: _cpu_seconds(process.proc.pid) > listening + 1.5, 60, "the warm-up to be computing")
    assert http_json(process.url, "GET", "/v2/health/ready")[0] != 200, "still warming"
    process.proc.send_signal(signal.SIGTERM)
    try:
        code = process.wait_exit(timeout=2 + SHUTDOWN_MARGIN_SECONDS)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running after SIGTERM:\n{process.log}") from None
    assert code == 0, process.log
    assert "stopped while loading" in process.log
    assert "terminate called" not in process.log
