"""The Prometheus reader fails fast: one connection per snapshot when Prometheus is down, no retries,
then none at all while its URL backs off.

A reconcile waits for the snapshot inside its reconcile slot, so retries with back-off against a
dead Prometheus (the client library's default when no Retry is given) would stall every reconcile
by seconds, and a Prometheus that accepts connections and never answers held all 32 slots for
5-26 s each. Time is measured here by connections made and the back-off's state, not wall clocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import requests
import yaml
from fixtures_prometheus import private_ca

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.metrics.prometheus import (
    _WATCHING,
    BACKOFF_SECONDS,
    IDLE_ENDPOINT_SECONDS,
    MAX_BACKOFF_SECONDS,
    QUERY_THREADS,
    Endpoint,
    PrometheusMetrics,
    QueryResult,
    _own_answer,
    _Skipped,
    _Unavailable,
    redact_url,
)
from neuronfleet.metrics.prometheus_auth import PrometheusCredentials

REPO = Path(__file__).resolve().parents[2]


class SlammingServer:
    """Accepts TCP connections and closes them at once (a Prometheus dying mid-request); counts them."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


class HungServer:
    """Accepts TCP connections and never answers (overloaded, a hung query, a load balancer in front
    of a dead pod); counts them and keeps them open."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=1000)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def accepted(self) -> int:
        return len(self.held)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


class Clock:
    """The back-off's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class SlowPrometheus(BaseHTTPRequestHandler):
    """Answers every query, each after DELAY seconds (an overloaded Prometheus); counts them."""

    DELAY = 0.4
    received = 0

    def do_GET(self) -> None:
        type(self).received += 1
        threading.Event().wait(self.DELAY)  # the server's slowness, not a wait for an effect
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the reader hung up on a slow answer: expected


@pytest.fixture
def slamming() -> Iterator[SlammingServer]:
    server = SlammingServer()
    yield server
    server.sock.close()


@pytest.fixture
def hung() -> Iterator[HungServer]:
    server = HungServer()
    yield server
    server.close()


def deployment(url: str, name: str = "bert", timeout: float = 2) -> InferenceDeployment:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["scaling"]["metrics"] = {"prometheusUrl": url, "timeoutSeconds": timeout}
    return InferenceDeployment.model_validate(doc)


async def test_one_connection_per_snapshot_and_the_reason_names_prometheus(slamming: SlammingServer) -> None:
    url = f"http://127.0.0.1:{slamming.port}"
    clock = Clock()
    metrics = PrometheusMetrics(None, clock=clock)
    snapshot, reason = await metrics.snapshot(deployment(url), time.time())
    assert snapshot is None
    assert reason.startswith(f"Prometheus at {url} unavailable: ConnectionError")
    assert slamming.accepted == 1
    # Backing off: unavailable at once, without a connection, and said so.
    snapshot, reason = await metrics.snapshot(deployment(url), time.time())
    assert snapshot is None and slamming.accepted == 1
    assert reason.startswith(f"Prometheus at {url} unavailable: ConnectionError") and "backing off" in reason
    # Once the back-off has passed, the next snapshot asks again: one connection.
    clock.now += BACKOFF_SECONDS
    snapshot, reason = await metrics.snapshot(deployment(url), time.time())
    assert snapshot is None and slamming.accepted == 2


