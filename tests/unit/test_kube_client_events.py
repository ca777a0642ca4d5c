"""The Events the adapter posts: what ``kubectl describe`` shows of an InferenceDeployment (from
``neuronfleet``, about the object read, with its reason and message), and True once the API server
has taken one. Against real HTTP answering as the API server does; the refusals are in
``test_kube_client_unreachable``."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from kube_http import served_kube

from neuronfleet.kube.client import EVENT_COMPONENT, EVENT_MESSAGE_MAX

INVOLVED = {
    "apiVersion": "neuronfleet.dev/v1alpha1",
    "kind": "InferenceDeployment",
    "metadata": {"name": "bert", "namespace": "serving", "uid": "u-1", "resourceVersion": "42"},
}


async def test_a_posted_event_names_its_object_and_source_and_is_true_once_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The replica posting it: its pod's name, cut to the 128 characters events.k8s.io allows.
    monkeypatch.setenv("HOSTNAME", "h" * 130)
    posted: list[dict[str, Any]] = []

    async def create(request: web.Request) -> web.Response:
        body = await request.json()
        posted.append(body)
        return web.json_response({**body, "metadata": {**body["metadata"], "name": "bert.1"}}, status=201)

    app = web.Application()
    app.router.add_post("/api/v1/namespaces/serving/events", create)
    async with served_kube(app) as kube:
        assert await kube.post_event(INVOLVED, "Normal", "Scaled", "x" * (EVENT_MESSAGE_MAX + 5)) is True
    (event,) = posted
    assert event["involvedObject"] == {
        "apiVersion": "neuronfleet.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "name": "bert",
        "namespace": "serving",
        "uid": "u-1",
        "resourceVersion": "42",
    }
    assert event["metadata"] == {"generateName": "bert.", "namespace": "serving"}
    assert (event["type"], event["reason"], event["count"]) == ("Normal", "Scaled", 1)
    assert event["message"] == "x" * EVENT_MESSAGE_MAX  # the API server refuses a longer note
    assert event["source"] == {"component": EVENT_COMPONENT} and event["reportingComponent"] == EVENT_COMPONENT
    assert event["firstTimestamp"] == event["lastTimestamp"]
    assert event["reportingInstance"] == "h" * 128
