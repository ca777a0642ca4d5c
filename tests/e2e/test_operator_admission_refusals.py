"""Settings the API server refuses every pod for are named, with the field and the fix (real Kopf
operator, sandbox API server emulating ServiceAccount admission for the operator's pods and the Job
controller's).

A ServiceAccount missing from the namespace (a typo, a namespace not set up yet) used to read
"PodCreationRefused" (serving) or "no pod created for N min" (compile); a spec.runtime.cpuLimit below
the CPU request the placement computes made every pod a refused create.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import replace
from typing import Any

from kubernetes_asyncio import client as k8s
from operator_harness import OperatorHarness, example, ready

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.kube.jobs import build_compile_job
from neuronfleet.planning.admission import OperatorAccount
from neuronfleet.planning.compile import compile_request

NS = "accounts"


def manual(name: str, **overrides: Any) -> dict[str, Any]:
    manifest = example(
        "bert-embeddings",
        scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0},
        warmPool={"mode": "Off"},
        **overrides,
    )
    manifest["metadata"]["name"] = name
    return manifest


async def create_account(harness: OperatorHarness, name: str) -> None:
    core = await harness.client(k8s.CoreV1Api)
    await core.create_namespaced_service_account(NS, {"metadata": {"name": name}})


async def test_a_missing_serving_account_is_named_with_its_field_and_pods_follow_once_it_exists(
    harness: OperatorHarness,
) -> None:
    manifest = harness.localize(manual("reader", runtime={"serviceAccountName": "model-reader"}), namespace=NS)
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(
        lambda: harness.condition(NS, "reader", "Degraded").get("reason") == "ServiceAccountMissing",
        timeout=120,
        what="Degraded=True ServiceAccountMissing",
    )
    degraded = harness.condition(NS, "reader", "Degraded")
    assert degraded["status"] == "True"
    assert "ServiceAccount model-reader does not exist in namespace accounts" in degraded["message"]
    assert "named by spec.runtime.serviceAccountName" in degraded["message"]
    assert harness.condition(NS, "reader", "Scheduled")["reason"] == "ServiceAccountMissing"
    assert not harness.pods(NS, "reader")
    await harness.wait(
        lambda: any(e["type"] == "Warning" for e in harness.events(NS, "reader", "ServiceAccountMissing")),
        timeout=60,
        what="a Warning Event",
    )

    await create_account(harness, "model-reader")
    await harness.wait(
        lambda: harness.condition(NS, "reader", "Ready").get("status") == "True", timeout=300, what="Ready"
    )
    assert harness.condition(NS, "reader", "Degraded")["status"] == "False"
    (pod,) = harness.pods(NS, "reader")
    assert ready(pod) and pod["spec"]["serviceAccountName"] == "model-reader"
    # The refused create's answer named the account: nothing was read to find it (only a compile Job
    # without a pod is a reason to read one).
    assert not [r for r in harness.cluster.request_log if r.resource == "serviceaccounts" and r.method == "GET"]


async def test_a_spec_whose_pods_would_run_as_the_operators_own_account_is_invalid_and_makes_nothing(
    harness: OperatorHarness,
) -> None:
    # The operator as the chart runs it: it knows its account and namespace (the downward API).
    await harness.crash()
    harness.settings = replace(harness.settings, operator_account=OperatorAccount(NS, "nf-operator"))
    await harness.start()
    await harness.ensure_namespace(NS)
    await create_account(harness, "nf-operator")  # it exists: the API server would admit the pods
    manifest = harness.localize(manual("borrowed", runtime={"serviceAccountName": "nf-operator"}), namespace=NS)
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(
        lambda: harness.condition(NS, "borrowed", "Degraded").get("reason") == "InvalidSpec",
        timeout=120,
        what="Degraded=True InvalidSpec",
    )
    message = harness.condition(NS, "borrowed", "Degraded")["message"]
    assert message.startswith(
        "generation 1 refused: the serving pods would run as ServiceAccount nf-operator, the operator's own in its "
        "namespace accounts "
        "(named by spec.runtime.serviceAccountName): they would get the operator's IAM role"
    )
    assert harness.condition(NS, "borrowed", "Ready")["reason"] == "InvalidSpec"
    await harness.wait(lambda: harness.events(NS, "borrowed", "InvalidSpec"), timeout=60, what="a Warning Event")
    await asyncio.sleep(60)  # fake time: reconciles go on, and make nothing
    assert not harness.pods(NS, "borrowed")
    assert not harness.cluster.list("jobs", NS, group="batch")
    assert not harness.events(NS, "borrowed", "ReconcileFailed")  # reported, not raised

    await create_account(harness, "model-reader")
    await harness.patch_spec(NS, "borrowed", {"runtime": {"serviceAccountName": "model-reader"}})
    await harness.wait(
        lambda: harness.condition(NS, "borrowed", "Ready").get("status") == "True", timeout=300, what="Ready"
    )
    (pod,) = harness.pods(NS, "borrowed")
    assert pod["spec"]["serviceAccountName"] == "model-reader"


async def test_a_refusal_deletes_what_serves_nothing_as_the_operators_account_and_names_the_serving_pods_kept(
    harness: OperatorHarness,
) -> None:
    """Pods made before the operator knew its account (before the upgrade that added the check) run as
    it: once refused, the placeholder, the warm pod and a compile Job go; the active pod, which takes
    traffic, stays and is named with the fix; fixing the account replaces it."""
    await harness.ensure_namespace(NS)
    await create_account(harness, "nf-operator")
    manifest = manual("borrowed", runtime={"serviceAccountName": "nf-operator"})
    manifest["spec"]["warmPool"] = {"mode": "Fixed", "pods": 1, "nodePlaceholders": 1}
    manifest = harness.localize(manifest, namespace=NS)
    harness.precompile(manifest)
    await harness.apply(manifest)  # the operator does not know its account yet
    roles = ("active", "warm", "placeholder")
    await harness.wait(
        lambda: all(harness.pods(NS, "borrowed", role) for role in roles), timeout=300, what="active, warm, placeholder"
    )
    assert {p["spec"].get("serviceAccountName") for p in harness.pods(NS, "borrowed")} == {"nf-operator"}
    (active,) = harness.pods(NS, "borrowed", "active")
    await harness.crash()
    # A compile Job of the deployment's running as that account, as one made before would.
    stored = harness.cluster.get("inferencedeployments", "borrowed", NS, group="serving.neuronfleet.dev")
    assert stored is not None
    dep = InferenceDeployment.model_validate({k: v for k, v in stored.items() if k != "status"})
    job = build_compile_job(dep, compile_request(dep.spec, str(harness.store_dir)))
    job["spec"]["template"]["spec"]["serviceAccountName"] = "nf-operator"
    batch = await harness.client(k8s.BatchV1Api)
    await batch.create_namespaced_job(NS, job)
    assert harness.cluster.list("jobs", NS, group="batch")

    harness.settings = replace(harness.settings, operator_account=OperatorAccount(NS, "nf-operator"))
    await harness.start()
    await harness.wait(
        lambda: harness.condition(NS, "borrowed", "Degraded").get("reason") == "InvalidSpec",
        timeout=120,
        what="InvalidSpec",
    )
    await harness.wait(
        lambda: (
            not harness.pods(NS, "borrowed", "warm")
            and not harness.pods(NS, "borrowed", "placeholder")
            and not harness.cluster.list("jobs", NS, group="batch")
        ),
        timeout=120,
        what="the warm pod, the placeholder and the compile Job deleted",
    )
    name = active["metadata"]["name"]
    message = harness.condition(NS, "borrowed", "Degraded")["message"]
    assert f". 1 serving pod made before still run as that account and take traffic: {name} (active); " in message
    await harness.wait(lambda: harness.events(NS, "borrowed", "InvalidSpec"), timeout=60, what="a Warning Event")
    (event,) = harness.events(NS, "borrowed", "InvalidSpec")
    assert event["type"] == "Warning" and f"{name} (active)" in event["message"]
    await asyncio.sleep(120)  # fake time: reconciles go on; the active pod stays, nothing is made
    assert [p["metadata"]["name"] for p in harness.pods(NS, "borrowed")] == [name]
    assert not harness.cluster.list("jobs", NS, group="batch")

    await create_account(harness, "model-reader")
    await harness.patch_spec(NS, "borrowed", {"runtime": {"serviceAccountName": "model-reader"}})
    await harness.wait(
        lambda: (
            harness.condition(NS, "borrowed", "Ready").get("status") == "True"
            and {p["spec"].get("serviceAccountName") for p in harness.pods(NS, "borrowed")} == {"model-reader"}
        ),
        timeout=600,
        what="Ready, every pod as model-reader",
    )


async def test_a_placeholder_made_before_as_the_namespaces_default_is_replaced_by_one_as_the_serving_account(
    harness: OperatorHarness,
) -> None:
    """Placeholders run the spec's image: they run as the serving pods' account. One made by an operator
    before that (naming no account: the namespace's default, which may be the operator's own) is
    replaced, as one of another template is; the serving pod stays."""
    await harness.ensure_namespace(NS)
    await create_account(harness, "model-reader")
    manifest = manual("reader", runtime={"serviceAccountName": "model-reader"})
    manifest["spec"]["warmPool"] = {"mode": "Fixed", "pods": 0, "nodePlaceholders": 1}
    manifest = harness.localize(manifest, namespace=NS)
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(
        lambda: harness.pods(NS, "reader", "active") and harness.pods(NS, "reader", "placeholder"),
        timeout=300,
        what="an active pod and a placeholder",
    )
    (placeholder,) = harness.pods(NS, "reader", "placeholder")
    assert placeholder["spec"]["serviceAccountName"] == "model-reader"
    (active,) = harness.pods(NS, "reader", "active")
    await harness.crash()
    # As the operator before made it: no account.
    core = await harness.client(k8s.CoreV1Api)
    old = copy.deepcopy(placeholder)
    await core.delete_namespaced_pod(old["metadata"]["name"], NS, grace_period_seconds=0)
    await harness.wait(lambda: not harness.pods(NS, "reader", "placeholder"), timeout=60, what="placeholder gone")
    old["metadata"] = {
        k: old["metadata"][k] for k in ("name", "labels", "annotations", "ownerReferences") if k in old["metadata"]
    }
    old["spec"].pop("serviceAccountName")
    old["spec"].pop("serviceAccount", None)
    old["spec"].pop("nodeName", None)
    old.pop("status", None)
    await core.create_namespaced_pod(NS, old)
    await harness.wait(
        lambda: (
            [p["spec"].get("serviceAccountName") for p in harness.pods(NS, "reader", "placeholder")]
            in ([None], ["default"])
        ),
        timeout=60,
        what="the old placeholder",
    )
    await harness.start()
    await harness.wait(
        lambda: (
            [p["spec"].get("serviceAccountName") for p in harness.pods(NS, "reader", "placeholder")] == ["model-reader"]
        ),
        timeout=300,
        what="the placeholder replaced by one as model-reader",
    )
    assert [p["metadata"]["name"] for p in harness.pods(NS, "reader", "active")] == [active["metadata"]["name"]]


def event_lists(harness: OperatorHarness, namespace: str) -> list[Any]:
    """The operator's lists of Events in ``namespace`` (the test reads the store directly)."""
    return [
        r
        for r in harness.cluster.request_log
        if r.resource == "events" and r.verb == "list" and r.namespace == namespace
    ]


