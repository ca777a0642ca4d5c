"""The sandbox's state between runs (review r1): one sandbox per directory, a failed start leaves
nothing running, a new run starts with an empty Prometheus TSDB.

- A second sandbox on the kubeconfig directory of a running one is refused, naming the first's pid,
  before it writes anything there (it used to overwrite the kubeconfig and, when it stopped, delete
  the first one's ``sandbox.env``).
- A start that fails part-way (the API port taken, Prometheus not starting) stops what it started
  and releases the directory.
- Prometheus's TSDB left by a previous run is emptied: a new run's queries never read old pods.
- A lock the caller took (the demo's on ``--out``) must be on the sandbox's own directory, and
  stays held after the sandbox stops.
- Served pods keep their scratch under the workdir given, else under a temporary one that goes
  with the sandbox.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_servers import draining_neuronserve, served_pod, serving_sandbox

from fixtures_cluster import answers
from neuronfleet.sandbox import NodeGroup, SandboxCluster
from neuronfleet.sandbox.dirlock import DirectoryLock, SandboxBusy
from neuronfleet.sandbox.prometheus import PrometheusServer
from neuronfleet.sandbox.serving import ServingOptions

DRIVER = (
    "import argparse, sys\n"
    "from neuronfleet.sandbox.command import register\n"
    "parser = argparse.ArgumentParser(prog='neuronfleet')\n"
    "register(parser.add_subparsers())\n"
    "args = parser.parse_args(sys.argv[1:])\n"
    "sys.exit(args.func(args))\n"
)
GROUPS = [NodeGroup("small", "inf2.xlarge", count=1)]


def processes_naming(text: str) -> list[str]:
    """Command lines of this machine's processes that contain ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                found.append(cmdline)
    return found


async def test_a_second_sandbox_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    async with SandboxCluster(node_groups=GROUPS, kubeconfig_path=kubeconfig) as first:
        written = kubeconfig.read_text()
        second = SandboxCluster(node_groups=GROUPS, kubeconfig_path=kubeconfig)
        with pytest.raises(SandboxBusy) as refused:
            await second.start()
        assert refused.value.pid == os.getpid()
        assert refused.value.directory == tmp_path
        assert kubeconfig.read_text() == written
        assert await answers(f"{first.url}/api/v1/nodes")
    # The directory is free again once the first one stopped.
    async with SandboxCluster(node_groups=GROUPS, kubeconfig_path=kubeconfig) as third:
        assert str(third.url) in kubeconfig.read_text()


async def test_a_lock_taken_by_the_caller_must_be_on_the_sandboxs_own_directory(tmp_path: Path) -> None:
    # The demo locks --out itself before writing there, and hands the lock to the sandbox; a lock on
    # any other directory (or for a sandbox that has none) would leave its own unlocked.
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.mkdir()
    other.mkdir()
    for cluster in (
        SandboxCluster(node_groups=GROUPS, kubeconfig_path=mine / "kubeconfig", directory_lock=DirectoryLock(other)),
        SandboxCluster(node_groups=GROUPS, directory_lock=DirectoryLock(other)),
    ):
        with pytest.raises(ValueError, match=r"directory_lock locks .*other, not this sandbox's"):
            await cluster.start()
        assert not cluster.url  # refused before the API server started
    lock = DirectoryLock(mine)
    lock.acquire()
    try:
        async with SandboxCluster(node_groups=GROUPS, kubeconfig_path=mine / "kubeconfig", directory_lock=lock):
            with pytest.raises(SandboxBusy):  # the caller's lock keeps others out
                await SandboxCluster(node_groups=GROUPS, kubeconfig_path=mine / "kubeconfig").start()
        # Still held once the sandbox stopped: its owner releases it.
        with pytest.raises(SandboxBusy):
            await SandboxCluster(node_groups=GROUPS, kubeconfig_path=mine / "kubeconfig").start()
    finally:
        lock.release()


@pytest.mark.parametrize("own_workdir", [True, False], ids=["workdir", "temporary"])
async def test_served_pods_keep_their_scratch_in_the_workdir_or_a_temporary_one(
    tmp_path: Path, own_workdir: bool
) -> None:
    binary = draining_neuronserve(tmp_path)
    async with serving_sandbox(tmp_path, own_workdir=own_workdir) as cluster:
        cluster.create("pods", served_pod("model", binary), "default")
        assert cluster.servers is not None
        servers = cluster.servers
        (server,) = await cluster.wait_for(lambda: list(servers.processes.values()), timeout=30, what="a server")
        pods = server.scratch.parent
        assert server.scratch.is_dir()  # the pod's emptyDir, removed with the pod
        if own_workdir:
            assert pods == tmp_path / "sandbox" / "pods"
        else:
            assert tmp_path not in pods.parents
    # A temporary workdir goes with the sandbox; the caller's stays.
    assert pods.is_dir() == own_workdir


