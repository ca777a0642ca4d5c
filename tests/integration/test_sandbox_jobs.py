"""Jobs in the sandbox: the job controller, run-to-completion pods, a real command via
SubprocessRunner, backoff limits and TTL (under looptime)."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from typing import Any

import pytest

from neuronfleet.sandbox import ColdStartProfile, NodeGroup, SandboxCluster
from neuronfleet.sandbox.disruption import mark_evicted
from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.kubelet import ContainerResult
from neuronfleet.sandbox.runners import SubprocessRunner

pytestmark = pytest.mark.looptime

PROFILE = ColdStartProfile(
    image_pull_s=10.0, container_start_s=1.0, readiness_s=5.0, shutdown_s=1.0, run_s=120.0, jitter=0.0
)


class RealTimeRunner:
    """A container runner run in a worker thread, on its own event loop.

    looptime moves the test loop's clock to its next timer whenever nothing is ready, and a real
    process's pipes are I/O it cannot wait for: the fake clock ran past a 600 s wait while a child
    Python started on a loaded machine (a 1 s delay in the child was enough to fail the test every
    time). Work in an executor is what looptime waits for in real time.
    """

    def __init__(self, runner: SubprocessRunner) -> None:
        self.runner = runner

    async def __call__(self, pod: dict[str, Any]) -> ContainerResult | None:
        return await asyncio.to_thread(asyncio.run, self.runner(pod))


def one_node_cluster() -> SandboxCluster:
    """One inf2.xlarge node, no provisioner: what every test here runs its Jobs on."""
    return SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=1)], cold_start=PROFILE, run_provisioner=False
    )


def job_body(name: str, *, command: list[str] | None = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "compile",
        "image": "neuronserve:compile",
        "resources": {"requests": {"cpu": "1"}},
    }
    if command:
        container["command"] = command[:1]
        container["args"] = command[1:]
    return {
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "compile"}},
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [{"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [container],
                },
            },
            **spec,
        },
    }


#: A pod spec the sandbox admits (and the kubelet runs), with no ServiceAccount named.
POD_SPEC: dict[str, Any] = {"containers": [{"name": "main", "image": "neuronserve:compile"}]}


def condition_types(job: dict[str, Any] | None) -> set[str]:
    return {c["type"] for c in ((job or {}).get("status") or {}).get("conditions") or [] if c["status"] == "True"}


def job(cluster: SandboxCluster, name: str) -> dict[str, Any] | None:
    return cluster.get("jobs", name, "default", group="batch")


async def test_job_runs_to_completion_and_expires() -> None:
    async with one_node_cluster() as cluster:
        # A TTL shorter than the run: it counts from the Job's completion, not from its start.
        cluster.create("jobs", job_body("compile", ttlSecondsAfterFinished=100), "default", group="batch")
        start = cluster.clock.monotonic()
        await cluster.wait_for(lambda: "Complete" in condition_types(job(cluster, "compile")), timeout=600)
        completed = cluster.clock.monotonic()
        # pull 10 s + start 1 s + run 120 s
        assert completed - start == pytest.approx(131, abs=2)
        done = job(cluster, "compile")
        assert done is not None
        assert {k: done["status"][k] for k in ("succeeded", "failed", "active")} == {
            "succeeded": 1,
            "failed": 0,
            "active": 0,
        }
        assert "SuccessCriteriaMet" in condition_types(done)
        (pod,) = [p for p in cluster.list("pods", "default") if p["metadata"]["labels"].get("job-name") == "compile"]
        assert pod["status"]["phase"] == "Succeeded"
        assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
        await cluster.wait_for(lambda: job(cluster, "compile") is None, timeout=600, what="the TTL controller")
        # completionTime is in whole seconds, as metav1.Time: up to a second early.
        assert cluster.clock.monotonic() - completed == pytest.approx(99.5, abs=0.6)
        await cluster.wait_for(lambda: not cluster.list("pods", "default"), timeout=10, what="the job's pods GC'd")


async def test_a_jobs_ttl_counts_from_its_completion_time_not_from_when_the_controller_saw_it() -> None:
    # A Job that finished 250 s before this controller first read it (its status written by another,
    # as after a controller-manager restart): with a 300 s TTL, it has 50 s left.
    async with one_node_cluster() as cluster:
        cluster.create("jobs", job_body("compile", suspend=True, ttlSecondsAfterFinished=300), "default", group="batch")
        finished = cluster.clock.timestamp(-250.0)
        done = {"type": "Complete", "status": "True", "lastTransitionTime": finished}

        def finish(o: dict[str, Any]) -> None:
            o["status"] = {"succeeded": 1, "completionTime": finished, "conditions": [done]}

        jobs = cluster.store.resource("batch", "jobs")
        cluster.store.update(jobs, "default", "compile", finish, subresource="status")
        start = cluster.clock.monotonic()
        await cluster.wait_for(lambda: job(cluster, "compile") is None, timeout=600, what="the TTL controller")
        assert cluster.clock.monotonic() - start == pytest.approx(50, abs=1)


async def test_a_job_past_its_active_deadline_fails_and_its_pod_goes() -> None:
    # Made once the cluster has run a while: the deadline counts from the Job's start, not from the
    # clock's zero.
    async with one_node_cluster() as cluster:
        await asyncio.sleep(100)  # loop time
        cluster.create("jobs", job_body("compile", activeDeadlineSeconds=60), "default", group="batch")
        start = cluster.clock.monotonic()
        await cluster.wait_for(lambda: "Failed" in condition_types(job(cluster, "compile")), timeout=600)
        assert cluster.clock.monotonic() - start == pytest.approx(60, abs=1)  # the run takes 131 s
        failed = job(cluster, "compile")
        assert failed is not None
        reasons = {c["type"]: c["reason"] for c in failed["status"]["conditions"]}
        assert reasons == {"FailureTarget": "DeadlineExceeded", "Failed": "DeadlineExceeded"}
        await cluster.wait_for(lambda: not cluster.list("pods", "default"), timeout=60, what="its pod deleted")


async def test_job_with_a_real_command_and_backoff_limit() -> None:
    async with one_node_cluster() as cluster:
        assert cluster.kubelet is not None
        cluster.kubelet.container_runner = RealTimeRunner(SubprocessRunner())
        script = (
            "import sys; open(sys.argv[1], 'w').write('artifact ok'); print('compiled'); sys.exit(int(sys.argv[2]))"
        )
        cluster.create(
            "jobs",
            job_body("good", command=[sys.executable, "-c", script, "/dev/termination-log", "0"]),
            "default",
            group="batch",
        )
        await cluster.wait_for(lambda: "Complete" in condition_types(job(cluster, "good")), timeout=600)
        (pod,) = [p for p in cluster.list("pods", "default") if p["metadata"]["labels"].get("job-name") == "good"]
        assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] == "artifact ok"
        assert cluster.apiserver.pod_logs[pod["metadata"]["uid"]][-1] == "compiled"

        cluster.create(
            "jobs",
            job_body("bad", command=[sys.executable, "-c", script, "/dev/termination-log", "3"], backoffLimit=1),
            "default",
            group="batch",
        )
        await cluster.wait_for(lambda: "Failed" in condition_types(job(cluster, "bad")), timeout=600)
        failed = job(cluster, "bad")
        assert failed is not None and failed["status"]["failed"] == 2
        reasons = {c["type"]: c["reason"] for c in failed["status"]["conditions"]}
        assert reasons["Failed"] == "BackoffLimitExceeded"
        exits = sorted(
            p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"]
            for p in cluster.list("pods", "default")
            if p["metadata"]["labels"].get("job-name") == "bad"
        )
        assert exits == [3, 3]


async def test_service_account_admission_refuses_pods_and_the_job_controller_says_so_in_an_event() -> None:
    # Real kube-apiserver: the ServiceAccount admission plugin refuses a pod naming an account absent
    # from its namespace; the Job controller reports it only in a FailedCreate Event and tries again.
    async with one_node_cluster() as cluster:
        pod = {"metadata": {"name": "reader"}, "spec": {"serviceAccountName": "model-reader", **POD_SPEC}}
        with pytest.raises(ApiError) as refused:
            cluster.create("pods", pod, "default")
        assert refused.value.code == 403
        assert refused.value.message == (
            'pods "reader" is forbidden: error looking up service account default/model-reader: '
            'serviceaccount "model-reader" not found'
        )
        # No name, or `default`: the account the ServiceAccount controller keeps in every namespace.
        plain = cluster.create("pods", {"metadata": {"name": "plain"}, "spec": POD_SPEC}, "default")
        assert plain["spec"]["serviceAccountName"] == "default"

        body = job_body("compile")
        body["spec"]["template"]["spec"]["serviceAccountName"] = "model-compiler"
        cluster.create("jobs", body, "default", group="batch")

        def failed_creates() -> list[dict[str, Any]]:
            return [e for e in cluster.list("events", "default") if e["reason"] == "FailedCreate"]

        (event,) = await cluster.wait_for(failed_creates, timeout=60, what="a FailedCreate Event")
        assert event["type"] == "Warning" and event["involvedObject"]["name"] == "compile"
        assert event["message"] == (
            'Error creating: pods "compile-" is forbidden: error looking up service account '
            'default/model-compiler: serviceaccount "model-compiler" not found'
        )
        assert not [p for p in cluster.list("pods", "default") if (p["metadata"].get("labels") or {}).get("job-name")]

        cluster.create("serviceaccounts", {"metadata": {"name": "model-compiler"}}, "default")
        await cluster.wait_for(lambda: "Complete" in condition_types(job(cluster, "compile")), timeout=600)
        (made,) = [p for p in cluster.list("pods", "default") if (p["metadata"].get("labels") or {}).get("job-name")]
        assert made["spec"]["serviceAccountName"] == "model-compiler"


def resourced_pod(name: str, requests: dict[str, str], limits: dict[str, str] | None = None) -> dict[str, Any]:
    resources = {"requests": requests, **({"limits": limits} if limits else {})}
    container = {"name": "main", "image": "neuronserve:compile", "resources": resources}
    return {"metadata": {"name": name}, "spec": {"containers": [container]}}


async def test_limit_range_admission_defaults_then_validates_then_checks_min_and_max() -> None:
    # Real kube-apiserver: the LimitRanger's mutating half gives a container the default limit it
    # lacks; pod validation then refuses a request above it (422); its validating half refuses what is
    # outside min/max (403). Wording: pkg/apis/core/validation and plugin/pkg/admission/limitranger.
    async with one_node_cluster() as cluster:
        limits = {"type": "Container", "default": {"cpu": "1"}, "min": {"cpu": "100m"}, "max": {"memory": "1Gi"}}
        cluster.create("limitranges", {"metadata": {"name": "defaults"}, "spec": {"limits": [limits]}}, "default")

        with pytest.raises(ApiError) as invalid:
            cluster.create("pods", resourced_pod("greedy", {"cpu": "2"}), "default")
        assert invalid.value.code == 422
        assert invalid.value.message == (
            'Pod "greedy" is invalid: spec.containers[0].resources.requests: Invalid value: "2": '
            "must be less than or equal to cpu limit of 1"
        )
        with pytest.raises(ApiError) as forbidden:
            cluster.create("pods", resourced_pod("big", {"cpu": "2"}, {"cpu": "2", "memory": "2Gi"}), "default")
        assert forbidden.value.code == 403
        assert forbidden.value.message == (
            'pods "big" is forbidden: maximum memory usage per Container is 1Gi, but limit is 2Gi'
        )
        with pytest.raises(ApiError) as both:
            cluster.create("pods", resourced_pod("odd", {"cpu": "50m"}, {"cpu": "50m", "memory": "2Gi"}), "default")
        assert both.value.message == (
            'pods "odd" is forbidden: [minimum cpu usage per Container is 100m, but request is 50m, '
            "maximum memory usage per Container is 1Gi, but limit is 2Gi]"
        )
        fits = resourced_pod("fits", {"cpu": "500m", "memory": "512Mi"}, {"memory": "512Mi"})
        made = cluster.create("pods", fits, "default")
        assert made["spec"]["containers"][0]["resources"] == {
            "requests": {"cpu": "500m", "memory": "512Mi"},
            "limits": {"memory": "512Mi", "cpu": "1"},
        }


async def test_resource_quota_admission_after_limit_range_defaults_must_specify_then_exceeded() -> None:
    # Real kube-apiserver: ResourceQuota is the last validating admission, after the LimitRanger's
    # defaults; a quota capping cpu or memory first refuses a container setting none ("failed quota",
    # pods.go's Constraints), then any quota taken over its hard ("exceeded quota", only what exceeds).
    async with one_node_cluster() as cluster:
        hard = {"pods": "2", "limits.cpu": "3", "requests.memory": "1Gi", "requests.aws.amazon.com/neuroncore": "2"}
        cluster.create("resourcequotas", {"metadata": {"name": "compute"}, "spec": {"hard": hard}}, "default")
        two = {"name": "side", "image": "neuronserve:compile", "resources": {"requests": {"memory": "1Mi"}}}
        bare = resourced_pod("bare", {"memory": "1Mi"})
        bare["spec"]["containers"].append(two)
        with pytest.raises(ApiError) as unset:
            cluster.create("pods", bare, "default")
        assert unset.value.code == 403
        assert (
            unset.value.message
            == 'pods "bare" is forbidden: failed quota: compute: must specify limits.cpu for: main,side'
        )
        assert unset.value.status_body()["reason"] == "Forbidden"

        # The LimitRange's default limit is given before the quota sees the pod.
        limits = {"type": "Container", "default": {"cpu": "2"}}
        cluster.create("limitranges", {"metadata": {"name": "defaults"}, "spec": {"limits": [limits]}}, "default")
        cluster.create("pods", resourced_pod("first", {"memory": "512Mi", "cpu": "1"}), "default")

        def quota_status() -> dict[str, Any]:
            return (cluster.get("resourcequotas", "compute", "default") or {}).get("status") or {}

        await cluster.wait_for(lambda: quota_status().get("used", {}).get("pods") == "1", timeout=10)
        assert quota_status() == {
            "hard": hard,
            "used": {
                "pods": "1",
                "limits.cpu": "2",
                "requests.memory": "512Mi",
                "requests.aws.amazon.com/neuroncore": "0",
            },
        }

        # Every exceeded resource, sorted, and only those: limits.cpu 2+2 > 3 and memory 512Mi+1Gi > 1Gi.
        with pytest.raises(ApiError) as over:
            cluster.create("pods", resourced_pod("second", {"memory": "1Gi", "cpu": "1"}), "default")
        assert over.value.code == 403
        assert over.value.message == (
            'pods "second" is forbidden: exceeded quota: compute, requested: limits.cpu=2,requests.memory=1Gi, '
            "used: limits.cpu=2,requests.memory=512Mi, limited: limits.cpu=3,requests.memory=1Gi"
        )
        # An extended resource's request (defaulted from its limit) counts as requests.<name>.
        cores = {"aws.amazon.com/neuroncore": "3"}
        with pytest.raises(ApiError) as neuron:
            cluster.create("pods", resourced_pod("cores", {"memory": "1Mi", **cores}, {"cpu": "1", **cores}), "default")
        assert neuron.value.message == (
            'pods "cores" is forbidden: exceeded quota: compute, requested: requests.aws.amazon.com/neuroncore=3, '
            "used: requests.aws.amazon.com/neuroncore=0, limited: requests.aws.amazon.com/neuroncore=2"
        )
        cluster.create("pods", resourced_pod("fits", {"memory": "1Mi"}, {"cpu": "1"}), "default")
        with pytest.raises(ApiError) as full:
            cluster.create("pods", resourced_pod("third", {"memory": "1Mi"}, {"cpu": "100m"}), "default")
        assert full.value.message == (
            'pods "third" is forbidden: exceeded quota: compute, requested: limits.cpu=100m,pods=1, '
            "used: limits.cpu=3,pods=2, limited: limits.cpu=3,pods=2"
        )
        # A terminal pod no longer counts (a pod being deleted still does, until it is gone).
        pods = cluster.store.resource("", "pods")
        cluster.store.update(
            pods, "default", "fits", lambda p: p["status"].update(phase="Succeeded"), subresource="status"
        )
        cluster.create("pods", resourced_pod("third", {"memory": "1Mi"}, {"cpu": "100m"}), "default")
        await cluster.wait_for(lambda: quota_status()["used"]["limits.cpu"] == "2100m", timeout=10)
        assert quota_status()["used"]["pods"] == "2"


class FailingRunner:
    """A container runner whose containers exit with ``exit_code`` at once; it notes when each ran."""

    def __init__(self, cluster: SandboxCluster, exit_code: int) -> None:
        self.cluster = cluster
        self.exit_code = exit_code
        self.started: list[float] = []

    @classmethod
    def install(cls, cluster: SandboxCluster, exit_code: int) -> FailingRunner:
        """A runner that the cluster's kubelet runs every run-to-completion container with."""
        assert cluster.kubelet is not None
        runner = cls(cluster, exit_code)
        cluster.kubelet.container_runner = runner
        return runner

    async def __call__(self, pod: dict[str, Any]) -> ContainerResult | None:
        self.started.append(self.cluster.clock.monotonic())
        return ContainerResult(exit_code=self.exit_code)


