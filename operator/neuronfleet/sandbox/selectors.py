"""Label and field selectors: parsing the query-string syntax and matching objects.

Hand-written because no maintained Python library parses Kubernetes selector strings; the grammar
follows ``k8s.io/apimachinery/pkg/labels`` (equality- and set-based) and ``.../fields``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from neuronfleet.api.v1alpha1 import (
    DNS1123_LABEL_MAX_LENGTH,
    DNS1123_SUBDOMAIN_MAX_LENGTH,
    LABEL_VALUE_MAX_LENGTH,
    LABEL_VALUE_PATTERN,
    QUALIFIED_NAME_PATTERN,
)
from neuronfleet.sandbox.errors import ApiError, bad_request
from neuronfleet.sandbox.names import max_length

# The CRD's own label rules (IsQualifiedName, IsValidLabelValue), so a selector and a manifest are
# held to one reading of apimachinery.
_KEY_RE = re.compile(QUALIFIED_NAME_PATTERN)
_VALUE_RE = re.compile(LABEL_VALUE_PATTERN)
_SET_RE = re.compile(r"^\s*(?P<key>[^\s!=()]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_EQ_RE = re.compile(r"^\s*(?P<key>[^\s!=()]+)\s*(?P<op>==|!=|=)\s*(?P<value>[^\s!=(),]*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(?P<neg>!)?\s*(?P<key>[^\s!=()]+)\s*$")


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector: ``key op values``."""

    key: str
    op: str  # "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "in":
            return self.key in labels and labels[self.key] in self.values
        # notin (and !=) also match objects without the key, as in Kubernetes.
        return self.key not in labels or labels[self.key] not in self.values


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(req.matches(labels) for req in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def _split_terms(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    terms: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise bad_request(f"unable to parse requirement: unbalanced ')' in {text!r}")
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise bad_request(f"unable to parse requirement: unbalanced '(' in {text!r}")
    terms.append("".join(current))
    return terms


def _check_key(key: str) -> None:
    """A qualified name, as apimachinery's IsQualifiedName: an optional DNS-subdomain prefix (at
    most 253 characters) and ``/``, then a name of at most 63 (its qualifiedNameMaxLength, the
    DNS label's bound), so at most 317 in all."""
    prefix, _, name = key.rpartition("/")
    problem = ""
    if len(prefix) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        problem = "prefix part " + max_length(DNS1123_SUBDOMAIN_MAX_LENGTH)
    elif len(name) > DNS1123_LABEL_MAX_LENGTH:
        problem = "name part " + max_length(DNS1123_LABEL_MAX_LENGTH)
    elif not _KEY_RE.match(key):
        problem = (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character"
        )
    if problem:
        raise bad_request(f"unable to parse requirement: invalid label key {key!r}: {problem}")


def _check_value(value: str) -> None:
    if len(value) > LABEL_VALUE_MAX_LENGTH or not _VALUE_RE.match(value):
        raise bad_request(
            f"unable to parse requirement: invalid label value: {value!r}: a valid label must be an empty "
            "string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character"
        )


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse ``?labelSelector=``; raise a 400 ApiError on bad syntax."""
    if text is None or not text.strip():
        return LabelSelector()
    requirements: list[Requirement] = []
    for term in _split_terms(text):
        if not term.strip():
            raise bad_request(f"unable to parse requirement: found '', expected: identifier in {text!r}")
        if match := _SET_RE.match(term):
            key = match["key"]
            values = [v.strip() for v in match["values"].split(",")]
            if match["op"] == "in" and values == [""]:
                raise bad_request(
                    f"unable to parse requirement: for 'in' operator, values set can't be empty: {term!r}"
                )
            _check_key(key)
            for value in values:
                _check_value(value)
            requirements.append(Requirement(key, match["op"], frozenset(values)))
        elif match := _EQ_RE.match(term):
            key, value = match["key"], match["value"]
            _check_key(key)
            _check_value(value)
            op = "notin" if match["op"] == "!=" else "in"
            requirements.append(Requirement(key, op, frozenset([value])))
        elif match := _EXISTS_RE.match(term):
            _check_key(match["key"])
            requirements.append(Requirement(match["key"], "!exists" if match["neg"] else "exists"))
        else:
            raise bad_request(f"unable to parse requirement: {term!r} in label selector {text!r}")
    return LabelSelector(tuple(requirements))


def selector_from_dict(spec: Mapping[str, Any] | None) -> LabelSelector:
    """Build a selector from a ``metav1.LabelSelector`` (matchLabels and matchExpressions)."""
    if not spec:
        return LabelSelector()
    requirements = [
        Requirement(str(key), "in", frozenset([str(value)])) for key, value in (spec.get("matchLabels") or {}).items()
    ]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expression in spec.get("matchExpressions") or []:
        op = ops.get(str(expression.get("operator")))
        if op is None:
            raise bad_request(f"unsupported label selector operator {expression.get('operator')!r}")
        requirements.append(Requirement(str(expression.get("key")), op, frozenset(expression.get("values") or [])))
    return LabelSelector(tuple(requirements))


def selector_to_string(spec: Mapping[str, Any] | None) -> str:
    """Render a ``metav1.LabelSelector`` as the query-string form (as status.selector carries it)."""
    parts: list[str] = []
    for req in selector_from_dict(spec).requirements:
        if req.op == "exists":
            parts.append(req.key)
        elif req.op == "!exists":
            parts.append(f"!{req.key}")
        elif req.op == "in" and len(req.values) == 1:
            parts.append(f"{req.key}={next(iter(req.values))}")
        else:
            parts.append(f"{req.key} {req.op} ({','.join(sorted(req.values))})")
    return ",".join(parts)


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    value: str
    negated: bool


@dataclass(frozen=True)
class FieldSelector:
    """A conjunction of ``field=value`` / ``field!=value`` terms on supported field labels."""

    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        for req in self.requirements:
            actual = field_value(obj, req.path)
            if (actual == req.value) == req.negated:
                return False
        return True

    def required_name(self) -> str | None:
        for req in self.requirements:
            if req.path == "metadata.name" and not req.negated:
                return req.value
        return None


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The value of a dotted field path as a string; missing fields read as ''."""
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def parse_field_selector(text: str | None, supported: Iterable[str]) -> FieldSelector:
    """Parse ``?fieldSelector=`` against the field labels ``supported`` by the resource."""
    if text is None or not text.strip():
        return FieldSelector()
    allowed = set(supported)
    requirements: list[FieldRequirement] = []
    for term in text.split(","):
        match = re.match(r"^\s*([^=!\s]+)\s*(==|!=|=)\s*([^,]*?)\s*$", term)
        if not match:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        path, op, value = match.groups()
        if path not in allowed:
            raise bad_request(f"field label not supported: {path}")
        requirements.append(FieldRequirement(path, value, op == "!="))
    return FieldSelector(tuple(requirements))


__all__ = [
    "ApiError",
    "FieldSelector",
    "LabelSelector",
    "Requirement",
    "field_value",
    "parse_field_selector",
    "parse_label_selector",
    "selector_from_dict",
    "selector_to_string",
]
