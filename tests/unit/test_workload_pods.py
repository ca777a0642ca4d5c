"""What the operator's pods may do beyond serving: their ServiceAccounts, and what the settings that
choose them change (the pod template, the compile Job's spec key)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronfleet import run_command
from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.cli import main
from neuronfleet.kube.builders import BuilderConfig, build_placeholder_pod, build_pod, pod_template_hash
from neuronfleet.kube.jobs import ANNOTATION_JOB_SPEC, build_compile_job, wanted_job_spec
from neuronfleet.planning.compile import CompileObservation, compile_request, decide_compile, job_spec_key
from neuronfleet.planning.labels import ArtifactRevision, FleetRevision
from neuronfleet.planning.placement import Candidate, plan_for_spec
from neuronfleet.reconcile import OperatorSettings

REPO = Path(__file__).resolve().parents[2]
ARTIFACT = ArtifactRevision("bbbbbbbbbb", "s3://artifacts/bert/bbbbbbbbbb/")


def bert() -> InferenceDeployment:
    dep = InferenceDeployment.model_validate(yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text()))
    dep.metadata.uid = "0f6c3f5e-1111-2222-3333-444455556666"
    return dep


def chosen(dep: InferenceDeployment) -> Candidate:
    plan = plan_for_spec(dep.spec, 2)
    assert plan.chosen is not None
    return plan.chosen


def pods(dep: InferenceDeployment, config: BuilderConfig) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The pod specs of a serving pod, a placeholder and the compile Job."""
    candidate = chosen(dep)
    serving = build_pod(dep, candidate, FleetRevision(ARTIFACT, "t"), "active", "p-0", config)
    placeholder = build_placeholder_pod(dep, candidate, "t", "ph-0", config)
    job = build_compile_job(dep, compile_request(dep.spec, "s3://artifacts", "fp"), config)
    return serving["spec"], placeholder["spec"], job["spec"]["template"]["spec"]


# ------------------------------------------------------------------------------ ServiceAccounts


def test_compile_jobs_and_serving_pods_run_as_accounts_of_their_own() -> None:
    # The compile role writes the artifact store; serving pods only read it. With both on the
    # namespace's default account, every serving pod (and any pod there) could overwrite artifacts.
    dep = bert()
    config = BuilderConfig(compile_service_account="nf-compile", serving_service_account="nf-serving")
    serving, placeholder, job = pods(dep, config)
    assert (serving["serviceAccountName"], job["serviceAccountName"]) == ("nf-serving", "nf-compile")
    # Placeholders run the spec's image: as the serving pods' account (which the own-account refusal
    # checks), not the namespace's default, which may be the operator's own.
    assert placeholder["serviceAccountName"] == "nf-serving"
    # A spec's own account wins over the operator's.
    dep.spec.compile.service_account_name = "bert-compile"
    dep.spec.runtime.service_account_name = "bert-serving"
    serving, placeholder, job = pods(dep, config)
    assert (serving["serviceAccountName"], job["serviceAccountName"]) == ("bert-serving", "bert-compile")
    assert placeholder["serviceAccountName"] == "bert-serving"
    # The pods still mount no Kubernetes API token (IRSA and Pod Identity inject their own).
    assert serving["automountServiceAccountToken"] is False and placeholder["automountServiceAccountToken"] is False


def test_without_accounts_the_pods_are_as_before() -> None:
    # No account set anywhere: no serviceAccountName (the namespace's default), so the pod template
    # and its hash are what they were: an upgrade rolls no pod for it.
    dep = bert()
    serving, placeholder, job = pods(dep, BuilderConfig())
    assert not {"serviceAccountName"} & (set(serving) | set(placeholder) | set(job))
    candidate = chosen(dep)
    named = dep.model_copy(deep=True)
    named.spec.runtime.service_account_name = "bert-serving"
    assert pod_template_hash(named, candidate) != pod_template_hash(dep, candidate)
    # The compile account is not part of the serving pods.
    compile_only = dep.model_copy(deep=True)
    compile_only.spec.compile.service_account_name = "bert-compile"
    assert pod_template_hash(compile_only, candidate) == pod_template_hash(dep, candidate)


