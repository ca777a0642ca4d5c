"""Server-side dry-run against the sandbox API server, over real HTTP and with real kubectl.

For every write verb a ``dryRun=All`` request answers the would-be result and leaves the stored
object byte-identical (its JSON, so resourceVersion, generation and managedFields too) and sends
no watch event: a watch opened before the dry-runs sees a later real write first.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fixtures_cluster import RunKubectl
from neuronfleet.sandbox import NodeGroup, SandboxCluster, ThreadedSandboxCluster

GROUP_PATH = "/apis/serving.neuronfleet.dev/v1alpha1/namespaces/default/inferencedeployments"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}
STRATEGIC = {"Content-Type": "application/strategic-merge-patch+json"}
APPLY = {"Content-Type": "application/apply-patch+yaml"}
DRY = {"dryRun": "All"}

#: The ``run_kubectl`` fixture (tests/fixtures_cluster.py): ``run_kubectl(*args, check=True)`` runs kubectl.


def infdep(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "serving.neuronfleet.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": name, **metadata},
        "spec": {
            "model": {"source": "s3://models/x/"},
            "scaling": {"mode": "Manual", "replicas": 1},
            "runtime": {"maxQueue": 8},
        },
    }


async def text_of(http: aiohttp.ClientSession, path: str) -> str:
    async with http.get(path) as r:
        assert r.status == 200, await r.text()
        return json.dumps(await r.json(), sort_keys=True)


async def request(
    http: aiohttp.ClientSession, method: str, path: str, body: Any = None, *, headers: Any = None, params: Any = None
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **(headers or {})}
    async with http.request(method, path, data=data, headers=headers, params=params) as r:
        return r.status, await r.json()


class Watch:
    """A watch on one collection from a resourceVersion, read until a named object's event."""

    def __init__(self, http: aiohttp.ClientSession, path: str, since: str) -> None:
        self.http, self.path, self.since = http, path, since

    async def events_until(self, name: str) -> list[tuple[str, str]]:
        params = {"watch": "1", "resourceVersion": self.since, "timeoutSeconds": "30"}
        seen: list[tuple[str, str]] = []
        async with self.http.get(self.path, params=params) as r:
            assert r.status == 200
            async for line in r.content:
                event = json.loads(line)
                seen.append((event["type"], event["object"]["metadata"]["name"]))
                if seen[-1][1] == name:
                    return seen
        raise AssertionError(f"the watch ended before {name}'s event: {seen}")


@pytest.fixture
async def http(sandbox_cluster: SandboxCluster) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(sandbox_cluster.url) as session:
        yield session


async def collection_rv(http: aiohttp.ClientSession, path: str) -> str:
    async with http.get(path) as r:
        rv: str = (await r.json())["metadata"]["resourceVersion"]
        return rv