async def test_a_prometheus_that_never_answers_holds_no_reconcile_beyond_one_deadline(hung: HungServer) -> None:
    # 32 reconciles (the default --max-concurrent-reconciles) read metrics at once from a Prometheus
    # that accepts and never answers. They shared the 6 threads of the default executor with
    # everything else, each query had its own timeout and the snapshot 5 of them (26 s for all).
    url = f"http://127.0.0.1:{hung.port}"
    clock = Clock()
    # Each deployment all its queries itself (as it does those it overrides): the default queries'
    # fleet-wide read is one read for all (tests/unit/test_prometheus_fleet_reads.py).
    metrics = PrometheusMetrics(None, clock=clock, group_default_queries=False)
    deps = [deployment(url, f"m{i}", timeout=0.5) for i in range(32)]

    async def wave() -> list[tuple[object, str]]:
        return await asyncio.gather(*(metrics.snapshot(dep, time.time()) for dep in deps))

    first = await wave()
    assert all(snapshot is None and reason.startswith(f"Prometheus at {url}") for snapshot, reason in first)
    # One connection per query thread at most: the snapshots queued behind them asked nothing. Each
    # found the URL backing off when a thread came free, or, when no thread came free within its own
    # 0.5 s (the reads' deadlines end about then too: which comes first is the machine's timing; a
    # loaded CI run saw all 24 of the latter), gave up unrun and said the threads were busy.
    assert 1 <= hung.accepted <= QUERY_THREADS
    backoff = metrics.backoff(url, own=False)
    assert backoff is not None and backoff.failures == 1 and backoff.seconds == BACKOFF_SECONDS
    unasked = [reason for _, reason in first if "backing off" in reason or "not asked" in reason]
    assert len(unasked) >= len(deps) - QUERY_THREADS
    assert all(
        "backing off" in reason or f"its query threads ({QUERY_THREADS}) were busy for 0.5 s" in reason
        for reason in unasked
    )
    # While it backs off: every snapshot unavailable at once, no connection at all.
    connections = hung.accepted
    assert all("backing off" in reason for _, reason in await wave())
    assert hung.accepted == connections
    # Then one probe, not 32; it fails, and the back-off doubles.
    clock.now += BACKOFF_SECONDS
    probe = await wave()
    assert hung.accepted == connections + 1
    assert sum("backing off" not in reason for _, reason in probe) == 1
    backoff = metrics.backoff(url, own=False)
    assert backoff is not None and (backoff.failures, backoff.seconds) == (2, 2 * BACKOFF_SECONDS)
    for _ in range(3):  # 60, 120, then at most 120
        clock.now += MAX_BACKOFF_SECONDS
        await metrics.snapshot(deps[0], time.time())
    backoff = metrics.backoff(url, own=False)
    assert backoff is not None and backoff.seconds == MAX_BACKOFF_SECONDS
    metrics.close()


async def test_no_url_is_a_reason_not_an_error() -> None:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    snapshot, reason = await PrometheusMetrics(None).snapshot(InferenceDeployment.model_validate(doc), time.time())
    assert snapshot is None and "no Prometheus URL configured" in reason