def test_a_compile_refused_by_s3_runs_again_under_another_account() -> None:
    # The Job spec key decides whether a failed Job is replaced: it follows the account, and stays
    # what it was for a spec (and operator) that names none.
    dep = bert()
    assert wanted_job_spec(dep) == job_spec_key(dep.spec)
    request = compile_request(dep.spec, "s3://artifacts", "fp")
    failed = build_compile_job(dep, request)["metadata"]["annotations"][ANNOTATION_JOB_SPEC]
    fixed = dep.model_copy(deep=True)
    fixed.spec.compile.service_account_name = "bert-compile"
    assert wanted_job_spec(fixed) != failed
    by_operator = wanted_job_spec(dep, BuilderConfig(compile_service_account="nf-compile"))
    assert by_operator not in (failed, wanted_job_spec(fixed))
    job = build_compile_job(fixed, request)
    assert job["metadata"]["annotations"][ANNOTATION_JOB_SPEC] == wanted_job_spec(fixed)
    observed = CompileObservation(
        request, None, "failed", "AccessDenied", job_name="j", job_spec=failed, wanted_job_spec=wanted_job_spec(fixed)
    )
    assert decide_compile(observed, None).replace_job
    assert not decide_compile(replace(observed, wanted_job_spec=failed), None).replace_job


@pytest.mark.parametrize("field", ["compile", "runtime"])
def test_account_names_are_checked_as_the_api_server_does(field: str) -> None:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["spec"].setdefault(field, {})["serviceAccountName"] = "Bert_Compile"
    with pytest.raises(ValueError, match="serviceAccountName"):
        InferenceDeployment.model_validate(doc)


def _kubeconfig(path: Path) -> str:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return str(path)


SETTINGS_ENV = ("NEURONFLEET_COMPILE_SERVICE_ACCOUNT", "NEURONFLEET_SERVING_SERVICE_ACCOUNT")


def _run_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *flags: str) -> OperatorSettings:
    seen: list[OperatorSettings] = []

    async def build_context(settings: OperatorSettings, *args: Any, **kwargs: Any) -> Any:
        seen.append(settings)
        raise run_command.RunSetupError("stopped before connecting")

    monkeypatch.setattr(run_command, "build_context", build_context)
    assert main(["run", "--kubeconfig", _kubeconfig(tmp_path / "kubeconfig"), *flags]) == 2
    (settings,) = seen
    return settings


def test_run_takes_the_accounts_from_flags_and_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for name in SETTINGS_ENV:
        monkeypatch.delenv(name, raising=False)
    builder = _run_settings(tmp_path, monkeypatch).builder
    assert (builder.compile_service_account, builder.serving_service_account) == (None, None)
    monkeypatch.setenv("NEURONFLEET_COMPILE_SERVICE_ACCOUNT", "nf-compile")
    monkeypatch.setenv("NEURONFLEET_SERVING_SERVICE_ACCOUNT", "nf-serving")
    builder = _run_settings(tmp_path, monkeypatch).builder
    assert (builder.compile_service_account, builder.serving_service_account) == ("nf-compile", "nf-serving")
    # A flag wins over its variable.
    builder = _run_settings(tmp_path, monkeypatch, "--serving-service-account", "reader").builder
    assert (builder.compile_service_account, builder.serving_service_account) == ("nf-compile", "reader")


def test_run_refuses_an_account_that_is_no_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("NEURONFLEET_COMPILE_SERVICE_ACCOUNT", "Compile SA")
    assert main(["run", "--kubeconfig", _kubeconfig(tmp_path / "kubeconfig")]) == 2
    assert capsys.readouterr().err.startswith(
        "error: --compile-service-account (env NEURONFLEET_COMPILE_SERVICE_ACCOUNT): 'Compile SA' is not a "
        "ServiceAccount name"
    )


# ----------------------------------------------------------------- quotas, LimitRanges and disk


def quota_refusals(pod_spec: dict[str, Any], hard: set[str]) -> list[str]:
    """What a ResourceQuota with these ``hard`` entries refuses of a pod: Kubernetes' quota admission
    requires every container to set each request (``requests.X``) and limit (``limits.X``) the
    quota constrains (ResourceQuota docs: "you must specify requests or limits for those values")."""
    refused = []
    for container in pod_spec["containers"]:
        resources = container.get("resources") or {}
        for entry in sorted(hard):
            kind, _, name = entry.partition(".")
            if name not in (resources.get(kind) or {}):
                refused.append(f"{container['name']}: must specify {entry}")
    return refused


