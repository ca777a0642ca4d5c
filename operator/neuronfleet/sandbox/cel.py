"""CRD validation rules (``x-kubernetes-validations``) evaluated with ``cel-python``.

Each rule runs where it is declared in the schema, with ``self`` bound to the value there (only
when that value is present), and ``oldSelf`` on updates; rules that mention ``oldSelf`` are
transition rules and are skipped on create, as in Kubernetes. On updates, a rule that is not a
transition rule is skipped where the value is unchanged: Kubernetes (CRD validation ratcheting,
GA in 1.33; the sandbox serves 1.34) ignores its errors there, so an object that an older CRD let
in can still have its status written. A rule cel-python cannot compile or evaluate
(Kubernetes-only CEL libraries such as ``quantity()`` or ``format``) is skipped rather than
rejecting valid objects; compiled programs are cached per rule text, and a value is converted to
CEL once for all the rules declared where it sits (the whole object, with a status that carries
the autoscaler's history, is the costly one).
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

import celpy
from celpy.adapter import json_to_cel

from neuronfleet.api.validation import cel_value

log = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def _environment() -> celpy.Environment:
    """Built on first use: building its parser takes about half a second, which every command of
    the CLI paid at import (the CLI imports each command's module to list it), CEL or not."""
    return celpy.Environment()


@lru_cache(maxsize=512)
def _program(rule: str) -> Any:
    env = _environment()
    try:
        return env.program(env.compile(rule))
    except Exception as exc:  # celpy raises several unrelated types for unsupported syntax
        log.debug("sandbox: CEL rule %r not compiled: %s", rule, exc)
        return None


class _Bindings:
    """``self`` and ``oldSelf`` for the rules of one schema node, converted to CEL on first use."""

    def __init__(self, value: Any, old: Any, schema: dict[str, Any]) -> None:
        self.value, self.old, self.schema = value, old, schema
        self._activation: dict[str, Any] | None = None

    def activation(self) -> dict[str, Any]:
        # As the API server: a `number` field holding 300 is the double 300.0 to CEL, or a rule
        # comparing it with a double fails to evaluate (and was skipped here).
        if self._activation is None:
            self._activation = {"self": json_to_cel(cel_value(self.value, self.schema))}
            if self.old is not None:
                self._activation["oldSelf"] = json_to_cel(cel_value(self.old, self.schema))
        return self._activation


def _evaluate(rule: str, bindings: _Bindings) -> bool | None:
    program = _program(rule)
    if program is None:
        return None
    activation = bindings.activation()
    try:
        result = program.evaluate(activation)
    except Exception as exc:
        log.debug("sandbox: CEL rule %r not evaluated: %s", rule, exc)
        return None
    if isinstance(result, Exception):
        return None
    return bool(result)


def _openapi_type(schema: dict[str, Any], value: Any) -> str:
    """The schema type Kubernetes names in a CEL rule's error (``Invalid value: "object"``)."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return declared
    if isinstance(value, bool):
        return "boolean"
    for python_type, name in ((dict, "object"), (list, "array"), (str, "string"), (int, "integer"), (float, "number")):
        if isinstance(value, python_type):
            return name
    return "object"


def check_rules(schema: dict[str, Any] | None, value: Any, old: Any, path: str) -> list[tuple[str, str]]:
    """(field, message) for every rule that evaluates to false, walking schema and value."""
    if not schema or value is None:
        return []
    failures: list[tuple[str, str]] = []
    bindings = _Bindings(value, old, schema)
    rules = schema.get("x-kubernetes-validations") or []
    unchanged = bool(rules) and old is not None and value == old
    for rule in rules:
        text = str(rule.get("rule", ""))
        transition = "oldSelf" in text
        if (transition and old is None) or (unchanged and not transition):
            continue
        if _evaluate(text, bindings) is False:
            field = path + str(rule.get("fieldPath", "")) if rule.get("fieldPath") else path
            message = rule.get("message") or f"failed rule: {text}"
            # A rule at the root with no fieldPath: the API server names the field "<nil>".
            failures.append(
                (field.lstrip(".") or "<nil>", f'Invalid value: "{_openapi_type(schema, value)}": {message}')
            )
    if isinstance(value, dict):
        for name, prop in (schema.get("properties") or {}).items():
            if name in value:
                old_child = old.get(name) if isinstance(old, dict) else None
                failures.extend(check_rules(prop, value[name], old_child, f"{path}.{name}"))
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for name, child in value.items():
                if name not in (schema.get("properties") or {}):
                    failures.extend(check_rules(additional, child, None, f"{path}[{name}]"))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            failures.extend(check_rules(schema["items"], item, None, f"{path}[{index}]"))
    return failures
