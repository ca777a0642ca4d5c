"""The sandbox's stand-in for a Service's load balancing: a reverse proxy on 127.0.0.1, in its own process.

One router per Service forwards every request (any method and path, e.g.
``POST /v2/models/<name>/infer``) to one of the Service's **ready** endpoints; when none is ready,
to those still serving while they terminate, as kube-proxy falls back to them. The choice is
**least outstanding requests**: the endpoint with the fewest requests this router has in flight to
it, ties broken round robin.

A request goes to another endpoint only when no connection to the chosen one could be made (its
process died or stopped listening: nothing was sent); each endpoint is tried at most once and the
router counts these re-sends. Anything else is the client's, as through kube-proxy:

- the endpoint's answer, whatever its status (a 429 of a full queue, a 503 of a draining server,
  with their bodies and ``Retry-After``), passed through;
- **502** ``{"error": "... dropped the request ..."}`` when the endpoint took the request and its
  connection closed before a whole answer came (a server killed mid-request): the request is
  lost, and the client must see it;
- **504** ``{"error": "... did not answer ..."}`` when the endpoint took longer than the router's
  timeout (60 s): re-sending it could run it twice;
- **503** ``{"error": "no ready endpoint ..."}`` when the Service has no ready endpoint (nor one
  serving while it terminates), or none could be connected to.

The 502 and 504 carry ``X-Sandbox-Endpoint`` (the endpoint that lost the request), as answers do.

Each router is a child process (:func:`main`, started by :class:`RouterProcess`), as kube-proxy is a
process apart from the API server on a node: the requests it proxies do not wait behind the API
server, the operator and the controllers on the sandbox's event loop, and it can run on another
core. :class:`Routers` starts one per Service and writes the Service's ready endpoints (else its
serving terminating ones), read from its EndpointSlices, to the child's stdin (one JSON line each
time they change), so a pod that stops being ready, or is terminating while another is ready, gets
no new request once its line has arrived; a request sent meanwhile meets a closed port (and goes
on to the next endpoint) or the server's own 503. The child exits when its stdin closes (the
sandbox stopped or died). ``GET /-/sandbox-router`` on the router
answers its counters (:class:`RouterCounters`: endpoints in use, requests sent, answered, dropped
and timed out per endpoint, re-sends, its own refusals): where requests went, for tests, the demo's
report and a user with curl.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import uvloop

from neuronfleet.aio import wait_event
from neuronfleet.sandbox import http1
from neuronfleet.sandbox.children import start_piped_helper, stop_piped_helper
from neuronfleet.sandbox.endpoints import routed_endpoints
from neuronfleet.sandbox.store import Store, WatchEvent

log = logging.getLogger(__name__)

#: Largest request body a router takes (the servers have their own, lower limits).
MAX_BODY_BYTES = 64 * 1024 * 1024
#: Where a router answers its counters (not forwarded).
COUNTERS_PATH = "/-/sandbox-router"
#: How long a router process may take to listen (it imports the sandbox: about 2 s on 2 cores).
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RouterCounters:
    """What a router has done: the endpoints it uses now, requests per endpoint, its own answers."""

    endpoints: tuple[str, ...]
    #: Requests forwarded to each endpoint (each attempt), and those it answered (any status).
    sent: Counter[str]
    answered: Counter[str]
    #: Answers the router gave itself: 503 (no endpoint could be reached), 502 (dropped), 504 (timed out).
    refused: Counter[int]
    #: Requests an endpoint took and then dropped (answered 502), and those it did not answer in time (504).
    dropped: Counter[str]
    timed_out: Counter[str]
    #: Requests sent on to another endpoint after a connection to one could not be made.
    resent: int

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RouterCounters:
        return cls(
            endpoints=tuple(doc["endpoints"]),
            sent=Counter(doc["sent"]),
            answered=Counter(doc["answered"]),
            refused=Counter({int(status): n for status, n in doc["refused"].items()}),
            dropped=Counter(doc["dropped"]),
            timed_out=Counter(doc["timed_out"]),
            resent=int(doc["resent"]),
        )


class ServiceRouter:
    """Reverse proxy for one Service's ready endpoints (least outstanding requests).

    ``await start()``, set ``endpoints``, then send requests to ``url``; ``await stop()``.
    The process that runs it (:func:`main`) keeps ``endpoints`` current. It speaks HTTP/1.1 through
    :mod:`neuronfleet.sandbox.http1` (keep-alive both ways), not aiohttp: it is on every request's
    path, and this costs about 0.4x aiohttp's CPU per request (bench/bench_http_path.py).
    """

    def __init__(self, service: str, *, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 60.0) -> None:
        self.service = service
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self._endpoints: list[str] = []
        #: Requests in flight per endpoint.
        self.outstanding: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()
        self.answered: Counter[str] = Counter()
        self.refused: Counter[int] = Counter()
        self.dropped: Counter[str] = Counter()
        self.timed_out: Counter[str] = Counter()
        self.resent = 0
        self._turn = itertools.count()
        self._server: asyncio.Server | None = None
        self._pool = http1.ConnectionPool()
        self.url = ""

    @property
    def endpoints(self) -> list[str]:
        """The Service's ready endpoints, as ``ip:port``."""
        return self._endpoints

    @endpoints.setter
    def endpoints(self, endpoints: list[str]) -> None:
        self._endpoints = list(endpoints)
        self._pool.discard({_address(e) for e in self._endpoints})

    async def start(self) -> ServiceRouter:
        self._server = await http1.serve(self._handle, self.host, self.port, MAX_BODY_BYTES)
        self.port = int(self._server.sockets[0].getsockname()[1])
        self.url = f"http://{self.host}:{self.port}"
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        self._pool.close()

    def _counters(self) -> http1.Response:
        return http1.Response.json(
            200,
            {
                "endpoints": self.endpoints,
                "sent": self.sent,
                "answered": self.answered,
                "refused": self.refused,
                "dropped": self.dropped,
                "timed_out": self.timed_out,
                "resent": self.resent,
            },
        )

    def _order(self, endpoints: list[str]) -> list[str]:
        """Least outstanding first; among equals, a rotating start (round robin)."""
        if not endpoints:
            return []
        shift = next(self._turn) % len(endpoints)
        rotated = endpoints[shift:] + endpoints[:shift]
        return sorted(rotated, key=lambda e: self.outstanding[e])  # stable: keeps the rotation for ties

    async def _handle(self, request: http1.Request) -> http1.Response:
        if request.method == "GET" and request.target == COUNTERS_PATH.encode():
            return self._counters()
        candidates = self._order(self.endpoints)
        if not candidates:
            return self._refuse(503, f"no ready endpoint for service {self.service}")
        headers = http1.forwardable(request.headers)
        for attempt, endpoint in enumerate(candidates):
            # What kube-proxy does, and no more. In iptables or ipvs mode it only rewrites packets:
            # the kernel picks an endpoint for each new connection (iptables: at random among the
            # ready ones) and every packet of that connection goes there. It never parses HTTP,
            # never sees a status, never re-sends a byte. When the endpoint's process is gone, the
            # client's connect is refused (or times out) and a client that connects again lands on
            # an endpoint still in the rules; the userspace mode (removed in 1.26) dialled the next
            # endpoint itself when a connect failed. That is the one re-send here: no connection,
            # so nothing was sent and the request cannot have run. A request the endpoint took and
            # then lost (its connection closed before a whole answer, or no answer in time), and any
            # answer it gave (429, 503), are the client's to see, as through kube-proxy: re-sending
            # them would hide a lost request, and could run one twice (review r6).
            if attempt:
                self.resent += 1
            self.outstanding[endpoint] += 1
            self.sent[endpoint] += 1
            host, port = _address(endpoint)
            forwarded = http1.encode_request(request.method, request.target, endpoint, headers, request.body)
            try:
                upstream = await self._pool.exchange(
                    host, port, forwarded, self.timeout_s, head=request.method == "HEAD"
                )
            except http1.ConnectFailed:
                continue  # nothing was sent: the next endpoint may take it
            except http1.NoAnswer as exc:
                self.dropped[endpoint] += 1
                return self._fail(502, f"endpoint {endpoint} of {self.service} dropped the request: {exc}", endpoint)
            except TimeoutError:
                self.timed_out[endpoint] += 1
                return self._fail(
                    504, f"endpoint {endpoint} of {self.service} did not answer within {self.timeout_s:g} s", endpoint
                )
            finally:
                self.outstanding[endpoint] -= 1
            self.answered[endpoint] += 1
            response_headers = http1.forwardable(upstream.headers)
            response_headers.append((b"X-Sandbox-Endpoint", endpoint.encode()))
            if request.method == "HEAD" and (length := upstream.header(b"content-length")) is not None:
                response_headers.append((b"Content-Length", length))  # of the body a GET would get
            return http1.Response(upstream.status, response_headers, upstream.body)
        return self._refuse(503, f"no ready endpoint of {self.service} could be reached")

    def _refuse(self, status: int, message: str, retry_after: str | None = None) -> http1.Response:
        self.refused[status] += 1
        return http1.Response.json(status, {"error": message}, [(b"Retry-After", (retry_after or "1").encode())])

    def _fail(self, status: int, message: str, endpoint: str) -> http1.Response:
        """The router's own answer for a request an endpoint took and did not answer (502, 504)."""
        self.refused[status] += 1
        return http1.Response.json(status, {"error": message}, [(b"X-Sandbox-Endpoint", endpoint.encode())])


