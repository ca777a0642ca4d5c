"""The sandbox API server over real HTTP: the official clients, status codes and Status bodies."""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import kubernetes
import kubernetes_asyncio
import pytest
from kubernetes.client.rest import ApiException

from neuronfleet.sandbox import SandboxCluster, ThreadedSandboxCluster


def pod_body(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }


def sync_client(cluster: ThreadedSandboxCluster) -> kubernetes.client.CoreV1Api:
    config = kubernetes.client.Configuration()
    config.host = cluster.url
    return kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(config))


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def test_sync_client_crud_selectors_patches(threaded_sandbox_cluster: ThreadedSandboxCluster) -> None:
    api = sync_client(threaded_sandbox_cluster)
    created = api.create_namespaced_pod("default", pod_body("web-1", {"app": "web", "tier": "front"}))
    assert created is not None  # 201 on create: the sync client returns the object
    assert created.metadata.uid and created.metadata.resource_version and created.metadata.creation_timestamp
    api.create_namespaced_pod("default", pod_body("web-2", {"app": "web", "tier": "back"}))
    api.create_namespaced_pod("default", pod_body("db-1", {"app": "db"}))

    def names(selector: str) -> list[str]:
        return sorted(p.metadata.name for p in api.list_namespaced_pod("default", label_selector=selector).items)

    assert names("app=web") == ["web-1", "web-2"]
    assert names("app in (web,db),tier!=back") == ["db-1", "web-1"]
    assert names("!tier") == ["db-1"]
    assert names("tier") == ["web-1", "web-2"]
    assert names("app notin (web)") == ["db-1"]
    by_field = api.list_namespaced_pod("default", field_selector="metadata.name=web-2").items
    assert [p.metadata.name for p in by_field] == ["web-2"]

    # Strategic merge: containers merged by name, not replaced.
    api.patch_namespaced_pod("web-1", "default", {"spec": {"containers": [{"name": "sidecar", "image": "envoy"}]}})
    patched = api.read_namespaced_pod("web-1", "default")
    assert [c.name for c in patched.spec.containers] == ["main", "sidecar"]
    # JSON merge patch of labels.
    api.patch_namespaced_pod(
        "web-1",
        "default",
        {"metadata": {"labels": {"tier": None, "extra": "yes"}}},
        _content_type="application/merge-patch+json",
    )
    assert api.read_namespaced_pod("web-1", "default").metadata.labels == {"app": "web", "extra": "yes"}
    # JSON patch (RFC 6902).
    api.patch_namespaced_pod(
        "web-1",
        "default",
        [{"op": "replace", "path": "/metadata/labels/extra", "value": "no"}],
        _content_type="application/json-patch+json",
    )
    assert api.read_namespaced_pod("web-1", "default").metadata.labels["extra"] == "no"
    # Replace (PUT) with the current resourceVersion works, with a stale one answers 409.
    current = api.read_namespaced_pod("web-2", "default")
    stale_rv = current.metadata.resource_version
    current.metadata.labels["replaced"] = "true"
    replaced = api.replace_namespaced_pod("web-2", "default", current)
    assert replaced.metadata.labels["replaced"] == "true"
    assert int(replaced.metadata.resource_version) > int(stale_rv)
    current.metadata.resource_version = stale_rv
    with pytest.raises(ApiException) as conflict:
        api.replace_namespaced_pod("web-2", "default", current)
    assert conflict.value.status == 409
    assert status_of(conflict.value)["reason"] == "Conflict"

    deleted = api.delete_namespaced_pod("db-1", "default")
    assert deleted is not None
    with pytest.raises(ApiException) as missing:
        api.read_namespaced_pod("db-1", "default")
    assert missing.value.status == 404
    assert status_of(missing.value) | {"details": None} == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "db-1" not found',
        "reason": "NotFound",
        "code": 404,
        "details": None,
    }


def test_sync_client_bad_input(threaded_sandbox_cluster: ThreadedSandboxCluster) -> None:
    api = sync_client(threaded_sandbox_cluster)
    with pytest.raises(ApiException) as bad_selector:
        api.list_namespaced_pod("default", label_selector="app in (web")
    assert bad_selector.value.status == 400
    assert status_of(bad_selector.value)["reason"] == "BadRequest"
    with pytest.raises(ApiException) as bad_field:
        api.list_namespaced_pod("default", field_selector="spec.unknownField=x")
    assert bad_field.value.status == 400
    assert "field label not supported" in status_of(bad_field.value)["message"]
    api.create_namespaced_pod("default", pod_body("dup"))
    with pytest.raises(ApiException) as duplicate:
        api.create_namespaced_pod("default", pod_body("dup"))
    assert duplicate.value.status == 409
    assert status_of(duplicate.value)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as no_namespace:
        api.create_namespaced_pod("nowhere", pod_body("lost"))
    assert no_namespace.value.status == 404
    assert status_of(no_namespace.value)["message"] == 'namespaces "nowhere" not found'
    with pytest.raises(ApiException) as bad_name:
        api.create_namespaced_pod("default", pod_body("Not_A_Name"))
    assert bad_name.value.status == 422
    assert status_of(bad_name.value)["reason"] == "Invalid"


