"""CPU per request on the live demo's path, client -> Service router -> emulated servers: lean HTTP/1.1 against aiohttp.

The sandbox's router and the demo's open-loop client speak :mod:`neuronfleet.sandbox.http1`
(asyncio protocols and httptools, on uvloop). Baseline, run in the same process against the same
servers: an aiohttp proxy doing the same least-outstanding choice (as the router was written before)
and an aiohttp client sending the same requests (as the client was), on asyncio's own loop. The two
are alternated ``--rounds`` times; figures are medians, per request: the router process's CPU, the
client's CPU, and the servers' (the same code in both: the noise floor of the comparison).

    .venv/bin/python bench/bench_http_path.py [--rate 300] [--seconds 20] [--servers 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import uvloop

from _common import process_cpu_seconds, start_emulated_server, wait_server_ready, write_result
from neuronfleet.demo.live import LIVE_TIME_SCALE, request_body
from neuronfleet.demo.loadgen import OpenLoopClient

ROUTER = "from neuronfleet.sandbox.router import main; main()"


def start_router(kind: str, endpoints: list[str]) -> tuple[subprocess.Popen[str], str]:
    code = ROUTER if kind == "http1" else f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
    if kind == "aiohttp":
        code += "from bench_http_path import aiohttp_proxy; aiohttp_proxy()"
    router = subprocess.Popen(
        [sys.executable, "-c", code, "--service", "bench/m"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert router.stdin is not None and router.stdout is not None
    url = str(json.loads(router.stdout.readline())["url"])
    router.stdin.write(json.dumps(endpoints) + "\n")
    router.stdin.flush()
    router.stdout.readline()  # {"applied": 1}
    return router, url


def aiohttp_proxy() -> None:
    """The baseline router: the same protocol on stdin/stdout, proxying with aiohttp's server and client."""
    import aiohttp
    from aiohttp import web

    endpoints: list[str] = []
    outstanding: Counter[str] = Counter()
    turn = itertools.count()

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        shift = next(turn) % len(endpoints)
        order = sorted(endpoints[shift:] + endpoints[:shift], key=lambda e: outstanding[e])
        for endpoint in order:
            outstanding[endpoint] += 1
            try:
                async with session.post(f"http://{endpoint}{request.rel_url}", data=body) as upstream:
                    payload = await upstream.read()
                    if upstream.status in (429, 503):
                        continue
                    return web.Response(status=upstream.status, body=payload, content_type="application/json")
            finally:
                outstanding[endpoint] -= 1
        return web.json_response({"error": "all refused"}, status=503)

    session: Any = None

    async def serve() -> None:
        nonlocal session
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        print(json.dumps({"url": f"http://127.0.0.1:{runner.addresses[0][1]}"}), flush=True)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := await reader.readline():
            endpoints[:] = json.loads(line)
            print(json.dumps({"applied": 1}), flush=True)
        await runner.cleanup()
        await session.close()

    asyncio.run(serve())


class AiohttpClient(OpenLoopClient):
    """The baseline client: the same open loop, each request through an aiohttp session."""

    async def run(self) -> Any:
        import aiohttp

        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.max_outstanding),
            headers={"Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
        )
        try:
            return await super().run()
        finally:
            await self._session.close()

    async def _one(self, pool: Any, address: Any, request: bytes, index: int, at: float) -> None:
        import aiohttp

        scheduled = self._t0 + at
        outcome = "lost"
        try:
            async with self._session.post(self.url, data=self.body) as response:
                await response.read()
                outcome = {200: "ok", 429: "rejected", 503: "unavailable"}.get(response.status, "error")
            self.latency_ms[index] = (time.perf_counter() - scheduled) * 1000.0
        except (aiohttp.ClientError, OSError, TimeoutError):
            outcome = "lost"
        finally:
            from neuronfleet.demo.loadgen import OUTCOME_CODE

            self.outcome[index] = OUTCOME_CODE[outcome]
            self.outstanding -= 1


def one_case(kind: str, ports: list[int], servers: list[int], arrivals: Any, body: bytes) -> dict[str, float]:
    router, url = start_router(kind, [f"127.0.0.1:{port}" for port in ports])
    try:
        servers0, router0 = sum(process_cpu_seconds(pid) for pid in servers), process_cpu_seconds(router.pid)
        cls = OpenLoopClient if kind == "http1" else AiohttpClient
        client = cls(
            f"{url}/v2/models/m/infer", body, arrivals, slo_ms=50.0, max_requests=len(arrivals),
            max_seconds=float(arrivals[-1]) + 1.0,
        )  # fmt: skip
        totals = uvloop.run(client.run()) if kind == "http1" else asyncio.run(client.run())
        servers1, router1 = sum(process_cpu_seconds(pid) for pid in servers), process_cpu_seconds(router.pid)
    finally:
        assert router.stdin is not None
        router.stdin.close()
        router.wait(timeout=30)
    n = len(arrivals)
    return {
        "router_cpu_ms_per_request": round(1000.0 * (router1 - router0) / n, 3),
        "client_cpu_ms_per_request": round(1000.0 * totals.client_cpu_s / n, 3),
        "servers_cpu_ms_per_request": round(1000.0 * (servers1 - servers0) / n, 3),
        "ok_share": round(totals.counts["ok"] / n, 4),
        "p50_ms": totals.p50_ms or 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=300.0, help="requests per second (Poisson)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--servers", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="each kind runs this many times, alternated")
    args = parser.parse_args()
    started = [start_emulated_server(LIVE_TIME_SCALE) for _ in range(args.servers)]
    body = request_body(["input_ids", "attention_mask"])
    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(1.0 / args.rate, size=int(args.rate * args.seconds * 1.5)))
    arrivals = arrivals[arrivals < args.seconds]
    runs: dict[str, list[dict[str, float]]] = {"aiohttp": [], "http1": []}
    try:
        for _, port in started:
            wait_server_ready(port)
        for round_ in range(args.rounds):
            for kind in ("aiohttp", "http1"):
                runs[kind].append(one_case(kind, [p for _, p in started], [s.pid for s, _ in started], arrivals, body))
                print(f"round {round_ + 1} {kind}: {runs[kind][-1]}", flush=True)
    finally:
        for server, _ in started:
            server.terminate()
            server.wait(timeout=30)
    medians: dict[str, dict[str, float]] = {
        kind: {key: round(statistics.median(r[key] for r in results), 4) for key in results[0]}
        for kind, results in runs.items()
    }
    cases = [{"name": kind, "figures": per_key} for kind, per_key in medians.items()]
    base, lean = medians["aiohttp"], medians["http1"]
    figures: dict[str, float | int | str | None] = {
        f"{kind}_{key}": value for kind, per_key in medians.items() for key, value in per_key.items()
    }
    for part in ("router", "client"):
        key = f"{part}_cpu_ms_per_request"
        figures[f"{part}_cpu_http1_vs_aiohttp"] = round(lean[key] / base[key], 3)
    path_key = ("router_cpu_ms_per_request", "client_cpu_ms_per_request", "servers_cpu_ms_per_request")
    figures["path_cpu_http1_vs_aiohttp"] = round(sum(lean[k] for k in path_key) / sum(base[k] for k in path_key), 3)
    params = {"rate_rps": args.rate, "seconds": args.seconds, "servers": args.servers, "rounds": args.rounds}
    path = write_result("http_path", params, figures, cases=cases)
    print(f"{path}: {json.dumps(figures)}")


if __name__ == "__main__":
    main()
