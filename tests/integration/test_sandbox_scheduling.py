"""Scheduling, kubelet and provisioning in the sandbox, under looptime (simulated minutes take
milliseconds)."""

from __future__ import annotations

import asyncio
import copy
import functools
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from neuronfleet.api.v1alpha1 import GROUP
from neuronfleet.sandbox import CORES_ANNOTATION, ColdStartProfile, NodeGroup, SandboxCluster, parse_node_groups
from neuronfleet.sandbox.kubelet import ContainerResult

pytestmark = pytest.mark.looptime

NEURON_TOLERATION = {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}
REPO = Path(__file__).resolve().parents[2]
PROFILE = ColdStartProfile(image_pull_s=20.0, container_start_s=2.0, readiness_s=30.0, shutdown_s=1.0, jitter=0.0)


#: One replica per zone at most more than any other zone, as the operator's pods are spread.
ZONE_SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "model"}},
    }
]


def neuron_pod(
    name: str, cores: int, *, tolerate: bool = True, scheduler: str | None = None, **spec: Any
) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {
        "containers": [
            {
                "name": "server",
                "image": "neuronserve:1",
                "resources": {
                    "limits": {"aws.amazon.com/neuroncore": str(cores)},
                    "requests": {"cpu": "500m", "memory": "1Gi"},
                },
                "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": 8080}},
            }
        ],
        **spec,
    }
    if tolerate:
        pod_spec["tolerations"] = [NEURON_TOLERATION]
    if scheduler:
        pod_spec["schedulerName"] = scheduler
    return {"metadata": {"name": name, "labels": {"app": "model"}}, "spec": pod_spec}


def one_node_cluster() -> SandboxCluster:
    """One inf2.xlarge node, no provisioner, the default profile here."""
    return SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=1)], cold_start=PROFILE, run_provisioner=False
    )


def pod(cluster: SandboxCluster, name: str) -> dict[str, Any]:
    found = cluster.get("pods", name, "default")
    assert found is not None, f"pod {name} is gone"
    return found


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def present_condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    """``obj``'s condition of type ``kind``, which it must have."""
    found = condition(obj, kind)
    assert found is not None, f"no {kind} condition"
    return found


def is_ready(cluster: SandboxCluster, name: str) -> bool:
    found = cluster.get("pods", name, "default")
    ready = condition(found, "Ready") if found else None
    return bool(ready and ready["status"] == "True")


async def test_two_cores_land_on_node_with_room_and_start_like_a_kubelet() -> None:
    groups = [
        NodeGroup("small", "inf2.xlarge", count=1, provisionable=False),
        NodeGroup("big", "inf2.24xlarge", count=1, provisionable=False),
    ]
    async with SandboxCluster(node_groups=groups, cold_start=PROFILE) as cluster:
        nodes = {
            n["metadata"]["labels"]["node.kubernetes.io/instance-type"]: n["metadata"]["name"]
            for n in cluster.list("nodes")
        }
        cluster.create("pods", neuron_pod("filler", 2), "default")
        await cluster.wait_for(lambda: pod(cluster, "filler")["spec"].get("nodeName"), timeout=5)
        assert pod(cluster, "filler")["spec"]["nodeName"] == nodes["inf2.xlarge"]  # packs onto the smallest fit

        cluster.create("pods", neuron_pod("model-0", 2), "default")
        await cluster.wait_for(lambda: is_ready(cluster, "model-0"), timeout=120, what="model-0 Ready")
        placed = pod(cluster, "model-0")
        assert placed["spec"]["nodeName"] == nodes["inf2.24xlarge"]  # the xlarge has no free core
        assert len(placed["metadata"]["annotations"][CORES_ANNOTATION].split(",")) == 2
        status = placed["status"]
        assert status["phase"] == "Running"
        assert [
            present_condition(placed, k)["status"] for k in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ] == ["True"] * 4
        started = status["containerStatuses"][0]["state"]["running"]["startedAt"]
        assert status["startTime"] <= started <= present_condition(placed, "Ready")["lastTransitionTime"]
        # Cold start: image pull (20 s) + start (2 s) + readiness (30 s) on the loop clock.
        assert cluster.clock.seconds_since(status["startTime"]) == pytest.approx(52, abs=1)
        events = sorted(
            (e for e in cluster.list("events", "default") if e["involvedObject"]["name"] == "model-0"),
            key=lambda e: int(e["metadata"]["resourceVersion"]),
        )
        assert [e["reason"] for e in events] == ["Scheduled", "Pulling", "Pulled", "Created", "Started"]
        assert events[0]["message"] == f"Successfully assigned default/model-0 to {nodes['inf2.24xlarge']}"
        assert events[2]["message"] == 'Successfully pulled image "neuronserve:1" in 20.000s'


async def test_pod_without_toleration_stays_pending_with_reason() -> None:
    async with SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=2)], run_provisioner=False
    ) as cluster:
        cluster.create("pods", neuron_pod("untolerated", 1, tolerate=False), "default")
        await cluster.wait_for(lambda: condition(pod(cluster, "untolerated"), "PodScheduled"), timeout=5)
        scheduled = present_condition(pod(cluster, "untolerated"), "PodScheduled")
        assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
        assert scheduled["message"].startswith("0/2 nodes are available")
        assert "untolerated taint {aws.amazon.com/neuron: true}" in scheduled["message"]
        assert pod(cluster, "untolerated")["status"]["phase"] == "Pending"
        (failed,) = [e for e in cluster.list("events", "default") if e["reason"] == "FailedScheduling"]
        assert (failed["type"], failed["message"]) == ("Warning", scheduled["message"])

        # kube-scheduler updates PodScheduled through podutil.UpdatePodCondition, which keeps the
        # lastTransitionTime while the status stays False: "how long has it been pending" must not
        # reset each time the count of nodes in its message changes.
        # Retried in the meantime (every 10 s), it is not written again while nothing has changed.
        written = pod(cluster, "untolerated")["metadata"]["resourceVersion"]
        await asyncio.sleep(30)
        assert pod(cluster, "untolerated")["metadata"]["resourceVersion"] == written
        cluster.add_node(NodeGroup("small", "inf2.xlarge", count=1))

        def said_again() -> bool:
            message: str = present_condition(pod(cluster, "untolerated"), "PodScheduled")["message"]
            return message.startswith("0/3 nodes")

        await cluster.wait_for(said_again, timeout=60, what="the message with three nodes")
        again = present_condition(pod(cluster, "untolerated"), "PodScheduled")
        assert (again["status"], again["reason"]) == ("False", "Unschedulable")
        assert again["lastTransitionTime"] == scheduled["lastTransitionTime"]
        assert (cluster.clock.seconds_since(again["lastTransitionTime"]) or 0) >= 30
        failed_events = [e for e in cluster.list("events", "default") if e["reason"] == "FailedScheduling"]
        assert [e["message"] for e in failed_events] == [scheduled["message"], again["message"]]


async def test_pod_for_an_unknown_scheduler_is_left_alone() -> None:
    async with SandboxCluster(node_groups=[NodeGroup("small", "inf2.xlarge", count=1)]) as cluster:
        cluster.create("pods", neuron_pod("orphan", 1, scheduler="no-such-scheduler"), "default")
        cluster.create("pods", neuron_pod("normal", 1), "default")
        await cluster.wait_for(lambda: pod(cluster, "normal")["spec"].get("nodeName"), timeout=5)
        orphan = pod(cluster, "orphan")
        assert "nodeName" not in orphan["spec"]
        assert orphan["status"] == {"phase": "Pending", "qosClass": "Burstable"}


