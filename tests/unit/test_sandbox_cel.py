"""The sandbox's CEL validation rules: where they run, ratcheting on updates, one conversion per value."""

from __future__ import annotations

from typing import Any

import pytest
from celpy.adapter import json_to_cel

from neuronfleet.sandbox import cel

SCHEMA: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-validations": [
        {"rule": "size(self.metadata.name) <= 5", "message": "name too long"},
        {"rule": "self.metadata.name != 'root'", "message": "name is reserved"},
    ],
    "properties": {
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.low <= self.high", "message": "low must not exceed high"},
                {"rule": "self.high >= oldSelf.high", "message": "high may only grow"},
            ],
        },
        "status": {"type": "object"},
    },
}


def obj(name: str, low: int, high: int, observed: int = 0) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"low": low, "high": high}, "status": {"observed": observed}}


def messages(value: Any, old: Any) -> list[str]:
    return [message for _, message in cel.check_rules(SCHEMA, value, old, "")]


def test_create_runs_every_rule_but_transition_rules() -> None:
    assert messages(obj("bert", 8, 2), None) == ['Invalid value: "object": low must not exceed high']
    assert messages(obj("toolong", 1, 2), None) == ['Invalid value: "object": name too long']


def test_an_unchanged_invalid_value_is_ratcheted_and_a_changed_one_is_not() -> None:
    # The spec got in under an older CRD; a status write leaves it as it was: Kubernetes ignores
    # the errors of a rule whose value did not change.
    stored = obj("bert", 8, 2)
    assert messages(obj("bert", 8, 2, observed=1), stored) == []
    # Changing the spec makes its rules run again, and the invalid value is refused.
    assert messages(obj("bert", 9, 2), stored) == ['Invalid value: "object": low must not exceed high']


def test_transition_rules_are_never_ratcheted() -> None:
    # The root changed (status), so its rules run; the spec did not, but "high may only grow" is a
    # transition rule and runs anyway: here it holds, and when high falls it fails.
    assert messages(obj("bert", 1, 5, observed=2), obj("bert", 1, 5)) == []
    assert messages(obj("bert", 1, 4), obj("bert", 1, 5)) == ['Invalid value: "object": high may only grow']


def test_each_value_is_converted_once_for_all_its_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    converted: list[Any] = []
    original = json_to_cel  # what cel imported

    def counting(value: Any) -> Any:
        converted.append(value)
        return original(value)

    monkeypatch.setattr(cel, "json_to_cel", counting)
    new, old = obj("bert", 1, 5, observed=3), obj("bert", 1, 5)
    assert messages(new, old) == []
    # Root: self and oldSelf once for its two rules. Spec: unchanged, so only its transition rule
    # runs, on self and oldSelf converted once.
    assert converted == [new, old, new["spec"], old["spec"]]


def test_an_integer_in_a_number_field_is_a_double_to_cel_as_on_the_api_server() -> None:
    # The CRD's own rule: hbmGiB is a `number`; written 300, it reaches CEL as 300.0 on the API
    # server. As an int, `300 <= double(...)` fails to evaluate and the rule was skipped here.
    from neuronfleet.api.crd import openapi_schema

    model = openapi_schema()["properties"]["spec"]["properties"]["model"]
    too_much = {"source": "s3://models/", "neuronCoresPerReplica": 16, "hbmGiB": 300}
    assert [field for field, _ in cel.check_rules(model, too_much, None, "spec.model")] == ["spec.model.hbmGiB"]
    assert cel.check_rules(model, {**too_much, "hbmGiB": 256}, None, "spec.model") == []


def test_an_integer_in_a_list_of_numbers_is_a_double_to_cel_too() -> None:
    # A CRD the user installs may hold a list of `number`s under a rule: each integer in it reaches
    # CEL as a double too, or `2 <= 1.5` fails to evaluate and the rule is skipped.
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "weights": {
                "type": "array",
                "items": {"type": "number"},
                "x-kubernetes-validations": [{"rule": "self.all(w, w <= 1.5)", "message": "at most 1.5 each"}],
            }
        },
    }
    assert cel.check_rules(schema, {"weights": [1, 2]}, None, "spec") == [
        ("spec.weights", 'Invalid value: "array": at most 1.5 each')
    ]
    assert cel.check_rules(schema, {"weights": [1, 1.5]}, None, "spec") == []
