"""Stopping the sandbox (what Ctrl-C of ``sandbox up`` and the end of the demo run) with clients connected.

Review r1: a client with a watch open (``kubectl get -w``, the operator) held
``SandboxCluster.stop()`` for aiohttp's shutdown timeout (60 s, twice) instead of ending it.
"""

import asyncio
import contextlib
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from neuronfleet.sandbox.cluster import SandboxCluster
from neuronfleet.sandbox.nodes import NodeGroup
from neuronfleet.sandbox.runners import SubprocessRunner

pytestmark = pytest.mark.looptime(False)


async def test_stop_ends_open_watches() -> None:
    cluster = SandboxCluster(node_groups=[NodeGroup("inf2", "inf2.xlarge", count=1)])
    await cluster.start()
    session = aiohttp.ClientSession()
    try:
        response = await session.get(f"{cluster.url}/api/v1/pods?watch=true", timeout=aiohttp.ClientTimeout(total=None))
        assert response.status == 200
        await cluster.wait_for(lambda: cluster.apiserver.open_watches == 1, timeout=10, what="the watch to be served")
        started = time.monotonic()
        try:
            await asyncio.wait_for(cluster.stop(), timeout=10)
        except TimeoutError:
            pytest.fail(
                f"cluster.stop() still running {time.monotonic() - started:.0f} s after it was asked, one watch open"
            )
        # The stream ended as a watch ends (the client reads its end), it was not cut.
        assert await asyncio.wait_for(response.content.read(), timeout=10) == b""
        assert cluster.apiserver.open_watches == 0
    finally:
        await session.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
async def test_a_stopped_container_runner_ends_its_process(tmp_path: Path) -> None:
    """The kubelet's stop cancels a compile Job's run: its process must end with it, not run on."""
    runner = SubprocessRunner()
    marker = str(tmp_path / "compile")
    command = [sys.executable, "-c", "import time; time.sleep(600)", marker]
    pod = {"spec": {"containers": [{"name": "compile", "command": command}]}}
    run = asyncio.ensure_future(runner(pod))

    def child() -> int | None:
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if entry.name.isdigit() and marker in (entry / "cmdline").read_text():
                    return int(entry.name)
        return None

    deadline = time.monotonic() + 30
    while (pid := child()) is None:
        assert time.monotonic() < deadline, "the container's process did not start"
        await asyncio.sleep(0.05)  # polling /proc: nothing to wait on
    run.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await run
    assert child() is None, f"process {pid} runs on after its runner was stopped"