def pods_of(cluster: SandboxCluster, name: str) -> list[dict[str, Any]]:
    return [p for p in cluster.list("pods", "default") if p["metadata"]["labels"].get("job-name") == name]


def job_status(cluster: SandboxCluster, name: str) -> dict[str, Any]:
    return (job(cluster, name) or {}).get("status") or {}


def running_pod(cluster: SandboxCluster, name: str) -> dict[str, Any] | None:
    return next((p for p in pods_of(cluster, name) if p["status"].get("phase") == "Running"), None)


async def test_a_failed_pod_is_replaced_after_an_exponential_back_off() -> None:
    # kube-controller-manager waits 10 s after the first failure, then 20 s, 40 s... (each counted
    # from the last pod's exit) before making the next pod; the image is cached after the first
    # pull, so each next container starts 1 s after its pod is made.
    async with one_node_cluster() as cluster:
        runner = FailingRunner.install(cluster, exit_code=3)
        cluster.create("jobs", job_body("bad", backoffLimit=3), "default", group="batch")
        await cluster.wait_for(lambda: "Failed" in condition_types(job(cluster, "bad")), timeout=3600)
        gaps = [later - earlier for earlier, later in zip(runner.started, runner.started[1:], strict=False)]
        assert gaps == [pytest.approx(gap, abs=1.5) for gap in (11, 21, 41)]
        failed = job(cluster, "bad")
        assert failed is not None and failed["status"]["failed"] == 4
        assert all(p["metadata"].get("finalizers") in (None, []) for p in pods_of(cluster, "bad"))


