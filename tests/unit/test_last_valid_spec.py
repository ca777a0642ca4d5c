"""The last valid spec kept in the status (``status.lastValidSpec``): written with the status of a
spec reconciled as valid (and only when it changed), read back, and made an InferenceDeployment again
as a body's spec is, so that an operator restarted under a refused spec keeps that spec's fleet whole;
a stored spec that no longer passes is not used."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from test_reconcile_plan import MANUAL, T0, compiled, condition_of, deployment, one_template, rounds

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.planning.admission import OperatorAccount
from neuronfleet.planning.fleet import FleetPolicy
from neuronfleet.planning.last_valid import kept_from_status, record
from neuronfleet.planning.observation import DeploymentMemory, Observation, StatusMemory
from neuronfleet.planning.reconcile_plan import plan_reconcile
from neuronfleet.planning.status import RefusedSpec, invalid_status, status_patch

OPERATOR = OperatorAccount("ns", "nf-operator")


def body_of(dep: InferenceDeployment, generation: int, **spec: Any) -> dict[str, Any]:
    """The object as the watch delivers it: ``dep``'s metadata at ``generation``, its spec changed."""
    wire = dep.to_wire()
    wire["metadata"]["generation"] = generation
    wire["metadata"]["uid"] = "uid-1"
    wire["spec"].update(spec)
    return wire


def test_a_valid_spec_is_written_with_its_generation_and_parses_back_to_itself() -> None:
    dep = deployment(**MANUAL)
    steady, _, _ = rounds(dep, compiled(dep), (), DeploymentMemory(), {})
    section = steady.status["lastValidSpec"]
    assert section["generation"] == 1
    assert section["spec"] == dep.spec.to_wire()  # defaults filled in: what was accepted, whole
    durable = StatusMemory.from_status(steady.status)
    assert durable.last_valid_spec == record(dep)
    assert durable.unread == ()
    kept = kept_from_status(durable.last_valid_spec, body_of(dep, 2, bogus=True), None, None, OPERATOR)
    assert isinstance(kept, InferenceDeployment), kept
    assert kept.spec == dep.spec
    assert kept.metadata.generation == 1  # the stored one's, not the refused body's
    assert kept.metadata.uid == "uid-1"  # the body's metadata otherwise


def test_an_unchanged_spec_writes_nothing_and_a_new_generation_rewrites_it() -> None:
    dep = deployment(**MANUAL)
    steady, pods, _ = rounds(dep, compiled(dep), (), DeploymentMemory(), {})

    def patch_of(planned: InferenceDeployment, refused: RefusedSpec | None = None) -> dict[str, Any]:
        """The status patch of a reconcile of ``planned`` five minutes after the steady one."""
        observation = Observation(T0 + timedelta(minutes=5), pods=pods, compile=compiled(planned))
        durable = StatusMemory.from_status(steady.status)
        result = plan_reconcile(
            planned, observation, steady.memory, durable, FleetPolicy(), one_template, refused=refused
        )
        return dict(status_patch(steady.status, result.status) or {})

    assert "lastValidSpec" not in patch_of(dep)
    # The same spec kept under a refused generation 2: still nothing to write for it.
    assert "lastValidSpec" not in patch_of(dep, RefusedSpec(generation=2, message="refused", kept_generation=1))
    scaled = deployment(scaling={"mode": "Manual", "replicas": 3, "minReplicas": 0}, warmPool={"mode": "Off"})
    scaled = scaled.model_copy(update={"metadata": scaled.metadata.model_copy(update={"generation": 3})})
    patch = patch_of(scaled)
    assert patch["lastValidSpec"]["generation"] == 3
    assert patch["lastValidSpec"]["spec"]["scaling"]["replicas"] == 3


def test_a_stored_spec_that_does_not_parse_is_not_used() -> None:
    dep = deployment(**MANUAL)
    stored = record(dep).model_copy(update={"spec": {**dep.spec.to_wire(), "bogus": 1}})
    why = kept_from_status(stored, body_of(dep, 2), None, None, OPERATOR)
    assert isinstance(why, str)
    assert why.startswith("status.lastValidSpec (generation 1) is not a valid spec: spec.bogus: "), why


