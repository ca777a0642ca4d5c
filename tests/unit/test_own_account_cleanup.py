"""A refused spec whose workloads would run as the operator's own account, through the Reconciler:
what of it already runs as that account is acted on (planning.admission.own_account_cleanup) from
the pods and Jobs as listed: its idle pods (placeholders, warm) and compile Jobs are deleted, its
serving pods are kept and named; a pod or Job it does not control, a compile Job's pod (it goes with
its Job) and a pod already terminating are left alone."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from test_status_conflict_new_spec import _ApiServer, _body, _reconciler, _source

from neuronfleet.planning.admission import OperatorAccount
from neuronfleet.planning.observation import DeploymentMemory

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
    kube = _ApiServer(copy.deepcopy(body))
    kube.pods = {pod["metadata"]["name"]: pod for pod in pods}
    kube.jobs = {job["metadata"]["name"]: job for job in jobs}
    reconciler = _reconciler(tmp_path, kube, body, operator_account=OPERATOR)

    report = await reconciler.reconcile(copy.deepcopy(body), DeploymentMemory())

    assert sorted(kube.deleted) == ["Job emb-compile-1", "Pod emb-ph-0", "Pod emb-w-0"]
    assert kube.created == [], "nothing is made as the operator's account"
    assert report.refusal is not None
    assert "1 serving pod made before still run as that account" in report.refusal
    assert "emb-a-0 (active)" in report.refusal and "emb-a-1" not in report.refusal
