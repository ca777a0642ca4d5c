"""helm 4 (from hack/install-kube-tools.sh) installs and uninstalls the chart on the sandbox."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuronfleet.sandbox import ThreadedSandboxCluster


@pytest.fixture
def helm(repo_root: Path) -> str:
    for candidate in (Path(sys.prefix) / "bin" / "helm", repo_root / ".venv" / "bin" / "helm"):
        if candidate.is_file():
            return str(candidate)
    pytest.skip("no helm: run hack/install-kube-tools.sh")


@pytest.fixture
def cluster_without_peering(repo_root: Path) -> Iterator[ThreadedSandboxCluster]:
    # The chart installs Kopf's peering CRDs itself.
    with ThreadedSandboxCluster(crd_dir=repo_root / "crds") as cluster:
        yield cluster


def test_helm_install_and_uninstall(
    helm: str, repo_root: Path, cluster_without_peering: ThreadedSandboxCluster, tmp_path: Path
) -> None:
    if not (repo_root / "charts" / "neuronfleet" / "Chart.yaml").is_file():
        pytest.skip("no chart at charts/neuronfleet")
    threaded_sandbox_cluster = cluster_without_peering
    env = {**os.environ, "KUBECONFIG": str(threaded_sandbox_cluster.kubeconfig_path), "HOME": str(tmp_path)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([helm, *args], env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}"
        return result

    # The one value the chart requires.
    store = "operator.artifactStore=s3://neuronfleet-test/compiled/"
    run("install", "nf", str(repo_root / "charts" / "neuronfleet"), "--namespace", "default", "--set", store)

    def installed(cluster):  # type: ignore[no-untyped-def]
        return {
            "deployments": [d["metadata"]["name"] for d in cluster.list("deployments", "default", group="apps")],
            "priorityclasses": sorted(
                p["metadata"]["name"] for p in cluster.list("priorityclasses", group="scheduling.k8s.io")
            ),
            "release_secrets": [
                s["metadata"]["name"]
                for s in cluster.list("secrets", "default")
                if s.get("type") == "helm.sh/release.v1"
            ],
        }

    state = threaded_sandbox_cluster.call(installed)
    assert state["deployments"] == ["nf-neuronfleet"]
    assert state["priorityclasses"]
    assert state["release_secrets"] == ["sh.helm.release.v1.nf.v1"]
    assert "nf" in run("list").stdout

    run("uninstall", "nf", "--namespace", "default")
    state = threaded_sandbox_cluster.call(installed)
    assert state["deployments"] == []
    assert state["release_secrets"] == []