async def test_raw_http_status_bodies(sandbox_cluster: SandboxCluster) -> None:
    async with aiohttp.ClientSession(sandbox_cluster.url) as http:
        async with http.post(
            "/api/v1/namespaces/default/pods", data=b"{not json", headers={"Content-Type": "application/json"}
        ) as r:
            assert r.status == 400
            body = await r.json()
            assert (body["kind"], body["apiVersion"], body["code"], body["reason"]) == (
                "Status",
                "v1",
                400,
                "BadRequest",
            )
        async with http.get("/apis/example.com/v1/widgets") as r:
            assert r.status == 404
            assert (await r.json())["reason"] == "NotFound"
        async with http.post("/api/v1/namespaces/default/pods", json=pod_body("p")) as r:
            assert r.status == 201
        await sandbox_cluster.wait_for(
            lambda: (sandbox_cluster.get("pods", "p", "default") or {}).get("status", {}).get("conditions"),
            timeout=5,
            what="the scheduler's verdict",
        )
        async with http.get("/api/v1/namespaces/default/pods/p") as r:
            rv = (await r.json())["metadata"]["resourceVersion"]
        failing_test = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
            {"op": "add", "path": "/metadata/labels/x", "value": "y"},
        ]
        async with http.patch(
            "/api/v1/namespaces/default/pods/p",
            json=failing_test,
            headers={"Content-Type": "application/json-patch+json"},
        ) as r:
            assert r.status == 422
            assert (await r.json())["code"] == 422
        passing_test = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/metadata/labels", "value": {"x": "y"}},
        ]
        async with http.patch(
            "/api/v1/namespaces/default/pods/p",
            json=passing_test,
            headers={"Content-Type": "application/json-patch+json"},
        ) as r:
            assert r.status == 200
            assert (await r.json())["metadata"]["labels"] == {"x": "y"}
        async with http.patch(
            "/api/v1/namespaces/default/pods/p",
            json={"metadata": {"resourceVersion": rv, "labels": {"z": "1"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        ) as r:
            assert r.status == 409
        async with http.get("/api/v1/namespaces") as r:
            listing = await r.json()
            assert (listing["kind"], listing["apiVersion"]) == ("NamespaceList", "v1")
            assert {"default", "kube-system"} <= {ns["metadata"]["name"] for ns in listing["items"]}
            assert int(listing["metadata"]["resourceVersion"]) >= int(rv)
        async with http.get("/api/v1/pods?labelSelector=a%3D%3D") as r:
            assert r.status == 200  # "a==" is a valid selector: label a with an empty value


async def test_asyncio_client_watch_resume_and_gone(
    make_sandbox_cluster: Callable[..., Awaitable[SandboxCluster]],
) -> None:
    # No scheduler: nothing but this test writes the pods.
    cluster: SandboxCluster = await make_sandbox_cluster(history_size=50, run_scheduler=False)
    config = kubernetes_asyncio.client.Configuration(host=cluster.url)
    async with kubernetes_asyncio.client.ApiClient(config) as client:
        # Any: the generated stubs take only V1Pod models; the client sends a dict body as it is.
        api: Any = kubernetes_asyncio.client.CoreV1Api(client)
        first = await api.create_namespaced_pod("default", pod_body("a", {"app": "w"}))
        await api.create_namespaced_pod("default", pod_body("b", {"app": "other"}))
        listed = await api.list_namespaced_pod("default", label_selector="app=w")
        assert [p.metadata.name for p in listed.items] == ["a"]
        resume_from = listed.metadata.resource_version
        await api.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"step": "2"}}})
        await api.create_namespaced_pod("default", pod_body("c", {"app": "w"}))
        await api.delete_namespaced_pod("b", "default")

        watch = kubernetes_asyncio.watch.Watch()
        seen: list[tuple[str, str]] = []
        async with watch.stream(
            api.list_namespaced_pod, "default", label_selector="app=w", resource_version=resume_from, timeout_seconds=1
        ) as stream:
            async for event in stream:
                seen.append((event["type"], event["object"].metadata.name))
        # Only changes after resume_from, filtered by the selector (b is not app=w).
        assert seen == [("MODIFIED", "a"), ("ADDED", "c")]
        assert first.metadata.uid

        for i in range(60):  # push the early versions out of the 50-event history
            await api.patch_namespaced_pod("c", "default", {"metadata": {"labels": {"n": str(i)}}})
    watch_url = f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={resume_from}"
    async with aiohttp.ClientSession(cluster.url) as http, http.get(watch_url) as r:
        event = json.loads(await r.content.readline())
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410
    assert event["object"]["reason"] == "Expired"


