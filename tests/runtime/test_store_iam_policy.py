"""The writer's IAM policy of docs/install-eks.md allows every S3 call a publish makes.

A real publish against moto, with a file big enough for boto3's ``upload_file`` to send it as a
multipart upload, once failing in the middle (the transfer then aborts the upload) and once
through. Each call is recorded as the client makes it, mapped to the IAM action that authorizes it
(AWS's table for S3), and checked against the policy in the guide: an action the policy lacks is
an AccessDenied on EKS. The guide's lifecycle rule aborting incomplete uploads is put to the bucket.
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from neuronserve import store as store_mod
from neuronserve.manifest import Bucket, CompilerFlags, FileEntry, Manifest, TensorSignature
from neuronserve.store import Store, StoreError
from runtime_support import BUCKET, S3Server

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "install-eks.md"
#: The guide's store, s3://acme-neuron-artifacts/compiled/, is this test's bucket.
GUIDE_BUCKET = "acme-neuron-artifacts"
ROOT = f"s3://{BUCKET}/compiled/iam"
#: Above boto3's multipart threshold (8 MiB): sent in two parts.
BIG = 8 * 1024 * 1024 + 1

#: The IAM action each S3 operation needs (docs.aws.amazon.com/AmazonS3/latest/API, "Permissions").
ACTIONS = {
    "HeadObject": "s3:GetObject",
    "GetObject": "s3:GetObject",
    "PutObject": "s3:PutObject",
    "CreateMultipartUpload": "s3:PutObject",
    "UploadPart": "s3:PutObject",
    "CompleteMultipartUpload": "s3:PutObject",
    "AbortMultipartUpload": "s3:AbortMultipartUpload",
    "ListParts": "s3:ListMultipartUploadParts",
    "DeleteObject": "s3:DeleteObject",
    "DeleteObjects": "s3:DeleteObject",
    "ListObjectsV2": "s3:ListBucket",
    "ListObjects": "s3:ListBucket",
}


def writer_policy() -> dict[str, Any]:
    """The compile Jobs' writer policy of the guide, on this test's bucket."""
    text = GUIDE.read_text().split("The compile Jobs' writer role", 1)[1]
    block = re.search(r"```json\n(.*?)```", text, re.S)
    assert block is not None
    return dict(json.loads(block.group(1).replace(GUIDE_BUCKET, BUCKET)))


def allowed(policy: dict[str, Any], action: str, resource: str, prefix: str | None) -> bool:
    for statement in policy["Statement"]:
        if statement["Effect"] != "Allow" or action not in statement["Action"]:
            continue
        if not any(fnmatch.fnmatchcase(resource, pattern) for pattern in statement["Resource"]):
            continue
        wanted = (statement.get("Condition") or {}).get("StringLike", {}).get("s3:prefix")
        if wanted and not (prefix is not None and any(fnmatch.fnmatchcase(prefix, p) for p in wanted)):
            continue
        return True
    return False


def _artifact(directory: Path, name: str) -> Manifest:
    directory.mkdir(parents=True)
    bucket = Bucket(batch=1, sequence=8)
    path = directory / bucket.file_name
    path.write_bytes(name.encode() * BIG)
    signature = TensorSignature(name="input_ids", dtype="int64", shape=[-1, -1])
    manifest = Manifest(
        name=name,
        backend="cpu",
        buckets=[bucket],
        inputs=[signature],
        outputs=[signature],
        compiler="x",
        torch_version="x",
        flags=CompilerFlags(),
        source_digest="d" * 64,
        cache_key=name * 64,
        files=[FileEntry(path=bucket.file_name, sha256=store_mod.file_sha256(path), size=path.stat().st_size)],
    )
    (directory / "manifest.json").write_bytes(manifest.to_json_bytes())
    return manifest


def test_the_guides_writer_policy_allows_every_call_of_a_publish_multipart_aborts_included(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    fail_part: list[int] = [2]  # the first publish's second part fails

    def record(model: Any, params: dict[str, Any], **_: Any) -> None:
        calls.append((model.name, dict(params)))
        if model.name == "UploadPart" and params.get("PartNumber") in fail_part:
            raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"}}, "UploadPart")

    def recording_client() -> Any:
        client = boto3.client("s3")
        client.meta.events.register("before-parameter-build.s3", record)
        return client

    monkeypatch.setattr(store_mod, "s3_client", recording_client)
    with pytest.raises(StoreError, match="injected"):
        Store(ROOT).publish(tmp_path / "a", _artifact(tmp_path / "a", "a"))
    fail_part.clear()
    assert Store(ROOT).publish(tmp_path / "b", _artifact(tmp_path / "b", "b")).stored

    made = {name for name, _ in calls}
    assert {"CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "AbortMultipartUpload"} <= made
    assert made <= set(ACTIONS), made - set(ACTIONS)
    policy = writer_policy()
    denied = []
    for name, params in calls:
        action = ACTIONS[name]
        bucket = params["Bucket"]
        resource = f"arn:aws:s3:::{bucket}" if action == "s3:ListBucket" else f"arn:aws:s3:::{bucket}/{params['Key']}"
        if not allowed(policy, action, resource, params.get("Prefix")):
            denied.append(f"{name} ({action}) on {resource}")
    assert not denied, denied
    # Nothing of the aborted upload is left behind.
    assert not boto3.client("s3").list_multipart_uploads(Bucket=BUCKET, Prefix="compiled/iam/").get("Uploads")


def test_the_guides_lifecycle_rule_aborts_incomplete_uploads_on_the_store_prefix_only(s3_env: S3Server) -> None:
    command = GUIDE.read_text().split("aws s3api put-bucket-lifecycle-configuration", 1)[1].split("```", 1)[0]
    quoted = re.search(r"'(\{.*\})'", command, re.S)
    assert quoted is not None
    configuration = json.loads(quoted.group(1))
    (rule,) = configuration["Rules"]
    # Only the abort: no expiry or transition of stored objects (the guide keeps those off the prefix).
    assert set(rule) == {"ID", "Status", "Filter", "AbortIncompleteMultipartUpload"}
    assert rule["Filter"] == {"Prefix": "compiled/"}
    client = boto3.client("s3")
    client.put_bucket_lifecycle_configuration(Bucket=BUCKET, LifecycleConfiguration=configuration)
    try:
        (stored,) = client.get_bucket_lifecycle_configuration(Bucket=BUCKET)["Rules"]
        assert stored["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    finally:
        client.delete_bucket_lifecycle(Bucket=BUCKET)
