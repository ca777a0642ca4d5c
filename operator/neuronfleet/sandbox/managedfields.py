"""Field management: ``metadata.managedFields`` and server-side apply, as structured-merge-diff does it.

Every write through the API records which manager owns which fields (``fieldsV1`` sets):
- an **Update** (POST, PUT, any non-apply PATCH) by manager *u* gives *u* the fields it added or
  changed, and takes them from every other manager (no conflicts);
- an **Apply** (PATCH ``application/apply-patch+yaml``) by manager *m* merges *m*'s applied
  configuration into the object; fields *m* applied before and no longer applies are removed
  unless another manager also owns them; a field another manager owns with a different value
  is a conflict (409 listing fields and managers) unless ``force=true``, which takes it over.
Fields are paths of ``f:<name>`` (map keys), ``k:{...}`` (items of associative lists, by their
keys) and ``v:<json>`` (items of sets). List semantics come from the CRD schema's
``x-kubernetes-list-type`` / ``x-kubernetes-list-map-keys``; built-in kinds use the strategic
merge keys of ``patching`` (containers by name, ...); every other list is atomic (owned and
replaced whole), as Kubernetes does for lists without a list type.
Identity fields (apiVersion, kind, name, namespace, uid, ...) are never owned; ``status`` is
owned only through the status subresource of kinds that have one.
Not done: unions, ``x-kubernetes-map-type: atomic``, per-version conversion of field sets.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.patching import PRIMITIVE_SET, STRATEGIC_MERGE_KEYS

Obj = dict[str, Any]
Path = tuple[str, ...]

#: Marks an associative-list item (its own membership, fieldsV1's ".") in a flattened object.
ITEM = object()
_UNOWNED_META = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)


@dataclass(frozen=True)
class Manager:
    """Who writes: the ``fieldManager`` of the request, and through which endpoint."""

    name: str
    api_version: str
    subresource: str | None = None


@dataclass
class Entry:
    """One ``managedFields`` entry: a manager's field set for one operation."""

    manager: str
    operation: str
    api_version: str
    time: str
    fields: set[Path]
    subresource: str | None = None

    @property
    def identity(self) -> tuple[str, str, str | None]:
        return (self.manager, self.operation, self.subresource)

    def to_wire(self) -> Obj:
        wire: Obj = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(self.fields),
        }
        if self.subresource:
            wire["subresource"] = self.subresource
        return wire


