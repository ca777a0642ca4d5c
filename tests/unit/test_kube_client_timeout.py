"""The Kubernetes API adapter gives up on a silent API server instead of waiting forever.

kubernetes_asyncio sets no timeout of its own: without one, a connection that goes silent (a
control-plane failover) holds the reconcile and the object's lock for good.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web
from kube_http import served_kube
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from neuronfleet.handlers import failure_message
from neuronfleet.kube.client import KubeClient
from neuronfleet.kube.observe import observe_cluster


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


async def test_a_fresh_node_list_is_one_sent_after_the_caller_saw_the_pod() -> None:
    # A reconcile whose pod sits on a node its cached list lacks asks for a fresh list. It shared a
    # list already sent, before the node joined and the pod was bound to it: the pod was judged on
    # a lost node and force-deleted. It now waits for that list and reads a newer one.
    nodes = ["n1"]
    served: list[list[str]] = []
    release = asyncio.Event()
    release.set()
    arrived = asyncio.Event()
    pod = {
        "metadata": {
            "name": "p-new",
            "namespace": "default",
            "labels": {"serving.neuronfleet.dev/deployment": "d"},
            "ownerReferences": [
                {"controller": True, "uid": "u1", "kind": "InferenceDeployment", "name": "d", "apiVersion": "x"}
            ],
        },
        "spec": {"nodeName": "n2", "containers": []},
        "status": {"phase": "Running"},
    }

    async def list_nodes(request: web.Request) -> web.Response:
        snapshot = list(nodes)  # the API server answers as of the request
        served.append(snapshot)
        arrived.set()
        await release.wait()  # a large list on a slow link
        return web.json_response({"items": [{"metadata": {"name": n, "labels": {}}} for n in snapshot]})

    async def list_pods(request: web.Request) -> web.Response:
        return web.json_response({"items": [pod] if "n2" in nodes else []})

    app = web.Application()
    app.router.add_get("/api/v1/nodes", list_nodes)
    app.router.add_get("/api/v1/namespaces/default/pods", list_pods)
    async with served_kube(app, request_timeout=5) as kube:
        await kube.list_nodes()  # the cached list: n1
        release.clear()
        arrived.clear()
        # Reconcile A asked for a fresh list; it is under way when a node joins and a pod is bound to it.
        earlier = asyncio.ensure_future(kube.list_nodes(fresh=True))
        await arrived.wait()
        nodes.append("n2")
        fresh_asked = asyncio.Event()
        read_nodes = kube.list_nodes

        async def noting_fresh(fresh: bool = False) -> list[dict[str, Any]]:
            if fresh:
                fresh_asked.set()
            return await read_nodes(fresh)

        kube.list_nodes = noting_fresh  # type: ignore[method-assign]
        # Reconcile B sees the pod on n2, which its cached list lacks, and asks for a fresh list.
        observed = asyncio.ensure_future(observe_cluster(kube, "default", "d", None, "u1", datetime.now(UTC)))
        await fresh_asked.wait()  # B has decided what to wait for (list_nodes runs to its first wait)
        release.set()
        await earlier
        observation = await observed
        assert [(p.name, p.node_lost, p.broken) for p in observation.pods] == [("p-new", False, False)], (
            "a healthy pod on a node that joined was judged lost from a list sent before it was seen"
        )
        assert served == [["n1"], ["n1"], ["n1", "n2"]]


async def test_a_node_list_that_has_just_failed_is_not_handed_to_a_caller_arriving_in_that_loop_step() -> None:
    # The failed call stayed "under way" until its done-callback ran: a reconcile that asked in that
    # same loop step was handed the failure without a call of its own.
    answers = [web.Response(status=500, text="etcdserver: request timed out"), None]

    async def list_nodes(request: web.Request) -> web.Response:
        answer = answers.pop(0)
        return answer or web.json_response({"items": [{"metadata": {"name": "n1", "labels": {}}}]})

    app = web.Application()
    app.router.add_get("/api/v1/nodes", list_nodes)
    async with served_kube(app, request_timeout=5) as kube:
        failed = asyncio.Event()
        call_api = kube._json

        async def noting_failure(call: Any) -> Any:
            try:
                return await call_api(call)
            except ApiException:
                failed.set()  # another reconcile becomes ready in the loop step the call fails in
                raise

        kube._json = noting_failure  # type: ignore[method-assign]

        async def late() -> list[dict[str, Any]]:
            await failed.wait()
            return await kube.list_nodes()

        first = asyncio.ensure_future(kube.list_nodes())
        second = asyncio.ensure_future(late())
        with pytest.raises(ApiException):
            await first
        assert [n["metadata"]["name"] for n in await second] == ["n1"], "handed the call that had just failed"
        assert answers == []
