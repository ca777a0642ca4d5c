"""What the sandbox API server prunes from a custom object, as kube-apiserver prunes by a structural
schema: a field no ``properties`` declares goes (and is named, for a warning or, strict, an error),
unless the node keeps unknown fields (``additionalProperties``, ``x-kubernetes-preserve-unknown-fields``);
an ``object`` with neither properties nor additionalProperties keeps no field at all."""

from __future__ import annotations

from typing import Any

from neuronfleet.sandbox.resources import prune_unknown

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "declared": {"type": "object", "properties": {"size": {"type": "integer"}}},
        "closed": {"type": "object"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def test_a_structural_schema_prunes_what_it_does_not_declare_and_names_it() -> None:
    value = {
        "declared": {"size": 3, "colour": "red"},
        "closed": {"anything": 1},
        "labels": {"team": "ml"},
        "free": {"anything": {"nested": 1}},
        "typo": True,
    }
    unknown: list[str] = []
    pruned = prune_unknown(value, SCHEMA, "spec", unknown)
    assert pruned == {
        "declared": {"size": 3},
        "closed": {},
        "labels": {"team": "ml"},
        "free": {"anything": {"nested": 1}},
    }
    assert sorted(unknown) == ["spec.closed.anything", "spec.declared.colour", "spec.typo"]
