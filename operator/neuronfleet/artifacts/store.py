"""Read the compiled-artifact store: request records and source fingerprints (S3 or a directory).

The operator only reads here; compile Jobs (``neuronserve compile --request-key``) write. The
record's format is the runtime's (``neuronserve.manifest.RequestRecord``), read through that one
pure module. A record is trusted only once the manifest at its artifact URI is there with the
recorded sha256 and every file it lists is there at its size (a lifecycle rule or a person may
delete artifacts, or some of their files, behind the operator's back); a verified artifact is
remembered for :data:`VERIFIED_TTL_SECONDS`, and in S3 one found dangling for
:data:`DANGLING_TTL_SECONDS`. S3 goes through boto3 (``AWS_ENDPOINT_URL`` points it at another
endpoint, e.g. a moto server in tests); a plain path is a local directory (the sandbox). Calls
are blocking, so async callers run them in a thread.
"""

from __future__ import annotations

import hashlib
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from neuronfleet.planning.compile import CompileRequest, DanglingRecord, StoredArtifact
from neuronserve.manifest import MANIFEST_NAME, Manifest, RequestRecord, archived, manifest_sha256, missing_files

#: Each call runs in a reconcile (in a thread, which a timeout cannot stop): boto3's defaults (60 s
#: to connect and per read, 5 legacy attempts) let a silent endpoint hold a reconcile ~5 minutes
#: a call. Standard retries (3 attempts, AWS_MAX_ATTEMPTS overrides) of at most 5 + 10 s each.
S3_CONFIG = Config(connect_timeout=5, read_timeout=10, retries={"mode": "standard"})

#: How long an artifact found as recorded is trusted without reading its manifest again. ``lookup``
#: runs on every reconcile of every deployment (seconds apart): checking each time would add one
#: GET (and a HEAD per listed file) per deployment per reconcile for something that rarely changes.
#: So a steady fleet checks each artifact at most this often, and an artifact (or a file of it)
#: deleted under it is noticed (and compiled again) within this time; its running pods have loaded
#: it already, only new ones need it.
VERIFIED_TTL_SECONDS = 600.0

#: How long an S3 artifact found *not* as recorded stays so without reading it again. While its
#: recompile runs (minutes; on Inf2 tens of them) every reconcile would read its manifest and HEAD
#: its files. The record is still read each time: a compile's republish stores a manifest of another
#: sha256 (a writer folder of its own) and writes a new record naming it, seen at once (the sandbox's
#: stand-in, the same bytes again, is read again once its Job succeeded: ``reconcile``). A directory
#: store is not remembered (its checks are stats, and a republish there may store the same bytes).
DANGLING_TTL_SECONDS = 60.0


class StoreUnavailable(Exception):
    """The store could not be read (credentials, network, permissions): retry later."""


class SourceUnreadable(Exception):
    """The model source cannot be listed (no credentials, denied, no such bucket or prefix)."""


def _transient(exc: ClientError) -> bool:
    """Throttling or a server-side error: S3 answers differently in a moment, the source is fine."""
    error = exc.response.get("Error", {})
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    return status >= 500 or error.get("Code") in ("SlowDown", "Throttling", "ThrottlingException", "RequestTimeout")


def _split_s3(uri: str) -> tuple[str, str]:
    """Bucket and key, read as the compile Job and the model server read them
    (``neuronserve.manifest.split_s3_uri``): without the '/' at either end of the key, so a URI
    stored with '//' after the bucket (``s3://bucket//prefix``, refused by the CRD since) names the
    objects they wrote, not ``/prefix/...``."""
    rest = uri.removeprefix("s3://")
    bucket, _, key = rest.partition("/")
    return bucket, key.strip("/")


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