async def test_watch_bookmarks_and_timeout(sandbox_cluster: SandboxCluster) -> None:
    query = (
        "watch=true&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1"
    )
    async with (
        aiohttp.ClientSession(sandbox_cluster.url) as http,
        http.get(f"/api/v1/namespaces/default/pods?{query}") as r,
    ):
        lines = [json.loads(line) async for line in r.content]
    assert lines and lines[-1]["type"] == "BOOKMARK"
    assert lines[-1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_a_table_watch_sends_tables_and_bare_bookmarks(sandbox_cluster: SandboxCluster) -> None:
    # What `kubectl get -w` reads: each event's object a one-row Table, a bookmark as it is.
    sandbox_cluster.create("configmaps", {"metadata": {"name": "watched"}}, "default")
    query = (
        "watch=true&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1"
    )
    table = {"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1"}
    async with (
        aiohttp.ClientSession(sandbox_cluster.url) as http,
        http.get(f"/api/v1/namespaces/default/configmaps?{query}", headers=table) as r,
    ):
        lines = [json.loads(line) async for line in r.content]
    assert [line["type"] for line in lines] == ["ADDED", "BOOKMARK"]
    added, bookmark = (line["object"] for line in lines)
    assert added["kind"] == "Table"
    assert [row["cells"][0] for row in added["rows"]] == ["watched"]
    assert bookmark["kind"] == "ConfigMap" and "rows" not in bookmark


async def test_status_and_scale_subresources_and_generation(sandbox_cluster: SandboxCluster) -> None:
    base = "/apis/serving.neuronfleet.dev/v1alpha1/namespaces/default/inferencedeployments"
    body = {
        "apiVersion": "serving.neuronfleet.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "bert", "labels": {"team": "search"}},
        "spec": {"model": {"source": "s3://acme-models/bert/"}, "scaling": {"mode": "Manual", "replicas": 2}},
        "status": {"replicas": 99},
    }
    async with aiohttp.ClientSession(sandbox_cluster.url) as http:
        async with http.post(base, json=body) as r:
            assert r.status == 201, await r.text()
            created = await r.json()
        assert "status" not in created  # dropped on create: status is a subresource
        assert created["metadata"]["generation"] == 1
        assert created["spec"]["scaling"]["minReplicas"] == 1  # structural defaulting from the CRD
        merge = {"Content-Type": "application/merge-patch+json"}
        async with http.patch(
            f"{base}/bert/status",
            json={"status": {"replicas": 2, "selector": "app=bert"}, "spec": {"model": {"source": "s3://x/y/"}}},
            headers=merge,
        ) as r:
            after_status = await r.json()
        assert after_status["status"]["replicas"] == 2
        assert after_status["spec"]["model"]["source"] == "s3://acme-models/bert/"  # /status ignores spec
        assert after_status["metadata"]["generation"] == 1
        async with http.patch(
            f"{base}/bert", json={"status": {"replicas": 7}, "metadata": {"labels": {"x": "y"}}}, headers=merge
        ) as r:
            after_main = await r.json()
        assert after_main["status"]["replicas"] == 2  # main resource ignores status
        assert after_main["metadata"]["generation"] == 1  # metadata-only change
        async with http.patch(f"{base}/bert/scale", json={"spec": {"replicas": 5}}, headers=merge) as r:
            scale = await r.json()
        assert (scale["kind"], scale["apiVersion"]) == ("Scale", "autoscaling/v1")
        assert scale["spec"]["replicas"] == 5
        assert scale["status"] == {"replicas": 2, "selector": "app=bert"}
        async with http.get(f"{base}/bert") as r:
            scaled = await r.json()
        assert scaled["spec"]["scaling"]["replicas"] == 5
        assert scaled["metadata"]["generation"] == 2
        stale = {**scale, "metadata": {**scale["metadata"], "resourceVersion": "1"}, "spec": {"replicas": 6}}
        async with http.put(f"{base}/bert/scale", json=stale) as r:
            assert r.status == 409  # a Scale written from a stale read is refused, as any object is
        async with http.patch(
            f"{base}/bert",
            json={"spec": {"scaling": {"replicaz": 1}}},
            headers=merge,
            params={"fieldValidation": "Strict"},
        ) as r:
            assert r.status == 400
            assert "unknown field" in (await r.json())["message"]
        async with http.patch(f"{base}/bert", json={"spec": {"scaling": {"minReplicas": -1}}}, headers=merge) as r:
            assert r.status == 422
            assert "spec.scaling.minReplicas" in (await r.json())["message"]
        async with http.patch(
            f"{base}/bert", json={"spec": {}}, headers={"Content-Type": "application/strategic-merge-patch+json"}
        ) as r:
            assert r.status == 415


async def test_finalizers_and_cascading_gc(sandbox_cluster: SandboxCluster) -> None:
    async with aiohttp.ClientSession(sandbox_cluster.url) as http:
        async with http.post(
            "/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "owner", "finalizers": ["test/hold"]}}
        ) as r:
            owner = await r.json()
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
        async with http.post(
            "/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "child", "ownerReferences": [ref]}}
        ) as r:
            child = await r.json()
        grandchild_ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "child", "uid": child["metadata"]["uid"]}
        async with http.post(
            "/api/v1/namespaces/default/configmaps",
            json={"metadata": {"name": "grandchild", "ownerReferences": [grandchild_ref]}},
        ) as r:
            assert r.status == 201
        async with http.delete("/api/v1/namespaces/default/configmaps/owner") as r:
            assert r.status == 202
            marked = await r.json()
        assert marked["metadata"]["deletionTimestamp"]
        assert sandbox_cluster.get("configmaps", "owner", "default") is not None  # held by its finalizer
        async with http.patch(
            "/api/v1/namespaces/default/configmaps/owner",
            json={"metadata": {"finalizers": None}},
            headers={"Content-Type": "application/merge-patch+json"},
        ) as r:
            assert r.status == 200
    assert sandbox_cluster.get("configmaps", "owner", "default") is None
    await sandbox_cluster.wait_for(
        lambda: (
            sandbox_cluster.get("configmaps", "child", "default") is None
            and sandbox_cluster.get("configmaps", "grandchild", "default") is None
        ),
        timeout=5,
        what="cascading deletion",
    )


