"""The operator's reads of S3 (a moto server, through boto3): a source's fingerprint covers what
the compile Job downloads and nothing else, a missing store bucket is a store problem, S3
saying "not now" is not a source problem, and a request record is trusted only while the artifact
it names is stored as recorded, its manifest and every file that lists (checked at most once per
TTL; in a local directory too)."""

from __future__ import annotations

import contextlib
import io
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto.server import ThreadedMotoServer

from neuronfleet.api.v1alpha1 import InferenceDeploymentSpec
from neuronfleet.artifacts.store import (
    DANGLING_TTL_SECONDS,
    VERIFIED_TTL_SECONDS,
    ArtifactStore,
    SourceUnreadable,
    StoreUnavailable,
)
from neuronfleet.planning.compile import CompileRequest, DanglingRecord, StoredArtifact, compile_request
from neuronserve.manifest import RequestRecord, manifest_sha256, request_record_path

MODELS = "fingerprint-models"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    environment = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    client = boto3.client("s3")
    # moto keeps one S3 for the whole process (every moto server in it): touch only this bucket.
    if MODELS not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=MODELS)
    for item in client.list_objects_v2(Bucket=MODELS).get("Contents", []):
        client.delete_object(Bucket=MODELS, Key=item["Key"])
    return client


def test_a_sibling_prefix_is_not_part_of_the_source(s3: Any) -> None:
    # s3://models/bert listed bert-large/* too: an upload there changed bert's request key.
    s3.put_object(Bucket=MODELS, Key="bert/config.json", Body=b"{}")
    before = ArtifactStore().fingerprint(f"s3://{MODELS}/bert")
    s3.put_object(Bucket=MODELS, Key="bert-large/config.json", Body=b'{"large": true}')
    assert ArtifactStore().fingerprint(f"s3://{MODELS}/bert") == before
    s3.put_object(Bucket=MODELS, Key="bert/config.json", Body=b'{"changed": true}')
    assert ArtifactStore().fingerprint(f"s3://{MODELS}/bert") != before


def test_a_single_object_source_is_that_object(s3: Any) -> None:
    s3.put_object(Bucket=MODELS, Key="tiny/model.pt", Body=b"weights")
    single = ArtifactStore().fingerprint(f"s3://{MODELS}/tiny/model.pt")
    s3.put_object(Bucket=MODELS, Key="tiny/model.pt.bak", Body=b"old weights")
    assert ArtifactStore().fingerprint(f"s3://{MODELS}/tiny/model.pt") == single


def test_a_store_bucket_that_does_not_exist_is_a_store_problem_not_an_uncompiled_model(s3: Any) -> None:
    # "Never compiled" started a compile Job that traced the whole model, then failed to store it.
    spec = InferenceDeploymentSpec.model_validate({"model": {"source": f"s3://{MODELS}/bert/"}})
    request = compile_request(spec, "s3://no-such-store/compiled", "fp")
    with pytest.raises(StoreUnavailable, match="bucket 'no-such-store' does not exist"):
        ArtifactStore().lookup(request)


@pytest.mark.parametrize(("code", "status"), [("SlowDown", 503), ("InternalError", 500)])
def test_s3_saying_not_now_is_not_an_unreadable_source(s3: Any, code: str, status: int) -> None:
    # It read as SourceUnreadable: Compiled=False and Degraded on every S3 hiccup.
    client = boto3.client("s3")
    with Stubber(client) as stub:
        stub.add_client_error("list_objects_v2", service_error_code=code, http_status_code=status)
        with pytest.raises(StoreUnavailable, match=code):
            ArtifactStore(client).fingerprint(f"s3://{MODELS}/bert")
    with Stubber(client) as stub:
        stub.add_client_error("list_objects_v2", service_error_code="AccessDenied", http_status_code=403)
        with pytest.raises(SourceUnreadable, match="AccessDenied"):
            ArtifactStore(client).fingerprint(f"s3://{MODELS}/bert")


def _silent_endpoint() -> Iterator[str]:
    """An endpoint that accepts connections and never answers: a read times out."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def _closed_endpoint() -> Iterator[str]:
    """A port nothing listens on: the connection is refused (EndpointConnectionError)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    yield f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("unreachable", [_silent_endpoint, _closed_endpoint], ids=["read-timeout", "refused"])
