"""Which served pods the sandbox's Prometheus scrapes, as the chart's PodMonitor selects them: a
deployment's pods in a scraped role (active, warm, draining), not a placeholder nor a pod without
the deployment label, though each runs a listening server. The servers are real processes named
``neuronserve`` (``fake_servers.DRAINING_SERVER``)."""

from __future__ import annotations

from pathlib import Path

from fake_servers import draining_neuronserve, served_pod, serving_sandbox

from neuronfleet.sandbox.prometheus import LABEL_DEPLOYMENT, LABEL_ROLE, pod_targets


async def test_only_a_deployments_pods_in_a_scraped_role_are_targets(tmp_path: Path) -> None:
    binary = draining_neuronserve(tmp_path)
    pods = {
        "active": {LABEL_DEPLOYMENT: "bert", LABEL_ROLE: "active"},
        "placeholder": {LABEL_DEPLOYMENT: "bert", LABEL_ROLE: "placeholder"},
        "unlabelled": {LABEL_ROLE: "active"},
    }
    async with serving_sandbox(tmp_path, nodes=2) as cluster:
        for name, labels in pods.items():
            cluster.create("pods", served_pod(name, binary, labels), "default")
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