async def test_eight_cores_only_where_eight_contiguous_are_free() -> None:
    group = NodeGroup("big", "inf2.24xlarge", count=2, provisionable=False)
    async with SandboxCluster(node_groups=[group], cold_start=PROFILE, run_provisioner=False) as cluster:
        fragmented, contiguous = sorted(n["metadata"]["name"] for n in cluster.list("nodes"))
        # Pre-placed pods: fragmented keeps 8 free cores in runs of 4 (4-7 and 10,11,0,1 on the
        # ring); contiguous keeps 4-11 free.
        for name, node, cores in (("f1", fragmented, "2,3"), ("f2", fragmented, "8,9"), ("c1", contiguous, "0,1,2,3")):
            body = neuron_pod(name, len(cores.split(",")))
            body["metadata"]["annotations"] = {CORES_ANNOTATION: cores}
            body["spec"]["nodeName"] = node
            cluster.create("pods", body, "default")
        cluster.create("pods", neuron_pod("big-model", 8, scheduler="neuron-scheduler"), "default")
        await cluster.wait_for(lambda: pod(cluster, "big-model")["spec"].get("nodeName"), timeout=5)
        placed = pod(cluster, "big-model")
        assert placed["spec"]["nodeName"] == contiguous
        assert placed["metadata"]["annotations"][CORES_ANNOTATION] == "4,5,6,7,8,9,10,11"
        # A second 8-core pod fits nowhere: 8 cores are free on the fragmented node, not contiguous.
        cluster.create("pods", neuron_pod("second", 8, scheduler="neuron-scheduler"), "default")
        await cluster.wait_for(lambda: condition(pod(cluster, "second"), "PodScheduled"), timeout=5)
        assert "contiguous free NeuronCores" in present_condition(pod(cluster, "second"), "PodScheduled")["message"]
        # The default scheduler knows no chip ring: it places 8 cores on the fragmented node's free ones.
        cluster.create("pods", neuron_pod("plain", 8), "default")
        await cluster.wait_for(lambda: pod(cluster, "plain")["spec"].get("nodeName"), timeout=5)
        assert pod(cluster, "plain")["spec"]["nodeName"] == fragmented


async def test_a_cordoned_node_and_a_pod_already_ended_are_left_alone() -> None:
    async with SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=2, provisionable=False)],
        cold_start=PROFILE,
        run_provisioner=False,
    ) as cluster:
        cordoned, open_node = sorted(n["metadata"]["name"] for n in cluster.list("nodes"))
        cluster.store.update(
            cluster.store.resource("", "nodes"), None, cordoned, lambda o: o["spec"].__setitem__("unschedulable", True)
        )
        for name in ("a", "b"):
            cluster.create("pods", neuron_pod(name, 2), "default")
        await cluster.wait_for(lambda: pod(cluster, "a")["spec"].get("nodeName"), timeout=5)
        await cluster.wait_for(lambda: condition(pod(cluster, "b"), "PodScheduled"), timeout=5)
        assert pod(cluster, "a")["spec"]["nodeName"] == open_node
        assert "nodeName" not in pod(cluster, "b")["spec"]  # the cordoned node takes no pod
        assert "unschedulable" in present_condition(pod(cluster, "b"), "PodScheduled")["message"]
        # An unbound pod that already ended (Failed) is not scheduled once room appears.
        cluster.store.update(
            cluster.store.resource("", "pods"),
            "default",
            "b",
            lambda o: o["status"].__setitem__("phase", "Failed"),
            subresource="status",
        )
        cluster.store.update(
            cluster.store.resource("", "nodes"), None, cordoned, lambda o: o["spec"].__setitem__("unschedulable", False)
        )
        cluster.create("pods", neuron_pod("c", 2), "default")
        await cluster.wait_for(lambda: pod(cluster, "c")["spec"].get("nodeName"), timeout=5)
        assert pod(cluster, "c")["spec"]["nodeName"] == cordoned
        assert "nodeName" not in pod(cluster, "b")["spec"]


async def test_a_node_being_deleted_takes_no_pod_while_it_is_still_ready() -> None:
    async with SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=2, provisionable=False)],
        cold_start=PROFILE,
        run_provisioner=False,
    ) as cluster:
        going, staying = sorted(n["metadata"]["name"] for n in cluster.list("nodes"))
        # A finalizer holds the deleted node, ready, as a node whose drain has begun.
        nodes = cluster.store.resource("", "nodes")
        cluster.store.update(nodes, None, going, lambda o: o["metadata"].__setitem__("finalizers", ["test/hold"]))
        cluster.delete("nodes", going)
        assert (cluster.get("nodes", going) or {})["metadata"].get("deletionTimestamp")
        for name in ("a", "b"):  # each takes a whole node
            cluster.create("pods", neuron_pod(name, 2), "default")
        await cluster.wait_for(lambda: pod(cluster, "a")["spec"].get("nodeName"), timeout=5)
        await cluster.wait_for(lambda: condition(pod(cluster, "b"), "PodScheduled"), timeout=5)
        assert pod(cluster, "a")["spec"]["nodeName"] == staying
        assert "nodeName" not in pod(cluster, "b")["spec"]


async def test_pods_waiting_together_are_packed_onto_launches_by_every_resource_they_ask() -> None:
    # Two 1-core pods asking 3 CPUs each: an inf2.xlarge's 2 NeuronCores would hold both, its
    # 4 vCPUs only one. One round launches two nodes together, not one and then another.
    groups = [NodeGroup("small", "inf2.xlarge", count=0, max_nodes=2)]
    async with SandboxCluster(node_groups=groups, cold_start=PROFILE, provisioning_delay_s=60) as cluster:
        names = ("a", "b")
        for name in names:
            body = neuron_pod(name, 1)
            body["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
            cluster.create("pods", body, "default")
        await cluster.wait_for(lambda: all(is_ready(cluster, name) for name in names), timeout=600)
        assert len({pod(cluster, name)["spec"]["nodeName"] for name in names}) == 2
        created = {n["metadata"]["creationTimestamp"] for n in cluster.list("nodes")}
        assert len(created) == 1, f"launched at {sorted(created)}"


async def test_placeholder_is_preempted_for_a_higher_priority_pod() -> None:
    async with one_node_cluster() as cluster:
        cluster.create(
            "priorityclasses", {"metadata": {"name": "placeholder"}, "value": -10}, group="scheduling.k8s.io"
        )
        cluster.create("priorityclasses", {"metadata": {"name": "serving"}, "value": 1000}, group="scheduling.k8s.io")
        cluster.create("pods", neuron_pod("placeholder", 2, priorityClassName="placeholder"), "default")
        await cluster.wait_for(lambda: is_ready(cluster, "placeholder"), timeout=120)
        node = pod(cluster, "placeholder")["spec"]["nodeName"]

        cluster.create("pods", neuron_pod("model", 2, priorityClassName="serving"), "default")
        await cluster.wait_for(
            lambda: cluster.get("pods", "placeholder", "default") is None, timeout=60, what="placeholder evicted"
        )
        await cluster.wait_for(lambda: is_ready(cluster, "model"), timeout=120)
        assert pod(cluster, "model")["spec"]["nodeName"] == node
        assert pod(cluster, "model")["spec"]["priority"] == 1000
        assert cluster.scheduler is not None and cluster.scheduler.preemptions == 1


def priority_classes(cluster: SandboxCluster, **values: int) -> None:
    for name, value in values.items():
        cluster.create("priorityclasses", {"metadata": {"name": name}, "value": value}, group="scheduling.k8s.io")


def memory_pod(name: str, **spec: Any) -> dict[str, Any]:
    """A pod that needs most of an inf2.xlarge's memory (16 GiB) and no NeuronCore."""
    body = neuron_pod(name, 0, **spec)
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "500m", "memory": "10Gi"}}
    return body


