"""The typed API: defaults a user can rely on, camelCase on the wire, unknown fields refused."""

from __future__ import annotations

import pydantic
import pytest

from neuronfleet.api import InferenceDeployment


def _minimal() -> dict[str, object]:
    return {
        "apiVersion": "serving.neuronfleet.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "bert", "namespace": "ml"},
        "spec": {"model": {"source": "s3://models-bucket/bert/"}},
    }


def test_minimal_spec_gets_documented_defaults() -> None:
    dep = InferenceDeployment.model_validate(_minimal())
    spec = dep.spec
    assert spec.model.neuron_cores_per_replica == 2
    assert spec.model.batch_buckets == [1, 4, 8, 16]
    assert [t.name for t in spec.model.inputs] == ["input_ids", "attention_mask"]
    assert spec.scaling.mode == "Auto"
    assert (spec.scaling.min_replicas, spec.scaling.max_replicas) == (1, 10)
    assert spec.scaling.behavior.scale_up.stabilization_window_seconds == 0
    assert [(p.type, p.value, p.period_seconds) for p in spec.scaling.behavior.scale_up.policies] == [
        ("Pods", 4, 15),
        ("Percent", 100, 15),
    ]
    assert spec.warm_pool.mode == "Off"
    assert spec.placement.instance_types == ["inf2.xlarge", "inf2.8xlarge", "inf2.24xlarge", "inf2.48xlarge"]
    assert dep.served_model_name == "bert"


def test_wire_form_is_camel_case_and_round_trips() -> None:
    dep = InferenceDeployment.model_validate(_minimal())
    wire = dep.to_wire()
    assert wire["spec"]["model"]["neuronCoresPerReplica"] == 2
    assert wire["spec"]["warmPool"]["mode"] == "Off"
    assert "hbmGiB" not in wire["spec"]["model"]  # unset optional fields are omitted, not null
    assert InferenceDeployment.model_validate(wire) == dep


def test_hbm_alias_keeps_its_unit_spelling() -> None:
    raw = _minimal()
    raw["spec"] = {"model": {"source": "s3://models-bucket/bert/", "hbmGiB": 3}}
    assert InferenceDeployment.model_validate(raw).spec.model.hbm_gib == 3


def test_unknown_fields_are_refused() -> None:
    raw = _minimal()
    raw["spec"] = {"model": {"source": "s3://models-bucket/bert/"}, "scaling": {"replica": 3}}
    with pytest.raises(pydantic.ValidationError, match="replica"):
        InferenceDeployment.model_validate(raw)