async def test_without_list_events_a_missing_compile_account_is_still_named_and_the_job_compiles_once_it_exists(
    harness: OperatorHarness,
) -> None:
    # An operator whose role lacks `list events` (a chart older than this one): the FailedCreate
    # Events cannot be read (403), and the account read names the missing account as before.
    harness.cluster.apiserver.denied.add(("", "events", "list"))
    manifest = harness.localize(manual("compiler"), namespace=NS)
    manifest["spec"]["compile"]["serviceAccountName"] = "model-compiler"
    await harness.apply(manifest)

    def compiled() -> dict[str, Any]:
        return harness.condition(NS, "compiler", "Compiled")

    await harness.wait(
        lambda: compiled().get("reason") == "ServiceAccountMissing", timeout=400, what="Compiled ServiceAccountMissing"
    )
    assert compiled()["status"] == "False"
    message = compiled()["message"]
    assert "ServiceAccount model-compiler does not exist in namespace accounts" in message
    assert "named by spec.compile.serviceAccountName" in message
    assert harness.condition(NS, "compiler", "Degraded")["reason"] == "ServiceAccountMissing"
    await harness.wait(
        lambda: harness.events(NS, "compiler", "ServiceAccountMissing"), timeout=60, what="a Warning Event"
    )
    # What the Job controller says on a real cluster (kubectl describe job), in the API server's words.
    (job,) = harness.cluster.list("jobs", NS, group="batch")
    (failed_create,) = harness.events(NS, job["metadata"]["name"], "FailedCreate")
    assert failed_create["message"] == (
        f'Error creating: pods "{job["metadata"]["name"]}-" is forbidden: error looking up service account '
        'accounts/model-compiler: serviceaccount "model-compiler" not found'
    )

    reads = [r for r in harness.cluster.request_log if r.resource == "serviceaccounts" and r.method == "GET"]
    assert reads and {r.name for r in reads} == {"model-compiler"}
    # Tried, refused, and not asked again every reconcile: kept a minute like any answer.
    refused = event_lists(harness, NS)
    assert refused and {r.code for r in refused} == {403}
    await asyncio.sleep(60)  # fake time: 30 reconciles
    assert len(event_lists(harness, NS)) - len(refused) <= 2
    assert compiled()["reason"] == "ServiceAccountMissing"
    await create_account(harness, "model-compiler")
    # The Job controller makes the pod at its next try; the Compiled condition follows the Job.
    await harness.wait(
        lambda: any(
            p["metadata"]["labels"].get("job-name") == job["metadata"]["name"] for p in harness.cluster.list("pods", NS)
        ),
        timeout=120,
        what="the compile pod",
    )
    await harness.wait(
        lambda: compiled().get("reason") != "ServiceAccountMissing", timeout=120, what="Compiled to move on"
    )
    assert harness.condition(NS, "compiler", "Degraded")["reason"] != "ServiceAccountMissing"
    # With a pod, the account is no longer read: a working compile costs no read per reconcile.
    count = len([r for r in harness.cluster.request_log if r.resource == "serviceaccounts"])
    await asyncio.sleep(120)  # fake time: about a dozen reconciles
    assert len([r for r in harness.cluster.request_log if r.resource == "serviceaccounts"]) == count


