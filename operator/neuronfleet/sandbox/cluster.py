"""The whole sandbox cluster: API server + Inf2 nodes + scheduler + kubelet + provisioner.

``SandboxCluster`` runs in the current event loop (async tests, looptime); ``ThreadedSandboxCluster``
runs one in its own thread and loop, for synchronous callers (the ``kubernetes`` client, kubectl
subprocesses, ``kopf.testing.KopfRunner``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol, TypeVar, overload

import yaml

from neuronfleet.aio import wait_event
from neuronfleet.kube.builders import build_priority_classes
from neuronfleet.sandbox.apiserver import ApiServer, RequestRecord
from neuronfleet.sandbox.clock import Clock
from neuronfleet.sandbox.dirlock import DirectoryLock
from neuronfleet.sandbox.disruption import DisruptionController
from neuronfleet.sandbox.endpoints import EndpointsController
from neuronfleet.sandbox.jobs import JobController
from neuronfleet.sandbox.kubelet import ColdStartProfile, Kubelet
from neuronfleet.sandbox.nodes import NodeGroup, node_object
from neuronfleet.sandbox.prometheus import PodTargets, PrometheusServer, find_binary
from neuronfleet.sandbox.provisioner import NodeNamer, Provisioner
from neuronfleet.sandbox.resourcequota import QuotaController
from neuronfleet.sandbox.router import Routers
from neuronfleet.sandbox.runners import SubprocessRunner
from neuronfleet.sandbox.s3 import DEFAULT_ARTIFACT_STORE, SandboxS3, StockedSource, example_manifests, split_s3
from neuronfleet.sandbox.scheduler import Scheduler
from neuronfleet.sandbox.serving import ServerProcesses, ServingOptions
from neuronfleet.sandbox.simulated_compile import SimulatedCompileRunner
from neuronfleet.sandbox.store import Obj, Store

T = TypeVar("T")

#: libyaml's safe loader where PyYAML was built with it (its wheels are): every sandbox start reads
#: the ~100 KB CRD, which the pure-Python loader takes ~120 ms over and libyaml ~10 ms.
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_crd_documents(paths: Iterable[Path]) -> list[Obj]:
    """CustomResourceDefinition documents from YAML files (multi-document files allowed)."""
    crds: list[Obj] = []
    for path in paths:
        for doc in yaml.load_all(path.read_text(), Loader=_SAFE_LOADER):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                crds.append(doc)
    return crds


def kopf_peering_crds() -> list[Obj]:
    """Kopf's peering CRDs (kopf.dev/v1 ClusterKopfPeering and KopfPeering)."""
    crds = []
    for kind, plural, scope in (
        ("ClusterKopfPeering", "clusterkopfpeerings", "Cluster"),
        ("KopfPeering", "kopfpeerings", "Namespaced"),
    ):
        crds.append(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.kopf.dev"},
                "spec": {
                    "group": "kopf.dev",
                    "scope": scope,
                    "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                    "versions": [
                        {
                            "name": "v1",
                            "served": True,
                            "storage": True,
                            "schema": {
                                "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                            },
                        }
                    ],
                },
            }
        )
    return crds


