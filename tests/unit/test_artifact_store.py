"""The artifact store's S3 client: bounded, since each call holds a reconcile."""

from __future__ import annotations

import pytest

from neuronfleet.artifacts.store import ArtifactStore


def test_the_s3_client_gives_up_in_seconds_not_minutes(monkeypatch: pytest.MonkeyPatch) -> None:
    # boto3's defaults (60 s to connect, 60 s per read, 5 legacy attempts) held a reconcile about
    # five minutes per call against an endpoint that accepts connections and never answers.
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    config = ArtifactStore().s3.meta.config
    assert config.connect_timeout <= 5
    assert config.read_timeout <= 10
    assert config.retries["mode"] == "standard"
