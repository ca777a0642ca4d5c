"""helm 4 (from hack/install-kube-tools.sh) installs and uninstalls the chart on the sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fixtures_cluster import create_namespaces
from neuronfleet.sandbox import SandboxCluster, ThreadedSandboxCluster


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

    def installed(cluster: SandboxCluster) -> dict[str, list[str]]:
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


def test_helm_upgrade_and_reinstall_keep_the_peering_object(
    helm: str, repo_root: Path, cluster_without_peering: ThreadedSandboxCluster, tmp_path: Path
) -> None:
    """The replicas' keep-alives live in the peering object's status: a new object (empty status)
    lets a standby act beside the leader until the leader's next keep-alive. Upgrades and a
    reinstall keep the first object, status and all; an upgrade that adds a watched namespace
    creates that namespace's object."""
    cluster = cluster_without_peering
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig_path), "HOME": str(tmp_path)}
    chart = str(repo_root / "charts" / "neuronfleet")

    def run(*args: str) -> str:
        result = subprocess.run([helm, *args], env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}"
        return result.stdout

    def peering(plural: str, namespace: str | None = None) -> dict[str, Any] | None:
        return cluster.call(lambda c: c.get(plural, "neuronfleet", namespace, group="kopf.dev"))

    def keep_alive(plural: str, namespace: str | None = None) -> None:
        """What a leader's Kopf writes into the object's status."""

        def write(c: SandboxCluster) -> None:
            status = {"status": {"leader-pod": {"priority": 7, "lifetime": 60, "lastseen": "2030-01-01T00:00:00"}}}
            c.store.update(c.store.resource("kopf.dev", plural), namespace, "neuronfleet", lambda o: o.update(status))

        cluster.call(write)

    store = "operator.artifactStore=s3://neuronfleet-test/compiled/"
    installed = run("install", "nf", chart, "--namespace", "default", "--set", store)
    first = peering("clusterkopfpeerings")
    assert first is not None
    keep_alive("clusterkopfpeerings")
    # Helm never upgrades the CRDs of crds/: an upgrade's NOTES say how (install-eks's Upgrade).
    crds = "kubectl apply --server-side --force-conflicts -f charts/neuronfleet/crds/"
    assert crds not in installed
    assert crds in run("upgrade", "nf", chart, "--namespace", "default", "--set", store)
    for step in (
        ("upgrade", "nf", chart, "--namespace", "default", "--set", store),
        ("upgrade", "nf", chart, "--namespace", "default", "--set", store, "--set", "replicaCount=3"),
        ("uninstall", "nf", "--namespace", "default"),
        ("install", "nf", chart, "--namespace", "default", "--set", store),
    ):
        run(*step)
        now = peering("clusterkopfpeerings")
        assert now is not None, f"helm {step[0]} removed the peering object"
        assert now["metadata"]["uid"] == first["metadata"]["uid"], f"helm {step[0]} recreated the peering object"
        assert "leader-pod" in now.get("status", {}), f"helm {step[0]} lost the keep-alives"

    # Namespaced: one KopfPeering per watched namespace; an upgrade adding one creates only that one.
    create_namespaces(cluster, "team-a", "team-b")
    run("uninstall", "nf", "--namespace", "default")
    namespaced = ["--set", store, "--set", "operator.watchNamespaces={team-a}"]
    run("install", "nf", chart, "--namespace", "default", *namespaced)
    team_a = peering("kopfpeerings", "team-a")
    assert team_a is not None and peering("kopfpeerings", "team-b") is None
    keep_alive("kopfpeerings", "team-a")
    namespaced[-1] = "operator.watchNamespaces={team-a,team-b}"
    run("upgrade", "nf", chart, "--namespace", "default", *namespaced)
    assert peering("kopfpeerings", "team-b") is not None
    kept = peering("kopfpeerings", "team-a")
    assert kept is not None and kept["metadata"]["uid"] == team_a["metadata"]["uid"]
    assert "leader-pod" in kept.get("status", {})