async def test_one_deadline_bounds_all_the_queries_of_a_snapshot() -> None:
    # Each query had its own timeout: 8 queries answered in 0.4 s each took 3.2 s against a 1 s
    # timeout. One deadline from the snapshot's start leaves the later queries unasked.
    server = QuietServer(("127.0.0.1", 0), SlowPrometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        metrics = PrometheusMetrics(None)
        snapshot, reason = await metrics.snapshot(deployment(url, timeout=1), time.time())
        assert snapshot is None and reason.startswith(f"Prometheus at {url} unavailable")
        assert 1 <= SlowPrometheus.received <= 3  # of the 7 queries and the sample time
        assert metrics.backoff(url, own=False) is not None
        metrics.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("from_spec", [True, False], ids=["prometheusUrl", "--prometheus-url"])
async def test_the_reason_shows_neither_the_urls_credentials_nor_its_query_values(
    slamming: SlammingServer, from_spec: bool
) -> None:
    # The status (readable by anyone who may get the resource, and its Events) read
    # "Prometheus at http://user:S3cr3t@127.0.0.1:9/ unavailable: ...".
    url = f"http://prom-user:S3cr3t@127.0.0.1:{slamming.port}/?token=T0kenValue"
    metrics = PrometheusMetrics(None if from_spec else url, clock=Clock())
    dep = deployment(url)
    if not from_spec:
        dep.spec.scaling.metrics.prometheus_url = None
    printed = f"http://***@127.0.0.1:{slamming.port}/?token=***"
    for backing_off in (False, True):  # the failure, then the back-off's message
        snapshot, reason = await metrics.snapshot(dep, time.time())
        assert snapshot is None
        assert reason.startswith(f"Prometheus at {printed} unavailable: ConnectionError")
        assert ("backing off" in reason) is backing_off
        # The connection error prints the request's path, the URL's query string in it.
        assert "S3cr3t" not in reason and "prom-user" not in reason and "T0kenValue" not in reason
    assert slamming.accepted == 1


@pytest.mark.parametrize(
    "url",
    [
        "http://prom-user:S3/cr3t@127.0.0.1:9/",  # an unencoded / ends the host: requests quotes "prom-user:S3"
        "http://prom-user:S3cr3t@/",  # no host: requests quotes the URL whole
        "http://prom-user:S3cr3t@[::1/",  # not parsed at all
    ],
)
async def test_a_url_that_cannot_be_requested_is_not_quoted(url: str) -> None:
    snapshot, reason = await PrometheusMetrics(None).snapshot(deployment(url), time.time())
    assert snapshot is None
    assert reason.startswith("Prometheus at http://***@") and reason.endswith(": not a valid URL")
    assert "S3" not in reason and "prom-user" not in reason


def test_redact_url() -> None:
    assert redact_url("https://prom.example:9090/prefix") == "https://prom.example:9090/prefix"
    assert redact_url("http://user:pass@host:9090/") == "http://***@host:9090/"
    assert redact_url("http://user@host/?token=abc&empty=&bare#frag") == "http://***@host/?token=***&empty=***&***"
    assert redact_url("http://a:p@ss@host/") == "http://***@host/"  # an unencoded @ in the password
    assert redact_url("http://a:p?ss@host/") == "http://***@host/"  # not taken for a query string
    assert redact_url("http://a:p/s#s@host/") == "http://***@host/"


class TrickleServer:
    """Answers 200 and then sends one byte every TRICKLE seconds, for ever: in the body (after headers
    announcing a megabyte), or in the headers themselves. requests' timeout bounds each socket read,
    never the whole answer, so neither side ever times out; counts the connections the reader closed."""

    TRICKLE = 0.2

    def __init__(self, phase: str, tls: ssl.SSLContext | None = None) -> None:
        self.phase = phase
        self.tls = tls
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=100)
        self.port = self.sock.getsockname()[1]
        self.hung_up = 0
        self._hung_up = threading.Condition()
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                if self.tls is not None:
                    conn = self.tls.wrap_socket(conn, server_side=True)
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
                if self.phase == "body":
                    conn.sendall(b"Content-Length: 1000000\r\n\r\n")
                else:
                    conn.sendall(b"X-Trickle: ")
                # The server's pace, not a wait for an effect.
                while not self._stop.wait(self.TRICKLE):
                    conn.sendall(b" " if self.phase == "body" else b"a")
            except OSError:
                with self._hung_up:
                    self.hung_up += 1
                    self._hung_up.notify_all()

    def wait_hung_up(self, count: int, timeout: float) -> int:
        """The connections the reader closed, once ``count`` (or ``timeout`` seconds passed): the
        server notices at its next byte."""
        with self._hung_up:
            self._hung_up.wait_for(lambda: self.hung_up >= count, timeout)
            return self.hung_up

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


class HealthyPrometheus(BaseHTTPRequestHandler):
    """Answers every query with one row: the deployment ``healthy``'s (of the example's namespace), at 3."""

    def do_GET(self) -> None:
        row = {"metric": {"namespace": "search", "deployment": "healthy"}, "value": [time.time(), "3"]}
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [row]}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.parametrize("phase", ["body", "headers", "body over TLS"])
async def test_a_prometheus_trickling_its_answer_holds_no_query_thread_past_the_deadline(
    phase: str, tmp_path: Path
) -> None:
    # A spec's Prometheus that trickled its answer a byte at a time held a query thread for as long
    # as it kept trickling: 8 such URLs (or 8 probes of one) held every query thread, and every other
    # deployment's metrics -- on a healthy Prometheus -- read "not asked: its query threads were busy".
    tls, credentials, scheme = None, None, "http"
    if phase.endswith("TLS"):
        ca_file, cert_file, key_file = private_ca(tmp_path)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert_file, key_file)
        credentials, scheme = PrometheusCredentials(ca_file=ca_file), "https"
    trickle = TrickleServer(phase.split()[0], tls)
    good = QuietServer(("127.0.0.1", 0), HealthyPrometheus)
    threading.Thread(target=good.serve_forever, daemon=True).start()
    metrics = PrometheusMetrics(None, clock=Clock(), credentials=credentials)
    try:
        healthy = deployment(f"http://127.0.0.1:{good.server_address[1]}", "healthy", timeout=1)
        # Each its own endpoint (a query string of its own), so none waits on another's back-off.
        slow = [
            deployment(f"{scheme}://127.0.0.1:{trickle.port}/?shard={i}", f"slow{i}", timeout=1)
            for i in range(QUERY_THREADS)
        ]
        answers = await asyncio.gather(*(metrics.snapshot(dep, time.time()) for dep in slow))
        for snapshot, reason in answers:
            assert snapshot is None
            assert "no answer within the snapshot's 1 s" in reason, reason
        # The slow reads hung up when their deadline passed: their threads are free for the others.
        snapshot, reason = await metrics.snapshot(healthy, time.time())
        assert snapshot is not None and snapshot.queue_depth == 3, reason
        assert await asyncio.to_thread(trickle.wait_hung_up, QUERY_THREADS, 5) == QUERY_THREADS
    finally:
        metrics.close()
        trickle.close()
        good.shutdown()
        good.server_close()