def test_s3_not_answering_now_is_not_an_unreadable_source(s3: Any, unreachable: Callable[[], Iterator[str]]) -> None:
    # A timeout while a first compile ran read as SourceUnreadable: the plan deleted every node
    # placeholder, and the next round made them again.
    with contextlib.contextmanager(unreachable)() as url:
        config = Config(connect_timeout=1, read_timeout=0.5, retries={"mode": "standard", "max_attempts": 1})
        client = boto3.client("s3", endpoint_url=url, config=config)
        with pytest.raises(StoreUnavailable, match=url):
            ArtifactStore(client).fingerprint(f"s3://{MODELS}/bert")


def test_no_credentials_is_an_unreadable_source(aws_env: pytest.MonkeyPatch) -> None:
    # Nothing to retry until the configuration changes: a compile Job could not read it either.
    client = boto3.Session().client("s3", region_name="us-east-1", endpoint_url="http://127.0.0.1:9")
    with pytest.raises(SourceUnreadable, match="credentials"):
        ArtifactStore(client).fingerprint(f"s3://{MODELS}/bert")


# ------------------------------------------------------------------ dangling request records

SPEC = InferenceDeploymentSpec.model_validate({"model": {"source": f"s3://{MODELS}/bert/"}})
KEY = "c" * 64
MANIFEST = b'{"name": "bert", "stand-in": true}\n'


class StubClock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def _record(root: str, manifest: bytes = MANIFEST) -> tuple[CompileRequest, bytes]:
    """The request and the record a compile Job writes for an artifact whose manifest is ``manifest``."""
    request = compile_request(SPEC, root, "fp")
    record = RequestRecord(
        cache_key=KEY,
        artifact_uri=f"{root}/{KEY}",
        manifest_sha256=manifest_sha256(manifest),
        backend="cpu",
        revision=KEY[:10],
    )
    return request, record.to_json_bytes()


@pytest.fixture
def store_bucket(s3: Any) -> str:
    """A bucket of this test's own (moto's one S3 is shared by the tests of a worker)."""
    bucket = f"dangling-{uuid.uuid4().hex[:16]}"
    s3.create_bucket(Bucket=bucket)
    return bucket


def _s3_store(
    s3: Any, bucket: str, prefix: str = "compiled"
) -> tuple[CompileRequest, Callable[[str, bytes | None], None]]:
    request, record = _record(f"s3://{bucket}/{prefix}")
    s3.put_object(Bucket=bucket, Key=f"{prefix}/{request_record_path(request.key)}", Body=record)

    def put_manifest(_: str, data: bytes | None) -> None:
        if data is None:
            s3.delete_object(Bucket=bucket, Key=f"{prefix}/{KEY}/manifest.json")
        else:
            s3.put_object(Bucket=bucket, Key=f"{prefix}/{KEY}/manifest.json", Body=data)

    return request, put_manifest


def _local_store(root: Path) -> tuple[CompileRequest, Callable[[str, bytes | None], None]]:
    request, record = _record(str(root))
    Path(request.record_uri).parent.mkdir(parents=True)
    Path(request.record_uri).write_bytes(record)

    def put_manifest(_: str, data: bytes | None) -> None:
        path = root / KEY / "manifest.json"
        if data is None:
            path.unlink()
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(data)

    return request, put_manifest


