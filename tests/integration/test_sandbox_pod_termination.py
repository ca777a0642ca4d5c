"""A deleted pod's last status in the sandbox, as kubelets write it since Kubernetes 1.27 before the
pod leaves: its terminal phase from how its containers stopped (a server drains and exits 0, a
run-to-completion container ended by SIGTERM exits 143, by SIGKILL 137, one that never ran is
ContainerStatusUnknown; a force deletion without a finalizer leaves no such write), and the pod
GC's DisruptionTarget for the pods of a lost node (under looptime)."""

from __future__ import annotations

from typing import Any

import pytest

from neuronfleet.sandbox import ColdStartProfile, NodeGroup, SandboxCluster
from neuronfleet.sandbox.store import WatchEvent

pytestmark = pytest.mark.looptime

PROFILE = ColdStartProfile(
    image_pull_s=10.0, container_start_s=1.0, readiness_s=5.0, shutdown_s=20.0, run_s=600.0, jitter=0.0
)


def one_node_cluster(profile: ColdStartProfile) -> SandboxCluster:
    return SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=1)], cold_start=profile, run_provisioner=False
    )


def pod_body(name: str, *, restart_policy: str = "Always", image: str = "neuronserve:1") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 60,
            "tolerations": [{"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": image}],
        },
    }


class LastStatus:
    """Each pod's status in the last write before it was deleted."""

    def __init__(self, cluster: SandboxCluster) -> None:
        self.before_deletion: dict[str, dict[str, Any]] = {}
        self.deleted: set[str] = set()
        cluster.store.listeners.append(self)

    def __call__(self, event: WatchEvent) -> None:
        if event.resource != ("", "pods"):
            return
        name = event.obj["metadata"]["name"]
        if event.type == "DELETED":
            self.deleted.add(name)
        else:
            self.before_deletion[name] = event.obj.get("status") or {}

    def terminated(self, name: str) -> dict[str, Any]:
        (container,) = self.before_deletion[name]["containerStatuses"]
        return dict(container["state"]["terminated"])


def phase(cluster: SandboxCluster, name: str) -> str | None:
    return ((cluster.get("pods", name, "default") or {}).get("status") or {}).get("phase")


async def start_running(cluster: SandboxCluster, body: dict[str, Any]) -> None:
    name = body["metadata"]["name"]
    cluster.create("pods", body, "default")
    await cluster.wait_for(lambda: phase(cluster, name) == "Running", timeout=600, what=f"{name} running")


async def test_each_deleted_pod_ends_in_the_phase_its_containers_stop_give() -> None:
    async with one_node_cluster(PROFILE) as cluster:
        last = LastStatus(cluster)
        for name, policy in (("server", "Always"), ("job", "Never"), ("killed", "Never"), ("forced", "Never")):
            cluster.create("pods", pod_body(name, restart_policy=policy), "default")
        # A force deletion (grace 0) of a pod without a finalizer removes it at once: no kubelet writes.
        cluster.store.update(
            cluster.store.resource("", "pods"),
            "default",
            "killed",
            lambda o: o["metadata"].__setitem__("finalizers", ["example.com/keep"]),
        )
        cluster.create("pods", pod_body("pulling", image="neuronserve:never-pulled"), "default")
        assert cluster.kubelet is not None
        cluster.kubelet.unpullable_images.add("neuronserve:never-pulled")
        await cluster.wait_for(
            lambda: all(phase(cluster, name) == "Running" for name in ("server", "job", "killed", "forced")),
            timeout=600,
        )
        cluster.delete("pods", "server", "default")
        cluster.delete("pods", "job", "default")
        cluster.delete("pods", "killed", "default", grace_period=0)
        cluster.delete("pods", "forced", "default", grace_period=0)
        assert "forced" in last.deleted
        cluster.delete("pods", "pulling", "default")
        await cluster.wait_for(lambda: len(last.deleted) == 4, timeout=600, what="the pods without a finalizer gone")
        await cluster.wait_for(lambda: phase(cluster, "killed") == "Failed", timeout=10)

        assert last.before_deletion["server"]["phase"] == "Succeeded"  # drained, exit 0
        assert last.terminated("server")["exitCode"] == 0
        assert last.terminated("server")["reason"] == "Completed"
        assert last.before_deletion["job"]["phase"] == "Failed"
        assert (last.terminated("job")["exitCode"], last.terminated("job")["reason"]) == (143, "Error")
        assert last.terminated("killed")["exitCode"] == 137  # kept by its finalizer
        assert last.before_deletion["forced"]["phase"] == "Running"
        assert last.before_deletion["pulling"]["phase"] == "Failed"
        assert last.terminated("pulling")["reason"] == "ContainerStatusUnknown"
        # The readiness conditions' reason is the terminal phase's, as the kubelet's status generator
        # writes it: PodCompleted for Succeeded, PodFailed for Failed.
        for name, reason in (("server", "PodCompleted"), ("job", "PodFailed"), ("pulling", "PodFailed")):
            readiness = {c["type"]: c for c in last.before_deletion[name]["conditions"]}
            for kind in ("ContainersReady", "Ready"):
                assert (readiness[kind]["status"], readiness[kind]["reason"]) == ("False", reason), (name, kind)
        killed = cluster.get("pods", "killed", "default")
        assert killed is not None
        assert {c["type"]: c["status"] for c in killed["status"]["conditions"]}["Ready"] == "False"