def test_a_priority_class_value_changes_only_through_a_deleted_class(
    helm: str, repo_root: Path, cluster_without_peering: ThreadedSandboxCluster, tmp_path: Path
) -> None:
    """The API server refuses to change a PriorityClass's value: an upgrade changing
    priorityClasses.servingValue fails before applying anything, saying how (delete the class
    first); after the delete the same upgrade creates the class with the new value."""
    cluster = cluster_without_peering
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig_path), "HOME": str(tmp_path)}
    chart = str(repo_root / "charts" / "neuronfleet")

    def helm_run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([helm, *args], env=env, capture_output=True, text=True, timeout=120)

    def value(name: str) -> int:
        stored = cluster.call(lambda c: c.get("priorityclasses", name, group="scheduling.k8s.io"))
        assert stored is not None, f"no PriorityClass {name}"
        return int(stored["value"])

    store = ["--set", "operator.artifactStore=s3://neuronfleet-test/compiled/"]
    assert helm_run("install", "nf", chart, "--namespace", "default", *store).returncode == 0
    refused = helm_run(
        "upgrade", "nf", chart, "--namespace", "default", *store, "--set", "priorityClasses.servingValue=100000"
    )
    assert refused.returncode != 0
    assert (
        "priorityClasses.servingValue is 100000 but PriorityClass neuronfleet-active exists with value 1000: the API "
        "server refuses to change a PriorityClass's value. Keep 1000, or delete the class first (kubectl delete "
        "priorityclass neuronfleet-active neuronfleet-warm)"
    ) in refused.stderr
    assert (value("neuronfleet-active"), value("neuronfleet-warm")) == (1000, 1000)
    history = helm_run("history", "nf", "--namespace", "default", "--output", "json")
    assert [entry["status"] for entry in json.loads(history.stdout)] == ["deployed"]  # nothing applied
    placeholder = helm_run(
        "upgrade", "nf", chart, "--namespace", "default", *store, "--set", "priorityClasses.placeholderValue=-5"
    )
    assert "kubectl delete priorityclass neuronfleet-placeholder)" in placeholder.stderr

    def delete_classes(c: SandboxCluster) -> None:
        for name in ("neuronfleet-active", "neuronfleet-warm"):
            c.delete("priorityclasses", name, group="scheduling.k8s.io")

    cluster.call(delete_classes)
    upgraded = helm_run(
        "upgrade", "nf", chart, "--namespace", "default", *store, "--set", "priorityClasses.servingValue=100000"
    )
    assert upgraded.returncode == 0, upgraded.stderr
    assert (value("neuronfleet-active"), value("neuronfleet-warm"), value("neuronfleet-placeholder")) == (
        100000,
        100000,
        -1,
    )


def test_a_reinstall_under_another_name_and_namespace_uses_the_kept_peering_crds(
    helm: str, repo_root: Path, cluster_without_peering: ThreadedSandboxCluster, tmp_path: Path
) -> None:
    """The kopf.dev CRDs outlive ``helm uninstall`` with the old release's ownership: a release of
    another name and namespace uses them instead of trying (and failing) to adopt them."""
    cluster = cluster_without_peering
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig_path), "HOME": str(tmp_path)}
    chart = str(repo_root / "charts" / "neuronfleet")
    store = ["--set", "operator.artifactStore=s3://neuronfleet-test/compiled/"]

    def helm_run(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([helm, *args], env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}"
        return result

    def stored_crd(name: str) -> dict[str, Any] | None:
        return cluster.call(lambda c: c.get("customresourcedefinitions", name, group="apiextensions.k8s.io"))

    def owners() -> dict[str, tuple[str, str]]:
        found = {}
        for name in ("clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"):
            crd = stored_crd(name)
            assert crd is not None, f"{name} is gone"
            notes = crd["metadata"].get("annotations") or {}
            found[name] = (notes.get("meta.helm.sh/release-name", ""), notes.get("meta.helm.sh/release-namespace", ""))
        return found

    helm_run("install", "neuronfleet", chart, "--namespace", "default", *store)
    helm_run("uninstall", "neuronfleet", "--namespace", "default")
    assert set(owners().values()) == {("neuronfleet", "default")}  # kept, with the old release's ownership

    helm_run("install", "nf", chart, "--namespace", "ml-platform", "--create-namespace", *store)
    assert cluster.call(lambda c: c.get("deployments", "nf-neuronfleet", "ml-platform", group="apps")) is not None
    assert cluster.call(lambda c: c.get("clusterkopfpeerings", "neuronfleet", group="kopf.dev")) is not None
    helm_run("upgrade", "nf", chart, "--namespace", "ml-platform", *store)
    # Left as they were: the new release neither took them nor changed their owner.
    assert set(owners().values()) == {("neuronfleet", "default")}
    manifest = helm_run("get", "manifest", "nf", "--namespace", "ml-platform").stdout
    assert "kind: CustomResourceDefinition" not in manifest
    # The release that owns them still renders them (an upgrade keeps them up to date).
    helm_run("uninstall", "nf", "--namespace", "ml-platform")
    helm_run("install", "neuronfleet", chart, "--namespace", "default", *store)
    assert "kopfpeerings.kopf.dev" in helm_run("get", "manifest", "neuronfleet", "--namespace", "default").stdout
