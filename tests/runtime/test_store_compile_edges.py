"""Edges of the store and the compile cache (a reviewer's findings): S3 source prefixes and single
objects, a store that cannot take the artifact, concurrent publishes of one cache key, a manifest
put whose answer is lost (a proxy in front of moto), files deleted behind their manifest, what the
cache key names of the compile code, and manifest sizes and paths."""

from __future__ import annotations

import hashlib
import http.client
import importlib.metadata
import io
import json
import shutil
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
import torch
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from pydantic import ValidationError
from rich.console import Console
from tiny_model import save_tiny

import neuronserve
from neuronserve import cli
from neuronserve import compile as ncompile
from neuronserve import store as store_mod
from neuronserve.compile import CompileOptions, compile_model, compiler_identity
from neuronserve.manifest import Bucket, CompilerFlags, FileEntry, Manifest, TensorSignature, manifest_sha256
from neuronserve.store import ArtifactRejected, Store, StoreError, download_tree, fetch_artifact, fetch_manifest
from runtime_support import BUCKET, S3Server

KEY = "c" * 64
MISSING_BUCKET = "no-such-bucket-edges"


def _options(source: str, store: str | Path, fmt: Any = "torchscript") -> CompileOptions:
    return CompileOptions(
        source=source,
        store=str(store),
        name="tiny",
        batch_buckets=[1],
        sequence_buckets=[8],
        flags=CompilerFlags(),
        source_format=fmt,
    )


def _compile(opts: CompileOptions) -> ncompile.CompileResult:
    return compile_model(opts, Console(file=io.StringIO()))


def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    def trace(*args: object, **kwargs: object) -> int:
        raise AssertionError("traced although the store cannot take the artifact")

    monkeypatch.setattr(ncompile, "_trace_buckets", trace)


def _artifact(directory: Path, name: str, body: bytes = b"traced ") -> Manifest:
    """A hand-made artifact (two buckets, consistent manifest) in ``directory``."""
    directory.mkdir(parents=True)
    buckets = [Bucket(batch=1, sequence=8), Bucket(batch=4, sequence=8)]
    for bucket in buckets:
        (directory / bucket.file_name).write_bytes(body + name.encode() + bucket.file_name.encode())
    signature = TensorSignature(name="input_ids", dtype="int64", shape=[-1, -1])
    manifest = Manifest(
        name=name,
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
                path=b.file_name,
                sha256=store_mod.file_sha256(directory / b.file_name),
                size=(directory / b.file_name).stat().st_size,
            )
            for b in buckets
        ],
    )
    (directory / "manifest.json").write_bytes(manifest.to_json_bytes())
    return manifest


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


# ------------------------------------------------------------------- S3 sources: prefix or object


def test_an_s3_directory_source_does_not_take_its_sibling_prefixes(s3_env: S3Server, tmp_path: Path) -> None:
    client = boto3.client("s3")
    client.put_object(Bucket=BUCKET, Key="edges/sib/bert/config.json", Body=b"{}")
    client.put_object(Bucket=BUCKET, Key="edges/sib/bert/sub/vocab.txt", Body=b"a")
    client.put_object(Bucket=BUCKET, Key="edges/sib/bert-large/config.json", Body=b'{"large": true}')
    client.put_object(Bucket=BUCKET, Key="edges/sib/bert.json", Body=b"sibling object")
    for n, uri in enumerate([f"s3://{BUCKET}/edges/sib/bert", f"s3://{BUCKET}/edges/sib/bert/"]):
        dest = tmp_path / str(n)
        assert download_tree(uri, dest) == dest
        assert _files(dest) == ["config.json", "sub/vocab.txt"]  # was bert-large/... too, and "large"
        assert (dest / "config.json").read_bytes() == b"{}"


def test_an_s3_object_source_is_that_one_file_and_compiles_like_the_local_file(
    s3_env: S3Server, tmp_path: Path
) -> None:
    local = save_tiny(tmp_path / "model.pt")
    client = boto3.client("s3")
    client.upload_file(str(local), BUCKET, "edges/one/model.pt")
    client.put_object(Bucket=BUCKET, Key="edges/one/model.pt.bak", Body=b"a sibling, not the source")
    got = download_tree(f"s3://{BUCKET}/edges/one/model.pt", tmp_path / "src")
    assert got == tmp_path / "src" / "model.pt"  # was StoreError "nothing found under ..."
    assert _files(tmp_path / "src") == ["model.pt"]
    assert got.read_bytes() == local.read_bytes()

    store = tmp_path / "store"
    from_s3 = _compile(_options(f"s3://{BUCKET}/edges/one/model.pt", store, fmt="auto"))
    assert not from_s3.cached
    # The same bytes under the same file name: the same source digest, so the local file hits the cache.
    from_local = _compile(_options(str(local), store, fmt="auto"))
    assert from_local.cached and from_local.cache_key == from_s3.cache_key

    # With a trailing '/' the URI names a directory: the object itself is not taken as its content.
    with pytest.raises(StoreError, match="nothing found under"):
        download_tree(f"s3://{BUCKET}/edges/one/model.pt/", tmp_path / "dir")


def test_an_s3_object_at_the_buckets_root_is_that_one_file(s3_env: S3Server, tmp_path: Path) -> None:
    # s3://bucket/model.pt: a key with no folder in it names the file as well.
    client = boto3.client("s3")
    client.create_bucket(Bucket="edges-root")
    client.put_object(Bucket="edges-root", Key="model.pt", Body=b"weights")
    got = download_tree("s3://edges-root/model.pt", tmp_path / "src")
    assert got == tmp_path / "src" / "model.pt"
    assert got.read_bytes() == b"weights"


# ------------------------------------------------------------- a store that cannot take the artifact