def _address(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


async def _serve(service: str, host: str, timeout_s: float) -> None:
    """The router process: listen, say where on stdout, take endpoint lists from stdin until it
    closes, acknowledging each on stdout (``{"applied": n}``: the n-th list is in use)."""
    router = await ServiceRouter(service, host=host, timeout_s=timeout_s).start()
    try:
        loop = asyncio.get_running_loop()
        updates = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(updates), sys.stdin)
        print(json.dumps({"url": router.url}), flush=True)
        applied = 0
        while line := await updates.readline():
            router.endpoints = [str(e) for e in json.loads(line)]
            applied += 1
            print(json.dumps({"applied": applied}), flush=True)
    finally:
        await router.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -c 'from neuronfleet.sandbox.router import main; main()'",
        description="One sandbox Service's router: proxies requests to the ready endpoints read from stdin "
        "(a JSON list of ip:port per line, each acknowledged on stdout); exits when stdin closes.",
    )
    parser.add_argument("--service", required=True, help="namespace/name, for messages")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="per forwarded request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    uvloop.run(_serve(args.service, args.host, args.timeout_s))  # on every request's path: the leaner loop


class RouterProcess:
    """The sandbox's handle on one Service's router process: start, push endpoints, read counters, stop."""

    def __init__(self, namespace: str, service: str, *, host: str = "127.0.0.1") -> None:
        self.namespace = namespace
        self.service = service
        self.host = host
        self.url = ""
        self._process: asyncio.subprocess.Process | None = None
        self._readers: list[asyncio.Task[None]] = []
        self._pushed: list[str] | None = None
        #: Endpoint lists written to the process, and those it has acknowledged.
        self._pushes = 0
        self._applied = 0
        self._acknowledged = asyncio.Condition()
        self._listening: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> RouterProcess:
        # -c, not -m: the sandbox package imports this module, so runpy would run it twice.
        argv = [sys.executable, "-c", "from neuronfleet.sandbox.router import main; main()"]
        argv += ["--service", f"{self.namespace}/{self.service}", "--host", self.host]
        self._process = await start_piped_helper(argv)
        assert self._process.stdout is not None and self._process.stderr is not None
        loop = asyncio.get_running_loop()
        self._readers = [
            loop.create_task(self._read_replies(self._process.stdout)),
            loop.create_task(self._log(self._process.stderr)),
        ]
        try:
            self.url = await asyncio.wait_for(asyncio.shield(self._listening), START_TIMEOUT_S)
        except (TimeoutError, OSError) as exc:
            await self.stop()
            raise OSError(f"the router of {self.namespace}/{self.service} did not start: {exc!r}") from exc
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        return self

    async def _read_replies(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            reply = json.loads(line)
            if "url" in reply and not self._listening.done():
                self._listening.set_result(str(reply["url"]))
            elif "applied" in reply:
                async with self._acknowledged:
                    self._applied = int(reply["applied"])
                    self._acknowledged.notify_all()
        if not self._listening.done():
            self._listening.set_exception(OSError("the router process exited"))
        async with self._acknowledged:
            self._acknowledged.notify_all()  # synced() callers: it will never catch up

    async def _log(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            log.warning("router %s/%s: %s", self.namespace, self.service, line.decode(errors="replace").rstrip())

    @property
    def exited(self) -> bool:
        return self._process is None or self._process.returncode is not None

    def push(self, endpoints: list[str]) -> None:
        """Hand the router the Service's ready endpoints (nothing is written when they did not change)."""
        stdin = self._process.stdin if self._process is not None else None
        if endpoints == self._pushed or stdin is None or stdin.is_closing():
            return  # unchanged, or the process is gone: Routers.run starts another and pushes to it
        stdin.write(json.dumps(endpoints).encode() + b"\n")
        self._pushed = list(endpoints)
        self._pushes += 1

    async def synced(self, timeout: float = 10.0) -> None:
        """Until the process uses the last endpoints pushed to it (a moment after the push)."""
        async with asyncio.timeout(timeout), self._acknowledged:
            await self._acknowledged.wait_for(lambda: self._applied >= self._pushes or self.exited)
        if self._applied < self._pushes:
            raise OSError(f"the router of {self.namespace}/{self.service} exited")

    async def counters(self) -> RouterCounters:
        """The router's counters, asked of the process."""
        assert self._session is not None, "start() first"
        async with self._session.get(f"{self.url}{COUNTERS_PATH}") as response:
            response.raise_for_status()
            return RouterCounters.from_json(await response.json())

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        process, self._process = self._process, None
        if process is not None:
            await stop_piped_helper(process, 10.0)
        if self._readers:
            await asyncio.wait(self._readers, timeout=5.0)
            self._readers.clear()


class Routers:
    """One :class:`RouterProcess` per Service with a selector, started and stopped with the Services."""

    def __init__(self, store: Store, host: str = "127.0.0.1") -> None:
        self.store = store
        self.host = host
        self.routers: dict[tuple[str, str], RouterProcess] = {}
        self._services = store.resource("", "services")
        self._wake = asyncio.Event()
        self._routed = asyncio.Event()
        #: Called with (namespace, service, url) when a Service's router starts listening.
        self.announce: Callable[[str, str, str], object] | None = None
        store.listeners.append(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        if event.resource == ("", "services"):
            self._wake.set()
        elif event.resource == ("discovery.k8s.io", "endpointslices"):
            namespace = event.obj["metadata"].get("namespace")
            for (router_namespace, service), router in self.routers.items():
                if router_namespace == namespace:
                    self._push(router, router_namespace, service)

    def _push(self, router: RouterProcess, namespace: str, service: str) -> None:
        router.push([f"{ip}:{port}" for ip, port, _ in routed_endpoints(self.store, namespace, service)])

    def url(self, namespace: str, service: str) -> str | None:
        router = self.routers.get((namespace, service))
        return router.url if router is not None else None

    def get(self, namespace: str, service: str) -> RouterProcess | None:
        return self.routers.get((namespace, service))

    async def wait_url(self, namespace: str, service: str, timeout: float = 60.0) -> str:
        """The router's URL once the Service exists and its router listens."""
        async with asyncio.timeout(timeout):
            while (url := self.url(namespace, service)) is None:
                self._routed.clear()
                await wait_event(self._routed, 1.0)
        return url

    async def run(self) -> None:
        while True:
            for key in [key for key, router in self.routers.items() if router.exited]:
                log.error("sandbox: the router of service %s/%s exited; starting another", *key)
                await self.routers.pop(key).stop()
            wanted = {
                (s["metadata"]["namespace"], s["metadata"]["name"])
                for s in self.store.iter(self._services)
                if (s.get("spec") or {}).get("selector") and not s["metadata"].get("deletionTimestamp")
            }
            for key in sorted(wanted - set(self.routers)):
                try:
                    router = await RouterProcess(*key, host=self.host).start()
                except OSError:
                    log.exception("sandbox: cannot start the router of service %s/%s", *key)
                    continue
                self.routers[key] = router
                self._push(router, *key)
                log.info("sandbox: service %s/%s is routed at %s", key[0], key[1], router.url)
                if self.announce is not None:
                    self.announce(key[0], key[1], router.url)
                self._routed.set()
            for key in sorted(set(self.routers) - wanted):
                await self.routers.pop(key).stop()
            self._wake.clear()
            await wait_event(self._wake, 5.0)

    async def stop(self) -> None:
        routers = list(self.routers.values())
        self.routers.clear()
        await asyncio.gather(*(router.stop() for router in routers))
        with contextlib.suppress(ValueError):
            self.store.listeners.remove(self._on_event)


__all__ = ["COUNTERS_PATH", "RouterCounters", "RouterProcess", "Routers", "ServiceRouter", "main"]
