"""ResourceQuota refusals of the operator's pods, named end to end (real Kopf operator, the sandbox API
server emulating the ResourceQuota admission plugin over real HTTP).

A quota refuses a serving pod at the operator's own create: the answer names the quota, and the
operator names the spec field that sets what the quota counts and `kubectl describe resourcequota`.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s
from operator_harness import OperatorHarness
from test_operator_admission_refusals import manual
from test_operator_kubectl import run_kubectl

from neuronfleet.planning.reconcile_plan import FOUND_ON_TAKEOVER
from neuronfleet.reconcile import Reconciler


async def create_quota(harness: OperatorHarness, namespace: str, name: str, hard: dict[str, str]) -> None:
    await harness.ensure_namespace(namespace)
    core = await harness.client(k8s.CoreV1Api)
    await core.create_namespaced_resource_quota(namespace, {"metadata": {"name": name}, "spec": {"hard": hard}})


async def refused_serving(harness: OperatorHarness, namespace: str, name: str, **overrides: Any) -> str:
    """Apply a precompiled deployment and wait for its pods to be refused: Degraded's message."""
    manifest = harness.localize(manual(name, **overrides), namespace=namespace)
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(
        lambda: harness.condition(namespace, name, "Degraded").get("reason") == "PodCreationRefused",
        timeout=120,
        what="Degraded=True PodCreationRefused",
    )
    assert harness.condition(namespace, name, "Scheduled")["reason"] == "PodCreationRefused"
    await harness.wait(
        lambda: [
            e
            for e in harness.cluster.list("events", namespace)
            if e.get("reason") == "PodCreationRefused" and e["involvedObject"]["name"] == name
        ],
        timeout=60,
        what="a Warning Event",
    )
    assert not harness.pods(namespace, name)
    return str(harness.condition(namespace, name, "Degraded")["message"])


async def test_a_neuroncore_quota_refusing_the_serving_pods_is_named_with_the_quota(harness: OperatorHarness) -> None:
    await create_quota(harness, "cores", "neuron", {"requests.aws.amazon.com/neuroncore": "0"})
    message = await refused_serving(harness, "cores", "cores")
    assert (
        "is forbidden: exceeded quota: neuron, requested: requests.aws.amazon.com/neuroncore=1, "
        "used: requests.aws.amazon.com/neuroncore=0, limited: requests.aws.amazon.com/neuroncore=0"
    ) in message
    assert message.endswith(
        " (the pod would take the namespace over ResourceQuota neuron: raise the quota or free some of it; "
        "kubectl describe resourcequota neuron -n cores)"
    )


async def test_a_pods_quota_applied_with_kubectl_refuses_the_serving_pods_and_kubectl_describes_it(
    harness: OperatorHarness, kubectl: str, tmp_path: Path
) -> None:
    await harness.ensure_namespace("counted")
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "pod-count"},
        "spec": {"hard": {"pods": "0"}},
    }
    (tmp_path / "quota.yaml").write_text(json.dumps(quota))
    await run_kubectl(harness, kubectl, "apply", "-n", "counted", "-f", str(tmp_path / "quota.yaml"))
    message = await refused_serving(harness, "counted", "counted")
    assert "is forbidden: exceeded quota: pod-count, requested: pods=1, used: pods=0, limited: pods=0" in message
    assert message.endswith("kubectl describe resourcequota pod-count -n counted)")
    assert "pod-count" in await run_kubectl(harness, kubectl, "get", "quota", "-n", "counted")
    described = await run_kubectl(harness, kubectl, "describe", "resourcequota", "pod-count", "-n", "counted")
    assert re.search(r"Resource\s+Used\s+Hard\n-+\s+-+\s+-+\npods\s+0\s+0\n", described), described


async def test_a_limits_cpu_quota_refuses_pods_without_a_cpu_limit_and_names_spec_runtime_cpu_limit(
    harness: OperatorHarness,
) -> None:
    await create_quota(harness, "capped-cpu", "cpu-cap", {"limits.cpu": "100"})
    message = await refused_serving(harness, "capped-cpu", "unlimited")
    assert "is forbidden: failed quota: cpu-cap: must specify limits.cpu for: " in message
    assert message.endswith(
        " (ResourceQuota cpu-cap caps what the pod leaves unset: set spec.runtime.cpuLimit; "
        "kubectl describe resourcequota cpu-cap -n capped-cpu)"
    )
    # With a CPU limit the same quota admits the pods.
    await harness.patch_spec("capped-cpu", "unlimited", {"runtime": {"cpuLimit": "4"}})
    await harness.wait(
        lambda: harness.condition("capped-cpu", "unlimited", "Ready").get("status") == "True",
        timeout=300,
        what="Ready",
    )
    quota = harness.cluster.get("resourcequotas", "cpu-cap", "capped-cpu")
    assert quota is not None
    await harness.wait(
        lambda: (
            (harness.cluster.get("resourcequotas", "cpu-cap", "capped-cpu") or {})["status"]["used"]
            == {"limits.cpu": "4"}
        ),
        timeout=30,
        what="the quota's status",
    )