class PacedPrometheus(SlowPrometheus):
    """A healthy Prometheus: each query answered in 0.2 s (a snapshot's 8 in 1.6 s)."""

    DELAY = 0.2
    received = 0


async def test_a_read_that_waited_for_a_query_thread_is_not_blamed_on_prometheus(hung: HungServer) -> None:
    # The one query thread held 4 s by a hung Prometheus; a snapshot of a healthy one (its 8 queries
    # answered in 1.6 s, within its 2 s) queued behind it. It gave up 2 * 2 + 1 = 5 s after being
    # asked, 1 s into its read, said the healthy Prometheus was "unavailable: TimeoutError" and
    # backed it off for 15 s, though the wait was for the operator's own thread.
    good = QuietServer(("127.0.0.1", 0), PacedPrometheus)
    threading.Thread(target=good.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{good.server_address[1]}"
    metrics = PrometheusMetrics(None, clock=Clock(), threads=1)
    try:
        held = deployment(f"http://127.0.0.1:{hung.port}", "held", timeout=4)
        late = deployment(url, "late", timeout=2)
        (_, held_reason), (snapshot, reason) = await asyncio.gather(
            metrics.snapshot(held, time.time()), metrics.snapshot(late, time.time())
        )
        assert "no answer within the snapshot's 4 s" in held_reason
        assert snapshot is None and reason == f"Prometheus at {url} not asked: its query threads (1) were busy for 2 s"
        assert metrics.backoff(url, own=False) is None
        assert PacedPrometheus.received == 0  # dropped unrun
        # The thread free, the healthy Prometheus is read at once (it answers no samples).
        snapshot, reason = await metrics.snapshot(late, time.time())
        assert reason == f"Prometheus at {url} returned no samples for late", reason
    finally:
        metrics.close()
        good.shutdown()
        good.server_close()


async def test_no_probe_while_an_earlier_read_of_the_endpoint_still_runs(hung: HungServer) -> None:
    # A read can outlive its snapshot: the reconcile waiting for it is cancelled (its resource
    # deleted, the operator stopping) while the read runs on in its query thread until its deadline.
    # Each probe after a back-off then added one more read of the same endpoint, holding one more
    # query thread. (Its own queries: a fleet-wide read is shared, and a snapshot asked while it
    # runs waits for it, as its other snapshots do.)
    url = f"http://127.0.0.1:{hung.port}"
    clock = Clock()
    metrics = PrometheusMetrics(None, clock=clock, group_default_queries=False)
    try:
        dep = deployment(url, "late", timeout=1)
        snapshot, reason = await metrics.snapshot(dep, time.time())
        assert snapshot is None and "no answer within the snapshot's 1 s" in reason, reason
        clock.now += BACKOFF_SECONDS
        probe = asyncio.create_task(metrics.snapshot(dep, time.time()))
        assert await asyncio.to_thread(_wait_for, lambda: hung.accepted == 2, 10)
        probe.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await probe
        # Past the back-off, while that read still runs: no probe beside it.
        clock.now += MAX_BACKOFF_SECONDS
        snapshot, reason = await metrics.snapshot(dep, time.time())
        assert snapshot is None and "an earlier read of it still runs" in reason, reason
        assert hung.accepted == 2
    finally:
        metrics.close()


async def test_an_endpoint_unused_for_a_while_keeps_no_client_and_no_back_off(slamming: SlammingServer) -> None:
    # One HTTP client per URL ever asked and one back-off per URL that ever failed were kept for the
    # operator's life: a spec URL edited 2,000 times (a token in its query string rotated) kept 2,000
    # sessions and back-offs.
    clock = Clock()
    metrics = PrometheusMetrics(None, clock=clock)
    base = f"http://127.0.0.1:{slamming.port}/?token="
    edits = 60
    for edit in range(edits):
        snapshot, reason = await metrics.snapshot(deployment(f"{base}t{edit}", timeout=0.5), time.time())
        assert snapshot is None and "ConnectionError" in reason
        clock.now += 60  # an edit a minute, for an hour
    # The last IDLE_ENDPOINT_SECONDS of edits are kept (with up to a sweep's lag), the others dropped.
    kept = IDLE_ENDPOINT_SECONDS / 60
    assert kept <= len(metrics._clients) <= kept + 2
    assert metrics.backoff(f"{base}t0", own=False) is None
    assert metrics.backoff(f"{base}t{edits - 1}", own=False) is not None
    # A URL asked again after being dropped starts afresh: one connection, then backing off.
    accepted = slamming.accepted
    for backing_off in (False, True):
        snapshot, reason = await metrics.snapshot(deployment(f"{base}t0", timeout=0.5), time.time())
        assert snapshot is None and ("backing off" in reason) is backing_off
    assert slamming.accepted == accepted + 1
    metrics.close()


class KeepAlivePrometheus(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive (a connection serves one read after another, as Prometheus' does):
    answers every query with one value, 0.5; the query ``held`` only once the server's ``release``
    is set. Records which client connection asked each query."""

    protocol_version = "HTTP/1.1"
    server: KeepAliveServer

    def do_GET(self) -> None:
        query = parse_qs(urlparse(self.path).query)["query"][0]
        self.server.asked.append((query, self.client_address))
        if query == "held":
            self.server.arrived.set()
            self.server.release.wait(10)
        row = {"metric": {}, "value": [time.time(), "0.5"]}
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [row]}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class KeepAliveServer(QuietServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), KeepAlivePrometheus)
        self.asked: list[tuple[str, Any]] = []
        self.arrived = threading.Event()
        self.release = threading.Event()


def _wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        threading.Event().wait(0.01)
    return condition()


def test_a_finished_reads_deadline_does_not_shut_the_next_reads_connection() -> None:
    # requests hands a connection back to the pool once the answer's body is read; the answer is
    # decoded and parsed after that. A read whose deadline passed then shut the socket another read
    # of the same endpoint had taken from the pool: that read, of a healthy Prometheus, failed
    # with ConnectionError ("Connection aborted") and the endpoint backed off.
    server = KeepAliveServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    metrics = PrometheusMetrics(url, clock=Clock())
    endpoint = Endpoint(url, own=True)
    client = metrics._client(endpoint)
    first_answered = threading.Event()

    def parse_past_the_deadline(field: str, result: list[Any]) -> QueryResult:
        # The first read's answer is in and its connection back in the pool; it is still parsing
        # (a big fleet answer, a descheduled thread) when its deadline passes, while the second read
        # waits for its answer on that connection.
        first_answered.set()
        watch = _WATCHING.watch
        assert server.arrived.wait(10)
        assert _wait_for(lambda: watch.expired, 10)
        server.release.set()
        return _own_answer(field, result)

    def read(query: str, parse: Callable[[str, list[Any]], QueryResult], timeout: float) -> Any:
        return metrics._read(client, endpoint, {"arrival_rate": query}, "", parse, timeout, False, lambda: None)

    try:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(read, "first", parse_past_the_deadline, 0.5)
            assert first_answered.wait(10)
            second = pool.submit(read, "held", _own_answer, 10)
            second_results, _, _ = second.result(timeout=20)
            first.result(timeout=20)
        assert second_results["arrival_rate"].value == 0.5
        assert metrics.backoff(url, own=True) is None
        # The second read did use the first one's kept-alive connection.
        assert [query for query, _ in server.asked] == ["first", "held"]
        assert server.asked[0][1] == server.asked[1][1]
    finally:
        server.release.set()
        metrics.close()
        server.shutdown()
        server.server_close()


class TlsProxy:
    """An https:// forward proxy: TLS to the client, then CONNECT tunnels (a corporate egress
    proxy). Counts the tunnels; a tunnel ends both ways when either side hangs up."""

    def __init__(self, tls: ssl.SSLContext) -> None:
        self.tls = tls
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=50)
        self.port = self.sock.getsockname()[1]
        self.tunnels = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(conn,), daemon=True).start()

    def _tunnel(self, conn: socket.socket) -> None:
        try:
            client = self.tls.wrap_socket(conn, server_side=True)
            head = b""
            while b"\r\n\r\n" not in head:
                head += client.recv(4096)
            host, port = head.split()[1].decode().rsplit(":", 1)
            upstream = socket.create_connection((host, int(port)))
        except OSError:
            conn.close()
            return
        self.tunnels += 1
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        self._pump(client, upstream)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            source.close()
            sink.close()

    def close(self) -> None:
        self.sock.close()


async def test_a_trickled_answer_through_an_https_proxy_is_hung_up_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Through an https:// proxy to an https Prometheus, urllib3 runs TLS in TLS and the connection's
    # socket is its SSLTransport, not a socket: shutting it down raised TypeError in the watch's
    # timer thread, the read went on as long as the answer trickled, and the endpoint was never
    # probed again ("backing off: an earlier read of it still runs", at every back-off's end).
    ca_file, cert_file, key_file = private_ca(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert_file, key_file)
    trickle, proxy = TrickleServer("body", tls), TlsProxy(tls)
    for name in ("NO_PROXY", "no_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", f"https://127.0.0.1:{proxy.port}")
    clock = Clock()
    metrics = PrometheusMetrics(None, clock=clock, credentials=PrometheusCredentials(ca_file=ca_file))
    try:
        dep = deployment(f"https://127.0.0.1:{trickle.port}/", "slow", timeout=1)
        snapshot, reason = await metrics.snapshot(dep, time.time())
        assert snapshot is None and "no answer within the snapshot's 1 s" in reason, reason
        assert proxy.tunnels == 1  # through the proxy, TLS in TLS
        assert await asyncio.to_thread(trickle.wait_hung_up, 1, 5) == 1
        # The read ended with its deadline: once the back-off has passed, a probe asks again.
        clock.now += BACKOFF_SECONDS
        snapshot, reason = await metrics.snapshot(dep, time.time())
        assert snapshot is None and "no answer within the snapshot's 1 s" in reason, reason
        assert proxy.tunnels == 2
    finally:
        metrics.close()
        trickle.close()
        proxy.close()


class TricklingProxy:
    """An http:// forward proxy that answers a CONNECT with a status line and then trickles its
    headers a byte every TRICKLE seconds, for ever; counts the tunnels the reader hung up on."""

    TRICKLE = 0.2

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=50)
        self.port = self.sock.getsockname()[1]
        self.hung_up = 0
        self._hung_up = threading.Condition()
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 Connection established\r\nX-Trickle: ")
                while not self._stop.wait(self.TRICKLE):  # the proxy's pace, not a wait for an effect
                    conn.sendall(b"a")
            except OSError:
                with self._hung_up:
                    self.hung_up += 1
                    self._hung_up.notify_all()

    def wait_hung_up(self, count: int, timeout: float) -> int:
        with self._hung_up:
            self._hung_up.wait_for(lambda: self.hung_up >= count, timeout)
            return self.hung_up

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


async def test_a_proxy_trickling_its_connect_reply_holds_no_query_thread_past_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An https Prometheus through an http:// proxy: the connection's tunnel (CONNECT) is set up
    # inside its connect, before the watch was told of its socket, so a proxy trickling its reply
    # held the query thread for as long as it trickled, past the snapshot's deadline.
    proxy = TricklingProxy()
    for name in ("NO_PROXY", "no_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
    metrics = PrometheusMetrics(None, clock=Clock())
    try:
        dep = deployment("https://127.0.0.1:9/", "tunnelled", timeout=1)
        snapshot, reason = await metrics.snapshot(dep, time.time())
        assert snapshot is None and "no answer within the snapshot's 1 s" in reason, reason
        assert await asyncio.to_thread(proxy.wait_hung_up, 1, 5) == 1
    finally:
        metrics.close()
        proxy.close()


async def test_a_probe_dropped_unrun_does_not_hold_the_next_one_back(
    hung: HungServer, slamming: SlammingServer
) -> None:
    # A probe after a back-off that found every query thread busy was dropped unrun ("not asked"),
    # yet its endpoint read "backing off" for 2 x timeoutSeconds + 1 s more, as if the probe ran.
    url = f"http://127.0.0.1:{slamming.port}"
    clock = Clock()
    metrics = PrometheusMetrics(None, clock=clock, threads=1, group_default_queries=False)
    try:
        failing = deployment(url, "failing", timeout=1)
        snapshot, reason = await metrics.snapshot(failing, time.time())
        assert snapshot is None and "ConnectionError" in reason and slamming.accepted == 1
        clock.now += BACKOFF_SECONDS
        held = deployment(f"http://127.0.0.1:{hung.port}", "held", timeout=2)
        (_, held_reason), (_, reason) = await asyncio.gather(
            metrics.snapshot(held, time.time()), metrics.snapshot(failing, time.time())
        )
        assert "no answer within the snapshot's 2 s" in held_reason
        assert reason == f"Prometheus at {url} not asked: its query threads (1) were busy for 1 s"
        # The thread free: the next snapshot is the probe.
        snapshot, reason = await metrics.snapshot(failing, time.time())
        assert "backing off" not in reason and "ConnectionError" in reason, reason
        assert slamming.accepted == 2
    finally:
        metrics.close()


async def test_no_read_starts_beside_one_running_past_its_deadline() -> None:
    # A read the watch cannot hang up on (a host name's DNS look-up, a SOCKS proxy) runs past its
    # deadline; its snapshot gives up on it without blaming the endpoint (the read records its own
    # outcome when it ends). Each snapshot after it started one more such read, each holding a
    # query thread, until every deployment's metrics read "not asked".
    metrics = PrometheusMetrics(None, clock=Clock())
    endpoint = Endpoint("http://prometheus.invalid:9090", own=False)
    resolved = threading.Event()
    reads: list[bool] = []

    def look_up(probe: bool, start: Callable[[], None]) -> Any:
        # Stands in for a read stuck in a look-up no socket's shutdown ends.
        start()
        reads.append(probe)
        resolved.wait(10)
        raise requests.ConnectionError("Failed to resolve 'prometheus.invalid'")

    try:
        with pytest.raises(_Unavailable, match=r"no answer within the snapshot's 0\.5 s"):
            await metrics._ask(endpoint, 0.5, look_up)
        with pytest.raises(_Unavailable, match="an earlier read of it still runs"):
            await metrics._ask(endpoint, 0.5, look_up)
        assert len(reads) == 1
        resolved.set()
        # Once it has ended, the next snapshot reads again.
        assert await asyncio.to_thread(_wait_for, lambda: not metrics._breaker.overdue(endpoint), 10)
        with pytest.raises(_Unavailable, match="Failed to resolve"):
            await metrics._ask(endpoint, 0.5, look_up)
        assert len(reads) == 2
    finally:
        resolved.set()
        metrics.close()


def test_each_read_given_up_on_holds_its_endpoint_until_that_read_ends() -> None:
    # Two snapshots that started together each gave up on their read: the endpoint stays held while
    # either still runs, so the first to end does not let a third read start beside the second.
    metrics = PrometheusMetrics(None, clock=Clock())
    endpoint = Endpoint("http://prometheus.invalid:9090", own=False)
    breaker = metrics._breaker
    try:
        first_ended, second_ended = breaker.gave_up(endpoint), breaker.gave_up(endpoint)
        first_ended(None)
        assert breaker.overdue(endpoint)
        with pytest.raises(_Skipped, match="an earlier read of it still runs"):
            breaker.admit(endpoint, 1.0)
        second_ended(None)
        assert not breaker.overdue(endpoint)
        assert breaker.admit(endpoint, 1.0) is False  # no back-off: an ordinary read, not a probe
    finally:
        metrics.close()