@pytest.mark.parametrize("room", ["neuroncores", "memory"])
async def test_the_room_a_pod_preempted_for_is_kept_for_it_against_pods_of_its_priority(room: str) -> None:
    # Two replicas of the same priority created together: the first preempts the placeholder and is
    # nominated to its node; the second, tried in the same round, must not take that room (as
    # kube-scheduler counts nominated pods of higher or equal priority on their node), and gets a
    # node of its own from the provisioner. The room is NeuronCores or, for pods without any, memory.
    def make(name: str, **spec: Any) -> dict[str, Any]:
        return neuron_pod(name, 2, **spec) if room == "neuroncores" else memory_pod(name, **spec)

    group = NodeGroup("small", "inf2.xlarge", count=1, max_nodes=3)
    async with SandboxCluster(node_groups=[group], cold_start=PROFILE, provisioning_delay_s=60.0) as cluster:
        priority_classes(cluster, placeholder=-1, serving=1000)
        body = make("placeholder", priorityClassName="placeholder", terminationGracePeriodSeconds=0)
        cluster.create("pods", body, "default")
        await cluster.wait_for(lambda: pod(cluster, "placeholder")["spec"].get("nodeName"), timeout=120)
        node = pod(cluster, "placeholder")["spec"]["nodeName"]
        cluster.create("pods", make("model-a", priorityClassName="serving"), "default")
        cluster.create("pods", make("model-b", priorityClassName="serving"), "default")
        await cluster.wait_for(
            lambda: all(pod(cluster, name)["spec"].get("nodeName") for name in ("model-a", "model-b")),
            timeout=600,
            what="both replicas bound",
        )
        assert pod(cluster, "model-a")["spec"]["nodeName"] == node
        assert pod(cluster, "model-b")["spec"]["nodeName"] != node


async def test_a_nomination_that_cannot_be_honoured_is_cleared_so_a_node_is_launched() -> None:
    # A pod nominated to a node whose room a higher-priority pod took meanwhile (a nomination keeps
    # room only against pods of lower or equal priority) fits nowhere and preempts nothing: its
    # nomination is cleared, as kube-scheduler clears it, and the provisioner launches a node for it
    # (it passes over nominated pods, which wait for their victims).
    slow_stop = ColdStartProfile(image_pull_s=20.0, container_start_s=2.0, readiness_s=30.0, shutdown_s=30.0)
    group = NodeGroup("small", "inf2.xlarge", count=1, max_nodes=3)
    async with SandboxCluster(node_groups=[group], cold_start=slow_stop, provisioning_delay_s=60.0) as cluster:
        priority_classes(cluster, placeholder=-1, serving=1000, critical=2000)
        body = neuron_pod("placeholder", 2, priorityClassName="placeholder", terminationGracePeriodSeconds=30)
        cluster.create("pods", body, "default")
        await cluster.wait_for(lambda: is_ready(cluster, "placeholder"), timeout=120)
        node = pod(cluster, "placeholder")["spec"]["nodeName"]
        cluster.create("pods", neuron_pod("model", 2, priorityClassName="serving"), "default")
        await cluster.wait_for(lambda: pod(cluster, "model").get("status", {}).get("nominatedNodeName"), timeout=10)
        # While the placeholder stops, a pod of higher priority comes: it gets the room. (Only that
        # node takes it, so no node is launched for it that the robbed pod could take instead.)
        pinned = {"kubernetes.io/hostname": node}
        cluster.create("pods", neuron_pod("critical", 2, priorityClassName="critical", nodeSelector=pinned), "default")
        await cluster.wait_for(lambda: pod(cluster, "critical")["spec"].get("nodeName"), timeout=120)
        assert pod(cluster, "critical")["spec"]["nodeName"] == node
        await cluster.wait_for(
            lambda: pod(cluster, "model")["spec"].get("nodeName"), timeout=600, what="the robbed pod bound"
        )
        assert pod(cluster, "model")["spec"]["nodeName"] != node


@pytest.mark.parametrize("provisioner", [False, True], ids=["alone", "with-provisioner"])
async def test_a_nomination_cleared_in_a_round_keeps_no_room_for_the_rest_of_it(provisioner: bool) -> None:
    # One inf2.xlarge (2 NeuronCores), one held by a critical pod. "model" (2 cores) is nominated
    # there but can no longer fit (robbed, as above); "small" (1 core, lower priority) fits in the
    # free core. Both pending in one round: "model", tried first, has its nomination cleared, and
    # "small" must then see the free core, not a FailedScheduling (nor, from the provisioner, a node
    # of its own) and a bind only a round later.
    group = NodeGroup("small", "inf2.xlarge", count=1, max_nodes=3)
    async with SandboxCluster(
        node_groups=[group], cold_start=PROFILE, provisioning_delay_s=60.0, run_provisioner=provisioner
    ) as cluster:
        priority_classes(cluster, low=0, serving=1000, critical=2000)
        node = cluster.list("nodes")[0]["metadata"]["name"]
        cluster.create("pods", neuron_pod("critical", 1, priorityClassName="critical", nodeName=node), "default")
        # No await from here to the wait: the scheduler's next round sees both pods, "model" nominated.
        cluster.create("pods", neuron_pod("model", 2, priorityClassName="serving"), "default")
        cluster.store.update(
            cluster.store.resource("", "pods"),
            "default",
            "model",
            lambda o: o.setdefault("status", {}).__setitem__("nominatedNodeName", node),
            subresource="status",
        )
        cluster.create("pods", neuron_pod("small", 1, priorityClassName="low"), "default")
        await cluster.wait_for(lambda: pod(cluster, "small")["spec"].get("nodeName"), timeout=600, what="small bound")
        assert pod(cluster, "small")["spec"]["nodeName"] == node
        assert not pod(cluster, "model").get("status", {}).get("nominatedNodeName")
        said = [
            (e["reason"], e["message"])
            for e in cluster.list("events", "default")
            if e["involvedObject"]["name"] == "small" and e["reason"] in ("FailedScheduling", "Nominated")
        ]
        assert said == []


async def test_without_the_provisioner_no_node_is_launched_for_a_pending_pod() -> None:
    # run_provisioner=False is a fixed cluster (as the scheduling tests here want): a pod that fits
    # no node stays Pending, however long past the provisioning delay, though its group has room.
    group = NodeGroup("small", "inf2.xlarge", count=0, max_nodes=2)
    async with SandboxCluster(node_groups=[group], provisioning_delay_s=60.0, run_provisioner=False) as cluster:
        assert cluster.provisioner is None
        cluster.create("pods", neuron_pod("waiting", 2), "default")
        await cluster.wait_for(lambda: condition(pod(cluster, "waiting"), "PodScheduled"), timeout=5)
        with pytest.raises(TimeoutError):
            await cluster.wait_for(lambda: cluster.list("nodes"), timeout=600, what="a node")
        assert pod(cluster, "waiting")["status"]["phase"] == "Pending"