async def test_a_pod_deleted_before_it_ended_counts_as_failed() -> None:
    # Without a pod failure policy the controller counts a pod being deleted as failed at once
    # (isPodFailed); the tracking finalizer keeps it until then, so it is counted even if it goes.
    async with one_node_cluster() as cluster:
        cluster.create("jobs", job_body("compile", backoffLimit=0), "default", group="batch")
        pod = await cluster.wait_for(lambda: running_pod(cluster, "compile"), timeout=600)
        assert pod is not None
        assert pod["metadata"]["finalizers"] == ["batch.kubernetes.io/job-tracking"]
        cluster.delete("pods", pod["metadata"]["name"], "default")
        await cluster.wait_for(lambda: "Failed" in condition_types(job(cluster, "compile")), timeout=600)
        failed = job(cluster, "compile")
        assert failed is not None and failed["status"]["failed"] == 1
        assert failed["status"]["conditions"][-1]["reason"] == "BackoffLimitExceeded"
        await cluster.wait_for(lambda: not pods_of(cluster, "compile"), timeout=60, what="the deleted pod gone")


@pytest.mark.parametrize(("replacement_policy", "replaced_after"), [(None, 10.0), ("Failed", 30.0)])
async def test_a_deleted_pod_is_replaced_while_it_stops_unless_the_job_waits_for_its_end(
    replacement_policy: str | None, replaced_after: float
) -> None:
    # Without a pod failure policy podReplacementPolicy is TerminatingOrFailed: the pod being deleted
    # counts as failed at once, and the next pod comes the 10 s back-off after the deletion, while the
    # first still stops (a 20 s shutdown here). With Failed, only once it has ended: 20 s + 10 s.
    profile = dataclasses.replace(PROFILE, shutdown_s=20.0)
    nodes = [NodeGroup("small", "inf2.xlarge", count=1)]
    async with SandboxCluster(node_groups=nodes, cold_start=profile, run_provisioner=False) as cluster:
        spec: dict[str, Any] = {"backoffLimit": 2}
        if replacement_policy is not None:
            spec["podReplacementPolicy"] = replacement_policy
        cluster.create("jobs", job_body("compile", **spec), "default", group="batch")
        pod = await cluster.wait_for(lambda: running_pod(cluster, "compile"), timeout=600)
        assert pod is not None
        name = pod["metadata"]["name"]
        cluster.delete("pods", name, "default")
        deleted_at = cluster.clock.monotonic()

        def replacement() -> dict[str, Any] | None:
            return next((p for p in pods_of(cluster, "compile") if p["metadata"]["name"] != name), None)

        await cluster.wait_for(replacement, timeout=600)
        assert cluster.clock.monotonic() - deleted_at == pytest.approx(replaced_after, abs=1.5)
        assert job_status(cluster, "compile")["failed"] == 1


