"""The sandbox demo's two parts: the live loop's figures and costs, and the simulated replay's top speed.

- ``real`` (``neuronfleet demo``'s default): the whole live loop (real compile, real servers on the
  emulated NeuronCore device, Prometheus, the operator, the open-loop client) for the default
  slice. Figures: SLO attainment, lost / rejected requests, p50 / p99 at the client, scale events,
  and what it cost this machine: CPU seconds of the demo process (sandbox, operator) and
  of its children (router, client, servers, Prometheus, compile), the client's event-loop lag, and the
  host's share: the machine's CPU time the hypervisor took (steal) and the SLO attainment of the
  requests sent in quiet seconds (``quiet_slo_attainment``; loadgen's ``QUIET_STEAL_SHARE``). Baseline
  measured in the same run: the same client against one emulated server directly at a low rate
  (``direct_p99_ms``): ``p99_vs_direct`` says how much the fleet, the router and the machine's
  load add to the tail.
- ``simulated``: the compressed-time replay with the compile skipped and ``--speed`` far above
  what the machine reaches, so the loop runs as fast as the CPU lets it: the achieved speed is the
  ceiling for ``--speed``.

    .venv/bin/python bench/bench_demo.py [--only real|simulated] [--minutes 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from _common import start_emulated_server, wait_server_ready, write_result
from neuronfleet.demo.live import LIVE_TIME_SCALE, request_body
from neuronfleet.demo.loadgen import OpenLoopClient
from neuronfleet.demo.options import DEFAULT_TRACE, DemoOptions
from neuronfleet.demo.orchestration import run_demo
from neuronfleet.demo.report import machine_figures

Figures = dict[str, float | int | str | None]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def direct_baseline(rate: float = 100.0, seconds: float = 20.0) -> Figures:
    """The client against one emulated server (no router, no fleet) at a low Poisson rate."""
    server, port = start_emulated_server(LIVE_TIME_SCALE)
    try:
        wait_server_ready(port)  # the first requests must not wait for its readiness
        rng = np.random.default_rng(0)
        arrivals = np.cumsum(rng.exponential(1.0 / rate, size=int(rate * seconds * 1.5)))
        arrivals = arrivals[arrivals < seconds]
        body = request_body(["input_ids", "attention_mask"])
        client = OpenLoopClient(
            f"http://127.0.0.1:{port}/v2/models/m/infer",
            body,
            arrivals,
            slo_ms=50.0,
            max_requests=len(arrivals),
            max_seconds=seconds + 1,
        )
        totals = asyncio.run(client.run())
    finally:
        server.terminate()
        server.wait(timeout=30)
    return {
        "direct_rate_rps": rate,
        "direct_p50_ms": totals.p50_ms,
        "direct_p99_ms": totals.p99_ms,
        "direct_within_slo": round(totals.slo_attainment, 4),
        "direct_loop_lag_p99_ms": totals.loop_lag_p99_ms,
    }


def real_case(scratch: Path) -> Figures:
    baseline = direct_baseline()
    wall, cpu, children = time.perf_counter(), time.process_time(), _children_cpu()
    with (scratch / "console-real.txt").open("w") as console_file:
        result = run_demo(DemoOptions(load="real", out=scratch / "real", live=False), Console(file=console_file))
    wall, cpu, children = time.perf_counter() - wall, time.process_time() - cpu, _children_cpu() - children
    client: dict[str, Any] = result.client
    _, _, quiet_attainment = machine_figures(client) or (None, None, None)
    figures: Figures = {
        "requests": int(result.requests),
        "slo_attainment": round(result.slo_attainment, 4),
        "lost": result.lost,
        "rejected": int(result.rejected),
        "p50_ms": result.p50_ms,
        "p99_ms": result.p99_ms,
        "scale_ups": result.scale_ups,
        "scale_downs": result.scale_downs,
        "peak_active": result.peak_active,
        "wall_s": round(wall, 1),
        "load_wall_s": round(result.replay_wall_s, 1),
        "demo_process_cpu_s": round(cpu, 1),
        "children_cpu_s": round(children, 1),
        "client_cpu_s": client.get("client_cpu_s"),
        "client_loop_lag_p99_ms": client.get("loop_lag_p99_ms"),
        "client_send_lateness_p99_ms": client.get("send_lateness_p99_ms"),
        # The host's share: CPU time the hypervisor took, and the SLO over the seconds it took little.
        "machine_steal_share": client.get("machine_steal_share"),
        "machine_busy_share": client.get("machine_busy_share"),
        "quiet_requests": client.get("quiet_requests"),
        "quiet_slo_attainment": round(quiet_attainment, 4) if quiet_attainment is not None else None,
        **baseline,
    }
    direct = baseline["direct_p99_ms"]
    if isinstance(direct, float) and direct > 0:
        figures["p99_vs_direct"] = round(result.p99_ms / direct, 2)
    return figures


def simulated_case(scratch: Path, minutes: float, start_minute: float) -> Figures:
    wall = time.perf_counter()
    cpu = time.process_time()
    with (scratch / "console-simulated.txt").open("w") as console_file:
        result = run_demo(
            DemoOptions(
                load="simulated",
                minutes=minutes,
                start_minute=start_minute,
                lead_in_minutes=3.0,
                speed=1e6,
                out=scratch / "simulated",
                live=False,
                skip_compile=True,
            ),
            Console(file=console_file),
        )
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    simulated = (minutes + 3.0) * 60.0
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "replay_wall_s": round(result.replay_wall_s, 2),
        "max_speed_sim_s_per_wall_s": round(simulated / result.replay_wall_s, 1),
        "peak_active": result.peak_active,
        "scale_events": result.scale_events,
        "requests_simulated": round(result.requests),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["real", "simulated"], default=None)
    parser.add_argument("--minutes", type=float, default=10.0, help="simulated part: trace minutes")
    parser.add_argument("--start-minute", type=float, default=22.0, help="simulated part: first trace minute")
    args = parser.parse_args()
    cases: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
        scratch = Path(tmp)
        if args.only in (None, "real"):
            cases.append({"name": "real", "figures": real_case(scratch)})
        if args.only in (None, "simulated"):
            cases.append({"name": "simulated", "figures": simulated_case(scratch, args.minutes, args.start_minute)})
    figures = {f"{case['name']}_{key}": value for case in cases for key, value in case["figures"].items()}
    params = {"trace": DEFAULT_TRACE.name, "simulated_minutes": args.minutes, "only": args.only}
    path = write_result("demo", params, figures, cases=cases)
    print(f"{path}: {json.dumps(figures)}")


if __name__ == "__main__":
    main()
