"""Artifact and model-source storage: an S3 prefix (boto3) or a local directory.

Both kinds follow the layout in ``neuronserve.manifest``. Publishing writes every model file first
and the manifest last, so a reader that finds a manifest finds a complete artifact. S3 endpoints
come from boto3's own configuration (``AWS_ENDPOINT_URL``, profiles, IRSA in a pod).
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuronserve.manifest import MANIFEST_NAME, Manifest, split_s3_uri, verify_files

CHUNK = 1 << 20


class StoreError(Exception):
    """A store could not be read or written; the message says which object and why."""


class ArtifactRejected(Exception):
    """A fetched artifact does not match its manifest; the message lists every mismatch."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def local_path(uri: str) -> Path:
    return Path(uri[len("file://") :] if uri.startswith("file://") else uri)


def s3_client() -> Any:
    import boto3  # imported here so that directory-only use needs no AWS SDK at import time

    return boto3.client("s3")


def _s3_error(action: str, uri: str, exc: Exception) -> StoreError:
    return StoreError(f"cannot {action} {uri}: {exc}")


def _local_error(action: str, path: Path, exc: OSError) -> StoreError:
    """A directory store's OSError as a StoreError: what was done where, why, and on which file."""
    reason = exc.strerror or str(exc)
    if exc.filename is not None and str(exc.filename) != str(path):
        reason = f"{reason}: {exc.filename}"
    return StoreError(f"cannot {action} {path}: {reason}")