DISRUPTION_IGNORED = {
    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
}


async def test_an_evicted_pod_is_ignored_by_the_policy_and_replaced_once_it_has_ended() -> None:
    # The operator's compile Jobs: a pod lost to a disruption is run again without using a retry.
    # With a policy the controller waits for the pod's end (the kubelet writes Failed, 143, when its
    # grace is over) before it counts or replaces it, then backs off 10 s.
    async with one_node_cluster() as cluster:
        cluster.create(
            "jobs", job_body("compile", backoffLimit=0, podFailurePolicy=DISRUPTION_IGNORED), "default", group="batch"
        )
        pod = await cluster.wait_for(lambda: running_pod(cluster, "compile"), timeout=600)
        assert pod is not None
        name = pod["metadata"]["name"]
        mark_evicted(cluster.store, pod)
        cluster.delete("pods", name, "default")
        evicted_at = cluster.clock.monotonic()
        terminating = await cluster.wait_for(lambda: job_status(cluster, "compile").get("terminating") == 1, timeout=10)
        assert terminating and len(pods_of(cluster, "compile")) == 1  # not replaced while it stops

        def replacement() -> dict[str, Any] | None:
            return next((p for p in pods_of(cluster, "compile") if p["metadata"]["name"] != name), None)

        await cluster.wait_for(replacement, timeout=600)
        # shutdown 1 s, then the 10 s back-off
        assert cluster.clock.monotonic() - evicted_at == pytest.approx(11, abs=1.5)
        status = (job(cluster, "compile") or {})["status"]
        assert (status["failed"], status["active"], status["terminating"]) == (0, 1, 0)
        assert "Failed" not in condition_types(job(cluster, "compile"))
        assert cluster.get("pods", name, "default") is None  # counted, let go, gone


