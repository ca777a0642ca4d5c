"""The Kubernetes API adapter gives up on a silent API server instead of waiting forever.

kubernetes_asyncio sets no timeout of its own: without one, a connection that goes silent (a
control-plane failover) holds the reconcile and the object's lock for good.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest
from kubernetes_asyncio import client

from neuronfleet.handlers import failure_message
from neuronfleet.kube.client import KubeClient


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A port that takes connections (the kernel's backlog) and never answers a byte."""
    sock = socket.create_server(("127.0.0.1", 0), backlog=8)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


async def test_a_call_to_a_silent_api_server_times_out(silent_server: str) -> None:
    configuration = client.Configuration(host=silent_server)
    kube = KubeClient(client.ApiClient(configuration), request_timeout=0.5)
    try:
        with pytest.raises(TimeoutError, match=r"^the Kubernetes API did not answer within 0\.5 s$"):
            await kube.list_pods("default", {"app": "x"})
        with pytest.raises(TimeoutError):
            await kube.patch_status("default", "x", {"phase": "Ready"})
        assert await kube.pod_log_tail("default", "x") == ""  # the log is optional detail
    finally:
        await kube.close()


def test_a_failed_reconcile_always_says_something() -> None:
    # The daemon logs and posts this as a Warning Event; an empty one tells the user nothing.
    assert failure_message(TimeoutError()) == "TimeoutError"
    assert failure_message(ValueError("bad port")) == "bad port"


async def test_reconciles_waiting_for_the_node_list_share_the_one_call_and_its_timeout() -> None:
    # The node list is read once for every deployment's reconcile. Its lock was held across the call,
    # so when the API server went silent the k-th waiting reconcile failed after k timeouts (k x 30 s),
    # each making its own call in turn. They now share the one call under way and its outcome.
    connections: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)  # read nothing, answer nothing

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    kube = KubeClient(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}")), request_timeout=0.5)
    try:
        outcomes = await asyncio.gather(*(kube.list_nodes() for _ in range(8)), return_exceptions=True)
        assert all(isinstance(o, TimeoutError) for o in outcomes), outcomes
        assert len(connections) == 1, "each waiting reconcile made a call of its own, one after another"
        # A failure is not kept: the next reconcile asks again.
        with pytest.raises(TimeoutError):
            await kube.list_nodes()
        assert len(connections) == 2
    finally:
        for writer in connections:
            writer.close()
        server.close()
        await kube.close()
