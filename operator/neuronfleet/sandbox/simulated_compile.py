"""Simulated compile Jobs (``sandbox up --compile-jobs simulated``): a stand-in artifact, said to be one.

A compile Job's ``neuronserve compile --request-key K`` stores an artifact and then the request record
``<store>/requests/K.json`` the operator looks up; a Job that succeeds without the record leaves the
deployment ``Compiled=False ArtifactMissing``. Simulated Jobs used to do just that (exit 0, write
nothing), so no deployment of a sandbox started with ``--compile-jobs simulated`` was ever served.

:class:`SimulatedCompileRunner` is the kubelet's container runner for those Jobs: after the
profile's run time, for a pod whose command is ``neuronserve compile``, it reads that command line as
neuronserve does and publishes, in the store it names (the sandbox's S3, or a directory), what a
compile publishes, without compiling anything:

- ``<store>/<cache key>/manifest.json``: the requested contract (name, buckets, inputs, flags; one
  float32 output ``embedding`` as wide as the source's ``hidden_size``, when its ``config.json``
  says), whose ``compiler`` is :data:`SIMULATED_COMPILER` and whose ``output_description`` says that
  nothing was compiled. The bucket files it lists are empty (0 bytes, as listed), written so that
  the artifact is whole as its manifest says (the operator and a compile check that every listed
  file is there): only a server that reads the manifest and tokenizer alone (``neuronserve serve
  --device emulated-neuroncore``, the sandbox's default ``--serving``) can serve it; a CPU server
  cannot load an empty module. Manifests and records know only the backends ``neuron`` and
  ``cpu``: it says ``cpu``, never ``neuron``;
- the source's ``tokenizer.json``, when it has one, as a compile of a Hugging Face source copies it;
- the request record, naming that manifest's sha256.

A stand-in already stored is checked as the operator checks an artifact (every listed file there at
its size); one with a file deleted or rewritten behind its manifest is written again, as a compile
stores such a key anew.

Its cache key hashes :data:`SIMULATED_COMPILER` as the compiler identity, so it never names a real
compile's artifact; its source digest hashes the source's listing (names, sizes, ETags), not the
files' bytes, which are not read. A source with nothing to list fails the Job, as a compile would.
Other run-to-completion pods are left to the kubelet's simulation (the runner answers None).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import shlex
from pathlib import Path
from typing import Any

from neuronfleet.sandbox.kubelet import ContainerResult
from neuronfleet.sandbox.s3 import SandboxS3, split_s3
from neuronserve.manifest import (
    MANIFEST_NAME,
    TOKENIZER_NAME,
    Bucket,
    CompilerFlags,
    FileEntry,
    Manifest,
    RequestRecord,
    TensorSignature,
    artifact_uri,
    cache_key,
    manifest_sha256,
    request_record_path,
    revision,
    sha256_hex,
)

#: The compiler identity of a simulated compile's manifest (and part of its cache key).
SIMULATED_COMPILER = "simulated by neuronfleet sandbox --compile-jobs simulated: nothing compiled, no model files"
COMPILE_COMMAND = ("neuronserve", "compile")


class SimulatedCompileError(Exception):
    """The simulated compile cannot publish (its store or source is out of reach): the Job fails."""


class _Objects:
    """Reads and writes of small objects by URI: ``s3://`` through the sandbox's S3, else files."""

    def __init__(self, s3: SandboxS3 | None) -> None:
        self._s3 = s3
        self._client: Any = None

    def problems(self, uri: str, manifest: bytes) -> tuple[str, ...]:
        """What the operator's check of a stored artifact finds wrong with its files (none: whole)."""
        from neuronfleet.artifacts.store import ArtifactStore, StoreUnavailable

        try:
            client = self._s3_client(uri) if uri.startswith("s3://") else None
            return ArtifactStore(client).file_problems(uri, manifest)
        except StoreUnavailable as exc:
            raise SimulatedCompileError(str(exc)) from exc

    def _s3_client(self, uri: str) -> Any:
        if self._s3 is None:
            raise SimulatedCompileError(f"{uri}: this sandbox runs no S3 endpoint (--no-s3)")
        if self._client is None:
            self._client = self._s3.client()
        return self._client

    def listing(self, uri: str) -> list[str]:
        """``name size etag`` of every object (file) under the prefix (directory) or the object itself."""
        if not uri.startswith("s3://"):
            path = Path(uri.removeprefix("file://"))
            if path.is_file():
                return [f"{path.name} {path.stat().st_size}"]
            files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
            return [f"{p.relative_to(path).as_posix()} {p.stat().st_size}" for p in files]
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, key = split_s3(uri)
        client = self._s3_client(uri)
        entries = []
        try:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key):
                for obj in page.get("Contents") or []:
                    name = obj["Key"][len(key) :].lstrip("/")
                    # As neuronserve reads a source: the object named exactly, else what is under "<key>/".
                    if obj["Key"] == key or obj["Key"].startswith(key.rstrip("/") + "/"):
                        entries.append(f"{name} {obj['Size']} {obj.get('ETag', '')}")
        except (ClientError, BotoCoreError) as exc:
            raise SimulatedCompileError(f"cannot list {uri}: {exc}") from exc
        return sorted(entries)

    def read(self, uri: str) -> bytes | None:
        """The object's bytes; None when there is none."""
        if not uri.startswith("s3://"):
            path = Path(uri.removeprefix("file://"))
            return path.read_bytes() if path.is_file() else None
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, key = split_s3(uri)
        try:
            return bytes(self._s3_client(uri).get_object(Bucket=bucket, Key=key)["Body"].read())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise SimulatedCompileError(f"cannot read {uri}: {exc}") from exc
        except BotoCoreError as exc:
            raise SimulatedCompileError(f"cannot read {uri}: {exc}") from exc

    def write(self, uri: str, data: bytes) -> None:
        if not uri.startswith("s3://"):
            path = Path(uri)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            except OSError as exc:
                raise SimulatedCompileError(f"cannot write {uri}: {exc}") from exc
            return
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, key = split_s3(uri)
        try:
            self._s3_client(uri).put_object(Bucket=bucket, Key=key, Body=data)
        except (ClientError, BotoCoreError) as exc:
            raise SimulatedCompileError(f"cannot write {uri}: {exc}") from exc