def with_limit_range_default_cpu(pod_spec: dict[str, Any], default_limit_millis: int) -> list[str]:
    """A LimitRange default CPU limit, as the LimitRanger admission applies it (to containers that set
    none), then the validation a request above its limit fails."""
    invalid = []
    for container in pod_spec["containers"]:
        resources = container.get("resources") or {}
        limit = (resources.get("limits") or {}).get("cpu", f"{default_limit_millis}m")
        request = (resources.get("requests") or {}).get("cpu")
        if request is not None and _millis(request) > _millis(limit):
            invalid.append(f"{container['name']}: cpu request {request} above its limit {limit}")
    return invalid


def _millis(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


QUOTA = {"requests.cpu", "limits.cpu", "requests.memory", "limits.memory"}
DISK_QUOTA = {"requests.ephemeral-storage", "limits.ephemeral-storage"}


def test_a_disk_quota_admits_every_pod_and_a_cpu_limit_quota_once_the_spec_sets_one() -> None:
    dep = bert()
    for spec in pods(dep, BuilderConfig()):
        assert quota_refusals(spec, DISK_QUOTA) == []
        # No CPU limit unless asked for: throttling a batching server only adds latency.
        assert quota_refusals(spec, QUOTA) == [f"{spec['containers'][0]['name']}: must specify limits.cpu"]
    dep.spec.runtime.cpu_limit = "2"
    dep.spec.compile.cpu_limit = "4"
    serving, placeholder, job = pods(dep, BuilderConfig())
    for spec in (serving, placeholder, job):
        assert quota_refusals(spec, QUOTA | DISK_QUOTA) == []
    assert serving["containers"][0]["resources"]["limits"]["cpu"] == "2"
    assert placeholder["containers"][0]["resources"] == serving["containers"][0]["resources"]
    assert job["containers"][0]["resources"]["limits"]["cpu"] == "4"


def test_a_limit_range_default_below_the_request_is_overridden_by_the_specs_limit() -> None:
    # Two 1-core replicas on an inf2.xlarge request 1710m each; a LimitRange defaulting the CPU
    # limit to 1 made every pod invalid.
    dep = bert()
    serving, placeholder, _ = pods(dep, BuilderConfig())
    assert serving["containers"][0]["resources"]["requests"]["cpu"] == "1710m"
    assert with_limit_range_default_cpu(serving, 1000) != []
    assert with_limit_range_default_cpu(placeholder, 1000) != []
    dep.spec.runtime.cpu_limit = "1710m"
    for spec in pods(dep, BuilderConfig())[:2]:
        assert with_limit_range_default_cpu(spec, 1000) == []


def test_the_disk_follows_the_emptydirs_and_the_model() -> None:
    dep = bert()
    assert (dep.spec.model.neuron_cores_per_replica, dep.spec.model.hbm_gib) == (1, 2)
    dep.spec.model.hbm_gib = None  # the device memory of one NeuronCore, 16 GiB
    serving, placeholder, job = pods(dep, BuilderConfig())
    resources = serving["containers"][0]["resources"]
    assert (resources["requests"]["ephemeral-storage"], resources["limits"]["ephemeral-storage"]) == ("2Gi", "17Gi")
    volumes = {v["name"]: v["emptyDir"] for v in serving["volumes"]}
    assert volumes == {"tmp": {"sizeLimit": "1Gi"}, "artifact-cache": {"sizeLimit": "16Gi"}}
    # A placeholder holds the disk of the replica that preempts it.
    assert placeholder["containers"][0]["resources"] == resources
    compile_disk = job["containers"][0]["resources"]
    assert (compile_disk["requests"]["ephemeral-storage"], compile_disk["limits"]["ephemeral-storage"]) == (
        "8Gi",
        "64Gi",
    )
    # hbmGiB bounds the artifact (it is loaded whole onto the replica's NeuronCores).
    dep.spec.model.hbm_gib = 2.5
    assert pods(dep, BuilderConfig())[0]["containers"][0]["resources"]["limits"]["ephemeral-storage"] == "4Gi"
    # The spec's quantity is both request and limit, and the cache's bound.
    dep.spec.runtime.ephemeral_storage = "40Gi"
    dep.spec.compile.ephemeral_storage = "100Gi"
    serving, placeholder, job = pods(dep, BuilderConfig())
    resources = serving["containers"][0]["resources"]
    assert (resources["requests"]["ephemeral-storage"], resources["limits"]["ephemeral-storage"]) == ("40Gi", "40Gi")
    assert {v["name"]: v["emptyDir"]["sizeLimit"] for v in serving["volumes"]}["artifact-cache"] == "40Gi"
    compile_disk = job["containers"][0]["resources"]
    assert compile_disk["requests"]["ephemeral-storage"] == compile_disk["limits"]["ephemeral-storage"] == "100Gi"


def test_an_evicted_compile_runs_again_with_more_disk() -> None:
    dep = bert()
    before = wanted_job_spec(dep)
    for change in ({"ephemeral_storage": "100Gi"}, {"cpu_limit": "8"}):
        changed = dep.model_copy(deep=True)
        changed.spec.compile = changed.spec.compile.model_copy(update=change)
        assert wanted_job_spec(changed) != before


# ------------------------------------------------------------------------- the compile Job's pod


def test_the_compile_pod_is_hardened_as_the_serving_pod() -> None:
    # It loads untrusted model sources (pickled weights run code when loaded): no API token, no
    # service links, nothing writable but its own sized /tmp.
    dep = bert()
    serving, _, job = pods(dep, BuilderConfig())
    assert (job["automountServiceAccountToken"], job["enableServiceLinks"]) == (False, False)
    (container,) = job["containers"]
    assert container["securityContext"] == serving["containers"][0]["securityContext"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert job["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "64Gi"}}]
    assert container["resources"]["limits"]["ephemeral-storage"] == "64Gi"
    # Its temporary files, home (~/.cache) and working directory are that /tmp.
    env = {e["name"]: e["value"] for e in container["env"]}
    assert (env["TMPDIR"], env["HOME"], container["workingDir"]) == ("/tmp", "/tmp", "/tmp")
    assert env["HF_HUB_OFFLINE"] == "1"
    dep.spec.compile.ephemeral_storage = "100Gi"
    assert pods(dep, BuilderConfig())[2]["volumes"][0]["emptyDir"] == {"sizeLimit": "100Gi"}


# --------------------------------------------------------------------------- the Neuron devices


def test_the_device_group_lets_the_non_root_user_open_the_neuron_devices() -> None:
    # A udev rule GROUP="neuron", MODE="0660" (AWS's Neuron security guidance) leaves uid/gid 10001
    # out of the devices unless the pod has the group.
    dep = bert()
    serving, placeholder, job = pods(dep, BuilderConfig(device_group_id=994))
    assert serving["securityContext"]["supplementalGroups"] == [994]
    assert job["securityContext"]["supplementalGroups"] == [994]
    # Placeholders only sleep: they open no device.
    assert "supplementalGroups" not in placeholder["securityContext"]
    assert serving["securityContext"]["runAsUser"] == serving["securityContext"]["runAsGroup"] == 10001
    # Without the setting, the pods are as before (0666 devices, or containerd's
    # device_ownership_from_security_context): same template hash, no rollout.
    for spec in pods(dep, BuilderConfig()):
        assert "supplementalGroups" not in spec["securityContext"]
    candidate = chosen(dep)
    assert pod_template_hash(dep, candidate, BuilderConfig(device_group_id=994)) != pod_template_hash(dep, candidate)


def test_run_takes_the_device_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("NEURONFLEET_DEVICE_GROUP_ID", raising=False)
    assert _run_settings(tmp_path, monkeypatch).builder.device_group_id is None
    monkeypatch.setenv("NEURONFLEET_DEVICE_GROUP_ID", "994")
    assert _run_settings(tmp_path, monkeypatch).builder.device_group_id == 994
    assert _run_settings(tmp_path, monkeypatch, "--device-group-id", "995").builder.device_group_id == 995
    capsys.readouterr()
    # Root's group would be a way in, not out.
    monkeypatch.setenv("NEURONFLEET_DEVICE_GROUP_ID", "0")
    assert main(["run", "--kubeconfig", _kubeconfig(tmp_path / "kubeconfig")]) == 2
    assert capsys.readouterr().err.startswith("error: --device-group-id (env NEURONFLEET_DEVICE_GROUP_ID): 0 is out")