async def test_a_pod_failure_policy_fails_the_job_on_a_matching_exit_code_and_counts_the_rest() -> None:
    rules = [
        {"action": "FailJob", "onExitCodes": {"containerName": "compile", "operator": "In", "values": [42]}},
        {"action": "Ignore", "onExitCodes": {"operator": "NotIn", "values": [3, 42]}},
        {"action": "Count", "onExitCodes": {"operator": "In", "values": [3]}},
    ]
    async with one_node_cluster() as cluster:
        runner = FailingRunner.install(cluster, exit_code=3)
        spec: dict[str, Any] = {"backoffLimit": 6, "podFailurePolicy": {"rules": rules}}
        cluster.create("jobs", job_body("compile", **spec), "default", group="batch")
        await cluster.wait_for(
            lambda: (job(cluster, "compile") or {}).get("status", {}).get("failed") == 1, timeout=600
        )
        runner.exit_code = 7  # ignored: not counted, run again
        await cluster.wait_for(lambda: len(runner.started) == 3, timeout=600)
        assert (job(cluster, "compile") or {})["status"]["failed"] == 1
        runner.exit_code = 42
        await cluster.wait_for(lambda: "Failed" in condition_types(job(cluster, "compile")), timeout=600)
        failed = job(cluster, "compile")
        assert failed is not None and failed["status"]["failed"] == 2
        last = max(
            pods_of(cluster, "compile"), key=lambda p: p["metadata"]["creationTimestamp"] + p["metadata"]["name"]
        )
        conditions = {c["type"]: c for c in failed["status"]["conditions"]}
        assert conditions["Failed"]["reason"] == "PodFailurePolicy"
        assert conditions["Failed"]["message"] == (
            f"Container compile for pod default/{last['metadata']['name']} failed with exit code 42 "
            "matching FailJob rule at index 0"
        )
        assert len(runner.started) == 4  # no retry after the FailJob rule matched


