"""The pure artifact contract: cache keys, bucket choice, manifest validation, file verification."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from neuronserve.manifest import (
    Bucket,
    CompilerFlags,
    FileEntry,
    Manifest,
    TensorSignature,
    artifact_uri,
    cache_key,
    revision,
    source_digest,
    split_s3_uri,
    verify_files,
)

DIGEST = "a" * 64
BUCKETS = [Bucket(batch=1, sequence=32), Bucket(batch=4, sequence=128)]


def _manifest(**overrides: object) -> Manifest:
    fields: dict[str, object] = {
        "name": "m",
        "backend": "cpu",
        "buckets": BUCKETS,
        "inputs": [TensorSignature(name="input_ids", dtype="int64", shape=[-1, -1])],
        "outputs": [TensorSignature(name="embedding", dtype="float32", shape=[-1, 384])],
        "compiler": "torch.jit==2",
        "torch_version": "2",
        "flags": CompilerFlags(),
        "source_digest": DIGEST,
        "cache_key": "b" * 64,
        "files": [FileEntry(path=b.file_name, sha256="c" * 64, size=1) for b in BUCKETS],
    }
    fields.update(overrides)
    return Manifest.model_validate(fields)


def test_cache_key_ignores_bucket_order_and_duplicates() -> None:
    one = cache_key(DIGEST, "torch.jit==2", CompilerFlags(), BUCKETS)
    other = cache_key(DIGEST, "torch.jit==2", CompilerFlags(), [*reversed(BUCKETS), BUCKETS[0]])
    assert one == other
    assert len(one) == 64


@pytest.mark.parametrize(
    ("source", "compiler", "flags", "buckets"),
    [
        ("f" * 64, "torch.jit==2", CompilerFlags(), BUCKETS),
        (DIGEST, "neuronx-cc==2.15", CompilerFlags(), BUCKETS),
        (DIGEST, "torch.jit==2", CompilerFlags(opt_level=3), BUCKETS),
        (DIGEST, "torch.jit==2", CompilerFlags(auto_cast="none"), BUCKETS),
        (DIGEST, "torch.jit==2", CompilerFlags(extra_args=["--enable-fast-loading-neuron-binaries"]), BUCKETS),
        (DIGEST, "torch.jit==2", CompilerFlags(), BUCKETS[:1]),
    ],
)
def test_cache_key_changes_with_each_input(
    source: str, compiler: str, flags: CompilerFlags, buckets: list[Bucket]
) -> None:
    assert cache_key(source, compiler, flags, buckets) != cache_key(DIGEST, "torch.jit==2", CompilerFlags(), BUCKETS)


def test_source_digest_is_order_independent_and_sees_renames() -> None:
    assert source_digest({"a": "1", "b": "2"}) == source_digest({"b": "2", "a": "1"})
    assert source_digest({"a": "1", "b": "2"}) != source_digest({"a": "1", "c": "2"})


def test_bucket_for_picks_the_smallest_fitting_bucket() -> None:
    manifest = _manifest()
    assert manifest.bucket_for(1, 10) == Bucket(batch=1, sequence=32)
    assert manifest.bucket_for(2, 10) == Bucket(batch=4, sequence=128)
    assert manifest.bucket_for(1, 100) == Bucket(batch=4, sequence=128)
    assert manifest.bucket_for(5, 1) is None
    assert manifest.bucket_for(1, 129) is None


def test_manifest_round_trips_through_json() -> None:
    manifest = _manifest()
    assert Manifest.from_json_bytes(manifest.to_json_bytes()) == manifest


def test_manifest_refuses_paths_outside_the_artifact() -> None:
    with pytest.raises(ValidationError, match="relative"):
        FileEntry(path="../etc/passwd", sha256="c" * 64, size=1)


@pytest.mark.parametrize("prefix", ["../other-key/writer", "/etc", "writer/../..", "a//b", "a\\b"])
def test_manifest_refuses_a_files_prefix_outside_the_artifact(prefix: str) -> None:
    # The S3 store reads the files under the manifest's files_prefix: a manifest naming a folder
    # outside its artifact (another key's, the bucket's root) would have the server load files no
    # one verified for this cache key.
    with pytest.raises(ValidationError, match="relative and normalized"):
        _manifest(files_prefix=prefix)
    assert _manifest(files_prefix="writer-1a2b").files_prefix == "writer-1a2b"
    assert _manifest().files_prefix == ""  # a directory store's manifest, or one written before it


def test_manifest_requires_a_file_per_bucket() -> None:
    with pytest.raises(ValidationError, match=r"model-b4-s128\.pt"):
        _manifest(files=[FileEntry(path="model-b1-s32.pt", sha256="c" * 64, size=1)])


def test_verify_files_names_every_problem() -> None:
    manifest = _manifest()
    problems = verify_files(manifest, {"model-b1-s32.pt": "d" * 64, "extra.bin": "e" * 64})
    assert problems == [
        f"model-b1-s32.pt: sha256 {'d' * 64} does not match the manifest's {'c' * 64}",
        "model-b4-s128.pt: missing",
        "extra.bin: not listed in the manifest",
    ]


def test_store_layout_helpers() -> None:
    key = "0123456789abcdef" * 4
    assert artifact_uri("s3://bucket/prefix/", key) == f"s3://bucket/prefix/{key}"
    assert revision(key) == "0123456789"
    assert split_s3_uri("s3://bucket/a/b/") == ("bucket", "a/b")
    with pytest.raises(ValueError, match="not an s3"):
        split_s3_uri("/tmp/x")


def test_neuronx_cc_args_follow_the_flags() -> None:
    flags = CompilerFlags(auto_cast="all", auto_cast_type="fp16", opt_level=3, extra_args=["--x"])
    assert flags.neuronx_cc_args() == [
        "--target",
        "inf2",
        "--auto-cast",
        "all",
        "--auto-cast-type",
        "fp16",
        "-O3",
        "--x",
    ]
