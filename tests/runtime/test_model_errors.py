"""A request the model itself fails on: a short 500 for that request alone, the detail in the log.

The tiny TorchScript artifact declares no input range, so ``input_ids`` 500 passes validation and
its 100-row embedding table raises "index out of range" inside TorchScript, whose message is a
traceback naming the files the model was compiled from.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from tiny_model import save_tiny

from neuronserve import cli
from neuronserve.backend import ModelRunner
from neuronserve.server import ServeConfig
from neuronserve.store import fetch_artifact
from runtime_support import LiveServer, http_json, scrape_metrics

INFER = "/v2/models/tiny/infer"


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("tiny")
    source = save_tiny(root / "tiny.pt")
    argv = ["compile", "--source", str(source), "--store", str(root / "store"), "--name", "tiny"]
    result = root / "result.json"
    assert cli.main([*argv, "--batch-buckets", "1,4", "--sequence-buckets", "8", "--result-file", str(result)]) == 0
    manifest, _, directory = fetch_artifact(json.loads(result.read_text())["uri"], root / "fetched")
    runner = ModelRunner(manifest, directory)
    runner.warm(repeats=0)
    # A long batch delay: the four concurrent requests below run as one batch of four rows.
    with LiveServer(manifest, runner, ServeConfig(max_batch_delay_ms=500.0)) as server:
        yield server


def _body(first_id: int) -> dict[str, Any]:
    return {
        "inputs": [
            {"name": "input_ids", "shape": [1, 2], "datatype": "INT64", "data": [first_id, 1]},
            {"name": "attention_mask", "shape": [1, 2], "datatype": "INT64", "data": [1, 1]},
        ]
    }


async def test_a_request_the_model_fails_on_gets_a_short_500_and_the_rest_of_its_batch_is_served(
    tiny_server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    before = scrape_metrics(tiny_server.url)
    ids = [3, 500, 7, 9]
    async with aiohttp.ClientSession() as session:

        async def infer(first_id: int) -> tuple[int, dict[str, Any]]:
            async with session.post(tiny_server.url + INFER, json=_body(first_id)) as response:
                return response.status, await response.json()

        with caplog.at_level(logging.ERROR, logger="neuronserve"):
            answers = await asyncio.gather(*(infer(i) for i in ids))

    statuses = {first_id: status for first_id, (status, _) in zip(ids, answers, strict=True)}
    assert statuses == {3: 200, 500: 500, 7: 200, 9: 200}
    error = answers[1][1]["error"]
    assert error == "inference failed: RuntimeError: index out of range in self"
    # The whole TorchScript traceback, with the model source's paths, is in the server's log only.
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "Traceback of TorchScript" in logged and "tiny_model.py" in logged

    after = scrape_metrics(tiny_server.url)
    added = {
        outcome: after[f"neuronserve_requests_total{{outcome={outcome}}}"]
        - before[f"neuronserve_requests_total{{outcome={outcome}}}"]
        for outcome in ("ok", "model_error", "error")
    }
    assert added == {"ok": 3, "model_error": 1, "error": 0}


def test_the_500_names_no_file(tiny_server: LiveServer) -> None:
    status, _, doc = http_json(tiny_server.url, "POST", INFER, json.dumps(_body(500)).encode())
    assert status == 500
    assert "File" not in doc["error"] and "/" not in doc["error"] and "Traceback" not in doc["error"]
