"""The sandbox demo's outputs: the console summary, and report.md, timeline.png and summary.json.

Kept apart from :mod:`neuronfleet.demo.orchestration` (which runs the demo) so that the figures of a
finished run can be written and checked without the cluster.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from neuronfleet.demo.loadgen import QUIET_STEAL_SHARE
from neuronfleet.demo.options import DEMO_BATCH_BUCKETS, DEMO_SEQUENCE_BUCKETS

#: Above this p99 event-loop lag (ms) the client says the machine was busy (idle: about 1 ms).
BUSY_MACHINE_LAG_MS = 5.0


@dataclass(frozen=True)
class ScaleEvent:
    """A ``Scaled`` Event the operator posted, at replay time ``t`` (seconds)."""

    t: float
    message: str


@dataclass
class DemoResult:
    """Every figure of one demo run (what summary.json holds)."""

    facts: dict[str, Any]
    compile: str
    requests: float
    served: float
    rejected: float
    slo_attainment: float
    p50_ms: float
    p99_ms: float
    replica_hours: float
    warm_pod_hours: float
    node_hours: dict[str, float]
    usd: float
    scale_events: int
    scale_ups: int
    scale_downs: int
    events: list[ScaleEvent]
    peak_active: int
    min_active: int
    peak_nodes: int
    cold_start: dict[str, Any]
    conditions: list[dict[str, str]]
    timeline: dict[str, list[float]] = field(default_factory=dict)
    wall_s: float = 0.0
    replay_wall_s: float = 0.0
    speed: float = 1.0
    attribution: str = ""
    #: Where the requests came from: ``real`` (a client sent them over HTTP and measured every
    #: answer) or ``simulated`` (the simulator's queue; nothing was sent).
    load: str = "simulated"
    #: Requests sent and never answered (the connection dropped or the timeout ran out). Real load only.
    lost: int = 0
    #: Requests the sandbox's router sent on to another endpoint because no connection to the one it
    #: chose could be made (nothing was sent); the only re-send it makes, as kube-proxy. Real load only.
    resent: int = 0
    #: Every request's outcome as the client counted it (real load only; see ``demo.loadgen``).
    outcomes: dict[str, int] = field(default_factory=dict)
    #: Where the operator read its scaling signals: ``prometheus`` or ``simulated queue``.
    metrics_source: str = "simulated queue"
    #: The client's own figures (CPU seconds, event-loop lag, send lateness): evidence that the
    #: client was not the bottleneck of the latencies it measured. Real load only.
    client: dict[str, Any] = field(default_factory=dict)

    @property
    def measured(self) -> str:
        """How the request figures were obtained, for every label that shows one."""
        return "measured at the client" if self.load == "real" else "simulated"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        # JSON has no NaN: a latency with no served request is null.
        for key in ("p50_ms", "p99_ms"):
            if isinstance(data[key], float) and math.isnan(data[key]):
                data[key] = None
        data["timeline"] = {
            key: [None if isinstance(v, float) and math.isnan(v) else v for v in values]
            for key, values in data["timeline"].items()
        }
        data["figures_from"] = self.measured
        # The same figure under the name the issue asks for: requests answered within the SLO / requests.
        data["within_slo_fraction"] = self.slo_attainment
        return data


def _cold_start_lines(cold_start: dict[str, Any]) -> list[str]:
    """``status.coldStart`` as lines: one per phase with samples (p50 and p90 seconds)."""
    lines = []
    for phase, stats in cold_start.items():
        if isinstance(stats, dict) and stats.get("samples"):
            lines.append(
                f"{phase}: {stats['samples']} measured, p50 {stats.get('p50Seconds', math.nan):.0f} s, "
                f"p90 {stats.get('p90Seconds', math.nan):.0f} s"
            )
    return lines or ["none measured"]


def machine_figures(client: dict[str, Any]) -> tuple[float, int, float | None] | None:
    """(steal share, requests in quiet seconds, their SLO attainment) from the client's totals; None without them."""
    if "machine_steal_share" not in client:
        return None
    quiet = int(client.get("quiet_requests") or 0)
    attainment = int(client.get("quiet_within_slo") or 0) / quiet if quiet else None
    return float(client["machine_steal_share"]), quiet, attainment


def _quiet_phrase(quiet: int, attainment: float | None, requests: float) -> str:
    if attainment is None:
        return "no second was quiet"
    return f"{attainment:.2%} of the {quiet:,} requests ({quiet / max(requests, 1):.0%}) sent in quiet seconds"


