"""The sandbox's patch and selector semantics, checked against what kube-apiserver does."""

from __future__ import annotations

import re
from typing import Any

import pytest

from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.patching import json_patch, merge_patch, strategic_merge_patch
from neuronfleet.sandbox.selectors import (
    parse_field_selector,
    parse_label_selector,
    selector_from_dict,
    selector_to_string,
)

POD: dict[str, Any] = {
    "metadata": {"name": "p", "finalizers": ["a"], "labels": {"x": "1"}},
    "spec": {
        "containers": [
            {"name": "server", "image": "s:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
            {"name": "sidecar", "image": "envoy"},
        ],
        "tolerations": [{"key": "t1", "operator": "Exists"}],
    },
    "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]},
}


def test_strategic_merge_merges_keyed_lists_and_replaces_plain_ones() -> None:
    patch = {
        "metadata": {"finalizers": ["b", "a"]},
        "spec": {
            "containers": [
                {"name": "server", "image": "s:2", "env": [{"name": "B", "value": "3"}]},
                {"name": "sidecar", "$patch": "delete"},
            ],
            "tolerations": [{"key": "t2", "operator": "Exists"}],
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    result = strategic_merge_patch(POD, patch)
    assert result["metadata"]["finalizers"] == ["a", "b"]
    assert [c["name"] for c in result["spec"]["containers"]] == ["server"]
    assert result["spec"]["containers"][0]["image"] == "s:2"
    assert result["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}]
    assert result["spec"]["tolerations"] == [{"key": "t2", "operator": "Exists"}]  # no patch strategy: replaced
    assert result["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
    ]
    assert POD["spec"]["containers"][0]["image"] == "s:1"  # the original is untouched


def test_strategic_merge_directives() -> None:
    deleted = strategic_merge_patch(
        POD,
        {
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]},
            "spec": {"$setElementOrder/containers": [{"name": "server"}]},
        },
    )
    assert deleted["metadata"]["finalizers"] == []
    replaced = strategic_merge_patch(POD, {"spec": {"$patch": "replace", "containers": [{"name": "only"}]}})
    assert replaced["spec"] == {"containers": [{"name": "only"}]}
    removed = strategic_merge_patch(POD, {"metadata": {"labels": {"x": None}}})
    assert removed["metadata"]["labels"] == {}
    with pytest.raises(ApiError) as bad:
        strategic_merge_patch(POD, {"spec": {"$patch": "explode"}})
    assert bad.value.code == 400


def test_merge_and_json_patch() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}, "l": [1, 2]}, {"a": {"b": None}, "l": [3]}) == {"a": {"c": 2}, "l": [3]}
    assert json_patch({"a": [1]}, [{"op": "add", "path": "/a/-", "value": 2}]) == {"a": [1, 2]}
    with pytest.raises(ApiError) as failed_test:
        json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 2}])
    assert failed_test.value.code == 422
    with pytest.raises(ApiError) as missing_path:
        json_patch({"a": 1}, [{"op": "remove", "path": "/b"}])
    assert missing_path.value.code == 422
    with pytest.raises(ApiError) as malformed:
        json_patch({"a": 1}, {"op": "add"})
    assert malformed.value.code == 400


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("app=web", {"app": "web"}, True),
        ("app==web,tier", {"app": "web"}, False),
        ("app!=web", {}, True),
        ("app in (web, db)", {"app": "db"}, True),
        ("app notin (web)", {"app": "web"}, False),
        ("!app", {"other": "x"}, True),
        ("example.com/role=gpu", {"example.com/role": "gpu"}, True),
        ("", {"anything": "x"}, True),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert parse_label_selector(selector).matches(labels) is matches


@pytest.mark.parametrize("selector", ["app in (web", "app=we b", "-bad=x", "app in ()", "a,,b", "app=(x)"])
def test_invalid_label_selectors_are_400(selector: str) -> None:
    with pytest.raises(ApiError) as bad:
        parse_label_selector(selector)
    assert bad.value.code == 400


@pytest.mark.parametrize(("selector", "side"), [("app in (web))", "')'"), ("app in ((web)", "'('")])
def test_an_unbalanced_parenthesis_is_named(selector: str, side: str) -> None:
    with pytest.raises(ApiError, match=re.escape(f"unbalanced {side}")):
        parse_label_selector(selector)


def _label_key(prefix_chars: int, name_chars: int) -> str:
    """A label key of a DNS-subdomain prefix and a name of these lengths (no prefix at 0)."""
    labels: list[str] = []
    while sum(len(label) + 1 for label in labels) < prefix_chars:
        labels.append("a" * min(63, prefix_chars - sum(len(label) + 1 for label in labels)))
    prefix = ".".join(labels)
    assert len(prefix) == prefix_chars
    return (f"{prefix}/" if prefix else "") + "n" * name_chars


def test_label_keys_are_bounded_as_kubernetes_bounds_them() -> None:
    # apimachinery's IsQualifiedName: a prefix of at most 253 characters, a name of at most 63. The
    # sandbox bounded the whole key at 316 instead, refusing the longest valid key (317) and taking
    # a 260-character prefix.
    longest = _label_key(253, 63)
    assert len(longest) == 317
    assert parse_label_selector(f"{longest}=x").matches({longest: "x"})
    for key, problem in (
        (_label_key(254, 1), "prefix part must be no more than 253 characters"),
        (_label_key(10, 64), "name part must be no more than 63 characters"),
        (_label_key(0, 64), "name part must be no more than 63 characters"),
    ):
        with pytest.raises(ApiError) as bad:
            parse_label_selector(f"{key}=x")
        assert bad.value.code == 400
        assert problem in str(bad.value)


def test_field_selectors_and_label_selector_objects() -> None:
    fields = parse_field_selector("spec.nodeName=n1,status.phase!=Failed", {"spec.nodeName", "status.phase"})
    assert fields.matches({"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    assert not fields.matches({"spec": {"nodeName": "n2"}, "status": {"phase": "Running"}})
    with pytest.raises(ApiError):
        parse_field_selector("spec.image=x", {"spec.nodeName"})
    spec = {"matchLabels": {"app": "m"}, "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]}
    assert selector_from_dict(spec).matches({"app": "m"})
    assert parse_label_selector(selector_to_string(spec)).matches({"app": "m", "tier": "y"})
    # As status.selector carries it (kubectl scale, an HPA read it): one value in is key=value.
    assert selector_to_string(spec) == "app=m,tier notin (x)"
    wider = {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["y", "x"]}]}
    assert selector_to_string(wider) == "tier in (x,y)"