async def test_a_cpu_limit_below_the_computed_request_creates_no_pod_and_is_named(harness: OperatorHarness) -> None:
    # No spec.runtime.cpu: each replica requests its share of the node (an inf2.xlarge's ~1.7 cores).
    manifest = harness.localize(manual("throttled", runtime={"cpuLimit": "500m"}), namespace=NS)
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(
        lambda: harness.condition(NS, "throttled", "Degraded").get("reason") == "CPULimitBelowRequest",
        timeout=120,
        what="Degraded=True CPULimitBelowRequest",
    )
    message = harness.condition(NS, "throttled", "Degraded")["message"]
    assert "spec.runtime.cpuLimit 500m is below the CPU request of each replica" in message
    assert "spec.runtime.cpu is unset" in message
    await harness.wait(
        lambda: harness.events(NS, "throttled", "CPULimitBelowRequest"), timeout=60, what="a Warning Event"
    )
    assert not harness.pods(NS, "throttled")

    await harness.patch_spec(NS, "throttled", {"runtime": {"cpuLimit": "4"}})
    await harness.wait(
        lambda: harness.condition(NS, "throttled", "Ready").get("status") == "True", timeout=300, what="Ready"
    )


async def test_a_compile_job_stuck_on_a_missing_account_is_replaced_when_the_spec_names_another(
    harness: OperatorHarness,
) -> None:
    manifest = harness.localize(manual("retyped"), namespace=NS)
    manifest["spec"]["compile"]["serviceAccountName"] = "model-compiler-typo"
    await harness.apply(manifest)
    await harness.wait(
        lambda: harness.condition(NS, "retyped", "Compiled").get("reason") == "ServiceAccountMissing",
        timeout=400,
        what="Compiled ServiceAccountMissing",
    )
    (stuck,) = harness.cluster.list("jobs", NS, group="batch")
    await create_account(harness, "model-compiler")
    await harness.patch_spec(NS, "retyped", {"compile": {"serviceAccountName": "model-compiler"}})

    def compile_pods() -> list[dict[str, Any]]:
        return [p for p in harness.cluster.list("pods", NS) if (p["metadata"].get("labels") or {}).get("job-name")]

    # Not left to its timeoutSeconds: replaced, and the new Job's pod runs as the account named now.
    pods = await harness.wait(compile_pods, timeout=120, what="a compile pod")
    assert all(p["spec"]["serviceAccountName"] == "model-compiler" for p in pods)
    assert stuck["metadata"]["uid"] not in {
        j["metadata"]["uid"] for j in harness.cluster.list("jobs", NS, group="batch")
    }


