"""OpenAPI documents: v3 (the root index and one document per group-version) and v2.

Enough for ``kubectl apply --validate=true`` (it looks for the ``fieldValidation`` query
parameter on the PATCH operation of the kind, then lets the server validate strictly) and for
``kubectl explain`` (schemas with descriptions, found by ``x-kubernetes-group-version-kind``).
Built-in kinds get a minimal open schema; CRDs get their ``openAPIV3Schema``.

``/openapi/v2`` (``swagger_document``) lists every kind as a definition with its
``x-kubernetes-group-version-kind`` and no schema. kubectl 1.34 fetches it in two places: applying
a kind that is not served (it must decode a document before it says "no matches for kind"; without
one it fails to download OpenAPI), and a client-side apply of a built-in kind, whose v3 schema here
names no patch strategies: finding no schema in v2 either, it takes them from its compiled-in types.
Neither reads the definitions (the same message, and the same patch, with none); they are there for
a client that looks a kind up by its group-version-kind in v2.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from neuronfleet.sandbox.resources import ResourceType

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def schema_name(rt: ResourceType, version: str) -> str:
    if not rt.custom:
        group = rt.group.split(".")[0] if rt.group else "core"
        return f"io.k8s.api.{group}.{version}.{rt.kind}"
    return ".".join(reversed(rt.group.split("."))) + f".{version}.{rt.kind}"


def _object_meta_schema() -> dict[str, Any]:
    def string(description: str) -> dict[str, Any]:
        return {"type": "string", "description": description}

    return {
        "type": "object",
        "description": "ObjectMeta is metadata that all persisted resources must have.",
        "properties": {
            "name": string("Name must be unique within a namespace."),
            "generateName": string("Optional prefix used by the server to generate a unique name."),
            "namespace": string("Namespace defines the space within which each name must be unique."),
            "uid": string("UID is the unique in time and space value for this object."),
            "resourceVersion": string("An opaque value that represents the internal version of this object."),
            "generation": {
                "type": "integer",
                "format": "int64",
                "description": "A sequence number representing a specific generation of the desired state.",
            },
            "creationTimestamp": string("CreationTimestamp is when this object was created."),
            "deletionTimestamp": string("RFC 3339 date and time at which this resource will be deleted."),
            "labels": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "Map of string keys and values for organizing and categorizing objects.",
            },
            "annotations": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "Unstructured key value map.",
            },
            "finalizers": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Must be empty before the object is deleted from the registry.",
            },
            "ownerReferences": {
                "type": "array",
                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "description": "Objects depended by this object.",
            },
        },
    }


def _kind_schema(rt: ResourceType, version: str) -> dict[str, Any]:
    gvk = [{"group": rt.group, "version": version, "kind": rt.kind}]
    schema = copy.deepcopy(rt.schema(version)) if rt.custom else None
    if not schema:
        schema = {
            "type": "object",
            "description": f"{rt.kind} ({rt.api_version(version)}), served by the neuronfleet sandbox.",
            "properties": {
                "apiVersion": {
                    "type": "string",
                    "description": "APIVersion defines the versioned schema of this representation of an object.",
                },
                "kind": {
                    "type": "string",
                    "description": "Kind is a string value representing the REST resource this object represents.",
                },
                "spec": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "description": "Desired state.",
                },
                "status": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "description": "Observed state.",
                },
            },
        }
    properties = schema.setdefault("properties", {})
    properties["metadata"] = {
        "description": "Standard object's metadata.",
        "allOf": [{"$ref": f"#/components/schemas/{OBJECT_META}"}],
    }
    schema["x-kubernetes-group-version-kind"] = gvk
    return schema


def _operation(rt: ResourceType, version: str, verb: str, ref: str, with_validation: bool) -> dict[str, Any]:
    parameters: list[dict[str, Any]] = [
        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
    ]
    if with_validation:
        parameters.append({"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}})
    return {
        "operationId": f"{verb}{rt.kind}",
        "x-kubernetes-action": verb,
        "x-kubernetes-group-version-kind": {"group": rt.group, "version": version, "kind": rt.kind},
        "parameters": parameters,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": ref}}}}},
    }


def group_version_document(group: str, version: str, resources: list[ResourceType]) -> dict[str, Any]:
    schemas: dict[str, Any] = {OBJECT_META: _object_meta_schema()}
    paths: dict[str, Any] = {}
    prefix = "/" + gv_path(group, version)
    for rt in resources:
        name = schema_name(rt, version)
        schemas[name] = _kind_schema(rt, version)
        ref = f"#/components/schemas/{name}"
        base = f"{prefix}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{prefix}/{rt.plural}"
        paths[base] = {
            "get": _operation(rt, version, "list", ref, False),
            "post": _operation(rt, version, "post", ref, True),
        }
        paths[f"{base}/{{name}}"] = {
            "get": _operation(rt, version, "get", ref, False),
            "put": _operation(rt, version, "put", ref, True),
            "patch": _operation(rt, version, "patch", ref, True),
            "delete": _operation(rt, version, "delete", ref, False),
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (neuronfleet sandbox)", "version": "v1.34.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def document_hash(document: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:32].upper()


def swagger_document(resources: list[ResourceType]) -> dict[str, Any]:
    """The swagger 2.0 document of ``/openapi/v2``: one schema-less definition per served kind and version."""
    definitions: dict[str, Any] = {}
    for rt in resources:
        for version in rt.versions:
            definitions[schema_name(rt, version)] = {
                "description": f"{rt.kind} ({rt.api_version(version)}), served by the neuronfleet sandbox.",
                "x-kubernetes-group-version-kind": [{"group": rt.group, "kind": rt.kind, "version": version}],
            }
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes (neuronfleet sandbox)", "version": "v1.34.0"},
        "paths": {},
        "definitions": definitions,
    }
