"""Lean HTTP/1.1 on asyncio protocols, parsed by httptools: the hot path of the sandbox router and the demo client.

Every request of the live demo crosses the measuring client and a Service's router before it
reaches a model server, all on the same 2-core machine. With aiohttp's client and server those
two hops cost about 0.8 and 1.0 ms of CPU per request, half of the whole path's CPU: CPU the
servers under test then lack, most of all when the hypervisor takes its share. Neither hop needs
a framework: the client sends one fixed request over and over, the router forwards a request and
its answer. So this module keeps only what they use, on httptools (the HTTP parser uvicorn runs):

- :class:`ConnectionPool` / :class:`ClientConnection`: send a request's bytes over a keep-alive
  connection and await its parsed :class:`Response`. Failures say what happened:
  :class:`ConnectFailed` (no connection: nothing was sent), :class:`NoAnswer` (sent, then the
  connection closed or the answer was not HTTP), ``TimeoutError``.
- :class:`ServerConnection`: read requests from a client connection (keep-alive, pipelining
  answered in order, chunked bodies, ``Expect: 100-continue``), hand each to an async handler and
  write its answer. A request that is not HTTP is answered 400, a body over the limit 413, and the
  connection closed.

Not supported, as the sandbox never sends them: responses delimited by the connection's close (no
Content-Length, not chunked: :class:`NoAnswer`), upgrades (400), and TLS.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import http
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import httptools

log = logging.getLogger(__name__)

Headers = list[tuple[bytes, bytes]]

#: Hop-by-hop headers a proxy does not forward (RFC 9110 section 7.6.1), plus the framing headers
#: each hop writes itself (Content-Length, Transfer-Encoding) and Expect (answered by the first hop).
HOP_HEADERS = frozenset(
    {
        b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"proxy-connection", b"te",
        b"trailer", b"transfer-encoding", b"upgrade", b"host", b"content-length", b"expect",
    }
)  # fmt: skip
#: Requests a server connection reads ahead of the one being answered before it stops reading.
MAX_PIPELINED = 16


@dataclass
class Request:
    method: str
    #: The request target as sent: path and query.
    target: bytes
    headers: Headers
    body: bytes
    keep_alive: bool = True

    def header(self, name: bytes) -> bytes | None:
        return _header(self.headers, name)


@dataclass
class Response:
    status: int
    headers: Headers = field(default_factory=list)
    body: bytes = b""
    keep_alive: bool = True

    def header(self, name: bytes) -> bytes | None:
        return _header(self.headers, name)

    @classmethod
    def json(cls, status: int, doc: Any, headers: Headers | None = None) -> Response:
        return cls(status, [(b"Content-Type", b"application/json"), *(headers or [])], json.dumps(doc).encode())


def _header(headers: Headers, name: bytes) -> bytes | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def forwardable(headers: Headers) -> Headers:
    """The end-to-end headers of a message: what a proxy passes on."""
    return [(key, value) for key, value in headers if key.lower() not in HOP_HEADERS]


def encode_request(method: str, target: bytes, host: str, headers: Headers, body: bytes) -> bytes:
    """A request's bytes with its body's length (headers must not carry their own framing)."""
    lines = [f"{method} ".encode() + target + b" HTTP/1.1", b"Host: " + host.encode()]
    lines += [key + b": " + value for key, value in headers]
    if body or method not in ("GET", "HEAD", "DELETE", "OPTIONS"):
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def encode_response(response: Response, *, head: bool = False) -> bytes:
    try:
        reason = http.HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [b"HTTP/1.1 %d " % response.status + reason.encode()]
    lines += [key + b": " + value for key, value in response.headers]
    if not (head and response.header(b"content-length") is not None):
        # An answer to HEAD may carry the length a GET's body would have (a proxy passes it on).
        lines.append(b"Content-Length: %d" % len(response.body))
    if not response.keep_alive:
        lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + (b"" if head else response.body)


# ------------------------------------------------------------------------------------- client side


class ConnectFailed(ConnectionError):
    """No connection could be made: the request was not sent."""


class NoAnswer(ConnectionError):
    """The request was sent (or being sent) and no whole answer came: the connection closed or spoke no HTTP."""


class ClientConnection(asyncio.Protocol):
    """One keep-alive connection to a server: write a request, await its parsed answer, one at a time."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[Response] | None = None
        self._head = False
        self._headers: Headers = []
        self._body: list[bytes] = []
        self._keep_alive = False
        self.closed = False
        self.idle_since = 0.0

    @classmethod
    async def open(cls, host: str, port: int, timeout: float) -> ClientConnection:
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(loop.create_connection(cls, host, port), timeout)
        except (OSError, TimeoutError) as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or exc
            raise ConnectFailed(f"cannot connect to {host}:{port}: {reason}") from exc
        return connection

    async def exchange(self, request: bytes, timeout: float, *, head: bool = False) -> Response:
        """Send ``request`` (its bytes) and return the answer; ``head``: the answer has no body."""
        if self.closed or self._transport is None or self._waiter is not None:
            raise NoAnswer("the connection is closed or busy")
        self._waiter = asyncio.get_running_loop().create_future()
        self._head = head
        self._transport.write(request)
        try:
            return await asyncio.wait_for(self._waiter, timeout)
        finally:
            self._waiter = None

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(NoAnswer(f"the answer is not HTTP: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(NoAnswer("the server closed the connection before answering"))

    def _fail(self, exc: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._headers, self._body = [], []

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._keep_alive = self._parser.should_keep_alive()
        if self._head:
            # The parser would wait for the body its Content-Length announces: answer now and
            # retire the connection (its parser's state is past use).
            self._keep_alive = False
            self.on_message_complete()
            self.close()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            status = self._parser.get_status_code()
            self._waiter.set_result(Response(status, self._headers, b"".join(self._body), self._keep_alive))


class ConnectionPool:
    """Keep-alive connections per ``host:port``; the most recently used idle one serves the next request."""

    def __init__(self, idle_timeout_s: float = 30.0) -> None:
        #: A connection idle longer than this is closed rather than reused: the server may be closing it.
        self.idle_timeout_s = idle_timeout_s
        self._idle: dict[tuple[str, int], list[ClientConnection]] = collections.defaultdict(list)
        self.opened = 0

    async def exchange(self, host: str, port: int, request: bytes, timeout: float, *, head: bool = False) -> Response:
        """Send ``request`` to ``host:port`` and return the answer.

        Raises :class:`ConnectFailed` (nothing sent), :class:`NoAnswer` or ``TimeoutError``.
        """
        connection = self._take(host, port)
        if connection is None:
            connection = await ClientConnection.open(host, port, timeout)
            self.opened += 1
        try:
            response = await connection.exchange(request, timeout, head=head)
        except BaseException:
            connection.close()  # its state is unknown: an answer may still come on it
            raise
        if response.keep_alive and not connection.closed:
            connection.idle_since = time.monotonic()
            self._idle[(host, port)].append(connection)
        else:
            connection.close()
        return response

    def _take(self, host: str, port: int) -> ClientConnection | None:
        idle = self._idle.get((host, port))
        stale_before = time.monotonic() - self.idle_timeout_s
        while idle:
            connection = idle.pop()
            if not connection.closed and connection.idle_since >= stale_before:
                return connection
            connection.close()
        return None

    def discard(self, keep: set[tuple[str, int]]) -> None:
        """Close the idle connections to every address but ``keep``."""
        for address in [a for a in self._idle if a not in keep]:
            for connection in self._idle.pop(address):
                connection.close()

    def close(self) -> None:
        self.discard(set())


# ------------------------------------------------------------------------------------- server side

Handler = Callable[[Request], Awaitable[Response]]


class ServerConnection(asyncio.Protocol):
    """One client's connection to a server: parse its requests, answer each with ``handler``, in order."""

    def __init__(self, handler: Handler, max_body_bytes: int) -> None:
        self._handler = handler
        self._max_body = max_body_bytes
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._pending: collections.deque[Request] = collections.deque()
        self._worker: asyncio.Task[None] | None = None
        self._url: list[bytes] = []
        self._headers: Headers = []
        self._body: list[bytes] = []
        self._size = 0
        self._refused = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, "protocol upgrades are not supported here")
        except httptools.HttpParserError as exc:
            if not self._refused:
                self._refuse(400, f"not an HTTP/1.1 request: {exc}")

    def connection_lost(self, exc: Exception | None) -> None:
        self._pending.clear()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url, self._headers, self._body, self._size = [], [], [], 0

    def on_url(self, url: bytes) -> None:
        self._url.append(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        length = _header(self._headers, b"content-length")
        if length is not None and length.isdigit() and int(length) > self._max_body:
            self._refuse(413, f"request body larger than {self._max_body} bytes")
            return
        expect = _header(self._headers, b"expect")
        if expect is not None and expect.lower() == b"100-continue" and self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return
        self._size += len(body)
        if self._size > self._max_body:
            self._refuse(413, f"request body larger than {self._max_body} bytes")
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        method = self._parser.get_method().decode("ascii", errors="replace")
        request = Request(
            method, b"".join(self._url), self._headers, b"".join(self._body), self._parser.should_keep_alive()
        )
        self._pending.append(request)
        if len(self._pending) > MAX_PIPELINED and self._transport is not None:
            self._transport.pause_reading()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._answer_pending())

    async def _answer_pending(self) -> None:
        while self._pending and self._transport is not None and not self._transport.is_closing():
            request = self._pending.popleft()
            try:
                response = await self._handler(request)
            except Exception:
                log.exception("error answering %s %r", request.method, request.target)
                response = Response.json(500, {"error": "internal error while answering the request"})
            response.keep_alive = response.keep_alive and request.keep_alive
            if self._transport.is_closing():
                return
            self._transport.write(encode_response(response, head=request.method == "HEAD"))
            if not response.keep_alive:
                self._transport.close()
                return
            if len(self._pending) <= MAX_PIPELINED:
                self._transport.resume_reading()

    def _refuse(self, status: int, message: str) -> None:
        """Answer a request that cannot be read, after those before it, and close the connection."""
        self._refused = True  # from here on nothing read is parsed or answered
        answer = Response.json(status, {"error": message})
        answer.keep_alive = False
        answering = self._worker

        async def refuse() -> None:
            if answering is not None:
                with contextlib.suppress(Exception):
                    await answering  # the requests read before this one are answered first
            if self._transport is not None and not self._transport.is_closing():
                self._transport.write(encode_response(answer))
                self._transport.close()

        self._worker = asyncio.get_running_loop().create_task(refuse())


async def serve(handler: Handler, host: str, port: int, max_body_bytes: int) -> asyncio.Server:
    """Listen on ``host:port`` (0: any free port) and answer every request with ``handler``."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: ServerConnection(handler, max_body_bytes), host, port)
