"""The install guide's helm commands, run as written against the sandbox.

The Alerts command (docs/install-eks.md, "Alerts (Prometheus Operator)") upgrades a release that
was installed from the chart as it was before the alerts existed (taken from git history), with the
values kept as section 2 says: it must turn the alerts on. With ``--reuse-values`` it did not (the
old release's values have no ``monitoring.alerts.latencySLO``: a nil pointer in the template).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from chart_support import CHART, REPO, helm_command, section, tool

from neuronfleet.sandbox.cluster import SandboxCluster, ThreadedSandboxCluster

GUIDE = REPO / "docs" / "install-eks.md"
#: The commit that added monitoring.alerts: the chart of its parent has none.
ALERTS_ADDED = "ec04d45c330eff492aa25d78a42f6677a585391e"
#: Schema-less stand-ins for the Prometheus Operator's CRDs, so that the sandbox serves the kinds.
MONITORING_KINDS = {"PodMonitor": "podmonitors", "PrometheusRule": "prometheusrules"}


def _chart_before_the_alerts(directory: Path) -> Path:
    git = shutil.which("git")
    if git is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    archive = subprocess.run(
        [git, "archive", f"{ALERTS_ADDED}^", "charts/neuronfleet"], cwd=REPO, capture_output=True, timeout=60
    )
    if archive.returncode != 0:
        pytest.skip(f"the chart before the alerts is not in this checkout's history (shallow?): {archive.stderr!r}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(directory, filter="data")
    return directory / "charts" / "neuronfleet"


def _monitoring_crd(kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


def test_the_alerts_command_upgrades_a_release_from_before_the_alerts(tmp_path: Path) -> None:
    old_chart = _chart_before_the_alerts(tmp_path / "old")
    alerts = helm_command(section(GUIDE.read_text(), "### Alerts (Prometheus Operator)"), "upgrade")
    assert "--reuse-values" not in alerts and "-f my-values.yaml" in alerts
    bin_dir = Path(tool("helm")).parent
    with ThreadedSandboxCluster(crd_dir=REPO / "crds") as cluster:

        def create_monitoring_crds(c: SandboxCluster) -> None:
            for kind, plural in MONITORING_KINDS.items():
                c.create("customresourcedefinitions", _monitoring_crd(kind, plural), group="apiextensions.k8s.io")

        cluster.call(create_monitoring_crds)
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "KUBECONFIG": str(cluster.kubeconfig_path),
            "HOME": str(tmp_path),
        }

        def sh(command: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
            )

        # Section 2's install (the values that chart knew), then its way of keeping the values.
        install = sh(
            f"helm install neuronfleet {old_chart} --namespace neuronfleet-system --create-namespace"
            " --set operator.artifactStore=s3://acme-neuron-artifacts/compiled/"
            " --set operator.prometheusUrl=http://prometheus-operated.monitoring.svc:9090"
            " --set monitoring.runtimePodMonitor.enabled=true"
            " --set monitoring.runtimePodMonitor.labels.release=prometheus"
        )
        assert install.returncode == 0, install.stderr
        kept = sh("helm get values neuronfleet -n neuronfleet-system -o yaml > my-values.yaml")
        assert kept.returncode == 0, kept.stderr

        upgraded = sh(alerts.replace("charts/neuronfleet", str(CHART)))
        assert upgraded.returncode == 0, upgraded.stderr

        def stored(plural: str, name: str) -> dict[str, Any] | None:
            return cluster.call(lambda c: c.get(plural, name, "neuronfleet-system", group="monitoring.coreos.com"))

        rule = stored("prometheusrules", "neuronfleet-alerts")
        assert rule is not None and rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        for monitor in ("neuronfleet-operator", "neuronfleet-runtime"):
            found = stored("podmonitors", monitor)
            assert found is not None and found["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        # The install's own values were kept.
        deployment = cluster.call(lambda c: c.get("deployments", "neuronfleet", "neuronfleet-system", group="apps"))
        assert deployment is not None
        env_vars = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env_vars["NEURONFLEET_PROMETHEUS_URL"] == "http://prometheus-operated.monitoring.svc:9090"
