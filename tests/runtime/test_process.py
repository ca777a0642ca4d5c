"""``neuronserve serve`` as a real process: it refuses a tampered artifact, serves from S3, and on
SIGTERM under load answers every accepted request before exiting 0.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import aiohttp
import boto3
import numpy as np
import pytest

from neuronserve.manifest import Manifest, split_s3_uri
from neuronserve.store import ArtifactRejected, fetch_artifact
from runtime_support import MODEL_NAME, Compiled, Fetched, Reference, S3Server, ServeProcess


def _flip_one_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_serve_refuses_an_artifact_with_one_byte_changed(fetched: Fetched, tmp_path: Path, serve_process: Any) -> None:
    tampered = tmp_path / "artifact"
    tampered.mkdir()
    victim = "model-b4-s128.pt"
    # Unchanged files are linked, not copied: each bucket file is ~90 MB.
    for entry in fetched.manifest.files:
        if entry.path != victim:
            os.symlink(fetched.directory / entry.path, tampered / entry.path)
    (tampered / victim).write_bytes((fetched.directory / victim).read_bytes())
    (tampered / "manifest.json").write_bytes(fetched.manifest.to_json_bytes())
    _flip_one_byte(tampered / victim, 4096)

    process: ServeProcess = serve_process(["--artifact", str(tampered)])
    code = process.wait_exit(timeout=120)
    assert code == 2, process.log
    assert "does not match its manifest (refusing to serve it)" in process.log
    assert f"{victim}: sha256" in process.log
    assert "Traceback" not in process.log


def test_fetch_refuses_a_tampered_s3_artifact(compiled: Compiled, s3_env: S3Server, tmp_path: Path) -> None:
    client = boto3.client("s3")
    bucket, prefix = split_s3_uri(compiled.uri)
    manifest = Manifest.from_json_bytes(client.get_object(Bucket=bucket, Key=f"{prefix}/manifest.json")["Body"].read())
    key = f"{prefix}/{manifest.files_prefix}/tokenizer.json"
    original = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    tampered = bytearray(original)
    tampered[100] ^= 0x01
    # In place (copying ~360 MB of bucket files inside moto is slow), restored for the other tests.
    client.put_object(Bucket=bucket, Key=key, Body=bytes(tampered))
    try:
        with pytest.raises(ArtifactRejected, match=r"tokenizer\.json: sha256 [0-9a-f]{64} does not match"):
            fetch_artifact(compiled.uri, tmp_path)
    finally:
        client.put_object(Bucket=bucket, Key=key, Body=original)


async def _wait_until(condition: Any, limit_seconds: float, what: str) -> None:
    deadline = time.monotonic() + limit_seconds
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_sigterm_under_load_answers_every_accepted_request_then_exits_0(
    compiled: Compiled, s3_server: S3Server, reference: Reference, serve_process: Any
) -> None:
    process: ServeProcess = serve_process(
        [
            "--artifact",
            compiled.uri,
            "--grace-seconds",
            "60",
            # No drain delay: new requests are refused at once (test_drain_delay has the delay).
            "--drain-delay-seconds",
            "0",
            "--max-queue",
            "200",
            "--max-batch-delay-ms",
            "2",
        ],
        env=s3_server.env,
    )
    await asyncio.to_thread(process.wait_listening, 120)

    async with aiohttp.ClientSession() as session:

        async def status(path: str) -> int:
            async with session.get(process.url + path) as response:
                return response.status

        async def ready() -> bool:
            return await status("/v2/health/ready") == 200

        await _wait_until(ready, 120, "the server to load the artifact from S3 and warm up")

        sentence = "draining replicas finish what they accepted " * 6
        ids = reference.tokens(sentence)
        body = {
            "inputs": [
                {"name": "input_ids", "shape": [1, len(ids)], "datatype": "INT64", "data": ids},
                {"name": "attention_mask", "shape": [1, len(ids)], "datatype": "INT64", "data": [1] * len(ids)},
            ]
        }

        async def infer() -> tuple[int, dict[str, Any]]:
            async with session.post(f"{process.url}/v2/models/{MODEL_NAME}/infer", json=body) as response:
                return response.status, await response.json()

        async def inflight() -> float:
            async with session.get(process.url + "/metrics") as response:
                for line in (await response.text()).splitlines():
                    if line.startswith("neuronserve_inflight_requests "):
                        return float(line.split()[1])
            return 0.0

        tasks = [asyncio.create_task(infer()) for _ in range(48)]

        async def loaded() -> bool:
            return await inflight() >= 24

        await _wait_until(loaded, 60, "requests to pile up in the server")
        accepted_before_sigterm = await inflight()
        process.proc.send_signal(signal.SIGTERM)

        async def not_ready() -> bool:
            return await status("/v2/health/ready") == 503

        await _wait_until(not_ready, 10, "readiness to turn false")
        late_status, late = await infer()
        # A request dropped without an answer would raise a connection error here.
        results = await asyncio.gather(*tasks)

    code = await asyncio.to_thread(process.wait_exit, 90)
    assert code == 0, process.log
    assert "drained (all work finished)" in process.log
    assert (late_status, late["error"]) == (503, "not accepting requests (draining)")
    statuses = [s for s, _ in results]
    assert set(statuses) <= {200, 503}, statuses
    assert statuses.count(200) >= accepted_before_sigterm
    expected = reference.embed([sentence])[0]
    for status_code, doc in results:
        if status_code == 200:
            np.testing.assert_allclose(np.asarray(doc["outputs"][0]["data"]), expected, atol=1e-4)


def test_sigterm_while_loading_exits_at_once_not_when_the_load_ends(serve_process: Any) -> None:
    # The artifact's S3 endpoint takes the connection and never answers: the download would hang
    # for minutes (boto3's timeouts and retries). A stop must not wait for it.
    silent = socket.create_server(("127.0.0.1", 0), backlog=8)
    try:
        env = {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{silent.getsockname()[1]}",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        process: ServeProcess = serve_process(["--artifact", "s3://never/answers"], env=env)
        process.wait_listening(120)
        process.proc.send_signal(signal.SIGTERM)
        assert process.wait_exit(timeout=30) == 0, process.log
        assert "stopped while loading" in process.log
    finally:
        silent.close()
