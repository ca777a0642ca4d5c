"""A small Kopf operator against the sandbox: watch, status patches, finalizers, owned children
garbage-collected after deletion."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import kopf
import kubernetes_asyncio

from neuronfleet.sandbox import SandboxCluster

GROUP, VERSION, PLURAL = "serving.neuronfleet.dev", "v1alpha1", "inferencedeployments"


def make_operator(url: str) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=url, insecure=True)

    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
    async def create_child(name: str, namespace: str | None, body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        assert namespace is not None  # an InferenceDeployment is namespaced
        config = kubernetes_asyncio.client.Configuration(host=url)
        async with kubernetes_asyncio.client.ApiClient(config) as client:
            child = {"metadata": {"name": f"{name}-config"}, "data": {"model": body["spec"]["model"]["source"]}}
            kopf.adopt(child, owner=body)
            # Any: the generated stubs take only V1ConfigMap models; the client sends a dict body as it is.
            core: Any = kubernetes_asyncio.client.CoreV1Api(client)
            await core.create_namespaced_config_map(namespace, child)
        kopf.info(body, reason="ChildCreated", message=f"created {name}-config")
        patch.status["replicas"] = 0
        patch.status["observedGeneration"] = body["metadata"]["generation"]

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry)
    async def cleanup(**_: Any) -> None:
        return None

    return registry


async def test_kopf_operator_against_the_sandbox(
    make_sandbox_cluster: Callable[..., Awaitable[SandboxCluster]],
) -> None:
    cluster: SandboxCluster = await make_sandbox_cluster(kopf_peering=True)
    cluster.create("kopfpeerings", {"metadata": {"name": "default"}}, "default", group="kopf.dev")
    registry = make_operator(cluster.url)
    settings = kopf.OperatorSettings()
    settings.watching.server_timeout = 10
    stop = asyncio.Event()
    ready = asyncio.Event()
    tasks = await kopf.spawn_tasks(
        registry=registry, settings=settings, namespaces=["default"], standalone=False, stop_flag=stop, ready_flag=ready
    )
    runner = asyncio.create_task(kopf.run_tasks(tasks, ignored=set(asyncio.all_tasks()) - set(tasks)))
    try:
        await asyncio.wait_for(ready.wait(), timeout=10)

        def peered() -> bool:
            peering = cluster.get("kopfpeerings", "default", "default", group="kopf.dev")
            return bool(peering and peering.get("status"))

        await cluster.wait_for(peered, timeout=20, what="Kopf to announce itself in the KopfPeering")
        cluster.create(
            PLURAL,
            {"metadata": {"name": "bert"}, "spec": {"model": {"source": "s3://acme-models/bert/"}}},
            "default",
            group=GROUP,
        )

        def reconciled() -> bool:
            obj = cluster.get(PLURAL, "bert", "default", group=GROUP)
            return bool(obj and (obj.get("status") or {}).get("observedGeneration") == 1)

        await cluster.wait_for(reconciled, timeout=20, what="Kopf to patch the status")
        obj = cluster.get(PLURAL, "bert", "default", group=GROUP)
        assert obj is not None
        assert "kopf.zalando.org/KopfFinalizerMarker" in obj["metadata"]["finalizers"]
        child = cluster.get("configmaps", "bert-config", "default")
        assert child is not None
        assert child["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
        assert child["data"] == {"model": "s3://acme-models/bert/"}

        def posted() -> list[dict[str, Any]]:
            return [e for e in cluster.list("events", "default") if e.get("reason") == "ChildCreated"]

        (event,) = await cluster.wait_for(posted, timeout=20, what="Kopf's event")
        assert event["involvedObject"]["uid"] == obj["metadata"]["uid"]
        assert event["message"] == "created bert-config"

        cluster.delete(PLURAL, "bert", "default", group=GROUP)
        marked = cluster.get(PLURAL, "bert", "default", group=GROUP)
        assert marked is not None and marked["metadata"]["deletionTimestamp"]  # held by Kopf's finalizer
        await cluster.wait_for(
            lambda: cluster.get(PLURAL, "bert", "default", group=GROUP) is None,
            timeout=20,
            what="the finalizer removed",
        )
        await cluster.wait_for(
            lambda: cluster.get("configmaps", "bert-config", "default") is None, timeout=10, what="the child GC'd"
        )
        verbs = {(r.verb, r.resource) for r in cluster.request_log}
        assert {("watch", PLURAL), ("patch", PLURAL), ("create", "configmaps")} <= verbs
    finally:
        stop.set()
        await asyncio.wait_for(runner, timeout=10)