class ListTypes:
    """How the lists of one kind merge: from a CRD schema, or the built-in strategic merge keys."""

    def __init__(self, schema: dict[str, Any] | None, builtin: bool) -> None:
        self.schema = schema
        self.builtin = builtin

    def kind(self, schema: dict[str, Any] | None, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        """("atomic" | "set" | "map", map keys) for the list at ``names`` (field names, items skipped)."""
        if schema is not None and not self.builtin:
            list_type = schema.get("x-kubernetes-list-type")
            if list_type == "map":
                return "map", tuple(schema.get("x-kubernetes-list-map-keys") or ())
            if list_type == "set":
                return "set", ()
            return "atomic", ()
        key = STRATEGIC_MERGE_KEYS.get(names)
        if key == PRIMITIVE_SET:
            return "set", ()
        if key is not None:
            return "map", (key,)
        return "atomic", ()


def _child_schema(schema: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    if not schema:
        return None
    properties = schema.get("properties") or {}
    if name in properties:
        child: dict[str, Any] = properties[name]
        return child
    additional = schema.get("additionalProperties")
    return additional if isinstance(additional, dict) else None


def _item_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    items = (schema or {}).get("items")
    return items if isinstance(items, dict) else None


def _token(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _item_token(item: Any, keys: tuple[str, ...]) -> str | None:
    if not isinstance(item, dict) or not keys or not all(k in item for k in keys):
        return None
    return "k:" + _token({k: item[k] for k in keys})


def flatten(obj: Any, types: ListTypes) -> dict[Path, Any]:
    """Leaf path -> value of an object (associative-list items map to ``ITEM``)."""
    out: dict[Path, Any] = {}
    _walk(obj, types.schema, (), (), types, out)
    return out


def _walk(
    value: Any,
    schema: dict[str, Any] | None,
    names: tuple[str, ...],
    path: Path,
    types: ListTypes,
    out: dict[Path, Any],
) -> None:
    if isinstance(value, dict):
        if not value and path:
            out[path] = {}
        for key, child in value.items():
            if child is None:
                continue
            _walk(child, _child_schema(schema, key), (*names, key), (*path, f"f:{key}"), types, out)
        return
    if isinstance(value, list):
        kind, keys = types.kind(schema, names)
        if not value or kind == "atomic":
            out[path] = value
            return
        if kind == "set":
            for item in value:
                out[(*path, "v:" + _token(item))] = item
            return
        tokens = [_item_token(item, keys) for item in value]
        if None in tokens:  # an item without its keys: the list can only be owned whole
            out[path] = value
            return
        for item, token in zip(value, tokens, strict=True):
            assert token is not None
            item_path = (*path, token)
            out[item_path] = ITEM
            _walk(item, _item_schema(schema), names, item_path, types, out)
        return
    out[path] = value


def owned_paths(obj: Obj, types: ListTypes, subresource: str | None, status_subresource: bool) -> dict[Path, Any]:
    """The ownable leaves of ``obj`` written through ``subresource``."""
    result: dict[Path, Any] = {}
    for path, value in _sections(obj, subresource, status_subresource).items():
        # A metadata field has no schema of its own here; every other section has the object's.
        schema = None if path[0] == "metadata" and len(path) == 2 else _child_schema(types.schema, path[0])
        _walk(value, schema, path, tuple(f"f:{name}" for name in path), types, result)
    return result


# ---- fieldsV1 -------------------------------------------------------------------------------------


def to_fields_v1(paths: Iterable[Path]) -> Obj:
    tree: Obj = {}
    for path in sorted(paths):
        node = tree
        for element in path:
            node = node.setdefault(element, {})
        if node:
            node["."] = {}
    _mark_members(tree, set(paths), ())
    return tree


def _mark_members(node: Obj, paths: set[Path], prefix: Path) -> None:
    for key, child in node.items():
        if key == ".":
            continue
        path = (*prefix, key)
        if child and path in paths:
            child["."] = {}
        _mark_members(child, paths, path)


def from_fields_v1(tree: Any, prefix: Path = ()) -> set[Path]:
    paths: set[Path] = set()
    if not isinstance(tree, dict):
        return paths
    if prefix and (not tree or "." in tree):
        paths.add(prefix)
    for key, child in tree.items():
        if key != ".":
            paths |= from_fields_v1(child, (*prefix, key))
    return paths


def path_string(path: Path) -> str:
    """A field path as Kubernetes prints it in conflicts: ``.spec.containers[name="c"].image``."""
    parts: list[str] = []
    for element in path:
        kind, text = element[:2], element[2:]
        if kind == "f:":
            parts.append(f".{text}")
        elif kind == "k:":
            keys = json.loads(text)
            parts.append("[" + ",".join(f"{k}={json.dumps(v)}" for k, v in keys.items()) + "]")
        elif kind == "v:":
            parts.append(f"[={text}]")
        else:
            parts.append(f"[{text}]")
    return "".join(parts)


def read_entries(meta: Obj) -> list[Entry]:
    entries = []
    for raw in meta.get("managedFields") or []:
        if not isinstance(raw, dict) or not raw.get("manager"):
            continue
        entries.append(
            Entry(
                manager=str(raw["manager"]),
                operation=str(raw.get("operation", "Update")),
                api_version=str(raw.get("apiVersion", "")),
                time=str(raw.get("time", "")),
                fields=from_fields_v1(raw.get("fieldsV1") or {}),
                subresource=raw.get("subresource") or None,
            )
        )
    return entries


def write_entries(entries: list[Entry]) -> list[Obj]:
    return [entry.to_wire() for entry in entries if entry.fields]


def _covers(owned: set[Path], path: Path) -> bool:
    """Whether ``owned`` holds ``path`` or a field inside it (owning a map or a list item is not
    owning its fields: only atomic values are owned whole, and they have no fields)."""
    return path in owned or any(p[: len(path)] == path for p in owned)


# ---- Update ---------------------------------------------------------------------------------------


def _sections(obj: Obj, subresource: str | None, status_subresource: bool) -> dict[tuple[str, ...], Any]:
    """The ownable top-level parts of ``obj`` (metadata split per field), by field-name path."""
    sections: dict[tuple[str, ...], Any] = {}
    for key, value in obj.items():
        if key in ("apiVersion", "kind") or value is None:
            continue
        is_status = key == "status"
        if (subresource == "status" and not is_status) or (subresource is None and status_subresource and is_status):
            continue
        if key == "metadata" and isinstance(value, dict):
            for name, field in value.items():
                if name not in _UNOWNED_META and field is not None:
                    sections[(key, name)] = field
            continue
        sections[(key,)] = value
    return sections


def _changes(
    old: Obj | None, new: Obj, types: ListTypes, subresource: str | None, status_subresource: bool
) -> tuple[set[Path], set[Path]]:
    """(added or modified, removed) leaves from ``old`` to ``new``; parts that are equal (often the
    very same dicts, shared by a patch) are not walked."""
    before_parts = _sections(old, subresource, status_subresource) if old is not None else {}
    after_parts = _sections(new, subresource, status_subresource)
    before: dict[Path, Any] = {}
    after: dict[Path, Any] = {}
    for names in before_parts.keys() | after_parts.keys():
        old_value, new_value = before_parts.get(names), after_parts.get(names)
        if old_value is new_value or old_value == new_value:
            continue
        schema = _child_schema(types.schema, names[0]) if len(names) == 1 else None
        path = tuple(f"f:{name}" for name in names)
        if old_value is not None:
            _walk(old_value, schema, names, path, types, before)
        if new_value is not None:
            _walk(new_value, schema, names, path, types, after)
    changed = {p for p, v in after.items() if p not in before or (before[p] is not v and before[p] != v)}
    return changed, set(before) - set(after)


# fieldsV1 trees are edited copy-on-write along the edited paths: the stored object's trees are
# shared, never changed, and neither parsing every entry into sets nor deep-copying big trees is
# paid on each update.


def _tree_node(tree: Obj, path: Path) -> Obj | None:
    node: Any = tree
    for element in path:
        node = node.get(element) if isinstance(node, dict) else None
        if node is None:
            return None
    return node if isinstance(node, dict) else None


def _tree_discard(root: Obj, path: Path, *, with_fields: bool) -> None:
    """Remove ``path`` (and everything under it when ``with_fields``) from the tree ``root``
    (a fresh copy whose children may be shared); nodes left empty go too."""
    if _tree_node(root, path) is None:
        return
    chain = [root]
    node = root
    for element in path[:-1]:
        child = dict(node[element])
        node[element] = child
        chain.append(child)
        node = child
    last = path[-1]
    target = node[last]
    if with_fields or all(k == "." for k in target):
        del node[last]
    elif "." in target:
        node[last] = {k: v for k, v in target.items() if k != "."}
        return
    else:
        return
    for depth in range(len(path) - 1, 0, -1):  # an empty node would read as a member
        parent, key = chain[depth - 1], path[depth - 1]
        if parent.get(key) != {}:
            return
        del parent[key]


def _tree_add(root: Obj, path: Path, copied: set[int]) -> None:
    """Add ``path`` to ``root``; ``copied`` holds the ids of the nodes this edit owns already."""
    node = root
    for depth, element in enumerate(path, 1):
        existing = node.get(element)
        if isinstance(existing, dict) and id(existing) in copied:
            child = existing
        else:
            child = dict(existing) if isinstance(existing, dict) else {}
            copied.add(id(child))
            node[element] = child
        if existing == {} and depth < len(path):
            child["."] = {}  # a member leaf that now has fields too
        node = child
    if any(k != "." for k in node):
        node["."] = {}


def record_update(
    old: Obj | None,
    new: Obj,
    manager: Manager,
    types: ListTypes,
    *,
    status_subresource: bool,
    now: str,
    operation: str = "Update",
) -> list[Obj]:
    """``new``'s managedFields after ``manager`` wrote it over ``old`` (None: a create)."""
    current: list[Obj] = [e for e in _meta(new).get("managedFields") or [] if isinstance(e, dict)]
    changed, removed = _changes(old, new, types, manager.subresource, status_subresource)
    if not changed and not removed:
        return current
    identity = (manager.name, operation, manager.subresource)
    result: list[Obj] = []
    mine: Obj | None = None
    touched = changed | removed
    for raw in current:
        tree = raw.get("fieldsV1") or {}
        is_mine = (raw.get("manager"), raw.get("operation", "Update"), raw.get("subresource") or None) == identity
        if not is_mine and not any(_tree_node(tree, path) is not None for path in touched):
            result.append(raw)  # untouched: shared with the stored object, never edited
            continue
        entry = {**raw, "fieldsV1": dict(tree)}
        if is_mine:
            mine = entry
        else:
            for path in changed:
                _tree_discard(entry["fieldsV1"], path, with_fields=False)
            for path in removed:
                _tree_discard(entry["fieldsV1"], path, with_fields=True)
        result.append(entry)
    if mine is None:
        mine = {"manager": manager.name, "operation": operation, "fieldsV1": {}}
        if manager.subresource:
            mine["subresource"] = manager.subresource
        result.append(mine)
    for path in sorted(removed, key=len, reverse=True):
        _tree_discard(mine["fieldsV1"], path, with_fields=True)
    copied = {id(mine["fieldsV1"])}
    for path in sorted(changed):
        _tree_add(mine["fieldsV1"], path, copied)
    mine.update(apiVersion=manager.api_version, time=now, fieldsType="FieldsV1")
    return [e for e in result if e["fieldsV1"]]


# ---- Apply ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Conflict:
    manager: Entry
    path: Path


def conflict_error(conflicts: list[Conflict]) -> ApiError:
    """409 with kube-apiserver's message and one ``FieldManagerConflict`` cause per field."""

    def who(entry: Entry) -> str:
        name = json.dumps(entry.manager)
        if entry.operation == "Update":
            return f"{name} using {entry.api_version}" + (f" at {entry.time}" if entry.time else "")
        return name

    if len(conflicts) == 1:
        only = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {who(only.manager)}: {path_string(only.path)}"
    else:
        by_manager: dict[str, list[Path]] = {}
        for conflict in conflicts:
            by_manager.setdefault(who(conflict.manager), []).append(conflict.path)
        lines = []
        for name in sorted(by_manager):
            lines.append(f"conflicts with {name}")
            lines.extend(f"- {path_string(p)}" for p in by_manager[name])
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {who(c.manager)}", "field": path_string(c.path)}
        for c in conflicts
    ]
    return ApiError(409, "Conflict", message, {"causes": causes})


def merge_applied(
    live: Any, config: Any, schema: dict[str, Any] | None, names: tuple[str, ...], types: ListTypes
) -> Any:
    """``config`` merged into ``live``: maps recursively, associative lists by key, sets as unions,
    everything else replaced."""
    if isinstance(config, dict):
        result = dict(live) if isinstance(live, dict) else {}
        for key, value in config.items():
            if value is None:
                continue
            result[key] = merge_applied(result.get(key), value, _child_schema(schema, key), (*names, key), types)
        return result
    if isinstance(config, list) and isinstance(live, list):
        kind, keys = types.kind(schema, names)
        if kind == "set":
            return list(live) + [item for item in config if item not in live]
        if kind == "map":
            live_tokens = [_item_token(item, keys) for item in live]
            config_tokens = [_item_token(item, keys) for item in config]
            if None in live_tokens or None in config_tokens:
                return copy.deepcopy(config)
            merged = list(live)
            for item, token in zip(config, config_tokens, strict=True):
                if token in live_tokens:
                    index = live_tokens.index(token)
                    merged[index] = merge_applied(live[index], item, _item_schema(schema), names, types)
                else:
                    merged.append(copy.deepcopy(item))
                    live_tokens.append(token)
            return merged
    return copy.deepcopy(config)


def _remove_path(obj: Any, path: Path) -> None:
    """Delete the field or list item at ``path``; parents it leaves empty go too."""
    if not path or not isinstance(obj, dict | list):
        return
    head, rest = path[0], path[1:]
    if isinstance(obj, dict) and head.startswith("f:"):
        key = head[2:]
        if key not in obj:
            return
        if rest:
            _remove_path(obj[key], rest)
            if obj[key] in ({}, []):
                del obj[key]
        else:
            del obj[key]
        return
    if isinstance(obj, list):
        for index, item in enumerate(obj):
            matches = (head.startswith("v:") and _token(item) == head[2:]) or (
                head.startswith("k:")
                and isinstance(item, dict)
                and all(item.get(k) == v for k, v in json.loads(head[2:]).items())
            )
            if matches:
                if rest:
                    _remove_path(item, rest)
                else:
                    del obj[index]
                return


def apply(
    live: Obj,
    config: Obj,
    manager: Manager,
    types: ListTypes,
    *,
    force: bool,
    status_subresource: bool,
    now: str,
) -> Obj:
    """The object after ``manager`` applies ``config`` to ``live`` (its managedFields included),
    sharing nothing with ``live``, which is left as it was.

    Raises the 409 conflict error unless ``force``.
    """
    config = {k: v for k, v in config.items() if not (k == "status" and status_subresource and not manager.subresource)}
    applied = set(owned_paths(config, types, manager.subresource, status_subresource))
    entries = read_entries(_meta(live))
    identity = (manager.name, "Apply", manager.subresource)
    mine = next((e for e in entries if e.identity == identity), None)
    others = [e for e in entries if e is not mine]

    # Merged into a copy: removing the fields this manager no longer applies edits the result in
    # place, and a part of ``live`` the config leaves alone would be shared with it.
    merged: Obj = merge_applied(copy.deepcopy(live), config, types.schema, (), types)
    merged["metadata"] = copy.deepcopy(_meta(live)) | {
        k: copy.deepcopy(v) for k, v in _meta(merged).items() if k not in _UNOWNED_META
    }
    before = owned_paths(live, types, manager.subresource, status_subresource)
    after = owned_paths(merged, types, manager.subresource, status_subresource)
    changed = {p for p in applied if p in before and after.get(p) != before[p]}
    conflicts = [Conflict(entry, path) for entry in others for path in sorted(changed) if path in entry.fields]
    if conflicts and not force:
        raise conflict_error(conflicts)
    for conflict in conflicts:
        conflict.manager.fields.discard(conflict.path)

    # Fields this manager applied before and applies no more go, unless someone else holds them.
    previous = mine.fields if mine is not None else set()
    kept_by_others = set().union(*(e.fields for e in others)) if others else set()
    removed: list[Path] = []
    # Outermost first: a list item goes whole (its key fields must not go before it is found).
    for path in sorted(previous - applied, key=len):
        if any(path[: len(r)] == r for r in removed) or _covers(applied, path) or _covers(kept_by_others, path):
            continue
        _remove_path(merged, path)
        removed.append(path)

    if mine is None:
        mine = Entry(manager.name, "Apply", manager.api_version, now, set(), manager.subresource)
        entries.append(mine)
    if mine.fields != applied or merged != live:
        mine.time = now
    mine.fields = applied
    mine.api_version = manager.api_version
    merged["metadata"]["managedFields"] = write_entries(entries)
    return merged


def apply_to_new(config: Obj, manager: Manager, types: ListTypes, *, status_subresource: bool, now: str) -> list[Obj]:
    """managedFields of an object created by an apply."""
    applied = set(owned_paths(config, types, manager.subresource, status_subresource))
    return write_entries([Entry(manager.name, "Apply", manager.api_version, now, applied, manager.subresource)])


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}