async def test_dry_run_writes_of_a_custom_object_change_nothing(http: aiohttp.ClientSession) -> None:
    one = f"{GROUP_PATH}/one"
    status, _ = await request(http, "POST", GROUP_PATH, infdep("one"), params={"fieldManager": "creator"})
    assert status == 201
    # A status and a scale written for real first: every part of the object has a manager.
    status, _ = await request(http, "PATCH", f"{one}/status", {"status": {"observedGeneration": 1}}, headers=MERGE)
    assert status == 200
    # Applied by one manager, which takes maxBatchDelayMs from the creator (who holds it defaulted):
    # its later dry-run apply removes a field it applied before.
    applied = infdep("one")
    applied["spec"]["runtime"] = {"maxQueue": 8, "maxBatchDelayMs": 7.0}
    status, _ = await request(
        http, "PATCH", one, applied, headers=APPLY, params={"fieldManager": "ops", "force": "true"}
    )
    assert status == 200, _
    before = await text_of(http, one)
    since = await collection_rv(http, GROUP_PATH)
    watch = Watch(http, GROUP_PATH, since)

    stored = json.loads(before)
    replaced = json.loads(before)
    replaced["spec"]["runtime"]["maxQueue"] = 97
    # spec.runtime no longer applied: maxBatchDelayMs, which only "ops" holds, is removed (maxQueue the
    # creator holds too) from a map the config leaves alone.
    fewer = infdep("one")
    del fewer["spec"]["runtime"]
    other = infdep("one") | {"spec": {"model": {"source": "s3://models/y/"}}}
    status_body = json.loads(before)
    status_body["status"] = {"observedGeneration": 6}
    scale = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "one"}, "spec": {"replicas": 4}}
    requests: list[tuple[str, str, str, Any, Any, dict[str, str]]] = [
        ("merge", "PATCH", one, {"spec": {"runtime": {"maxQueue": 99}}}, MERGE, DRY),
        ("json", "PATCH", one, [{"op": "replace", "path": "/spec/runtime/maxQueue", "value": 98}], JSON_PATCH, DRY),
        ("labels", "PATCH", one, {"metadata": {"labels": {"dry": "run"}}}, MERGE, DRY),
        ("put", "PUT", one, replaced, None, DRY),
        ("apply", "PATCH", one, fewer, APPLY, {**DRY, "fieldManager": "ops"}),
        ("apply-other", "PATCH", one, other, APPLY, {**DRY, "fieldManager": "other", "force": "true"}),
        ("status-patch", "PATCH", f"{one}/status", {"status": {"observedGeneration": 7}}, MERGE, DRY),
        ("status-put", "PUT", f"{one}/status", status_body, None, DRY),
        ("scale-patch", "PATCH", f"{one}/scale", {"spec": {"replicas": 5}}, MERGE, DRY),
        ("scale-put", "PUT", f"{one}/scale", scale, None, DRY),
        ("delete", "DELETE", one, None, None, DRY),
        ("delete-collection", "DELETE", GROUP_PATH, None, None, DRY),
        # A dry-run create of a taken name is refused as a real one is.
        ("create-taken", "POST", GROUP_PATH, infdep("one"), None, DRY),
    ]
    answers: dict[str, tuple[int, Any]] = {}
    for label, method, path, body, headers, params in requests:
        answers[label] = await request(http, method, path, body, headers=headers, params=params)
        after = await request(http, "GET", one)
        assert after == (200, stored), f"the dry-run {label} changed the stored object"
        assert await collection_rv(http, GROUP_PATH) == since, label

    # The answers are the would-be results, at the stored resourceVersion.
    assert {k: v[0] for k, v in answers.items()} == {
        "merge": 200,
        "json": 200,
        "labels": 200,
        "put": 200,
        "apply": 200,
        "apply-other": 200,
        "status-patch": 200,
        "status-put": 200,
        "scale-patch": 200,
        "scale-put": 200,
        "delete": 200,
        "delete-collection": 200,
        "create-taken": 409,
    }, answers
    rv, generation = stored["metadata"]["resourceVersion"], stored["metadata"]["generation"]
    merged = answers["merge"][1]
    assert (merged["spec"]["runtime"]["maxQueue"], merged["metadata"]["generation"]) == (99, generation + 1)
    assert merged["metadata"]["resourceVersion"] == rv
    assert answers["json"][1]["spec"]["runtime"]["maxQueue"] == 98
    assert answers["labels"][1]["metadata"]["labels"] == {"dry": "run"}
    assert answers["labels"][1]["metadata"]["generation"] == generation
    assert answers["put"][1]["spec"]["runtime"]["maxQueue"] == 97
    assert answers["apply"][1]["spec"]["runtime"]["maxBatchDelayMs"] == 5.0  # removed, so defaulted again
    assert answers["apply-other"][1]["spec"]["model"]["source"] == "s3://models/y/"
    assert answers["status-patch"][1]["status"]["observedGeneration"] == 7
    assert answers["status-put"][1]["status"]["observedGeneration"] == 6
    assert answers["scale-patch"][1]["spec"]["replicas"] == 5
    assert answers["scale-put"][1]["spec"]["replicas"] == 4
    assert answers["delete"][1]["metadata"]["name"] == "one"
    assert [i["metadata"]["name"] for i in answers["delete-collection"][1]["items"]] == ["one"]

    # No watch event: the first one after the dry-runs is a real write's.
    status, _ = await request(http, "POST", GROUP_PATH, infdep("sentinel"))
    assert status == 201
    assert await watch.events_until("sentinel") == [("ADDED", "sentinel")]