def write_kubeconfig(path: Path, url: str, name: str = "neuronfleet-sandbox") -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": url}}],
        "users": [{"name": name, "user": {"token": "sandbox"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
        "current-context": name,
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class _Controller(Protocol):
    """A sandbox component with a loop of its own, run as a task until the sandbox stops."""

    def run(self) -> Coroutine[Any, Any, None]: ...


def _report_crash(task: asyncio.Task[None]) -> None:
    """Log a sandbox controller whose loop ended with an error: the cluster goes on without it
    (pods stop being scheduled, say), and a test waiting on it would only time out."""
    if not task.cancelled() and (error := task.exception()) is not None:
        logging.getLogger(__name__).error("sandbox: %s stopped: %r", task.get_name(), error, exc_info=error)


class SandboxCluster:
    """An emulated EKS cluster with Inf2 node groups, in the running event loop.

    ``async with SandboxCluster(node_groups=[NodeGroup("inf2", "inf2.xlarge", count=2)], crd_dir=...) as c``
    then use ``c.url``, ``c.kubeconfig_path``, ``c.store``, ``c.scheduler``, ``c.kubelet``,
    ``c.provisioner``, ``c.request_log``.
    """

    def __init__(
        self,
        node_groups: Iterable[NodeGroup] = (),
        crd_dir: Path | str | None = None,
        *,
        crds: Iterable[Obj] = (),
        kopf_peering: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
        kubeconfig_path: Path | str | None = None,
        seed: int = 0,
        epoch: datetime.datetime | None = None,
        neuron_scheduler_name: str | None = "neuron-scheduler",
        cold_start: ColdStartProfile | None = None,
        cold_start_profiles: dict[tuple[str | None, str | None], ColdStartProfile] | None = None,
        provisioning_delay_s: float = 60.0,
        consolidation_delay_s: float = 30.0,
        node_ready_delay_s: float = 0.0,
        device_plugin_delay_s: float = 0.0,
        run_scheduler: bool = True,
        run_kubelet: bool = True,
        run_provisioner: bool = True,
        history_size: int = 20000,
        priority_classes: bool = False,
        s3: bool = False,
        compile_jobs: Literal["simulated", "real"] = "simulated",
        serving: ServingOptions | None = None,
        prometheus: bool = False,
        prometheus_binary: str | None = None,
        scrape_interval_s: float = 1.0,
        workdir: Path | str | None = None,
        directory_lock: DirectoryLock | None = None,
    ) -> None:
        """``s3``: also run an S3 endpoint (``cluster.s3``, moto on 127.0.0.1). ``compile_jobs="real"``:
        compile Jobs' ``neuronserve compile`` runs on this machine (pointed at ``cluster.s3`` when
        there is one); "simulated": after ``ColdStartProfile.run_s`` they publish a stand-in artifact
        (a manifest that says it is simulated, empty model files) and its request record in the store they
        name, then exit 0 (see ``sandbox.simulated_compile``); the emulated NeuronCore device serves it.
        ``serving``: serving pods run ``neuronserve serve`` as real local processes
        (``cluster.servers``, see ``sandbox.serving``), Services get Endpoints and EndpointSlices
        and a router each (``cluster.routers``); None keeps them simulated (fast, no processes).
        ``prometheus`` (with ``serving``): a real Prometheus (``cluster.prometheus``, Debian's binary
        or ``prometheus_binary``) scrapes the served pods every ``scrape_interval_s``, its file_sd
        targets labelled as the chart's PodMonitor does (see ``sandbox.prometheus``).
        ``workdir``: where processes keep their scratch (default: a temporary directory).
        ``directory_lock``: the lock on the directory this sandbox would lock (see ``start``), taken
        by the caller, who writes there before the sandbox starts and releases it after it stops:
        the sandbox uses it as its own, and leaves it held when it stops.
        """
        self.node_groups = list(node_groups)
        self.crd_dir = Path(crd_dir) if crd_dir is not None else None
        self.extra_crds = list(crds) + (kopf_peering_crds() if kopf_peering else [])
        #: Create the PriorityClasses the Helm chart installs (the operator's pods name them).
        self.priority_classes = priority_classes
        self.host = host
        self.port = port
        self._kubeconfig_path = Path(kubeconfig_path) if kubeconfig_path is not None else None
        self.seed = seed
        self.clock = Clock(epoch)
        self.store = Store(self.clock, history_size=history_size, seed=seed)
        self.apiserver = ApiServer(self.store)
        self.namer = NodeNamer()
        self.scheduler: Scheduler | None = (
            Scheduler(self.store, neuron_scheduler_name=neuron_scheduler_name) if run_scheduler else None
        )
        profiles = dict(cold_start_profiles or {})
        if cold_start is not None:
            profiles[(None, None)] = cold_start
        self.kubelet: Kubelet | None = Kubelet(self.store, profiles=profiles, seed=seed) if run_kubelet else None
        if self.kubelet is not None:
            self.kubelet.logs = self.apiserver.pod_logs
        self.provisioner: Provisioner | None = None
        if run_provisioner and self.scheduler is not None:
            self.provisioner = Provisioner(
                self.store,
                self.scheduler,
                self.node_groups,
                self.namer,
                provisioning_delay_s=provisioning_delay_s,
                node_ready_delay_s=node_ready_delay_s,
                device_plugin_delay_s=device_plugin_delay_s,
                consolidation_delay_s=consolidation_delay_s,
            )
        self.disruption: DisruptionController | None = DisruptionController(self.store) if run_scheduler else None
        self.jobs: JobController | None = JobController(self.store) if run_scheduler else None
        self.quotas: QuotaController | None = QuotaController(self.store) if run_scheduler else None
        self.s3: SandboxS3 | None = SandboxS3(host) if s3 else None
        self.compile_jobs = compile_jobs
        self.serving = serving
        self._workdir = Path(workdir) if workdir is not None else None
        self.servers: ServerProcesses | None = None
        self.endpoints: EndpointsController | None = EndpointsController(self.store) if serving else None
        self.routers: Routers | None = Routers(self.store, host) if serving else None
        if prometheus and serving is None:
            raise ValueError("prometheus=True scrapes served pods: it needs serving=ServingOptions(...)")
        self._want_prometheus = prometheus
        self._prometheus_binary = prometheus_binary
        self.scrape_interval_s = scrape_interval_s
        self.prometheus: PrometheusServer | None = None
        self._pod_targets: PodTargets | None = None
        self._tasks: list[asyncio.Task[None]] = []
        #: Told each step of ``stop`` that may take a while (``sandbox up`` prints them).
        self.announce_stop: Callable[[str], object] | None = None
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self._lock: DirectoryLock | None = None
        self._given_lock = directory_lock
        self.url = ""
        self.kubeconfig_path = Path()

    @property
    def request_log(self) -> list[RequestRecord]:
        return list(self.apiserver.request_log)

    def process_env(self) -> dict[str, str]:
        """Environment for the processes the sandbox runs for pods (compile Jobs, model servers).

        This interpreter's scripts come first on PATH (``neuronserve``), Hugging Face stays offline,
        and boto3 reaches the sandbox's S3 as it would reach AWS from a pod with IAM credentials.
        """
        env = {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "PYTHONUNBUFFERED": "1",
        }
        if self.s3 is not None:
            env.update(self.s3.env)
        return env

    async def start(self) -> SandboxCluster:
        """Start everything; a start that fails part-way stops what it started, then raises.

        The directory of the kubeconfig (else ``workdir``) is locked first (:mod:`sandbox.dirlock`):
        another sandbox there raises :class:`SandboxBusy` before anything is written. The API port is
        bound before any process starts, so a taken port leaves nothing behind.
        """
        self.clock.bind(asyncio.get_running_loop())
        owned = self._kubeconfig_path.parent if self._kubeconfig_path is not None else self._workdir
        if self._given_lock is not None:
            if owned is None or self._given_lock.directory.resolve() != owned.resolve():
                raise ValueError(f"directory_lock locks {self._given_lock.directory}, not this sandbox's {owned}")
            # Held already (acquire is then a no-op) or taken here; its owner releases it.
            self._given_lock.acquire()
        else:
            self._lock = DirectoryLock(owned.resolve()) if owned is not None else None
            if self._lock is not None:
                self._lock.acquire()
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def _start(self) -> None:
        crd_files = sorted(self.crd_dir.glob("*.yaml")) if self.crd_dir is not None else []
        for crd in [*load_crd_documents(crd_files), *self.extra_crds]:
            self.store.register_crd(crd)
        if self.priority_classes:
            for priority_class in build_priority_classes():
                self.store.create(self.store.resource("scheduling.k8s.io", "priorityclasses"), None, priority_class)
        for group in self.node_groups:
            for i in range(group.count):
                # The first min_nodes are the group's floor (a managed node group's, never consolidated);
                # the rest start as if Karpenter had launched them, and go when empty.
                self.add_node(group, group.zones[i % len(group.zones)], provisioned=i >= group.min_nodes)
        self.url = await self.apiserver.start(self.host, self.port)
        if self.s3 is not None:
            await self.s3.start()
        if self.compile_jobs == "real" and self.kubelet is not None:
            self.kubelet.container_runner = SubprocessRunner(
                commands={"neuronserve compile"}, extra_env=self.process_env(), timeout_s=3600.0
            )
        elif self.kubelet is not None:
            run_s = self.kubelet.profiles[(None, None)].run_s
            self.kubelet.container_runner = SimulatedCompileRunner(self.s3, run_s)
        if self._kubeconfig_path is None or (self._workdir is None and self.serving is not None):
            self._tmpdir = tempfile.TemporaryDirectory(prefix="neuronfleet-sandbox-")
        if self.serving is not None and self.kubelet is not None:
            workdir = self._workdir or Path(self._tmpdir.name if self._tmpdir else tempfile.gettempdir())
            self.servers = ServerProcesses(self.serving, self.process_env(), workdir / "pods")
            self.kubelet.server_processes = self.servers
            if self.endpoints is not None:
                endpoints = self.endpoints
                self.kubelet.pre_stop_hooks.append(lambda _pod: endpoints.sync())
            if self._want_prometheus:
                binary = self._prometheus_binary or find_binary()
                self.prometheus = PrometheusServer(
                    binary, workdir / "prometheus", scrape_interval_s=self.scrape_interval_s
                )
                await asyncio.to_thread(self.prometheus.start)
                self._pod_targets = PodTargets(self.store, self.servers, self.prometheus)
        if self._kubeconfig_path is None:
            assert self._tmpdir is not None
            self._kubeconfig_path = Path(self._tmpdir.name) / "kubeconfig"
        self.kubeconfig_path = write_kubeconfig(self._kubeconfig_path, self.url)
        controllers: list[tuple[str, _Controller | None]] = [
            ("sandbox-scheduler", self.scheduler),
            ("sandbox-provisioner", self.provisioner),
            ("sandbox-disruption-controller", self.disruption),
            ("sandbox-job-controller", self.jobs),
            ("sandbox-resource-quota-controller", self.quotas),
            ("sandbox-endpoints-controller", self.endpoints),
            ("sandbox-routers", self.routers),
            ("sandbox-prometheus-targets", self._pod_targets),
        ]
        loop = asyncio.get_running_loop()
        for name, controller in controllers:
            if controller is not None:
                task = loop.create_task(controller.run(), name=name)
                task.add_done_callback(_report_crash)
                self._tasks.append(task)

    async def stop(self) -> None:
        say = self.announce_stop or (lambda _text: None)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.routers is not None:
            await self.routers.stop()
        if self.prometheus is not None:
            say("stopping Prometheus")
            await asyncio.to_thread(self.prometheus.stop)
        if self.kubelet is not None:
            if self.servers is not None and self.servers.processes:
                say(f"stopping {len(self.servers.processes)} model server process(es): SIGTERM, SIGKILL after 5 s")
            await self.kubelet.stop()
        if self.provisioner is not None:
            await self.provisioner.stop()
        if self.jobs is not None:
            self.jobs.stop()
        say(f"stopping the API server ({self.apiserver.open_watches} open watch stream(s) ended)")
        await self.apiserver.stop()
        if self.s3 is not None:
            await self.s3.stop()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None
        if self._lock is not None:
            self._lock.release()

    async def __aenter__(self) -> SandboxCluster:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # ---- conveniences for tests and the demo ---------------------------------------------------------

    async def host_examples(self, examples_dir: Path) -> list[StockedSource]:
        """Make the example manifests apply as they are: their namespaces exist, and (with ``s3``)
        the model sources this machine has are uploaded where they name them (see ``sandbox.s3``)."""
        manifests = example_manifests(examples_dir)
        for path in manifests:
            for doc in yaml.safe_load_all(path.read_text()):
                namespace = ((doc or {}).get("metadata") or {}).get("namespace") if isinstance(doc, dict) else None
                if namespace and self.get("namespaces", namespace) is None:
                    self.create("namespaces", {"metadata": {"name": namespace}})
        if self.s3 is None:
            return []
        s3 = self.s3
        await asyncio.to_thread(s3.ensure_bucket, split_s3(DEFAULT_ARTIFACT_STORE)[0])
        return await asyncio.to_thread(s3.stock_examples, manifests)

    def add_node(self, group: NodeGroup, zone: str | None = None, *, provisioned: bool = False) -> Obj:
        """Register one Ready node of ``group`` now (no provisioning delay); only a ``provisioned`` one
        is the provisioner's to remove when empty."""
        zone = zone or group.zones[0]
        name, instance_id = self.namer.next(zone)
        return self.store.create(
            self.store.resource("", "nodes"),
            None,
            node_object(group, zone, name, instance_id, provisioned, self.clock.timestamp()),
        )

    def create(self, plural: str, body: Obj, namespace: str | None = None, group: str = "") -> Obj:
        """Create an object in-process (same semantics as a POST; raises ApiError)."""
        return self.store.create(self.store.resource(group, plural), namespace, body)

    def delete(self, plural: str, name: str, namespace: str | None = None, group: str = "", **options: Any) -> Obj:
        """Delete in-process (grace_period=, propagation= as in DeleteOptions; raises ApiError)."""
        return self.store.delete(self.store.resource(group, plural), namespace, name, **options)

    def get(self, plural: str, name: str, namespace: str | None = None, group: str = "") -> Obj | None:
        """The stored object, or None (read-only: do not mutate it)."""
        return self.store.try_get(self.store.resource(group, plural), namespace, name)

    def list(self, plural: str, namespace: str | None = None, group: str = "") -> list[Obj]:
        items, _ = self.store.list(self.store.resource(group, plural), namespace)
        return items

    async def wait_for(self, predicate: Callable[[], T], *, timeout: float = 60.0, what: str = "condition") -> T:
        """Wait (on the loop clock, woken by every store change) until ``predicate()`` is truthy."""
        changed = asyncio.Event()

        def listener(_: Any) -> None:
            changed.set()

        self.store.listeners.append(listener)
        deadline = self.clock.monotonic() + timeout
        try:
            while True:
                result = predicate()
                if result:
                    return result
                remaining = deadline - self.clock.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
                changed.clear()
                await wait_event(changed, min(max(remaining, 0.05), 1.0))  # floor: see the watch loop
        finally:
            self.store.listeners.remove(listener)


class ThreadedSandboxCluster:
    """A ``SandboxCluster`` in its own thread and event loop, for synchronous callers.

    ``with ThreadedSandboxCluster(...) as c:`` then use ``c.url`` / ``c.kubeconfig_path``;
    ``c.call(fn)`` runs ``fn(cluster)`` in the cluster's loop (it may return an awaitable) and
    returns its result: use it for every access to ``c.cluster``'s state.
    """

    def __init__(self, **kwargs: Any) -> None:
        self.cluster = SandboxCluster(**kwargs)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._started = concurrent.futures.Future[None]()

    @property
    def url(self) -> str:
        return self.cluster.url

    @property
    def kubeconfig_path(self) -> Path:
        return self.cluster.kubeconfig_path

    def _main(self) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                await self.cluster.start()
            except BaseException as exc:
                self._started.set_exception(exc)
                return
            self._started.set_result(None)
            try:
                await self._stop.wait()
            finally:
                await self.cluster.stop()

        asyncio.run(serve())

    def start(self) -> ThreadedSandboxCluster:
        self._thread = threading.Thread(target=self._main, name="sandbox-cluster", daemon=True)
        self._thread.start()
        self._started.result(timeout=60)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=30)
        self._thread = None

    def __enter__(self) -> ThreadedSandboxCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # Two signatures: with one, ``Callable[[SandboxCluster], T | Awaitable[T]]``, mypy solves T to
    # Never for a coroutine function.
    @overload
    def call(self, fn: Callable[[SandboxCluster], Awaitable[T]], timeout: float = 60.0) -> T: ...

    @overload
    def call(self, fn: Callable[[SandboxCluster], T], timeout: float = 60.0) -> T: ...

    def call(self, fn: Callable[[SandboxCluster], T | Awaitable[T]], timeout: float = 60.0) -> T:
        """Run ``fn(cluster)`` inside the cluster's loop and return its (awaited) result."""
        assert self._loop is not None, "the cluster is not running"

        async def invoke() -> T:
            result = fn(self.cluster)
            if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                return await result  # type: ignore[no-any-return]
            return result  # type: ignore[return-value]

        coro: Coroutine[Any, Any, T] = invoke()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)