async def test_foreground_deletion_waits_for_the_dependents_that_block_it(sandbox_cluster: SandboxCluster) -> None:
    cluster = sandbox_cluster

    def configmap(
        name: str, owner: dict[str, Any] | None = None, *, blocks: bool = True, **meta: Any
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"metadata": {"name": name, **meta}}
        if owner is not None:
            ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"]}
            body["metadata"]["ownerReferences"] = [
                {**ref, "uid": owner["metadata"]["uid"], "blockOwnerDeletion": blocks}
            ]
        return cluster.create("configmaps", body, "default")

    def present(name: str) -> bool:
        return cluster.get("configmaps", name, "default") is not None

    def meta(name: str) -> dict[str, Any]:
        found = cluster.get("configmaps", name, "default")
        assert found is not None, f"{name} is gone"
        return dict(found["metadata"])

    owner = configmap("owner")
    held = configmap("held", owner, finalizers=["test/hold"])  # blocks, and its finalizer keeps it
    configmap("loose", owner, blocks=False)
    middle = configmap("middle", owner)  # blocks, and is itself held up by a grandchild that blocks it
    configmap("grandchild", middle, finalizers=["test/hold"])
    async with aiohttp.ClientSession(cluster.url) as http:
        url = "/api/v1/namespaces/default/configmaps/owner"
        async with http.delete(url, params={"propagationPolicy": "Foreground"}) as r:
            assert r.status == 202
            assert (await r.json())["metadata"]["finalizers"] == ["foregroundDeletion"]
        await cluster.wait_for(lambda: not present("loose"), timeout=5, what="the non-blocking dependent deleted")
        # As the garbage collector, a dependent with dependents of its own goes in the foreground too.
        await cluster.wait_for(
            lambda: meta("grandchild").get("deletionTimestamp"),
            timeout=5,
            what="the grandchild marked",
        )
        assert present("owner") and present("held") and present("middle")
        assert meta("middle")["finalizers"] == ["foregroundDeletion"]
        unhold = {"metadata": {"finalizers": None}}
        merge = {"Content-Type": "application/merge-patch+json"}
        async with http.patch(f"{url[: -len('owner')]}held", json=unhold, headers=merge) as r:
            assert r.status == 200
        assert not present("held")
        assert present("owner")  # the middle one still blocks it
        async with http.patch(f"{url[: -len('owner')]}grandchild", json=unhold, headers=merge) as r:
            assert r.status == 200
    await cluster.wait_for(lambda: not present("middle") and not present("owner"), timeout=5, what="the owner gone")
    assert held["metadata"]["uid"] not in cluster.store.uids
    deleted = [e.obj["metadata"]["name"] for e in cluster.store.history if e.type == "DELETED"]
    assert deleted.index("middle") < deleted.index("owner")  # watchers see the owner go last

    # An owner's own finalizers stay beside foregroundDeletion, and do not hold its dependents back.
    kept = configmap("kept", finalizers=["test/hold"])
    configmap("kept-child", kept)
    cluster.delete("configmaps", "kept", "default", propagation="Foreground")
    assert meta("kept")["finalizers"] == ["test/hold", "foregroundDeletion"]
    await cluster.wait_for(lambda: not present("kept-child"), timeout=5, what="the dependent deleted")
    assert meta("kept")["finalizers"] == ["test/hold"]


