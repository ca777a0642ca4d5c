"""A second DELETE that shortens a serving pod's grace ends its real server's stop at the pod's new
deletionTimestamp: the sandbox kubelet sends SIGKILL then, as the kubelet kills again with the
shorter grace. The server is a real process named ``neuronserve`` (``fake_servers.DRAINING_SERVER``)
that, given one SIGTERM, drains longer than any grace, so only the SIGKILL ends it."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

from fake_servers import DRAINING_SERVER

from neuronfleet.sandbox import ColdStartProfile, NodeGroup, SandboxCluster
from neuronfleet.sandbox.serving import ServingOptions

FAST = ColdStartProfile(image_pull_s=0.0, container_start_s=0.0, readiness_s=0.0, shutdown_s=0.0, jitter=0.0)


def _serving_pod(binary: Path) -> dict[str, Any]:
    return {
        "metadata": {"name": "stubborn"},
        "spec": {
            "terminationGracePeriodSeconds": 60,
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


async def test_a_shorter_grace_kills_a_server_still_draining(tmp_path: Path) -> None:
    binary = tmp_path / "bin" / "neuronserve"
    binary.parent.mkdir()
    binary.write_text(f"#!{sys.executable}\n{DRAINING_SERVER}")
    binary.chmod(0o755)
    serving = ServingOptions(device_args=(), starting_niceness=0, ready_timeout_s=30.0, probe_period_s=0.2)
    async with SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=1)],
        cold_start=FAST,
        run_provisioner=False,
        serving=serving,
        workdir=tmp_path / "sandbox",
    ) as cluster:
        cluster.create("pods", _serving_pod(binary), "default")

        def ready() -> bool:
            found = cluster.get("pods", "stubborn", "default")
            conditions = (found or {}).get("status", {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        await cluster.wait_for(ready, timeout=30, what="the server ready")
        assert cluster.servers is not None
        (server,) = cluster.servers.processes.values()
        asked_at = time.monotonic()
        cluster.delete("pods", "stubborn", "default")  # the spec's 60 s; SIGTERM starts a long drain
        cluster.delete("pods", "stubborn", "default", grace_period=2)  # 2 s from the first request
        await cluster.wait_for(lambda: cluster.get("pods", "stubborn", "default") is None, timeout=30)
        assert server.process.returncode == -signal.SIGKILL
        assert time.monotonic() - asked_at < 10  # well before the 60 s the first request gave