def degraded_events(harness: OperatorHarness, namespace: str, name: str) -> list[tuple[str, str]]:
    """The (reason, message) of the Recovered and PodCreationRefused Events about ``name``, in order."""
    return [
        (str(e.get("reason")), str(e.get("message") or ""))
        for e in harness.cluster.list("events", namespace)
        if e["involvedObject"]["name"] == name and e.get("reason") in ("Recovered", "PodCreationRefused")
    ]


async def test_a_refusal_standing_across_a_takeover_is_announced_again_never_said_recovered(
    harness: OperatorHarness,
) -> None:
    # Review r16, finding 1: the new operator does not remember the last apply's refusal, so its first
    # status write says Degraded False; its Events, posted before the apply, said Recovered, and the
    # apply's refusal a Warning again: alerting that resolves on Recovered flapped at every restart.
    await create_quota(harness, "takeover", "neuron", {"requests.aws.amazon.com/neuroncore": "0"})
    await refused_serving(harness, "takeover", "q")
    before = degraded_events(harness, "takeover", "q")
    await harness.stop()
    await harness.start()
    await harness.wait(
        lambda: len(degraded_events(harness, "takeover", "q")) > len(before), timeout=120, what="the takeover's Events"
    )
    assert harness.context is not None
    context = harness.context
    started = context.reconciles
    await harness.wait(lambda: context.reconciles >= started + 2, timeout=120, what="2 more reconciles")
    after = degraded_events(harness, "takeover", "q")[len(before) :]
    assert [reason for reason, _ in after] == ["PodCreationRefused"], after
    assert after[0][1].startswith(FOUND_ON_TAKEOVER)
    assert harness.condition("takeover", "q", "Degraded")["reason"] == "PodCreationRefused"


async def test_a_refusal_gone_at_a_takeover_is_said_recovered_once_the_pods_are_made(harness: OperatorHarness) -> None:
    await create_quota(harness, "lifted", "neuron", {"requests.aws.amazon.com/neuroncore": "0"})
    await refused_serving(harness, "lifted", "q")
    await harness.stop()
    await k8s.CoreV1Api(await harness.api()).delete_namespaced_resource_quota("neuron", "lifted")
    await harness.start()
    await harness.wait(
        lambda: [r for r, _ in degraded_events(harness, "lifted", "q")][-1:] == ["Recovered"],
        timeout=120,
        what="Recovered",
    )
    assert harness.pods("lifted", "q")
    assert harness.condition("lifted", "q", "Degraded")["status"] == "False"
    assert [r for r, _ in degraded_events(harness, "lifted", "q")].count("Recovered") == 1


async def test_a_refusal_gone_at_a_takeover_stopped_in_its_apply_is_said_recovered_by_the_next_operator(
    harness: OperatorHarness, monkeypatch: Any
) -> None:
    # Review r18, finding 1: the takeover's first write said Degraded False and held its Recovered back
    # for the apply's outcome; stopped (SIGTERM) during the apply, that outcome went unwritten and the
    # Recovered unsaid, and the next operator, reading Degraded False, announced nothing.
    await create_quota(harness, "stopped", "neuron", {"requests.aws.amazon.com/neuroncore": "0"})
    await refused_serving(harness, "stopped", "q")
    await harness.stop()
    await k8s.CoreV1Api(await harness.api()).delete_namespaced_resource_quota("neuron", "stopped")
    real = Reconciler.apply
    stopper: list[asyncio.Task[None]] = []

    async def apply(self: Reconciler, dep: Any, plan: Any, stopping: asyncio.Event) -> Any:
        if not stopper and dep.metadata.name == "q":
            stopper.append(asyncio.create_task(harness.stop()))  # SIGTERM arrives during the apply
            await asyncio.wait_for(stopping.wait(), 30)
        return await real(self, dep, plan, stopping)

    monkeypatch.setattr(Reconciler, "apply", apply)
    await harness.start()
    await harness.wait(lambda: bool(stopper) and stopper[0].done(), timeout=120, what="the stop")
    monkeypatch.setattr(Reconciler, "apply", real)
    # The first write stands, and its Degraded is still the one found: the successor's to resolve.
    assert harness.condition("stopped", "q", "Degraded")["reason"] == "PodCreationRefused"
    assert "Recovered" not in [r for r, _ in degraded_events(harness, "stopped", "q")]
    await harness.start()
    await harness.wait(
        lambda: [r for r, _ in degraded_events(harness, "stopped", "q")][-1:] == ["Recovered"],
        timeout=120,
        what="Recovered",
    )
    assert harness.pods("stopped", "q")
    assert harness.condition("stopped", "q", "Degraded")["status"] == "False"
    assert [r for r, _ in degraded_events(harness, "stopped", "q")].count("Recovered") == 1