async def test_the_unschedulable_message_names_every_resource_short() -> None:
    # kube-scheduler's NodeResourcesFit gives a node one reason per resource short, and the message
    # counts each over the nodes ("Insufficient cpu" alone would hide the NeuronCores also missing).
    async with SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=2)], run_provisioner=False
    ) as cluster:
        body = neuron_pod("greedy", 4)
        body["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "64"
        cluster.create("pods", body, "default")
        await cluster.wait_for(lambda: condition(pod(cluster, "greedy"), "PodScheduled"), timeout=5)
        scheduled = condition(pod(cluster, "greedy"), "PodScheduled")
        assert scheduled is not None and scheduled["reason"] == "Unschedulable"
        assert scheduled["message"] == (
            "0/2 nodes are available: 2 Insufficient aws.amazon.com/neuroncore, 2 Insufficient cpu."
        )


async def test_provisioner_adds_a_node_after_its_delay_and_removes_it_when_empty() -> None:
    groups = [
        NodeGroup("small", "inf2.xlarge", count=0, max_nodes=2),
        NodeGroup("big", "inf2.48xlarge", count=0, max_nodes=1),
    ]
    cluster = SandboxCluster(node_groups=groups, cold_start=PROFILE, provisioning_delay_s=90, consolidation_delay_s=45)
    assert cluster.provisioner is not None
    # Only events and the consolidation timer wake it: the removal must come on time without the
    # periodic round.
    cluster.provisioner.interval_s = 3600
    async with cluster:
        start = cluster.clock.monotonic()
        cluster.create("pods", neuron_pod("model", 2), "default")
        await cluster.wait_for(lambda: cluster.list("nodes"), timeout=300, what="a node")
        launched_after = cluster.clock.monotonic() - start
        assert launched_after >= 90
        (node,) = cluster.list("nodes")
        assert node["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "inf2.xlarge"  # cheapest fit
        assert node["metadata"]["labels"]["karpenter.sh/nodepool"] == "small"
        await cluster.wait_for(lambda: is_ready(cluster, "model"), timeout=300)
        assert pod(cluster, "model")["spec"]["nodeName"] == node["metadata"]["name"]

        cluster.delete("pods", "model", "default")
        deleted_at = cluster.clock.monotonic()
        await cluster.wait_for(lambda: not cluster.list("nodes"), timeout=600, what="consolidation")
        # Empty once the pod stopped (its 1 s shutdown), removed the consolidation delay later.
        assert cluster.clock.monotonic() - deleted_at == pytest.approx(1 + 45, abs=0.5)
        assert (cluster.provisioner.nodes_launched, cluster.provisioner.nodes_removed) == (1, 1)


async def test_a_node_left_with_an_ended_pod_and_a_daemon_pod_is_consolidated() -> None:
    # As Karpenter: a pod that has ended (a Job's, kept for its logs) and a DaemonSet's pod do not
    # keep a node; it is empty, and removed the consolidation delay after its last pod ended.
    groups = [NodeGroup("small", "inf2.xlarge", count=0, max_nodes=1)]
    run = ColdStartProfile(image_pull_s=20.0, container_start_s=2.0, shutdown_s=1.0, run_s=100.0, jitter=0.0)
    async with SandboxCluster(
        node_groups=groups, cold_start=run, provisioning_delay_s=60, consolidation_delay_s=30
    ) as cluster:
        cluster.create("pods", neuron_pod("job", 2, restartPolicy="Never"), "default")
        node = await cluster.wait_for(lambda: pod(cluster, "job")["spec"].get("nodeName"), timeout=300)
        daemon = neuron_pod("node-agent", 0, nodeName=node)
        daemon["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u-agent", "controller": True}
        ]
        cluster.create("pods", daemon, "default")
        await cluster.wait_for(lambda: pod(cluster, "job")["status"].get("phase") == "Succeeded", timeout=300)
        ended_at = cluster.clock.monotonic()
        await cluster.wait_for(lambda: cluster.get("nodes", node) is None, timeout=600, what="consolidation")
        assert cluster.clock.monotonic() - ended_at == pytest.approx(30, abs=0.5)


async def test_each_empty_node_is_removed_its_own_delay_after_it_emptied() -> None:
    # Only events and the consolidation timer wake the provisioner here: a second node emptied later
    # must not push back the first node's removal (one timer is kept, the earliest).
    groups = [NodeGroup("small", "inf2.xlarge", count=0, max_nodes=2)]
    cluster = SandboxCluster(node_groups=groups, cold_start=PROFILE, provisioning_delay_s=60, consolidation_delay_s=45)
    assert cluster.provisioner is not None
    cluster.provisioner.interval_s = 3600
    async with cluster:
        for name in ("first", "second"):  # each takes a whole node
            cluster.create("pods", neuron_pod(name, 2), "default")
        await cluster.wait_for(lambda: is_ready(cluster, "first") and is_ready(cluster, "second"), timeout=300)
        nodes = {name: pod(cluster, name)["spec"]["nodeName"] for name in ("first", "second")}
        cluster.delete("pods", "first", "default")
        first_deleted = cluster.clock.monotonic()
        await asyncio.sleep(10)  # loop time
        cluster.delete("pods", "second", "default")
        second_deleted = cluster.clock.monotonic()
        await cluster.wait_for(lambda: cluster.get("nodes", nodes["first"]) is None, timeout=600)
        assert cluster.clock.monotonic() - first_deleted == pytest.approx(1 + 45, abs=0.5)
        await cluster.wait_for(lambda: cluster.get("nodes", nodes["second"]) is None, timeout=600)
        assert cluster.clock.monotonic() - second_deleted == pytest.approx(1 + 45, abs=0.5)


async def test_launches_go_to_the_zone_with_the_fewest_nodes() -> None:
    groups = [NodeGroup("small", "inf2.xlarge", count=0, max_nodes=2, zones=("us-east-1a", "us-east-1b"))]
    async with SandboxCluster(node_groups=groups, cold_start=PROFILE, provisioning_delay_s=60) as cluster:
        for name in ("first", "second"):  # each takes a whole node
            cluster.create("pods", neuron_pod(name, 2), "default")
            await cluster.wait_for(functools.partial(is_ready, cluster, name), timeout=300)
        zones = sorted(n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in cluster.list("nodes"))
        assert zones == ["us-east-1a", "us-east-1b"]


async def test_a_node_of_no_group_it_manages_is_left_alone_and_the_rest_still_consolidated() -> None:
    # A node another team's node group registered: not the provisioner's to remove, and reading it
    # must not stop the consolidation of the nodes it launched.
    groups = [NodeGroup("small", "inf2.xlarge", count=0, max_nodes=1)]
    async with SandboxCluster(
        node_groups=groups, cold_start=PROFILE, provisioning_delay_s=60, consolidation_delay_s=30
    ) as cluster:
        foreign = cluster.add_node(NodeGroup("other-team", "inf2.xlarge", count=0), provisioned=True)
        cluster.create("pods", neuron_pod("model", 2, nodeSelector={"karpenter.sh/nodepool": "small"}), "default")
        await cluster.wait_for(lambda: is_ready(cluster, "model"), timeout=300)
        launched = pod(cluster, "model")["spec"]["nodeName"]
        cluster.delete("pods", "model", "default")
        await cluster.wait_for(lambda: cluster.get("nodes", launched) is None, timeout=600, what="consolidation")
        assert [n["metadata"]["name"] for n in cluster.list("nodes")] == [foreign["metadata"]["name"]]


async def test_a_node_still_launching_counts_toward_its_groups_maximum() -> None:
    # Two pods that each take a whole inf2.xlarge, a group of at most one node: one launch, and the
    # second pod waits (it is not packed onto the launching node, which the first fills).
    groups = [NodeGroup("small", "inf2.xlarge", count=0, max_nodes=1)]
    async with SandboxCluster(node_groups=groups, cold_start=PROFILE, provisioning_delay_s=60) as cluster:
        for name in ("first", "second"):
            cluster.create("pods", neuron_pod(name, 2), "default")
        await cluster.wait_for(lambda: is_ready(cluster, "first") or is_ready(cluster, "second"), timeout=300)
        await asyncio.sleep(120)  # loop time: rounds enough to launch more, were it allowed
        assert cluster.provisioner is not None and cluster.provisioner.nodes_launched == 1
        assert len(cluster.list("nodes")) == 1
        assert sorted(bool(pod(cluster, n)["spec"].get("nodeName")) for n in ("first", "second")) == [False, True]


async def test_the_group_count_is_a_floor_and_a_removed_node_gets_an_event() -> None:
    """The nodes a group starts with up to its ``min_nodes`` (``--node-groups`` COUNT) stay when
    empty, as a managed node group's do under Karpenter; a node the provisioner launched is removed
    when empty, and its removal is an Event on the Node, as Karpenter's consolidation posts one."""
    # As `sandbox up --node-groups` gives them: two static nodes, and a group with none to start with.
    groups = parse_node_groups("small:inf2.xlarge:2:4@us-east-1a+us-east-1b,big:inf2.48xlarge:0:1")
    async with SandboxCluster(
        node_groups=groups, cold_start=PROFILE, provisioning_delay_s=60, consolidation_delay_s=30
    ) as cluster:
        initial = sorted(n["metadata"]["name"] for n in cluster.list("nodes"))
        assert len(initial) == 2
        # A pod only the big group takes: a node is launched for it, then left empty.
        cluster.create("pods", neuron_pod("model", 2, nodeSelector={"karpenter.sh/nodepool": "big"}), "default")
        await cluster.wait_for(lambda: is_ready(cluster, "model"), timeout=300)
        launched = pod(cluster, "model")["spec"]["nodeName"]
        assert launched not in initial
        cluster.delete("pods", "model", "default")
        await cluster.wait_for(
            lambda: cluster.get("nodes", launched) is None, timeout=600, what="the launched node consolidated"
        )
        # By now the initial nodes have been empty for minutes: they are still there.
        assert sorted(n["metadata"]["name"] for n in cluster.list("nodes")) == initial
        assert cluster.provisioner is not None and cluster.provisioner.nodes_removed == 1
        events = [e for e in cluster.list("events") if e["involvedObject"].get("kind") == "Node"]
        assert [(e["involvedObject"]["name"], e["type"], e["reason"], e["message"]) for e in events] == [
            (launched, "Normal", "DisruptionTerminating", "Disrupting Node: Empty")
        ]
        assert events[0]["source"]["component"] == "karpenter"


async def test_the_demos_starting_nodes_are_a_floor(tmp_path: Path) -> None:
    """The demo's two starting nodes stay while empty (a long compile, no pods yet), as sandbox up's
    do (review r7: they were consolidated 60 s in, and the first pods waited for new ones)."""
    from neuronfleet.demo.options import DemoOptions
    from neuronfleet.demo.orchestration import prepare_example, sandbox_cluster

    example = prepare_example(DemoOptions(load="simulated", skip_compile=True, out=tmp_path), tmp_path)
    async with sandbox_cluster(example, tmp_path, seed=0) as cluster:
        initial = sorted(n["metadata"]["name"] for n in cluster.list("nodes"))
        assert len(initial) == 2
        # Loop time (looptime): ten simulated minutes, far past its 60 s consolidation delay, of a
        # cluster with no pods, so nothing to wait on: the nodes' staying is the check.
        await asyncio.sleep(600)
        assert sorted(n["metadata"]["name"] for n in cluster.list("nodes")) == initial
        assert cluster.provisioner is not None and cluster.provisioner.nodes_removed == 0


async def test_zone_spread_and_node_failure() -> None:
    group = NodeGroup("small", "inf2.xlarge", count=2, zones=("us-east-1a", "us-east-1b"), provisionable=False)
    async with SandboxCluster(node_groups=[group], cold_start=PROFILE, run_provisioner=False) as cluster:
        spread = ZONE_SPREAD
        for i in range(2):
            cluster.create("pods", neuron_pod(f"m{i}", 1, topologySpreadConstraints=spread), "default")
        await cluster.wait_for(lambda: all(pod(cluster, f"m{i}")["spec"].get("nodeName") for i in range(2)), timeout=5)
        zone_of = {
            n["metadata"]["name"]: n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in cluster.list("nodes")
        }
        assert {zone_of[pod(cluster, f"m{i}")["spec"]["nodeName"]] for i in range(2)} == {"us-east-1a", "us-east-1b"}

        assert cluster.kubelet is not None
        victim_node = pod(cluster, "m0")["spec"]["nodeName"]
        own = list((cluster.get("nodes", victim_node) or {})["spec"].get("taints") or [])
        assert own, "an Inf2 node carries the Neuron taint"
        cluster.kubelet.fail_node(victim_node)
        assert cluster.get("pods", "m0", "default") is None
        failed = cluster.get("nodes", victim_node)
        assert failed is not None and present_condition(failed, "Ready")["status"] == "Unknown"
        # The node's own taints stay beside the unreachable ones, and are all it keeps once it recovers.
        unreachable = [(t["key"], t["effect"]) for t in failed["spec"]["taints"] if t not in own]
        assert unreachable == [("node.kubernetes.io/unreachable", e) for e in ("NoSchedule", "NoExecute")]
        assert [t for t in failed["spec"]["taints"] if t in own] == own
        assert cluster.kubelet.recover_node(victim_node)
        recovered = cluster.get("nodes", victim_node)
        assert recovered is not None and present_condition(recovered, "Ready")["status"] == "True"
        assert recovered["spec"]["taints"] == own

        await cluster.wait_for(lambda: is_ready(cluster, "m1"), timeout=120)
        cluster.kubelet.fail_pod("default", "m1")
        assert pod(cluster, "m1")["status"]["phase"] == "Failed"
        assert present_condition(pod(cluster, "m1"), "Ready")["status"] == "False"


async def test_pods_bound_in_one_round_count_for_the_next_pod_in_it() -> None:
    # Pods created together are placed in one scheduling round: each binding must count, for the
    # spread and for the NeuronCores, before the next pod of the same round is placed.
    group = NodeGroup("small", "inf2.xlarge", count=4, zones=("us-east-1a", "us-east-1b"), provisionable=False)
    async with SandboxCluster(node_groups=[group], cold_start=PROFILE, run_provisioner=False) as cluster:
        spread = ZONE_SPREAD
        names = [f"m{i}" for i in range(6)]
        for name in names:
            cluster.create("pods", neuron_pod(name, 1, topologySpreadConstraints=spread), "default")
        await cluster.wait_for(lambda: all(pod(cluster, name)["spec"].get("nodeName") for name in names), timeout=5)
        assert cluster.scheduler is not None
        zone_of = {
            n["metadata"]["name"]: n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in cluster.list("nodes")
        }
        placed = [pod(cluster, name) for name in names]
        zones = [zone_of[p["spec"]["nodeName"]] for p in placed]
        assert sorted(zones) == ["us-east-1a"] * 3 + ["us-east-1b"] * 3
        cores = [(p["spec"]["nodeName"], p["metadata"]["annotations"][CORES_ANNOTATION]) for p in placed]
        assert len(set(cores)) == len(cores), f"two pods were given the same NeuronCore: {cores}"


async def test_the_kubelets_progress_on_bound_pods_wakes_no_scheduling_round() -> None:
    # A round tries every pending pod on every node: the kubelet's reports on pods already bound
    # (container creating, running, ready) change no placement and must not each start one.
    group = NodeGroup("small", "inf2.xlarge", count=2, provisionable=False)
    async with SandboxCluster(node_groups=[group], cold_start=PROFILE, run_provisioner=False) as cluster:
        assert cluster.scheduler is not None
        names = [f"m{i}" for i in range(4)]
        for name in names:
            cluster.create("pods", neuron_pod(name, 1), "default")
        await cluster.wait_for(lambda: all(pod(cluster, name)["spec"].get("nodeName") for name in names), timeout=5)
        rounds, since = cluster.scheduler.rounds, cluster.clock.monotonic()
        await cluster.wait_for(lambda: all(is_ready(cluster, name) for name in names), timeout=120)
        # Only the periodic retries (every retry_interval_s) remain.
        periodic = (cluster.clock.monotonic() - since) / cluster.scheduler.retry_interval_s
        assert cluster.scheduler.rounds - rounds <= periodic + 1


async def test_graceful_deletion_and_readiness_hook() -> None:
    hook_calls: list[str] = []

    async def ready_when_told(p: dict[str, Any]) -> bool | None:
        hook_calls.append(p["metadata"]["name"])
        return True if p["metadata"]["name"] == "hooked" else None

    async with one_node_cluster() as cluster:
        assert cluster.kubelet is not None
        cluster.kubelet.readiness_hook = ready_when_told
        body = neuron_pod("hooked", 1, terminationGracePeriodSeconds=20)
        cluster.create("pods", body, "default")
        await cluster.wait_for(lambda: is_ready(cluster, "hooked"), timeout=120)
        # Ready right after the container started: the hook replaced the 30 s readiness phase.
        assert cluster.clock.seconds_since(pod(cluster, "hooked")["status"]["startTime"]) == pytest.approx(22, abs=1)
        assert hook_calls == ["hooked"]

        cluster.delete("pods", "hooked", "default")
        terminating = pod(cluster, "hooked")
        assert terminating["metadata"]["deletionGracePeriodSeconds"] == 20
        await cluster.wait_for(lambda: cluster.get("pods", "hooked", "default") is None, timeout=60)


async def test_eviction_respects_pod_disruption_budgets() -> None:
    async with SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=2)], cold_start=PROFILE, run_provisioner=False
    ) as cluster:
        cluster.create(
            "poddisruptionbudgets",
            {"metadata": {"name": "model"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "model"}}}},
            "default",
            group="policy",
        )
        for i in range(2):
            cluster.create("pods", neuron_pod(f"m{i}", 1), "default")
        await cluster.wait_for(lambda: is_ready(cluster, "m0") and is_ready(cluster, "m1"), timeout=120)
        async with aiohttp.ClientSession(cluster.url) as http:
            eviction: dict[str, Any] = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": "m0", "namespace": "default"},
            }
            async with http.post("/api/v1/namespaces/default/pods/m0/eviction", json=eviction) as r:
                assert r.status == 201
            eviction["metadata"]["name"] = "m1"
            async with http.post("/api/v1/namespaces/default/pods/m1/eviction", json=eviction) as r:
                assert r.status == 429
                refusal = await r.json()
        assert refusal["reason"] == "TooManyRequests"
        assert (
            refusal["details"]["causes"][0]["message"]
            == "The disruption budget model needs 1 healthy pods and has 1 currently"
        )
        assert pod(cluster, "m1")["metadata"].get("deletionTimestamp") is None
        # The evicted pod says why it goes (a Job's pod failure policy reads it), as kube-apiserver sets it.
        evicted = present_condition(pod(cluster, "m0"), "DisruptionTarget")
        assert (evicted["status"], evicted["reason"]) == ("True", "EvictionByEvictionAPI")
        budget = cluster.get("poddisruptionbudgets", "model", "default", group="policy")
        assert budget is not None
        allowed = present_condition(budget, "DisruptionAllowed")
        assert (allowed["status"], allowed["reason"]) == ("False", "InsufficientPods")
        assert {
            k: budget["status"][k] for k in ("expectedPods", "currentHealthy", "desiredHealthy", "disruptionsAllowed")
        } == {
            "expectedPods": 2,
            "currentHealthy": 1,
            "desiredHealthy": 1,
            "disruptionsAllowed": 0,
        }
        await cluster.wait_for(lambda: cluster.get("pods", "m0", "default") is None, timeout=60)


