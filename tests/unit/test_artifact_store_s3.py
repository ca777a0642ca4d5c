"""The operator's reads of S3 (a moto server, through boto3): a source's fingerprint covers what
the compile Job downloads and nothing else, a missing store bucket is a store problem, and S3
saying "not now" is not a source problem."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto.server import ThreadedMotoServer

from neuronfleet.api.v1alpha1 import InferenceDeploymentSpec
from neuronfleet.artifacts.store import ArtifactStore, SourceUnreadable, StoreUnavailable
from neuronfleet.planning.compile import compile_request

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
