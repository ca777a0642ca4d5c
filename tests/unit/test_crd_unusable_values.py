"""Values the CRD must refuse at apply because no pod, compile Job or autoscaler decision can use them.

Each case is checked twice: by ``neuronfleet validate`` (the offline copy of the API server's
checks) and by the sandbox API server's admission of a custom object (schema, then CEL rules), so
that a rule the two evaluate differently shows. The values are what the API server refuses in a
pod (label keys and values, toleration keys and values: apimachinery's IsQualifiedName and
IsValidLabelValue), what the operator decides itself (the instance type and zone node labels), and
what breaks a command line or a division.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronfleet.api.crd import crd
from neuronfleet.api.validation import validate_manifest
from neuronfleet.sandbox.cel import check_rules
from neuronfleet.sandbox.resources import resource_from_crd, validate_custom_object

REPO = Path(__file__).resolve().parents[2]
PREFIX_253 = ".".join(["a" * 63] * 4)[:253]  # a DNS subdomain of the longest length
NAME_63 = "n" * 63


def manifest(**sections: dict[str, Any]) -> dict[str, Any]:
    """The bert example with each of ``sections`` replacing (not merging into) its spec section's keys."""
    doc: dict[str, Any] = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    for name, fields in sections.items():
        doc["spec"].setdefault(name, {}).update(copy.deepcopy(fields))
    return doc


def validate_paths(doc: dict[str, Any]) -> list[str]:
    return [f"{p.path}: {p.message}" for p in validate_manifest(copy.deepcopy(doc))[1]]


def sandbox_refusals(doc: dict[str, Any]) -> list[str]:
    """What the sandbox API server answers a create of ``doc`` with (empty: stored)."""
    rt = resource_from_crd(crd())
    obj = copy.deepcopy(doc)
    errors, _ = validate_custom_object(rt, obj)
    if not errors:
        errors = check_rules(rt.schema(), obj, None, "")
    return [f"{field}: {message}" for field, message in errors]


def torchscript(*names: str) -> dict[str, Any]:
    return {"source": "s3://acme-models/m.pt", "format": "torchscript", "inputs": [{"name": n} for n in names]}


REFUSED: list[tuple[str, dict[str, Any], str, str]] = [
    # Finding 1: labels the operator sets itself in the same node affinity term.
    (
        "instance-type-selector",
        {"placement": {"nodeSelector": {"node.kubernetes.io/instance-type": "inf2.24xlarge"}}},
        "spec.placement.nodeSelector",
        "spec.placement.instanceTypes",
    ),
    (
        "beta-instance-type-selector",
        {"placement": {"nodeSelector": {"beta.kubernetes.io/instance-type": "inf2.xlarge"}}},
        "spec.placement.nodeSelector",
        "spec.placement.instanceTypes",
    ),
    (
        "zone-selector",
        {"placement": {"nodeSelector": {"topology.kubernetes.io/zone": "us-east-1a"}}},
        "spec.placement.nodeSelector",
        "spec.placement.zones",
    ),
    (
        "beta-zone-selector",
        {"placement": {"nodeSelector": {"failure-domain.beta.kubernetes.io/zone": "us-east-1a"}}},
        "spec.placement.nodeSelector",
        "spec.placement.zones",
    ),
    # Finding 3: what the API server refuses in a pod's node affinity and tolerations, and images.
    (
        "key-trailing-space",
        {"placement": {"nodeSelector": {"karpenter.sh/nodepool ": "inf2"}}},
        "spec.placement.nodeSelector",
        "label key",
    ),
    (
        "key-two-slashes",
        {"placement": {"nodeSelector": {"a.com/b/c": "x"}}},
        "spec.placement.nodeSelector",
        "label key",
    ),
    ("key-empty-prefix", {"placement": {"nodeSelector": {"/pool": "x"}}}, "spec.placement.nodeSelector", "label key"),
    (
        "key-upper-prefix",
        {"placement": {"nodeSelector": {"Acme.com/pool": "x"}}},
        "spec.placement.nodeSelector",
        "label key",
    ),
    ("key-name-64", {"placement": {"nodeSelector": {"n" * 64: "x"}}}, "spec.placement.nodeSelector", "label key"),
    (
        "key-prefix-254",
        {"placement": {"nodeSelector": {"b" + PREFIX_253 + "/x": "x"}}},
        "spec.placement.nodeSelector",
        "label key",
    ),
    (
        "value-space",
        {"placement": {"nodeSelector": {"team": "ml platform"}}},
        "spec.placement.nodeSelector",
        "label value",
    ),
    (
        "value-dash-start",
        {"placement": {"nodeSelector": {"team": "-ml"}}},
        "spec.placement.nodeSelector",
        "label value",
    ),
    ("value-64", {"placement": {"nodeSelector": {"team": "v" * 64}}}, "spec.placement.nodeSelector", ""),
    ("zone-comma", {"placement": {"zones": ["us-east-1a,us-east-1b"]}}, "spec.placement.zones", "zone"),
    ("zone-empty", {"placement": {"zones": [""]}}, "spec.placement.zones", "zone"),
    (
        "toleration-key-equals",
        {"placement": {"tolerations": [{"key": "dedicated=ml", "operator": "Equal", "value": "ml"}]}},
        "spec.placement.tolerations[0].key",
        "label key",
    ),
    (
        "toleration-value-space",
        {"placement": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "inference only"}]}},
        "spec.placement.tolerations[0].value",
        "label value",
    ),
    (
        "runtime-image-space",
        {"runtime": {"image": "ghcr.io/acme/neuronserve: 0.2"}},
        "spec.runtime.image",
        "whitespace",
    ),
    (
        "runtime-image-newline",
        {"runtime": {"image": "ghcr.io/acme/neuronserve:0.2\n"}},
        "spec.runtime.image",
        "whitespace",
    ),
    (
        "compile-image-space",
        {"compile": {"image": " ghcr.io/acme/neuronserve:0.2"}},
        "spec.compile.image",
        "whitespace",
    ),
    # Finding 4: input names the compile Job's --inputs cannot carry.
    ("input-comma", {"model": torchscript("tokens,mask")}, "spec.model.inputs[0].name", "identifier"),
    ("input-colon", {"model": torchscript("input_ids", "pixel:values")}, "spec.model.inputs[1].name", "identifier"),
    ("input-digit-first", {"model": torchscript("1st")}, "spec.model.inputs[0].name", "identifier"),
    # Finding 6: the autoscaler divides by the service rate times these.
    ("target-denormal", {"scaling": {"targetUtilization": 5e-324}}, "spec.scaling.targetUtilization", ""),
    ("target-tiny", {"scaling": {"targetUtilization": 0.001}}, "spec.scaling.targetUtilization", ""),
    ("peak-denormal", {"scaling": {"peakUtilization": 5e-324}}, "spec.scaling.peakUtilization", ""),
    # Finding 5: Go's '$' is the end of the text; Python's also matches before a final newline.
    ("quantity-newline", {"runtime": {"cpu": "2\n"}}, "spec.runtime.cpu", "should match"),
    (
        "scheduler-newline",
        {"placement": {"schedulerName": "my-scheduler\n"}},
        "spec.placement.schedulerName",
        "should match",
    ),
]


