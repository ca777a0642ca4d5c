"""Generate the InferenceDeployment CustomResourceDefinition from the typed model.

The CRD is never written by hand: ``make crds`` (``neuronfleet crds``) renders it from
``neuronfleet.api.v1alpha1``, and a test fails when the committed YAML drifts from this output.

Pydantic emits JSON Schema (draft 2020-12 with ``$defs``); Kubernetes wants a *structural*
OpenAPI v3.0 schema: every node typed, no ``$ref``, no ``anyOf`` for optional fields, boolean
``exclusiveMinimum``. This module translates one into the other and adds what only a CRD has:
subresources, printer columns, short names and categories.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, NoDefault
from pydantic_core import core_schema

from neuronfleet.api.v1alpha1 import (
    API_VERSION,
    CATEGORIES,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    InferenceDeployment,
)

CRD_NAME = f"{PLURAL}.{GROUP}"
CRD_FILENAME = f"{GROUP}_{PLURAL}.yaml"

# Keys of pydantic's JSON Schema that a structural schema either lacks or spells differently.
_DROPPED_KEYS = {"title", "$schema", "discriminator"}

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.source", "description": "Model source."},
    {
        "name": "Instance",
        "type": "string",
        "jsonPath": ".status.placement.instanceType",
        "description": "Inf2 instance type chosen for the replicas.",
    },
    {
        "name": "Ready",
        "type": "integer",
        "jsonPath": ".status.readyReplicas",
        "description": "Ready active replicas.",
    },
    {
        "name": "Up-to-date",
        "type": "integer",
        "jsonPath": ".status.updatedReplicas",
        "description": "Ready active replicas of the current spec's revision.",
    },
    {
        "name": "Desired",
        "type": "integer",
        "jsonPath": ".status.desiredReplicas",
        "description": "Active replicas wanted.",
    },
    {
        "name": "Warm",
        "type": "integer",
        "jsonPath": ".status.warmReplicas",
        "description": (
            "Ready warm (standby) pods of the current revision (an older one kept during a rollout is not counted)."
        ),
    },
    {
        "name": "Compiled",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Compiled")].status',
        "description": "Whether the current revision's artifact is compiled.",
    },
    {
        "name": "Status",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
        "description": "The Ready condition's reason: ReplicasReady once the current spec is served, else why not.",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Mode",
        "type": "string",
        "jsonPath": ".spec.scaling.mode",
        "priority": 1,
        "description": "Auto or Manual.",
    },
    {
        "name": "Reason",
        "type": "string",
        "jsonPath": ".status.lastScaleReason",
        "priority": 1,
        "description": "Why the replica count last changed.",
    },
]


class _CrdJsonSchema(GenerateJsonSchema):
    """Pydantic's generator, with defaults taken from default factories too.

    Kubernetes applies a schema default only where the parent object exists, so nested objects
    need their own defaults for users to rely on the nested ones.
    """

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            return factory()  # type: ignore[call-arg]
        return schema.get("default", NoDefault)

    def encode_default(self, dft: Any) -> Any:
        if isinstance(dft, BaseModel):
            # An object whose every field has a default is written as {}: the API server then fills
            # the nested defaults, and the CRD stays readable.
            if _all_fields_defaulted(type(dft)) and type(dft)() == dft:
                return {}
            return dft.model_dump(by_alias=True, exclude_none=True, mode="json")
        if isinstance(dft, list) and dft and all(isinstance(item, BaseModel) for item in dft):
            return [item.model_dump(by_alias=True, exclude_none=True, mode="json") for item in dft]
        return super().encode_default(dft)


def _all_fields_defaulted(model: type[BaseModel]) -> bool:
    return all(not field.is_required() for field in model.model_fields.values())


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    """Inline ``$ref``s and translate JSON Schema idioms into structural OpenAPI v3.0."""
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node

    node = dict(node)
    if "$ref" in node:
        target = copy.deepcopy(defs[node.pop("$ref").rsplit("/", 1)[-1]])
        # Field-level keys (the field's description, its default) win over the model's.
        target.update(node)
        node = target
    # Optional[X] arrives as anyOf [X, null]: the API server omits absent fields, so keep X.
    for combinator in ("anyOf", "oneOf"):
        if combinator in node:
            options = [opt for opt in node.pop(combinator) if opt.get("type") != "null"]
            if len(options) != 1:
                raise ValueError(f"cannot express a union of {len(options)} types in a structural schema")
            merged = dict(options[0])
            merged.update(node)
            node = merged
            if "$ref" in node:
                node = _resolve(node, defs)
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "enum" in node and "type" not in node:
        node["type"] = "string"
    for bound, flag in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in node and not isinstance(node[bound], bool):
            node[flag] = node.pop(bound)
            node[bound] = True
    if node.get("type") == "object" and node.get("additionalProperties") is False:
        del node["additionalProperties"]
    if node.get("x-kubernetes-preserve-unknown-fields") and node.get("additionalProperties") is True:
        # A free-form object (dict[str, Any]): a structural schema says so with the extension alone.
        del node["additionalProperties"]
    if node.get("default") is None:
        node.pop("default", None)
    if "required" in node and not node["required"]:
        del node["required"]

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key == "properties":
            out[key] = {name: _resolve(prop, defs) for name, prop in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _resolve(value, defs)
        else:
            out[key] = value
    return out


def _squash_description(node: Any) -> Any:
    """Fold docstring line breaks so `kubectl explain` shows clean paragraphs."""
    if isinstance(node, dict):
        result = {}
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                result[key] = " ".join(value.split())
            else:
                result[key] = _squash_description(value)
        return result
    if isinstance(node, list):
        return [_squash_description(item) for item in node]
    return node


def _said_default(value: Any) -> str | None:
    """A scalar default (or a list of scalars) as `kubectl explain` readers write it; None for an
    object, whose fields say their own."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"{value:g}" if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, list) and all(
        isinstance(item, int | float | str) and not isinstance(item, bool) for item in value
    ):
        return "[" + ", ".join(str(item) for item in value) + "]" if value else "[]"
    return None


