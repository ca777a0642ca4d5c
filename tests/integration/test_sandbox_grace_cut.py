"""A second DELETE that shortens a serving pod's grace ends its real server's stop at the pod's new
deletionTimestamp: the sandbox kubelet sends SIGKILL then, as the kubelet kills again with the
shorter grace. The server is a real process named ``neuronserve`` (``fake_servers.DRAINING_SERVER``)
that, given one SIGTERM, drains longer than any grace, so only the SIGKILL ends it."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from fake_servers import draining_neuronserve, served_pod, serving_sandbox


async def test_a_shorter_grace_kills_a_server_still_draining(tmp_path: Path) -> None:
    binary = draining_neuronserve(tmp_path)
    async with serving_sandbox(tmp_path) as cluster:
        cluster.create("pods", served_pod("stubborn", binary, terminationGracePeriodSeconds=60), "default")

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