async def test_a_stop_a_shorter_grace_cuts_is_a_sigkill() -> None:
    # The simulated server takes 20 s to stop; a second DELETE with 5 s kills it at 5 s.
    async with one_node_cluster(PROFILE) as cluster:
        last = LastStatus(cluster)
        await start_running(cluster, pod_body("server"))
        cluster.delete("pods", "server", "default")
        cluster.delete("pods", "server", "default", grace_period=5)
        start = cluster.clock.monotonic()
        await cluster.wait_for(lambda: "server" in last.deleted, timeout=600)
        assert cluster.clock.monotonic() - start == pytest.approx(5, abs=1)
        assert last.before_deletion["server"]["phase"] == "Failed"
        assert last.terminated("server")["exitCode"] == 137


async def test_the_pods_of_a_lost_node_are_failed_with_the_pod_gcs_disruption_before_they_go() -> None:
    async with one_node_cluster(PROFILE) as cluster:
        last = LastStatus(cluster)
        await start_running(cluster, pod_body("server"))
        assert cluster.kubelet is not None
        node = (cluster.get("pods", "server", "default") or {})["spec"]["nodeName"]
        assert cluster.kubelet.fail_node(node)
        await cluster.wait_for(lambda: "server" in last.deleted, timeout=10)
        status = last.before_deletion["server"]
        assert status["phase"] == "Failed"
        disruption = {c["type"]: c for c in status["conditions"]}["DisruptionTarget"]
        assert (disruption["status"], disruption["reason"]) == ("True", "DeletionByPodGC")
        assert last.terminated("server")["reason"] == "ContainerStatusUnknown"


async def test_a_pod_that_had_ended_keeps_its_end_when_deleted() -> None:
    # A finalizer keeps a deleted pod that had already succeeded: the kubelet stops nothing and must
    # not write an end over the one its containers had.
    short_run = ColdStartProfile(image_pull_s=10.0, container_start_s=1.0, shutdown_s=20.0, run_s=30.0, jitter=0.0)
    async with one_node_cluster(short_run) as cluster:
        body = pod_body("done", restart_policy="Never")
        body["metadata"]["finalizers"] = ["example.com/keep"]
        cluster.create("pods", body, "default")
        await cluster.wait_for(lambda: phase(cluster, "done") == "Succeeded", timeout=600)
        cluster.delete("pods", "done", "default")

        def stopped() -> bool:
            return any(
                e.get("reason") == "Killing" and e["involvedObject"]["name"] == "done"
                for e in cluster.list("events", "default")
            )

        await cluster.wait_for(stopped, timeout=60, what="the kubelet's stop")
        pod = cluster.get("pods", "done", "default")
        assert pod is not None and pod["metadata"].get("deletionTimestamp")
        assert pod["status"]["phase"] == "Succeeded"
        (container,) = pod["status"]["containerStatuses"]
        assert (container["state"]["terminated"]["exitCode"], container["state"]["terminated"]["reason"]) == (
            0,
            "Completed",
        )


async def test_a_failed_pod_fault_ends_its_containers_as_a_stop_does() -> None:
    # fail_pod ends the containers with the fault's exit code, reason and message, from when they
    # started, and writes the Failed phase's readiness reason.
    async with one_node_cluster(PROFILE) as cluster:
        await start_running(cluster, pod_body("server"))
        started = (cluster.get("pods", "server", "default") or {})["status"]["containerStatuses"][0]["state"][
            "running"
        ]["startedAt"]
        assert cluster.kubelet is not None
        assert cluster.kubelet.fail_pod("default", "server", reason="OOMKilled", message="out of memory", exit_code=137)
        pod = cluster.get("pods", "server", "default")
        assert pod is not None
        status = pod["status"]
        assert (status["phase"], status["reason"], status["message"]) == ("Failed", "OOMKilled", "out of memory")
        (container,) = status["containerStatuses"]
        terminated = container["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (
            137,
            "OOMKilled",
            "out of memory",
        )
        assert terminated["startedAt"] == started
        assert terminated["finishedAt"] == cluster.clock.timestamp()
        assert not container["ready"]
        readiness = {c["type"]: (c["status"], c.get("reason")) for c in status["conditions"]}
        assert readiness["Ready"] == readiness["ContainersReady"] == ("False", "PodFailed")
        assert not cluster.kubelet.fail_pod("default", "gone")


async def test_a_container_exit_without_a_named_reason_reads_as_the_runtime_writes_it() -> None:
    # A container that just exits leaves the pod's own reason unset (a real kubelet sets it for an
    # eviction, not for an exit); the container's reason is the runtime's for its code: Completed
    # for 0, also in the last state of a container restarted after exiting 0.
    async with one_node_cluster(PROFILE) as cluster:
        await start_running(cluster, pod_body("exits", restart_policy="Never"))
        await start_running(cluster, pod_body("restarts"))
        assert cluster.kubelet is not None
        assert cluster.kubelet.fail_pod("default", "exits", exit_code=0)
        ended = (cluster.get("pods", "exits", "default") or {})["status"]
        assert ended["phase"] == "Succeeded"
        assert "reason" not in ended and "message" not in ended
        assert ended["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
        assert cluster.kubelet.crash_container("default", "restarts", exit_code=0)
        (restarted,) = (cluster.get("pods", "restarts", "default") or {})["status"]["containerStatuses"]
        assert (restarted["lastState"]["terminated"]["exitCode"], restarted["lastState"]["terminated"]["reason"]) == (
            0,
            "Completed",
        )
