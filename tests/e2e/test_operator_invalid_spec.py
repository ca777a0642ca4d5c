"""A spec edit the CRD accepts but the operator refuses (InvalidSpec) on a running deployment: the
fleet of the last valid spec is kept whole and the status stays true (real Kopf operator, sandbox).

Found by review: under InvalidSpec the status froze (``Available True 2/2`` with one pod left for ten
minutes) and a serving pod deleted meanwhile (a node drain, an eviction) was never replaced. As a
Deployment keeps its old ReplicaSet at scale through a bad template edit, the operator now goes on
reconciling the last valid spec it parsed; an operator restarted since, which never parsed it, reads it
back from the status (status.lastValidSpec) and keeps that fleet whole too. Only when the stored spec
cannot be used (it no longer parses or is refused now) does it say the capacity lost instead.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from operator_harness import OperatorHarness, example, ready
from test_operator_quota_refusals import create_quota

from neuronfleet.planning.admission import OperatorAccount
from neuronfleet.planning.reconcile_plan import FOUND_ON_TAKEOVER

NS = "refused"


async def running(harness: OperatorHarness, name: str) -> dict[str, Any]:
    manifest = example("bert-embeddings", scaling={"mode": "Manual", "replicas": 2, "minReplicas": 0})
    manifest["spec"]["warmPool"] = {"mode": "Off"}
    manifest["metadata"]["name"] = name
    manifest = harness.localize(manifest, namespace=NS)
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(lambda: len(ready_active(harness, name)) == 2, timeout=300, what="2 ready active pods")
    return manifest


def ready_active(harness: OperatorHarness, name: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in harness.pods(NS, name, "active") if ready(p))


def refused(harness: OperatorHarness, name: str) -> bool:
    generation = harness.deployment(NS, name)["metadata"]["generation"]
    degraded = harness.condition(NS, name, "Degraded")
    return degraded.get("reason") == "InvalidSpec" and degraded.get("observedGeneration") == generation


async def refuse_a_running_deployment(harness: OperatorHarness, name: str) -> None:
    """``name`` running 2 pods, then a spec the CRD accepts and the operator refuses (InvalidSpec for
    generation 2): its serving pods named to run as the operator's own account. (These tests wrote
    runtime.cpu "1\n" before, to reach the parse-error path; the sandbox now matches schema patterns
    with RE2 as kube-apiserver does and answers it 422, and no field the CRD accepts fails the
    operator's parse, so that path is left to the unit tests.)"""
    await harness.crash()
    harness.settings = replace(harness.settings, operator_account=OperatorAccount(NS, "nf-operator"))
    await harness.start()
    await running(harness, name)
    await harness.patch_spec(NS, name, {"runtime": {"serviceAccountName": "nf-operator"}})
    await harness.wait(lambda: refused(harness, name), timeout=120, what="InvalidSpec for generation 2")


async def delete_pod(harness: OperatorHarness, name: str) -> None:
    await k8s.CoreV1Api(await harness.api()).delete_namespaced_pod(name, NS)  # a node drain, an eviction


async def edit_last_valid_spec(harness: OperatorHarness, name: str, patch: dict[str, Any] | None) -> None:
    """Merge ``patch`` into ``name``'s status.lastValidSpec (None: remove it, as in a status written by an
    operator from before the field), as a person editing the status would."""
    await harness.patch_status(NS, name, {"lastValidSpec": patch})


async def lose_a_pod_and_see_it_replaced(harness: OperatorHarness, name: str, what: str) -> None:
    """Delete one of ``name``'s two ready active pods and wait for a new one in its place (the other kept)
    and for the status to count 2/2 again."""
    lost, kept = ready_active(harness, name)
    await delete_pod(harness, lost)
    await harness.wait(
        lambda: len(ready_active(harness, name)) == 2 and lost not in ready_active(harness, name),
        timeout=300,
        what=what,
    )
    await harness.wait(lambda: counts(harness, name) == (2, 2), timeout=60, what="the status counting 2/2")
    assert kept in ready_active(harness, name)


def counts(harness: OperatorHarness, name: str) -> tuple[int, int]:
    status = harness.deployment(NS, name)["status"]
    return status["replicas"], status["readyReplicas"]


