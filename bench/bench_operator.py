"""Benchmark: N InferenceDeployments converging on the sandbox, then idle, driven by a real operator process.

The sandbox (API server, scheduler, kubelet) runs in this process; the operator runs as its own
``neuronfleet run`` process against it, so its CPU seconds and peak RSS are its own (read from
/proc). Two phases, in real time (the operator is another process, so no looptime):

1. converge: from the first create until every deployment reports Ready and has its Service and PDB;
2. steady state: ``--steady`` seconds more with nothing changing. The operator keeps reconciling
   every deployment each ``--interval``; its CPU over the window, per deployment per reconcile
   cycle, is the cost of watching a fleet (goal <= 0.1 s), and the API writes it makes (status
   patches, Events, pods: the server's request log) per idle deployment per hour should be 0.

Writes bench/results/operator.json: figures ``resources``, ``converge_wall_s``, ``operator_cpu_s``
(convergence), ``operator_peak_rss_mb`` (whole run), ``steady_cpu_s_per_deployment_cycle``,
``steady_reconcile_cycles``, ``idle_writes_per_deployment_hour``, ``steady_requests_per_deployment_cycle``,
``reconcile_failures_converging`` and ``_steady`` (reconciles that raised, from the operator's log),
plus ``requests`` (API calls during convergence) and ``pods``.
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

from _common import process_cpu_seconds, write_result
from neuronfleet.api.v1alpha1 import GROUP, PLURAL, InferenceDeployment
from neuronfleet.kube.builders import build_priority_classes
from neuronfleet.planning.status import find_condition
from neuronfleet.reconcile import OperatorSettings
from neuronfleet.sandbox import ColdStartProfile, NodeGroup, SandboxCluster
from neuronfleet.sandbox.artifacts import record_uncompiled_artifact

REPO = Path(__file__).resolve().parent.parent


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


WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _print_failure_reasons(operator_log: Path) -> None:
    """Why reconciles failed, most common first (the figures count them; this says what they were)."""
    reasons: dict[str, int] = {}
    for line in operator_log.read_text(errors="replace").splitlines():
        if "reconcile of " in line and " failed (" in line:
            reason = line.split(" in a row): ", 1)[-1][:160]
            reasons[reason] = reasons.get(reason, 0) + 1
    for reason, times in sorted(reasons.items(), key=lambda item: -item[1])[:8]:
        print(f"reconcile failed {times}x: {reason}", file=sys.stderr)


def _reconcile_failures(operator_log: Path) -> int:
    """Reconciles that raised (a timeout, a refused call) so far, from the operator's log; each is
    retried after a backoff, so they slow convergence."""
    text = operator_log.read_text(errors="replace")
    return sum(1 for line in text.splitlines() if "reconcile of " in line and " failed (" in line)


def _requests_since(log: Any, marker: Any) -> list[Any]:
    """The request records appended after ``marker`` (the log is a bounded deque)."""
    records = list(log)
    for index in range(len(records) - 1, -1, -1):
        if records[index] is marker:
            return records[index + 1 :]
    return records


async def run(count: int, timeout: float, interval: float, steady: float, concurrency: int) -> dict[str, Any]:
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
        operator_log = work / "operator.log"
        operator = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "neuronfleet.cli", "run", "--kubeconfig", str(cluster.kubeconfig_path),
            "--artifact-store", str(store), "--interval", str(interval),
            "--max-concurrent-reconciles", str(concurrency),
            env=env, stdout=asyncio.subprocess.DEVNULL, stderr=operator_log.open("wb"),
        )  # fmt: skip
        try:
            requests_before = len(cluster.request_log)
            started = time.perf_counter()
            cpu_before = process_cpu_seconds(operator.pid)
            resource = store_api.resource(GROUP, PLURAL)
            for manifest in manifests:
                store_api.create(resource, "bench", manifest)

            def all_ready() -> bool:
                # Converged: every deployment Ready, and the Service and PDB the operator keeps for
                # each one exist (they are created after the pods, so Ready can come first).
                if operator.returncode is not None:
                    raise RuntimeError(f"the operator exited ({operator.returncode}); see {operator_log}")
                items = cluster.list(PLURAL, "bench", group=GROUP)
                ready = len(items) == count and all(
                    any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in (i.get("status") or {}).get("conditions", [])
                    )
                    for i in items
                )
                return (
                    ready
                    and len(cluster.list("services", "bench")) == count
                    and len(cluster.list("poddisruptionbudgets", "bench", group="policy")) == count
                )

            async def progress() -> None:
                while True:
                    await asyncio.sleep(30)
                    items = cluster.list(PLURAL, "bench", group=GROUP)
                    done = sum(1 for i in items if find_condition(i, "Ready").get("status") == "True")
                    print(f"{time.perf_counter() - started:.0f}s: {done}/{count} Ready", file=sys.stderr, flush=True)

            reporter = asyncio.create_task(progress())
            try:
                await cluster.wait_for(all_ready, timeout=timeout, what=f"{count} deployments Ready")
            finally:
                reporter.cancel()
            wall = time.perf_counter() - started
            failures_converging = _reconcile_failures(operator_log)
            cpu = process_cpu_seconds(operator.pid) - cpu_before
            rss = _proc_peak_rss_mb(operator.pid)
            pods = len(cluster.list("pods", "bench"))
            requests = len(cluster.request_log) - requests_before

            # Steady state: let the last pod events and status writes of convergence pass, then measure.
            await asyncio.sleep(2 * interval)
            marker = cluster.request_log[-1]
            steady_cpu_before, steady_started = process_cpu_seconds(operator.pid), time.perf_counter()
            await asyncio.sleep(steady)
            steady_cpu = process_cpu_seconds(operator.pid) - steady_cpu_before
            steady_wall = time.perf_counter() - steady_started
            window = _requests_since(cluster.request_log, marker)
            writes = [r for r in window if r.method in WRITE_METHODS]
            failures_steady = _reconcile_failures(operator_log) - failures_converging
            _print_failure_reasons(operator_log)
            rss = _proc_peak_rss_mb(operator.pid)
        finally:
            operator.terminate()
            try:
                await asyncio.wait_for(operator.wait(), timeout=30)
            except TimeoutError:
                operator.kill()
    cycles = steady_wall / interval
    by_resource: dict[str, int] = {}
    for record in writes:
        key = f"{record.method} {record.resource}{'/' + record.subresource if record.subresource else ''} {record.code}"
        by_resource[key] = by_resource.get(key, 0) + 1
    return {
        "resources": count,
        "converge_wall_s": round(wall, 2),
        "operator_cpu_s": round(cpu, 2),
        "operator_peak_rss_mb": round(rss, 1),
        "steady_window_s": round(steady_wall, 1),
        "steady_reconcile_cycles": round(cycles, 2),
        "steady_operator_cpu_s": round(steady_cpu, 2),
        "steady_cpu_s_per_deployment_cycle": round(steady_cpu / (count * cycles), 5),
        "steady_requests_per_deployment_cycle": round(len(window) / (count * cycles), 2),
        "idle_writes": len(writes),
        "idle_writes_by_kind": json.dumps(by_resource, sort_keys=True),
        "idle_writes_per_deployment_hour": round(len(writes) / count / (steady_wall / 3600), 3),
        "reconcile_failures_converging": failures_converging,
        "reconcile_failures_steady": failures_steady,
        "pods": pods,
        "requests": requests,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="InferenceDeployments to create (goals: at 1,000)")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds")
    parser.add_argument("--interval", type=float, default=10.0, help="the operator's reconcile interval (seconds)")
    parser.add_argument(
        "--max-concurrent-reconciles",
        type=int,
        default=OperatorSettings.max_concurrent_reconciles,
        help="the operator's bound on reconciles at once (default: the operator's)",
    )
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of steady state measured")
    args = parser.parse_args()
    figures = asyncio.run(run(args.count, args.timeout, args.interval, args.steady, args.max_concurrent_reconciles))
    params = {
        "count": args.count,
        "replicas_each": 1,
        "instance_type": "inf2.xlarge",
        "interval_s": args.interval,
        "max_concurrent_reconciles": args.max_concurrent_reconciles,
        "steady_s": args.steady,
    }
    path = write_result("operator", params, figures)
    print(json.dumps(figures, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
