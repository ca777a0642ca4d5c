"""A status written by a newer operator is read by an older one (review r18, finding 2).

`helm rollback` keeps the CRDs, so the status a newer operator wrote (a field added since, such as
coldStart.<phase>.lastSampleTime) meets the models of the operator rolled back to. With unknown fields
refused, the older ColdStartStatus rejected the section and the carried cold-start figures were
dropped without a word. The status models now ignore fields they do not know (the spec still
refuses them: there an unknown field is a typo), and a section that cannot be read is logged.
"""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from neuronfleet.api.v1alpha1 import (
    ColdStartStatus,
    InferenceDeploymentSpec,
    InferenceDeploymentStatus,
    ScalingSpec,
)
from neuronfleet.planning.observation import StatusMemory

FUTURE = {"aFieldAddedLater": "x"}


def cold_start(**extra: Any) -> dict[str, Any]:
    phase = {"p50Seconds": 80.0, "p90Seconds": 120.0, "samples": 40, "lastSampleTime": "2026-12-05T06:00:00Z"}
    return {"instanceType": "inf2.xlarge", "pod": {**phase, **extra}, "node": dict(phase), **extra}


def test_a_cold_start_section_with_a_field_this_operator_does_not_know_is_read() -> None:
    memory = StatusMemory.from_status({"coldStart": cold_start(**FUTURE)})
    assert memory.cold_start is not None
    assert memory.cold_start.pod.samples == 40
    assert memory.cold_start.pod.p90_seconds == 120.0
    assert memory.cold_start.instance_type == "inf2.xlarge"


def test_every_status_section_ignores_unknown_fields() -> None:
    status = InferenceDeploymentStatus.model_validate(
        {
            **FUTURE,
            "conditions": [{"type": "Ready", "status": "True", **FUTURE}],
            "coldStart": cold_start(**FUTURE),
            "artifact": {"uri": "s3://b/k", **FUTURE},
            "placement": {"instanceType": "inf2.xlarge", **FUTURE},
            "warmPool": {"desiredPods": 1, **FUTURE},
            "rollout": {"target": "abc", "startedAt": "2026-12-05T06:00:00Z", **FUTURE},
            "autoscaler": FUTURE,
        }
    )
    assert "aFieldAddedLater" not in status.to_wire()
    assert status.cold_start is not None and status.cold_start.pod.samples == 40


def test_the_spec_still_refuses_unknown_fields() -> None:
    # A typo in a spec field must not be dropped silently.
    with pytest.raises(pydantic.ValidationError):
        ScalingSpec.model_validate({"minReplica": 1})
    assert InferenceDeploymentSpec.model_config.get("extra") == "forbid"


def test_a_status_section_that_cannot_be_read_is_named_for_the_log() -> None:
    # The reconcile logs each at info (what was lost, and why), instead of dropping it unsaid.
    memory = StatusMemory.from_status({"coldStart": {"pod": {"samples": -3}}})
    assert memory.cold_start is None
    assert memory.unread == ("status.coldStart: pod.samples: Input should be greater than or equal to 0",)
    assert StatusMemory.from_status({"coldStart": cold_start()}).unread == ()
    assert ColdStartStatus.model_validate(cold_start()).pod.samples == 40