async def test_budget_status_follows_pods_joining_leaving_and_a_budget_made_after_them() -> None:
    async with SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=2)], cold_start=PROFILE, run_provisioner=False
    ) as cluster:
        for i in range(3):
            cluster.create("pods", neuron_pod(f"m{i}", 1), "default")
        await cluster.wait_for(lambda: all(is_ready(cluster, f"m{i}") for i in range(3)), timeout=120)

        def budget_status() -> tuple[int, int, int] | None:
            budget = cluster.get("poddisruptionbudgets", "model", "default", group="policy")
            status = (budget or {}).get("status") or {}
            if "expectedPods" not in status:
                return None
            return status["expectedPods"], status["currentHealthy"], status["disruptionsAllowed"]

        # Made after its pods: it counts them at once.
        cluster.create(
            "poddisruptionbudgets",
            {"metadata": {"name": "model"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "model"}}}},
            "default",
            group="policy",
        )
        await cluster.wait_for(lambda: budget_status() is not None, timeout=5)
        assert budget_status() == (3, 3, 1)
        # A pod relabelled out of the selector leaves it (its labels before the change name the budget).
        relabelled = copy.deepcopy(pod(cluster, "m2"))  # the store's own object: edit a copy
        relabelled["metadata"]["labels"] = {"app": "other"}
        cluster.store.replace(cluster.store.resource("", "pods"), "default", "m2", relabelled)
        await cluster.wait_for(lambda: budget_status() != (3, 3, 1), timeout=5)
        assert budget_status() == (2, 2, 0)
        # A pod made later joins it.
        cluster.create("pods", neuron_pod("m3", 1), "default")
        await cluster.wait_for(lambda: budget_status() != (2, 2, 0), timeout=5)
        assert budget_status() == (3, 2, 0)  # counted at once, not yet healthy
        await cluster.wait_for(lambda: is_ready(cluster, "m3"), timeout=120)
        await cluster.wait_for(lambda: budget_status() != (3, 2, 0), timeout=5)
        assert budget_status() == (3, 3, 1)