def _with_defaults_said(node: Any) -> Any:
    """Each description with its field's default appended (``Default: 15.``) unless it names one
    already: `kubectl explain` prints a field's description, never the schema's ``default``, so the
    README's "everything else has a default" left a reader to guess which."""
    if isinstance(node, list):
        return [_with_defaults_said(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _with_defaults_said(value) for key, value in node.items()}
    said = _said_default(node["default"]) if "default" in node else None
    description = out.get("description")
    if said is not None and isinstance(description, str) and "default" not in description.lower():
        out["description"] = f"{description.rstrip()} Default: {said}."
    return out


def openapi_schema() -> dict[str, Any]:
    """The structural openAPIV3Schema of InferenceDeployment (a copy: callers may change it)."""
    return copy.deepcopy(_openapi_schema())


@functools.cache
def _openapi_schema() -> dict[str, Any]:
    # Built once per process: pydantic takes ~30 ms to generate it, and `neuronfleet validate`,
    # `neuronfleet plan` and the simulator's policy files read it for every manifest they check.
    raw = InferenceDeployment.model_json_schema(by_alias=True, mode="validation", schema_generator=_CrdJsonSchema)
    defs = raw.pop("$defs", {})
    schema: dict[str, Any] = _resolve(raw, defs)
    props = schema["properties"]
    # The API server owns metadata's schema; apiVersion and kind are plain strings on the wire.
    props["metadata"] = {"type": "object"}
    props["apiVersion"] = {"type": "string", "description": props["apiVersion"].get("description", "")}
    props["kind"] = {"type": "string", "description": props["kind"].get("description", "")}
    schema["required"] = ["spec"]
    schema.pop("default", None)
    props["status"].pop("default", None)
    result: dict[str, Any] = _with_defaults_said(_squash_description(schema))
    return result


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition object (apiextensions.k8s.io/v1)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {"app.kubernetes.io/name": "neuronfleet", "app.kubernetes.io/part-of": "neuronfleet"},
            "annotations": {"neuronfleet.dev/generated-by": "neuronfleet crds (from neuronfleet.api.v1alpha1)"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": list(CATEGORIES),
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.scaling.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


def crd_yaml() -> str:
    """The CRD as the YAML committed under crds/ and charts/neuronfleet/crds/."""
    header = (
        "# Generated by `make crds` from operator/neuronfleet/api/v1alpha1.py. Do not edit by hand.\n"
        f"# {API_VERSION} {KIND}\n"
    )
    return header + yaml.safe_dump(crd(), sort_keys=False, width=120, allow_unicode=True)