@dataclass(frozen=True)
class Store:
    """A store root: ``s3://bucket/prefix`` or a directory."""

    root: str

    def _key_uri(self, key: str, name: str = "") -> str:
        base = f"{self.root.rstrip('/')}/{key}"
        return f"{base}/{name}" if name else base

    def has_artifact(self, key: str) -> bool:
        """True when a manifest is stored under this cache key (a complete artifact)."""
        uri = self._key_uri(key, MANIFEST_NAME)
        if not is_s3(self.root):
            try:
                return local_path(uri).is_file()
            except OSError as exc:  # is_file() is False for a missing path, raises for e.g. EACCES
                raise _local_error("look up", local_path(uri), exc) from exc
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, obj = split_s3_uri(uri)
        try:
            s3_client().head_object(Bucket=bucket, Key=obj)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise _s3_error("look up", uri, exc) from exc
        except BotoCoreError as exc:
            raise _s3_error("look up", uri, exc) from exc
        return True

    def put_bytes(self, relative: str, data: bytes) -> str:
        """Write one small object under the root (replacing it atomically in a directory). Returns its URI."""
        uri = f"{self.root.rstrip('/')}/{relative}"
        if not is_s3(uri):
            path = local_path(uri)
            partial = path.with_name(path.name + ".partial")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                partial.write_bytes(data)
                partial.replace(path)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    partial.unlink()
                raise _local_error("write", path, exc) from exc
            return str(path)
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, key = split_s3_uri(uri)
        try:
            s3_client().put_object(Bucket=bucket, Key=key, Body=data)
        except (ClientError, BotoCoreError) as exc:
            raise _s3_error("write", uri, exc) from exc
        return uri

    def get_bytes(self, relative: str) -> bytes:
        """Read one small object under the root."""
        uri = f"{self.root.rstrip('/')}/{relative}"
        if not is_s3(uri):
            try:
                return local_path(uri).read_bytes()
            except OSError as exc:
                raise _local_error("read", local_path(uri), exc) from exc
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, key = split_s3_uri(uri)
        try:
            body: bytes = s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise _s3_error("read", uri, exc) from exc
        return body

    def publish(self, local_dir: Path, manifest: Manifest) -> str:
        """Store an artifact directory under its cache key, manifest last. Returns the artifact URI."""
        target = self._key_uri(manifest.cache_key)
        names = [f.path for f in manifest.files] + [MANIFEST_NAME]
        if not is_s3(self.root):
            dest = local_path(target)
            staging = dest.with_name(dest.name + ".partial")
            try:
                shutil.rmtree(staging, ignore_errors=True)
                staging.mkdir(parents=True)
                for name in names:
                    (staging / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(local_dir / name, staging / name)
                shutil.rmtree(dest, ignore_errors=True)
                staging.rename(dest)
            except OSError as exc:
                shutil.rmtree(staging, ignore_errors=True)
                raise _local_error("store the artifact at", dest, exc) from exc
            return str(dest)
        from botocore.exceptions import BotoCoreError, ClientError

        client = s3_client()
        for name in names:
            bucket, obj = split_s3_uri(f"{target}/{name}")
            try:
                client.upload_file(str(local_dir / name), bucket, obj)
            except (ClientError, BotoCoreError) as exc:
                raise _s3_error("upload", f"s3://{bucket}/{obj}", exc) from exc
        return target


def download_tree(uri: str, dest: Path) -> Path:
    """Copy every object under an S3 prefix into ``dest`` (for s3:// model sources)."""
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, prefix = split_s3_uri(uri)
    client = s3_client()
    count = 0
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                rel = obj["Key"][len(prefix) :].lstrip("/") if prefix else obj["Key"]
                if not rel or rel.endswith("/"):
                    continue
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                client.download_file(bucket, obj["Key"], str(target))
                count += 1
    except (ClientError, BotoCoreError) as exc:
        raise _s3_error("download", uri, exc) from exc
    if count == 0:
        raise StoreError(f"nothing found under {uri}")
    return dest


def fetch_artifact(uri: str, scratch: Path) -> tuple[Manifest, bytes, Path]:
    """Fetch an artifact (S3 into ``scratch``, a directory in place) and verify every file's sha256.

    Returns the manifest, its raw bytes and the directory holding the files. Raises StoreError when
    the artifact cannot be read and ArtifactRejected when any file differs from the manifest.
    """
    if is_s3(uri):
        from botocore.exceptions import BotoCoreError, ClientError

        client = s3_client()
        bucket, prefix = split_s3_uri(uri)
        manifest_key = f"{prefix}/{MANIFEST_NAME}" if prefix else MANIFEST_NAME
        try:
            manifest_bytes = client.get_object(Bucket=bucket, Key=manifest_key)["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise _s3_error("read the manifest", f"s3://{bucket}/{manifest_key}", exc) from exc
        manifest = _parse_manifest(manifest_bytes, uri)
        scratch.mkdir(parents=True, exist_ok=True)
        for entry in manifest.files:
            target = scratch / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            key = f"{prefix}/{entry.path}" if prefix else entry.path
            try:
                client.download_file(bucket, key, str(target))
            except (ClientError, BotoCoreError) as exc:
                raise _s3_error("download", f"s3://{bucket}/{key}", exc) from exc
        directory = scratch
    else:
        directory, manifest_bytes = _read_local_manifest(uri)
        manifest = _parse_manifest(manifest_bytes, uri)
    digests = {e.path: file_sha256(directory / e.path) for e in manifest.files if (directory / e.path).is_file()}
    problems = verify_files(manifest, digests)
    if problems:
        raise ArtifactRejected(
            f"artifact {uri} does not match its manifest (refusing to serve it):\n  " + "\n  ".join(problems)
        )
    return manifest, manifest_bytes, directory


def _read_local_manifest(uri: str) -> tuple[Path, bytes]:
    """A directory artifact's folder and its manifest's raw bytes."""
    directory = local_path(uri)
    manifest_path = directory / MANIFEST_NAME
    try:
        return directory, manifest_path.read_bytes()
    except OSError as exc:
        raise StoreError(f"cannot read the manifest {manifest_path}: {exc.strerror or exc}") from exc


def _parse_manifest(data: bytes, uri: str) -> Manifest:
    from pydantic import ValidationError

    try:
        return Manifest.from_json_bytes(data)
    except ValidationError as exc:
        raise ArtifactRejected(f"artifact {uri} has an invalid manifest: {exc}") from exc


def fetch_manifest(uri: str, scratch: Path, extra: tuple[str, ...] = ()) -> tuple[Manifest, Path]:
    """Fetch only an artifact's manifest and those of ``extra`` files it lists, verified; no model files.

    For a server that needs the model's contract (name, buckets, signatures, tokenizer) but not its
    weights: the emulated device. Returns the manifest and the directory holding the fetched files.
    """
    if is_s3(uri):
        from botocore.exceptions import BotoCoreError, ClientError

        client = s3_client()
        bucket, prefix = split_s3_uri(uri)

        def get(name: str) -> bytes:
            key = f"{prefix}/{name}" if prefix else name
            try:
                body: bytes = client.get_object(Bucket=bucket, Key=key)["Body"].read()
            except (ClientError, BotoCoreError) as exc:
                raise _s3_error("read", f"s3://{bucket}/{key}", exc) from exc
            return body

        manifest = _parse_manifest(get(MANIFEST_NAME), uri)
        scratch.mkdir(parents=True, exist_ok=True)
        directory = scratch
        wanted = [e for e in manifest.files if e.path in extra]
        for entry in wanted:
            target = scratch / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(get(entry.path))
    else:
        directory, manifest_bytes = _read_local_manifest(uri)
        manifest = _parse_manifest(manifest_bytes, uri)
        wanted = [e for e in manifest.files if e.path in extra]
    problems = [
        f"{e.path}: sha256 does not match the manifest"
        for e in wanted
        if not (directory / e.path).is_file() or file_sha256(directory / e.path) != e.sha256
    ]
    if problems:
        raise ArtifactRejected(f"artifact {uri} does not match its manifest (refusing it):\n  " + "\n  ".join(problems))
    return manifest, directory