async def test_discovery_and_openapi(sandbox_cluster: SandboxCluster) -> None:
    async with aiohttp.ClientSession(sandbox_cluster.url) as http:
        async with http.get("/apis") as r:
            groups = {g["name"] for g in (await r.json())["groups"]}
        assert {
            "serving.neuronfleet.dev",
            "policy",
            "batch",
            "scheduling.k8s.io",
            "coordination.k8s.io",
            "apiextensions.k8s.io",
            "events.k8s.io",
        } <= groups
        async with http.get("/apis/serving.neuronfleet.dev/v1alpha1") as r:
            resources = {res["name"]: res for res in (await r.json())["resources"]}
        assert resources["inferencedeployments/scale"]["kind"] == "Scale"
        assert resources["inferencedeployments"]["shortNames"] == ["infdep", "idep"]
        async with http.get("/openapi/v3") as r:
            url = (await r.json())["paths"]["apis/serving.neuronfleet.dev/v1alpha1"]["serverRelativeURL"]
        async with http.get(url) as r:
            doc = await r.json()
        schema = doc["components"]["schemas"]["dev.neuronfleet.serving.v1alpha1.InferenceDeployment"]
        assert schema["x-kubernetes-group-version-kind"] == [
            {"group": "serving.neuronfleet.dev", "version": "v1alpha1", "kind": "InferenceDeployment"}
        ]
        async with http.get("/openapi/v3/api/v1") as r:
            core = (await r.json())["components"]["schemas"]
        kinds = [gvk for one in core.values() for gvk in one.get("x-kubernetes-group-version-kind", [])]
        assert {"group": "", "version": "v1", "kind": "Pod"} in kinds
        assert {gvk["group"] for gvk in kinds} == {""}  # the core group's document: not apps/v1, batch/v1...
        async with http.get(
            "/api/v1/namespaces/default/pods", headers={"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1"}
        ) as r:
            table = await r.json()
        assert table["kind"] == "Table"
        assert [c["name"] for c in table["columnDefinitions"]][:3] == ["Name", "Ready", "Status"]


async def test_crd_created_through_the_api_is_served(sandbox_cluster: SandboxCluster) -> None:
    crd: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}},
                        }
                    },
                }
            ],
        },
    }
    async with aiohttp.ClientSession(sandbox_cluster.url) as http:
        async with http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd) as r:
            assert r.status == 201
            established = await r.json()
        assert {c["type"] for c in established["status"]["conditions"]} == {"NamesAccepted", "Established"}
        async with http.post(
            "/apis/example.com/v1/namespaces/default/widgets", json={"metadata": {"name": "w"}, "spec": {"size": "big"}}
        ) as r:
            assert r.status == 422
        async with http.post(
            "/apis/example.com/v1/namespaces/default/widgets", json={"metadata": {"name": "w"}, "spec": {"size": 3}}
        ) as r:
            assert r.status == 201
            assert (await r.json())["kind"] == "Widget"

        # Replacing the CRD (a new schema) is an update of the resource it serves, not a conflict.
        crd["metadata"]["resourceVersion"] = established["metadata"]["resourceVersion"]
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["colour"] = {
            "type": "string"
        }
        async with http.put(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", json=crd
        ) as r:
            assert r.status == 200, await r.text()
        # A CRD may not take a built-in resource's name.
        shadow = copy.deepcopy(crd)
        del shadow["metadata"]["resourceVersion"]
        shadow["metadata"]["name"] = "deployments.apps"
        shadow["spec"].update(group="apps", names={"kind": "Deployment", "plural": "deployments"})
        async with http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=shadow) as r:
            assert r.status == 422
            assert "the name of a built-in resource" in (await r.json())["message"]


