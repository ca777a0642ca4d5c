"""The sandbox's stand-in for a Service's load balancing: a reverse proxy on 127.0.0.1, in its own process.

One router per Service forwards every request (any method and path, e.g.
``POST /v2/models/<name>/infer``) to one of the Service's **ready** endpoints. The choice is
**least outstanding requests**: the endpoint with the fewest requests this router has in flight to
it, ties broken round robin.

When the chosen endpoint refuses (429: its queue is full; 503: it is draining or not ready) or
cannot be reached (its process died), the request goes to the next endpoint, each at most once.
Answers when no endpoint takes it, both with a JSON body saying why:

- **503** ``{"error": "no ready endpoint ..."}`` when the Service has no ready endpoint (or none
  could be reached);
- **429** with ``Retry-After`` when every ready endpoint refused with 429.

Each router is a child process (:func:`main`, started by :class:`RouterProcess`), as kube-proxy is a
process apart from the API server on a node: the requests it proxies do not wait behind the API
server, the operator and the controllers on the sandbox's event loop, and it can run on another
core. :class:`Routers` starts one per Service and writes the Service's ready endpoints, read from
its EndpointSlices, to the child's stdin (one JSON line each time they change), so a pod that
stops being ready, or is terminating, gets no new request once its line has arrived; a request
sent meanwhile meets a closed port or a 503 and goes on to the next endpoint. The child exits
when its stdin closes (the sandbox stopped or died). ``GET /-/sandbox-router`` on the router
answers its counters (:class:`RouterCounters`: endpoints in use, requests sent and answered per
endpoint, its own refusals): where requests went, for tests and for a user with curl.
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
from neuronfleet.sandbox.children import die_with_parent
from neuronfleet.sandbox.endpoints import ready_endpoints
from neuronfleet.sandbox.store import Store, WatchEvent

log = logging.getLogger(__name__)

#: Statuses that mean "this endpoint does not take it now; another may".
REFUSALS = frozenset({429, 503})
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
    #: Requests forwarded to each endpoint, and those it answered (any status but a refusal).
    sent: Counter[str]
    answered: Counter[str]
    #: Answers the router gave itself: 503 (no endpoint), 429 (all refused).
    refused: Counter[int]

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RouterCounters:
        return cls(
            endpoints=tuple(doc["endpoints"]),
            sent=Counter(doc["sent"]),
            answered=Counter(doc["answered"]),
            refused=Counter({int(status): n for status, n in doc["refused"].items()}),
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
            200, {"endpoints": self.endpoints, "sent": self.sent, "answered": self.answered, "refused": self.refused}
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
        retry_after: list[str] = []
        unreachable = 0
        for endpoint in candidates:
            self.outstanding[endpoint] += 1
            self.sent[endpoint] += 1
            host, port = _address(endpoint)
            forwarded = http1.encode_request(request.method, request.target, endpoint, headers, request.body)
            try:
                upstream = await self._pool.exchange(
                    host, port, forwarded, self.timeout_s, head=request.method == "HEAD"
                )
            except (OSError, TimeoutError):
                unreachable += 1  # a process that died or stopped listening: try the next one
                continue
            finally:
                self.outstanding[endpoint] -= 1
            if upstream.status in REFUSALS:
                retry_after.append((upstream.header(b"retry-after") or b"1").decode("latin-1"))
                if upstream.status == 503:
                    unreachable += 1
                continue
            self.answered[endpoint] += 1
            response_headers = http1.forwardable(upstream.headers)
            response_headers.append((b"X-Sandbox-Endpoint", endpoint.encode()))
            if request.method == "HEAD" and (length := upstream.header(b"content-length")) is not None:
                response_headers.append((b"Content-Length", length))  # of the body a GET would get
            return http1.Response(upstream.status, response_headers, upstream.body)
        if unreachable == len(candidates):
            return self._refuse(503, f"no ready endpoint of {self.service} answered")
        return self._refuse(
            429,
            f"every ready endpoint of {self.service} refused the request (queues full)",
            retry_after=max(retry_after, key=_seconds, default="1"),
        )

    def _refuse(self, status: int, message: str, retry_after: str | None = None) -> http1.Response:
        self.refused[status] += 1
        return http1.Response.json(status, {"error": message}, [(b"Retry-After", (retry_after or "1").encode())])


def _address(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def _seconds(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return 1.0


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
        self._process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C reaches the sandbox, which stops it (stdin closes)
            preexec_fn=die_with_parent(),  # and a killed sandbox's router dies at once (sandbox.children)
        )
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
            if process.stdin is not None:
                process.stdin.close()
            try:
                await asyncio.wait_for(process.wait(), 10.0)
            except TimeoutError:
                process.kill()
                await process.wait()
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
        router.push([f"{ip}:{port}" for ip, port, _ in ready_endpoints(self.store, namespace, service)])

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