async def test_dry_run_deletes_of_held_and_builtin_objects_change_nothing(http: aiohttp.ClientSession) -> None:
    held = f"{GROUP_PATH}/held"
    status, _ = await request(http, "POST", GROUP_PATH, infdep("held", finalizers=["example.com/keep"]))
    assert status == 201
    for i in range(3):
        body = {"metadata": {"name": f"cm-{i}", "labels": {"app": "dry"}}, "data": {"k": "v"}}
        status, _ = await request(http, "POST", CONFIGMAPS, body)
        assert status == 201
    before = {path: await text_of(http, path) for path in (held, f"{CONFIGMAPS}/cm-0", f"{CONFIGMAPS}/cm-1")}
    since = await collection_rv(http, CONFIGMAPS)
    cm_watch, held_watch = Watch(http, CONFIGMAPS, since), Watch(http, GROUP_PATH, since)

    status, marked = await request(http, "DELETE", held, params=DRY)
    # A finalizer holds it: the answer is the object as it would be marked, 202 as for a real one.
    assert status == 202, marked
    assert (
        marked["metadata"]["deletionTimestamp"]
        and marked["metadata"]["resourceVersion"] == json.loads(before[held])["metadata"]["resourceVersion"]
    )
    status, gone = await request(http, "DELETE", f"{CONFIGMAPS}/cm-0", params=DRY)
    assert (status, gone["metadata"]["name"]) == (200, "cm-0")
    status, listed = await request(http, "DELETE", CONFIGMAPS, params={**DRY, "labelSelector": "app=dry"})
    assert status == 200
    assert [i["metadata"]["name"] for i in listed["items"]] == ["cm-0", "cm-1", "cm-2"]
    # Strategic merge of a data field: only the metadata of the stored object could be shared.
    status, patched = await request(
        http, "PATCH", f"{CONFIGMAPS}/cm-1", {"data": {"k": "w"}}, headers=STRATEGIC, params=DRY
    )
    assert (status, patched["data"]) == (200, {"k": "w"})
    status, _ = await request(http, "DELETE", "/api/v1/namespaces/default", params=DRY)
    assert status in (200, 202)
    # Preconditions are checked as for a real delete.
    status, refused = await request(
        http, "DELETE", f"{CONFIGMAPS}/cm-1", {"preconditions": {"resourceVersion": "1"}}, params=DRY
    )
    assert status == 409, refused

    assert {path: await text_of(http, path) for path in before} == before
    assert await collection_rv(http, CONFIGMAPS) == since
    assert (await text_of(http, "/api/v1/namespaces/default")).count("deletionTimestamp") == 0
    status, _ = await request(http, "POST", CONFIGMAPS, {"metadata": {"name": "sentinel"}})
    assert status == 201
    status, _ = await request(http, "POST", GROUP_PATH, infdep("sentinel"))
    assert status == 201
    assert await cm_watch.events_until("sentinel") == [("ADDED", "sentinel")]
    assert await held_watch.events_until("sentinel") == [("ADDED", "sentinel")]


