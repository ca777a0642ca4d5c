"""A failed device is told from requests the model cannot run: after a run of requests that failed
alone with no success between, the server runs the warm-up input; if that fails too it reports not
ready, counts further failures as ``error`` (what NeuronserveRequestErrors alerts on), reports not
live once failed ``--device-failure-restart-seconds`` (the kubelet restarts it), and is ready and
live again after as many successes in a row as the failures that raised the suspicion; isolated
successes neither make it ready nor stop that clock. Bad inputs alone never make it unready.

A real server on 127.0.0.1 over the emulated replica's contract, in front of a device the test
breaks and mends (torch-neuronx surfaces a Neuron runtime failure as a RuntimeError on every run).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from neuronserve.emulated import BERT_BASE, synthetic_manifest
from neuronserve.health import DeviceHealth
from neuronserve.manifest import Bucket, FileEntry
from neuronserve.server import ServeConfig
from runtime_support import LiveServer, http_json, scrape_metrics

MODEL = "bert-base"
INFER = f"/v2/models/{MODEL}/infer"
BAD_ID = 500  # an id this device's model cannot take (as a TorchScript embedding table refuses one)


class BreakableDevice:
    """Answers zeros; raises on every run while ``broken``, and on any request whose first id is BAD_ID."""

    def __init__(self) -> None:
        self.broken = False
        self.runs: list[list[int]] = []

    def run(self, requests: Sequence[Sequence[npt.NDArray[Any]]]) -> tuple[list[npt.NDArray[np.float32]], None]:
        self.runs.append([int(arrays[0][0, 0]) for arrays in requests])
        if self.broken:
            raise RuntimeError("nrt_execute status=1006 (NRT_EXEC_HW_ERR_NC_UE): uncorrectable NeuronCore error")
        if any(int(arrays[0][0, 0]) == BAD_ID for arrays in requests):
            raise RuntimeError("index out of range in self")
        return [np.zeros((arrays[0].shape[0], 4), dtype=np.float32) for arrays in requests], None

    def cost(self, rows: int, sequence: int) -> float | None:
        return None


def _infer(url: str, first_id: int) -> int:
    body = {
        "inputs": [
            {"name": "input_ids", "shape": [1, 4], "datatype": "INT64", "data": [first_id, 7, 7, 7]},
            {"name": "attention_mask", "shape": [1, 4], "datatype": "INT64", "data": [1, 1, 1, 1]},
        ]
    }
    return http_json(url, "POST", INFER, json.dumps(body).encode())[0]


def _health(url: str, what: str) -> tuple[int, Any]:
    status, _, doc = http_json(url, "GET", f"/v2/health/{what}")
    return status, doc


def _until(condition: Callable[[], bool], what: str, limit_seconds: float = 20) -> None:
    deadline = time.monotonic() + limit_seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _outcomes(url: str) -> dict[str, float]:
    metrics = scrape_metrics(url)
    return {o: metrics[f"neuronserve_requests_total{{outcome={o}}}"] for o in ("ok", "model_error", "error")}


CONFIG = ServeConfig(max_batch_delay_ms=0, device_suspect_after=3, device_restart_seconds=0.5)


def test_a_failed_device_turns_unready_counts_errors_turns_unlive_and_recovers_after_successes_in_a_row() -> None:
    device = BreakableDevice()
    with LiveServer(synthetic_manifest(BERT_BASE, MODEL), device, CONFIG) as server:
        assert _infer(server.url, 3) == 200
        device.broken = True
        # Three requests fail alone: they could be bad inputs, so they are model errors...
        assert [_infer(server.url, i) for i in (4, 5, 6)] == [500] * 3
        assert _outcomes(server.url) == {"ok": 1, "model_error": 3, "error": 0}
        # ...until the warm-up input (every id 1) fails too: the device has failed.
        _until(lambda: _health(server.url, "ready")[0] == 503, "readiness to turn false")
        assert [1] in device.runs
        assert _health(server.url, "ready")[1]["phase"] == "device_failed"
        assert scrape_metrics(server.url)["neuronserve_ready"] == 0
        assert [_infer(server.url, i) for i in (7, 8)] == [500] * 2
        assert _outcomes(server.url) == {"ok": 1, "model_error": 3, "error": 2}
        # Failed for --device-failure-restart-seconds: not live, so that the kubelet restarts it.
        _until(lambda: _health(server.url, "live")[0] == 503, "liveness to turn false")
        # The device came back: as many successes in a row as the failures that raised the
        # suspicion (3) make it ready and live again; fewer do not.
        device.broken = False
        assert [_infer(server.url, i) for i in (9, 10)] == [200] * 2
        assert _health(server.url, "ready")[0] == 503 and _health(server.url, "live")[0] == 503
        assert _infer(server.url, 11) == 200
        assert _health(server.url, "ready")[0] == 200 and _health(server.url, "live")[0] == 200
        assert scrape_metrics(server.url)["neuronserve_ready"] == 1


def test_a_device_failing_most_requests_stays_unready_and_turns_unlive_through_isolated_successes() -> None:
    # An intermittent fault: every other request fails. Each isolated success ended the failure
    # (readiness flapped, the liveness clock restarted), so the process was never restarted.
    device = BreakableDevice()
    with LiveServer(synthetic_manifest(BERT_BASE, MODEL), device, CONFIG) as server:
        device.broken = True
        assert [_infer(server.url, i) for i in (4, 5, 6)] == [500] * 3
        _until(lambda: _health(server.url, "ready")[0] == 503, "readiness to turn false")
        readiness: list[int] = []

        def alternate_until_unlive() -> bool:
            device.broken = not device.broken
            _infer(server.url, 7)
            readiness.append(_health(server.url, "ready")[0])
            return _health(server.url, "live")[0] == 503

        _until(alternate_until_unlive, "liveness to turn false")
        assert set(readiness) == {503}
        assert _outcomes(server.url)["ok"] >= 1  # successes there were


def test_the_device_health_state_ends_a_failure_only_after_successes_in_a_row() -> None:
    now = [1000.0]  # a monotonic clock's reading: not 0, so the failure's age is a difference
    health = DeviceHealth(suspect_after=3, restart_after=60.0, clock=lambda: now[0])
    assert [health.failed_alone() for _ in range(3)] == [False, False, True]
    assert health.self_test_failed() and health.failed
    for _ in range(10):  # 20 s of a device failing every other request
        now[0] += 1.0
        assert not health.succeeded()
        now[0] += 1.0
        health.failed_alone()
    assert health.failed and health.failed_since == 1000.0
    now[0] = 1059.5
    assert health.live()
    now[0] = 1060.0
    assert not health.live()  # the clock ran through the isolated successes
    assert [health.succeeded() for _ in range(3)] == [False, False, True]
    assert not health.failed and health.live()


def test_bad_inputs_in_a_row_on_a_sound_device_stay_model_errors_and_it_stays_ready() -> None:
    device = BreakableDevice()
    with LiveServer(synthetic_manifest(BERT_BASE, MODEL), device, CONFIG) as server:
        assert [_infer(server.url, BAD_ID) for _ in range(3)] == [500] * 3
        # The run reached three: the warm-up input ran, and succeeded, which ended the run.
        _until(lambda: [1] in device.runs, "the device check to run the warm-up input")
        _until(lambda: server.call(lambda: server.state and server.state.health.run) == 0, "the check to end the run")
        assert _health(server.url, "ready")[0] == 200 and _health(server.url, "live")[0] == 200
        assert _infer(server.url, BAD_ID) == 500
        assert _outcomes(server.url) == {"ok": 0, "model_error": 4, "error": 0}


class LongBucketBroken(BreakableDevice):
    """A device whose long-sequence bucket fails on every run (one NEFF's fault); short runs succeed."""

    def run(self, requests: Sequence[Sequence[npt.NDArray[Any]]]) -> tuple[list[npt.NDArray[np.float32]], None]:
        self.runs.append([int(arrays[0].shape[1]) for arrays in requests])
        if any(arrays[0].shape[1] > 32 for arrays in requests):
            raise RuntimeError("nrt_execute status=1006 (NRT_EXEC_HW_ERR_NC_UE) in the sequence-128 bucket")
        return [np.zeros((arrays[0].shape[0], 4), dtype=np.float32) for arrays in requests], None


def test_the_device_check_runs_in_the_bucket_of_the_requests_that_failed() -> None:
    # The check ran one row at the shortest sequence only: a device failing in its longer bucket
    # passed it, stayed ready and counted every failure as the clients' (model_error).
    synthetic = synthetic_manifest(BERT_BASE, MODEL)
    buckets = [Bucket(batch=1, sequence=32), Bucket(batch=1, sequence=128)]
    files = [FileEntry(path=b.file_name, sha256=synthetic.files[0].sha256, size=0) for b in buckets]
    manifest = synthetic.model_copy(update={"buckets": buckets, "files": files})
    device = LongBucketBroken()
    long_body = {
        "inputs": [
            {"name": "input_ids", "shape": [1, 100], "datatype": "INT64", "data": [3] * 100},
            {"name": "attention_mask", "shape": [1, 100], "datatype": "INT64", "data": [1] * 100},
        ]
    }
    with LiveServer(manifest, device, CONFIG) as server:
        assert _infer(server.url, 3) == 200  # 4 tokens: the short bucket works
        for _ in range(3):
            assert http_json(server.url, "POST", INFER, json.dumps(long_body).encode())[0] == 500
        _until(lambda: _health(server.url, "ready")[0] == 503, "readiness to turn false")
        assert [100] in device.runs[4:]  # the check: the warm-up input at the failing requests' length
        assert _health(server.url, "ready")[1]["phase"] == "device_failed"