async def test_a_shorter_grace_cuts_a_stop_under_way_short() -> None:
    slow_stop = ColdStartProfile(image_pull_s=20.0, container_start_s=2.0, readiness_s=30.0, shutdown_s=120.0)
    async with SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=1)], cold_start=slow_stop, run_provisioner=False
    ) as cluster:
        cluster.create("pods", neuron_pod("slow", 1, terminationGracePeriodSeconds=60), "default")
        await cluster.wait_for(lambda: is_ready(cluster, "slow"), timeout=120)
        generation = pod(cluster, "slow")["metadata"]["generation"]
        asked_at = cluster.clock.monotonic()
        cluster.delete("pods", "slow", "default")  # the spec's 60 s: the simulated stop takes all of it
        await asyncio.sleep(5)
        cluster.delete("pods", "slow", "default", grace_period=20)  # 20 s from the first request
        # markAsDeleting bumped the generation once; a shorter grace is no new deletion.
        assert pod(cluster, "slow")["metadata"]["generation"] == generation + 1
        await cluster.wait_for(lambda: cluster.get("pods", "slow", "default") is None, timeout=120)
        assert cluster.clock.monotonic() - asked_at == pytest.approx(20, abs=1.5)


async def test_a_container_that_exits_restarts_only_as_its_restart_policy_says() -> None:
    async with one_node_cluster() as cluster:
        kubelet = cluster.kubelet
        assert kubelet is not None

        async def exits_3(_pod: dict[str, Any]) -> ContainerResult:
            return ContainerResult(exit_code=3, message="boom")

        kubelet.container_runner = exits_3  # every run-to-completion container fails
        for name, policy in (("on-failure", "OnFailure"), ("never", "Never")):
            cluster.create("pods", neuron_pod(name, 1, restartPolicy=policy), "default")

        def restarts(name: str) -> int:
            statuses = pod(cluster, name)["status"].get("containerStatuses") or [{}]
            return int(statuses[0].get("restartCount", 0))

        await cluster.wait_for(lambda: restarts("on-failure") >= 1, timeout=120, what="OnFailure restarted")
        await cluster.wait_for(lambda: pod(cluster, "never")["status"]["phase"] == "Failed", timeout=120)
        assert restarts("never") == 0 and pod(cluster, "on-failure")["status"]["phase"] != "Failed"

        # A long-running container that exits: Always restarts it, Never leaves the pod Failed.
        kubelet.container_runner = None
        for name, policy in (("always", "Always"), ("serves-once", "Never")):
            cluster.create("pods", neuron_pod(name, 1, restartPolicy=policy), "default")
        await cluster.wait_for(lambda: is_ready(cluster, "always"), timeout=120)
        await cluster.wait_for(lambda: pod(cluster, "serves-once")["status"]["phase"] == "Running", timeout=120)
        assert kubelet.crash_container("default", "always", exit_code=1)
        assert kubelet.crash_container("default", "serves-once", exit_code=1)
        assert (restarts("always"), pod(cluster, "always")["status"]["phase"]) == (1, "Running")
        assert pod(cluster, "serves-once")["status"]["phase"] == "Failed"


