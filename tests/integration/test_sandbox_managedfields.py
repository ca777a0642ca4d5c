"""Field management rules of the sandbox (``sandbox.managedfields``), checked against what
structured-merge-diff does in kube-apiserver: ownership, removal, conflicts, list semantics."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.managedfields import (
    ListTypes,
    Manager,
    apply,
    apply_to_new,
    from_fields_v1,
    record_update,
    to_fields_v1,
)

BUILTIN = ListTypes(None, builtin=True)
KUBECTL = Manager("kubectl", "apps/v1")
NOW = "2026-01-01T00:00:00Z"


def deployment(containers: list[dict[str, Any]], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", **meta},
        "spec": {"replicas": 2, "template": {"spec": {"containers": containers}}},
    }


def applied(config: dict[str, Any], live: dict[str, Any] | None = None, manager: Manager = KUBECTL, **kw: Any) -> Any:
    if live is None:
        live = copy.deepcopy(config)
        live["metadata"]["managedFields"] = apply_to_new(config, manager, BUILTIN, status_subresource=True, now=NOW)
        return live
    return apply(live, config, manager, BUILTIN, status_subresource=True, now=NOW, force=kw.get("force", False))


def owned(obj: dict[str, Any], manager: str, operation: str = "Apply") -> dict[str, Any]:
    entry = next(e for e in obj["metadata"]["managedFields"] if (e["manager"], e["operation"]) == (manager, operation))
    fields: dict[str, Any] = entry["fieldsV1"]
    return fields


def test_list_items_a_manager_stops_applying_go_whole() -> None:
    first = deployment(
        [
            {"name": "main", "image": "nginx:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
            {"name": "side", "image": "envoy:1"},
        ]
    )
    live = applied(first)
    second = deployment([{"name": "main", "image": "nginx:1", "env": [{"name": "A", "value": "1"}]}])
    result = applied(second, live)
    assert result["spec"]["template"]["spec"]["containers"] == [
        {"name": "main", "image": "nginx:1", "env": [{"name": "A", "value": "1"}]}
    ]
    containers = owned(result, "kubectl")["f:spec"]["f:template"]["f:spec"]["f:containers"]
    assert list(containers) == ['k:{"name":"main"}']
    assert containers['k:{"name":"main"}']["."] == {}


def test_an_update_takes_fields_over_and_apply_then_conflicts() -> None:
    live = applied(deployment([{"name": "main", "image": "nginx:1"}]))
    patched = copy.deepcopy(live)
    patched["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    patched["metadata"]["managedFields"] = record_update(
        live, patched, Manager("kubectl-set", "apps/v1"), BUILTIN, status_subresource=True, now=NOW
    )
    image = ("f:spec", "f:template", "f:spec", "f:containers", 'k:{"name":"main"}', "f:image")
    assert image in from_fields_v1(owned(patched, "kubectl-set", "Update"))
    assert image not in from_fields_v1(owned(patched, "kubectl"))

    with pytest.raises(ApiError) as refused:
        applied(deployment([{"name": "main", "image": "nginx:1"}]), patched)
    assert refused.value.code == 409
    assert refused.value.message == (
        'Apply failed with 1 conflict: conflict with "kubectl-set" using apps/v1 at 2026-01-01T00:00:00Z: '
        '.spec.template.spec.containers[name="main"].image'
    )
    assert refused.value.details is not None
    assert refused.value.details["causes"][0]["reason"] == "FieldManagerConflict"

    # The same value is no conflict: both own it.
    shared = applied(deployment([{"name": "main", "image": "nginx:2"}]), patched)
    assert image in from_fields_v1(owned(shared, "kubectl-set", "Update"))
    assert image in from_fields_v1(owned(shared, "kubectl"))


def test_several_conflicts_are_listed_per_manager() -> None:
    live = applied(deployment([{"name": "main", "image": "a"}], labels={"x": "1", "y": "2"}))
    rival = Manager("argocd", "apps/v1")
    config = deployment([{"name": "main", "image": "b"}], labels={"x": "9", "y": "8"})
    with pytest.raises(ApiError) as refused:
        applied(config, live, rival)
    assert refused.value.message == (
        'Apply failed with 3 conflicts: conflicts with "kubectl"\n- .metadata.labels.x\n- .metadata.labels.y\n'
        '- .spec.template.spec.containers[name="main"].image'
    )
    forced = applied(config, live, rival, force=True)
    assert forced["metadata"]["labels"] == {"x": "9", "y": "8"}
    assert "f:labels" not in owned(forced, "kubectl").get("f:metadata", {})


def test_sets_and_atomic_lists() -> None:
    live = applied(deployment([{"name": "main", "image": "a"}], finalizers=["a", "b"]))
    assert owned(live, "kubectl")["f:metadata"]["f:finalizers"] == {'v:"a"': {}, 'v:"b"': {}}
    live["spec"]["template"]["spec"]["tolerations"] = [{"key": "t"}]
    result = applied(deployment([{"name": "main", "image": "a"}], finalizers=["a"]), live)
    assert result["metadata"]["finalizers"] == ["a"]
    # A list without a list type is one field, replaced whole.
    config = deployment([{"name": "main", "image": "a"}])
    config["spec"]["template"]["spec"]["tolerations"] = [{"key": "u"}]
    result = applied(config, result)
    assert result["spec"]["template"]["spec"]["tolerations"] == [{"key": "u"}]
    assert owned(result, "kubectl")["f:spec"]["f:template"]["f:spec"]["f:tolerations"] == {}


def test_status_is_not_applied_through_the_main_resource() -> None:
    config = deployment([{"name": "main", "image": "a"}])
    config["status"] = {"replicas": 7}
    managed = apply_to_new(config, KUBECTL, BUILTIN, status_subresource=True, now=NOW)
    assert "f:status" not in managed[0]["fieldsV1"]


def test_fields_v1_round_trip_marks_members_with_a_dot() -> None:
    paths = {("f:metadata", "f:labels"), ("f:metadata", "f:labels", "f:a"), ("f:spec", "f:replicas")}
    tree = to_fields_v1(paths)
    assert tree == {"f:metadata": {"f:labels": {".": {}, "f:a": {}}}, "f:spec": {"f:replicas": {}}}
    assert from_fields_v1(tree) == paths