async def test_a_deleted_jobs_running_pod_is_let_go() -> None:
    # The Job controller lets go of the pods of a Job that is gone: its finalizer must not keep them.
    async with one_node_cluster() as cluster:
        cluster.create("jobs", job_body("compile", podFailurePolicy=DISRUPTION_IGNORED), "default", group="batch")
        pod = await cluster.wait_for(lambda: running_pod(cluster, "compile"), timeout=600)
        assert pod is not None and pod["metadata"]["finalizers"] == ["batch.kubernetes.io/job-tracking"]
        cluster.delete("jobs", "compile", "default", group="batch", propagation="Background")
        deleted_at = cluster.clock.monotonic()
        await cluster.wait_for(lambda: not cluster.list("pods", "default"), timeout=60, what="the job's pod gone")
        # Gone once its container stopped (PROFILE's 1 s shutdown): the finalizer held it no longer.
        assert cluster.clock.monotonic() - deleted_at == pytest.approx(1, abs=0.5)
        assert job(cluster, "compile") is None


async def test_an_unscheduled_pod_deleted_is_failed_as_the_pod_gc_does_and_counted() -> None:
    # No node fits (no provisioner): the pod stays Pending. Deleted, only the tracking finalizer keeps
    # it; the pod GC marks it Failed, and with a policy that is when the controller counts it.
    async with one_node_cluster() as cluster:
        body = job_body("huge", backoffLimit=0, podFailurePolicy=DISRUPTION_IGNORED)
        body["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "999"}}
        cluster.create("jobs", body, "default", group="batch")
        (pod,) = await cluster.wait_for(lambda: pods_of(cluster, "huge"), timeout=60)
        cluster.delete("pods", pod["metadata"]["name"], "default")
        await cluster.wait_for(lambda: "Failed" in condition_types(job(cluster, "huge")), timeout=60)
        assert (job(cluster, "huge") or {})["status"]["failed"] == 1
        await cluster.wait_for(lambda: not pods_of(cluster, "huge"), timeout=60, what="the pod let go")


async def test_the_pod_carries_the_templates_labels_and_annotations_beside_the_jobs_own() -> None:
    async with one_node_cluster() as cluster:
        body = job_body("compile")
        body["spec"]["template"]["metadata"]["annotations"] = {"example.com/request": "r1"}
        created = cluster.create("jobs", body, "default", group="batch")
        (pod,) = await cluster.wait_for(lambda: pods_of(cluster, "compile"), timeout=60)
        labels = pod["metadata"]["labels"]
        assert labels["app"] == "compile"  # the template's
        assert labels["controller-uid"] == created["metadata"]["uid"]
        assert pod["metadata"]["annotations"] == {"example.com/request": "r1"}