@pytest.fixture(params=["s3", "directory"])
def recorded(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[CompileRequest, Callable[[str, bytes | None], None]]:
    """A request record in S3 or in a directory, and how to put (or delete, None) its manifest."""
    if request.param == "s3":
        return _s3_store(request.getfixturevalue("s3"), request.getfixturevalue("store_bucket"))
    return _local_store(tmp_path / "store")


def test_a_record_whose_manifest_is_there_as_recorded_is_the_artifact(recorded: Any) -> None:
    request, put_manifest = recorded
    put_manifest(KEY, MANIFEST)
    found = ArtifactStore().lookup(request)
    assert isinstance(found, StoredArtifact)
    assert (found.cache_key, found.manifest_sha256) == (KEY, manifest_sha256(MANIFEST))


def test_a_record_whose_artifact_is_gone_is_not_served_and_says_why(recorded: Any) -> None:
    # The operator rolled pods onto an artifact an S3 lifecycle rule had expired: they crash-looped.
    request, _ = recorded
    found = ArtifactStore().lookup(request)
    assert isinstance(found, DanglingRecord) and found.found_sha256 is None
    assert found.describe() == (
        f"the artifact {request.store_root}/{KEY} recorded for this request is gone (manifest missing)"
    )


def test_a_record_whose_artifact_holds_another_manifest_is_not_served(recorded: Any) -> None:
    request, put_manifest = recorded
    put_manifest(KEY, b'{"name": "bert", "republished": true}\n')
    found = ArtifactStore().lookup(request)
    assert isinstance(found, DanglingRecord)
    assert found.found_sha256 == manifest_sha256(b'{"name": "bert", "republished": true}\n')
    assert "holds another manifest" in found.describe()


def test_a_verified_artifact_is_checked_again_only_after_the_ttl(recorded: Any) -> None:
    # lookup runs on every reconcile of every deployment: a manifest GET each time is not free.
    request, put_manifest = recorded
    put_manifest(KEY, MANIFEST)
    clock = StubClock()
    store = ArtifactStore(clock=clock)
    assert isinstance(store.lookup(request), StoredArtifact)
    put_manifest(KEY, None)  # deleted behind the operator's back
    clock.now += VERIFIED_TTL_SECONDS - 1
    assert isinstance(store.lookup(request), StoredArtifact), "checked again within the TTL"
    clock.now += 1
    assert isinstance(store.lookup(request), DanglingRecord)
    # The same manifest put back by hand: found at the next lookup in a directory, and in S3 once
    # the short memory of a dangling record lapses (a republish there has another sha256 anyway).
    put_manifest(KEY, MANIFEST)
    if request.store_root.startswith("s3://"):
        assert isinstance(store.lookup(request), DanglingRecord)
        clock.now += DANGLING_TTL_SECONDS
    assert isinstance(store.lookup(request), StoredArtifact)


def test_a_steady_fleet_reads_its_manifest_once_per_ttl(s3: Any, store_bucket: str) -> None:
    request, put_manifest = _s3_store(s3, store_bucket)
    put_manifest(KEY, MANIFEST)
    client, clock = boto3.client("s3"), StubClock()
    keys: list[str] = []
    client.meta.events.register("provide-client-params.s3.GetObject", lambda params, **_: keys.append(params["Key"]))
    store = ArtifactStore(client, clock=clock)
    for _ in range(30):  # 30 reconciles, 10 s apart
        assert isinstance(store.lookup(request), StoredArtifact)
        clock.now += 10
    assert sum(key.endswith("/manifest.json") for key in keys) == 1
    assert sum(key.startswith("compiled/requests/") for key in keys) == 30
    clock.now += VERIFIED_TTL_SECONDS
    store.lookup(request)
    assert sum(key.endswith("/manifest.json") for key in keys) == 2


class _Refusing:
    """An S3 client whose GETs of manifests fail with ``code``; the record it returns."""

    def __init__(self, record: bytes, code: str, status: int) -> None:
        self.record, self.code, self.status = record, code, status

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        if Key.endswith("/manifest.json"):
            error = {"Error": {"Code": self.code, "Message": "no"}, "ResponseMetadata": {"HTTPStatusCode": self.status}}
            raise ClientError(error, "GetObject")
        return {"Body": io.BytesIO(self.record)}


@pytest.mark.parametrize(("code", "status"), [("SlowDown", 503), ("InternalError", 500), ("AccessDenied", 403)])
def test_a_manifest_that_cannot_be_read_now_is_a_store_problem_not_a_dangling_record(code: str, status: int) -> None:
    # "Dangling" compiles the request again: never on a throttled or refused GET.
    request, record = _record("s3://some-store/compiled")
    with pytest.raises(StoreUnavailable, match=code):
        ArtifactStore(_Refusing(record, code, status)).lookup(request)


def test_a_recheck_reads_a_verified_manifest_again_within_the_ttl(recorded: Any) -> None:
    # A serving pod found another manifest at the URI than the recorded one (it exited, pinned to
    # the record): the operator asks for a recheck rather than trust its memory for ten minutes.
    request, put_manifest = recorded
    put_manifest(KEY, MANIFEST)
    clock = StubClock()
    store = ArtifactStore(clock=clock)
    assert isinstance(store.lookup(request), StoredArtifact)
    put_manifest(KEY, b'{"name": "bert", "overwritten": true}\n')
    clock.now += 10
    assert isinstance(store.lookup(request), StoredArtifact), "remembered as verified"
    found = store.lookup(request, recheck=True)
    assert isinstance(found, DanglingRecord)
    assert found.found_sha256 == manifest_sha256(b'{"name": "bert", "overwritten": true}\n')


# ------------------------------------------------------------------ files deleted behind the manifest


def _published(tmp_path: Path, root: str) -> tuple[CompileRequest, Any, str]:
    """An artifact published by the runtime's store (two model files) and the record naming it; its URI."""
    from neuronserve.manifest import Bucket, CompilerFlags, FileEntry, Manifest, TensorSignature
    from neuronserve.store import Store, file_sha256

    local = tmp_path / "artifact"
    local.mkdir()
    buckets = [Bucket(batch=1, sequence=8), Bucket(batch=4, sequence=8)]
    for bucket in buckets:
        (local / bucket.file_name).write_bytes(b"traced " + bucket.file_name.encode())
    signature = TensorSignature(name="input_ids", dtype="int64", shape=[-1, -1])
    manifest = Manifest(
        name="bert",
        backend="cpu",
        buckets=buckets,
        inputs=[signature],
        outputs=[signature],
        compiler="x",
        torch_version="x",
        flags=CompilerFlags(),
        source_digest="d" * 64,
        cache_key=KEY,
        files=[
            FileEntry(
                path=b.file_name, sha256=file_sha256(local / b.file_name), size=(local / b.file_name).stat().st_size
            )
            for b in buckets
        ],
    )
    (local / "manifest.json").write_bytes(manifest.to_json_bytes())
    store = Store(root)
    published = store.publish(local, manifest)
    request = compile_request(SPEC, root, "fp")
    record = RequestRecord(
        cache_key=KEY,
        artifact_uri=published.uri,
        manifest_sha256=manifest_sha256(published.manifest_bytes),
        backend="cpu",
        revision=KEY[:10],
    )
    store.put_bytes(request_record_path(request.key), record.to_json_bytes())
    return request, Manifest.from_json_bytes(published.manifest_bytes), published.uri


@pytest.fixture(params=["s3", "directory"])
def published(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[CompileRequest, Callable[[str, bytes | None], None]]:
    """A published artifact (S3 or a directory) and its record, and how to replace (bytes) or delete
    (None) one of its files."""
    if request.param == "s3":
        s3 = request.getfixturevalue("s3")
        bucket = request.getfixturevalue("store_bucket")
        record, manifest, uri = _published(tmp_path, f"s3://{bucket}/compiled")

        def put_file(name: str, data: bytes | None) -> None:
            key = f"compiled/{KEY}/{manifest.stored_path(name)}"
            if data is None:
                s3.delete_object(Bucket=bucket, Key=key)
            else:
                s3.put_object(Bucket=bucket, Key=key, Body=data)

        return record, put_file
    record, manifest, uri = _published(tmp_path, str(tmp_path / "store"))

    def put_local(name: str, data: bytes | None) -> None:
        path = Path(uri) / manifest.stored_path(name)
        if data is None:
            path.unlink()
        else:
            path.write_bytes(data)

    return record, put_local


def test_a_record_whose_artifact_lost_a_file_is_dangling_and_says_which(published: Any) -> None:
    # Only the manifest's sha256 was checked: the record was served, and every new pod failed to
    # load it (ArtifactRejected: model-b1-s8.pt missing) for good.
    request, put_file = published
    assert isinstance(ArtifactStore().lookup(request), StoredArtifact)
    put_file("model-b1-s8.pt", None)
    found = ArtifactStore().lookup(request)
    assert isinstance(found, DanglingRecord)
    assert found.found_sha256 == found.artifact.manifest_sha256
    # The files after the first problem are not looked at.
    assert found.file_problems == ("model-b1-s8.pt: missing, and possibly others",)
    assert found.describe() == (
        f"files of the artifact {found.artifact.uri} recorded for this request are gone from the store "
        "(model-b1-s8.pt: missing, and possibly others)"
    )
    put_file("model-b1-s8.pt", b"traced model-b1-s8.pt")  # put back
    put_file("model-b4-s8.pt", b"cut")  # and the last one replaced by other bytes of another size
    found = ArtifactStore().lookup(request)
    assert isinstance(found, DanglingRecord)
    assert found.file_problems == ("model-b4-s8.pt: 3 bytes, the manifest says 21",)


def test_a_steady_fleet_checks_its_files_once_per_ttl(s3: Any, store_bucket: str, tmp_path: Path) -> None:
    request, manifest, _ = _published(tmp_path, f"s3://{store_bucket}/compiled")
    client, clock = boto3.client("s3"), StubClock()
    heads: list[str] = []
    client.meta.events.register("provide-client-params.s3.HeadObject", lambda params, **_: heads.append(params["Key"]))
    store = ArtifactStore(client, clock=clock)
    for _ in range(30):  # 30 reconciles, 10 s apart
        assert isinstance(store.lookup(request), StoredArtifact)
        clock.now += 10
    assert sorted(heads) == sorted(f"compiled/{KEY}/{manifest.stored_path(f.path)}" for f in manifest.files)
    clock.now += VERIFIED_TTL_SECONDS
    store.lookup(request)
    assert len(heads) == 2 * len(manifest.files)


def test_a_dangling_record_costs_one_head_per_short_ttl_and_its_republish_is_seen_at_once(
    s3: Any, store_bucket: str, tmp_path: Path
) -> None:
    # While a record dangled (a file deleted, the recompile running: minutes, on Inf2 tens of
    # them), every reconcile read the manifest again and sent a HEAD for every file it lists.
    root = f"s3://{store_bucket}/compiled"
    (tmp_path / "first").mkdir()
    (tmp_path / "again").mkdir()
    request, manifest, _ = _published(tmp_path / "first", root)
    s3.delete_object(Bucket=store_bucket, Key=f"compiled/{KEY}/{manifest.stored_path('model-b1-s8.pt')}")
    client, clock = boto3.client("s3"), StubClock()
    calls: list[str] = []
    for operation in ("GetObject", "HeadObject"):
        client.meta.events.register(
            f"provide-client-params.s3.{operation}", lambda params, op=operation, **_: calls.append(op)
        )
    store = ArtifactStore(client, clock=clock)
    for _ in range(6):  # 6 reconciles, 10 s apart
        found = store.lookup(request)
        assert isinstance(found, DanglingRecord)
        clock.now += 10
    # The record each time (the recompile's shows up in it); the manifest and one HEAD once.
    assert (calls.count("GetObject"), calls.count("HeadObject")) == (6 + 1, 1)
    assert isinstance(found, DanglingRecord)
    assert found.file_problems == ("model-b1-s8.pt: missing, and possibly others",)
    clock.now += DANGLING_TTL_SECONDS
    assert isinstance(store.lookup(request), DanglingRecord)
    assert (calls.count("GetObject"), calls.count("HeadObject")) == (7 + 2, 2)
    _published(tmp_path / "again", root)  # the recompile stores the key again and writes its record
    assert isinstance(store.lookup(request), StoredArtifact)


def test_the_memory_of_one_dangling_record_outlasts_lookups_of_others(s3: Any, store_bucket: str) -> None:
    # Each manifest read forgets the entries past their TTL, and only those: two deployments whose
    # records dangle, reconciled in turn, cost one manifest read each per short TTL.
    requests = [_s3_store(s3, store_bucket, prefix)[0] for prefix in ("first", "second")]
    client, clock = boto3.client("s3"), StubClock()
    manifest_reads: list[str] = []
    client.meta.events.register(
        "provide-client-params.s3.GetObject",
        lambda params, **_: manifest_reads.append(params["Key"]) if params["Key"].endswith("manifest.json") else None,
    )
    store = ArtifactStore(client, clock=clock)
    for _ in range(3):
        for request in requests:
            assert isinstance(store.lookup(request), DanglingRecord)
            clock.now += 10
    assert sorted(manifest_reads) == [f"first/{KEY}/manifest.json", f"second/{KEY}/manifest.json"]


@pytest.mark.parametrize("storage_class", ["GLACIER", "DEEP_ARCHIVE"])
def test_a_file_archived_by_a_lifecycle_transition_is_dangling_until_restored(
    s3: Any, store_bucket: str, tmp_path: Path, storage_class: str
) -> None:
    # A HEAD still finds an archived file at its size: the record was served, and every new pod
    # failed to download it (InvalidObjectState) until the next TTL and beyond.
    request, manifest, _ = _published(tmp_path, f"s3://{store_bucket}/compiled")
    victim = f"compiled/{KEY}/{manifest.stored_path('model-b4-s8.pt')}"
    copy = {"Bucket": store_bucket, "Key": victim}
    s3.copy_object(Bucket=store_bucket, Key=victim, CopySource=copy, StorageClass=storage_class)
    found = ArtifactStore().lookup(request)
    assert isinstance(found, DanglingRecord)
    assert found.file_problems == (f"model-b4-s8.pt: archived (storage class {storage_class})",)
    s3.restore_object(Bucket=store_bucket, Key=victim, RestoreRequest={"Days": 1})
    assert isinstance(ArtifactStore().lookup(request), StoredArtifact), "a restored copy is read at once"
    s3.copy_object(Bucket=store_bucket, Key=victim, CopySource=copy, StorageClass="GLACIER_IR")
    assert isinstance(ArtifactStore().lookup(request), StoredArtifact), "Glacier Instant Retrieval is read at once"


def test_a_file_that_cannot_be_looked_up_now_is_a_store_problem_not_a_dangling_record(
    s3: Any, store_bucket: str, tmp_path: Path
) -> None:
    request, _, _ = _published(tmp_path, f"s3://{store_bucket}/compiled")
    client = boto3.client("s3")

    def slow_down(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "503", "Message": "Slow Down"}}, "HeadObject")

    client.meta.events.register("before-call.s3.HeadObject", slow_down)
    with pytest.raises(StoreUnavailable, match="Slow Down"):
        ArtifactStore(client).lookup(request)


