"""An API server that refuses connections is a ConnectionError from the adapter, as a silent one is a
TimeoutError: the reconcile records either as a failed call and goes on with what does not need it.

aiohttp's own exceptions (ClientConnectorError for a refused connection) are no ConnectionError, so
without the translation they escaped every handler of a failed call.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.config import ConfigException

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


INVOLVED = {"apiVersion": "neuronfleet.dev/v1alpha1", "kind": "InferenceDeployment", "metadata": {"name": "d"}}


async def test_an_event_on_a_closed_client_is_logged_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    # aiohttp's RuntimeError "Session is closed" is none of the API's errors: it escaped post_event
    # and failed the reconcile whose writes had landed (or, posted from the daemon's own failure
    # handler, ended the object's daemon).
    kube = KubeClient(client.ApiClient(client.Configuration(host=refusing_url())), request_timeout=5)
    await kube.close()
    with caplog.at_level("WARNING"):
        assert await kube.post_event(INVOLVED, "Normal", "Scaled", "1 -> 2") is False
    assert "Event Scaled of default/d not posted (RuntimeError: Session is closed): 1 -> 2" in caplog.text


async def test_an_event_whose_credentials_cannot_be_refreshed_is_logged_never_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # kubernetes_asyncio refreshes the token before each request through refresh_api_key_hook (the
    # in-cluster loader re-reads the service account's token file there); a refresh that fails
    # raises its own error, a ConfigException or an OSError.
    for failure in (ConfigException("Token file exists but empty."), FileNotFoundError(2, "No such file")):

        def refresh(_configuration: client.Configuration, _failure: Exception = failure) -> None:
            raise _failure

        configuration = client.Configuration(host=refusing_url(), api_key={"BearerToken": "Bearer t"})
        configuration.refresh_api_key_hook = refresh
        kube = KubeClient(client.ApiClient(configuration), request_timeout=5)
        try:
            with caplog.at_level("WARNING"):
                assert await kube.post_event(INVOLVED, "Normal", "Scaled", "1 -> 2") is False
        finally:
            await kube.close()
    assert "not posted (ConfigException: Token file exists but empty.): 1 -> 2" in caplog.text
    assert "not posted (FileNotFoundError: [Errno 2] No such file): 1 -> 2" in caplog.text


async def test_an_event_being_posted_is_still_cancelled() -> None:
    # Catching every failure must not swallow a cancellation (the operator stopping).
    connected = asyncio.Event()
    held: list[asyncio.StreamWriter] = []

    async def never_answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        connected.set()

    silent = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    kube = KubeClient(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}")), request_timeout=60)
    try:
        posting = asyncio.create_task(kube.post_event(INVOLVED, "Normal", "Scaled", "1 -> 2"))
        async with asyncio.timeout(10):
            await connected.wait()  # the request is under way
        posting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await posting
    finally:
        await kube.close()
        for writer in held:
            writer.close()
        silent.close()
        await silent.wait_closed()