async def test_a_real_patch_leaves_the_previous_watch_event_intact(http: aiohttp.ClientSession) -> None:
    # The same sharing that let a dry-run write into the stored object let a real patch write its
    # resourceVersion and generation into the object of the event before it.
    status, created = await request(http, "POST", GROUP_PATH, infdep("hist"))
    assert status == 201
    since = str(int(created["metadata"]["resourceVersion"]) - 1)
    status, _ = await request(
        http, "PATCH", f"{GROUP_PATH}/hist", {"spec": {"runtime": {"maxQueue": 9}}}, headers=MERGE
    )
    assert status == 200
    params = {"watch": "1", "resourceVersion": since, "timeoutSeconds": "30"}
    objects = []
    async with http.get(GROUP_PATH, params=params) as r:
        async for line in r.content:
            objects.append(json.loads(line)["object"])
            if len(objects) == 2:
                break
    assert [o["metadata"]["generation"] for o in objects] == [1, 2]
    assert objects[0]["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert objects[0] == created


MANIFEST = """\
apiVersion: serving.neuronfleet.dev/v1alpha1
kind: InferenceDeployment
metadata:
  name: bert
spec:
  model: {source: "s3://acme-models/bert/"}
  scaling: {mode: Manual, replicas: REPLICAS}
"""


def test_kubectl_dry_run_server_changes_nothing(
    run_kubectl: RunKubectl, threaded_sandbox_cluster: ThreadedSandboxCluster, tmp_path: Path
) -> None:
    manifest = tmp_path / "bert.yaml"
    manifest.write_text(MANIFEST.replace("REPLICAS", "2"))
    run_kubectl("apply", "--server-side", "-f", str(manifest))
    for i in range(2):
        run_kubectl("create", "configmap", f"cm-{i}", "--from-literal=k=v")
    before = run_kubectl("get", "infdep", "bert", "-o", "json").stdout
    cms = run_kubectl("get", "configmaps", "-o", "json").stdout

    assert "(server dry run)" in run_kubectl("scale", "infdep/bert", "--replicas=5", "--dry-run=server").stdout
    run_kubectl(
        "patch", "infdep", "bert", "--type", "merge", "-p", '{"spec":{"scaling":{"replicas":6}}}', "--dry-run=server"
    )
    run_kubectl("label", "infdep", "bert", "dry=run", "--dry-run=server")
    replaced = json.loads(before)
    replaced["spec"]["scaling"]["replicas"] = 7
    (tmp_path / "replaced.json").write_text(json.dumps(replaced))
    run_kubectl("replace", "--dry-run=server", "-f", str(tmp_path / "replaced.json"))
    run_kubectl("delete", "infdep", "bert", "--dry-run=server")
    run_kubectl("delete", "configmaps", "--all", "--dry-run=server")
    run_kubectl("delete", "configmap", "cm-0", "--dry-run=server")

    assert run_kubectl("get", "infdep", "bert", "-o", "json").stdout == before
    assert run_kubectl("get", "configmaps", "-o", "json").stdout == cms
    # Nothing recorded kubectl-patch, kubectl-scale... as a manager: the applier changes replicas freely.
    manifest.write_text(MANIFEST.replace("REPLICAS", "9"))
    run_kubectl("apply", "--server-side", "-f", str(manifest))
    assert run_kubectl("get", "infdep", "bert", "-o", "jsonpath={.spec.scaling.replicas}").stdout == "9"


async def test_dry_run_binding_and_eviction_change_nothing(
    make_sandbox_cluster: Callable[..., Awaitable[SandboxCluster]],
) -> None:
    # No scheduler: the pod stays unbound until the test binds it.
    cluster = await make_sandbox_cluster(node_groups=[NodeGroup("g", "inf2.xlarge", count=1)], run_scheduler=False)
    pods = "/api/v1/namespaces/default/pods"
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    node = cluster.list("nodes")[0]["metadata"]["name"]
    async with aiohttp.ClientSession(cluster.url) as http:
        status, _ = await request(http, "POST", pods, pod)
        assert status == 201
        before = await text_of(http, f"{pods}/p")
        since = await collection_rv(http, pods)
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"name": node}}
        status, _ = await request(http, "POST", f"{pods}/p/binding", binding, params=DRY)
        assert status == 201
        assert await text_of(http, f"{pods}/p") == before, "the dry-run binding bound the pod"
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}}
        status, _ = await request(http, "POST", f"{pods}/p/eviction", eviction, params=DRY)
        assert status == 201
        in_options = {**eviction, "deleteOptions": {"dryRun": ["All"]}}
        status, _ = await request(http, "POST", f"{pods}/p/eviction", in_options)
        assert status == 201
        assert await text_of(http, f"{pods}/p") == before, "the dry-run eviction deleted the pod"
        assert await collection_rv(http, pods) == since
