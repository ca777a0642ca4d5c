"""Artifact and model-source storage: an S3 prefix (boto3) or a local directory.

Both kinds follow the layout in ``neuronserve.manifest``. Publishing writes every model file first
and the manifest last, so a reader that finds a manifest finds a complete artifact; the first
writer of a key wins (a rename in a directory, a conditional put of the manifest in S3, whose files
go to a folder of each writer's own) and a stored artifact is never replaced. The one exception is
a manifest whose files were deleted behind it (a lifecycle rule, a person): no pod can load that
artifact, so a publish takes it for none and stores anew. S3 endpoints come from boto3's own
configuration (``AWS_ENDPOINT_URL``, profiles, IRSA in a pod).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuronserve.manifest import (
    MANIFEST_NAME,
    FileEntry,
    Manifest,
    archived,
    manifest_sha256,
    missing_files,
    split_s3_uri,
    verify_files,
)

CHUNK = 1 << 20
#: After a 409 on the manifest's conditional put (another writer's put in flight): how often and
#: how long to look for the manifest it stores.
_STORED_MANIFEST_LOOKS = 20
_STORED_MANIFEST_PAUSE_S = 0.5


class StoreError(Exception):
    """A store could not be read or written; the message says which object and why."""


class ArtifactRejected(Exception):
    """A fetched artifact does not match its manifest; the message lists every mismatch."""


class ManifestMismatch(ArtifactRejected):
    """The manifest at an artifact's URI is not the one the caller pinned (another sha256).

    The artifact was replaced after it was recorded (republished, overwritten): its files may be
    valid for *that* manifest, but they are not the bytes the caller was told to serve.
    """

    def __init__(self, uri: str, expected: str, found: str) -> None:
        super().__init__(
            f"the manifest at {uri} has sha256 {found}, not the pinned {expected} (--manifest-sha256): "
            "the artifact was replaced after it was recorded; refusing to serve it"
        )
        self.uri, self.expected, self.found = uri, expected, found


def check_pinned(uri: str, manifest_bytes: bytes, expected_sha256: str | None) -> None:
    """Raise :class:`ManifestMismatch` unless the manifest bytes have ``expected_sha256`` (None: no pin)."""
    if expected_sha256 is None:
        return
    found = manifest_sha256(manifest_bytes)
    if found != expected_sha256.lower():
        raise ManifestMismatch(uri, expected_sha256.lower(), found)


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


def _s3_code(exc: Exception) -> str:
    """The error code of a botocore ClientError ("404", "NoSuchBucket", "AccessDenied"...), else ""."""
    response = getattr(exc, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def _whole_directory_artifact(directory: Path) -> bool:
    """Whether ``directory`` holds a manifest and every file it lists at its size."""
    try:
        data = (directory / MANIFEST_NAME).read_bytes()
        return not _directory_problems(directory, data)
    except (OSError, StoreError):
        return False


def _listed_objects(target: str, manifest_bytes: bytes) -> list[tuple[str, str]]:
    """The (bucket, key) of every file an S3 manifest stored at ``target`` lists."""
    manifest = _parsed(manifest_bytes)
    if manifest is None:
        return []
    return [split_s3_uri(f"{target}/{manifest.stored_path(e.path)}") for e in manifest.files]


def _s3_status(exc: Exception) -> int:
    """The HTTP status of a botocore ClientError (0 when it has none)."""
    response = getattr(exc, "response", None)
    metadata = response.get("ResponseMetadata", {}) if isinstance(response, dict) else {}
    return int(metadata.get("HTTPStatusCode") or 0)


def _files_prefix(manifest_bytes: bytes) -> str | None:
    """The writer folder a stored manifest names ("" for none; None when it is no manifest)."""
    try:
        document = json.loads(manifest_bytes)
    except ValueError:
        return None
    return str(document.get("files_prefix", "")) if isinstance(document, dict) else None


def _unique_sibling(path: Path, tag: str) -> Path:
    """A fresh name next to ``path`` for staging it: one per writer, so that writers never share one.

    (Not tempfile.mkdtemp/mkstemp: their 0700/0600 modes would stay on the stored artifact, which
    serving pods running as another user must be able to read.)
    """
    return path.with_name(f"{path.name}.{tag}-{uuid.uuid4().hex}")


@dataclass(frozen=True)
class _Found:
    """A manifest stored under a cache key, and what is wrong with the files it lists."""

    manifest_bytes: bytes
    #: Listed files missing or of another size (by a listing, nothing read); none: a whole artifact.
    problems: tuple[str, ...]
    #: S3: the manifest object's ETag, to replace exactly that manifest (a conditional put).
    etag: str | None = None


def _parsed(manifest_bytes: bytes) -> Manifest | None:
    """The manifest, or None when it is not one this code reads (then its files are not checked:
    a server refuses such an artifact anyway, and a newer writer's manifest is not replaced)."""
    from pydantic import ValidationError

    try:
        return Manifest.from_json_bytes(manifest_bytes)
    except ValidationError:
        return None


def _directory_problems(directory: Path, manifest_bytes: bytes) -> tuple[str, ...]:
    """The files a directory artifact's manifest lists that are missing or of another size (a stat each)."""
    manifest = _parsed(manifest_bytes)
    if manifest is None:
        return ()
    sizes = {}
    for entry in manifest.files:
        path = directory / manifest.stored_path(entry.path)
        try:
            info = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise _local_error("look up", path, exc) from exc
        if stat.S_ISREG(info.st_mode):
            sizes[entry.path] = info.st_size
    return tuple(missing_files(manifest, sizes))


@dataclass(frozen=True)
class Published:
    """What ``Store.publish`` left under the cache key.

    ``stored`` is False when another writer stored this cache key first: the artifact there is
    theirs (complete, and kept as is), ``manifest_bytes`` are its stored manifest and this
    writer's files were discarded.
    """

    uri: str
    manifest_bytes: bytes
    stored: bool


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
        """True when a complete artifact is stored under this cache key: its manifest, and every
        file it lists at the listed size. A manifest whose files were deleted is none: the next
        publish of the key replaces it."""
        found = self._look(key)
        return found is not None and not found.problems

    def _look(self, key: str) -> _Found | None:
        """The manifest stored under ``key`` and the problems of its files (None: no manifest).

        One read of the manifest and a stat (directory) or HEAD (S3) per listed file. In S3 a file
        in an archive storage class (GLACIER, DEEP_ARCHIVE) with no completed restore is a problem
        too: it cannot be downloaded.
        """
        uri = self._key_uri(key, MANIFEST_NAME)
        if not is_s3(self.root):
            directory = local_path(self._key_uri(key))
            try:
                data = (directory / MANIFEST_NAME).read_bytes()
            except (FileNotFoundError, NotADirectoryError):
                return None
            except OSError as exc:
                raise _local_error("look up", local_path(uri), exc) from exc
            return _Found(data, _directory_problems(directory, data))
        from botocore.exceptions import BotoCoreError, ClientError

        client = s3_client()
        bucket, obj = split_s3_uri(uri)
        try:
            response = client.get_object(Bucket=bucket, Key=obj)
            data = response["Body"].read()
        except ClientError as exc:
            # No bucket: nothing stored (check_writable, or the upload, says so in its words).
            if _s3_code(exc) in ("404", "NoSuchKey", "NotFound", "NoSuchBucket"):
                return None
            raise _s3_error("look up", uri, exc) from exc
        except BotoCoreError as exc:
            raise _s3_error("look up", uri, exc) from exc
        manifest = _parsed(data)
        if manifest is None:
            return _Found(data, (), response.get("ETag"))
        sizes = {}
        # Archived by a lifecycle transition: a HEAD finds it at its size, yet no pod can read it.
        unreadable = []
        for entry in manifest.files:
            file_key = f"{obj.rsplit('/', 1)[0]}/{manifest.stored_path(entry.path)}"
            try:
                head = client.head_object(Bucket=bucket, Key=file_key)
            except ClientError as exc:
                if _s3_code(exc) not in ("404", "NoSuchKey", "NotFound"):
                    raise _s3_error("look up", f"s3://{bucket}/{file_key}", exc) from exc
                continue
            except BotoCoreError as exc:
                raise _s3_error("look up", f"s3://{bucket}/{file_key}", exc) from exc
            why = archived(head)
            if why is not None:
                unreadable.append(f"{entry.path}: {why}")
                sizes[entry.path] = entry.size  # said once, as archived, not also as another size
            else:
                sizes[entry.path] = int(head["ContentLength"])
        return _Found(data, (*unreadable, *missing_files(manifest, sizes)), response.get("ETag"))

    def _manifest_stored(self, key: str) -> bool:
        """True when a manifest is stored under this cache key."""
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
            if _s3_code(exc) in ("404", "NoSuchKey", "NotFound"):
                return False
            raise _s3_error("look up", uri, exc) from exc
        except BotoCoreError as exc:
            raise _s3_error("look up", uri, exc) from exc
        return True

    def check_writable(self, key: str) -> None:
        """Raise StoreError unless an artifact could be stored under ``key``: before a long trace.

        A directory store is created and a probe file written in it. In S3 the bucket must exist
        (head_bucket) and a probe object under the key's prefix be writable; the probe is deleted
        again when the credentials allow it (it lies outside the manifest, so a leftover is inert).
        """
        target = self._key_uri(key)
        if not is_s3(self.root):
            dest = local_path(target)
            probe = _unique_sibling(dest, "write-check")
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                with probe.open("xb"):
                    pass
                probe.unlink()
            except OSError as exc:
                raise _local_error("store the artifact at", dest, exc) from exc
            return
        from botocore.exceptions import BotoCoreError, ClientError

        client = s3_client()
        bucket, _ = split_s3_uri(self.root)
        try:
            client.head_bucket(Bucket=bucket)
        except ClientError as exc:
            code = _s3_code(exc)
            if code in ("404", "NoSuchBucket", "NotFound"):
                raise StoreError(f"cannot store the artifact at {target}: the bucket {bucket} does not exist") from exc
            # 403: the bucket exists, but this role may not list it; the probe below decides.
            if code not in ("403", "AccessDenied", "Forbidden"):
                raise _s3_error("store the artifact at", target, exc) from exc
        except BotoCoreError as exc:
            raise _s3_error("store the artifact at", target, exc) from exc
        _, probe_key = split_s3_uri(f"{target}/.neuronserve-write-check")
        try:
            client.put_object(Bucket=bucket, Key=probe_key, Body=b"")
        except (ClientError, BotoCoreError) as exc:
            raise _s3_error("store the artifact at", target, exc) from exc
        with contextlib.suppress(ClientError, BotoCoreError):
            client.delete_object(Bucket=bucket, Key=probe_key)

    def put_bytes(self, relative: str, data: bytes) -> str:
        """Write one small object under the root (replacing it atomically in a directory). Returns its URI."""
        uri = f"{self.root.rstrip('/')}/{relative}"
        if not is_s3(uri):
            path = local_path(uri)
            partial = _unique_sibling(path, "partial")  # concurrent writers of one record never share it
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                partial.write_bytes(data)
                os.replace(partial, path)
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

    def publish(self, local_dir: Path, manifest: Manifest) -> Published:
        """Store an artifact directory under its cache key, manifest last.

        An artifact already stored under the key is never replaced nor deleted (pods may be loading
        it): the first writer wins and a later one gets ``Published(stored=False)`` with the stored
        manifest. Equal keys mean equal inputs, so the stored artifact serves as well as this one.
        """
        key = manifest.cache_key
        target = self._key_uri(key)
        names = [f.path for f in manifest.files] + [MANIFEST_NAME]
        if not is_s3(self.root):
            dest = local_path(target)
            # One staging directory per writer: concurrent compiles of one key never mix files.
            staging = _unique_sibling(dest, "partial")
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                staging.mkdir()
                for name in names:
                    (staging / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(local_dir / name, staging / name)
            except OSError as exc:
                shutil.rmtree(staging, ignore_errors=True)
                raise _local_error("store the artifact at", dest, exc) from exc
            for attempt in range(2):
                try:
                    # Atomic, and it fails when dest is a non-empty directory: nothing stored is replaced.
                    staging.rename(dest)
                    break
                except OSError as exc:
                    if self.has_artifact(key):
                        shutil.rmtree(staging, ignore_errors=True)
                        return Published(str(dest), self.get_bytes(f"{key}/{MANIFEST_NAME}"), stored=False)
                    if attempt or not self._set_aside_incomplete(dest):
                        shutil.rmtree(staging, ignore_errors=True)
                        raise _local_error("store the artifact at", dest, exc) from exc
            return Published(str(dest), (local_dir / MANIFEST_NAME).read_bytes(), stored=True)
        from boto3.exceptions import Boto3Error  # S3UploadFailedError, RetriesExceededError...
        from botocore.exceptions import BotoCoreError, ClientError

        # S3 has no atomic rename of a directory. So this writer uploads into a folder of its own
        # under the key and then stores a manifest naming that folder, only if no manifest is
        # there yet (If-None-Match: the first writer wins at S3 itself). A stored manifest thus
        # always names one writer's complete files; a loser's folder is deleted again. A look
        # before uploading saves the upload when the key is already stored. A manifest whose files
        # are gone is replaced, only if it is still that one (If-Match its ETag; deleted meanwhile,
        # the key is stored as a new one).
        found = self._look(key)
        if found is not None and not found.problems:
            return Published(target, found.manifest_bytes, stored=False)
        folder = f"w-{uuid.uuid4().hex[:16]}"
        stored_manifest = manifest.model_copy(update={"files_prefix": folder}).to_json_bytes()
        client = s3_client()
        uploaded: list[tuple[str, str]] = []
        for name in names[:-1]:
            bucket, obj = split_s3_uri(f"{target}/{folder}/{name}")
            try:
                client.upload_file(str(local_dir / name), bucket, obj)
            except (ClientError, BotoCoreError, Boto3Error) as exc:
                self._discard(uploaded)
                raise _s3_error("upload", f"s3://{bucket}/{obj}", exc) from exc
            uploaded.append((bucket, obj))
        bucket, obj = split_s3_uri(f"{target}/{MANIFEST_NAME}")
        condition = {"IfMatch": found.etag} if found is not None and found.etag else {"IfNoneMatch": "*"}
        replacing = found.manifest_bytes if found is not None else None
        for attempt in range(2):
            try:
                client.put_object(Bucket=bucket, Key=obj, Body=stored_manifest, **condition)
                published = Published(target, stored_manifest, stored=True)
            except ClientError as exc:
                # 412: a manifest is stored (another than the one to replace), possibly by this very
                # put (botocore sent it again after its answer was lost); 409: another conditional
                # put of it is in flight. The stored manifest says whose it is.
                if "IfMatch" in condition and _s3_code(exc) in ("404", "NoSuchKey") and attempt == 0:
                    # The manifest to replace was deleted meanwhile (a person removing what was left
                    # of it): the key holds none now, so store this one only if none is there yet.
                    condition = {"IfNoneMatch": "*"}
                    continue
                if _s3_code(exc) not in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                    if _s3_status(exc) >= 500:
                        published = self._after_unknown_put(key, folder, uploaded, exc, replacing)
                        break
                    self._discard(uploaded)  # refused (denied, invalid): nothing was stored
                    raise _s3_error("upload", f"s3://{bucket}/{obj}", exc) from exc
                current = self._stored_manifest(key, replacing)
                if current is None and attempt == 0:
                    continue  # the put in flight stored nothing (it failed, its writer died): once more
                if current is None:
                    raise StoreError(
                        f"another compile kept storing {self._key_uri(key)} and its manifest did not appear; this "
                        f"compile's files are kept in {self._key_uri(key, folder)}/ (named by no manifest, not "
                        "served; nothing deletes them); compile again to store the artifact"
                    ) from exc
                published = self._settle(key, folder, uploaded, current)
            except BotoCoreError as exc:
                published = self._after_unknown_put(key, folder, uploaded, exc, replacing)
            break
        if published.stored and found is not None:
            # The files the replaced manifest named (those left) are named by none now.
            self._discard(_listed_objects(target, found.manifest_bytes))
        return published

    def _settle(self, key: str, folder: str, uploaded: list[tuple[str, str]], found: bytes) -> Published:
        """The outcome of this writer's manifest put, from the manifest stored under ``key``: this
        writer's own when it names ``folder``, else another writer's (this writer's files go)."""
        if _files_prefix(found) == folder:
            return Published(self._key_uri(key), found, stored=True)
        self._discard(uploaded)
        return Published(self._key_uri(key), found, stored=False)

    def _after_unknown_put(
        self, key: str, folder: str, uploaded: list[tuple[str, str]], exc: Exception, replacing: bytes | None
    ) -> Published:
        """After a manifest put whose outcome is unknown (no answer, a 5xx): the stored manifest decides.

        With none there (or none readable), or still ``replacing`` (the manifest whose files are
        gone, which this put was to replace: no writer has stored the key), nothing is deleted: a
        put still under way may store a manifest naming these files yet. Named by no manifest, a
        folder left so is never served; nothing here deletes it later (a lifecycle rule on the
        store, or a person, may).
        """
        uri = self._key_uri(key, MANIFEST_NAME)
        try:
            found = self.get_bytes(f"{key}/{MANIFEST_NAME}") if self._manifest_stored(key) else None
        except StoreError:
            found = None
        if found is not None and found != replacing:
            return self._settle(key, folder, uploaded, found)
        there = "no manifest is there now" if found is None else "the manifest it was to replace is still there"
        raise StoreError(
            f"cannot upload {uri}: {exc}; whether it was stored is unknown ({there}), so "
            f"this compile's files are kept in {self._key_uri(key, folder)}/ (not served unless that put "
            "lands; nothing deletes them if it does not); compile again to store the artifact"
        ) from exc

    @staticmethod
    def _set_aside_incomplete(dest: Path) -> bool:
        """Move a key's directory that holds no whole artifact out of the way (then delete it):
        files left after someone deleted only the manifest, which no reader takes for an artifact,
        or a manifest some of whose files were deleted, which no server can load. False when
        there is nothing to move; another writer may have moved it first, which is as good."""
        aside = _unique_sibling(dest, "incomplete")
        try:
            dest.rename(aside)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        if _whole_directory_artifact(aside):
            # Another writer stored a whole artifact between our look and the move: put it back
            # (our next rename then fails and finds it stored).
            with contextlib.suppress(OSError):
                aside.rename(dest)
                return True
        shutil.rmtree(aside, ignore_errors=True)
        return True

    def _stored_manifest(self, key: str, replacing: bytes | None) -> bytes | None:
        """The manifest stored under ``key`` after a conditional put was refused, other than
        ``replacing`` (the manifest whose files are gone, which the refused put was to replace).
        After a 409 another writer's put is in flight: its manifest is waited for, a few seconds;
        None when none appeared."""
        for look in range(_STORED_MANIFEST_LOOKS):
            if look:
                time.sleep(_STORED_MANIFEST_PAUSE_S)
            if self._manifest_stored(key):
                current = self.get_bytes(f"{key}/{MANIFEST_NAME}")
                if current != replacing:
                    return current
        return None

    @staticmethod
    def _discard(objects: list[tuple[str, str]]) -> None:
        """Delete this writer's own uploads (best effort: a leftover folder is named by no manifest)."""
        from botocore.exceptions import BotoCoreError, ClientError

        client = s3_client()
        for bucket, obj in objects:
            with contextlib.suppress(ClientError, BotoCoreError):
                client.delete_object(Bucket=bucket, Key=obj)


def download_tree(uri: str, dest: Path) -> Path:
    """Download an S3 model source into ``dest``; returns the downloaded file or directory.

    When an object's key is exactly the URI's (``s3://bucket/m/model.pt``), the source is that one
    file: it is downloaded as ``dest/<its name>`` and that path is returned. Otherwise the URI is a
    directory: every object under ``<prefix>/`` (never a sibling such as ``<prefix>-large/``) is
    downloaded below ``dest``, which is returned. A URI ending in '/' is always a directory.
    """
    from boto3.exceptions import Boto3Error  # S3UploadFailedError, RetriesExceededError...
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, prefix = split_s3_uri(uri)
    directory_only = uri.endswith("/") or not prefix
    listed = f"{prefix}/" if prefix and directory_only else prefix
    client = s3_client()
    try:
        keys: list[str] = []
        exact = False
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=listed):
            for obj in page.get("Contents", []):
                key = obj["Key"]
                if prefix and key == prefix:
                    exact = True
                elif not prefix or key.startswith(f"{prefix}/"):
                    keys.append(key)
        if exact:
            target = dest / prefix.rsplit("/", 1)[-1]
            dest.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, prefix, str(target))
            return target
        count = 0
        for key in keys:
            rel = key[len(prefix) + 1 :] if prefix else key
            if rel == "" or rel.endswith("/"):
                continue  # a "folder" marker object
            if any(part in ("", ".", "..") for part in rel.split("/")) or "\0" in rel:
                raise StoreError(f"refusing the object s3://{bucket}/{key}: its name does not fit below {uri}")
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, key, str(target))
            count += 1
    except (ClientError, BotoCoreError, Boto3Error) as exc:
        raise _s3_error("download", uri, exc) from exc
    if count == 0:
        raise StoreError(f"nothing found under {uri}")
    return dest