async def create_limit_range(harness: OperatorHarness, namespace: str, limits: dict[str, Any]) -> None:
    await harness.ensure_namespace(namespace)
    core = await harness.client(k8s.CoreV1Api)
    await core.create_namespaced_limit_range(
        namespace, {"metadata": {"name": "container-defaults"}, "spec": {"limits": [{"type": "Container", **limits}]}}
    )


async def test_a_limit_ranges_default_cpu_limit_below_the_request_is_named_and_a_cpu_limit_fixes_it(
    harness: OperatorHarness,
) -> None:
    # No spec.runtime.cpu nor cpuLimit: the LimitRanger gives the container a CPU limit of 1, below
    # the replica's share of an inf2.xlarge, and pod validation refuses every pod (422).
    await create_limit_range(harness, "limited", {"default": {"cpu": "1"}, "defaultRequest": {"cpu": "500m"}})
    manifest = harness.localize(manual("defaulted"), namespace="limited")
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(
        lambda: harness.condition("limited", "defaulted", "Degraded").get("reason") == "LimitRangeRefused",
        timeout=120,
        what="Degraded=True LimitRangeRefused",
    )
    message = harness.condition("limited", "defaulted", "Degraded")["message"]
    assert message.startswith(
        "a LimitRange in namespace limited gives a container that sets no CPU limit a default CPU limit of 1, "
        "below the CPU request of each replica, "
    )
    assert "(kubectl describe limitrange -n limited). Set spec.runtime.cpuLimit to at least" in message
    assert harness.condition("limited", "defaulted", "Scheduled")["reason"] == "LimitRangeRefused"
    await harness.wait(
        lambda: [e for e in harness.cluster.list("events", "limited") if e.get("reason") == "LimitRangeRefused"],
        timeout=60,
        what="a Warning Event",
    )
    assert not harness.pods("limited", "defaulted")

    await harness.patch_spec("limited", "defaulted", {"runtime": {"cpuLimit": "4"}})
    await harness.wait(
        lambda: harness.condition("limited", "defaulted", "Ready").get("status") == "True", timeout=300, what="Ready"
    )
    (pod,) = harness.pods("limited", "defaulted")
    assert pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "4"


