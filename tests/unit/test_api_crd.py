"""The generated CRD: one source of truth, structural, valid, and readable by `kubectl explain`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml
from celpy.adapter import json_to_cel

from neuronfleet.api.crd import CRD_FILENAME, crd, crd_yaml, openapi_schema
from neuronfleet.api.v1alpha1 import NAME_RULE_MESSAGE
from neuronfleet.cli import CRD_TARGET_DIRS
from neuronfleet.sandbox.cluster import load_crd_documents

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("target", CRD_TARGET_DIRS)
def test_committed_crd_matches_the_generator(target: str) -> None:
    committed = (REPO / target / CRD_FILENAME).read_text()
    assert committed == crd_yaml(), f"{target}/{CRD_FILENAME} drifted from the typed API: run `make crds`"


def test_no_other_crd_yaml_is_written_by_hand() -> None:
    generated = {REPO / target / CRD_FILENAME for target in CRD_TARGET_DIRS}
    for path in REPO.rglob("*.yaml"):
        if ".venv" in path.parts or path in generated:
            continue
        text = path.read_text(errors="replace")
        assert "kind: CustomResourceDefinition" not in text or "{{" in text, f"hand-written CRD in {path}"


def test_crd_is_a_valid_apiextensions_v1_object() -> None:
    assert kubernetes_validate.validate(crd(), "1.34", strict=True) == "1.34"


def test_the_crd_validation_can_fail() -> None:
    broken = crd()
    del broken["spec"]["group"]
    with pytest.raises(kubernetes_validate.ValidationError, match="'group' is a required property"):
        kubernetes_validate.validate(broken, "1.34", strict=True)


def _walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)]
    for name, prop in node.get("properties", {}).items():
        found += _walk(prop, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        found += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found += _walk(node["additionalProperties"], f"{path}{{}}")
    return found


#: Objects the CRD leaves free-form on purpose: the last valid spec is a whole spec, which the
#: operator parses again itself (repeating the spec's schema there would double the CRD).
INTENDED_OPEN_OBJECTS = frozenset({".status.lastValidSpec.spec"})


def test_schema_is_structural_and_fully_described() -> None:
    schema = openapi_schema()
    forbidden = {"$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "title", "const"}
    for path, node in _walk(schema):
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"untyped node {path}"
        assert not forbidden & node.keys(), f"non-structural keys {forbidden & node.keys()} at {path}"
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert path in INTENDED_OPEN_OBJECTS, f"unintended open object at {path}"
        if node.get("type") == "object" and "properties" in node:
            assert "additionalProperties" not in node, f"properties and additionalProperties at {path}"
        scalar_item = path.endswith(("[]", "{}")) and node.get("type") not in ("object", "array")
        if (path.startswith(".spec") or path.startswith(".status")) and not scalar_item:
            assert node.get("description"), f"no description at {path} (kubectl explain would be empty)"
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            assert isinstance(node.get(bound, True), bool), f"{bound} must be boolean in OpenAPI v3.0 at {path}"


def test_kubectl_explain_says_every_scalar_default() -> None:
    # `kubectl explain` prints a field's description, never the schema's default: 38 of 46 spec
    # fields with one left a reader to guess it (a reviewer counted them on kubectl 1.34).
    unsaid = []
    for path, node in _walk(openapi_schema()):
        default = node.get("default")
        if default is None or isinstance(default, dict):
            continue
        if isinstance(default, list) and any(isinstance(item, dict) for item in default):
            continue
        if "default" not in node.get("description", "").lower():
            unsaid.append(path)
    assert not unsaid, f"descriptions that do not say their field's default: {unsaid}"
    replicas = openapi_schema()["properties"]["spec"]["properties"]["scaling"]["properties"]["maxReplicas"]
    assert replicas["description"].endswith("Default: 10.")


def test_subresources_printer_columns_and_names() -> None:
    version = crd()["spec"]["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.scaling.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    assert version["subresources"]["status"] == {}
    columns = {c["name"] for c in version["additionalPrinterColumns"]}
    assert {"Model", "Instance", "Ready", "Up-to-date", "Desired", "Warm", "Compiled", "Status", "Age"} <= columns
    names = crd()["spec"]["names"]
    assert "infdep" in names["shortNames"] and "neuronfleet" in names["categories"]


def test_every_cel_rule_compiles_and_names_existing_fields() -> None:
    env = celpy.Environment()
    rules = [
        (path, node, rule)
        for path, node in _walk(openapi_schema())
        for rule in node.get("x-kubernetes-validations", [])
    ]
    assert len(rules) >= 8
    for path, node, rule in rules:
        env.compile(rule["rule"])
        field_path = rule.get("fieldPath")
        if field_path and path:  # root rules may point into metadata, which the API server owns
            field = field_path.lstrip(".").split(".")[0]
            assert field in node["properties"], f"fieldPath {field_path} of a rule at {path} names no field"


def test_nested_defaults_let_a_minimal_spec_be_complete() -> None:
    spec = openapi_schema()["properties"]["spec"]["properties"]
    for section in ("compile", "runtime", "placement", "scaling", "warmPool", "rollout"):
        assert "default" in spec[section], f"spec.{section} has no default: its nested defaults would not apply"
    behavior = spec["scaling"]["properties"]["behavior"]
    assert behavior["default"] == {}  # filled from its children's defaults by the API server
    scale_down = behavior["properties"]["scaleDown"]
    assert scale_down["default"] == {}
    assert scale_down["properties"]["stabilizationWindowSeconds"]["default"] == 300  # HPA v2's default
    # Each field has its own default, so a direction given in part is completed as HPA completes it.
    assert "required" not in scale_down


def test_crd_yaml_round_trips() -> None:
    assert yaml.safe_load(crd_yaml()) == crd()


def test_root_rules_read_only_what_kubernetes_lets_them_read_of_metadata() -> None:
    """At a CRD's root, CEL may read metadata.name and metadata.generateName, nothing else of metadata."""
    root_rules = openapi_schema()["x-kubernetes-validations"]
    for rule in root_rules:
        for reference in re.findall(r"self\.metadata\.(\w+)", rule["rule"]):
            assert reference in ("name", "generateName"), rule["rule"]


