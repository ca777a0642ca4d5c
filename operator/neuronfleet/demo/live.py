"""The live demo: real requests through the sandbox's router to real ``neuronserve`` processes, in real time.

What runs (one asyncio loop at wall speed: real processes cannot be compressed in time):

1. the sandbox cluster with serving pods that serve (:mod:`neuronfleet.sandbox.serving`): each
   ready serving pod is a local ``neuronserve serve`` process on an **emulated NeuronCore device**
   (bert-base's measured Inf2 batch times x :data:`LIVE_TIME_SCALE`, so one 2-core machine carries
   the fleet; outputs are placeholders), its Service's ready endpoints behind the sandbox's router
   (least outstanding requests), and Debian's Prometheus scraping every pod as the chart's
   PodMonitor would;
2. the real operator, reading its signals from that Prometheus (:class:`PrometheusMetrics`);
3. the example, compiled for real by its compile Job;
4. an open-loop client in its own process (:mod:`neuronfleet.demo.loadgen`) replaying a slice of
   the trace as superposed copies, measuring every request's latency and outcome.

The example's spec is adjusted for a few minutes of demo (each change is stated in the report):
a shorter scale-down stabilization and evaluation interval, a lower target utilization (latency
headroom for a shared 2-core machine), a 15 s arrival-rate window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from neuronfleet.demo.loadgen import rate_per_second, superposed_arrivals
from neuronfleet.demo.options import SAMPLE_EVERY_S, TRACE_ATTRIBUTION, DemoError, DemoOptions
from neuronfleet.demo.orchestration import (
    RunningOperator,
    compile_and_start,
    fleet_figures,
    operator_settings,
    prepare_example,
    sandbox_cluster,
    seed_cluster,
)
from neuronfleet.demo.recording import FleetView, Recorder, read_fleet
from neuronfleet.demo.report import DemoResult
from neuronfleet.demo.terminal import Display, Frame, progress_line, render
from neuronfleet.metrics.prometheus import PrometheusMetrics
from neuronfleet.planning.labels import service_name
from neuronfleet.sandbox import ColdStartProfile
from neuronfleet.sandbox.children import die_with_parent
from neuronfleet.sandbox.dirlock import DirectoryLock
from neuronfleet.sandbox.prometheus import PrometheusUnavailable
from neuronfleet.sandbox.prometheus import find_binary as find_prometheus
from neuronfleet.sandbox.serving import ServingOptions
from neuronfleet.sim import trace as traces

#: Every emulated batch takes bert-base's Inf2 time x this: a pod then serves ~2,700 / 8 req/s at
#: saturation, so a fleet that scales shows at a load this machine's HTTP stack carries.
LIVE_TIME_SCALE = 8.0
#: Pod start-up in the live part (the server process's own start and readiness come on top).
LIVE_COLD_START = ColdStartProfile(image_pull_s=8.0, container_start_s=1.0, readiness_s=0.0, shutdown_s=1.0, jitter=0.2)
LIVE_PROVISIONING_S = 20.0
SCRAPE_INTERVAL_S = 1.0
#: The client's bounds (the arrivals are checked against them before anything is sent).
MAX_REQUESTS = 400_000
CLIENT_TIMEOUT_S = 30.0
CLIENT_SLACK_S = 120.0
#: Token ids of one request (a short sentence of all-MiniLM-L6-v2's vocabulary, in the 32 bucket).
TOKEN_IDS = [101, 7592, 1010, 2023, 2003, 1037, 6251, 2000, 2022, 11157, 2011, 1996, 2944, 1012, 102]
#: What the demo changes in the example's spec for a few minutes of real time (stated in the report).
LIVE_SPEC_CHANGES = {
    "scaling": {
        # Every replica is a process on this machine: a backlog on a busy machine must not start
        # tens of them (each start takes CPU from the servers already behind).
        "maxReplicas": 6,
        "intervalSeconds": 5,
        # The CRD's default holds replicas for 30 minutes after their last need (Inf2 cold starts are
        # minutes); the demo shows a scale-down within its few minutes.
        "scaleDownDelaySeconds": 60,
        "targetUtilization": 0.5,
        "behavior": {
            "scaleDown": {
                "stabilizationWindowSeconds": 60,
                "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
            }
        },
        "metrics": {
            "arrivalRate": 'sum(rate(neuronserve_requests_total{namespace="$namespace",deployment="$name"}[15s]))',
            "staleAfterSeconds": 15,
        },
    },
}


@dataclass(frozen=True)
class LiveLoad:
    """The arrivals the client sends (seconds from its start) and the facts the report states."""

    arrivals: np.ndarray
    duration: float
    facts: dict[str, Any]

    def per_second(self) -> np.ndarray:
        return rate_per_second(self.arrivals, self.duration)


def prepare_live_load(options: DemoOptions, slo_ms: float) -> LiveLoad:
    """The trace slice as superposed copies, sized so that its busiest 30 s reach ``--peak-rps``."""
    trace_path = options.trace_path
    try:
        trace = traces.load(trace_path)
    except traces.TraceError as exc:
        raise DemoError(str(exc)) from None
    start, duration = options.live_start_minute * 60.0, options.live_minutes * 60.0
    window = options.offset_window_s
    if start < window or start + duration > trace.duration:
        raise DemoError(
            f"the trace {trace_path} lasts {trace.duration / 60:.1f} min: minutes {options.live_start_minute:g}-"
            f"{options.live_start_minute + options.live_minutes:g} (and {window:g} s before) are not all in it"
        )
    one_copy = superposed_arrivals(trace.arrivals, start, duration, 1, 0.0, options.seed)
    per_30s = np.bincount((one_copy // 30).astype(np.int64)) / 30.0
    copies = max(1, round(options.peak_rps / float(per_30s.max())))
    arrivals = superposed_arrivals(trace.arrivals, start, duration, copies, window, options.seed)
    if len(arrivals) > MAX_REQUESTS:
        raise DemoError(f"{len(arrivals):,} requests exceed the demo's bound of {MAX_REQUESTS:,}: lower --peak-rps")
    facts = {
        "trace": str(trace_path),
        "trace_requests": len(one_copy),
        "trace_start_minute": options.live_start_minute,
        "lead_in_minutes": 0.0,
        "minutes": options.live_minutes,
        "copies": copies,
        "offset_window_s": window,
        "arrivals": "superposed copies (bounded offsets)",
        "peak_rps_30s": round(float(per_30s.max()) * copies, 1),
        "mean_rps": round(len(arrivals) / duration, 1),
        "device": f"emulated-neuroncore, profile bert-base, time scale x{LIVE_TIME_SCALE:g}",
        "time_scale": LIVE_TIME_SCALE,
        "scrape_interval_s": SCRAPE_INTERVAL_S,
        "slo_ms": slo_ms,
        "spec_changes": LIVE_SPEC_CHANGES,
    }
    return LiveLoad(arrivals, duration, facts)


def request_body(input_names: list[str]) -> bytes:
    """One KServe v2 infer request of :data:`TOKEN_IDS` with each input the compiled model takes."""
    values = {"input_ids": TOKEN_IDS, "attention_mask": [1] * len(TOKEN_IDS), "token_type_ids": [0] * len(TOKEN_IDS)}
    inputs = [
        {"name": name, "shape": [1, len(TOKEN_IDS)], "datatype": "INT64", "data": values[name]}
        for name in input_names
        if name in values
    ]
    return json.dumps({"inputs": inputs}).encode()


@dataclass
class ClientView:
    """The live client's progress as the recorder samples it (a :class:`~neuronfleet.demo.recording.LoadView`)."""

    load: LiveLoad
    last: dict[str, Any] = field(default_factory=dict)
    utilization_now: float = math.nan
    _per_second: np.ndarray | None = None

    def demand(self, t: float) -> float:
        if self._per_second is None:
            self._per_second = self.load.per_second()
        index = min(max(int(t), 0), len(self._per_second) - 1)
        return float(self._per_second[index])

    def queue_depth(self) -> float:
        """Requests the client has sent and not had answered yet."""
        return float(self.last.get("outstanding", 0))

    def utilization(self) -> float:
        return 0.0 if math.isnan(self.utilization_now) else self.utilization_now

    def status(self) -> str:
        """The client's counts so far and the last second's latency, for the live view."""
        counts = self.last.get("counts") or {}
        p99 = self.last.get("p99_ms")
        return (
            f"client: sent {self.last.get('sent', 0):,}, answered ok {counts.get('ok', 0):,}, 429 "
            f"{counts.get('rejected', 0):,}, lost {counts.get('lost', 0):,}; last second p99 "
            f"{'-' if p99 is None else f'{p99:.0f} ms'}, client loop lag {self.last.get('loop_lag_max_ms', 0):.0f} ms, "
            f"CPU taken by the hypervisor {self.last.get('steal_share', 0):.0%}"
        )

    @property
    def p99_ms(self) -> float:
        value = self.last.get("p99_ms")
        return float(value) if value is not None else math.nan


