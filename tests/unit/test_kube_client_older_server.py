"""An API server that does not know a field the operator sets costs one write, not one per reconcile.

A PodDisruptionBudget's ``unhealthyPodEvictionPolicy`` is beta from Kubernetes 1.27 (alpha, off by
default, in 1.26); an older API server drops it from every write. Diffing the wanted spec against
what it keeps would then find a difference on every reconcile and patch again. The server here is
real HTTP answering the PDB read and merge-patch the way such an API server does. The same diff
reads a list as wanted when each live item holds its wanted fields (the server's defaults added).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from kube_http import served_kube

from neuronfleet.kube.client import KubeClient

PATH = "/apis/policy/v1/namespaces/default/poddisruptionbudgets/bert"


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


class OlderApiServer:
    """One stored PDB; every write drops ``spec.unhealthyPodEvictionPolicy``, as before 1.27 by default."""

    def __init__(self, stored: dict[str, Any]) -> None:
        self.stored = stored
        self.patches = 0

    async def get(self, _: web.Request) -> web.Response:
        return web.json_response(self.stored)

    async def patch(self, request: web.Request) -> web.Response:
        self.patches += 1
        self.stored = merge(self.stored, json.loads(await request.read()))
        self.stored["spec"].pop("unhealthyPodEvictionPolicy", None)
        return web.json_response(self.stored)


def pdb(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "bert", "namespace": "default", "labels": {"app": "bert"}},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "bert"}}, **spec},
    }


@pytest.fixture
async def older_server() -> AsyncIterator[tuple[OlderApiServer, KubeClient]]:
    server = OlderApiServer(pdb())
    app = web.Application()
    app.router.add_get(PATH, server.get)
    app.router.add_patch(PATH, server.patch)
    async with served_kube(app) as kube:
        yield server, kube


async def test_a_field_the_api_server_drops_is_written_once_then_no_longer_compared(
    older_server: tuple[OlderApiServer, KubeClient],
) -> None:
    server, kube = older_server
    wanted = pdb(unhealthyPodEvictionPolicy="AlwaysAllow")
    outcomes = []
    for _ in range(3):  # three reconciles
        current = await kube.read("PodDisruptionBudget", "default", "bert")
        outcomes.append(await kube.ensure(wanted, current))
    assert outcomes == ["updated", "unchanged", "unchanged"]
    assert server.patches == 1
    assert kube.dropped_spec_fields == {"PodDisruptionBudget": {"unhealthyPodEvictionPolicy"}}

    # A change to a field the server does keep is still written.
    wanted = pdb(maxUnavailable=2, unhealthyPodEvictionPolicy="AlwaysAllow")
    current = await kube.read("PodDisruptionBudget", "default", "bert")
    assert await kube.ensure(wanted, current) == "updated"
    assert server.stored["spec"]["maxUnavailable"] == 2


async def test_a_pdb_written_with_max_unavailable_loses_it_when_min_available_is_wanted(
    older_server: tuple[OlderApiServer, KubeClient],
) -> None:
    # A PDB takes one of the two (an API server refuses both): an older operator's maxUnavailable
    # is removed in the same patch that sets minAvailable, then nothing more is written.
    server, kube = older_server
    wanted = pdb(minAvailable=2)
    del wanted["spec"]["maxUnavailable"]
    current = await kube.read("PodDisruptionBudget", "default", "bert")
    assert await kube.ensure(wanted, current) == "updated"
    assert server.stored["spec"]["minAvailable"] == 2 and "maxUnavailable" not in server.stored["spec"]
    current = await kube.read("PodDisruptionBudget", "default", "bert")
    assert await kube.ensure(wanted, current) == "unchanged"


SERVICE_PATH = "/api/v1/namespaces/default/services/bert"


def service(*ports: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "bert", "namespace": "default", "labels": {"app": "bert"}},
        "spec": {"selector": {"app": "bert"}, "ports": [{"name": f"p{p}", "port": p} for p in ports]},
    }


async def test_a_list_is_as_wanted_when_each_item_holds_the_wanted_fields_and_no_item_is_missing() -> None:
    # The API server defaults fields inside list items (a Service port's protocol and targetPort):
    # the same ports with those added cost no write; one port more is written.
    stored = service(8080)
    stored["spec"]["ports"][0].update(protocol="TCP", targetPort=8080)
    server = OlderApiServer(stored)
    app = web.Application()
    app.router.add_get(SERVICE_PATH, server.get)
    app.router.add_patch(SERVICE_PATH, server.patch)
    async with served_kube(app) as kube:
        current = await kube.read("Service", "default", "bert")
        assert await kube.ensure(service(8080), current) == "unchanged"
        assert await kube.ensure(service(8080, 9090), current) == "updated"
        assert [p["port"] for p in server.stored["spec"]["ports"]] == [8080, 9090]
    assert server.patches == 1
