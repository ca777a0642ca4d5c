"""An API server that refuses connections is a ConnectionError from the adapter, as a silent one is a
TimeoutError: the reconcile records either as a failed call and goes on with what does not need it.

aiohttp's own exceptions (ClientConnectorError for a refused connection) are no ConnectionError, so
without the translation they escaped every handler of a failed call.
"""

from __future__ import annotations

import socket

import pytest
from kubernetes_asyncio import client

from neuronfleet.kube.client import UNANSWERED, KubeClient


def refusing_url() -> str:
    """A local port nothing listens on (bound, then closed): connections to it are refused."""
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


async def test_a_refused_connection_is_a_connection_error_naming_the_api() -> None:
    kube = KubeClient(client.ApiClient(client.Configuration(host=refusing_url())), request_timeout=5)
    try:
        with pytest.raises(ConnectionError, match=r"^the Kubernetes API could not be reached: ") as caught:
            await kube.create({"kind": "Pod", "metadata": {"namespace": "default", "name": "p"}})
        assert isinstance(caught.value, UNANSWERED)
        with pytest.raises(ConnectionError):
            await kube.patch_status("default", "x", {"phase": "Ready"})
        assert await kube.pod_log_tail("default", "x") == ""  # the log is optional detail
    finally:
        await kube.close()


async def test_an_event_that_cannot_be_posted_is_logged_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    # An Event is a note: a reconcile that applied its plan must not fail because its Event did not
    # reach the API server.
    kube = KubeClient(client.ApiClient(client.Configuration(host=refusing_url())), request_timeout=5)
    involved = {"apiVersion": "neuronfleet.dev/v1alpha1", "kind": "InferenceDeployment", "metadata": {"name": "d"}}
    try:
        with caplog.at_level("WARNING"):
            assert await kube.post_event(involved, "Normal", "Scaled", "1 -> 2") is False
        assert "Event Scaled of default/d not posted (ConnectionError): 1 -> 2" in caplog.text
    finally:
        await kube.close()