async def test_deleting_an_object_already_being_deleted_bumps_its_generation_no_further(
    sandbox_cluster: SandboxCluster,
) -> None:
    # As kube-apiserver's markAsDeleting: the generation goes up once, when deletionTimestamp is set.
    body = {
        "metadata": {"name": "compile", "finalizers": ["example.com/keep"]},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}},
    }
    url = "/apis/batch/v1/namespaces/default/jobs/compile"
    async with aiohttp.ClientSession(sandbox_cluster.url) as http:
        async with http.post("/apis/batch/v1/namespaces/default/jobs", json=body) as r:
            assert r.status == 201, await r.text()
            created = (await r.json())["metadata"]["generation"]
        async with http.get(f"{url}/status") as r:  # where the Job controller writes
            assert r.status == 200
        for _ in range(2):
            async with http.delete(url) as r:
                assert r.status in (200, 202), await r.text()
        async with http.get(url) as r:
            meta = (await r.json())["metadata"]
        assert meta["deletionTimestamp"] and meta["generation"] == created + 1


async def test_a_body_without_api_version_and_kind_gets_its_resources_and_a_wrong_one_is_refused(
    sandbox_cluster: SandboxCluster,
) -> None:
    body = {"metadata": {"name": "model"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "m"}}}}
    async with aiohttp.ClientSession(sandbox_cluster.url) as http:
        async with http.post("/apis/policy/v1/namespaces/default/poddisruptionbudgets", json=body) as r:
            assert r.status == 201, await r.text()
            created = await r.json()
        assert (created["apiVersion"], created["kind"]) == ("policy/v1", "PodDisruptionBudget")
        # A budget's status is a subresource of its own, where the disruption controller writes it.
        async with http.get("/apis/policy/v1/namespaces/default/poddisruptionbudgets/model/status") as r:
            assert r.status == 200 and (await r.json())["metadata"]["name"] == "model"
        wrong = {**body, "apiVersion": "policy/v1beta1", "metadata": {"name": "other"}}
        async with http.post("/apis/policy/v1/namespaces/default/poddisruptionbudgets", json=wrong) as r:
            assert r.status == 400
            message = (await r.json())["message"]
        assert message == (
            "the API version in the data (policy/v1beta1) does not match the expected API version (policy/v1)"
        )


def test_threaded_cluster_serves_from_its_own_thread(threaded_sandbox_cluster: ThreadedSandboxCluster) -> None:
    names = threaded_sandbox_cluster.call(lambda c: [n["metadata"]["name"] for n in c.list("nodes")])
    assert len(names) == 2
    assert threading.current_thread() is threading.main_thread()
    loop_thread = threaded_sandbox_cluster.call(lambda c: threading.current_thread().name)
    assert loop_thread == "sandbox-cluster"
    assert asyncio.iscoroutinefunction(SandboxCluster.wait_for)
    # A coroutine function's result is awaited in the cluster's loop, so a synchronous test can wait there.
    found = threaded_sandbox_cluster.call(lambda c: c.wait_for(lambda: c.list("nodes")[:1], what="a node"))
    assert [node["metadata"]["name"] for node in found] == names[:1]
    # On a real loop (whose clock started long before), the sandbox's wall time starts at its epoch.
    since_epoch = threaded_sandbox_cluster.call(lambda c: c.clock.wall() - c.clock.epoch)
    assert datetime.timedelta(0) <= since_epoch < datetime.timedelta(seconds=60)


async def test_dry_run_pagination_and_protobuf_bodies(sandbox_cluster: SandboxCluster) -> None:
    async with aiohttp.ClientSession(sandbox_cluster.url) as http:
        async with http.post(
            "/api/v1/namespaces/default/configmaps?dryRun=All", json={"metadata": {"name": "ghost"}}
        ) as r:
            assert r.status == 201
            assert (await r.json())["metadata"]["name"] == "ghost"
        assert sandbox_cluster.get("configmaps", "ghost", "default") is None
        for i in range(5):
            async with http.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": f"cm-{i}"}}) as r:
                assert r.status == 201
        for limit, pages_expected in (("1", 5), ("2", 3)):
            names: list[str] = []
            token = ""
            pages = 0
            while True:
                query = {"limit": limit, "continue": token}
                async with http.get("/api/v1/namespaces/default/configmaps", params=query) as r:
                    page = await r.json()
                pages += 1
                names += [item["metadata"]["name"] for item in page["items"]]
                token = page["metadata"].get("continue", "")
                if not token:
                    break
            assert (pages, names) == (pages_expected, [f"cm-{i}" for i in range(5)])
        async with http.get("/api/v1/namespaces/default/configmaps", params={"continue": "%%%"}) as r:
            assert r.status == 400
        protobuf = {"Content-Type": "application/vnd.kubernetes.protobuf"}
        async with http.post("/api/v1/namespaces", data=b"k8s\x00\n", headers=protobuf) as r:
            assert r.status == 415
            assert "kubectl apply" in (await r.json())["message"]


