"""Builders: pods, placeholders, Service, PDB and PriorityClasses, checked against Kubernetes' schemas."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import kubernetes_validate
import pytest
import yaml

from neuronfleet.api.v1alpha1 import DEFAULT_IMAGE, EnvVar, InferenceDeployment, RuntimeSpec
from neuronfleet.kube.builders import (
    PLACEHOLDER_PRIORITY,
    BuilderConfig,
    build_pdb,
    build_placeholder_pod,
    build_pod,
    build_priority_classes,
    build_service,
    owner_reference,
    pod_template_hash,
    relabel_patch,
)
from neuronfleet.kube.jobs import ANNOTATION_REPUBLISHES, LABEL_COMPILE_REQUEST, build_compile_job, compile_job_name
from neuronfleet.kube.observe import observe_compile_jobs
from neuronfleet.planning.admission import OperatorAccount, own_account_problem, workload_account
from neuronfleet.planning.compile import DanglingRecord, StoredArtifact, compile_request
from neuronfleet.planning.fleet import CreatePod, FleetTarget, Relabel, plan_fleet
from neuronfleet.planning.labels import ArtifactRevision, FleetRevision
from neuronfleet.planning.placement import Candidate, plan_for_spec

KUBERNETES_VERSION = "1.34"
REPO = Path(__file__).resolve().parents[2]
ARTIFACT = ArtifactRevision("bbbbbbbbbb", "s3://artifacts/llama/bbbbbbbbbb/")


def load(name: str) -> InferenceDeployment:
    dep = InferenceDeployment.model_validate(yaml.safe_load((REPO / "examples" / name).read_text()))
    dep.metadata.uid = "0f6c3f5e-1111-2222-3333-444455556666"
    return dep


def chosen(dep: InferenceDeployment, replicas: int = 2) -> Candidate:
    plan = plan_for_spec(dep.spec, replicas)
    assert plan.chosen is not None
    return plan.chosen


def validate(obj: dict[str, Any]) -> None:
    """Strict schema validation: unknown fields and wrong types fail, as on a real API server."""
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {error.message} at {list(error.path)}")


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """The Pod Security Standards "restricted" checks (kubernetes.io/docs/concepts/security/pod-security-standards)."""
    spec = pod["spec"]
    pod_security = spec.get("securityContext", {})
    problems = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            problems.append(field)
    allowed_volumes = {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
    for volume in spec.get("volumes", []):
        if not (set(volume) - {"name"}) <= allowed_volumes:
            problems.append(f"volume {volume['name']}")
    for container in spec["containers"]:
        security = container.get("securityContext", {})
        if security.get("privileged"):
            problems.append("privileged")
        if security.get("allowPrivilegeEscalation") is not False:
            problems.append("allowPrivilegeEscalation")
        if "ALL" not in security.get("capabilities", {}).get("drop", []):
            problems.append("capabilities.drop ALL")
        if set(security.get("capabilities", {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append("capabilities.add")
        if not (security.get("runAsNonRoot") or pod_security.get("runAsNonRoot")):
            problems.append("runAsNonRoot")
        if security.get("runAsUser", pod_security.get("runAsUser")) == 0:
            problems.append("runAsUser 0")
        seccomp = security.get("seccompProfile") or pod_security.get("seccompProfile") or {}
        if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
            problems.append("seccompProfile")
        if container.get("ports") and any(p.get("hostPort") for p in container["ports"]):
            problems.append("hostPort")
    return problems


@pytest.mark.parametrize("example", ["bert-embeddings.yaml", "llama2-7b-chat.yaml", "batch-classifier-fixed.yaml"])
def test_replica_pod_is_valid_and_restricted(example: str) -> None:
    dep = load(example)
    candidate = chosen(dep)
    revision = FleetRevision(ARTIFACT, pod_template_hash(dep, candidate))
    roles: tuple[Literal["active", "warm"], ...] = ("active", "warm")
    for role in roles:
        pod = build_pod(dep, candidate, revision, role, "pod-0")
        validate(pod)
        assert restricted_violations(pod) == []
    placeholder = build_placeholder_pod(dep, candidate, revision.template, "ph-0")
    validate(placeholder)
    assert restricted_violations(placeholder) == []


def test_replica_pod_runs_the_server_with_probes_and_neuron_resources() -> None:
    dep = load("llama2-7b-chat.yaml")
    candidate = chosen(dep, 3)
    pod = build_pod(dep, candidate, FleetRevision(ARTIFACT, "tttttttttt"), "active", "llama-0")
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["neuronserve"]
    args = container["args"]
    assert args[:3] == ["serve", "--artifact", ARTIFACT.uri]
    assert args[args.index("--port") + 1] == "8080"
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800
    resources = container["resources"]
    assert resources["requests"]["aws.amazon.com/neuroncore"] == "8"
    assert resources["limits"]["aws.amazon.com/neuroncore"] == "8"
    assert "aws.amazon.com/neuron" not in resources["requests"]
    assert resources["requests"]["cpu"] == f"{candidate.cpu_millis_per_replica}m"
    assert resources["limits"]["memory"] == resources["requests"]["memory"] == f"{candidate.memory_mib_per_replica}Mi"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 300


def test_replica_pod_is_placed_on_the_chosen_type_in_the_allowed_zones() -> None:
    dep = load("llama2-7b-chat.yaml")
    candidate = chosen(dep, 3)
    spec = build_pod(dep, candidate, FleetRevision(ARTIFACT, "t"), "active", "llama-0")["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    expressions = {e["key"]: e["values"] for e in terms[0]["matchExpressions"]}
    assert expressions["node.kubernetes.io/instance-type"] == [candidate.name] == ["inf2.48xlarge"]
    assert expressions["topology.kubernetes.io/zone"] == ["us-east-1a", "us-east-1b"]
    assert {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    spread = spec["topologySpreadConstraints"][0]
    assert (spread["topologyKey"], spread["whenUnsatisfiable"]) == ("topology.kubernetes.io/zone", "ScheduleAnyway")
    assert spread["labelSelector"]["matchLabels"] == {"serving.neuronfleet.dev/deployment": "llama2-7b-chat"}
    assert spec["schedulerName"] == "my-scheduler"


def test_node_group_labels_and_operator_default_scheduler() -> None:
    dep = load("bert-embeddings.yaml")
    spec = build_pod(dep, chosen(dep), FleetRevision(ARTIFACT, "t"), "active", "bert-0")["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["inf2-serving"]} in terms[0][
        "matchExpressions"
    ]
    assert "schedulerName" not in spec
    configured = build_pod(
        dep,
        chosen(dep),
        FleetRevision(ARTIFACT, "t"),
        "active",
        "bert-0",
        BuilderConfig(default_scheduler_name="neuron"),
    )
    assert configured["spec"]["schedulerName"] == "neuron"


def test_labels_owner_and_priority_per_role() -> None:
    dep = load("bert-embeddings.yaml")
    candidate = chosen(dep)
    warm = build_pod(dep, candidate, FleetRevision(ARTIFACT, "tmpl"), "warm", "bert-0")
    labels = warm["metadata"]["labels"]
    assert labels["serving.neuronfleet.dev/deployment"] == dep.name
    assert labels["serving.neuronfleet.dev/role"] == "warm"
    assert labels["serving.neuronfleet.dev/revision"] == ARTIFACT.id
    assert labels["serving.neuronfleet.dev/template-hash"] == "tmpl"
    assert warm["metadata"]["ownerReferences"] == [owner_reference(dep)]
    assert owner_reference(dep)["controller"] is True and owner_reference(dep)["blockOwnerDeletion"] is True
    assert warm["metadata"]["namespace"] == dep.metadata.namespace
    assert warm["spec"]["priorityClassName"] == "neuronfleet-warm"
    active = build_pod(dep, candidate, FleetRevision(ARTIFACT, "tmpl"), "active", "bert-0")
    assert active["spec"]["priorityClassName"] == "neuronfleet-active"
    # app.kubernetes.io/component tells serving pods from the placeholders that hold room for them
    # (kubectl get pods -l app.kubernetes.io/component=server lists the model servers).
    placeholder = build_placeholder_pod(dep, candidate, "tmpl", "bert-ph-0")
    for pod, component in ((warm, "server"), (active, "server"), (placeholder, "placeholder")):
        assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == component
        assert pod["metadata"]["labels"]["app.kubernetes.io/instance"] == dep.name


def test_placeholder_holds_the_same_neuron_capacity_at_low_priority() -> None:
    dep = load("llama2-7b-chat.yaml")
    candidate = chosen(dep)
    replica = build_pod(dep, candidate, FleetRevision(ARTIFACT, "t"), "active", "llama-0")
    placeholder = build_placeholder_pod(dep, candidate, "t", "llama-ph-0")
    container = placeholder["spec"]["containers"][0]
    # The server's image, sleeping: the node has it pulled when a real replica takes the room.
    assert container["image"] == replica["spec"]["containers"][0]["image"]
    assert container["command"] == ["sleep", "infinity"]
    assert container["resources"] == replica["spec"]["containers"][0]["resources"]
    assert placeholder["spec"]["affinity"] == replica["spec"]["affinity"]
    assert placeholder["spec"]["tolerations"] == replica["spec"]["tolerations"]
    assert placeholder["spec"]["priorityClassName"] == "neuronfleet-placeholder"
    assert placeholder["metadata"]["labels"]["serving.neuronfleet.dev/role"] == "placeholder"
    assert "serving.neuronfleet.dev/revision" not in placeholder["metadata"]["labels"]


def test_a_placeholder_runs_as_the_serving_pods_account_without_its_token() -> None:
    """It runs the spec's image: as the serving pods' account (the spec's, else the operator's default,
    else the namespace's default, as they would), which the operator's own-account refusal checks,
    never as another account of the namespace; it only sleeps, so no API token is mounted."""
    dep = load("llama2-7b-chat.yaml")
    candidate = chosen(dep)
    dep.metadata.namespace = "neuronfleet-system"
    for spec_account, default, expected in (
        ("my-serving", "nf-serving", "my-serving"),
        (None, "nf-serving", "nf-serving"),
        (None, None, None),
    ):
        dep.spec.runtime.service_account_name = spec_account
        config = BuilderConfig(serving_service_account=default)
        replica = build_pod(dep, candidate, FleetRevision(ARTIFACT, "t"), "active", "llama-0", config)
        placeholder = build_placeholder_pod(dep, candidate, "t", "llama-ph-0", config)
        assert placeholder["spec"].get("serviceAccountName") == replica["spec"].get("serviceAccountName") == expected
        assert placeholder["spec"]["automountServiceAccountToken"] is False
    # The reviewer's case: the operator runs as the namespace's default; the spec names accounts of its
    # own for its compile Job and serving pods, and its placeholders no longer run as the operator.
    dep.spec.compile.service_account_name = "my-compile"
    dep.spec.runtime.service_account_name = "my-serving"
    placeholder = build_placeholder_pod(dep, candidate, "t", "llama-ph-0")
    operator = OperatorAccount("neuronfleet-system", "default")
    accounts = (workload_account("compile", "my-compile", None), workload_account("serving", "my-serving", None))
    assert own_account_problem("neuronfleet-system", accounts, operator) is None
    assert placeholder["spec"]["serviceAccountName"] == "my-serving"


def test_template_hash_follows_the_pod_but_not_the_artifact() -> None:
    dep = load("bert-embeddings.yaml")
    candidate = chosen(dep)
    base = pod_template_hash(dep, candidate)
    assert pod_template_hash(dep, candidate) == base
    new_image = dep.model_copy(deep=True)
    new_image.spec.runtime.image = "ghcr.io/neuronfleet/neuronserve:0.2.0"
    assert pod_template_hash(new_image, candidate) != base
    single_chip = dep.spec.model_copy(deep=True)
    single_chip.placement.instance_types = ["inf2.8xlarge"]
    other_type = plan_for_spec(single_chip, 1).chosen
    assert other_type is not None
    assert pod_template_hash(dep, other_type) != base


def test_service_pdb_and_priority_classes() -> None:
    dep = load("bert-embeddings.yaml")
    service = build_service(dep)
    pdb = build_pdb(dep, desired_active=3)
    for obj in (service, pdb, *build_priority_classes()):
        validate(obj)
    active = {"serving.neuronfleet.dev/deployment": dep.name, "serving.neuronfleet.dev/role": "active"}
    assert service["spec"]["selector"] == active
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert pdb["spec"]["selector"]["matchLabels"] == active
    # An integer minAvailable: the disruption controller then counts the selected pods. With
    # maxUnavailable it counts the controller's /scale replicas, unset in Auto mode: no eviction.
    assert (pdb["spec"]["minAvailable"], "maxUnavailable" in pdb["spec"]) == (2, False)
    assert build_pdb(dep, desired_active=0)["spec"]["minAvailable"] == 0
    classes = {c["metadata"]["name"]: c for c in build_priority_classes()}
    assert classes["neuronfleet-warm"]["value"] == classes["neuronfleet-active"]["value"]
    # Cluster-autoscaler ignores pods below -10: placeholders must stay at or above it.
    assert -10 <= classes["neuronfleet-placeholder"]["value"] == PLACEHOLDER_PRIORITY < 0
    assert classes["neuronfleet-placeholder"]["preemptionPolicy"] == "Never"


def test_relabel_patch_writes_role_and_drain_start_together() -> None:
    moment = datetime(2026, 11, 30, 12, 0, 5, tzinfo=UTC)
    patch = relabel_patch(Relabel("p", "draining", "active", "scale-down", moment))
    assert patch == {
        "metadata": {
            "labels": {"serving.neuronfleet.dev/role": "draining"},
            "annotations": {
                "serving.neuronfleet.dev/kept-since": None,
                "serving.neuronfleet.dev/drain-started-at": "2026-11-30T12:00:05Z",
            },
        }
    }
    # Any relabel but the one that stamps the old standby removes the stamp.
    assert relabel_patch(Relabel("p", "active", "warm", "promote")) == role_patch("active", kept=None)
    assert relabel_patch(Relabel("p", "warm", "warm", "kept", kept_since=moment)) == role_patch(
        "warm", kept="2026-11-30T12:00:05Z"
    )
    # Each time is read only for its role: a drain start given with another role writes no drain
    # annotation, a kept-since given with another role no stamp.
    demoted = Relabel("p", "warm", "active", "demote", drain_started_at=moment)
    assert relabel_patch(demoted) == role_patch("warm", kept=None)
    assert relabel_patch(Relabel("p", "active", "warm", "promote", kept_since=moment)) == role_patch(
        "active", kept=None
    )


def role_patch(role: str, *, kept: str | None) -> dict[str, Any]:
    """The merge patch of a relabel to ``role`` that writes no drain start."""
    return {
        "metadata": {
            "labels": {"serving.neuronfleet.dev/role": role},
            "annotations": {"serving.neuronfleet.dev/kept-since": kept},
        }
    }


def test_owner_reference_needs_the_uid() -> None:
    dep = load("bert-embeddings.yaml")
    dep.metadata.uid = None
    with pytest.raises(ValueError, match=r"no metadata\.uid"):
        owner_reference(dep)


def test_the_runtimes_own_defaults_are_the_crds() -> None:
    # `neuronserve serve` started by hand (or by an older operator that passed fewer flags) serves as
    # an InferenceDeployment that sets no runtime section does.
    from neuronserve.cli import build_parser

    crd = RuntimeSpec()
    args = build_parser().parse_args(["serve"])
    assert (args.port, args.max_queue, args.max_batch_delay_ms) == (crd.port, crd.max_queue, crd.max_batch_delay_ms)


def test_server_args_are_accepted_by_the_runtimes_own_parser() -> None:
    from neuronserve.cli import build_parser

    dep = load("llama2-7b-chat.yaml")
    pod = build_pod(dep, chosen(dep), FleetRevision(ARTIFACT, "t"), "active", "llama-0")
    container = pod["spec"]["containers"][0]
    args = build_parser().parse_args(container["args"])
    assert (args.command, args.artifact, args.port) == ("serve", ARTIFACT.uri, 8080)
    assert (args.max_batch_delay_ms, args.max_queue) == (20.0, 64)
    # The runtime finishes its work before the kubelet's SIGKILL at terminationGracePeriodSeconds.
    assert args.grace_seconds < pod["spec"]["terminationGracePeriodSeconds"]
    assert args.cache_dir in {mount["mountPath"] for mount in container["volumeMounts"]}
    # Served under this deployment's name, whatever name the shared artifact was compiled with.
    assert args.model_name == dep.served_model_name


def test_a_replica_is_pinned_to_the_recorded_manifest_sha256(monkeypatch: pytest.MonkeyPatch) -> None:
    from neuronserve.cli import build_parser

    dep = load("bert-embeddings.yaml")
    dep.spec.runtime.env = [EnvVar(name="NEURONSERVE_MANIFEST_SHA256", value="0" * 64)]  # cannot unpin it
    candidate = chosen(dep)
    pinned = ArtifactRevision(ARTIFACT.id, ARTIFACT.uri, "e" * 64)
    pod = build_pod(dep, candidate, FleetRevision(pinned, "t"), "warm", "bert-0")
    validate(pod)
    container = pod["spec"]["containers"][0]
    # In the environment, not the arguments: a model server older than the pin (a user-built Neuron
    # image) refuses an unknown argument, and every new pod of the upgrade's roll crash-looped.
    assert not any("manifest" in arg for arg in container["args"])
    env = {variable["name"]: variable.get("value") for variable in container["env"]}  # the last one wins
    for name, value in env.items():
        if value is not None:
            monkeypatch.setenv(name, value)
    args = build_parser().parse_args(container["args"])
    assert (args.artifact, args.manifest_sha256) == (pinned.uri, pinned.sha256)
    monkeypatch.delenv("NEURONSERVE_MANIFEST_SHA256")
    assert pod["metadata"]["annotations"]["serving.neuronfleet.dev/manifest-sha256"] == pinned.sha256
    # Its refusal (the server's last log line) becomes the container's termination message.
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    # No sha256 recorded (a status written before it was): not pinned, as before.
    unpinned = build_pod(dep, candidate, FleetRevision(ARTIFACT, "t"), "warm", "bert-0")
    pins = [v["value"] for v in unpinned["spec"]["containers"][0]["env"] if v["name"] == "NEURONSERVE_MANIFEST_SHA256"]
    assert pins == ["0" * 64]  # the spec's own variable only
    assert "serving.neuronfleet.dev/manifest-sha256" not in unpinned["metadata"]["annotations"]
    # The pin is the artifact's, like its URI: not the template's (placeholders do not follow it).
    other = build_pod(dep, candidate, FleetRevision(replace(pinned, sha256="f" * 64), "t"), "warm", "bert-0")
    assert {k: v for k, v in other["spec"].items() if k != "containers"} == {
        k: v for k, v in pod["spec"].items() if k != "containers"
    }
    assert pod_template_hash(dep, candidate) == pod_template_hash(dep, candidate)


def test_long_deployment_names_still_make_valid_objects() -> None:
    dep = load("bert-embeddings.yaml")
    dep.metadata.name = "a-very-long-inference-deployment-name-" + "x" * 100
    candidate = chosen(dep)
    template = pod_template_hash(dep, candidate)
    create = plan_fleet(dep.name, FleetTarget(template, ARTIFACT, 1), [], datetime(2026, 11, 30, tzinfo=UTC)).actions[0]
    assert isinstance(create, CreatePod)
    pod = build_pod(dep, candidate, create.revision, "active", create.name)
    service = build_service(dep)
    for obj in (pod, service, build_pdb(dep, 1)):
        validate(obj)
    assert len(pod["metadata"]["name"]) <= 63 and len(service["metadata"]["name"]) <= 63
    assert all(len(value) <= 63 for value in pod["metadata"]["labels"].values())
    # The Service still selects the pod once it is active.
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()


def test_a_compile_job_name_of_63_characters_is_kept_readable_and_a_longer_one_is_shortened() -> None:
    # The Job controller labels its pods with the Job's name (batch.kubernetes.io/job-name), a label
    # value of at most 63 characters: a name that fits is the readable one, a longer one is cut and
    # told apart by a hash of the whole deployment name.
    request = compile_request(load("bert-embeddings.yaml").spec, "/store", "fp")
    suffix = f"compile-{request.key[:10]}"
    fits = "d" * (63 - len(suffix) - 1)
    assert compile_job_name(fits, request) == f"{fits}-{suffix}"
    assert len(compile_job_name(fits, request)) == 63
    longer = compile_job_name(fits + "e", request)
    assert len(longer) <= 63 and longer.endswith(suffix) and longer != compile_job_name(fits + "f", request)


@pytest.mark.parametrize("example", ["bert-embeddings.yaml", "llama2-7b-chat.yaml"])
def test_compile_job_is_valid_restricted_and_bounded_in_memory(example: str) -> None:
    dep = load(example)
    dep.spec.compile.memory = "24Gi"
    request = compile_request(dep.spec, "s3://artifacts", "fingerprint")
    job = build_compile_job(dep, request)
    validate(job)
    pod = {"metadata": job["spec"]["template"]["metadata"], **job["spec"]["template"]}
    assert restricted_violations(pod) == []
    (container,) = job["spec"]["template"]["spec"]["containers"]
    # Memory bounded at the request: an oversized compile is OOM-killed alone, not its node's pods.
    # CPU unbounded unless the spec says (neuronx-cc may use an idle node's spare cores).
    assert container["resources"]["limits"] == {"memory": "24Gi", "ephemeral-storage": "64Gi"}
    assert container["resources"]["requests"] == {
        "cpu": dep.spec.compile.cpu,
        "memory": "24Gi",
        "ephemeral-storage": "8Gi",
    }
    assert job["metadata"]["labels"][LABEL_COMPILE_REQUEST] == request.key


class _Jobs:
    """A KubeApi that lists these Jobs (all the compile-Job reads need for a finished Job)."""

    def __init__(self, *jobs: dict[str, Any]) -> None:
        self.jobs = list(jobs)

    async def list_jobs(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return self.jobs


async def test_a_job_compiling_a_dangling_record_again_is_marked_and_read_back_so() -> None:
    # The mark is what stops a loop: a republish that succeeds and leaves the record dangling is
    # reported, not replaced again (planning.compile.decide_compile).
    dep = load("bert-embeddings.yaml")
    request = compile_request(dep.spec, "s3://artifacts", "fingerprint")
    gone = DanglingRecord(StoredArtifact("c" * 64, "s3://artifacts/cccc", "d" * 64, "cpu"), None)
    first, again = build_compile_job(dep, request), build_compile_job(dep, request, republish=gone)
    assert ANNOTATION_REPUBLISHES not in first["metadata"]["annotations"]
    assert again["metadata"]["annotations"][ANNOTATION_REPUBLISHES] == "s3://artifacts/cccc"
    validate(again)
    for job, marked in ((first, False), (again, True)):
        job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
        seen = await observe_compile_jobs(_Jobs(job), "ns", dep.name, request)  # type: ignore[arg-type]
        assert (seen.phase, seen.republishes) == ("succeeded", marked)


def test_a_spec_without_images_takes_the_operators_model_server_image() -> None:
    dep = load("bert-embeddings.yaml")
    dep.spec.runtime.image = dep.spec.compile.image = None
    candidate = chosen(dep)
    config = BuilderConfig(model_server_image="registry.example/neuronserve:1.2-neuron")

    def images(config: BuilderConfig) -> list[str]:
        # The compile Job runs its request's image, which the operator makes with its own.
        request = compile_request(dep.spec, "s3://artifacts", "fingerprint", config.model_server_image)
        pods = [
            build_pod(dep, candidate, FleetRevision(ARTIFACT, "t"), "active", "p-0", config),
            build_placeholder_pod(dep, candidate, "t", "ph-0", config),
            build_compile_job(dep, request, config)["spec"]["template"],
        ]
        return [pod["spec"]["containers"][0]["image"] for pod in pods]

    assert images(config) == ["registry.example/neuronserve:1.2-neuron"] * 3
    assert images(BuilderConfig()) == [DEFAULT_IMAGE] * 3
    # A new default image is a new pod template: the fleet rolls to it, as for a spec's new image.
    assert pod_template_hash(dep, candidate, config) != pod_template_hash(dep, candidate)
    # A spec's own image wins.
    dep.spec.runtime.image = dep.spec.compile.image = "registry.example/neuronserve:custom"
    assert images(config) == ["registry.example/neuronserve:custom"] * 3


def _server_arg(pod: dict[str, Any], flag: str) -> str:
    args: list[str] = pod["spec"]["containers"][0]["args"]
    return args[args.index(flag) + 1]


def test_the_drain_delay_is_the_specs_and_changing_it_replaces_the_pods() -> None:
    """Behind a load balancer whose deregistration lags (ALB/NLB IP targets) the pod must keep serving
    new requests for longer than a fixed 5 s: the server's --drain-delay-seconds is the spec's."""
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["spec"].setdefault("runtime", {}).update({"terminationGracePeriodSeconds": 120, "drainDelaySeconds": 30})
    dep = InferenceDeployment.model_validate(doc)
    dep.metadata.uid = "0f6c3f5e-1111-2222-3333-444455556666"
    candidate = chosen(dep)
    pod = build_pod(dep, candidate, FleetRevision(ARTIFACT, "t"), "active", "p")
    assert _server_arg(pod, "--drain-delay-seconds") == "30"
    assert _server_arg(pod, "--grace-seconds") == "115"
    default = load("bert-embeddings.yaml")
    default_pod = build_pod(default, candidate, FleetRevision(ARTIFACT, "t"), "active", "p")
    assert _server_arg(default_pod, "--drain-delay-seconds") == "5"
    # A runtime flag as the others: a change rolls the pods warm-then-swap (one template hash for one pod spec).
    before = pod_template_hash(dep, candidate)
    dep.spec.runtime.drain_delay_seconds = 10
    assert pod_template_hash(dep, candidate) != before


def test_the_service_keeps_its_port_when_the_runtime_port_changes() -> None:
    """The pods roll warm-then-swap to a new spec.runtime.port; the Service's port is what its clients
    use, so it stays as it was created, and its targetPort (the port's name) follows the pods."""
    dep = load("bert-embeddings.yaml")
    created = build_service(dep)
    assert created["spec"]["ports"][0]["port"] == dep.spec.runtime.port == 8080
    dep.spec.runtime.port = 9090
    kept = build_service(dep, created)
    validate(kept)
    assert [(p["port"], p["targetPort"]) for p in kept["spec"]["ports"]] == [(8080, "http")]
    # A Service made now (none there, or one whose port entry was removed by hand) takes the spec's port.
    assert build_service(dep)["spec"]["ports"][0]["port"] == 9090
    assert build_service(dep, {**created, "spec": {**created["spec"], "ports": []}})["spec"]["ports"][0]["port"] == 9090