def test_a_stored_spec_the_crds_rules_refuse_is_not_used() -> None:
    # Parses, but the CRD's CEL rules refuse it, as the API server would refuse it as a spec; the
    # status's copy is an open object the API server does not check.
    dep = deployment(**MANUAL)
    wire = dep.spec.to_wire()
    inverted = {**wire, "scaling": {**wire["scaling"], "minReplicas": 5, "maxReplicas": 2}}
    stored = record(dep).model_copy(update={"spec": inverted})
    InferenceDeployment.model_validate({**body_of(dep, 2), "spec": inverted})  # the typed model alone takes it
    why = kept_from_status(stored, body_of(dep, 2), None, None, OPERATOR)
    assert isinstance(why, str)
    assert why == (
        "status.lastValidSpec (generation 1) is not a valid spec: "
        "spec.scaling.minReplicas: minReplicas must not exceed maxReplicas"
    ), why
    # Another CEL rule, on quantities (a CPU limit below the request), which the typed model leaves to it.
    bounded = {**wire, "compile": {**wire.get("compile", {}), "cpu": "4", "cpuLimit": "2"}}
    why = kept_from_status(record(dep).model_copy(update={"spec": bounded}), body_of(dep, 2), None, None, OPERATOR)
    assert isinstance(why, str) and "cpuLimit must be at least cpu" in why, why


def test_a_stored_spec_is_kept_from_a_body_as_the_api_server_sends_it() -> None:
    # The server's metadata (managedFields, resourceVersion, timestamps) is not the spec's concern.
    dep = deployment(**MANUAL)
    body = body_of(dep, 2, bogus=True)
    body["metadata"].update(
        {
            "resourceVersion": "4711",
            "creationTimestamp": "2026-12-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {}}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
        }
    )
    body["status"] = {"lastValidSpec": record(dep).model_dump(by_alias=True, exclude_none=True)}
    kept = kept_from_status(record(dep), body, None, None, OPERATOR)
    assert isinstance(kept, InferenceDeployment), kept
    assert kept.spec == dep.spec


def test_a_stored_spec_refused_now_is_not_used() -> None:
    # Accepted by the operator that wrote it; this one would run its pods as its own account.
    dep = deployment(**MANUAL)
    why = kept_from_status(record(dep), body_of(dep, 2), None, "nf-operator", OPERATOR)
    assert isinstance(why, str)
    assert why.startswith("status.lastValidSpec (generation 1) is refused now: "), why
    assert "nf-operator" in why
    # Elsewhere (another namespace than the operator's), the same spec is kept.
    assert isinstance(
        kept_from_status(record(dep), body_of(dep, 2), None, "nf-operator", OperatorAccount("ops", "nf-operator")),
        InferenceDeployment,
    )


def test_no_stored_spec_or_one_unreadable_is_said() -> None:
    dep = deployment(**MANUAL)
    assert "status.lastValidSpec is absent" in str(kept_from_status(None, body_of(dep, 2), None, None, None))
    durable = StatusMemory.from_status({"lastValidSpec": {"generation": 1, "spec": "not an object"}})
    assert durable.last_valid_spec is None
    assert [u.split(":")[0] for u in durable.unread] == ["status.lastValidSpec"]


def test_the_refusal_says_why_the_stored_spec_is_not_built_from() -> None:
    dep = deployment(**MANUAL)
    steady, _, _ = rounds(dep, compiled(dep), (), DeploymentMemory(), {})
    why = "status.lastValidSpec (generation 1) is not a valid spec: spec.bogus: {not} permitted"
    new = invalid_status(steady.status, "refused", 2, T0, None, why)
    degraded = condition_of(new, "Degraded")["message"]
    assert "a lost one is not replaced" in degraded, degraded
    assert f"cannot use the one the status keeps ({why})" in degraded, degraded
    assert new["lastValidSpec"] == steady.status["lastValidSpec"]  # kept as it was, not dropped


def test_why_the_stored_spec_cannot_be_used_is_said_as_written_braces_included() -> None:
    # The reason quotes pydantic and the stored spec: its braces are text, not format fields.
    why = "status.lastValidSpec (generation 2) is not a valid spec: spec.model: Input should be a valid dictionary {}"
    status = invalid_status({"desiredReplicas": 2}, "spec rejected", 3, T0, unusable=why)
    degraded = condition_of(status, "Degraded")
    assert degraded["reason"] == "InvalidSpec"
    assert f"cannot use the one the status keeps ({why}); fix the spec" in degraded["message"]