@pytest.mark.parametrize(("name", "accepted"), [("bert-v2", True), ("a.b", False), ("1abc", False), ("b-", False)])
def test_the_name_rule_is_a_dns_1035_label(name: str, accepted: bool) -> None:
    [rule] = [r for r in openapi_schema()["x-kubernetes-validations"] if r["message"] == NAME_RULE_MESSAGE]
    env = celpy.Environment()
    program = env.program(env.compile(rule["rule"]))
    assert bool(program.evaluate({"self": json_to_cel({"metadata": {"name": name}})})) is accepted


def _rules_with_their_schema(node: dict[str, Any]) -> Iterator[tuple[dict[str, str], dict[str, Any]]]:
    for rule in node.get("x-kubernetes-validations", []):
        yield rule, node
    for child in node.get("properties", {}).values():
        yield from _rules_with_their_schema(child)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _rules_with_their_schema(node[key])


def test_every_field_path_names_a_field_of_the_schema_where_its_rule_is() -> None:
    """The API server refuses a CRD whose rule's fieldPath does not walk its structural schema's
    properties (apiextensions' ValidFieldPath): the whole chart install would fail."""
    checked = 0
    for rule, node in _rules_with_their_schema(openapi_schema()):
        if "fieldPath" not in rule:
            continue
        at = node
        for name in rule["fieldPath"].lstrip(".").split("."):
            assert name in at.get("properties", {}), f"{rule['fieldPath']} of {rule['rule']!r}: no field {name!r}"
            at = at["properties"][name]
        checked += 1
    assert checked > 0


