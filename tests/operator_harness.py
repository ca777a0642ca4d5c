"""The operator test harness: the real Kopf operator against the sandbox cluster.

``OperatorHarness`` starts the operator's Kopf tasks in the test's loop, pointed at a sandbox by its
kubeconfig, with a local artifact store; ``crash()`` cancels them abruptly (as a killed pod), and
``start()`` again is a restart with empty memory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from neuronfleet.api.v1alpha1 import GROUP, PLURAL, VERSION, InferenceDeployment
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.handlers import OperatorContext
from neuronfleet.kube.builders import BuilderConfig, build_priority_classes
from neuronfleet.planning.fleet import FleetPolicy
from neuronfleet.reconcile import MetricsSource, OperatorSettings
from neuronfleet.run_command import build_context, operator_tasks
from neuronfleet.sandbox import ColdStartProfile, NodeGroup, SandboxCluster
from neuronfleet.sandbox.artifacts import record_uncompiled_artifact

REPO = Path(__file__).resolve().parents[1]
NEURON_SCHEDULER = "my-scheduler"
FAST_START = ColdStartProfile(image_pull_s=2.0, container_start_s=0.5, readiness_s=3.0, shutdown_s=0.5, jitter=0.1)


def example(name: str, **overrides: Any) -> dict[str, Any]:
    """An example manifest, with top-level spec sections replaced by ``overrides``."""
    doc: dict[str, Any] = yaml.safe_load((REPO / "examples" / f"{name}.yaml").read_text())
    for section, value in overrides.items():
        doc["spec"][section] = {**doc["spec"].get(section, {}), **value}
    return doc


class OperatorHarness:
    """The operator (Kopf + reconcile) and a local artifact store, against one sandbox cluster."""

    def __init__(
        self,
        cluster: SandboxCluster,
        workdir: Path,
        interval: float = 2.0,
        metrics: Callable[[], MetricsSource] | None = None,
        store: ArtifactStore | None = None,
    ) -> None:
        """``metrics`` makes the autoscaler's metrics source at each start (None: no metrics);
        ``store`` is the operator's artifact store reader (e.g. with a clock of the test's)."""
        self.cluster = cluster
        self.metrics_factory = metrics
        self.store = store
        self.store_dir = workdir / "artifacts"
        self.model_dir = workdir / "model"
        self.model_dir.mkdir(parents=True, exist_ok=True)
        (self.model_dir / "config.json").write_text('{"model_type": "bert"}')
        self.settings = OperatorSettings(
            artifact_store=str(self.store_dir),
            builder=BuilderConfig(default_scheduler_name=NEURON_SCHEDULER),
            fleet=FleetPolicy(drain_grace_seconds=30.0, min_drain_seconds=1.0),
            interval_seconds=interval,
        )
        self.context: OperatorContext | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._stop_flag = asyncio.Event()
        self._api: k8s.ApiClient | None = None

    # ---------------------------------------------------------------- operator lifecycle

    async def start(self) -> OperatorContext:
        await self.ensure_priority_classes()
        metrics = self.metrics_factory() if self.metrics_factory is not None else None
        self.context = await build_context(
            self.settings,
            self.cluster.kubeconfig_path,
            metrics=metrics,
            store=self.store,
            clock=self.cluster.clock.wall,
        )
        self._stop_flag = asyncio.Event()
        self._tasks = list(await operator_tasks(self.context, stop_flag=self._stop_flag, in_process=True))
        return self.context

    async def stop(self) -> None:
        """Stop the operator as SIGTERM does: the stop flag ends one of Kopf's root tasks, the rest
        are cancelled (as ``kopf.run_tasks`` does; it is not used here because it would also cancel
        the sandbox's tasks in this process), and Kopf then asks each daemon to stop and waits."""
        self._stop_flag.set()
        _, pending = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self.context is not None:
            await self.context.reconciler.kube.close()
            self.context = None

    async def crash(self) -> None:
        """Stop the operator abruptly, wherever it is (a killed process)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self.context is not None:
            await self.context.reconciler.kube.close()
            self.context = None

    async def api(self) -> k8s.ApiClient:
        if self._api is None:
            configuration = k8s.Configuration()
            await k8s_config.load_kube_config(
                config_file=str(self.cluster.kubeconfig_path), client_configuration=configuration
            )
            self._api = k8s.ApiClient(configuration)
        return self._api

    async def close(self) -> None:
        await self.crash()
        if self._api is not None:
            await self._api.close()

    # ------------------------------------------------------------------- test helpers

    def localize(self, manifest: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
        """The manifest with a local model source and store, in ``namespace``."""
        manifest = json.loads(json.dumps(manifest))
        manifest["metadata"]["namespace"] = namespace
        manifest["spec"]["model"]["source"] = str(self.model_dir)
        manifest["spec"].setdefault("compile", {})["artifactStore"] = str(self.store_dir)
        return manifest

    def precompile(self, manifest: dict[str, Any], label: str = "v1") -> str:
        """Record a compiled artifact for the manifest's compile request, as a compile Job would.

        Returns the revision. The fleet tests exercise placement and the fleet, not compilation.
        """
        dep = InferenceDeployment.model_validate(manifest)
        return record_uncompiled_artifact(dep.spec, self.store_dir, label)

    async def ensure_priority_classes(self) -> None:
        """The PriorityClasses the Helm chart installs on a real cluster (same builder)."""
        scheduling = await self.client(k8s.SchedulingV1Api)
        for priority_class in build_priority_classes(self.settings.builder):
            if (
                self.cluster.get("priorityclasses", priority_class["metadata"]["name"], group="scheduling.k8s.io")
                is None
            ):
                await scheduling.create_priority_class(priority_class)

    async def ensure_namespace(self, namespace: str) -> None:
        if self.cluster.get("namespaces", namespace) is None:
            core = await self.client(k8s.CoreV1Api)
            await core.create_namespace({"metadata": {"name": namespace}})

    async def client(self, group: Callable[[k8s.ApiClient], object]) -> Any:
        """``group``'s API (``k8s.CoreV1Api``...) on this harness's connection, typed Any as the
        operator's own client is: the generated stubs take only their typed models where the API
        takes dicts too, and omit the ``_content_type`` keyword that every merge patch needs."""
        return group(await self.api())

    async def custom_objects(self) -> Any:
        return await self.client(k8s.CustomObjectsApi)

    async def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        namespace = manifest["metadata"].get("namespace", "default")
        await self.ensure_namespace(namespace)
        custom = await self.custom_objects()
        result: dict[str, Any] = await custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, manifest
        )
        return result

    async def patch_spec(self, namespace: str, name: str, spec: dict[str, Any]) -> None:
        custom = await self.custom_objects()
        await custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, {"spec": spec}, _content_type="application/merge-patch+json"
        )

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge ``status`` into the object's status, as another controller or a person editing the
        status subresource does."""
        custom = await self.custom_objects()
        await custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": status}, _content_type="application/merge-patch+json"
        )

    async def annotate(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        custom = await self.custom_objects()
        await custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"metadata": {"annotations": annotations}},
            _content_type="application/merge-patch+json",
        )

    async def scale(self, namespace: str, name: str, replicas: int) -> None:
        custom = await self.custom_objects()
        await custom.patch_namespaced_custom_object_scale(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"spec": {"replicas": replicas}},
            _content_type="application/merge-patch+json",
        )

    def deployment(self, namespace: str, name: str) -> dict[str, Any]:
        obj = self.cluster.get(PLURAL, name, namespace, group=GROUP)
        assert obj is not None, f"{namespace}/{name} is gone"
        return obj

    def pods(self, namespace: str, name: str, role: str | None = None) -> list[dict[str, Any]]:
        pods = [
            p
            for p in self.cluster.list("pods", namespace)
            if (p["metadata"].get("labels") or {}).get(f"{GROUP}/deployment") == name
            and not p["metadata"].get("deletionTimestamp")
        ]
        if role is not None:
            pods = [p for p in pods if p["metadata"]["labels"].get(f"{GROUP}/role") == role]
        return pods

    def condition(self, namespace: str, name: str, kind: str) -> dict[str, Any]:
        for condition in (self.deployment(namespace, name).get("status") or {}).get("conditions") or []:
            if condition["type"] == kind:
                return dict(condition)
        return {}

    def events(self, namespace: str, name: str, reason: str | None = None) -> list[dict[str, Any]]:
        """The Events in ``namespace`` about the object ``name`` (core/v1's ``involvedObject`` or
        events.k8s.io's ``regarding``), of ``reason`` when given."""
        return [
            e
            for e in self.cluster.list("events", namespace)
            if (e.get("involvedObject") or e.get("regarding") or {}).get("name") == name
            and (reason is None or e.get("reason") == reason)
        ]

    async def wait(self, predicate: Callable[[], Any], timeout: float = 120.0, what: str = "condition") -> Any:
        return await self.cluster.wait_for(predicate, timeout=timeout, what=what)

    async def wait_settled(
        self, namespace: str, name: str, predicate: Callable[[], Any], timeout: float = 120.0, what: str = "condition"
    ) -> None:
        """Wait until ``predicate`` holds and the operator has acted on it: the deployment's pods keep
        their roles and readiness through a whole reconcile that began after it held.

        The operator plans from what its watch has delivered, which may lag the store the tests read.
        A pod the test already sees ready may still be loading to the operator, which then promotes a
        ready warm pod over it and demotes it (two patches). A test that records the fleet at rest
        must wait for that, or it records a fleet halfway through a swap.

        The operator's reconcile counter counts every object's reconciles, so this holds only while
        the operator reconciles this one deployment alone; it fails if another one is reconciled.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            await self.wait(predicate, timeout=max(deadline - loop.time(), 0.1), what=what)
            before = self._roles(namespace, name)
            assert self.context is not None, "the operator is not running"
            started = self.context.reconciles
            # The reconcile counted at ``started + 1`` began after ``before``; by ``started + 2`` it
            # has finished (one reconcile at a time per object).

            def whole_reconcile_done(started: int = started) -> bool:
                return self.context is not None and self.context.reconciles >= started + 2

            await self.wait(
                whole_reconcile_done,
                timeout=max(deadline - loop.time(), 0.1),
                what=f"{what}: a whole reconcile after it held",
            )
            others = set(self.context.memories) - {(namespace, name)} if self.context is not None else set()
            assert not others, f"wait_settled counts reconciles of {namespace}/{name} alone, not of {others}"
            if predicate() and self._roles(namespace, name) == before:
                return

    def _roles(self, namespace: str, name: str) -> set[tuple[str, str, bool]]:
        """Each pod's uid, role and readiness."""
        return {
            (p["metadata"]["uid"], p["metadata"]["labels"].get(f"{GROUP}/role", ""), ready(p))
            for p in self.pods(namespace, name)
        }


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def e2e_cluster() -> SandboxCluster:
    """The e2e tests' cluster: two inf2.xlarge nodes, a provisioner for more of every Inf2 type
    (5 s to a node, empty ones consolidated after 30 s), fast cold starts, the Neuron scheduler."""
    return SandboxCluster(
        node_groups=inf2_node_groups(),
        crd_dir=REPO / "crds",
        cold_start=FAST_START,
        provisioning_delay_s=5.0,
        consolidation_delay_s=30.0,
        neuron_scheduler_name=NEURON_SCHEDULER,
    )


def inf2_node_groups() -> list[NodeGroup]:
    """Two inf2.xlarge nodes (nodepool inf2-serving) and room for more of every Inf2 type."""
    return [
        NodeGroup("inf2-serving", "inf2.xlarge", count=2, zones=("us-east-1a", "us-east-1b"), max_nodes=8),
        NodeGroup("inf2-large", "inf2.24xlarge", count=0, zones=("us-east-1a", "us-east-1b"), max_nodes=4),
        NodeGroup("inf2-huge", "inf2.48xlarge", count=0, zones=("us-east-1a", "us-east-1b"), max_nodes=2),
    ]
