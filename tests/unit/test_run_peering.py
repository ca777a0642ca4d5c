"""`neuronfleet run --peering NAME` says when Kopf's peering object is missing.

Kopf pauses an operator with mandatory peering until it sees the named peering object; without a
word in the log (its liveness endpoint answers 200 all along), an operator whose object is missing
looks healthy and does nothing. ``run`` checks at start-up, with the operator's own client, and
warns: what is missing, that the operator waits, how to create it.
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

from neuronfleet.kube.client import KubeClient
from neuronfleet.run_command import missing_peering, watch_peering
from neuronfleet.sandbox import SandboxCluster, ThreadedSandboxCluster

REPO = Path(__file__).resolve().parents[2]


def _peering(cluster: SandboxCluster, name: str, namespace: str | None = None) -> None:
    plural = "kopfpeerings" if namespace else "clusterkopfpeerings"
    cluster.create(plural, {"metadata": {"name": name}}, namespace, group="kopf.dev")


async def test_cluster_wide_peering_object_missing_or_there() -> None:
    async with SandboxCluster(kopf_peering=True) as cluster:
        kube = await KubeClient.connect(cluster.kubeconfig_path)
        try:
            (problem,) = await missing_peering(kube, "neuronfleet")
            assert problem.startswith("ClusterKopfPeering neuronfleet does not exist: Kopf pauses this operator")
            assert "peering.createObject=true" in problem
            assert (
                """echo '{"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": """
                """{"name": "neuronfleet"}}' | kubectl create -f -"""
            ) in problem
            _peering(cluster, "other")
            assert await missing_peering(kube, "neuronfleet") != []
            _peering(cluster, "neuronfleet")
            assert await missing_peering(kube, "neuronfleet") == []
        finally:
            await kube.close()


async def test_namespaced_peering_objects_and_namespaces() -> None:
    async with SandboxCluster(kopf_peering=True) as cluster:
        for namespace in ("team-a", "team-b"):
            cluster.create("namespaces", {"metadata": {"name": namespace}})
        _peering(cluster, "neuronfleet", "team-a")
        kube = await KubeClient.connect(cluster.kubeconfig_path)
        try:
            # team-a has its object; team-b lacks it; team-c does not exist; a pattern is not checked.
            problems = await missing_peering(kube, "neuronfleet", ["team-a", "team-b", "team-c", "ml-*"])
            assert [p.split(":")[0] for p in problems] == [
                "KopfPeering neuronfleet does not exist in namespace team-b",
                "watched namespace team-c does not exist",
            ]
            assert "pauses this operator, in every namespace it watches" in problems[0]
            assert "kubectl -n team-b create -f -" in problems[0]
            assert "kubectl -n team-c create -f -" in problems[1]
            assert await missing_peering(kube, "neuronfleet", ["team-a", "ml-*"]) == []
        finally:
            await kube.close()


@pytest.mark.parametrize("namespaces", [[], ["default"]])
async def test_peering_crds_not_installed(namespaces: list[str]) -> None:
    async with SandboxCluster() as cluster:
        kube = await KubeClient.connect(cluster.kubeconfig_path)
        try:
            (problem,) = await missing_peering(kube, "neuronfleet", namespaces)
            assert problem.startswith("the kopf.dev peering CRDs are not installed")
            assert "peering.createCRDs=true" in problem
        finally:
            await kube.close()


async def test_watch_warns_once_then_says_when_the_object_is_there(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="neuronfleet.run_command")
    async with SandboxCluster(kopf_peering=True) as cluster:
        kube = await KubeClient.connect(cluster.kubeconfig_path)
        try:
            watch = asyncio.create_task(watch_peering(kube, "neuronfleet", recheck_seconds=0.05))
            await asyncio.sleep(0.5)  # several checks: one warning
            assert not watch.done()
            _peering(cluster, "neuronfleet")
            await asyncio.wait_for(watch, 10)
        finally:
            await kube.close()
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in messages] == ["WARNING", "INFO"], messages
    assert "ClusterKopfPeering neuronfleet does not exist" in messages[0][1]
    assert "nothing is missing now" in messages[1][1]


async def test_watch_gives_up_in_one_line_when_it_cannot_check(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="neuronfleet.run_command")
    async with SandboxCluster(kopf_peering=True) as cluster:
        kube = await KubeClient.connect(cluster.kubeconfig_path)
        kube.request_timeout = 0.0  # every check times out
        try:
            await asyncio.wait_for(watch_peering(kube, "neuronfleet", recheck_seconds=0.05), 10)
        finally:
            await kube.close()
    (record,) = caplog.records
    assert record.getMessage().startswith("could not check Kopf's peering object 'neuronfleet'")


def test_neuronfleet_run_warns_about_a_missing_peering_object(tmp_path: Path) -> None:
    """The reviewer's case: ``neuronfleet run --peering missing`` said nothing after its login."""
    with ThreadedSandboxCluster(crd_dir=REPO / "crds", kopf_peering=True) as cluster:
        env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "KUBECONFIG")}
        command = [sys.executable, "-m", "neuronfleet.cli", "run", "--kubeconfig", str(cluster.kubeconfig_path)]
        command += ["--peering", "missing", "--artifact-store", str(tmp_path / "store")]
        process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
        lines: queue.Queue[str] = queue.Queue()
        assert process.stderr is not None
        stderr = process.stderr

        def forward() -> None:
            for line in stderr:
                lines.put(line)

        threading.Thread(target=forward, daemon=True).start()
        seen: list[str] = []
        try:
            deadline = time.monotonic() + 60
            while not any("ClusterKopfPeering missing does not exist" in line for line in seen):
                assert process.poll() is None, "".join(seen)
                assert time.monotonic() < deadline, "no warning about the peering object:\n" + "".join(seen)
                with contextlib.suppress(queue.Empty):
                    seen.append(lines.get(timeout=1))
        finally:
            process.terminate()
            process.wait(timeout=30)
    (warning,) = [line for line in seen if "ClusterKopfPeering missing does not exist" in line]
    assert "Kopf pauses this operator until it does" in warning