def _config_ints(config: object) -> tuple[int, int | None]:
    """``hidden_size`` (-1 when left out) and ``vocab_size`` of a source's config.json, refused
    clearly (as a real compile's config reading would fail) when they are not whole numbers."""
    if not isinstance(config, dict):
        raise SimulatedCompileError(f"config.json is not a JSON object: {type(config).__name__}")
    hidden = config.get("hidden_size", -1)
    vocab = config.get("vocab_size")
    for key, value in (("hidden_size", hidden), ("vocab_size", -1 if vocab is None else vocab)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise SimulatedCompileError(f"config.json's {key} is not a whole number: {value!r}")
    return hidden, vocab


def _compile_parser() -> argparse.ArgumentParser:
    """The options of ``neuronserve compile`` the operator's Job passes (``kube.jobs.compile_args``),
    with neuronserve's defaults (the operator never imports neuronserve's CLI)."""

    def numbers(text: str) -> list[int]:
        return [int(part) for part in text.split(",") if part]

    def inputs(text: str) -> list[tuple[str, str]]:
        return [(name, dtype or "int64") for name, _, dtype in (part.partition(":") for part in text.split(","))]

    parser = argparse.ArgumentParser(prog="neuronserve compile", add_help=False)
    parser.add_argument("--source", required=True)
    parser.add_argument("--format", default="auto")
    parser.add_argument("--store", required=True)
    parser.add_argument("--name", default="model")
    parser.add_argument("--batch-buckets", type=numbers, default=[1, 4, 8, 16])
    parser.add_argument("--sequence-buckets", type=numbers, default=[128])
    parser.add_argument("--inputs", type=inputs, default=[("input_ids", "int64"), ("attention_mask", "int64")])
    parser.add_argument("--target", default="inf2")
    parser.add_argument("--auto-cast", default="matmult")
    parser.add_argument("--auto-cast-type", default="bf16")
    parser.add_argument("--opt-level", type=int, default=2)
    parser.add_argument("--extra-arg", action="append", default=[])
    parser.add_argument("--request-key")
    parser.add_argument("--result-file")
    return parser


def _under(prefix: str, name: str) -> str:
    return f"{prefix.rstrip('/')}/{name}"


def publish_simulated_compile(argv: list[str], s3: SandboxS3 | None) -> ContainerResult:
    """Publish the stand-in artifact and request record the command line ``argv`` (``neuronserve compile
    ...``) asks for; the container's outcome, with its log."""
    try:
        args = _compile_parser().parse_args(argv[2:])
    except SystemExit:
        return ContainerResult(exit_code=2, message=f"simulated compile: bad command line: {shlex.join(argv)}")
    objects = _Objects(s3)
    logs = ["neuronfleet sandbox: simulated compile Job (--compile-jobs simulated): nothing is compiled"]
    try:
        listing = objects.listing(args.source)
        if not listing:
            raise SimulatedCompileError(f"cannot read the model source {args.source}: nothing there")
        config_bytes = objects.read(_under(args.source, "config.json"))
        config = json.loads(config_bytes) if config_bytes else {}
        hidden, vocab = _config_ints(config)
        flags = CompilerFlags.from_command_line(args)
        buckets = [
            Bucket(batch=b, sequence=s)
            for b, s in itertools.product(sorted(set(args.batch_buckets)), sorted(set(args.sequence_buckets)))
        ]
        # The bounds a compile of a Hugging Face source declares (the server refuses ids beyond them).
        bounds = {"attention_mask": 1, "input_ids": vocab - 1 if vocab else None}
        inputs = [
            TensorSignature(name=name, dtype=dtype, shape=[-1, -1], min_value=0, max_value=bounds.get(name))
            for name, dtype in args.inputs
        ]
        digest = sha256_hex("\n".join(listing).encode())
        key = cache_key(digest, SIMULATED_COMPILER, flags, buckets, inputs)
        uri = artifact_uri(args.store, key)
        stored = objects.read(_under(uri, MANIFEST_NAME))
        damaged = objects.problems(uri, stored) if stored is not None else ()
        if damaged:
            # A file deleted or rewritten behind the manifest (the operator finds the record
            # dangling and compiles again): the stand-in is written again, as a compile stores anew.
            logs.append(f"stand-in artifact {uri} not whole ({'; '.join(damaged)}): written again")
        # Also under a manifest stored before they were written: the key names the buckets.
        for bucket in buckets:
            if stored is None or damaged or objects.read(_under(uri, bucket.file_name)) is None:
                objects.write(_under(uri, bucket.file_name), b"")
        if stored is None or damaged:
            files = [FileEntry(path=b.file_name, sha256=sha256_hex(b""), size=0) for b in buckets]
            tokenizer = objects.read(_under(args.source, TOKENIZER_NAME))
            if tokenizer is not None:
                objects.write(_under(uri, TOKENIZER_NAME), tokenizer)
                files.append(FileEntry(path=TOKENIZER_NAME, sha256=sha256_hex(tokenizer), size=len(tokenizer)))
            manifest = Manifest(
                name=args.name,
                backend="cpu",
                buckets=buckets,
                inputs=inputs,
                outputs=[TensorSignature(name="embedding", dtype="float32", shape=[-1, hidden])],
                output_description="none: the sandbox simulated this compile (no model was traced, its model files "
                "are empty); only the emulated NeuronCore device serves it, with placeholder outputs",
                compiler=SIMULATED_COMPILER,
                torch_version="none",
                flags=flags,
                source_digest=digest,
                source=args.source,
                cache_key=key,
                files=files,
            )
            stored = manifest.to_json_bytes()
            objects.write(_under(uri, MANIFEST_NAME), stored)
            logs.append(f"stand-in artifact {uri}: manifest and empty model files, compiler {SIMULATED_COMPILER!r}")
        else:
            logs.append(f"stand-in artifact {uri} already stored")
        sha = manifest_sha256(stored)
        result = {"uri": uri, "cacheKey": key, "revision": revision(key), "sha256": sha, "backend": "cpu"}
        if args.request_key:
            record = RequestRecord(
                cache_key=key, artifact_uri=uri, manifest_sha256=sha, backend="cpu", revision=revision(key)
            )
            record_uri = _under(args.store, request_record_path(args.request_key))
            objects.write(record_uri, record.to_json_bytes())
            logs.append(f"request record {record_uri}")
    except (SimulatedCompileError, ValueError) as exc:
        logs.append(f"simulated compile failed: {exc}")
        return ContainerResult(exit_code=1, message=f"simulated compile failed: {exc}", logs=tuple(logs))
    return ContainerResult(exit_code=0, message=json.dumps({**result, "simulated": True}), logs=tuple(logs))


class SimulatedCompileRunner:
    """The kubelet's container runner for simulated compile Jobs (see the module docstring)."""

    def __init__(self, s3: SandboxS3 | None, run_s: float) -> None:
        self.s3 = s3
        #: How long a simulated compile runs before it publishes (the kubelet's ``run_s``).
        self.run_s = run_s

    async def __call__(self, pod: dict[str, Any]) -> ContainerResult | None:
        containers = (pod.get("spec") or {}).get("containers") or []
        if not containers:
            return None
        argv = [str(a) for a in (containers[0].get("command") or []) + (containers[0].get("args") or [])]
        if tuple(argv[:2]) != COMPILE_COMMAND:
            return None
        await asyncio.sleep(self.run_s)
        return await asyncio.to_thread(publish_simulated_compile, argv, self.s3)