def test_a_missing_store_bucket_fails_in_one_line_before_tracing(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_tracing(monkeypatch)
    source = save_tiny(tmp_path / "tiny.pt")
    argv = ["compile", "--source", str(source), "--store", f"s3://{MISSING_BUCKET}/c"]
    code = cli.main([*argv, "--batch-buckets", "1", "--sequence-buckets", "8"])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "compile failed" in line]
    assert len(lines) == 1, err
    assert f"cannot store the artifact at s3://{MISSING_BUCKET}/c/" in lines[0]
    assert f"the bucket {MISSING_BUCKET} does not exist" in lines[0]


def test_an_unwritable_directory_store_fails_before_tracing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_tracing(monkeypatch)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    with pytest.raises(StoreError, match=rf"cannot store the artifact at {a_file}/store/[0-9a-f]{{64}}: Not a dir"):
        _compile(_options(str(save_tiny(tmp_path / "tiny.pt")), a_file / "store"))


def test_a_denied_store_write_fails_before_tracing(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # moto grants everything: the store's client answers as S3 does for a read-only role.
    client = boto3.client("s3")
    stub = Stubber(client)
    stub.add_client_error("get_object", service_error_code="NoSuchKey", http_status_code=404)  # has_artifact: absent
    stub.add_response("head_bucket", {})
    stub.add_client_error("put_object", service_error_code="AccessDenied", http_status_code=403)
    stub.activate()
    monkeypatch.setattr(store_mod, "s3_client", lambda: client)
    _no_tracing(monkeypatch)
    with pytest.raises(StoreError, match=r"cannot store the artifact at s3://readonly/c/[0-9a-f]{64}: .*AccessDenied"):
        _compile(_options(str(save_tiny(tmp_path / "tiny.pt")), "s3://readonly/c"))
    stub.assert_no_pending_responses()


def test_a_role_that_may_not_list_the_store_bucket_but_write_to_it_passes_the_check(
    s3_env: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = boto3.client("s3")
    stub = Stubber(client)
    stub.add_client_error("head_bucket", service_error_code="403", http_status_code=403)
    stub.add_response(
        "put_object", {}, {"Bucket": "writeonly", "Key": f"c/{KEY}/.neuronserve-write-check", "Body": b""}
    )
    stub.add_response("delete_object", {}, {"Bucket": "writeonly", "Key": f"c/{KEY}/.neuronserve-write-check"})
    stub.activate()
    monkeypatch.setattr(store_mod, "s3_client", lambda: client)
    Store("s3://writeonly/c").check_writable(KEY)
    stub.assert_no_pending_responses()


def test_a_failed_upload_is_a_store_error(s3_env: S3Server, tmp_path: Path) -> None:
    manifest = _artifact(tmp_path / "a", "a")
    # upload_file raises boto3's S3UploadFailedError, which is no ClientError: it escaped as a traceback.
    with pytest.raises(
        StoreError,
        match=rf"cannot upload s3://{MISSING_BUCKET}/c/{KEY}/w-[0-9a-f]{{16}}/model-b1-s8\.pt: .*NoSuchBucket",
    ):
        Store(f"s3://{MISSING_BUCKET}/c").publish(tmp_path / "a", manifest)


# ------------------------------------------------------------------ concurrent publishes of one key


def test_concurrent_publishes_to_a_directory_store_leave_the_first_complete_artifact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    ma, mb = _artifact(a_dir, "dep-a"), _artifact(b_dir, "dep-b")
    real_copy = shutil.copyfile
    published: dict[str, Any] = {}

    def copy(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
        out = real_copy(src, dst, *args, **kwargs)
        if str(src).startswith(str(a_dir)) and "b" not in published:
            published["b"] = Store(str(root)).publish(b_dir, mb)  # B runs its whole publish while A copies
        return out

    monkeypatch.setattr(shutil, "copyfile", copy)  # the module whose copyfile the store calls
    published["a"] = Store(str(root)).publish(a_dir, ma)
    # B renamed first: its artifact is whole; A's files were discarded, and A was told it is B's.
    assert published["b"].stored is True
    assert published["a"].stored is False
    assert published["a"].manifest_bytes == (b_dir / "manifest.json").read_bytes()
    assert published["a"].uri == published["b"].uri == str(root / KEY)
    manifest, _, _ = fetch_artifact(str(root / KEY), tmp_path / "unused")  # was ArtifactRejected for good
    assert manifest.name == "dep-b"
    assert sorted(p.name for p in root.iterdir()) == [KEY]  # no staging left behind


def test_publishing_a_stored_key_again_leaves_the_served_files_in_place(tmp_path: Path) -> None:
    root = tmp_path / "store"
    first = Store(str(root)).publish(tmp_path / "a", _artifact(tmp_path / "a", "a"))
    served = root / KEY / "model-b1-s8.pt"
    inode, body = served.stat().st_ino, served.read_bytes()
    again = Store(str(root)).publish(tmp_path / "b", _artifact(tmp_path / "b", "b"))
    # was: rmtree of the directory pods load from, then a rename of the new one into its place
    assert (again.stored, again.manifest_bytes) == (False, first.manifest_bytes)
    assert (served.stat().st_ino, served.read_bytes()) == (inode, body)
    assert sorted(p.name for p in root.iterdir()) == [KEY]


def test_a_compile_that_loses_the_publish_race_returns_the_stored_artifact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, store = save_tiny(tmp_path / "tiny.pt"), tmp_path / "store"
    first = _compile(_options(str(source), store))
    assert not first.cached
    # The other compile stored the key after this one looked it up (and before it published).
    real = Store.has_artifact
    lookups: list[str] = []

    def has_artifact(self: Store, key: str) -> bool:
        lookups.append(key)
        return len(lookups) > 1 and real(self, key)

    monkeypatch.setattr(Store, "has_artifact", has_artifact)
    second = _compile(_options(str(source), store))
    assert second.cached is True
    assert (second.uri, second.cache_key, second.manifest_sha256) == (first.uri, first.cache_key, first.manifest_sha256)


def test_an_s3_publish_of_a_stored_key_uploads_nothing(s3_env: S3Server, tmp_path: Path) -> None:
    root = f"s3://{BUCKET}/edges/race"
    first = Store(root).publish(tmp_path / "a", _artifact(tmp_path / "a", "a"))
    client = boto3.client("s3")

    def listing() -> dict[str, Any]:
        contents = client.list_objects_v2(Bucket=BUCKET, Prefix="edges/race/").get("Contents", [])
        return {o["Key"]: (o["ETag"], o["LastModified"]) for o in contents}

    before = listing()
    again = Store(root).publish(tmp_path / "b", _artifact(tmp_path / "b", "b"))
    assert (again.stored, again.uri, again.manifest_bytes) == (False, first.uri, first.manifest_bytes)
    assert listing() == before


def test_concurrent_s3_publishes_of_one_key_never_mix_their_files(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = f"s3://{BUCKET}/edges/concurrent"
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    ma, mb = _artifact(a_dir, "dep-a"), _artifact(b_dir, "dep-b")
    real_client = store_mod.s3_client
    published: dict[str, Any] = {}

    class AUploadsSlowly:
        """A's client: B runs its whole publish between A's first and second file."""

        def __init__(self) -> None:
            self._client = real_client()

        def __getattr__(self, name: str) -> Any:
            return getattr(self._client, name)

        def upload_file(self, *args: Any, **kwargs: Any) -> Any:
            out = self._client.upload_file(*args, **kwargs)
            if "b" not in published:
                monkeypatch.setattr(store_mod, "s3_client", real_client)
                published["b"] = Store(root).publish(b_dir, mb)
                monkeypatch.setattr(store_mod, "s3_client", lambda: self)
            return out

    a_client = AUploadsSlowly()
    monkeypatch.setattr(store_mod, "s3_client", lambda: a_client)
    published["a"] = Store(root).publish(a_dir, ma)
    monkeypatch.setattr(store_mod, "s3_client", real_client)
    # B's manifest was stored first: A is told the artifact is B's, and B's files are whole (in
    # place, A's second file overwrote B's and every pod refused the artifact).
    assert (published["b"].stored, published["a"].stored) == (True, False)
    assert published["a"].manifest_bytes == published["b"].manifest_bytes
    manifest, _, _ = fetch_artifact(published["b"].uri, tmp_path / "fetched")
    assert manifest.name == "dep-b"
    # A's folder is deleted again; B's files and its manifest are all that is there.
    contents = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=f"edges/concurrent/{KEY}/")["Contents"]
    assert sorted(o["Key"].split(f"{KEY}/", 1)[1] for o in contents) == [
        "manifest.json",
        *(f"{manifest.files_prefix}/{b.file_name}" for b in manifest.buckets),
    ]


@pytest.mark.parametrize(
    ("code", "status"), [("ConditionalRequestConflict", 409), ("AccessDenied", 403)], ids=["409", "denied"]
)
def test_a_refused_s3_manifest_put_leaves_none_of_this_writers_files(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str, status: int
) -> None:
    root = f"s3://{BUCKET}/edges/refused-{status}"
    real_client = store_mod.s3_client
    other = {}

    class ManifestPutRefused:
        def __init__(self) -> None:
            self._client = real_client()

        def __getattr__(self, name: str) -> Any:
            return getattr(self._client, name)

        def put_object(self, **kwargs: Any) -> Any:
            if kwargs["Key"].endswith("manifest.json") and "IfNoneMatch" in kwargs:
                if status == 409:  # another writer's conditional put was in flight, and it stored B
                    monkeypatch.setattr(store_mod, "s3_client", real_client)
                    other["b"] = Store(root).publish(tmp_path / "b", _artifact(tmp_path / "b", "dep-b"))
                raise ClientError(
                    {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
                    "PutObject",
                )
            return self._client.put_object(**kwargs)

    client = ManifestPutRefused()
    monkeypatch.setattr(store_mod, "s3_client", lambda: client)
    manifest = _artifact(tmp_path / "a", "dep-a")
    if status == 409:
        published = Store(root).publish(tmp_path / "a", manifest)
        assert (published.stored, published.manifest_bytes) == (False, other["b"].manifest_bytes)
    else:
        with pytest.raises(StoreError, match=r"cannot upload .*/manifest\.json: .*AccessDenied"):
            Store(root).publish(tmp_path / "a", manifest)
    listing = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=f"edges/refused-{status}/")
    kept = {o["Key"] for o in listing.get("Contents", [])}
    expected = set()
    if status == 409:
        stored = Manifest.from_json_bytes(other["b"].manifest_bytes)
        expected = {f"edges/refused-409/{KEY}/{stored.files_prefix}/{b.file_name}" for b in stored.buckets}
        expected.add(f"edges/refused-409/{KEY}/manifest.json")
    assert kept == expected


class _LosingProxy:
    """An HTTP proxy in front of the moto server that loses manifest PUTs as a network does.

    ``fate(n)`` decides the n-th PUT of a manifest (from 0): "pass"; "answer-lost" (moto stores
    it, then the connection closes before its answer: a read timeout or a reset after the fact);
    or "request-lost" (the connection closes before moto sees it). Everything else passes.
    """

    def __init__(self, upstream: str, fate: Callable[[int], str]) -> None:
        host, port = urllib.parse.urlsplit(upstream).netloc.split(":")
        self.fates: list[str] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                manifest_put = self.command == "PUT" and self.path.split("?")[0].endswith("/manifest.json")
                fate = fate_of(len(proxy.fates)) if manifest_put else "pass"
                if manifest_put:
                    proxy.fates.append(fate)
                if fate == "request-lost":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                upstream_conn = http.client.HTTPConnection(host, int(port), timeout=30)
                upstream_conn.request(self.command, self.path, body=body, headers=dict(self.headers.items()))
                answer = upstream_conn.getresponse()
                data = answer.read()
                upstream_conn.close()
                if fate == "answer-lost":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection"):
                        self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = forward

        fate_of = fate
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def losing_proxy(s3_env: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., _LosingProxy]]:
    """Start a :class:`_LosingProxy` and point boto3 at it."""
    started: list[_LosingProxy] = []

    def start(fate: Callable[[int], str]) -> _LosingProxy:
        proxy = _LosingProxy(s3_env.endpoint, fate)
        started.append(proxy)
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        return proxy

    yield start
    for proxy in started:
        proxy.close()


def _keys(prefix: str) -> set[str]:
    contents = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return {o["Key"].removeprefix(prefix) for o in contents}


def test_a_manifest_put_retried_after_its_answer_was_lost_keeps_the_artifact_it_stored(
    losing_proxy: Callable[..., _LosingProxy], tmp_path: Path
) -> None:
    # botocore sent the put again and S3 answered 412 to it (the first attempt had stored the
    # manifest): publish took that for another writer's win and deleted the files its own manifest
    # names. Every pod then failed to load the artifact, and every later compile was a cache hit on it.
    proxy = losing_proxy(lambda n: "answer-lost" if n == 0 else "pass")
    root = f"s3://{BUCKET}/edges/lost-answer"
    manifest = _artifact(tmp_path / "a", "a")
    published = Store(root).publish(tmp_path / "a", manifest)
    assert proxy.fates == ["answer-lost", "pass"], "the manifest's put was sent again"
    assert published.stored is True
    stored = Manifest.from_json_bytes(published.manifest_bytes)
    assert _keys(f"edges/lost-answer/{KEY}/") == {
        "manifest.json",
        *(f"{stored.files_prefix}/{b.file_name}" for b in manifest.buckets),
    }
    fetched, _, _ = fetch_artifact(published.uri, tmp_path / "fetched", manifest_sha256(published.manifest_bytes))
    assert fetched.name == "a"


@pytest.mark.parametrize("fate", ["answer-lost", "request-lost"])
def test_a_manifest_put_of_unknown_outcome_deletes_no_file(
    losing_proxy: Callable[..., _LosingProxy], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fate: str
) -> None:
    # Every attempt of the put lost (botocore gives up with a connection error): whether the
    # manifest is stored is unknown, and it was taken as not stored (files deleted) either way.
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    proxy = losing_proxy(lambda n: fate)
    root = f"s3://{BUCKET}/edges/unknown-{fate}"
    manifest = _artifact(tmp_path / "a", "a")
    prefix = f"edges/unknown-{fate}/{KEY}/"
    if fate == "answer-lost":
        # The first attempt stored it: publish reads the manifest and finds its own folder named.
        published = Store(root).publish(tmp_path / "a", manifest)
        assert published.stored is True
        fetch_artifact(published.uri, tmp_path / "fetched", manifest_sha256(published.manifest_bytes))
    else:
        # No manifest there: not stored (as far as can be told), and nothing is deleted, since a
        # put still under way could yet store a manifest naming these files.
        with pytest.raises(StoreError, match=r"whether it was stored is unknown.*kept") as raised:
            Store(root).publish(tmp_path / "a", manifest)
        kept = _keys(prefix)
        assert "manifest.json" not in kept
        [folder] = {k.split("/")[0] for k in kept}
        assert kept == {f"{folder}/{b.file_name}" for b in manifest.buckets}
        assert f"s3://{BUCKET}/{prefix}{folder}/" in str(raised.value)
    assert len(proxy.fates) == 2


# ------------------------------------------------------------- files deleted behind their manifest


def test_a_directory_artifact_whose_file_was_deleted_is_compiled_and_stored_again(tmp_path: Path) -> None:
    # A file removed by hand (or a cleanup of big files) left the manifest: every compile of the
    # key was a cache hit on it, and every pod refused it ("model-b1-s8.pt: missing") for good.
    source, store = save_tiny(tmp_path / "tiny.pt"), tmp_path / "store"
    first = _compile(_options(str(source), store))
    victim = Path(first.uri) / "model-b1-s8.pt"
    victim.unlink()
    assert not Store(str(store)).has_artifact(first.cache_key)
    again = _compile(_options(str(source), store))
    assert again.cached is False
    assert (again.uri, again.cache_key) == (first.uri, first.cache_key)
    manifest, _, _ = fetch_artifact(again.uri, tmp_path / "unused", again.manifest_sha256)
    assert victim.is_file() and manifest.cache_key == first.cache_key
    assert sorted(p.name for p in store.iterdir()) == [first.cache_key]  # the broken one is not kept aside


def test_an_s3_artifact_whose_file_was_deleted_is_stored_again(s3_env: S3Server, tmp_path: Path) -> None:
    root, prefix = f"s3://{BUCKET}/edges/files-gone", f"edges/files-gone/{KEY}/"
    first = Store(root).publish(tmp_path / "a", _artifact(tmp_path / "a", "a"))
    old_folder = Manifest.from_json_bytes(first.manifest_bytes).files_prefix
    client = boto3.client("s3")
    client.delete_object(Bucket=BUCKET, Key=f"{prefix}{old_folder}/model-b4-s8.pt")  # a lifecycle rule
    assert not Store(root).has_artifact(KEY)
    again = Store(root).publish(tmp_path / "b", _artifact(tmp_path / "b", "b"))
    assert again.stored is True
    manifest, _, _ = fetch_artifact(again.uri, tmp_path / "fetched", manifest_sha256(again.manifest_bytes))
    assert manifest.name == "b" and manifest.files_prefix != old_folder
    # The replaced manifest's file left is named by no manifest: deleted with it.
    assert _keys(prefix) == {"manifest.json", *(f"{manifest.files_prefix}/{b.file_name}" for b in manifest.buckets)}


def test_an_s3_artifact_repaired_by_another_writer_first_is_theirs(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, prefix = f"s3://{BUCKET}/edges/repair-race", f"edges/repair-race/{KEY}/"
    first = Store(root).publish(tmp_path / "a", _artifact(tmp_path / "a", "a"))
    old_folder = Manifest.from_json_bytes(first.manifest_bytes).files_prefix
    boto3.client("s3").delete_object(Bucket=BUCKET, Key=f"{prefix}{old_folder}/model-b1-s8.pt")
    real_client = store_mod.s3_client
    other: dict[str, Any] = {}

    class BRepairsFirst:
        """C's client: B repairs the key between C's look and C's put of its manifest."""

        def __init__(self) -> None:
            self._client = real_client()

        def __getattr__(self, name: str) -> Any:
            return getattr(self._client, name)

        def put_object(self, **kwargs: Any) -> Any:
            if kwargs["Key"].endswith("manifest.json") and "b" not in other:
                monkeypatch.setattr(store_mod, "s3_client", real_client)
                other["b"] = Store(root).publish(tmp_path / "b", _artifact(tmp_path / "b", "b"))
                monkeypatch.setattr(store_mod, "s3_client", lambda: self)
            return self._client.put_object(**kwargs)

    client = BRepairsFirst()
    monkeypatch.setattr(store_mod, "s3_client", lambda: client)
    published = Store(root).publish(tmp_path / "c", _artifact(tmp_path / "c", "c"))
    monkeypatch.setattr(store_mod, "s3_client", real_client)
    assert other["b"].stored is True
    assert (published.stored, published.manifest_bytes) == (False, other["b"].manifest_bytes)
    manifest, _, _ = fetch_artifact(published.uri, tmp_path / "fetched")
    assert manifest.name == "b"
    assert _keys(prefix) == {"manifest.json", *(f"{manifest.files_prefix}/{b.file_name}" for b in manifest.buckets)}


@pytest.mark.parametrize("replacing", [False, True], ids=["new-key", "files-gone"])
def test_a_409_whose_other_put_stored_nothing_is_put_once_more(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replacing: bool
) -> None:
    # 409: another conditional put of the manifest was in flight. When that one stored nothing (it
    # failed, its writer died), the compile failed after waiting for its manifest ("did not appear").
    # And when the key held a manifest whose files are gone, that broken manifest was taken at once
    # for the other writer's: this writer's files were deleted and the broken artifact kept.
    monkeypatch.setattr(store_mod, "_STORED_MANIFEST_PAUSE_S", 0.0)
    monkeypatch.setattr(store_mod, "_STORED_MANIFEST_LOOKS", 3)
    root, prefix = f"s3://{BUCKET}/edges/conflict-{replacing}", f"edges/conflict-{replacing}/{KEY}/"
    if replacing:
        first = Store(root).publish(tmp_path / "old", _artifact(tmp_path / "old", "old"))
        old_folder = Manifest.from_json_bytes(first.manifest_bytes).files_prefix
        boto3.client("s3").delete_object(Bucket=BUCKET, Key=f"{prefix}{old_folder}/model-b1-s8.pt")
    real_client = store_mod.s3_client
    puts: list[str] = []

    class ConflictOnce:
        def __init__(self) -> None:
            self._client = real_client()

        def __getattr__(self, name: str) -> Any:
            return getattr(self._client, name)

        def put_object(self, **kwargs: Any) -> Any:
            if kwargs["Key"].endswith("manifest.json"):
                puts.append(next(c for c in ("IfNoneMatch", "IfMatch") if c in kwargs))
                if len(puts) == 1:
                    raise ClientError(
                        {
                            "Error": {"Code": "ConditionalRequestConflict", "Message": "conflict"},
                            "ResponseMetadata": {"HTTPStatusCode": 409},
                        },
                        "PutObject",
                    )
            return self._client.put_object(**kwargs)

    client = ConflictOnce()
    monkeypatch.setattr(store_mod, "s3_client", lambda: client)
    published = Store(root).publish(tmp_path / "a", _artifact(tmp_path / "a", "a"))
    monkeypatch.setattr(store_mod, "s3_client", real_client)
    assert puts == ["IfMatch" if replacing else "IfNoneMatch"] * 2
    assert published.stored is True
    manifest, _, _ = fetch_artifact(published.uri, tmp_path / "fetched", manifest_sha256(published.manifest_bytes))
    assert manifest.name == "a"
    assert _keys(prefix) == {"manifest.json", *(f"{manifest.files_prefix}/{b.file_name}" for b in manifest.buckets)}


def _break(root: str, prefix: str, directory: Path) -> store_mod.Published:
    """Store an artifact under KEY, then delete one of its files (a lifecycle rule, a person)."""
    first = Store(root).publish(directory, _artifact(directory, "old"))
    folder = Manifest.from_json_bytes(first.manifest_bytes).files_prefix
    boto3.client("s3").delete_object(Bucket=BUCKET, Key=f"{prefix}{folder}/model-b1-s8.pt")
    assert not Store(root).has_artifact(KEY)
    return first


class _ManifestPut503:
    """A client whose every manifest put is answered 503 (S3 may or may not have stored it)."""

    def __init__(self, real: Callable[[], Any]) -> None:
        self._client = real()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def put_object(self, **kwargs: Any) -> Any:
        if kwargs["Key"].endswith("manifest.json"):
            raise ClientError(
                {"Error": {"Code": "ServiceUnavailable"}, "ResponseMetadata": {"HTTPStatusCode": 503}}, "PutObject"
            )
        return self._client.put_object(**kwargs)


@pytest.mark.parametrize("failure", ["503", "request-lost"])
def test_a_repair_put_of_unknown_outcome_that_stored_nothing_is_no_cache_hit(
    s3_env: S3Server,
    losing_proxy: Callable[..., _LosingProxy],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    failure: str,
) -> None:
    # The manifest being replaced (its files gone) was still there after the put's 5xx or timeout:
    # it was taken for another writer's win, this compile's files were deleted and the compile
    # reported a cache hit on the broken artifact, which pods then refused again.
    root, prefix = f"s3://{BUCKET}/edges/repair-unknown-{failure}", f"edges/repair-unknown-{failure}/{KEY}/"
    broken = _break(root, prefix, tmp_path / "old")
    real_client = store_mod.s3_client
    if failure == "503":
        client = _ManifestPut503(store_mod.s3_client)
        monkeypatch.setattr(store_mod, "s3_client", lambda: client)
    else:
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
        losing_proxy(lambda n: "request-lost")
    with pytest.raises(StoreError, match=r"whether it was stored is unknown.*kept in") as raised:
        Store(root).publish(tmp_path / "a", _artifact(tmp_path / "a", "a"))
    monkeypatch.setattr(store_mod, "s3_client", real_client)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env.endpoint)
    assert Store(root).get_bytes(f"{KEY}/manifest.json") == broken.manifest_bytes
    old_folder = Manifest.from_json_bytes(broken.manifest_bytes).files_prefix
    [folder] = {k.split("/")[0] for k in _keys(prefix)} - {"manifest.json", old_folder}
    assert _keys(f"{prefix}{folder}/") == {"model-b1-s8.pt", "model-b4-s8.pt"}, "this compile's files are kept"
    assert f"{prefix}{folder}/" in str(raised.value)


def test_a_compile_whose_repair_put_failed_is_no_cache_hit(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Through the compile: it printed "cache hit" and returned the broken manifest's sha256 (what
    # a request record then names), and the operator found that record dangling again.
    opts = _options(str(save_tiny(tmp_path / "tiny.pt")), f"s3://{BUCKET}/edges/repair-compile")
    first = _compile(opts)
    prefix = first.uri.split(f"{BUCKET}/", 1)[1]
    victim = next(k for k in _keys(f"{prefix}/") if k.endswith(".pt"))
    boto3.client("s3").delete_object(Bucket=BUCKET, Key=f"{prefix}/{victim}")
    client = _ManifestPut503(store_mod.s3_client)
    monkeypatch.setattr(store_mod, "s3_client", lambda: client)
    with pytest.raises(StoreError, match="whether it was stored is unknown"):
        _compile(opts)


def test_a_repair_whose_broken_manifest_was_deleted_meanwhile_stores_the_artifact(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Someone removed what was left of the broken artifact while this compile uploaded: the put
    # "only if it is still that manifest" got 404 and the compile failed, deleting its own files,
    # although the key was simply empty.
    root, prefix = f"s3://{BUCKET}/edges/repair-deleted", f"edges/repair-deleted/{KEY}/"
    broken = _break(root, prefix, tmp_path / "old")
    old_folder = Manifest.from_json_bytes(broken.manifest_bytes).files_prefix
    real_client = store_mod.s3_client
    conditions: list[str] = []

    class CleanupRaces:
        def __init__(self) -> None:
            self._client = real_client()

        def __getattr__(self, name: str) -> Any:
            return getattr(self._client, name)

        def put_object(self, **kwargs: Any) -> Any:
            if kwargs["Key"].endswith("manifest.json"):
                conditions.append(next(c for c in ("IfNoneMatch", "IfMatch") if c in kwargs))
                for key in _keys(prefix):
                    if key == "manifest.json" or key.startswith(f"{old_folder}/"):
                        self._client.delete_object(Bucket=BUCKET, Key=f"{prefix}{key}")
            return self._client.put_object(**kwargs)

    client = CleanupRaces()
    monkeypatch.setattr(store_mod, "s3_client", lambda: client)
    published = Store(root).publish(tmp_path / "a", _artifact(tmp_path / "a", "a"))
    monkeypatch.setattr(store_mod, "s3_client", real_client)
    assert conditions == ["IfMatch", "IfNoneMatch"]
    assert published.stored is True
    manifest, _, _ = fetch_artifact(published.uri, tmp_path / "fetched", manifest_sha256(published.manifest_bytes))
    assert manifest.name == "a"
    assert _keys(prefix) == {"manifest.json", *(f"{manifest.files_prefix}/{b.file_name}" for b in manifest.buckets)}


@pytest.mark.parametrize(
    ("storage_class", "restored", "whole"),
    [("GLACIER", False, False), ("DEEP_ARCHIVE", False, False), ("GLACIER", True, True), ("GLACIER_IR", False, True)],
)
def test_an_s3_artifact_whose_file_was_archived_is_stored_again(
    s3_env: S3Server, tmp_path: Path, storage_class: str, restored: bool, whole: bool
) -> None:
    # A lifecycle transition to an archive class leaves every file there at its size (HEAD finds
    # it), so the artifact was taken for whole (a compile was a cache hit on it) while no pod could
    # download it (InvalidObjectState). A restored copy, and Glacier Instant Retrieval, read at once.
    root, prefix = (
        f"s3://{BUCKET}/edges/archived-{storage_class}-{restored}",
        f"edges/archived-{storage_class}-{restored}/{KEY}/",
    )
    first = Store(root).publish(tmp_path / "a", _artifact(tmp_path / "a", "a"))
    victim = f"{prefix}{Manifest.from_json_bytes(first.manifest_bytes).files_prefix}/model-b1-s8.pt"
    client = boto3.client("s3")
    client.copy_object(
        Bucket=BUCKET, Key=victim, CopySource={"Bucket": BUCKET, "Key": victim}, StorageClass=storage_class
    )
    if restored:
        client.restore_object(Bucket=BUCKET, Key=victim, RestoreRequest={"Days": 1})
    assert Store(root).has_artifact(KEY) is whole
    if whole:
        return
    found = Store(root)._look(KEY)
    assert found is not None and found.problems == (f"model-b1-s8.pt: archived (storage class {storage_class})",)
    again = Store(root).publish(tmp_path / "b", _artifact(tmp_path / "b", "b"))
    assert again.stored is True
    fetch_artifact(again.uri, tmp_path / "fetched", manifest_sha256(again.manifest_bytes))


def test_an_s3_manifest_with_no_writer_folder_still_serves(s3_env: S3Server, tmp_path: Path) -> None:
    # Artifacts stored before writer folders keep their files beside the manifest.
    manifest = _artifact(tmp_path / "a", "old")
    client = boto3.client("s3")
    for b in manifest.buckets:
        client.upload_file(str(tmp_path / "a" / b.file_name), BUCKET, f"edges/old/{KEY}/{b.file_name}")
    client.put_object(Bucket=BUCKET, Key=f"edges/old/{KEY}/manifest.json", Body=manifest.to_json_bytes())
    assert b"files_prefix" not in manifest.to_json_bytes()
    fetched, _, directory = fetch_artifact(f"s3://{BUCKET}/edges/old/{KEY}", tmp_path / "fetched")
    assert fetched.name == "old"
    assert sorted(p.name for p in directory.iterdir()) == sorted(b.file_name for b in manifest.buckets)


def test_a_request_record_is_written_through_a_private_staging_file(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    # Another writer's staging file of the same record (the shared name was "<record>.partial").
    (tmp_path / "store" / "requests" / "k.json.partial").mkdir(parents=True)
    store.put_bytes("requests/k.json", b"{}")
    assert store.get_bytes("requests/k.json") == b"{}"
    assert sorted(p.name for p in (tmp_path / "store" / "requests").iterdir()) == ["k.json", "k.json.partial"]


# ------------------------------------------------------------------ the cache key names the compile code


#: sha256 of runtime/neuronserve/compile.py -> its COMPILE_CODE_VERSION. A change to that file fails
#: the test below until it is recorded here: bump COMPILE_CODE_VERSION if the change alters what a
#: traced module holds (every stored artifact is then compiled again), else record the new digest
#: with the same version.
REVIEWED_COMPILE_CODE = {
    "805b5f36d831aa72fb7b609dc450e7493546ed1a072cc6e1f29cb35689080407": 1,
    # The result's sha256 is the stored manifest's (in S3 it names the writer's folder): no traced change.
    "fe67014c5ef2322cb325780643495695d6f94ee943646e7059604b644cdedb8d": 1,
    # A torchscript directory source must hold exactly one .pt/.pth/.ts file (refused otherwise): the
    # one file compiled is traced as before.
    "5c91b5c780f56bb3f2ee841f1ce42bd3e1f467e7e7a82730907c573dff16869a": 1,
}


def test_every_change_to_the_compile_code_was_weighed_for_the_cache_key() -> None:
    digest = hashlib.sha256(Path(ncompile.__file__).read_bytes()).hexdigest()
    assert REVIEWED_COMPILE_CODE.get(digest) == ncompile.COMPILE_CODE_VERSION, (
        f"compile.py changed (sha256 {digest}): bump COMPILE_CODE_VERSION if traced modules change, "
        "then record the digest in REVIEWED_COMPILE_CODE"
    )


def test_the_compiler_identity_names_neuronserve_and_for_hugging_face_transformers() -> None:
    code = f"neuronserve=={neuronserve.__version__}/compile-{ncompile.COMPILE_CODE_VERSION}"
    assert compiler_identity("cpu", "torchscript") == f"torch.jit=={torch.__version__},{code}"
    transformers = importlib.metadata.version("transformers")
    assert (
        compiler_identity("cpu", "huggingface") == f"torch.jit=={torch.__version__},{code},transformers=={transformers}"
    )


def test_a_new_neuronserve_version_compiles_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source, store = save_tiny(tmp_path / "tiny.pt"), tmp_path / "store"
    first = _compile(_options(str(source), store))
    monkeypatch.setattr(neuronserve, "__version__", "99.0.0")
    second = _compile(_options(str(source), store))
    assert not second.cached and second.cache_key != first.cache_key  # was: the old artifact, cached


def test_a_new_compile_code_version_compiles_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A fixed compile image that kept the package version: its compile code's version differs.
    source, store = save_tiny(tmp_path / "tiny.pt"), tmp_path / "store"
    first = _compile(_options(str(source), store))
    monkeypatch.setattr(ncompile, "COMPILE_CODE_VERSION", ncompile.COMPILE_CODE_VERSION + 1)
    second = _compile(_options(str(source), store))
    assert not second.cached and second.cache_key != first.cache_key


def _tiny_bert(directory: Path) -> Path:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
    BertModel(config).save_pretrained(str(directory))
    return directory


def test_a_new_transformers_compiles_a_hugging_face_source_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, store = _tiny_bert(tmp_path / "bert"), tmp_path / "store"
    first = _compile(_options(str(source), store, fmt="auto"))
    stored = Manifest.from_json_bytes((Path(first.uri) / "manifest.json").read_bytes())
    assert f"transformers=={importlib.metadata.version('transformers')}" in stored.compiler.split(",")
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda dist: "99.0.0" if dist == "transformers" else real(dist))
    second = _compile(_options(str(source), store, fmt="auto"))
    assert not second.cached and second.cache_key != first.cache_key  # was: the old artifact, cached


# ------------------------------------------------------------------ manifest sizes and paths


def _with_sizes(directory: Path, sizes: dict[str, int]) -> None:
    doc = json.loads((directory / "manifest.json").read_bytes())
    for entry in doc["files"]:
        entry["size"] = sizes.get(entry["path"], entry["size"])
    (directory / "manifest.json").write_bytes(Manifest.model_validate(doc).to_json_bytes())


def test_a_file_whose_size_differs_from_the_manifest_is_refused_without_hashing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "art"
    _artifact(directory, "a")
    _with_sizes(directory, {"model-b1-s8.pt": 1})
    hashed: list[str] = []
    real = store_mod.file_sha256

    def hashing(path: Path) -> str:
        hashed.append(path.name)
        return real(path)

    monkeypatch.setattr(store_mod, "file_sha256", hashing)
    with pytest.raises(ArtifactRejected, match=r"model-b1-s8\.pt: \d+ bytes, the manifest says 1"):
        fetch_artifact(str(directory), tmp_path / "unused")  # was accepted: size never compared
    assert hashed == ["model-b4-s8.pt"]


def test_an_s3_object_larger_than_the_manifest_says_is_refused_before_any_download(
    s3_env: S3Server, tmp_path: Path
) -> None:
    directory = tmp_path / "art"
    _artifact(directory, "a")
    _with_sizes(directory, {"model-b4-s8.pt": 3})
    root = f"s3://{BUCKET}/edges/sizes"
    client = boto3.client("s3")
    for path in _files(directory):
        client.upload_file(str(directory / path), BUCKET, f"edges/sizes/{KEY}/{path}")
    scratch = tmp_path / "scratch"
    with pytest.raises(ArtifactRejected, match=r"model-b4-s8\.pt: \d+ bytes, the manifest says 3"):
        fetch_artifact(f"{root}/{KEY}", scratch)
    assert not scratch.exists() or _files(scratch) == []  # nothing downloaded, not even the good file

    # The emulated device's fetch of the tokenizer alone checks the size before reading the body too.
    _, fetched = fetch_manifest(f"{root}/{KEY}", tmp_path / "scratch1", ("model-b1-s8.pt",))
    assert _files(fetched) == ["model-b1-s8.pt"]
    client.put_object(Bucket=BUCKET, Key=f"edges/sizes/{KEY}/model-b4-s8.pt", Body=b"x" * 10_000)
    with pytest.raises(ArtifactRejected, match=r"model-b4-s8\.pt: 10000 bytes, the manifest says 3"):
        fetch_manifest(f"{root}/{KEY}", tmp_path / "scratch2", ("model-b4-s8.pt",))


def test_a_nul_byte_in_a_manifest_path_is_a_rejected_artifact(s3_env: S3Server, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="relative and normalized"):
        FileEntry(path="model\x00.pt", sha256="a" * 64, size=1)
    directory = tmp_path / "art"
    _artifact(directory, "a")
    doc = json.loads((directory / "manifest.json").read_bytes())
    doc["files"].append({"path": "extra\x00/x.bin", "sha256": "a" * 64, "size": 1})
    client = boto3.client("s3")
    for path in _files(directory):
        client.upload_file(str(directory / path), BUCKET, f"edges/nul/{KEY}/{path}")
    client.put_object(Bucket=BUCKET, Key=f"edges/nul/{KEY}/manifest.json", Body=json.dumps(doc).encode())
    with pytest.raises(ArtifactRejected, match="invalid manifest"):  # was a ValueError: embedded null byte
        fetch_artifact(f"s3://{BUCKET}/edges/nul/{KEY}", tmp_path / "scratch")


def test_a_directory_key_left_without_its_manifest_is_stored_again(tmp_path: Path) -> None:
    # Someone deleted only the manifest (the operator then reports the record as dangling and
    # compiles again): the rename onto the non-empty directory failed, so the compile failed.
    root = tmp_path / "store"
    Store(str(root)).publish(tmp_path / "a", _artifact(tmp_path / "a", "a"))
    (root / KEY / "manifest.json").unlink()
    (root / KEY / "stray.bin").write_bytes(b"left over")
    again = Store(str(root)).publish(tmp_path / "b", _artifact(tmp_path / "b", "b"))
    assert again.stored is True
    manifest, _, directory = fetch_artifact(str(root / KEY), tmp_path / "unused")
    assert manifest.name == "b"
    assert not (directory / "stray.bin").exists()
    assert sorted(p.name for p in root.iterdir()) == [KEY]  # nothing set aside is left behind


def test_a_whole_artifact_stored_during_the_set_aside_is_put_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    Store(str(root)).publish(tmp_path / "a", _artifact(tmp_path / "a", "a"))
    (root / KEY / "manifest.json").unlink()
    real_has = Store.has_artifact

    def has_artifact(self: Store, key: str) -> bool:
        found = real_has(self, key)
        if not found and not (tmp_path / "b-done").exists():
            # Writer B completes the key right after this writer looked.
            (tmp_path / "b-done").touch()
            shutil.rmtree(root / KEY)
            monkeypatch.setattr(Store, "has_artifact", real_has)
            Store(str(root)).publish(tmp_path / "b", _artifact(tmp_path / "b", "b"))
            monkeypatch.setattr(Store, "has_artifact", has_artifact)
        return found

    monkeypatch.setattr(Store, "has_artifact", has_artifact)
    published = Store(str(root)).publish(tmp_path / "c", _artifact(tmp_path / "c", "c"))
    assert published.stored is False
    manifest, _, _ = fetch_artifact(str(root / KEY), tmp_path / "unused")
    assert manifest.name == "b"
    assert sorted(p.name for p in root.iterdir()) == [KEY]


# ------------------------------------- a '//' after the bucket: the operator reads where the Job wrote


def test_a_store_with_a_double_slash_is_read_by_the_operator_where_the_compile_job_wrote(
    tmp_path: Path, s3_env: S3Server
) -> None:
    """The CRD refuses ``s3://bucket//prefix`` now, but a spec stored before keeps it: the Job (this
    CLI) stripped the leading '/', the operator read ``/prefix/...``, so it never found the record
    the Job wrote and compiled it again on every Job."""
    from neuronfleet.artifacts.store import ArtifactStore
    from neuronfleet.planning.compile import CompileRequest

    store = f"s3://{BUCKET}//double-slash-store"
    source = save_tiny(tmp_path / "tiny.pt")
    args = ["compile", "--source", str(source), "--format", "torchscript", "--store", store]
    assert cli.main([*args, "--batch-buckets", "1", "--sequence-buckets", "4", "--request-key", "dslash1"]) == 0
    found = ArtifactStore().lookup(CompileRequest("dslash1", store, str(source), None))
    assert found is not None and not hasattr(found, "found_sha256"), found


def test_a_source_with_a_double_slash_is_listed_by_the_operator_as_the_compile_job_downloads_it(
    tmp_path: Path, s3_env: S3Server
) -> None:
    from neuronfleet.artifacts.store import ArtifactStore

    boto3.client("s3").upload_file(str(save_tiny(tmp_path / "tiny.pt")), BUCKET, "dslash-models/tiny.pt")
    for source in (f"s3://{BUCKET}//dslash-models/tiny.pt", f"s3://{BUCKET}//dslash-models/"):
        downloaded = download_tree(source, tmp_path / f"dl-{len(source)}")
        assert downloaded.is_file() or (downloaded / "tiny.pt").is_file()
        # The operator's fingerprint lists what the Job downloads: the same object.
        plain = source.replace("//dslash", "/dslash")
        assert ArtifactStore().fingerprint(source) == ArtifactStore().fingerprint(plain)