async def test_a_limit_ranges_max_below_the_pods_memory_is_named_with_spec_runtime_memory(
    harness: OperatorHarness,
) -> None:
    await create_limit_range(harness, "capped", {"max": {"memory": "1Gi"}})
    manifest = harness.localize(manual("capped"), namespace="capped")
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(
        lambda: harness.condition("capped", "capped", "Degraded").get("reason") == "LimitRangeRefused",
        timeout=120,
        what="Degraded=True LimitRangeRefused",
    )
    message = harness.condition("capped", "capped", "Degraded")["message"]
    assert message.startswith(
        "a LimitRange in namespace capped refuses the serving pods: maximum memory usage per Container is 1Gi, "
        "but limit is "
    )
    assert message.endswith(": set spec.runtime.memory to at most 1Gi, or change the LimitRange")
    assert not harness.pods("capped", "capped")


async def test_deployments_stuck_on_one_missing_compile_account_read_it_about_once_a_minute(
    harness: OperatorHarness,
) -> None:
    # Four deployments whose compile Jobs all name an account missing from their namespace: each is
    # reconciled every interval (2 s here), and each reconcile would read the account.
    names = [f"stuck-{index}" for index in range(4)]
    for name in names:
        manifest = harness.localize(manual(name), namespace="shared")
        manifest["spec"]["compile"]["serviceAccountName"] = "model-compiler"
        await harness.apply(manifest)

    def stuck() -> bool:
        return all(
            harness.condition("shared", name, "Compiled").get("reason") == "ServiceAccountMissing" for name in names
        )

    await harness.wait(stuck, timeout=400, what="every deployment Compiled ServiceAccountMissing")

    def reads() -> int:
        return len(
            [
                r
                for r in harness.cluster.request_log
                if r.resource == "serviceaccounts" and r.method == "GET" and r.namespace == "shared"
            ]
        )

    before, lists_before = reads(), len(event_lists(harness, "shared"))
    await asyncio.sleep(180)  # fake time: 90 intervals of each of the four deployments
    assert stuck()
    # Each Job's FailedCreate Events are read at most once a minute, whatever reconciles it (four
    # Jobs: 4 x 4 at most, not one list per deployment per reconcile, 360); the Events name the
    # account, so it is not read at all.
    lists = len(event_lists(harness, "shared")) - lists_before
    assert 0 < lists <= 16, lists
    assert reads() - before == 0, reads() - before


