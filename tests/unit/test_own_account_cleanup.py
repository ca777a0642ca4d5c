"""A refused spec whose workloads would run as the operator's own account, through the Reconciler:
what of it already runs as that account is acted on (planning.admission.own_account_cleanup) from
the pods and Jobs as listed: its idle pods (placeholders, warm) and compile Jobs are deleted, its
serving pods are kept and named; a pod or Job it does not control, a compile Job's pod (it goes with
its Job) and a pod already terminating are left alone."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from test_status_conflict_new_spec import IMAGE, _ApiServer, _body, _source

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.kube.builders import BuilderConfig
from neuronfleet.kube.client import JobDeletion
from neuronfleet.planning.admission import OperatorAccount
from neuronfleet.planning.observation import DeploymentMemory
from neuronfleet.reconcile import OperatorSettings, Reconciler
from neuronfleet.sandbox.artifacts import record_uncompiled_artifact

OPERATOR = OperatorAccount("ns", "nf-operator")
OURS = {"apiVersion": "serving.neuronfleet.dev/v1alpha1", "kind": "InferenceDeployment", "name": "emb", "uid": "uid-1"}


def _owned(name: str, owner_uid: str = "uid-1", **metadata: Any) -> dict[str, Any]:
    return {"name": name, "ownerReferences": [{**OURS, "uid": owner_uid, "controller": True}], **metadata}


def _pod(name: str, role: str, account: str | None, **metadata: Any) -> dict[str, Any]:
    labels = {"serving.neuronfleet.dev/role": role, **metadata.pop("labels", {})}
    spec = {"serviceAccountName": account} if account else {}
    return {"metadata": _owned(name, labels=labels, **metadata), "spec": spec, "status": {}}


def _job(name: str, account: str | None, **metadata: Any) -> dict[str, Any]:
    pod_spec = {"serviceAccountName": account} if account else {}
    return {"metadata": _owned(name, **metadata), "spec": {"template": {"spec": pod_spec}}, "status": {}}


class _OwnAccountCluster(_ApiServer):
    """The stub API server with these pods and Jobs listed; records what is deleted."""

    def __init__(self, obj: dict[str, Any], pods: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> None:
        super().__init__(obj)
        self.pods, self.jobs = pods, jobs
        self.deleted: list[str] = []

    async def list_pods(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return copy.deepcopy(self.pods) if namespace == "ns" else []

    async def list_jobs(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return copy.deepcopy(self.jobs) if namespace == "ns" else []

    async def delete_pod(self, namespace: str, name: str, *args: Any, **kwargs: Any) -> bool:
        self.deleted.append(f"{namespace}/pod/{name}")
        return True

    async def delete_job(self, namespace: str, name: str, *args: Any) -> JobDeletion:
        self.deleted.append(f"{namespace}/job/{name}")
        return JobDeletion("gone")


async def test_a_refused_own_account_spec_deletes_its_idle_pods_and_jobs_and_keeps_its_serving_pods(
    tmp_path: Path,
) -> None:
    body = _body(_source(tmp_path), replicas=2)
    body["spec"]["runtime"] = {"serviceAccountName": "nf-operator"}
    pods = [
        _pod("emb-ph-0", "placeholder", "nf-operator"),
        _pod("emb-w-0", "warm", "nf-operator"),
        _pod("emb-a-0", "active", "nf-operator"),
        _pod("emb-a-1", "active", "my-serving"),  # another account: not the refusal's
        _pod("emb-w-1", "warm", "nf-operator", deletionTimestamp="2026-12-07T02:00:00Z"),  # going already
        _pod("emb-compile-x", "warm", "nf-operator", labels={"serving.neuronfleet.dev/compile-request": "r1"}),
        {**_pod("emb-w-2", "warm", "nf-operator"), "metadata": _owned("emb-w-2", owner_uid="uid-other")},
    ]
    jobs = [
        _job("emb-compile-1", "nf-operator"),
        _job("emb-compile-2", None),  # the namespace's default account
        _job("emb-compile-3", "nf-operator", deletionTimestamp="2026-12-07T02:00:00Z"),
        {**_job("emb-compile-4", "nf-operator"), "metadata": _owned("emb-compile-4", owner_uid="uid-other")},
    ]
    kube = _OwnAccountCluster(copy.deepcopy(body), pods, jobs)
    store = tmp_path / "store"
    record_uncompiled_artifact(InferenceDeployment.model_validate(body).spec, store, "compiled", IMAGE)
    settings = OperatorSettings(
        artifact_store=str(store), builder=BuilderConfig(model_server_image=IMAGE), operator_account=OPERATOR
    )
    reconciler = Reconciler(kube, ArtifactStore(), settings)  # type: ignore[arg-type]

    report = await reconciler.reconcile(copy.deepcopy(body), DeploymentMemory())

    assert sorted(kube.deleted) == ["ns/job/emb-compile-1", "ns/pod/emb-ph-0", "ns/pod/emb-w-0"]
    assert kube.created == [], "nothing is made as the operator's account"
    assert report.refusal is not None
    assert "1 serving pod made before still run as that account" in report.refusal
    assert "emb-a-0 (active)" in report.refusal and "emb-a-1" not in report.refusal