async def test_a_pod_lost_under_a_refused_spec_is_replaced_from_the_last_valid_spec(harness: OperatorHarness) -> None:
    await refuse_a_running_deployment(harness, "bert")
    accounts = {p["spec"].get("serviceAccountName") for p in harness.pods(NS, "bert")}  # generation 1's
    degraded = harness.condition(NS, "bert", "Degraded")
    assert degraded["message"].startswith("generation 2 refused: the serving pods would run as ServiceAccount"), (
        degraded["message"]
    )
    assert "; the fleet of generation 1, the last valid spec, is kept" in degraded["message"], degraded["message"]
    assert harness.deployment(NS, "bert")["status"]["observedGeneration"] == 2

    await lose_a_pod_and_see_it_replaced(harness, "bert", "the lost pod replaced")
    # Made as the last valid spec says: not as the operator's own account.
    assert {p["spec"].get("serviceAccountName") for p in harness.pods(NS, "bert")} == accounts
    assert "nf-operator" not in accounts
    available = harness.condition(NS, "bert", "Available")
    assert (available["status"], available["message"]) == ("True", "2/2 active replicas ready")
    assert harness.condition(NS, "bert", "Ready")["reason"] == "InvalidSpec"  # generation 2 is still not served

    # Restarted, the operator has not parsed generation 1 itself: it reads it back from the status
    # (status.lastValidSpec) and goes on keeping its fleet whole.
    assert harness.deployment(NS, "bert")["status"]["lastValidSpec"]["generation"] == 1
    await harness.crash()
    await harness.start()
    await lose_a_pod_and_see_it_replaced(harness, "bert", "the lost pod replaced after a restart")
    assert {p["spec"].get("serviceAccountName") for p in harness.pods(NS, "bert")} == accounts
    degraded = harness.condition(NS, "bert", "Degraded")
    assert "; the fleet of generation 1, the last valid spec, is kept" in degraded["message"], degraded["message"]

    await harness.patch_spec(NS, "bert", {"runtime": {"serviceAccountName": None}})  # fixed: made whole again
    await harness.wait(lambda: len(ready_active(harness, "bert")) == 2, timeout=300, what="2 ready active pods")
    await harness.wait(
        lambda: harness.condition(NS, "bert", "Degraded").get("status") == "False", timeout=60, what="recovered"
    )


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        ({"bogus": 1}, "is not a valid spec: spec.bogus"),
        # Parses, but the CRD's CEL rules refuse it; the API server does not check the status's copy.
        (
            {"scaling": {"minReplicas": 5, "maxReplicas": 2}},
            "is not a valid spec: spec.scaling.minReplicas: minReplicas must not exceed maxReplicas",
        ),
    ],
    ids=["no-longer-parses", "refused-by-a-cel-rule"],
)
async def test_a_stored_last_valid_spec_that_no_longer_passes_is_not_built_from(
    harness: OperatorHarness, edit: dict[str, Any], why: str
) -> None:
    # status.lastValidSpec edited by hand while the operator was down (or written by a version that
    # accepted what this one refuses): the restarted operator cannot build from it, and says the
    # capacity lost instead of the counts of before.
    await refuse_a_running_deployment(harness, "bert")
    await harness.crash()
    await edit_last_valid_spec(harness, "bert", {"spec": edit})
    await harness.start()
    lost = ready_active(harness, "bert")[0]
    await delete_pod(harness, lost)
    await harness.wait(lambda: counts(harness, "bert") == (1, 1), timeout=120, what="the status counting 1 pod")
    available = harness.condition(NS, "bert", "Available")
    assert (available["status"], available["reason"]) == ("False", "ReplicasNotReady")
    assert available["message"].startswith("1/2 active replicas ready; lost pods are not replaced")
    degraded = harness.condition(NS, "bert", "Degraded")["message"]
    assert f"status.lastValidSpec (generation 1) {why}" in degraded, degraded
    assert len(harness.pods(NS, "bert", "active")) == 1

    await harness.patch_spec(NS, "bert", {"runtime": {"serviceAccountName": None}})  # fixed: made whole again
    await harness.wait(lambda: len(ready_active(harness, "bert")) == 2, timeout=300, what="2 ready active pods")
    await harness.wait(
        lambda: harness.condition(NS, "bert", "Degraded").get("status") == "False", timeout=60, what="recovered"
    )
    # The accepted spec is written back whole over the edited one.
    stored = harness.deployment(NS, "bert")["status"]["lastValidSpec"]["spec"]
    assert "bogus" not in stored
    assert (stored["scaling"].get("minReplicas"), stored["scaling"].get("maxReplicas")) != (5, 2)