def _field_rule(*path: str) -> Any:
    node = openapi_schema()["properties"]["spec"]
    for name in path:
        node = node["properties"][name]
    [rule] = node["x-kubernetes-validations"]
    env = celpy.Environment()
    return env.program(env.compile(rule["rule"]))


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("s3://acme-models/bert/", True),
        ("s3://acme-models/bert/model.pt", True),
        ("s3://acme-models", True),
        ("s3://acme-models/", True),
        ("s3://acme-models//bert/", False),
        ("s3://acme-models//", False),
        ("/models/bert", True),
    ],
)
def test_the_crd_refuses_a_double_slash_after_the_bucket(value: str, accepted: bool) -> None:
    """``s3://bucket//prefix`` names the key ``/prefix`` to S3, and the operator and the compile Job
    read it differently (one strips the '/'): refused in the source and the store alike."""
    for path in (("model", "source"), ("compile", "artifactStore")):
        assert bool(_field_rule(*path).evaluate({"self": json_to_cel(value)})) is accepted, (path, value)


def test_a_spec_stored_with_a_double_slash_is_still_read_by_the_operator() -> None:
    """Stored before the CRD refused it: the operator reads it (at the keys the Job uses) rather than
    calling the object invalid."""
    from neuronfleet.api.v1alpha1 import InferenceDeploymentSpec

    spec = InferenceDeploymentSpec.model_validate(
        {"model": {"source": "s3://acme-models//bert/"}, "compile": {"artifactStore": "s3://acme-store//compiled"}}
    )
    assert spec.compile.artifact_store == "s3://acme-store//compiled"


@pytest.mark.parametrize(
    ("runtime", "accepted"),
    [
        ({}, True),  # 5 s, capped by the server at a third of its grace below a grace period of 20
        ({"terminationGracePeriodSeconds": 15}, True),
        ({"terminationGracePeriodSeconds": 15, "drainDelaySeconds": 0}, True),
        ({"terminationGracePeriodSeconds": 95, "drainDelaySeconds": 30}, True),
        ({"terminationGracePeriodSeconds": 94, "drainDelaySeconds": 30}, False),
        ({"terminationGracePeriodSeconds": 60, "drainDelaySeconds": 30}, False),
        ({"terminationGracePeriodSeconds": 3600, "drainDelaySeconds": 300}, True),
        ({"terminationGracePeriodSeconds": 3600, "drainDelaySeconds": 301}, False),
        ({"drainDelaySeconds": -1}, False),
    ],
)
def test_the_drain_delay_must_fit_in_a_third_of_the_servers_grace(runtime: dict[str, int], accepted: bool) -> None:
    """The server takes at most a third of its grace period (the pod's less 5 s) for the drain delay:
    a longer delay than that would be cut short silently, so the CRD refuses it (5 s and less pass)."""
    from neuronfleet.api.validation import validate_manifest

    manifest = {
        "apiVersion": "serving.neuronfleet.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "bert"},
        "spec": {"model": {"source": "s3://models/bert/"}, "runtime": runtime},
    }
    _, problems = validate_manifest(manifest)
    assert (problems == []) is accepted, problems
    if not accepted and runtime.get("drainDelaySeconds", 0) in (30,):
        assert any("drainDelaySeconds" in p.message for p in problems), problems


def test_the_schema_built_once_is_handed_out_as_a_copy_each_caller_may_change() -> None:
    first = openapi_schema()
    first["properties"]["spec"]["properties"].clear()
    first["x-changed"] = True
    again = openapi_schema()
    assert "x-changed" not in again
    assert again["properties"]["spec"]["properties"], "a caller's change reached the next caller"
    assert again == crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_the_sandbox_reads_the_committed_crd_as_the_pure_python_yaml_loader_does() -> None:
    path = REPO / "crds" / CRD_FILENAME
    assert load_crd_documents([path]) == list(yaml.load_all(path.read_text(), Loader=yaml.SafeLoader))
