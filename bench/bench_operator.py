"""Benchmark: N InferenceDeployments converging on the sandbox, driven by a real operator process.

The sandbox (API server, scheduler, kubelet) runs in this process; the operator runs as its own
``neuronfleet run`` process against it, so its CPU seconds and peak RSS are its own (read from
/proc). Wall time runs from the first create until every deployment reports Ready. Real time, not
looptime: the operator is another process.

Writes bench/results/operator.json: figures ``resources``, ``converge_wall_s``, ``operator_cpu_s``,
``operator_peak_rss_mb``, plus ``requests`` (API calls the server answered) and ``pods``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import write_result
from neuronfleet.api.v1alpha1 import GROUP, PLURAL, InferenceDeployment
from neuronfleet.kube.builders import build_priority_classes
from neuronfleet.sandbox import ColdStartProfile, NodeGroup, SandboxCluster
from neuronfleet.sandbox.artifacts import record_uncompiled_artifact

REPO = Path(__file__).resolve().parent.parent


def _proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def _proc_peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _manifest(index: int, model_dir: Path, store: Path) -> dict[str, Any]:
    return {
        "apiVersion": "serving.neuronfleet.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": f"model-{index:03d}", "namespace": "bench"},
        "spec": {
            "model": {"source": str(model_dir), "neuronCoresPerReplica": 1},
            "compile": {"artifactStore": str(store)},
            "placement": {"instanceTypes": ["inf2.xlarge"]},
            "scaling": {"mode": "Manual", "replicas": 1, "minReplicas": 0},
        },
    }


def _record(manifest: dict[str, Any], store: Path) -> None:
    """Pre-record the artifact (every manifest shares one compile request): no compile is benchmarked."""
    record_uncompiled_artifact(InferenceDeployment.model_validate(manifest).spec, store, "bench")


async def run(count: int, timeout: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-operator-"))
    model_dir, store = work / "model", work / "artifacts"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    nodes = count // 2 + 2
    group = NodeGroup("inf2-bench", "inf2.xlarge", count=nodes, zones=("us-east-1a", "us-east-1b"), max_nodes=nodes)
    fast = ColdStartProfile(image_pull_s=1.0, container_start_s=0.2, readiness_s=1.0, shutdown_s=0.2, jitter=0.2)
    async with SandboxCluster(node_groups=[group], crd_dir=REPO / "crds", cold_start=fast) as cluster:
        store_api = cluster.store
        for priority_class in build_priority_classes():
            store_api.create(store_api.resource("scheduling.k8s.io", "priorityclasses"), None, priority_class)
        store_api.create(store_api.resource("", "namespaces"), None, {"metadata": {"name": "bench"}})
        manifests = [_manifest(i, model_dir, store) for i in range(count)]
        _record(manifests[0], store)
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig_path)}
        operator = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "neuronfleet.cli", "run", "--kubeconfig", str(cluster.kubeconfig_path),
            "--artifact-store", str(store), "--interval", "10",
            env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            requests_before = len(cluster.request_log)
            started = time.perf_counter()
            cpu_before = _proc_cpu_seconds(operator.pid)
            resource = store_api.resource(GROUP, PLURAL)
            for manifest in manifests:
                store_api.create(resource, "bench", manifest)

            def all_ready() -> bool:
                items = cluster.list(PLURAL, "bench", group=GROUP)
                return len(items) == count and all(
                    any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in (i.get("status") or {}).get("conditions", [])
                    )
                    for i in items
                )

            await cluster.wait_for(all_ready, timeout=timeout, what=f"{count} deployments Ready")
            wall = time.perf_counter() - started
            cpu = _proc_cpu_seconds(operator.pid) - cpu_before
            rss = _proc_peak_rss_mb(operator.pid)
            pods = len(cluster.list("pods", "bench"))
            requests = len(cluster.request_log) - requests_before
        finally:
            operator.terminate()
            try:
                await asyncio.wait_for(operator.wait(), timeout=30)
            except TimeoutError:
                operator.kill()
    return {
        "resources": count,
        "converge_wall_s": round(wall, 2),
        "operator_cpu_s": round(cpu, 2),
        "operator_peak_rss_mb": round(rss, 1),
        "pods": pods,
        "requests": requests,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="InferenceDeployments to create")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    args = parser.parse_args()
    figures = asyncio.run(run(args.count, args.timeout))
    path = write_result("operator", {"count": args.count, "replicas_each": 1, "instance_type": "inf2.xlarge"}, figures)
    print(json.dumps(figures, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