def events(harness: OperatorHarness, name: str) -> list[tuple[str, str, str]]:
    return [(str(e.get("type")), str(e.get("reason")), str(e.get("message") or "")) for e in harness.events(NS, name)]


async def test_a_kept_fleet_degrading_under_a_refused_spec_posts_its_warning(harness: OperatorHarness) -> None:
    # Found by review: Degraded's reason stays InvalidSpec, and Events fired on reason changes only, so
    # a replacement pod refused by a quota under InvalidSpec was said in the message but never posted.
    await refuse_a_running_deployment(harness, "bert")
    before = events(harness, "bert")
    await create_quota(harness, NS, "pods", {"pods": "1"})  # the namespace's 2 pods already exceed it
    await delete_pod(harness, ready_active(harness, "bert")[0])
    await harness.wait(
        lambda: "exceeded quota" in harness.condition(NS, "bert", "Degraded").get("message", ""),
        timeout=120,
        what="the refusal of the replacement in Degraded",
    )
    await harness.wait(
        lambda: any(t == "Warning" and "quota" in m for t, _, m in events(harness, "bert") if (t, _, m) not in before),
        timeout=60,
        what="a Warning for the refused replacement",
    )
    assert harness.condition(NS, "bert", "Degraded")["reason"] == "InvalidSpec"  # the refusal stays first


def warnings_of(harness: OperatorHarness, name: str, reason: str) -> list[tuple[str, int]]:
    """``name``'s Warning Events of ``reason``: (message, count), a repeat counted by its Event's count."""
    return [
        (str(e.get("message") or ""), int(e.get("count") or 1))
        for e in harness.cluster.list("events", NS)
        if (e.get("involvedObject") or {}).get("name") == name
        and e.get("type") == "Warning"
        and e.get("reason") == reason
    ]


async def test_a_kept_fleets_trouble_is_said_again_after_a_restart_as_found_on_takeover(
    harness: OperatorHarness,
) -> None:
    # The kept fleet's replacement refused by a quota: a Warning of its own. The operator restarted keeps
    # the fleet from status.lastValidSpec and meets the same refusal: said again once, as found on
    # takeover (as the InvalidSpec Warning is), not as news. Its words quote the quota's use and the
    # refused pod's name: the deleted pod finishing its termination while no operator runs changes them
    # (CI met that race: the refusal was said as news), and it is still the trouble the status names.
    await refuse_a_running_deployment(harness, "bert")
    await create_quota(harness, NS, "pods", {"pods": "1"})
    await delete_pod(harness, ready_active(harness, "bert")[0])
    await harness.wait(
        lambda: bool(warnings_of(harness, "bert", "PodCreationRefused")), timeout=120, what="the refusal's Warning"
    )
    [(first, _)] = warnings_of(harness, "bert", "PodCreationRefused")
    assert first.startswith("the fleet kept while the spec is refused: "), first
    await harness.crash()
    await harness.wait(lambda: len(harness.cluster.list("pods", NS)) == 1, timeout=300, what="the deleted pod gone")
    await harness.start()

    def found() -> list[str]:
        return [m for m, _ in warnings_of(harness, "bert", "PodCreationRefused") if m.startswith(FOUND_ON_TAKEOVER)]

    await harness.wait(lambda: bool(found()), timeout=120, what="the refusal said again as found on takeover")
    [again] = found()
    assert again.removeprefix(f"{FOUND_ON_TAKEOVER}: ").startswith("the fleet kept while the spec is refused: "), again
    assert [count for m, count in warnings_of(harness, "bert", "PodCreationRefused") if m == first] == [1]
