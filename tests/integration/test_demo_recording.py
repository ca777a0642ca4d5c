"""What the demo measures of the fleet (``demo.recording``), read from a running sandbox: the
deployment's pods by role and readiness (not another deployment's, not one being deleted), its
nodes by type, its desired replicas; the Recorder's integrals, timeline rows and scale Events.
These are the figures the demo's report turns into pod-seconds, cost and its scaling counts."""

from __future__ import annotations

from typing import Any

from neuronfleet.api.v1alpha1 import GROUP, PLURAL
from neuronfleet.demo.recording import FleetView, Recorder, read_fleet, scale_direction
from neuronfleet.sandbox import SandboxCluster
from neuronfleet.sandbox.store import WatchEvent

DEPLOYMENT = "bert"


def pod(name: str, role: str, deployment: str = DEPLOYMENT, **meta: Any) -> dict[str, Any]:
    """A pod no scheduler takes (its scheduler does not exist): its status is the test's to write."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {f"{GROUP}/deployment": deployment, f"{GROUP}/role": role}, **meta},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "server", "image": "neuronserve:1"}]},
    }


def set_ready(cluster: SandboxCluster, name: str) -> None:
    def ready(obj: dict[str, Any]) -> None:
        obj.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": "True"}]

    cluster.store.update(cluster.store.resource("", "pods"), "default", name, ready, subresource="status")


async def test_the_fleet_is_the_deployments_pods_by_role_its_nodes_and_its_desired_replicas(
    sandbox_cluster: SandboxCluster,
) -> None:
    cluster = sandbox_cluster
    for name, role in [
        ("active-0", "active"),
        ("active-1", "active"),
        ("warm-0", "warm"),
        ("warm-1", "warm"),
        ("draining-0", "draining"),
        ("placeholder-0", "placeholder"),
    ]:
        cluster.create("pods", pod(name, role), "default")
    for name in ("active-0", "warm-1"):
        set_ready(cluster, name)
    cluster.create("pods", pod("other-0", "active", deployment="gpt"), "default")
    cluster.create("pods", pod("leaving-0", "active", finalizers=["example.com/hold"]), "default")
    cluster.delete("pods", "leaving-0", "default")
    deployment = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": DEPLOYMENT},
        "spec": {"model": {"source": "s3://models/bert", "format": "huggingface"}},
    }
    cluster.create(PLURAL, deployment, "default", group=GROUP)

    def desired(obj: dict[str, Any]) -> None:
        obj["status"] = {"desiredReplicas": 3}

    cluster.store.update(cluster.store.resource(GROUP, PLURAL), "default", DEPLOYMENT, desired, subresource="status")

    view = read_fleet(cluster, "default", DEPLOYMENT)
    counts = (view.active, view.ready, view.warm, view.warm_ready, view.draining, view.placeholders)
    assert counts == (2, 1, 2, 1, 1, 1)
    assert view.desired == 3 and view.status["desiredReplicas"] == 3
    assert view.nodes_by_type == {"inf2.xlarge": 2}


class SteadyLoad:
    def demand(self, t: float) -> float:
        return 10.0 * t

    def queue_depth(self) -> float:
        return 4.0

    def utilization(self) -> float:
        return 0.5


def test_the_recorder_integrates_samples_after_its_lead_in_and_counts_scaling_events() -> None:
    recorder = Recorder(SteadyLoad(), lead_in=60.0)
    small = FleetView(active=1, warm=1, nodes_by_type={"inf2.xlarge": 2})
    large = FleetView(active=3, ready=3, nodes_by_type={"inf2.xlarge": 2, "inf2.8xlarge": 1})
    recorder.integrate(small, 10.0)
    recorder.integrate(large, 5.0)
    assert recorder.node_seconds == {"inf2.xlarge": 30.0, "inf2.8xlarge": 5.0}
    assert (recorder.active_seconds, recorder.warm_seconds) == (25.0, 10.0)
    assert (recorder.min_active, recorder.peak_active, recorder.peak_nodes) == (1, 3, 3)

    recorder.sample(90.0, large)
    row = {key: values[-1] for key, values in recorder.timeline.items()}
    assert row == {
        "t": 30.0,  # measured time: the lead-in is not in it
        "demand": 900.0,
        "queue": 4.0,
        "desired": 0.0,
        "active": 3.0,
        "ready": 3.0,
        "warm": 0.0,
        "placeholders": 0.0,
        "nodes": 3.0,
        "util": 0.5,
    }

    def event(reason: str, message: str) -> WatchEvent:
        obj = {"reason": reason, "message": message, "involvedObject": {"kind": "InferenceDeployment"}}
        return WatchEvent(1, ("", "events"), "ADDED", obj, None)

    recorder.started = True
    recorder.replay_now = 30.0  # still in the lead-in: shown, not counted
    recorder.on_store_event(event("Scaled", "desired active replicas 1 -> 2: queue"))
    recorder.replay_now = 120.0
    for reason, message in [
        ("Scaled", "desired active replicas 2 -> 4: queue"),
        ("Scaled", "desired active replicas 4 -> 3: idle"),
        ("Scaled", "desired warm pool resized"),  # no direction: neither up nor down
        ("Compiled", "desired active replicas 3 -> 9: not a scaling Event"),
    ]:
        recorder.on_store_event(event(reason, message))
    assert [e.t for e in recorder.events] == [60.0, 60.0, 60.0]
    assert (recorder.scale_ups, recorder.scale_downs) == (1, 1)
    assert [scale_direction(m) for m in ("a 2 -> 2: same", "a 5 -> 1: x", "no arrow")] == [0, -1, 0]
    assert recorder.recent[0][1:] == ("Compiled", "desired active replicas 3 -> 9: not a scaling Event")