def test_sandbox_up_refuses_a_directory_in_use(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"

    async def hold_and_run() -> subprocess.CompletedProcess[str]:
        async with SandboxCluster(node_groups=GROUPS, kubeconfig_path=kubeconfig):
            (tmp_path / "sandbox.env").write_text("export KUBECONFIG=first\n")
            written = kubeconfig.read_text()
            args = ["sandbox", "up", "--kubeconfig", str(kubeconfig), "--no-s3", "--prometheus", "off"]
            result = await asyncio.to_thread(
                subprocess.run, [sys.executable, "-c", DRIVER, *args], capture_output=True, text=True, timeout=60
            )
            assert kubeconfig.read_text() == written
            return result

    result = asyncio.run(hold_and_run())
    assert result.returncode == 1, result.stderr
    assert (
        f"a sandbox (pid {os.getpid()}) already uses {tmp_path}/: stop it, or pass --kubeconfig elsewhere"
        in result.stderr
    )
    assert "Traceback" not in result.stderr
    assert (tmp_path / "sandbox.env").read_text() == "export KUBECONFIG=first\n"


async def test_a_taken_port_leaves_nothing_running(tmp_path: Path, held_port: int) -> None:
    workdir = tmp_path / "work"
    cluster = SandboxCluster(
        node_groups=GROUPS,
        port=held_port,
        kubeconfig_path=tmp_path / "kubeconfig",
        serving=ServingOptions(),
        prometheus=True,
        s3=True,
        workdir=workdir,
    )
    with pytest.raises(OSError, match="address already in use"):
        await cluster.start()
    assert processes_naming(str(workdir)) == []
    assert cluster.s3 is not None and not (cluster.s3.endpoint_url and await answers(cluster.s3.endpoint_url))
    assert not (tmp_path / "kubeconfig").exists()
    # The directory is not left locked.
    async with SandboxCluster(node_groups=GROUPS, kubeconfig_path=tmp_path / "kubeconfig"):
        pass


async def test_a_start_failing_after_the_api_server_stops_it(tmp_path: Path) -> None:
    cluster = SandboxCluster(
        node_groups=GROUPS,
        kubeconfig_path=tmp_path / "kubeconfig",
        serving=ServingOptions(),
        prometheus=True,
        prometheus_binary="/bin/false",  # exits at once: Prometheus does not start
        s3=True,
        workdir=tmp_path / "work",
    )
    with pytest.raises(RuntimeError, match="prometheus exited at start-up"):
        await cluster.start()
    assert cluster.s3 is not None and not await answers(cluster.s3.endpoint_url)
    if cluster.url:
        assert not await answers(f"{cluster.url}/api/v1/nodes")
    async with SandboxCluster(node_groups=GROUPS, kubeconfig_path=tmp_path / "kubeconfig"):
        pass


def test_sandbox_up_says_to_omit_the_port_when_it_is_taken(tmp_path: Path, held_port: int) -> None:
    args = ["sandbox", "up", "--port", str(held_port), "--kubeconfig", str(tmp_path / "kubeconfig")]
    args += ["--no-s3", "--prometheus", "off"]
    result = subprocess.run([sys.executable, "-c", DRIVER, *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"port {held_port}" in result.stderr
    assert "omit --port for a free one" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_new_prometheus_starts_with_an_empty_tsdb(tmp_path: Path) -> None:
    old_block = tmp_path / "tsdb" / "01JAAAAAAAAAAAAAAAAAAAAAAA"
    old_block.mkdir(parents=True)
    (old_block / "meta.json").write_text("{}")
    (tmp_path / "tsdb" / "wal").mkdir()
    server = PrometheusServer("/usr/bin/prometheus", tmp_path)
    assert not old_block.exists()
    assert not (tmp_path / "tsdb" / "wal").exists()
    assert server.tsdb == tmp_path / "tsdb"


def test_prometheus_log_as_said_on_a_failed_start_is_its_last_4000_characters(tmp_path: Path) -> None:
    server = PrometheusServer("/usr/bin/prometheus", tmp_path)
    assert server.log() == ""  # never started: no log yet
    server.log_file.write_text("early line\n" * 100 + "x" * 3990 + "\nlast line")
    assert server.log() == ("x" * 3990 + "\nlast line")[-4000:]
    assert server.log().endswith("last line") and "early line" not in server.log()
