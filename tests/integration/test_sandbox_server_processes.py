"""The kubelet's server processes: the environment a served pod's server gets, how a pod deletion
stops it (its drain, then SIGKILL when the grace ends), and the Prometheus scrape list following a
pod's change at once (not at the next periodic refresh).

The servers are real processes (``fake_servers.DRAINING_SERVER``: ready at once, exits on a second
signal only, as neuronserve ends its drain delay).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fake_servers import draining_neuronserve
from loop_turns import until

from neuronfleet.sandbox.clock import Clock
from neuronfleet.sandbox.prometheus import LABEL_DEPLOYMENT, LABEL_ROLE, PodTargets, PrometheusServer
from neuronfleet.sandbox.serving import ServerProcesses, ServingOptions
from neuronfleet.sandbox.store import Store


def served_pod(binary: Path, env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"uid": "0123456789abcdef", "name": "bert-0", "namespace": "serving"},
        "spec": {"containers": [{"name": "server", "command": [str(binary)], "args": ["serve"], "env": env or []}]},
    }


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    return draining_neuronserve(tmp_path)


@pytest.fixture
async def processes(tmp_path: Path) -> AsyncIterator[ServerProcesses]:
    made = ServerProcesses(
        ServingOptions(device_args=(), ready_timeout_s=30.0), {"PATH": os.environ.get("PATH", "")}, tmp_path / "work"
    )
    yield made
    await made.stop_all(grace_s=1.0)


def test_a_served_pods_environment_holds_its_values_and_its_name_and_namespace(tmp_path: Path) -> None:
    processes = ServerProcesses(ServingOptions(), {"SANDBOX_ONLY": "1"}, tmp_path / "work")
    env = processes.pod_env(
        served_pod(
            Path("neuronserve"),
            [
                {"name": "NEURONFLEET_MODEL", "value": "bert"},
                {"name": "BATCH", "value": 8},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                # A field the sandbox does not know (no pod IP of its own): left unset, not guessed.
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            ],
        )
    )
    assert {k: env.get(k) for k in ("NEURONFLEET_MODEL", "BATCH", "POD_NAME", "POD_NAMESPACE", "POD_IP")} == {
        "NEURONFLEET_MODEL": "bert",
        "BATCH": "8",
        "POD_NAME": "bert-0",
        "POD_NAMESPACE": "serving",
        "POD_IP": None,
    }
    assert env["SANDBOX_ONLY"] == "1"
    assert env["PATH"] == os.environ["PATH"]  # the sandbox's own environment, under the pod's


async def test_a_pod_deletion_gives_the_server_its_drain_then_kills_it(
    processes: ServerProcesses, binary: Path
) -> None:
    assert await processes.wait_exit("no-such-pod", 0.0) is None
    server = await processes.start(served_pod(binary), lambda line: None)
    assert await processes.wait_ready(server.uid)
    # One signal: the server drains (it would go on serving while endpoints update) and is killed
    # when the grace ends. Only a sandbox shutting down sends the second signal that ends the drain.
    assert await processes.terminate(server.uid, 0.5) == -9
    assert processes.get(server.uid) is None
    assert not server.scratch.exists()


async def test_the_scrape_list_follows_a_pods_change_at_once(
    processes: ServerProcesses, binary: Path, tmp_path: Path
) -> None:
    clock = Clock()
    clock.bind(asyncio.get_running_loop())
    store = Store(clock)
    pods = store.resource("", "pods")
    labels = {LABEL_DEPLOYMENT: "bert", LABEL_ROLE: "active"}
    stored = store.create(pods, "default", {**served_pod(binary), "metadata": {"name": "bert-0", "labels": labels}})
    server = await processes.start(stored, lambda line: None)
    targets = PodTargets(store, processes, PrometheusServer("prometheus", tmp_path / "prometheus"))
    task = asyncio.create_task(targets.run())
    try:
        await until(lambda: targets.written is not None and len(targets.written) == 1, "the pod a target")

        def to_placeholder(pod: dict[str, Any]) -> None:
            pod["metadata"]["labels"][LABEL_ROLE] = "placeholder"

        store.update(pods, "default", "bert-0", to_placeholder)
        await until(lambda: targets.written == [], "a placeholder no target")
        assert processes.endpoint(server.uid) is not None  # still listening: the label alone took it out
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
