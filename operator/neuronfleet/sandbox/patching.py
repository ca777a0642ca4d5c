"""The three PATCH flavours of the Kubernetes API: JSON merge, JSON (RFC 6902) and strategic merge.

JSON patch uses the ``jsonpatch`` library. JSON merge patch (RFC 7386) is a few lines. Strategic
merge is hand-written: its semantics come from Go struct tags (``patchStrategy``/``patchMergeKey``)
that no Python library carries, so the merge keys the operator and kubectl rely on are listed in
``STRATEGIC_MERGE_KEYS``. What it does:

- lists of maps merged by key: ``containers``/``initContainers``/``ephemeralContainers``
  (name), their ``env`` (name), ``ports`` (containerPort), ``volumeMounts`` (mountPath);
  pod ``volumes`` and ``imagePullSecrets`` (name); ``status.conditions`` of pods and nodes
  (type); node ``status.addresses`` (type); ``metadata.ownerReferences`` (uid); the same pod-spec
  paths below ``spec.template`` and ``spec.jobTemplate.spec.template``;
- ``metadata.finalizers`` merged as a set of strings (as Kubernetes does);
- directives ``$patch: delete`` (list items and maps), ``$patch: replace``,
  ``$deleteFromPrimitiveList/<field>``; ``$setElementOrder/<field>`` and ``$retainKeys`` are
  accepted and ignored (order of merged items: existing first, new appended);
- every other list is replaced whole, which is also what Kubernetes does for fields without a
  patch strategy (e.g. ``spec.tolerations``, node ``spec.taints``, ``status.containerStatuses``).
Not done: ``patchStrategy: retainKeys`` (pod ``volumes`` sources), ``$setElementOrder`` ordering.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import jsonpointer

from neuronfleet.sandbox.errors import ApiError, bad_request, unprocessable

PRIMITIVE_SET = "<set>"

_POD_SPEC_KEYS: dict[tuple[str, ...], str] = {
    ("containers",): "name",
    ("initContainers",): "name",
    ("ephemeralContainers",): "name",
    ("volumes",): "name",
    ("imagePullSecrets",): "name",
}
for _container_field in ("containers", "initContainers", "ephemeralContainers"):
    _POD_SPEC_KEYS[(_container_field, "env")] = "name"
    _POD_SPEC_KEYS[(_container_field, "ports")] = "containerPort"
    _POD_SPEC_KEYS[(_container_field, "volumeMounts")] = "mountPath"

STRATEGIC_MERGE_KEYS: dict[tuple[str, ...], str] = {
    ("metadata", "finalizers"): PRIMITIVE_SET,
    ("metadata", "ownerReferences"): "uid",
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
}
for _prefix in (("spec",), ("spec", "template", "spec"), ("spec", "jobTemplate", "spec", "template", "spec")):
    for _path, _key in _POD_SPEC_KEYS.items():
        STRATEGIC_MERGE_KEYS[_prefix + _path] = _key


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: dict[str, Any], operations: Any) -> dict[str, Any]:
    """RFC 6902 JSON patch; a failed ``test`` or a missing path answers 422, a malformed patch 400.

    Operations are applied one by one so that a failure names its operation and path in the words
    of the Go library kube-apiserver uses (evanphx/json-patch), never with a dump of the document.
    """
    if not isinstance(operations, list) or not all(isinstance(op, dict) for op in operations):
        raise bad_request("json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp")
    try:
        patches = [jsonpatch.JsonPatch([op]) for op in operations]
    except (jsonpatch.InvalidJsonPatch, jsonpointer.JsonPointerException, TypeError) as exc:
        raise bad_request(f"invalid JSON patch: {exc}") from None
    document: Any = copy.deepcopy(target)
    for operation, patch in zip(operations, patches, strict=True):
        try:
            document = patch.apply(document, in_place=True)
        except (jsonpatch.JsonPatchTestFailed, jsonpatch.JsonPatchConflict, jsonpointer.JsonPointerException):
            failure = _json_patch_failure(document, operation)
            raise unprocessable(f"the server rejected our request due to an error in our request: {failure}") from None
        except (jsonpatch.InvalidJsonPatch, TypeError, KeyError) as exc:
            raise bad_request(f"invalid JSON patch: {exc}") from None
    if not isinstance(document, dict):
        raise unprocessable("the patched document is not an object")
    return document


def _resolves(document: Any, path: str) -> bool:
    try:
        jsonpointer.resolve_pointer(document, path)
    except (jsonpointer.JsonPointerException, TypeError):
        return False
    return True


def _json_patch_failure(document: Any, operation: dict[str, Any]) -> str:
    """Why one operation failed, as evanphx/json-patch (v4) words it."""
    op, path = str(operation.get("op", "")), str(operation.get("path", ""))
    parent, _, key = path.rpartition("/")
    if op == "test":
        return f"testing value {path} failed: test failed"
    if op in ("move", "copy"):
        return f"{op} operation does not apply: doc is missing from path: {operation.get('from', '')}: missing value"
    if not _resolves(document, parent or ""):
        return f'{op} operation does not apply: doc is missing path: "{path}": missing value'
    if op == "remove":
        return f"error in remove for path: '{path}': Unable to remove nonexistent key: {key}: missing value"
    if op == "replace":
        return f"replace operation does not apply: doc is missing key: {path}: missing value"
    return f"{op} operation does not apply: {path}: invalid index or type"


def _without_directives(value: Any) -> Any:
    if isinstance(value, dict):
        # Every key starting with $ is a directive ($patch, $retainKeys, $setElementOrder/...,
        # $deleteFromPrimitiveList/...), never a field.
        return {k: _without_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_without_directives(v) for v in value]
    return value


def _merge_key(path: tuple[str, ...]) -> str | None:
    return STRATEGIC_MERGE_KEYS.get(path)


def strategic_merge_patch(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """Strategic merge patch of ``patch`` onto ``target`` (see the module docstring for coverage)."""
    if not isinstance(patch, dict):
        return _without_directives(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return _without_directives(patch)
    if directive is not None and directive != "merge":
        raise bad_request(f"unknown patch directive {directive!r} at {'.'.join(path) or '<root>'}")
    result: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key == "$patch" or key == "$retainKeys" or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            removed = value if isinstance(value, list) else [value]
            result[field] = [item for item in result.get(field) or [] if item not in removed]
            continue
        if value is None:
            result.pop(key, None)
            continue
        sub = (*path, key)
        if isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
            else:
                result[key] = strategic_merge_patch(result.get(key), value, sub)
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, sub)
        else:
            result[key] = value
    return result


def _merge_list(current: Any, patch: list[Any], path: tuple[str, ...]) -> list[Any]:
    merge_key = _merge_key(path)
    existing: list[Any] = list(current) if isinstance(current, list) else []
    if merge_key is None:
        return [_without_directives(item) for item in patch if not _is_delete(item)]
    if merge_key == PRIMITIVE_SET:
        return existing + [item for item in patch if item not in existing]
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_without_directives(item) for item in patch if not (isinstance(item, dict) and "$patch" in item)]
    for item in patch:
        if not isinstance(item, dict):
            raise bad_request(f"{'.'.join(path)}: list items must be objects keyed by {merge_key!r}")
        key_value = item.get(merge_key)
        index = next(
            (i for i, old in enumerate(existing) if isinstance(old, dict) and old.get(merge_key) == key_value),
            None,
        )
        if _is_delete(item):
            if index is not None:
                existing.pop(index)
            continue
        if index is None:
            existing.append(strategic_merge_patch({}, item, path))
        else:
            existing[index] = strategic_merge_patch(existing[index], item, path)
    return existing


def _is_delete(item: Any) -> bool:
    return isinstance(item, dict) and item.get("$patch") == "delete"


__all__ = ["ApiError", "json_patch", "merge_patch", "strategic_merge_patch"]
