"""The sandbox's stand-in for a Service's load balancing: an aiohttp reverse proxy on 127.0.0.1.

One :class:`ServiceRouter` per Service forwards every request (any method and path, e.g.
``POST /v2/models/<name>/infer``) to one of the Service's **ready** endpoints, read from its
EndpointSlices at each request (so a pod that stops being ready, or is terminating, gets no new
request from the next one on). The choice is **least outstanding requests**: the endpoint with the
fewest requests this router has in flight to it, ties broken round robin.

When the chosen endpoint refuses (429: its queue is full; 503: it is draining or not ready) or
cannot be reached (its process died), the request goes to the next endpoint, each at most once.
Answers when no endpoint takes it, both with a JSON body saying why:

- **503** ``{"error": "no ready endpoint ..."}`` when the Service has no ready endpoint (or none
  could be reached);
- **429** with ``Retry-After`` when every ready endpoint refused with 429.

:class:`Routers` keeps one router per Service of a cluster (``routers.url(namespace, name)``).
Counters per endpoint (``sent``, ``answered``) let tests and the demo see where requests went.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import Counter
from collections.abc import Callable

import aiohttp
from aiohttp import web

from neuronfleet.sandbox.endpoints import ready_endpoints
from neuronfleet.sandbox.store import Store, WatchEvent

log = logging.getLogger(__name__)

#: Hop-by-hop headers a proxy must not forward (RFC 9110 section 7.6.1), plus those aiohttp sets.
HOP_HEADERS = frozenset(
    h.lower()
    for h in (
        "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer",
        "Transfer-Encoding", "Upgrade", "Host", "Content-Length", "Content-Encoding",
    )
)  # fmt: skip
#: Statuses that mean "this endpoint does not take it now; another may".
REFUSALS = frozenset({429, 503})


class ServiceRouter:
    """Reverse proxy for one Service's ready endpoints (least outstanding requests).

    ``await start()`` then send requests to ``url``; ``await stop()``.
    """

    def __init__(
        self,
        store: Store,
        namespace: str,
        service: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        timeout_s: float = 60.0,
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.service = service
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        #: Requests in flight per endpoint ("ip:port").
        self.outstanding: Counter[str] = Counter()
        #: Requests forwarded to each endpoint, and those it answered (any status but a refusal).
        self.sent: Counter[str] = Counter()
        self.answered: Counter[str] = Counter()
        #: Answers the router gave itself: 503 (no endpoint), 429 (all refused).
        self.refused: Counter[int] = Counter()
        self._turn = itertools.count()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    async def start(self) -> ServiceRouter:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self.url = f"http://{self.host}:{self.port}"
        # No connection pooling limit below the servers' own queues: 429s come from them, not from us.
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.timeout_s), connector=aiohttp.TCPConnector(limit=0)
        )
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def endpoints(self) -> list[str]:
        """The Service's ready endpoints now, as ``ip:port``."""
        return [f"{ip}:{port}" for ip, port, _ in ready_endpoints(self.store, self.namespace, self.service)]

    def _order(self, endpoints: list[str]) -> list[str]:
        """Least outstanding first; among equals, a rotating start (round robin)."""
        if not endpoints:
            return []
        shift = next(self._turn) % len(endpoints)
        rotated = endpoints[shift:] + endpoints[:shift]
        return sorted(rotated, key=lambda e: self.outstanding[e])  # stable: keeps the rotation for ties

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        candidates = self._order(self.endpoints())
        if not candidates:
            return self._refuse(503, f"no ready endpoint for service {self.namespace}/{self.service}")
        retry_after: list[str] = []
        unreachable = 0
        assert self._session is not None
        for endpoint in candidates:
            self.outstanding[endpoint] += 1
            self.sent[endpoint] += 1
            try:
                async with self._session.request(
                    request.method, f"http://{endpoint}{request.rel_url}", data=body, headers=headers
                ) as upstream:
                    payload = await upstream.read()
                    if upstream.status in REFUSALS:
                        retry_after.append(upstream.headers.get("Retry-After", "1"))
                        if upstream.status == 503:
                            unreachable += 1
                        continue
                    self.answered[endpoint] += 1
                    response_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS}
                    response_headers["X-Sandbox-Endpoint"] = endpoint
                    return web.Response(status=upstream.status, body=payload, headers=response_headers)
            except (aiohttp.ClientConnectionError, OSError, TimeoutError):
                unreachable += 1  # a process that died or stopped listening: try the next one
            finally:
                self.outstanding[endpoint] -= 1
        if unreachable == len(candidates):
            return self._refuse(503, f"no ready endpoint of {self.namespace}/{self.service} answered")
        return self._refuse(
            429,
            f"every ready endpoint of {self.namespace}/{self.service} refused the request (queues full)",
            retry_after=max(retry_after, key=_seconds, default="1"),
        )

    def _refuse(self, status: int, message: str, retry_after: str | None = None) -> web.Response:
        self.refused[status] += 1
        headers = {"Retry-After": retry_after or "1"}
        return web.json_response({"error": message}, status=status, headers=headers)


def _seconds(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return 1.0


class Routers:
    """One :class:`ServiceRouter` per Service with a selector, started and stopped with the Services."""

    def __init__(self, store: Store, host: str = "127.0.0.1") -> None:
        self.store = store
        self.host = host
        self.routers: dict[tuple[str, str], ServiceRouter] = {}
        self._services = store.resource("", "services")
        self._wake = asyncio.Event()
        #: Called with (namespace, service, url) when a Service's router starts listening.
        self.announce: Callable[[str, str, str], object] | None = None
        store.listeners.append(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        if event.resource == ("", "services"):
            self._wake.set()

    def url(self, namespace: str, service: str) -> str | None:
        router = self.routers.get((namespace, service))
        return router.url if router is not None else None

    def get(self, namespace: str, service: str) -> ServiceRouter | None:
        return self.routers.get((namespace, service))

    async def wait_url(self, namespace: str, service: str, timeout: float = 60.0) -> str:
        """The router's URL once the Service exists and its router listens."""
        async with asyncio.timeout(timeout):
            while (url := self.url(namespace, service)) is None:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 1.0)
        return url

    async def run(self) -> None:
        while True:
            wanted = {
                (s["metadata"]["namespace"], s["metadata"]["name"])
                for s in self.store.iter(self._services)
                if (s.get("spec") or {}).get("selector") and not s["metadata"].get("deletionTimestamp")
            }
            for key in sorted(wanted - set(self.routers)):
                router = ServiceRouter(self.store, *key, host=self.host)
                try:
                    await router.start()
                except OSError:
                    log.exception("sandbox: cannot start the router of service %s/%s", *key)
                    continue
                self.routers[key] = router
                log.info("sandbox: service %s/%s is routed at %s", key[0], key[1], router.url)
                if self.announce is not None:
                    self.announce(key[0], key[1], router.url)
            for key in sorted(set(self.routers) - wanted):
                await self.routers.pop(key).stop()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 5.0)

    async def stop(self) -> None:
        for router in self.routers.values():
            await router.stop()
        self.routers.clear()
        with contextlib.suppress(ValueError):
            self.store.listeners.remove(self._on_event)


__all__ = ["Routers", "ServiceRouter"]
