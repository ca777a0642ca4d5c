"""Benchmark: one simulated hour of a 10-node sandbox cluster with pod churn, under looptime.

Pods (1, 2 or 4 NeuronCores; a fifth are low-priority placeholders) are created and deleted at
random around a steady state of ~30 pods, while an HTTP client watches all pods (resuming every
300 s like a client-go reflector); the
scheduler, kubelet (cold starts) and provisioner work throughout. Figures: simulated_s, wall_s,
nodes, pods_created (target: wall_s < 30). Writes bench/results/cluster.json.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import looptime

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import write_result
from neuronfleet.sandbox import ColdStartProfile, NodeGroup, SandboxCluster

SIMULATED_S = 3600.0
NODES = 10
SEED = 7
MEAN_CHANGE_INTERVAL_S = 3.0
TARGET_PODS = 30
TOLERATION = {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}


def pod_body(name: str, cores: int, priority_class: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "server",
                "image": f"neuronserve:{cores}",
                "resources": {"limits": {"aws.amazon.com/neuroncore": str(cores)}},
                "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": 8080}},
            }
        ],
        "tolerations": [TOLERATION],
        "terminationGracePeriodSeconds": 10,
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"metadata": {"name": name, "labels": {"app": "churn"}}, "spec": spec}


async def watch_pods(url: str, counts: dict[str, int]) -> None:
    """An HTTP watch client (as an operator runs one), resuming like a client-go reflector."""
    resource_version = ""
    # No client-side total timeout: the server ends each watch after timeoutSeconds.
    async with aiohttp.ClientSession(url, timeout=aiohttp.ClientTimeout(total=None)) as http:
        while True:
            query = f"watch=1&allowWatchBookmarks=true&timeoutSeconds=300&resourceVersion={resource_version}"
            async with http.get(f"/api/v1/pods?{query}") as response:
                async for line in response.content:
                    event = json.loads(line)
                    counts["events"] += 1
                    resource_version = event["object"]["metadata"].get("resourceVersion", resource_version)


async def churn() -> dict[str, Any]:
    groups = [
        NodeGroup("small", "inf2.xlarge", count=6, zones=("us-east-1a", "us-east-1b"), min_nodes=6, max_nodes=10),
        NodeGroup("large", "inf2.24xlarge", count=4, zones=("us-east-1a", "us-east-1b"), min_nodes=4, max_nodes=6),
    ]
    profile = ColdStartProfile(image_pull_s=25, container_start_s=2, readiness_s=40, shutdown_s=3)
    rng = random.Random(SEED)
    created = 0
    async with SandboxCluster(
        node_groups=groups, cold_start=profile, seed=SEED, provisioning_delay_s=60, consolidation_delay_s=120
    ) as cluster:
        cluster.create(
            "priorityclasses", {"metadata": {"name": "placeholder"}, "value": -10}, group="scheduling.k8s.io"
        )
        watch_counts = {"events": 0}
        watcher = asyncio.create_task(watch_pods(cluster.url, watch_counts))
        start = cluster.clock.monotonic()
        live: list[str] = []
        max_nodes = 0
        while cluster.clock.monotonic() - start < SIMULATED_S:
            await asyncio.sleep(rng.expovariate(1 / MEAN_CHANGE_INTERVAL_S))
            # Deletions grow likelier as the fleet grows: it hovers around TARGET_PODS.
            if live and rng.random() < len(live) / (2 * TARGET_PODS):
                name = live.pop(rng.randrange(len(live)))
                if cluster.get("pods", name, "default") is not None:
                    cluster.delete("pods", name, "default")
            else:
                name = f"churn-{created}"
                cluster.create(
                    "pods",
                    pod_body(name, rng.choice([1, 2, 2, 4]), "placeholder" if rng.random() < 0.2 else None),
                    "default",
                )
                live.append(name)
                created += 1
            max_nodes = max(max_nodes, len(cluster.list("nodes")))
        simulated = cluster.clock.monotonic() - start
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        pods = cluster.list("pods", "default")
        running = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
        scheduler, kubelet, provisioner = cluster.scheduler, cluster.kubelet, cluster.provisioner
        assert scheduler is not None and kubelet is not None and provisioner is not None
        return {
            "simulated_s": round(simulated, 1),
            "nodes": NODES,
            "max_nodes": max_nodes,
            "pods_created": created,
            "pods_running_at_end": running,
            "bindings": scheduler.bindings,
            "preemptions": scheduler.preemptions,
            "pods_started": kubelet.pods_started,
            "nodes_launched": provisioner.nodes_launched,
            "nodes_removed": provisioner.nodes_removed,
            "resource_version": cluster.store.rv,
            "watch_events_received": watch_counts["events"],
            "requests_served": len(cluster.request_log),
        }


def main() -> None:
    loop = looptime.new_event_loop()
    wall_start = time.perf_counter()
    try:
        figures = loop.run_until_complete(churn())
    finally:
        loop.close()
    wall = time.perf_counter() - wall_start
    figures = {"simulated_s": figures.pop("simulated_s"), "wall_s": round(wall, 2), **figures}
    path = write_result(
        "cluster",
        {
            "simulated_s": SIMULATED_S,
            "initial_nodes": NODES,
            "seed": SEED,
            "mean_change_interval_s": MEAN_CHANGE_INTERVAL_S,
            "target_pods": TARGET_PODS,
        },
        figures,
    )
    print(f"{path}: {figures}")


if __name__ == "__main__":
    main()
