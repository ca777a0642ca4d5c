"""Pytest plugin: sandbox clusters for the integration and e2e tests.

Fixtures:
- ``sandbox_cluster``: a running ``SandboxCluster`` in the test's own event loop (async tests),
  with ``crds/`` registered and two inf2.xlarge nodes (zones us-east-1a/b) in group ``inf2-small``.
- ``make_sandbox_cluster``: an async factory ``await make_sandbox_cluster(**kwargs)`` for custom
  node groups / delays; every cluster it makes is stopped after the test.
- ``threaded_sandbox_cluster``: the same cluster in its own thread, for synchronous callers
  (the ``kubernetes`` client, kubectl, ``kopf.testing.KopfRunner``).
- ``held_port``: a port on 127.0.0.1 that another socket listens on (a start there must fail).
- ``kubectl``: path of a kubectl binary (.venv/bin/kubectl 1.34 from hack/install-kube-tools.sh,
  else one on PATH); skips when there is none.

Under ``looptime``, create the cluster inside the test body (``async with SandboxCluster(...)``)
so that its clock is anchored on the fake loop time.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import pytest

from neuronfleet.sandbox import NodeGroup, SandboxCluster, ThreadedSandboxCluster

REPO = Path(__file__).resolve().parent.parent
CRD_DIR = REPO / "crds"


def default_node_groups() -> list[NodeGroup]:
    return [NodeGroup("inf2-small", "inf2.xlarge", count=2, zones=("us-east-1a", "us-east-1b"), max_nodes=4)]


@pytest.fixture
async def sandbox_cluster() -> AsyncIterator[SandboxCluster]:
    async with SandboxCluster(node_groups=default_node_groups(), crd_dir=CRD_DIR) as cluster:
        yield cluster


@pytest.fixture
async def make_sandbox_cluster() -> AsyncIterator[Callable[..., Awaitable[SandboxCluster]]]:
    clusters: list[SandboxCluster] = []

    async def make(**kwargs: Any) -> SandboxCluster:
        kwargs.setdefault("crd_dir", CRD_DIR)
        cluster = SandboxCluster(**kwargs)
        await cluster.start()
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in reversed(clusters):
        await cluster.stop()


@pytest.fixture
def threaded_sandbox_cluster() -> Iterator[ThreadedSandboxCluster]:
    with ThreadedSandboxCluster(node_groups=default_node_groups(), crd_dir=CRD_DIR, kopf_peering=True) as cluster:
        yield cluster


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port on 127.0.0.1 someone else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


async def answers(url: str) -> bool:
    """Whether anything answers HTTP at ``url`` (within 2 s)."""
    try:
        async with aiohttp.ClientSession() as session, session.get(url, timeout=aiohttp.ClientTimeout(2)):
            return True
    except (TimeoutError, aiohttp.ClientError, OSError):
        return False


@pytest.fixture
def kubectl() -> str:
    candidates = [Path(sys.prefix) / "bin" / "kubectl", REPO / ".venv" / "bin" / "kubectl"]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("no kubectl: run hack/install-kube-tools.sh")
    return found


def create_namespaces(cluster: ThreadedSandboxCluster, *names: str) -> None:
    """Create the namespaces ``names`` in the threaded sandbox, in one call into its loop."""

    def create(c: SandboxCluster) -> None:
        for name in names:
            c.create("namespaces", {"metadata": {"name": name}})

    cluster.call(create)


class RunKubectl(Protocol):
    """The ``run_kubectl`` fixture: kubectl with ``args``; a non-zero exit fails the test if ``check``."""

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]: ...


@pytest.fixture
def run_kubectl(kubectl: str, threaded_sandbox_cluster: ThreadedSandboxCluster, tmp_path: Path) -> RunKubectl:
    """kubectl against the threaded sandbox, with its own cache and HOME; fails the test on a non-zero exit."""
    env = {**os.environ, "KUBECONFIG": str(threaded_sandbox_cluster.kubeconfig_path), "HOME": str(tmp_path)}

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [kubectl, "--cache-dir", str(tmp_path / "cache"), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result

    return run