async def test_stopping_a_pod_records_a_killing_event_per_container() -> None:
    async with one_node_cluster() as cluster:
        cluster.create("pods", neuron_pod("model", 1), "default")
        await cluster.wait_for(lambda: is_ready(cluster, "model"), timeout=120)
        cluster.delete("pods", "model", "default")
        await cluster.wait_for(lambda: cluster.get("pods", "model", "default") is None, timeout=120)
        killing = [
            (e["type"], e["message"])
            for e in cluster.list("events", "default")
            if e["involvedObject"]["name"] == "model" and e["reason"] == "Killing"
        ]
        assert killing == [("Normal", "Stopping container server")]


async def test_crashed_container_restarts_after_back_off() -> None:
    async with one_node_cluster() as cluster:
        assert cluster.kubelet is not None
        cluster.create("pods", neuron_pod("model", 1), "default")
        await cluster.wait_for(lambda: is_ready(cluster, "model"), timeout=120)
        running = pod(cluster, "model")
        node = cluster.get("nodes", running["spec"]["nodeName"])
        assert node is not None
        internal = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
        assert [running["status"]["hostIP"]] == internal  # the pod's node, as the kubelet reports it
        assert running["status"]["containerStatuses"][0]["ready"] is True  # the container too, not only the pod
        started_at = running["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
        await asyncio.sleep(5)
        assert cluster.kubelet.crash_container("default", "model", exit_code=137, reason="OOMKilled")
        crashed = pod(cluster, "model")
        (status,) = crashed["status"]["containerStatuses"]
        assert (status["restartCount"], status["ready"]) == (1, False)
        assert status["lastState"]["terminated"]["reason"] == "OOMKilled"
        # The run that ended: from when it started, not from the crash.
        assert (
            status["lastState"]["terminated"]["startedAt"]
            == started_at
            != status["lastState"]["terminated"]["finishedAt"]
        )
        assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        assert crashed["status"]["phase"] == "Running"
        crashed_at = cluster.clock.monotonic()
        await cluster.wait_for(lambda: is_ready(cluster, "model"), timeout=120)
        # back-off 10 s + container start 2 s + readiness 30 s
        assert cluster.clock.monotonic() - crashed_at == pytest.approx(42, abs=1)
        assert "running" in pod(cluster, "model")["status"]["containerStatuses"][0]["state"]


async def test_pod_without_probe_is_ready_when_started() -> None:
    async with one_node_cluster() as cluster:
        body = neuron_pod("placeholder", 1)
        del body["spec"]["containers"][0]["readinessProbe"]
        cluster.create("pods", body, "default")
        await cluster.wait_for(lambda: is_ready(cluster, "placeholder"), timeout=120)
        # image pull 20 s + container start 2 s, no model-load phase
        assert cluster.clock.seconds_since(pod(cluster, "placeholder")["status"]["startTime"]) == pytest.approx(
            22, abs=1
        )


async def test_pod_anti_affinity_and_preferred_node_affinity() -> None:
    group = NodeGroup("small", "inf2.xlarge", count=2, zones=("us-east-1a", "us-east-1b"), provisionable=False)
    async with SandboxCluster(node_groups=[group], cold_start=PROFILE, run_provisioner=False) as cluster:
        anti = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "model"}}}
                ]
            },
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 50,
                        "preference": {
                            "matchExpressions": [
                                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1b"]}
                            ]
                        },
                    }
                ]
            },
        }
        cluster.create("pods", neuron_pod("first", 1, affinity=anti), "default")
        await cluster.wait_for(lambda: pod(cluster, "first")["spec"].get("nodeName"), timeout=5)
        zone_of = {
            n["metadata"]["name"]: n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in cluster.list("nodes")
        }
        assert zone_of[pod(cluster, "first")["spec"]["nodeName"]] == "us-east-1b"  # the preferred zone
        cluster.create("pods", neuron_pod("second", 1, affinity=anti), "default")
        await cluster.wait_for(lambda: pod(cluster, "second")["spec"].get("nodeName"), timeout=5)
        assert pod(cluster, "second")["spec"]["nodeName"] != pod(cluster, "first")["spec"]["nodeName"]
        cluster.create("pods", neuron_pod("third", 1, affinity=anti), "default")
        await cluster.wait_for(lambda: condition(pod(cluster, "third"), "PodScheduled"), timeout=5)
        assert (
            "2 node(s) didn't match pod anti-affinity rules"
            in present_condition(pod(cluster, "third"), "PodScheduled")["message"]
        )