async def test_a_namespace_finalize_writes_its_finalizers_not_its_status(sandbox_cluster: SandboxCluster) -> None:
    # What `kubectl replace --raw /api/v1/namespaces/<name>/finalize` does to a namespace stuck Terminating.
    namespace = sandbox_cluster.create("namespaces", {"metadata": {"name": "stuck"}})
    assert namespace["spec"]["finalizers"] == ["kubernetes"]
    body = {**namespace, "spec": {"finalizers": []}, "status": {"phase": "Terminating"}}
    async with (
        aiohttp.ClientSession(sandbox_cluster.url) as http,
        http.put("/api/v1/namespaces/stuck/finalize", json=body) as r,
    ):
        assert r.status == 200, await r.text()
        finalized = await r.json()
    assert (finalized["spec"]["finalizers"], finalized["status"]["phase"]) == ([], "Active")


async def test_namespace_and_crd_deletion_wait_for_their_contents(sandbox_cluster: SandboxCluster) -> None:
    cluster = sandbox_cluster
    cluster.create("namespaces", {"metadata": {"name": "team"}})
    cluster.create("configmaps", {"metadata": {"name": "first"}}, "team")
    cluster.delete("configmaps", "first", "team")
    assert cluster.get("namespaces", "team") is not None  # a live namespace outlasts its last object
    cluster.create("configmaps", {"metadata": {"name": "plain"}}, "team")
    held = {
        "metadata": {"name": "held", "finalizers": ["example.com/cleanup"]},
        "spec": {"model": {"source": "s3://models/x/"}},
    }
    cluster.create("inferencedeployments", held, "team", group="serving.neuronfleet.dev")

    cluster.delete("namespaces", "team")
    namespace = cluster.get("namespaces", "team")
    assert namespace is not None and namespace["status"]["phase"] == "Terminating"
    assert cluster.get("configmaps", "plain", "team") is None
    held_now = cluster.get("inferencedeployments", "held", "team", group="serving.neuronfleet.dev")
    assert held_now is not None and held_now["metadata"]["deletionTimestamp"]  # its finalizer still holds it
    async with aiohttp.ClientSession(cluster.url) as http:
        async with http.post("/api/v1/namespaces/team/configmaps", json={"metadata": {"name": "late"}}) as r:
            assert r.status == 403  # no new content in a terminating namespace
        patch = {"metadata": {"finalizers": None}}
        url = "/apis/serving.neuronfleet.dev/v1alpha1/namespaces/team/inferencedeployments/held"
        async with http.patch(url, json=patch, headers={"Content-Type": "application/merge-patch+json"}) as r:
            assert r.status == 200
    assert cluster.get("namespaces", "team") is None

    cluster.create(
        "inferencedeployments",
        {"metadata": {"name": "x"}, "spec": {"model": {"source": "s3://models/x/"}}},
        "default",
        group="serving.neuronfleet.dev",
    )
    cluster.delete(
        "customresourcedefinitions", "inferencedeployments.serving.neuronfleet.dev", group="apiextensions.k8s.io"
    )
    assert (
        cluster.get(
            "customresourcedefinitions", "inferencedeployments.serving.neuronfleet.dev", group="apiextensions.k8s.io"
        )
        is None
    )
    gone_url = "/apis/serving.neuronfleet.dev/v1alpha1/inferencedeployments"
    async with aiohttp.ClientSession(cluster.url) as http, http.get(gone_url) as r:
        assert r.status == 404