def fetch_artifact(uri: str, scratch: Path, expected_sha256: str | None = None) -> tuple[Manifest, bytes, Path]:
    """Fetch an artifact (S3 into ``scratch``, a directory in place) and verify every file's size and sha256.

    Returns the manifest, its raw bytes and the directory holding the files. Raises StoreError when
    the artifact cannot be read and ArtifactRejected when any file differs from the manifest. In S3
    every object's size is compared with the manifest before anything is downloaded. With
    ``expected_sha256`` the manifest's own bytes are checked first, before they are even parsed:
    another manifest raises :class:`ManifestMismatch` and nothing else is read.
    """
    if is_s3(uri):
        from boto3.exceptions import Boto3Error  # RetriesExceededError of download_file
        from botocore.exceptions import BotoCoreError, ClientError

        client = s3_client()
        bucket, prefix = split_s3_uri(uri)
        manifest_key = f"{prefix}/{MANIFEST_NAME}" if prefix else MANIFEST_NAME
        try:
            manifest_bytes = client.get_object(Bucket=bucket, Key=manifest_key)["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise _s3_error("read the manifest", f"s3://{bucket}/{manifest_key}", exc) from exc
        check_pinned(uri, manifest_bytes, expected_sha256)
        manifest = _parse_manifest(manifest_bytes, uri)
        folder = "/".join(p for p in (prefix, manifest.files_prefix) if p)
        keys = {e.path: f"{folder}/{e.path}" if folder else e.path for e in manifest.files}
        problems = []
        for entry in manifest.files:
            try:
                length = int(client.head_object(Bucket=bucket, Key=keys[entry.path])["ContentLength"])
            except (ClientError, BotoCoreError) as exc:
                raise _s3_error("download", f"s3://{bucket}/{keys[entry.path]}", exc) from exc
            if length != entry.size:
                problems.append(f"{entry.path}: {length} bytes, the manifest says {entry.size}")
        _reject(uri, problems)
        scratch.mkdir(parents=True, exist_ok=True)
        for entry in manifest.files:
            target = scratch / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                client.download_file(bucket, keys[entry.path], str(target))
            except (ClientError, BotoCoreError, Boto3Error) as exc:
                raise _s3_error("download", f"s3://{bucket}/{keys[entry.path]}", exc) from exc
        directory = scratch
    else:
        directory, manifest_bytes = _read_local_manifest(uri)
        check_pinned(uri, manifest_bytes, expected_sha256)
        manifest = _parse_manifest(manifest_bytes, uri)
    _reject(uri, _check_files(directory, manifest))
    return manifest, manifest_bytes, directory


def _check_files(directory: Path, manifest: Manifest, entries: list[FileEntry] | None = None) -> list[str]:
    """Problems of the manifest's files (or only of ``entries``) in ``directory``.

    Sizes are compared first (a stat); a file is hashed only when its size is right.
    """
    entries = manifest.files if entries is None else entries
    try:
        sizes = {e.path: (directory / e.path).stat().st_size for e in entries if (directory / e.path).is_file()}
        digests = {e.path: file_sha256(directory / e.path) for e in entries if sizes.get(e.path) == e.size}
    except OSError as exc:
        raise _local_error("read the artifact", directory, exc) from exc
    return verify_files(manifest.model_copy(update={"files": entries}), digests, sizes)


def _reject(uri: str, problems: list[str]) -> None:
    if problems:
        raise ArtifactRejected(
            f"artifact {uri} does not match its manifest (refusing to serve it):\n  " + "\n  ".join(problems)
        )


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


def fetch_manifest(
    uri: str, scratch: Path, extra: tuple[str, ...] = (), expected_sha256: str | None = None
) -> tuple[Manifest, Path]:
    """Fetch only an artifact's manifest and those of ``extra`` files it lists, verified; no model files.

    For a server that needs the model's contract (name, buckets, signatures, tokenizer) but not its
    weights: the emulated device. Returns the manifest and the directory holding the fetched files.
    ``expected_sha256`` pins the manifest as in :func:`fetch_artifact`.
    """
    if is_s3(uri):
        from botocore.exceptions import BotoCoreError, ClientError

        client = s3_client()
        bucket, prefix = split_s3_uri(uri)

        def get(name: str, size: int | None = None) -> bytes:
            key = f"{prefix}/{name}" if prefix else name
            try:
                response = client.get_object(Bucket=bucket, Key=key)
                if size is not None and int(response["ContentLength"]) != size:
                    response["Body"].close()  # not read: the manifest says it is another file
                    _reject(uri, [f"{name}: {response['ContentLength']} bytes, the manifest says {size}"])
                body: bytes = response["Body"].read()
            except (ClientError, BotoCoreError) as exc:
                raise _s3_error("read", f"s3://{bucket}/{key}", exc) from exc
            return body

        manifest_bytes = get(MANIFEST_NAME)
        check_pinned(uri, manifest_bytes, expected_sha256)
        manifest = _parse_manifest(manifest_bytes, uri)
        scratch.mkdir(parents=True, exist_ok=True)
        directory = scratch
        wanted = [e for e in manifest.files if e.path in extra]
        for entry in wanted:
            target = scratch / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(get("/".join(p for p in (manifest.files_prefix, entry.path) if p), entry.size))
    else:
        directory, manifest_bytes = _read_local_manifest(uri)
        check_pinned(uri, manifest_bytes, expected_sha256)
        manifest = _parse_manifest(manifest_bytes, uri)
        wanted = [e for e in manifest.files if e.path in extra]
    _reject(uri, _check_files(directory, manifest, wanted))
    return manifest, directory