def print_summary(result: DemoResult, console: Console, out: Path) -> None:
    table = Table(title="neuronfleet sandbox demo: summary", show_header=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    facts = result.facts
    how = result.measured
    rows = [
        ("replayed", f"{facts['minutes']:.3g} trace minutes, {_scaling_phrase(result)} ({result.load} load)"),
        (f"requests ({how})", f"{result.requests:,.0f}"),
        (f"rejected with 429 ({how})", f"{result.rejected:,.0f}"),
        *(
            [
                (f"lost: sent, never answered ({how})", f"{result.lost:,}"),
                ("re-sent by the router (no connection to the endpoint: nothing sent)", f"{result.resent:,}"),
            ]
            if result.load == "real"
            else []
        ),
        (f"within the {facts['slo_ms']:.0f} ms SLO ({how})", f"{result.slo_attainment:.2%}"),
        (f"latency p50 / p99 ({how})", f"{result.p50_ms:.1f} / {result.p99_ms:.1f} ms"),
        ("the operator's signals from", result.metrics_source),
        ("active replica-hours", f"{result.replica_hours:.2f}"),
        ("warm pod-hours", f"{result.warm_pod_hours:.2f}"),
        ("node-hours", ", ".join(f"{k} {v:.2f}" for k, v in sorted(result.node_hours.items()))),
        ("cost (on-demand catalog prices)", f"${result.usd:.2f}"),
        ("scale events (up / down)", f"{result.scale_events} ({result.scale_ups} / {result.scale_downs})"),
        ("active pods min / peak", f"{result.min_active} / {result.peak_active}"),
        ("nodes peak", str(result.peak_nodes)),
        ("compile", result.compile),
        ("wall time (load part)", f"{result.wall_s:.0f} s ({result.replay_wall_s:.0f} s)"),
    ]
    for label, value in rows:
        table.add_row(label, value)
    console.print(table)
    console.print("cold starts measured by the operator (status.coldStart):")
    for line in _cold_start_lines(result.cold_start):
        console.print(f"  {line}")
    lag = float(result.client.get("loop_lag_p99_ms") or 0.0)
    if result.load == "real" and lag > BUSY_MACHINE_LAG_MS:
        console.print(
            f"[yellow]the machine was busy: the client's own event loop lagged {lag:.0f} ms at p99 (about 1 ms on an "
            "idle machine); the latencies above include such delays, and the servers and router had the same CPU "
            "to share[/yellow]"
        )
    machine = machine_figures(result.client) if result.load == "real" else None
    # A run that was not quiet as a whole says so on the console too.
    if machine is not None and machine[0] > QUIET_STEAL_SHARE:
        steal, quiet, attainment = machine
        console.print(
            f"[yellow]the hypervisor took {steal:.1%} of this machine's CPU time during the load (steal: no process "
            f"here could run then); within the SLO: {_quiet_phrase(quiet, attainment, result.requests)} (the "
            f"hypervisor took under {QUIET_STEAL_SHARE:.1%})[/yellow]"
        )
    console.print(f"[dim]{result.attribution}[/dim]")
    console.print(f"report: {out / 'report.md'}, {out / 'timeline.png'}, {out / 'summary.json'}")


def _scaling_phrase(result: DemoResult) -> str:
    facts = result.facts
    if result.load == "real":
        return f"{facts['copies']} superposed copies (offsets within {facts['offset_window_s']:g} s)"
    return f"x{facts['rate_factor']:.0f} rate"


def write_report(result: DemoResult, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(result.to_json(), indent=2, allow_nan=False) + "\n")
    plot_timeline(result, out / "timeline.png")
    (out / "report.md").write_text(report_markdown(result))


def plot_timeline(result: DemoResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = result.timeline
    minutes = [t / 60 for t in tl.get("t", [])]
    fig, demand_ax = plt.subplots(figsize=(11, 5))
    sent = "sent by the client" if result.load == "real" else "simulated"
    demand_ax.plot(minutes, tl.get("demand", []), color="0.6", lw=1, label=f"demand (req/s, {sent})")
    if tl.get("p99_ms"):
        latency_ax = demand_ax.twinx()
        latency_ax.spines["right"].set_position(("axes", 1.08))
        latency_ax.plot(minutes, tl["p99_ms"], color="tab:purple", lw=0.8, alpha=0.7, label="p99 ms (client)")
        slo_ms = result.facts["slo_ms"]
        latency_ax.axhline(slo_ms, color="tab:purple", ls=":", lw=0.8, label=f"SLO ({slo_ms:g} ms)")
        latency_ax.set_ylabel("p99 latency per second, ms (measured at the client)")
        latency_ax.set_ylim(bottom=0)
    demand_ax.set_xlabel("wall time (min)" if result.load == "real" else "replay time (min)")
    demand_ax.set_ylabel("requests / s")
    demand_ax.set_ylim(bottom=0)
    pods_ax = demand_ax.twinx()
    pods_ax.step(minutes, tl.get("active", []), where="post", color="tab:blue", label="active pods")
    pods_ax.step(minutes, tl.get("ready", []), where="post", color="tab:cyan", ls=":", label="ready active")
    pods_ax.step(minutes, tl.get("warm", []), where="post", color="tab:orange", label="warm pods")
    pods_ax.step(minutes, tl.get("desired", []), where="post", color="tab:green", ls="--", lw=1, label="desired")
    pods_ax.set_ylabel("pods")
    pods_ax.set_ylim(bottom=0)
    for event in result.events:
        pods_ax.axvline(event.t / 60, color="tab:red", alpha=0.25, lw=1)
    # One legend for the three axes' lines: each twin axis would otherwise draw its own over the others.
    handles, labels = [], []
    for ax in fig.axes:
        ax_handles, ax_labels = ax.get_legend_handles_labels()
        handles += ax_handles
        labels += ax_labels
    pods_ax.legend(handles, labels, loc="upper left", fontsize=8)
    demand_ax.set_title(
        f"neuronfleet sandbox demo ({result.load} load): demand vs pods (red lines: the operator's Scaled events)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _load_paragraph(result: DemoResult) -> str:
    facts = result.facts
    if result.load == "real":
        client = result.client
        return f"""- **Load (real, measured at the client)**: {facts["minutes"]:.3g} minutes of the trace from minute
  {facts["trace_start_minute"]:g}, replayed in real time as {facts["copies"]} independent copies superposed
  (each copy shifted by its own seeded offset within {facts["offset_window_s"]:g} s: the trace's shape above
  that, smooth at 1 s), {result.requests:,.0f} requests. An open-loop HTTP client (its own process,
  127.0.0.1 only) sent each one at its arrival time through the sandbox's router to real `neuronserve serve`
  processes, one per ready serving pod, each on an **emulated NeuronCore device** ({facts["device"]}): the
  server's HTTP, batching, bounded queue (429), metrics and drain are real; each batch takes the bert-base
  Inf2 profile's measured time x{facts["time_scale"]:g} (so that one 2-core machine carries the fleet), and the
  outputs are placeholders. Prometheus scraped the servers every {facts["scrape_interval_s"]:g} s and the
  operator read queue depth, in-flight requests, utilization and arrival rate from it. Latency is taken at
  the client from each request's scheduled send time. The client used {client.get("client_cpu_s", 0):.1f} CPU s;
  its event loop lagged {client.get("loop_lag_p99_ms", 0):.1f} ms at p99 ({client.get("loop_lag_max_ms", 0):.0f} ms
  at most) and sent {client.get("send_lateness_p99_ms", 0):.1f} ms late at p99 (lag on an idle
  machine is about a millisecond: more means the machine, not the servers, delayed requests).{_machine_sentence(client)}
- **The example as applied**: batch buckets {DEMO_BATCH_BUCKETS} x sequence {DEMO_SEQUENCE_BUCKETS} (a CPU compile in
  well under a minute; with every batch slowed x{facts["time_scale"]:g}, a batch of 4 alone would take half of the 50 ms
  SLO), and for a few minutes of real time instead of hours: `{json.dumps(facts.get("spec_changes", {}))}`
  merged into its spec.
- Time: real (wall) time, {result.replay_wall_s:.0f} s of load; whole run {result.wall_s:.0f} s."""
    return f"""- **Load (simulated)**: {facts["minutes"]:.3g} minutes of the trace from minute
  {facts["trace_start_minute"]:g}, after a lead-in of {facts.get("lead_in_minutes", 0):g} minutes before it
  that is replayed but left out of every figure below (so the fleet meets the measured span as the
  operator sized it, not at minReplicas) ({facts["trace_requests"]:,} trace requests in all), each
  arrival replicated x{facts["rate_factor"]:.0f} with 1 s jitter (keeps the bursts), so that the busiest
  minute needs {facts["peak_replicas_at_full_throughput"]:g} replicas at full throughput. The requests
  feed the simulator's fluid queue, served at {facts["per_replica_req_per_s"]:,.0f} req/s per ready
  active replica (profile {facts["profile"]}: bert-base on Inf2 from the Neuron performance page, per
  NeuronCore). **No model server runs in the pods**: queue depth, in-flight requests, utilization and
  arrival rate are what the operator reads instead of Prometheus, and the latency figures below are
  the simulator's.
- Time: compressed with looptime, {result.speed:g} simulated seconds per wall second
  (wall time {result.wall_s:.0f} s, of which {result.replay_wall_s:.0f} s for the replay)."""


def _machine_sentence(client: dict[str, Any]) -> str:
    machine = machine_figures(client)
    if machine is None:
        return ""
    steal, _, _ = machine
    return f"""
  The machine's CPU time was {float(client.get("machine_busy_share") or 0):.0%} busy during the load, and the
  hypervisor took {steal:.1%} of it (steal, read from `/proc/stat` each second): time in which no process here
  ran. A second is *quiet* when it took under {QUIET_STEAL_SHARE:.1%}; the figures table gives the SLO
  attainment of the requests sent in quiet seconds, to tell a miss caused by the host from one caused by the fleet."""


def _machine_rows(result: DemoResult, how: str) -> str:
    machine = machine_figures(result.client) if result.load == "real" else None
    if machine is None:
        return ""
    steal, quiet, attainment = machine
    return f"""| CPU time taken by the hypervisor (steal) | {steal:.1%} of the machine | `/proc/stat` at the client |
| within the SLO, quiet seconds only | {_quiet_phrase(quiet, attainment, result.requests)} | {how} |
"""


def report_markdown(result: DemoResult) -> str:
    facts = result.facts
    how = result.measured
    events = "\n".join(f"| {e.t / 60:.1f} | {e.message} |" for e in result.events) or "| - | none |"
    conditions = "\n".join(
        f"| {c['type']} | {c['status']} | {c['reason']} | {c['message'][:160]} |" for c in result.conditions
    )
    node_hours = ", ".join(f"{k}: {v:.2f}" for k, v in sorted(result.node_hours.items()))
    cold = "\n".join(f"- {line}" for line in _cold_start_lines(result.cold_start))
    outcomes = ", ".join(f"{k} {v:,}" for k, v in result.outcomes.items())
    real_rows = (
        f"""| lost (sent, never answered) | {result.lost:,} | {how} |
| re-sent by the router (no connection to the endpoint: nothing sent) | {result.resent:,} | the router's counters |
| every outcome | {outcomes} | {how} |
"""
        if result.load == "real"
        else ""
    )
    return f"""# neuronfleet sandbox demo ({result.load} load)

## What ran

- **The operator**: the real neuronfleet operator (Kopf handlers, reconcile, planning), in-process.
- **The cluster**: the sandbox, an emulated Kubernetes API server with Inf2 node groups (inf2.xlarge),
  scheduler, kubelet (emulated pod start-ups) and a Karpenter-like provisioner. Real HTTP between them.
- **Compile**: {result.compile}.
{_load_paragraph(result)}

## Figures

| figure | value | how obtained |
| --- | --- | --- |
| requests | {result.requests:,.0f} | {how} |
| rejected with 429 | {result.rejected:,.0f} | {how} |
{real_rows}| within the {facts["slo_ms"]:.0f} ms SLO | {result.slo_attainment:.2%} | {how} |
{_machine_rows(result, how)}| latency p50 / p99 | {result.p50_ms:.1f} / {result.p99_ms:.1f} ms | {how} |
| the operator's scaling signals | {result.metrics_source} | read by the operator |
| active replica-hours | {result.replica_hours:.2f} | sandbox pods |
| warm pod-hours | {result.warm_pod_hours:.2f} | sandbox pods |
| node-hours | {node_hours} | sandbox nodes |
| cost at on-demand catalog prices | ${result.usd:.2f} | node-hours x catalog |
| scale events (up / down) | {result.scale_events} ({result.scale_ups} / {result.scale_downs}) | the operator's Events |
| active pods min / peak | {result.min_active} / {result.peak_active} | sandbox pods |
| nodes peak | {result.peak_nodes} | sandbox nodes |

![demand and pods over time](timeline.png)

## Cold starts measured by the operator (`status.coldStart`)

{cold}

These are the emulated cluster's start-up delays (shortened from real Inf2 figures so the demo
shows several scale-ups), as the operator measured them from pod and node timestamps.

## Scaling events (the operator's `Scaled` Events)

| minute | message |
| --- | --- |
{events}

## Conditions at the end

| type | status | reason | message |
| --- | --- | --- | --- |
{conditions}

## Attribution

{result.attribution}
"""