async def test_surrogate_escapes_in_a_body_are_read_as_kube_apiserver_reads_them(
    sandbox_cluster: SandboxCluster,
) -> None:
    # Go's encoding/json reads an escaped surrogate pair as its character and a lone surrogate as
    # U+FFFD; Python's json reads the pair alike but kept a lone surrogate, which the pattern check
    # (RE2) could not encode: the request failed with a 500. go-yaml refuses any surrogate escape.
    path = "/apis/serving.neuronfleet.dev/v1alpha1/namespaces/default/inferencedeployments?dryRun=All"
    head = (
        '{"apiVersion": "serving.neuronfleet.dev/v1alpha1", "kind": "InferenceDeployment", "metadata": {"name": "s"},'
    )
    async with aiohttp.ClientSession(sandbox_cluster.url) as http:
        for escaped, read in (("\\ud83d\\ude00", "\U0001f600"), ("\\ud800", "\ufffd")):
            spec = f'"spec": {{"model": {{"source": "s3://acme/bert/"}}, "compile": {{"memory": "8{escaped}G"}}}}'
            body = f"{head} {spec}}}"
            async with http.post(path, data=body.encode(), headers={"Content-Type": "application/json"}) as r:
                assert r.status == 422, await r.text()
                assert f'spec.compile.memory: Invalid value: "8{read}G"' in (await r.json())["message"]
        yaml_body = (
            "apiVersion: serving.neuronfleet.dev/v1alpha1\nkind: InferenceDeployment\nmetadata: {name: s}\n"
            'spec: {model: {source: "s3://acme/bert/"}, compile: {memory: "8\\ud800G"}}\n'
        )
        async with http.post(path, data=yaml_body.encode(), headers={"Content-Type": "application/yaml"}) as r:
            assert r.status == 400
            assert "found invalid Unicode character escape code" in (await r.json())["message"]
        # A DeleteOptions body is JSON read the same way.
        configmaps = "/api/v1/namespaces/default/configmaps"
        async with http.post(configmaps, json={"metadata": {"name": "surrogate"}}) as r:
            assert r.status == 201, await r.text()
        options = b'{"propagationPolicy": "\\ud800"}'
        async with http.delete(f"{configmaps}/surrogate", data=options) as r:
            assert r.status == 400, await r.text()
            assert "propagationPolicy: Unsupported value: '\ufffd'" in (await r.json())["message"]


async def test_whole_number_floats_are_integers_as_kube_apiserver_takes_them(sandbox_cluster: SandboxCluster) -> None:
    # kube-openapi accepts a whole-number float for an `integer` field and Go writes it back as an
    # integer; kubectl already sends 2 and 1000, but other clients may send these bodies as they are.
    path = "/apis/serving.neuronfleet.dev/v1alpha1/namespaces/default/inferencedeployments?dryRun=All"
    head = '{"apiVersion": "serving.neuronfleet.dev/v1alpha1", "kind": "InferenceDeployment",'
    model = '"model": {"source": "s3://acme/bert/"}'
    as_json = {"Content-Type": "application/json"}
    as_yaml = {"Content-Type": "application/yaml"}
    async with aiohttp.ClientSession(sandbox_cluster.url) as http:
        scaling = '"scaling": {"minReplicas": 2.0, "maxReplicas": 1e3}'
        body = f'{head} "metadata": {{"name": "f"}}, "spec": {{{model}, {scaling}}}}}'
        async with http.post(path, data=body.encode(), headers=as_json) as r:
            assert r.status == 201, await r.text()
            stored = (await r.json())["spec"]["scaling"]
        assert (stored["minReplicas"], stored["maxReplicas"]) == (2, 1000)
        assert isinstance(stored["minReplicas"], int) and isinstance(stored["maxReplicas"], int)
        yaml_body = (
            "apiVersion: serving.neuronfleet.dev/v1alpha1\nkind: InferenceDeployment\nmetadata: {name: g}\n"
            "spec: {model: {source: 's3://acme/bert/'}, scaling: {maxReplicas: 1e3}}\n"
        )
        async with http.post(path, data=yaml_body.encode(), headers=as_yaml) as r:
            assert r.status == 201, await r.text()
            assert (await r.json())["spec"]["scaling"]["maxReplicas"] == 1000
        # A YAML body is read as go-yaml reads it: an unquoted y is true, not a name.
        async with http.post(path, data=yaml_body.replace("name: g", "name: y").encode(), headers=as_yaml) as r:
            assert r.status == 422
            assert "metadata.name: Invalid value: true: must be a string" in (await r.json())["message"]
        fraction = f'{head} "metadata": {{"name": "h"}}, "spec": {{{model}, "scaling": {{"minReplicas": 2.5}}}}}}'
        async with http.post(path, data=fraction.encode(), headers=as_json) as r:
            assert r.status == 422
            assert "spec.scaling.minReplicas" in (await r.json())["message"]
