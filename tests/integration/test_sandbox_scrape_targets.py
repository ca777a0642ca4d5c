"""Which served pods the sandbox's Prometheus scrapes, as the chart's PodMonitor selects them: a
deployment's pods in a scraped role (active, warm, draining), not a placeholder nor a pod without
the deployment label, though each runs a listening server. The servers are real processes named
``neuronserve`` (``fake_servers.DRAINING_SERVER``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fake_servers import DRAINING_SERVER

from neuronfleet.sandbox import ColdStartProfile, NodeGroup, SandboxCluster
from neuronfleet.sandbox.prometheus import LABEL_DEPLOYMENT, LABEL_ROLE, pod_targets
from neuronfleet.sandbox.serving import ServingOptions

FAST = ColdStartProfile(image_pull_s=0.0, container_start_s=0.0, readiness_s=0.0, shutdown_s=0.0, jitter=0.0)


def _serving_pod(name: str, binary: Path, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "tolerations": [{"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "server",
                    "image": "neuronserve:1",
                    "command": [str(binary)],
                    "args": ["serve"],
                    "resources": {"limits": {"aws.amazon.com/neuroncore": "1"}},
                    "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": 8080}},
                }
            ],
        },
    }


async def test_only_a_deployments_pods_in_a_scraped_role_are_targets(tmp_path: Path) -> None:
    binary = tmp_path / "bin" / "neuronserve"
    binary.parent.mkdir()
    binary.write_text(f"#!{sys.executable}\n{DRAINING_SERVER}")
    binary.chmod(0o755)
    serving = ServingOptions(device_args=(), starting_niceness=0, ready_timeout_s=30.0, probe_period_s=0.2)
    pods = {
        "active": {LABEL_DEPLOYMENT: "bert", LABEL_ROLE: "active"},
        "placeholder": {LABEL_DEPLOYMENT: "bert", LABEL_ROLE: "placeholder"},
        "unlabelled": {LABEL_ROLE: "active"},
    }
    async with SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=2)],
        cold_start=FAST,
        run_provisioner=False,
        serving=serving,
        workdir=tmp_path / "sandbox",
    ) as cluster:
        for name, labels in pods.items():
            cluster.create("pods", _serving_pod(name, binary, labels), "default")
        assert cluster.servers is not None
        servers = cluster.servers
        await cluster.wait_for(
            lambda: all(servers.endpoint(p["metadata"]["uid"]) for p in cluster.list("pods", "default")),
            timeout=30,
            what="every server listening",
        )
        (target,) = pod_targets(cluster.store, servers)
        assert (target.labels["pod"], target.labels["role"], target.labels["deployment"]) == (
            "active",
            "active",
            "bert",
        )
