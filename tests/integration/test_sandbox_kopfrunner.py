"""kopf.testing.KopfRunner (the operator in its own thread) against the threaded sandbox."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from kopf.testing import KopfRunner

from neuronfleet.sandbox import ThreadedSandboxCluster

OPERATOR = """
import kopf

@kopf.on.login()
def login(**_):
    return kopf.ConnectionInfo(server={url!r}, insecure=True)

@kopf.on.create("serving.neuronfleet.dev", "v1alpha1", "inferencedeployments")
def created(patch, **_):
    patch.status["observedGeneration"] = 1
"""


def test_kopf_runner_against_the_threaded_cluster(
    threaded_sandbox_cluster: ThreadedSandboxCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `kopf run FILE` puts the file's folder on sys.path for good: named operator.py it shadowed the
    # standard library's operator module in every later child process given this sys.path.
    monkeypatch.setattr(sys, "path", list(sys.path))
    operator = tmp_path / "sandbox_handlers.py"
    operator.write_text(OPERATOR.format(url=threaded_sandbox_cluster.url))
    body = {"metadata": {"name": "bert"}, "spec": {"model": {"source": "s3://acme-models/bert/"}}}
    group = "serving.neuronfleet.dev"
    with KopfRunner(["run", "--standalone", "--namespace=default", str(operator)], timeout=60) as runner:
        threaded_sandbox_cluster.call(lambda c: c.create("inferencedeployments", body, "default", group=group))

        def handled() -> bool:
            obj = threaded_sandbox_cluster.call(lambda c: c.get("inferencedeployments", "bert", "default", group=group))
            return bool(obj and (obj.get("status") or {}).get("observedGeneration") == 1)

        deadline = time.monotonic() + 30
        while not handled():
            assert time.monotonic() < deadline, "Kopf did not handle the object in 30 s"
            time.sleep(0.05)  # polling a condition, with the deadline above
    assert runner.exit_code == 0
    assert runner.exception is None
    assert "Handler 'created' succeeded" in runner.output
