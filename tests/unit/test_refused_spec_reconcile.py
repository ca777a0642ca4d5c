"""A refused spec (InvalidSpec) reconciled through the Reconciler: the fleet is kept from the last
valid spec this process reconciled (its memory) before the copy in the status, which is for a
restarted operator."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException
from test_status_conflict_new_spec import _ApiServer, _body, _edited, _pods, _reconciler, _source

from neuronfleet.planning.observation import DeploymentMemory


async def test_a_refused_spec_keeps_the_fleet_of_the_valid_spec_this_process_last_reconciled(tmp_path: Path) -> None:
    # The memory's last valid spec comes first: a status that lacks it (its write lost, or the
    # status edited by hand) still keeps the fleet whole, here its two pods made again (the stub
    # cluster lists none). The status's copy is only for a restarted operator.
    valid = _body(_source(tmp_path), replicas=2)
    kube = _ApiServer(copy.deepcopy(valid))
    reconciler = _reconciler(tmp_path, kube, valid)
    first = await reconciler.reconcile(copy.deepcopy(valid), DeploymentMemory())
    assert first.error is None and len(_pods(kube)) == 2
    assert first.memory.last_valid is not None and first.memory.last_valid.metadata.uid == "uid-1"

    refused = _edited(kube.obj, replicas=-1)
    refused["status"] = {}
    kube.obj = copy.deepcopy(refused)
    kube.created.clear()
    report = await reconciler.reconcile(refused, first.memory)

    assert report.refusal is not None and "spec.scaling.replicas" in report.refusal
    assert len(_pods(kube)) == 2, "the kept fleet's lost pods were not made again"
    degraded = next(c for c in kube.obj["status"]["conditions"] if c["type"] == "Degraded")
    assert (degraded["reason"], degraded["message"].split(":")[0]) == ("InvalidSpec", "generation 2 refused")
    assert "generation 1" in degraded["message"]


async def test_a_restarted_operator_with_neither_copy_makes_nothing_for_a_refused_spec(tmp_path: Path) -> None:
    # The control: the same refused object read by an operator with no memory of it and a status
    # without the last valid spec: nothing can be built, nothing is made, and the status says so.
    valid = _body(_source(tmp_path), replicas=2)
    refused = _edited(valid, replicas=-1)
    kube = _ApiServer(copy.deepcopy(refused))
    reconciler = _reconciler(tmp_path, kube, valid)
    report = await reconciler.reconcile(copy.deepcopy(refused), DeploymentMemory())

    assert report.refusal is not None and "spec.scaling.replicas" in report.refusal
    assert _pods(kube) == []
    degraded = next(c for c in kube.obj["status"]["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "InvalidSpec" and "generation 1" not in degraded["message"]


class _PodsRefusedApiServer(_ApiServer):
    """The stub API server once its pod creations fail (an API server answering 500)."""

    refusing = False

    async def create(self, obj: dict[str, Any]) -> bool:
        if self.refusing and obj["kind"] == "Pod":
            raise ApiException(status=500, reason="Internal Server Error")
        return await super().create(obj)


async def test_a_kept_fleets_failed_call_is_the_reports_error_beside_the_refusal(tmp_path: Path) -> None:
    # The refusal is not an error (no back-off from it), but the kept fleet's own failures are:
    # a lost pod the API server would not make again is an error of the reconcile, as without the
    # refusal, and the daemon backs off from it.
    valid = _body(_source(tmp_path), replicas=2)
    kube = _PodsRefusedApiServer(copy.deepcopy(valid))
    reconciler = _reconciler(tmp_path, kube, valid)
    first = await reconciler.reconcile(copy.deepcopy(valid), DeploymentMemory())
    assert first.error is None

    refused = _edited(kube.obj, replicas=-1)
    kube.obj = copy.deepcopy(refused)
    kube.refusing = True
    report = await reconciler.reconcile(refused, first.memory)

    assert report.refusal is not None and "spec.scaling.replicas" in report.refusal
    assert report.error is not None and "500 Internal Server Error" in report.error, report.error
