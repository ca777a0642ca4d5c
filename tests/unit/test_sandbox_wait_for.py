"""``SandboxCluster.wait_for``: woken by every store change, and re-checking at least once a second
a condition on anything else (a process, a log), under looptime's loop clock."""

from __future__ import annotations

import asyncio

import pytest

from neuronfleet.sandbox import SandboxCluster

pytestmark = pytest.mark.looptime


async def test_a_condition_outside_the_store_is_seen_within_a_second() -> None:
    async with SandboxCluster(run_scheduler=False, run_kubelet=False) as cluster:
        loop = asyncio.get_running_loop()
        flag: list[float] = []
        start = loop.time()
        loop.call_later(2.5, lambda: flag.append(loop.time()))
        await cluster.wait_for(lambda: flag, timeout=60, what="the flag")
        assert 2.5 <= loop.time() - start <= 3.5


async def test_a_store_change_wakes_it_at_once() -> None:
    async with SandboxCluster(run_scheduler=False, run_kubelet=False) as cluster:
        loop = asyncio.get_running_loop()
        start = loop.time()
        loop.call_later(2.25, lambda: cluster.create("configmaps", {"metadata": {"name": "made"}}, "default"))
        await cluster.wait_for(lambda: cluster.get("configmaps", "made", "default"), timeout=60)
        assert loop.time() - start == pytest.approx(2.25, abs=0.01)


async def test_it_gives_up_at_its_timeout_with_what_it_waited_for() -> None:
    async with SandboxCluster(run_scheduler=False, run_kubelet=False) as cluster:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(TimeoutError, match=r"timed out after 7.5s waiting for nothing at all"):
            await cluster.wait_for(lambda: False, timeout=7.5, what="nothing at all")
        assert 7.5 <= loop.time() - start <= 8.5