async def run_client(
    url: str, body: bytes, load: LiveLoad, slo_ms: float, workdir: Path, view: ClientView
) -> dict[str, Any]:
    """The load generator as its own process; its progress lines update ``view``; returns its result."""
    arrivals_file, body_file, result_file = workdir / "arrivals.npy", workdir / "request.json", workdir / "client.json"
    np.save(arrivals_file, load.arrivals)
    body_file.write_bytes(body)
    argv = [sys.executable, "-m", "neuronfleet.demo.loadgen", "--url", url, "--body", str(body_file)]
    argv += ["--arrivals", str(arrivals_file), "--out", str(result_file), "--slo-ms", str(slo_ms)]
    # A client that falls behind its schedule (a busy machine) still sends every request, late, and
    # counts the lateness against itself; the bound only stops a client that went wrong.
    argv += ["--max-requests", str(MAX_REQUESTS), "--max-seconds", str(load.duration + CLIENT_SLACK_S)]
    argv += ["--timeout", str(CLIENT_TIMEOUT_S)]
    with (workdir / "client.log").open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            preexec_fn=die_with_parent(),  # a killed demo's client stops sending (sandbox.children)
        )
        assert process.stdout is not None
        try:
            async for line in process.stdout:
                with contextlib.suppress(ValueError):
                    view.last = json.loads(line)
            code = await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    if code != 0 or not result_file.exists():
        raise DemoError(f"the load generator failed (exit {code}); see {workdir / 'client.log'}")
    result: dict[str, Any] = json.loads(result_file.read_text())
    return result