@pytest.mark.parametrize(("sections", "path", "words"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_validate_and_the_sandbox_refuse_it_naming_the_field(sections: dict[str, Any], path: str, words: str) -> None:
    doc = manifest(**sections)
    for refusals in (validate_paths(doc), sandbox_refusals(doc)):
        assert any(r.startswith(path) and words in r for r in refusals), refusals


ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    (
        "selectors",
        {
            "placement": {
                "nodeSelector": {
                    "karpenter.sh/nodepool": "inf2-serving",
                    "karpenter.k8s.aws/instance-family": "inf2",  # not set by the operator: the user's to narrow
                    "team": "",
                    "example.com/a_b.c-d": "V_1.x",
                    NAME_63: "v" * 63,
                    PREFIX_253 + "/" + NAME_63: "x",
                }
            }
        },
    ),
    ("zones", {"placement": {"zones": ["us-east-1a", "us-west-2-lax-1a"]}}),
    (
        "tolerations",
        {
            "placement": {
                "tolerations": [
                    {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
                    {"key": "dedicated", "operator": "Equal", "effect": "NoSchedule"},
                    {"key": "example.com/gpu", "operator": "Exists"},
                    {"operator": "Exists"},
                ]
            }
        },
    ),
    (
        "images",
        {
            "runtime": {"image": "ghcr.io/neuronfleet/neuronserve:0.1.0"},
            "compile": {"image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/neuronserve@sha256:" + "a" * 64},
        },
    ),
    ("bert-inputs", {"model": torchscript("input_ids", "attention_mask", "token_type_ids", "_x9")}),
    ("floor", {"scaling": {"targetUtilization": 0.01, "peakUtilization": 0.01}}),
]


@pytest.mark.parametrize("sections", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_validate_and_the_sandbox_accept_what_kubernetes_accepts(sections: dict[str, Any]) -> None:
    doc = manifest(**sections)
    assert validate_paths(doc) == []
    assert sandbox_refusals(doc) == []


def test_min_replicas_says_it_does_not_bound_a_manual_replicas() -> None:
    """`kubectl explain` called minReplicas the "Lower bound of active replicas"; a Manual replicas
    below it runs as it is (scaling down by hand is what Manual is for), and the text now says so."""
    from neuronfleet.api.v1alpha1 import ScalingSpec
    from neuronfleet.planning.scaling import ScalingState, decide

    said = ScalingSpec.model_fields["min_replicas"].description or ""
    assert "Manual mode" in said and "below this too" in said
    spec = ScalingSpec(mode="Manual", replicas=1, min_replicas=3, max_replicas=10)
    assert decide(spec, ScalingState(), None, current=3, ready=3, now=1000.0).desired == 1
    unset = ScalingSpec(mode="Manual", min_replicas=3, max_replicas=10)
    assert decide(unset, ScalingState(), None, current=0, ready=0, now=1000.0).desired == 3