async def test_a_limit_range_refusing_the_compile_pod_is_named_on_compiled_with_spec_compile(
    harness: OperatorHarness,
) -> None:
    # The compile pod's memory limit (spec.compile.memory, 8Gi by default) is above the LimitRange's
    # max: the Job controller's creates are refused (403), said only in the Job's FailedCreate Event.
    await create_limit_range(harness, "small", {"max": {"memory": "4Gi"}})
    manifest = harness.localize(manual("squeezed"), namespace="small")
    await harness.apply(manifest)

    def compiled() -> dict[str, Any]:
        return harness.condition("small", "squeezed", "Compiled")

    await harness.wait(
        lambda: compiled().get("reason") == "LimitRangeRefused", timeout=400, what="Compiled LimitRangeRefused"
    )
    assert compiled()["status"] == "False"
    assert compiled()["message"].startswith(
        "a LimitRange in namespace small refuses the compile Job's pod: maximum memory usage per Container is 4Gi, "
        "but limit is 8Gi (it requests 2 CPU: spec.compile.cpu 2); so the compile Job makes no pod"
    )
    assert compiled()["message"].endswith(": set spec.compile.memory to at most 4Gi, or change the LimitRange")
    assert harness.condition("small", "squeezed", "Degraded")["reason"] == "LimitRangeRefused"
    await harness.wait(
        lambda: [
            e
            for e in harness.cluster.list("events", "small")
            if e.get("reason") == "LimitRangeRefused" and e["involvedObject"]["name"] == "squeezed"
        ],
        timeout=60,
        what="a Warning Event",
    )
    # The Job controller's own Event, as on a real cluster (kubectl describe job).
    (job,) = harness.cluster.list("jobs", "small", group="batch")
    failed = [
        e
        for e in harness.cluster.list("events", "small")
        if e["involvedObject"]["name"] == job["metadata"]["name"] and e.get("reason") == "FailedCreate"
    ]
    assert [e["message"] for e in failed] == [
        f'Error creating: pods "{job["metadata"]["name"]}-" is forbidden: maximum memory usage per Container is '
        "4Gi, but limit is 8Gi"
    ]
    # One Job, reconciled every interval (2 s): its Events are listed at most once a minute.
    lists = len(event_lists(harness, "small"))
    await asyncio.sleep(180)  # fake time
    assert 0 < len(event_lists(harness, "small")) - lists <= 4
    assert not [r for r in harness.cluster.request_log if r.resource == "serviceaccounts"]

    # Fixed in the spec: the pod-less Job is replaced at once, and its pod is admitted.
    await harness.patch_spec("small", "squeezed", {"compile": {"memory": "4Gi"}})
    await harness.wait(
        lambda: any((p["metadata"].get("labels") or {}).get("job-name") for p in harness.cluster.list("pods", "small")),
        timeout=120,
        what="the compile pod",
    )
    await harness.wait(lambda: compiled().get("reason") != "LimitRangeRefused", timeout=120, what="Compiled to move on")