async def live_demo(options: DemoOptions, console: Console, directory_lock: DirectoryLock | None = None) -> DemoResult:
    """The operator on the sandbox, real requests at real pods, Prometheus in between; real time.

    ``directory_lock``: ``options.out``'s, held by the caller (see ``orchestration.run_demo``).
    """
    wall_start = time.monotonic()
    out = options.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if options.skip_compile:
        raise DemoError("real load needs a compiled artifact: drop --skip-compile, or use --load simulated")
    example = prepare_example(options, out, spec_changes=LIVE_SPEC_CHANGES)
    namespace, name = example.namespace, example.name
    slo_ms = float(example.deployment.spec.scaling.latency_slo_ms or 50.0)
    load = prepare_live_load(options, slo_ms)
    facts = load.facts
    serving = ServingOptions(
        device_args=(
            "--device",
            "emulated-neuroncore",
            "--profile",
            "bert-base",
            "--emulated-time-scale",
            f"{LIVE_TIME_SCALE:g}",
        )
    )
    cluster = sandbox_cluster(
        example,
        out,
        options.seed,
        cold_start=LIVE_COLD_START,
        provisioning_delay_s=LIVE_PROVISIONING_S,
        serving=serving,
        prometheus=True,
        scrape_interval_s=SCRAPE_INTERVAL_S,
        compile_jobs="real",
        workdir=out / "sandbox",
        directory_lock=directory_lock,
    )
    display = Display(console, options.live)
    view = ClientView(load)
    try:
        find_prometheus()
    except PrometheusUnavailable as exc:
        raise DemoError(f"the live demo needs Prometheus: {exc}; or run --load simulated") from None
    async with cluster:
        assert cluster.prometheus is not None and cluster.routers is not None
        settings = operator_settings(example)
        seed_cluster(cluster, settings, namespace)
        recorder = Recorder(view)
        cluster.store.listeners.append(recorder.on_store_event)
        clock = {"t0": math.nan}

        def show(phase: str, force: bool = False) -> None:
            t = time.monotonic() - clock["t0"] if not math.isnan(clock["t0"]) else 0.0
            frame = Frame(phase, t, load.duration, "real", 1.0, time.monotonic() - wall_start)
            fleet = read_fleet(cluster, namespace, name)
            display.update(
                lambda: render(frame, fleet, recorder), lambda: progress_line(frame, fleet, recorder), t, force
            )

        try:
            async with RunningOperator(cluster, settings, metrics=PrometheusMetrics(cluster.prometheus.url)):
                with display:
                    display.note(f"sandbox API {cluster.url}; kubeconfig {cluster.kubeconfig_path}")
                    display.note(f"Prometheus {cluster.prometheus.url}; operator log: {out / 'operator.log'}")
                    display.note(f"[dim]{TRACE_ATTRIBUTION}[/dim]")
                    display.note(
                        f"Load is REAL: an open-loop client sends {len(load.arrivals):,} requests over "
                        f"{load.duration / 60:.1f} min ({facts['copies']} superposed copies of trace minutes "
                        f"{options.live_start_minute:g}-{options.live_start_minute + options.live_minutes:g}, "
                        f"peak {facts['peak_rps_30s']:.0f} req/s) through the sandbox's router to real neuronserve "
                        f"processes on an EMULATED NeuronCore device (bert-base Inf2 times x{LIVE_TIME_SCALE:g}); "
                        "Prometheus scrapes them and the operator scales from what it reads there."
                    )
                    compile_note = await compile_and_start(cluster, example, options, display, show)
                    router = await cluster.routers.wait_url(namespace, service_name(name), timeout=60.0)
                    dep = example.deployment
                    url = f"{router}/v2/models/{dep.served_model_name}/infer"
                    body = request_body([tensor.name for tensor in dep.spec.model.inputs])
                    clock["t0"] = time.monotonic()
                    recorder.started = True
                    client = asyncio.create_task(run_client(url, body, load, slo_ms, out, view))
                    sampler = asyncio.create_task(_sample(cluster, recorder, view, namespace, name, clock, show))
                    try:
                        client_result = await client
                    finally:
                        sampler.cancel()
                        await asyncio.gather(sampler, return_exceptions=True)
                    load_wall = time.monotonic() - clock["t0"]
                    # The router's re-sends go in the report beside the requests lost. Its counters
                    # start at zero with its process (one restarted mid-run counts from then on).
                    routed = cluster.routers.get(namespace, service_name(name))
                    resent = (await routed.counters()).resent if routed is not None else 0
                    show("done", force=True)
        finally:
            cluster.store.listeners.remove(recorder.on_store_event)
        final = read_fleet(cluster, namespace, name)
    return live_result(
        facts, recorder, client_result, final, compile_note, time.monotonic() - wall_start, load_wall, resent
    )