async def test_launched_node_becomes_usable_after_ready_and_device_plugin_delays() -> None:
    # The device plugin's report (the node's allocatable NeuronCores) wakes a scheduling round at once:
    # delays that are no multiple of the scheduler's periodic retry (10 s) tell it from that retry.
    groups = [NodeGroup("small", "inf2.xlarge", count=0, max_nodes=2)]
    async with SandboxCluster(
        node_groups=groups, cold_start=PROFILE, provisioning_delay_s=60, node_ready_delay_s=20, device_plugin_delay_s=13
    ) as cluster:
        start = cluster.clock.monotonic()
        cluster.create("pods", neuron_pod("model", 2), "default")
        (node,) = await cluster.wait_for(lambda: cluster.list("nodes"), timeout=300)
        assert present_condition(node, "Ready")["status"] == "False"
        assert node["status"]["allocatable"]["aws.amazon.com/neuroncore"] == "0"
        await cluster.wait_for(lambda: pod(cluster, "model")["spec"].get("nodeName"), timeout=300)
        assert cluster.clock.monotonic() - start == pytest.approx(93, abs=1)  # 60 + 20 + 13
        assert cluster.provisioner is not None and cluster.provisioner.nodes_launched == 1
        # Ready, it lost the not-ready taint and kept its Neuron one.
        taints = (cluster.get("nodes", node["metadata"]["name"]) or {})["spec"].get("taints") or []
        assert [(t["key"], t["effect"]) for t in taints] == [("aws.amazon.com/neuron", "NoSchedule")]


async def test_a_node_still_initializing_is_not_consolidated_while_its_pod_waits() -> None:
    # Karpenter takes only initialized nodes (Ready, extended resources registered) as disruption
    # candidates. The sandbox counted a launched node empty from its registration: with a device
    # plugin slower than the consolidation delay, it removed the node the pending pod waited for,
    # launched another, and so on, and the pod never ran.
    groups = [NodeGroup("small", "inf2.xlarge", count=0, max_nodes=2)]
    async with SandboxCluster(
        node_groups=groups,
        cold_start=PROFILE,
        provisioning_delay_s=60,
        device_plugin_delay_s=45,
        consolidation_delay_s=30,
    ) as cluster:
        start = cluster.clock.monotonic()
        cluster.create("pods", neuron_pod("model", 2), "default")
        await cluster.wait_for(lambda: pod(cluster, "model")["spec"].get("nodeName"), timeout=300)
        assert cluster.clock.monotonic() - start == pytest.approx(105, abs=1)  # 60 + 45
        assert cluster.provisioner is not None
        assert (cluster.provisioner.nodes_launched, cluster.provisioner.nodes_removed) == (1, 0)


async def test_a_max_unavailable_budget_expects_the_pods_of_its_controllers_scale() -> None:
    # As kube-controller-manager: with maxUnavailable the pods expected are the controllers' /scale
    # replicas, an InferenceDeployment's spec.scaling.replicas, unset in Auto mode: 0 expected, so no
    # eviction is allowed. The sandbox counted the selected pods, and hid an operator whose budget
    # blocked every node drain in production.
    async with SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=2)],
        cold_start=PROFILE,
        run_provisioner=False,
        crd_dir=REPO / "crds",
    ) as cluster:
        owner = cluster.create(
            "inferencedeployments",
            {
                "apiVersion": f"{GROUP}/v1alpha1",
                "kind": "InferenceDeployment",
                "metadata": {"name": "bert"},
                "spec": {"model": {"source": "s3://models/bert/"}, "scaling": {"mode": "Auto"}},
            },
            "default",
            group=GROUP,
        )
        reference = {
            "apiVersion": f"{GROUP}/v1alpha1",
            "kind": "InferenceDeployment",
            "name": "bert",
            "uid": owner["metadata"]["uid"],
            "controller": True,
        }
        for i in range(2):
            controlled = neuron_pod(f"m{i}", 1)
            controlled["metadata"]["ownerReferences"] = [reference]
            cluster.create("pods", controlled, "default")
        cluster.create(
            "poddisruptionbudgets",
            {
                "metadata": {"name": "bert"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "model"}}},
            },
            "default",
            group="policy",
        )
        await cluster.wait_for(lambda: is_ready(cluster, "m0") and is_ready(cluster, "m1"), timeout=120)

        def status() -> dict[str, Any]:
            return (cluster.get("poddisruptionbudgets", "bert", "default", group="policy") or {}).get("status") or {}

        await cluster.wait_for(lambda: status().get("currentHealthy") == 2, timeout=10)
        assert (status()["expectedPods"], status()["disruptionsAllowed"]) == (0, 0)
        async with aiohttp.ClientSession(cluster.url) as http:
            eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "m0"}}
            async with http.post("/api/v1/namespaces/default/pods/m0/eviction", json=eviction) as r:
                assert r.status == 429

            # Two replicas asked (Manual): its scale, read once for both pods it controls.
            def manual(o: dict[str, Any]) -> None:
                o["spec"]["scaling"] = {"mode": "Manual", "replicas": 2}

            cluster.store.update(cluster.store.resource(GROUP, "inferencedeployments"), "default", "bert", manual)
            async with http.post("/api/v1/namespaces/default/pods/m0/eviction", json=eviction) as r:
                assert r.status == 201
        # The budget's status follows at the pod's change (a controller's scale is read, not watched).
        await cluster.wait_for(lambda: status().get("expectedPods") == 2, timeout=10)
        assert (status()["desiredHealthy"], status()["currentHealthy"], status()["disruptionsAllowed"]) == (1, 1, 0)


def events_of(cluster: SandboxCluster, name: str) -> list[str]:
    return [e["reason"] for e in cluster.list("events", "default") if e["involvedObject"]["name"] == name]


async def test_an_unpullable_image_holds_only_its_own_container_in_image_pull_back_off() -> None:
    async with one_node_cluster() as cluster:
        assert cluster.kubelet is not None
        cluster.kubelet.unpullable_images.add("neuronserve:never-pulled")
        body = neuron_pod("model", 1)
        body["spec"]["containers"].append({"name": "sidecar", "image": "neuronserve:never-pulled"})

        def states() -> dict[str, str]:
            statuses = pod(cluster, "model").get("status", {}).get("containerStatuses") or []
            return {s["name"]: s["state"]["waiting"]["reason"] for s in statuses if "waiting" in s["state"]}

        cluster.create("pods", body, "default")
        await cluster.wait_for(lambda: "ImagePullBackOff" in states().values(), timeout=300)
        assert states() == {"server": "ContainerCreating", "sidecar": "ImagePullBackOff"}
        assert pod(cluster, "model")["status"]["phase"] == "Pending"


async def test_a_pod_force_deleted_while_its_image_pulls_is_started_no_further() -> None:
    async with one_node_cluster() as cluster:
        cluster.create("pods", neuron_pod("model", 1), "default")
        await cluster.wait_for(lambda: "Pulling" in events_of(cluster, "model"), timeout=60)
        cluster.delete("pods", "model", "default", grace_period=0)
        assert cluster.get("pods", "model", "default") is None
        await asyncio.sleep(3 * PROFILE.image_pull_s)  # loop time: past the pull and the start it began
        assert not {"Pulled", "Created", "Started"} & set(events_of(cluster, "model"))