class ArtifactStore:
    """Reads request records and fingerprints model sources.

    ``clock`` (monotonic seconds) times the memory of verified artifacts; tests pass their own.
    """

    def __init__(
        self,
        s3_client: Any | None = None,
        clock: Callable[[], float] = time.monotonic,
        verified_ttl_seconds: float = VERIFIED_TTL_SECONDS,
        dangling_ttl_seconds: float = DANGLING_TTL_SECONDS,
    ) -> None:
        self._s3 = s3_client
        self._clock = clock
        self._verified_ttl = verified_ttl_seconds
        #: (artifact URI, manifest sha256) -> when its manifest was last found as recorded.
        self._verified: dict[tuple[str, str], float] = {}
        self._dangling_ttl = dangling_ttl_seconds
        #: (S3 artifact URI, manifest sha256) -> when it was found not as recorded, and what was found.
        self._dangling: dict[tuple[str, str], tuple[float, str | None, tuple[str, ...]]] = {}
        # Lookups of several deployments run at once, each in a thread of its own.
        self._lock = threading.Lock()

    @property
    def s3(self) -> Any:
        if self._s3 is None:
            self._s3 = boto3.client("s3", config=S3_CONFIG)
        return self._s3

    def _read(self, uri: str) -> bytes | None:
        if uri.startswith("s3://"):
            bucket, key = _split_s3(uri)
            try:
                return bytes(self.s3.get_object(Bucket=bucket, Key=key)["Body"].read())
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code")
                if code in ("NoSuchKey", "404"):
                    return None
                if code == "NoSuchBucket":
                    # Not "never compiled": a compile Job would trace the whole model, then fail to store it.
                    raise StoreUnavailable(f"the artifact store's bucket {bucket!r} does not exist ({uri})") from exc
                raise StoreUnavailable(f"cannot read {uri}: {exc}") from exc
            except BotoCoreError as exc:
                raise StoreUnavailable(f"cannot read {uri}: {exc}") from exc
        path = _local(uri)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {uri}: {exc.strerror}") from exc

    def lookup(self, request: CompileRequest, recheck: bool = False) -> StoredArtifact | DanglingRecord | None:
        """The artifact recorded for a request; None when it was never compiled; a
        :class:`DanglingRecord` when the record names an artifact that is not stored as recorded
        (no manifest at its URI, one with another sha256, or files it lists missing or of another
        size): not to be served, to be compiled again.
        ``recheck``: read the manifest even if it was verified within the TTL (a pod found another).

        A store that cannot be read (the record or the manifest) raises :class:`StoreUnavailable`,
        never a dangling record: a throttled GET says nothing about the artifact.
        """
        data = self._read(request.record_uri)
        if data is None:
            return None
        try:
            record = RequestRecord.model_validate_json(data)
        except ValueError as exc:
            raise StoreUnavailable(f"request record {request.record_uri} is unreadable: {exc}") from exc
        stored = StoredArtifact(
            cache_key=record.cache_key,
            uri=record.artifact_uri,
            manifest_sha256=record.manifest_sha256,
            backend=record.backend,
        )
        found, problems = self._verify(stored, recheck)
        if found == stored.manifest_sha256 and not problems:
            return stored
        return DanglingRecord(stored, found, problems)

    def _verify(self, stored: StoredArtifact, recheck: bool = False) -> tuple[str | None, tuple[str, ...]]:
        """The sha256 of the manifest at the artifact's URI (None: no manifest there) and, when it is
        the recorded one, its files found missing or of another size; or the recorded sha256 and no
        problem, without a read, when it was found so within the TTL (unless ``recheck``)."""
        key = (stored.uri, stored.manifest_sha256)
        with self._lock:
            checked = self._verified.get(key)
            dangling = self._dangling.get(key)
        if not recheck and checked is not None and self._clock() - checked < self._verified_ttl:
            return stored.manifest_sha256, ()
        if not recheck and dangling is not None and self._clock() - dangling[0] < self._dangling_ttl:
            return dangling[1], dangling[2]
        data = self._read(f"{stored.uri.rstrip('/')}/{MANIFEST_NAME}")
        found = manifest_sha256(data) if data is not None else None
        problems = self.file_problems(stored.uri, data) if data is not None and found == stored.manifest_sha256 else ()
        now = self._clock()
        with self._lock:
            # Forget expired entries (artifacts no longer served): the memory stays as small as the
            # set of artifacts served within the TTL.
            self._verified = {k: t for k, t in self._verified.items() if now - t < self._verified_ttl}
            self._dangling = {k: d for k, d in self._dangling.items() if now - d[0] < self._dangling_ttl}
            if found == stored.manifest_sha256 and not problems:
                self._verified[key] = now
                self._dangling.pop(key, None)
            else:
                self._verified.pop(key, None)
                if stored.uri.startswith("s3://"):
                    self._dangling[key] = (now, found, problems)
        return found, problems

    def file_problems(self, uri: str, manifest_bytes: bytes) -> tuple[str, ...]:
        """The first file the manifest lists that is missing at ``uri`` or of another size: a HEAD
        (S3) or stat each until then, nothing downloaded. One is enough to compile again, and the
        files after it are not looked at (the message says "and possibly others"). A manifest this
        code cannot parse is not checked (a newer compile's; the serving pods judge it)."""
        try:
            manifest = Manifest.from_json_bytes(manifest_bytes)
        except ValueError:
            return ()
        for index, entry in enumerate(manifest.files):
            size = self._size(f"{uri.rstrip('/')}/{manifest.stored_path(entry.path)}")
            if isinstance(size, str):
                problems = [f"{entry.path}: {size}"]
            else:
                one = manifest.model_copy(update={"files": [entry]})
                problems = missing_files(one, {} if size is None else {entry.path: size})
            if problems:
                rest = ", and possibly others" if index + 1 < len(manifest.files) else ""
                return (problems[0] + rest,)
        return ()

    def _size(self, uri: str) -> int | str | None:
        """The size of one stored file; None when it is not there; in S3, why it cannot be read
        although there ("archived (storage class GLACIER)": a lifecycle transition, no completed
        restore; pods could not download it). Not looked up now: StoreUnavailable."""
        if uri.startswith("s3://"):
            bucket, key = _split_s3(uri)
            try:
                head = self.s3.head_object(Bucket=bucket, Key=key)
                return archived(head) or int(head["ContentLength"])
            except ClientError as exc:
                # A HEAD's error has no body: its code is the HTTP status.
                if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return None
                raise StoreUnavailable(f"cannot look up {uri}: {exc}") from exc
            except BotoCoreError as exc:
                raise StoreUnavailable(f"cannot look up {uri}: {exc}") from exc
        try:
            info = _local(uri).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise StoreUnavailable(f"cannot look up {uri}: {exc.strerror}") from exc
        return info.st_size if stat.S_ISREG(info.st_mode) else None

    def fingerprint(self, source: str) -> str | None:
        """A digest of the source's file listing (names, sizes, ETags or mtimes).

        Cheap (a listing, no download), and it changes when files under the same URI are replaced.
        An ``s3://`` source that cannot be listed (denied, no bucket, no credentials) or holds
        nothing raises :class:`SourceUnreadable` (a compile Job could not read it either);
        throttling, an S3 server error, a timeout or a failed connection (refused, dropped, no
        such host) raises :class:`StoreUnavailable` (asked again next reconcile). A local path may
        exist only inside the compile image or a volume the operator does not mount: None when it
        cannot be read here.
        """
        entries: list[str] = []
        if source.startswith("s3://"):
            bucket, prefix = _split_s3(source)
            if prefix and source.endswith("/"):
                prefix += "/"  # a URI ending in '/' is a directory (download_tree's reading)
            # As the compile Job reads it (neuronserve.store.download_tree): the object named
            # exactly, else what is under "<prefix>/", not s3://m/bert-large/* for s3://m/bert.
            directory = prefix if not prefix or prefix.endswith("/") else f"{prefix}/"
            exact: list[str] = []
            try:
                paginator = self.s3.get_paginator("list_objects_v2")
                for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
                    for item in page.get("Contents", []):
                        entry = f"{item['Key']}\0{item['Size']}\0{item.get('ETag', '')}"
                        if item["Key"] == prefix and not prefix.endswith("/"):
                            exact.append(entry)
                        elif item["Key"].startswith(directory):
                            entries.append(entry)
            except ClientError as exc:
                error = exc.response.get("Error", {})
                if _transient(exc):
                    raise StoreUnavailable(f"cannot list {source} now: {error.get('Code', 'error')}") from exc
                raise SourceUnreadable(f"{error.get('Code', 'error')}: {error.get('Message', exc)}") from exc
            except (BotoConnectionError, HTTPClientError) as exc:
                # A timeout or a refused or dropped connection: S3 (or the network to it) may answer
                # in a moment; taken for an unreadable source, it dropped what a compile under way keeps.
                raise StoreUnavailable(f"cannot list {source} now: {exc}") from exc
            except BotoCoreError as exc:
                # No credentials, no region: nothing to retry until the configuration changes.
                raise SourceUnreadable(str(exc)) from exc
            entries = exact or entries
            if not entries:
                raise SourceUnreadable(f"no objects under s3://{bucket}/{prefix}")
        else:
            try:
                root = _local(source)
                files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
                for path in files:
                    stat = path.stat()
                    entries.append(f"{path.relative_to(root.parent)}\0{stat.st_size}\0{stat.st_mtime_ns}")
            except OSError:
                return None
        if not entries:
            return None
        return hashlib.sha256("\n".join(sorted(entries)).encode()).hexdigest()
