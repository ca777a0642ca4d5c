"""Jobs in the sandbox: the job controller, run-to-completion pods, a real command via
SubprocessRunner, backoff limits and TTL (under looptime)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from neuronfleet.sandbox import ColdStartProfile, NodeGroup, SandboxCluster
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
    async with SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=1)], cold_start=PROFILE, run_provisioner=False
    ) as cluster:
        cluster.create("jobs", job_body("compile", ttlSecondsAfterFinished=300), "default", group="batch")
        start = cluster.clock.monotonic()
        await cluster.wait_for(lambda: "Complete" in condition_types(job(cluster, "compile")), timeout=600)
        # pull 10 s + start 1 s + run 120 s
        assert cluster.clock.monotonic() - start == pytest.approx(131, abs=2)
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
        await cluster.wait_for(lambda: not cluster.list("pods", "default"), timeout=10, what="the job's pods GC'd")


async def test_a_job_past_its_active_deadline_fails_and_its_pod_goes() -> None:
    # Made once the cluster has run a while: the deadline counts from the Job's start, not from the
    # clock's zero.
    async with SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=1)], cold_start=PROFILE, run_provisioner=False
    ) as cluster:
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
    async with SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=1)], cold_start=PROFILE, run_provisioner=False
    ) as cluster:
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
    async with SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=1)], cold_start=PROFILE, run_provisioner=False
    ) as cluster:
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
    async with SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=1)], cold_start=PROFILE, run_provisioner=False
    ) as cluster:
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
    async with SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=1)], cold_start=PROFILE, run_provisioner=False
    ) as cluster:
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