async def test_a_source_deleted_after_its_compile_keeps_the_served_artifact_found(s3: Any, tmp_path: Path) -> None:
    """The raw weights deleted (or their listing denied) after the artifact was compiled and stored:
    the request key of a round that cannot list the source lacks the fingerprint, so the record was
    not found and the fleet stayed Ready=False SourceUnreadable for good. The status keeps the
    fingerprint the served artifact was compiled from: for the same spec, its record is found."""
    from neuronfleet.api.v1alpha1 import InferenceDeployment
    from neuronfleet.planning.observation import StatusMemory
    from neuronfleet.reconcile import OperatorSettings, Reconciler
    from neuronfleet.sandbox.artifacts import record_uncompiled_artifact

    s3.put_object(Bucket=MODELS, Key="deleted/model.pt", Body=b"weights")
    dep = InferenceDeployment.model_validate(
        {
            "apiVersion": "serving.neuronfleet.dev/v1alpha1",
            "kind": "InferenceDeployment",
            "metadata": {"name": "emb", "namespace": "ns", "uid": "u1"},
            "spec": {"model": {"source": f"s3://{MODELS}/deleted/model.pt", "format": "torchscript"}},
        }
    )
    store = tmp_path / "store"
    record_uncompiled_artifact(dep.spec, store, "compiled")
    reconciler = Reconciler(None, ArtifactStore(), OperatorSettings(artifact_store=str(store)))  # type: ignore[arg-type]
    _, first, _ = await reconciler._observe_compile(dep, StatusMemory())
    assert first is not None and first.stored is not None and first.source_problem is None
    status = {
        "artifact": {
            "uri": first.stored.uri,
            "sha256": first.stored.manifest_sha256,
            "cacheKey": first.stored.cache_key,
            "backend": "cpu",
            "compileImage": first.request.image,
            "sourceFingerprint": first.request.source_fingerprint,
        }
    }

    s3.delete_object(Bucket=MODELS, Key="deleted/model.pt")
    _, after, error = await reconciler._observe_compile(dep, StatusMemory.from_status(status))
    assert error is None and after is not None
    assert after.source_problem is not None  # said, not hidden
    assert after.stored == first.stored and after.request.key == first.request.key
    # Another spec (another bucket) has no artifact of its own to keep: as before, SourceUnreadable.
    other = dep.model_copy(deep=True)
    other.spec.model.batch_buckets = [1, 2]
    _, changed, _ = await reconciler._observe_compile(other, StatusMemory.from_status(status))
    assert changed is not None and changed.stored is None and changed.request.source_fingerprint is None
