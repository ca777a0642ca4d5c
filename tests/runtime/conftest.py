"""Fixtures of the runtime tests: a moto S3 server, the real MiniLM compiled once per session,
the artifact fetched back from S3, a reference model, and servers in-process or as subprocesses.

Compiling and loading are session-scoped: every test reuses one small bucket set
(batch 1, 4 x sequence 32, 128) so that the whole folder stays well under two minutes.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator

import boto3
import pytest
from moto.server import ThreadedMotoServer

from neuronserve import cli
from neuronserve.backend import ModelRunner
from neuronserve.protocol import tokenizer_from_file
from neuronserve.server import ServeConfig
from neuronserve.store import fetch_artifact
from runtime_support import (
    BUCKET,
    STORE,
    Compiled,
    Fetched,
    LiveServer,
    Reference,
    S3Server,
    ServeProcess,
    aws_env,
    compile_argv,
)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    s3 = S3Server(
        endpoint,
        {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        },
    )
    with aws_env(s3):
        boto3.client("s3").create_bucket(Bucket=BUCKET)
    yield s3
    server.stop()


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    return s3_server


@pytest.fixture(scope="session")
def compiled(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Compiled:
    """The real all-MiniLM-L6-v2 compiled by the CLI into the moto S3 store."""
    result_file = tmp_path_factory.mktemp("compile") / "result.json"
    errors = tmp_path_factory.mktemp("compile") / "stderr.txt"
    with aws_env(s3_server), errors.open("w") as err, contextlib.redirect_stderr(err):
        code = cli.main([*compile_argv(STORE), "--result-file", str(result_file)])
    assert code == 0, errors.read_text()
    return Compiled(json.loads(result_file.read_text()), errors.read_text())


@pytest.fixture(scope="session")
def fetched(compiled: Compiled, s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Fetched:
    """The compiled artifact downloaded back from S3 and verified."""
    with aws_env(s3_server):
        manifest, _, directory = fetch_artifact(compiled.uri, tmp_path_factory.mktemp("artifact"))
    return Fetched(manifest, directory)


@pytest.fixture(scope="session")
def model_runner(fetched: Fetched) -> ModelRunner:
    runner = ModelRunner(fetched.manifest, fetched.directory)
    runner.warm()
    return runner


@pytest.fixture(scope="session")
def reference() -> Reference:
    return Reference()


@pytest.fixture(scope="module")
def live_server(fetched: Fetched, model_runner: ModelRunner) -> Iterator[LiveServer]:
    tokenize = tokenizer_from_file(str(fetched.directory / "tokenizer.json"), fetched.manifest.max_sequence)
    config = ServeConfig(max_batch_delay_ms=5.0, max_queue=64)
    with LiveServer(fetched.manifest, model_runner, config, tokenize) as server:
        yield server


@pytest.fixture
def serve_process() -> Iterator[Callable[..., ServeProcess]]:
    started: list[ServeProcess] = []

    def start(args: list[str], env: dict[str, str] | None = None, host: str | None = "127.0.0.1") -> ServeProcess:
        process = ServeProcess(args, env, host)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()
