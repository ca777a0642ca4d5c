"""`neuronfleet run` says when it may not list its pods in a namespace it watches (review r12).

Kopf starts no handler until its index of the operator's pods (``handlers.pods_on_nodes``) has listed
them in every watched namespace: a hand-made role refusing that list in one namespace held up every
InferenceDeployment, in every namespace, with no status, no Event and nothing in the log but Kopf's
retries. ``run`` checks at start-up with the operator's own client and logs an error naming the
namespace and the fix, until the list is allowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from neuronfleet import run_command
from neuronfleet.kube.client import KubeClient
from neuronfleet.run_command import refused_pod_reads, watch_pod_reads
from neuronfleet.sandbox import SandboxCluster, ThreadedSandboxCluster

REPO = Path(__file__).resolve().parents[2]
POD_LIST = ("", "pods", "list")


async def test_a_refused_pod_list_is_named_cluster_wide_and_per_namespace() -> None:
    async with SandboxCluster() as cluster:
        kube = await KubeClient.connect(cluster.kubeconfig_path)
        try:
            assert await refused_pod_reads(kube) == []
            assert await refused_pod_reads(kube, ["team-a", "ml-*"]) == []
            cluster.apiserver.denied.add(POD_LIST)
            (cluster_wide,) = await refused_pod_reads(kube)
            assert cluster_wide.startswith("the operator may not list pods across the cluster (Forbidden)")
            assert "Kopf reconciles nothing, in any namespace, until it can" in cluster_wide
            # A pattern is not checked; each namespace named is.
            refused = await refused_pod_reads(kube, ["team-a", "team-b", "ml-*"])
            assert [r.split(" (")[0] for r in refused] == [
                "the operator may not list pods in namespace team-a",
                "the operator may not list pods in namespace team-b",
            ]
        finally:
            await kube.close()


async def test_the_watch_logs_an_error_until_the_list_is_allowed(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="neuronfleet.run_command")
    checks, checked_thrice = [0], asyncio.Event()

    async def counted(kube: KubeClient, namespaces: list[str]) -> list[str]:
        refused = await refused_pod_reads(kube, namespaces)
        checks[0] += 1
        if checks[0] >= 3:
            checked_thrice.set()
        return refused

    monkeypatch.setattr(run_command, "refused_pod_reads", counted)
    async with SandboxCluster() as cluster:
        cluster.apiserver.denied.add(POD_LIST)
        kube = await KubeClient.connect(cluster.kubeconfig_path)
        try:
            watch = asyncio.create_task(watch_pod_reads(kube, ["team-a"], recheck_seconds=0.05))
            await asyncio.wait_for(checked_thrice.wait(), 10)  # refused three times: said once
            assert not watch.done()
            cluster.apiserver.denied.discard(POD_LIST)
            await asyncio.wait_for(watch, 10)
        finally:
            await kube.close()
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in messages] == ["ERROR", "INFO"], messages  # said once, then its end
    assert "may not list pods in namespace team-a" in messages[0][1]


def test_neuronfleet_run_names_a_namespace_where_it_may_not_list_pods(tmp_path: Path) -> None:
    """The reviewer's case: nothing said why no InferenceDeployment was ever reconciled."""
    with ThreadedSandboxCluster(crd_dir=REPO / "crds") as cluster:
        cluster.cluster.apiserver.denied.add(POD_LIST)
        env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "KUBECONFIG")}
        command = [sys.executable, "-m", "neuronfleet.cli", "run", "--kubeconfig", str(cluster.kubeconfig_path)]
        command += ["--namespace", "team-b", "--artifact-store", str(tmp_path / "store")]
        process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
        lines: queue.Queue[str] = queue.Queue()
        assert process.stderr is not None
        stderr = process.stderr

        def forward() -> None:
            for line in stderr:
                lines.put(line)

        threading.Thread(target=forward, daemon=True).start()
        seen: list[str] = []
        wanted = "the operator may not list pods in namespace team-b"
        try:
            deadline = time.monotonic() + 60
            while not any(wanted in line for line in seen):
                assert process.poll() is None, "".join(seen)
                assert time.monotonic() < deadline, "no error about the pod list:\n" + "".join(seen)
                with contextlib.suppress(queue.Empty):
                    seen.append(lines.get(timeout=1))
        finally:
            process.terminate()
            process.wait(timeout=30)
    (error,) = [line for line in seen if wanted in line]
    assert "allow list and watch of pods to the operator's ServiceAccount there" in error