async def _sample(
    cluster: Any,
    recorder: Recorder,
    view: ClientView,
    namespace: str,
    name: str,
    clock: dict[str, float],
    show: Callable[..., None],
) -> None:
    """Every second: integrate the fleet; every few seconds: a timeline row (with Prometheus' utilization)."""
    prometheus = cluster.prometheus
    query = f'avg(neuronserve_device_busy_ratio{{namespace="{namespace}",deployment="{name}",role="active"}})'
    last = 0.0
    next_sample = 0.0
    while True:
        await asyncio.sleep(1.0)
        t = time.monotonic() - clock["t0"]
        recorder.replay_now = t
        fleet: FleetView = read_fleet(cluster, namespace, name)
        recorder.integrate(fleet, t - last)
        last = t
        if t >= next_sample:
            with contextlib.suppress(Exception):  # a missed reading leaves a gap, never stops the demo
                result = await asyncio.to_thread(prometheus.query, query)
                view.utilization_now = float(result[0]["value"][1]) if result else math.nan
            recorder.sample(t, fleet)
            recorder.timeline.setdefault("p99_ms", []).append(view.p99_ms)
            next_sample += SAMPLE_EVERY_S
        show("real load")


def live_result(
    facts: dict[str, Any],
    recorder: Recorder,
    client: dict[str, Any],
    final: FleetView,
    compile_note: str,
    wall_s: float,
    load_wall_s: float,
    resent: int = 0,
) -> DemoResult:
    totals = client["totals"]
    counts: dict[str, int] = totals["counts"]
    facts = {**facts, "client": {k: v for k, v in totals.items() if k not in ("counts", "timeline")}}
    return DemoResult(
        facts=facts,
        compile=compile_note,
        requests=float(totals["scheduled"]),
        served=float(counts["ok"]),
        rejected=float(counts["rejected"]),
        slo_attainment=totals["within_slo"] / totals["scheduled"] if totals["scheduled"] else 1.0,
        p50_ms=totals["p50_ms"] if totals["p50_ms"] is not None else math.nan,
        p99_ms=totals["p99_ms"] if totals["p99_ms"] is not None else math.nan,
        **fleet_figures(recorder, final),
        wall_s=wall_s,
        replay_wall_s=load_wall_s,
        speed=1.0,
        attribution=TRACE_ATTRIBUTION,
        load="real",
        lost=int(counts["lost"]),
        resent=resent,
        outcomes=counts,
        metrics_source="prometheus",
        client={
            k: totals[k]
            for k in (
                "client_cpu_s",
                "loop_lag_p99_ms",
                "loop_lag_max_ms",
                "send_lateness_p99_ms",
                "peak_outstanding",
                "machine_steal_share",
                "machine_busy_share",
                "quiet_requests",
                "quiet_within_slo",
                "wall_s",
                "max_ms",
            )
        },
    )
