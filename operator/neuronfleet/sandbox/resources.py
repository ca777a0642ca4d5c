"""Resource types the emulated API server serves: built-in kinds and CRDs, with their schemas.

A ``ResourceType`` carries what discovery, OpenAPI, the Table format, subresources and field
selectors need. CRD schemas are turned into JSON Schema for validation (``jsonschema``) and used for
structural defaulting and pruning of unknown fields, as a real apiserver does for CRs.
A whole-number float at an integer field (2.0) is accepted and stored as an integer, as
kube-apiserver does. Repeated items of ``x-kubernetes-list-type`` set and map lists are refused as kube-apiserver's
listtype validation refuses them. A ``pattern`` is matched with RE2, as kube-apiserver matches it
(``$`` is the end of the text, not also before a final newline as in Python's ``re``).
Not done here: CEL ``x-kubernetes-validations`` rules (cel.py).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from neuronfleet.api.validation import (
    KubeSchemaValidator,
    duplicate_items,
    go_value,
    kube_schema_message,
    schema_error_order,
    whole_floats_to_int,
)

COMMON_FIELD_LABELS = frozenset({"metadata.name", "metadata.namespace"})


@dataclass(frozen=True)
class ScaleSpec:
    """Where the scale subresource reads and writes replicas (CRD ``subresources.scale``)."""

    spec_replicas_path: str
    status_replicas_path: str
    label_selector_path: str | None = None


@dataclass
class ResourceType:
    """One served resource (all its versions share one storage, no conversion)."""

    group: str
    versions: list[str]
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status_subresource: bool = False
    scale: ScaleSpec | None = None
    extra_subresources: tuple[str, ...] = ()
    printer_columns: list[dict[str, Any]] = field(default_factory=list)
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    field_labels: frozenset[str] = COMMON_FIELD_LABELS
    custom: bool = False
    verbs: tuple[str, ...] = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def storage_version(self) -> str:
        return self.versions[0]

    def api_version(self, version: str | None = None) -> str:
        version = version or self.storage_version
        return f"{self.group}/{version}" if self.group else version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def subresources(self) -> tuple[str, ...]:
        names: list[str] = []
        if self.status_subresource:
            names.append("status")
        if self.scale is not None:
            names.append("scale")
        names.extend(self.extra_subresources)
        return tuple(names)

    def schema(self, version: str | None = None) -> dict[str, Any] | None:
        return self.schemas.get(version or self.storage_version)

    def names(self) -> set[str]:
        return {self.plural, self.singular or self.kind.lower(), *self.short_names}


def _builtin(
    group: str,
    version: str,
    plural: str,
    kind: str,
    namespaced: bool,
    short_names: Iterable[str] = (),
    status: bool = False,
    extra: Iterable[str] = (),
    field_labels: Iterable[str] = (),
    categories: Iterable[str] = (),
) -> ResourceType:
    return ResourceType(
        group=group,
        versions=[version],
        plural=plural,
        kind=kind,
        namespaced=namespaced,
        singular=kind.lower(),
        short_names=tuple(short_names),
        categories=tuple(categories),
        status_subresource=status,
        extra_subresources=tuple(extra),
        field_labels=COMMON_FIELD_LABELS | frozenset(field_labels),
    )


#: Review kinds are answered, never stored (see ``apiserver``).
REVIEWS = frozenset(
    {("authorization.k8s.io", "selfsubjectaccessreviews"), ("authorization.k8s.io", "subjectaccessreviews")}
)


def _review(plural: str, kind: str) -> ResourceType:
    review = _builtin("authorization.k8s.io", "v1", plural, kind, False)
    review.verbs = ("create",)
    return review


def builtin_resources() -> list[ResourceType]:
    """The built-in kinds the operator, Kopf and kubectl use."""
    event_fields = [
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ]
    return [
        _builtin("", "v1", "namespaces", "Namespace", False, ["ns"], status=True, field_labels=["status.phase"]),
        _builtin(
            "",
            "v1",
            "pods",
            "Pod",
            True,
            ["po"],
            status=True,
            extra=["binding", "eviction", "log"],
            categories=["all"],
            field_labels=[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ],
        ),
        _builtin("", "v1", "nodes", "Node", False, ["no"], status=True, field_labels=["spec.unschedulable"]),
        _builtin("", "v1", "events", "Event", True, ["ev"], field_labels=event_fields),
        _builtin("", "v1", "services", "Service", True, ["svc"], status=True, categories=["all"]),
        _builtin("", "v1", "configmaps", "ConfigMap", True, ["cm"]),
        _builtin("", "v1", "serviceaccounts", "ServiceAccount", True, ["sa"]),
        _builtin("", "v1", "limitranges", "LimitRange", True, ["limits"]),
        _builtin("", "v1", "resourcequotas", "ResourceQuota", True, ["quota"], status=True),
        _builtin("events.k8s.io", "v1", "events", "Event", True, ["ev"], field_labels=["reason", "type"]),
        _builtin("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ["pdb"], status=True),
        _builtin(
            "batch", "v1", "jobs", "Job", True, status=True, categories=["all"], field_labels=["status.successful"]
        ),
        _builtin("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, ["pc"]),
        _builtin("coordination.k8s.io", "v1", "leases", "Lease", True),
        # Stored, but no controller acts on them (so that `helm install` of a chart works).
        _builtin("", "v1", "secrets", "Secret", True, field_labels=["type"]),
        _builtin("apps", "v1", "deployments", "Deployment", True, ["deploy"], status=True, categories=["all"]),
        _builtin("apps", "v1", "replicasets", "ReplicaSet", True, ["rs"], status=True, categories=["all"]),
        _builtin("apps", "v1", "daemonsets", "DaemonSet", True, ["ds"], status=True, categories=["all"]),
        _builtin("apps", "v1", "statefulsets", "StatefulSet", True, ["sts"], status=True, categories=["all"]),
        _builtin("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
        _builtin("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
        _builtin("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
        _builtin("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
        _builtin("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, ["netpol"]),
        _review("selfsubjectaccessreviews", "SelfSubjectAccessReview"),
        _review("subjectaccessreviews", "SubjectAccessReview"),
        _builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            ["crd", "crds"],
            status=True,
        ),
    ]


class CrdError(ValueError):
    """A CRD manifest this server cannot register."""


def resource_from_crd(crd: dict[str, Any]) -> ResourceType:
    """Build the served resource of a ``apiextensions.k8s.io/v1`` CRD."""
    try:
        spec = crd["spec"]
        names = spec["names"]
        group = spec["group"]
        served = [v for v in spec["versions"] if v.get("served", True)]
        plural = names["plural"]
        kind = names["kind"]
    except (KeyError, TypeError) as exc:
        raise CrdError(f"CRD lacks a required field: {exc}") from None
    if not served:
        raise CrdError(f"CRD {plural}.{group} serves no version")
    served.sort(key=lambda v: not v.get("storage", False))
    storage = served[0]
    subresources = storage.get("subresources") or {}
    scale = subresources.get("scale")
    return ResourceType(
        group=group,
        versions=[v["name"] for v in served],
        plural=plural,
        kind=kind,
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        singular=names.get("singular") or kind.lower(),
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        status_subresource="status" in subresources,
        scale=ScaleSpec(scale["specReplicasPath"], scale["statusReplicasPath"], scale.get("labelSelectorPath"))
        if scale
        else None,
        printer_columns=list(storage.get("additionalPrinterColumns") or []),
        schemas={v["name"]: (v.get("schema") or {}).get("openAPIV3Schema") or {"type": "object"} for v in served},
        custom=True,
    )


# ---- structural schema handling -------------------------------------------------------------------


def to_json_schema(schema: Any) -> Any:
    """OpenAPI v3 (Kubernetes flavour) -> JSON Schema draft 4 for ``jsonschema``."""
    if isinstance(schema, list):
        return [to_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("x-kubernetes-validations", "default", "example", "description"):
            continue
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: to_json_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
            out[key] = to_json_schema(value)
        else:
            out[key] = value
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def apply_defaults(value: Any, schema: dict[str, Any] | None) -> Any:
    """Fill in ``default`` values of absent properties, recursively (structural defaulting)."""
    if not schema or value is None:
        return value
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for name, prop in properties.items():
            if name not in value and "default" in prop:
                value[name] = copy.deepcopy(prop["default"])
            if name in value:
                value[name] = apply_defaults(value[name], prop)
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for name in list(value):
                if name not in properties:
                    value[name] = apply_defaults(value[name], additional)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(item, schema["items"]) for item in value]
    return value


def prune_unknown(value: Any, schema: dict[str, Any] | None, path: str, unknown: list[str]) -> Any:
    """Drop fields the schema does not declare (unless it preserves unknown fields); record them."""
    if not schema:
        return value
    if isinstance(value, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        for name in list(value):
            sub = f"{path}.{name}" if path else name
            if properties is not None and name in properties:
                value[name] = prune_unknown(value[name], properties[name], sub, unknown)
            elif isinstance(additional, dict):
                value[name] = prune_unknown(value[name], additional, sub, unknown)
            elif (
                additional is True
                or preserve
                or schema.get("x-kubernetes-embedded-resource")
                or (properties is None and additional is None and schema.get("type") != "object")
            ):
                continue
            else:
                unknown.append(sub)
                del value[name]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune_unknown(item, schema["items"], f"{path}[{i}]", unknown) for i, item in enumerate(value)]
    return value


def validate_custom_object(rt: ResourceType, obj: dict[str, Any]) -> tuple[list[tuple[str, str]], list[str]]:
    """Default, prune and validate a custom object in place.

    Returns (errors as (field, message), unknown field paths, which were pruned).
    """
    schema = rt.schema()
    if not schema:
        return [], []
    apply_defaults(obj, schema)
    unknown: list[str] = []
    for name in list(obj):
        if name in ("apiVersion", "kind", "metadata"):
            continue
        properties = schema.get("properties") or {}
        if name in properties:
            obj[name] = prune_unknown(obj[name], properties[name], name, unknown)
            # kube-apiserver takes 2.0 for an integer field and stores it as 2.
            obj[name] = whole_floats_to_int(obj[name], properties[name])
        elif not schema.get("x-kubernetes-preserve-unknown-fields"):
            unknown.append(name)
            del obj[name]
    errors: list[tuple[str, str]] = []
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    root = to_json_schema({k: v for k, v in schema.items() if k != "properties"})
    root["properties"] = {
        k: to_json_schema(v)
        for k, v in (schema.get("properties") or {}).items()
        if k not in ("apiVersion", "kind", "metadata")
    }
    # Patterns as kube-apiserver matches them (Go's RE2, where '$' is the end of the text).
    validator = KubeSchemaValidator(root)
    for error in sorted(validator.iter_errors(body), key=schema_error_order):
        location = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in error.absolute_path).replace(".[", "[")
        if error.validator == "required":
            # Kubernetes names the missing field itself: "spec: Required value".
            for missing in error.validator_value:
                if isinstance(error.instance, dict) and missing not in error.instance:
                    errors.append((f"{location}.{missing}" if location else missing, "Required value"))
            continue
        if error.validator == "pattern":
            # kube-openapi's own words for a pattern mismatch (jsonschema's are "'x' does not match").
            detail = f"{location} in body should match '{error.validator_value}'"
            errors.append((location, f"Invalid value: {go_value(error.instance)[:200]}: {detail}"))
            continue
        if (message := kube_schema_message(location, error)) is not None:
            errors.append((location, message))
            continue
        errors.append((location, f"Invalid value: {go_value(error.instance)[:200]}: {error.message}"))
    for name, value in body.items():
        sub = (schema.get("properties") or {}).get(name)
        if isinstance(sub, dict):
            errors.extend(duplicate_items(value, sub, name))
    return errors, unknown


def json_path_value(obj: Any, path: str) -> Any:
    """Read a simple JSONPath (``.a.b`` / ``.a[0]``) used by scale subresources; None when absent."""
    current = obj
    for part in path.lstrip(".").replace("[", ".[").split("."):
        if not part:
            continue
        if part.startswith("[") and part.endswith("]"):
            if not isinstance(current, list):
                return None
            index = int(part[1:-1])
            current = current[index] if -len(current) <= index < len(current) else None
        elif isinstance(current, dict):
            current = current.get(part)
        else:
            return None
    return current


def set_json_path(obj: dict[str, Any], path: str, value: Any) -> None:
    """Write ``value`` at a dotted path, creating intermediate objects."""
    parts = [p for p in path.lstrip(".").split(".") if p]
    current = obj
    for part in parts[:-1]:
        nxt = current.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            current[part] = nxt
        current = nxt
    current[parts[-1]] = value
