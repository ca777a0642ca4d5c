"""The object store behind the emulated API server: CRUD, watch history, finalizers and GC.

Everything runs in one asyncio loop and no method awaits, so each call is atomic without locks.
Stored objects are treated as immutable: every write stores a new dict and edits none of the stored
one's parts (a patch result, which may share them, is committed as a copy), so readers (watch
events, list results) can share them without copying. Callers must not mutate what they get back.
A dry-run write runs the same checks and admission and answers the would-be object, changing nothing.

Semantics kept from kube-apiserver: one global resourceVersion counter; uid, generation (bumped
when anything but metadata/status changes), creationTimestamp; optimistic concurrency (409);
status-subresource isolation; finalizers and deletionTimestamp; graceful pod deletion (the kubelet
finishes it; a second DELETE may only shorten it); namespace lifecycle (create needs an existing
namespace, deleting one deletes its contents); cascading garbage collection by ownerReferences
(Background; Foreground keeps the owner, with the foregroundDeletion finalizer, until no dependent
that blocks it with blockOwnerDeletion is left, and a dependent with dependents of its own goes in
the foreground too; Orphan strips the ownerReference); a bounded event history for watch resume,
with 410 Gone below it; CRD objects register their resource when created.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import random
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from neuronfleet.sandbox import errors, managedfields
from neuronfleet.sandbox.cel import check_rules
from neuronfleet.sandbox.clock import Clock
from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.managedfields import Manager
from neuronfleet.sandbox.names import name_problems
from neuronfleet.sandbox.nodes import pod_has_ended, quantity
from neuronfleet.sandbox.quotas import (
    format_quantity,
    namespace_quota_usage,
    pod_in_quota_scopes,
    pod_quota_usage,
    quantity_decode_error,
    quota_constraint_problem,
    quota_hard_problems,
    quota_scope_problems,
    quota_tracks_for_pods,
)
from neuronfleet.sandbox.resources import (
    CrdError,
    ResourceType,
    builtin_resources,
    resource_from_crd,
    validate_custom_object,
)
from neuronfleet.sandbox.selectors import FieldSelector, LabelSelector

Obj = dict[str, Any]
ResourceKey = tuple[str, str]
ObjectKey = tuple[str, str]  # (namespace or "", name)
Replay = list[tuple[str, Obj]]
Contents = list[tuple["ResourceType", Obj]]
#: Texts for the response's Warning headers (Store.list shadows the builtin inside the class).
Warnings = list[str]
Causes = list[tuple[str, str]]

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
NAMESPACES: tuple[str, str] = ("", "namespaces")
CRDS: tuple[str, str] = ("apiextensions.k8s.io", "customresourcedefinitions")


@dataclass(frozen=True)
class WatchEvent:
    """One change: ``obj`` after it (the last state for DELETED), ``old`` before it."""

    rv: int
    resource: ResourceKey
    type: str
    obj: Obj
    old: Obj | None


class Watcher:
    """A watch stream's subscription: filters events and queues them for the HTTP response."""

    def __init__(self, rt: ResourceType, namespace: str | None, labels: LabelSelector, fields: FieldSelector) -> None:
        self.rt = rt
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.queue: asyncio.Queue[tuple[str, Obj]] = asyncio.Queue()

    def matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels")) and self.fields.matches(obj)

    def translate(self, event: WatchEvent) -> tuple[str, Obj] | None:
        """The event as this watcher sees it: selector changes turn MODIFIED into ADDED/DELETED."""
        if event.resource != self.rt.key:
            return None
        now = self.matches(event.obj)
        if event.type == "ADDED":
            return ("ADDED", event.obj) if now else None
        if event.type == "DELETED":
            return ("DELETED", event.obj) if now else None
        before = self.matches(event.old)
        if now and before:
            return ("MODIFIED", event.obj)
        if now:
            return ("ADDED", event.obj)
        if before:
            return ("DELETED", event.obj)
        return None

    def offer(self, event: WatchEvent) -> None:
        translated = self.translate(event)
        if translated is not None:
            self.queue.put_nowait(translated)


def _meta(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


class Store:
    """In-memory objects of all resources, with the apiserver's write semantics."""

    def __init__(self, clock: Clock, *, history_size: int = 20000, seed: int = 0) -> None:
        self.clock = clock
        self.random = random.Random(seed)
        self.resources: dict[ResourceKey, ResourceType] = {}
        self.objects: dict[ResourceKey, dict[ObjectKey, Obj]] = {}
        self.uids: dict[str, tuple[ResourceKey, ObjectKey]] = {}
        self.owned: dict[str, set[tuple[ResourceKey, ObjectKey]]] = {}
        self.rv = 0
        #: Events up to this resourceVersion have left the history: watches from before get 410.
        self.floor_rv = 0
        self.history: deque[WatchEvent] = deque(maxlen=history_size)
        self.watchers: set[Watcher] = set()
        self.listeners: list[Callable[[WatchEvent], None]] = []
        #: When a kubelet runs, deleting a bound pod only marks it; the kubelet removes it.
        self.graceful_pods = False
        for rt in builtin_resources():
            self.register(rt)
        for name in INITIAL_NAMESPACES:
            self.create(self.resource("", "namespaces"), None, {"metadata": {"name": name}})

    # ---- resource registry -------------------------------------------------------------------

    def register(self, rt: ResourceType) -> None:
        self.resources[rt.key] = rt
        self.objects.setdefault(rt.key, {})

    def unregister(self, key: ResourceKey) -> None:
        for obj in list(self.objects.get(key, {}).values()):
            self.uids.pop(_meta(obj).get("uid", ""), None)
            self._index_owners(
                key, self._key(self.resources[key], _meta(obj).get("namespace"), _meta(obj)["name"]), obj, None
            )
        self.resources.pop(key, None)
        self.objects.pop(key, None)

    def resource(self, group: str, plural: str) -> ResourceType:
        try:
            return self.resources[(group, plural)]
        except KeyError:
            raise errors.resource_not_found(f"{group}/{plural}") from None

    def find(self, group: str, version: str, plural: str) -> ResourceType | None:
        rt = self.resources.get((group, plural))
        if rt is None or version not in rt.versions:
            return None
        return rt

    def register_crd(self, crd: Obj) -> Obj:
        """Create (or replace) a CRD object, which registers its resource."""
        crd_rt = self.resource("apiextensions.k8s.io", "customresourcedefinitions")
        name = _meta(crd).get("name", "")
        existing = self.objects[crd_rt.key].get(("", name))
        if existing is None:
            return self.create(crd_rt, None, crd)
        body = copy.deepcopy(crd)
        body.setdefault("metadata", {})["resourceVersion"] = _meta(existing)["resourceVersion"]
        return self.replace(crd_rt, None, name, body)

    def _crd_accepted(self, crd: Obj, *, register: bool = True) -> Obj:
        try:
            rt = resource_from_crd(crd)
        except CrdError as exc:
            raise errors.invalid(
                "CustomResourceDefinition", "apiextensions.k8s.io", _meta(crd).get("name", ""), [("spec", str(exc))]
            ) from None
        expected = f"{rt.plural}.{rt.group}"
        if _meta(crd).get("name") != expected:
            raise errors.invalid(
                "CustomResourceDefinition",
                "apiextensions.k8s.io",
                _meta(crd).get("name", ""),
                [
                    (
                        "metadata.name",
                        f'Invalid value: "{_meta(crd).get("name")}": must be spec.names.plural+"."+spec.group',
                    )
                ],
            )
        previous = self.resources.get(rt.key)
        if previous is not None and not previous.custom:
            raise errors.invalid(
                "CustomResourceDefinition",
                "apiextensions.k8s.io",
                expected,
                [("spec.names.plural", f"Invalid value: {rt.plural!r}: the name of a built-in resource")],
            )
        if register:
            self.register(rt)
        crd = copy.deepcopy(crd)
        names = crd["spec"]["names"]
        crd["status"] = {
            "acceptedNames": {
                "kind": names["kind"],
                "listKind": names.get("listKind", f"{names['kind']}List"),
                "plural": names["plural"],
                "singular": names.get("singular", names["kind"].lower()),
                **({"shortNames": names["shortNames"]} if names.get("shortNames") else {}),
                **({"categories": names["categories"]} if names.get("categories") else {}),
            },
            "conditions": [
                {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": self.clock.timestamp()}
                for t, r, m in (
                    ("NamesAccepted", "NoConflicts", "no conflicts found"),
                    ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
                )
            ],
            "storedVersions": [rt.storage_version],
        }
        return crd

    # ---- reads ---------------------------------------------------------------------------------

    def _key(self, rt: ResourceType, namespace: str | None, name: str) -> ObjectKey:
        return ((namespace or "") if rt.namespaced else "", name)

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self.objects[rt.key].get(self._key(rt, namespace, name))
        if obj is None:
            raise errors.not_found(rt.plural, rt.group, name)
        return obj

    def try_get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        return self.objects[rt.key].get(self._key(rt, namespace, name))

    def iter(self, rt: ResourceType, namespace: str | None = None) -> Iterator[Obj]:
        for (ns, _), obj in self.objects[rt.key].items():
            if namespace is None or ns == namespace:
                yield obj

    def list(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
    ) -> tuple[list[Obj], int]:
        items = [
            obj
            for obj in self.iter(rt, namespace if rt.namespaced else None)
            if (labels is None or labels.matches(_meta(obj).get("labels"))) and (fields is None or fields.matches(obj))
        ]
        items.sort(key=lambda o: (_meta(o).get("namespace", ""), _meta(o).get("name", "")))
        return items, self.rv

    # ---- watch ---------------------------------------------------------------------------------

    def watch(self, watcher: Watcher, since: int | None) -> Replay:
        """Subscribe ``watcher``; return the events to replay first.

        ``since`` None: synthetic ADDED for every current object (no resourceVersion given, or
        "0"). Otherwise every held event newer than ``since``; 410 if older events were dropped.
        """
        replay: Replay = []
        if since is None:
            items, _ = self.list(watcher.rt, watcher.namespace, watcher.labels, watcher.fields)
            replay = [("ADDED", obj) for obj in items]
        else:
            if since < self.floor_rv:
                raise errors.gone(f"too old resource version: {since} ({self.floor_rv})")
            for event in self.history:
                if event.rv > since:
                    translated = watcher.translate(event)
                    if translated is not None:
                        replay.append(translated)
        self.watchers.add(watcher)
        return replay

    def unwatch(self, watcher: Watcher) -> None:
        self.watchers.discard(watcher)

    def _emit(self, rt: ResourceType, type_: str, obj: Obj, old: Obj | None) -> None:
        event = WatchEvent(self.rv, rt.key, type_, obj, old)
        if len(self.history) == self.history.maxlen:
            self.floor_rv = self.history[0].rv
        self.history.append(event)
        for watcher in list(self.watchers):
            watcher.offer(event)
        for listener in list(self.listeners):
            listener(event)

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    # ---- writes --------------------------------------------------------------------------------

    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        body: Any,
        *,
        strict: bool = False,
        dry_run: bool = False,
        manager: Manager | None = None,
        applied: bool = False,
        warnings: Warnings | None = None,
    ) -> Obj:
        """POST: admit and store ``body``; with ``dry_run`` only admit it (nothing stored, no event).

        ``manager`` (API writes) records the creator in managedFields, as an Apply when ``applied``
        (a server-side apply of an absent object); pruned unknown fields go to ``warnings``.
        """
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        obj: Obj = copy.deepcopy(body)
        self._check_type(rt, obj)
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if namespace is None:
                raise errors.method_not_allowed(f"{rt.plural} is namespaced: create it under /namespaces/<namespace>/")
            if body_ns and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
            ns_rt = self.resources[("", "namespaces")]
            ns_obj = self.objects[ns_rt.key].get(("", namespace))
            if ns_obj is None:
                raise errors.not_found("namespaces", "", namespace)
            if _meta(ns_obj).get("deletionTimestamp"):
                raise errors.forbidden(
                    f'{rt.plural} "{meta.get("name", "")}" is forbidden: unable to create new content in '
                    f"namespace {namespace} because it is being terminated"
                )
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise errors.invalid(
                    rt.kind, rt.group, "", [("metadata.name", "Required value: name or generateName is required")]
                )
            meta["name"] = prefix + "".join(self.random.choice(_GENERATE_ALPHABET) for _ in range(5))
        name = meta["name"]
        bad_name = name_problems(rt.key, name)
        if bad_name and not rt.custom:
            raise errors.invalid(rt.kind, rt.group, str(name), bad_name)
        key = self._key(rt, namespace, name)
        if key in self.objects[rt.key]:
            raise errors.already_exists(rt.plural, rt.group, name)
        for field_name in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field_name, None)
        meta["uid"] = str(uuid.UUID(int=self.random.getrandbits(128), version=4))
        meta["creationTimestamp"] = self.clock.timestamp()
        meta["generation"] = 1
        if rt.status_subresource and rt.custom:
            obj.pop("status", None)
        # A custom resource's name problems are reported with its schema and CEL ones, as the CR strategy does.
        obj = self._admit(rt, obj, None, strict=strict, dry_run=dry_run, warnings=warnings, name_errors=bad_name)
        meta = obj["metadata"]
        if manager is not None:
            managed = (
                managedfields.apply_to_new(
                    body,
                    manager,
                    self.list_types(rt),
                    status_subresource=rt.status_subresource,
                    now=meta["creationTimestamp"],
                )
                if applied
                else managedfields.record_update(
                    None,
                    obj,
                    manager,
                    self.list_types(rt),
                    status_subresource=rt.status_subresource,
                    now=meta["creationTimestamp"],
                )
            )
            _set_managed_fields(meta, managed)
        if dry_run:
            return obj
        meta["resourceVersion"] = self._next_rv()
        self.objects[rt.key][key] = obj
        self.uids[meta["uid"]] = (rt.key, key)
        self._index_owners(rt.key, key, None, obj)
        self._emit(rt, "ADDED", obj, None)
        return obj

    def replace(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        subresource: str | None = None,
        strict: bool = False,
        dry_run: bool = False,
        manager: Manager | None = None,
        warnings: Warnings | None = None,
    ) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        old = self.get(rt, namespace, name)
        self._check_type(rt, body)
        meta = body.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise errors.bad_request("the name of the object does not match the name on the URL")
        given_rv = meta.get("resourceVersion")
        if given_rv in (None, "") and rt.custom:
            raise errors.invalid(
                rt.kind,
                rt.group,
                name,
                [("metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update")],
            )
        if given_rv not in (None, "") and str(given_rv) != _meta(old)["resourceVersion"]:
            raise errors.conflict(rt.plural, rt.group, name)
        return self._commit(
            rt,
            old,
            copy.deepcopy(body),
            subresource=subresource,
            strict=strict,
            dry_run=dry_run,
            manager=manager,
            warnings=warnings,
        )

    def update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        mutate: Callable[[Obj], None],
        *,
        subresource: str | None = None,
        manager: Manager | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """Read-modify-write for in-process controllers: ``mutate`` edits a deep copy.

        In-process controllers record no managedFields; ``manager`` and ``dry_run`` are for API
        writes done this way (the scale and binding subresources)."""
        old = self.get(rt, namespace, name)
        new = _copy_object(old)
        mutate(new)
        return self._commit(rt, old, new, subresource=subresource, manager=manager, dry_run=dry_run)

    def commit_patched(
        self,
        rt: ResourceType,
        old: Obj,
        patched: Any,
        *,
        subresource: str | None = None,
        strict: bool = False,
        dry_run: bool = False,
        manager: Manager | None = None,
        warnings: Warnings | None = None,
    ) -> Obj:
        """Store the result of a PATCH computed from ``old``.

        ``patched`` may share parts with ``old`` (a merge patch copies only what it changes): it is
        committed as a copy, so that neither a dry-run nor the bookkeeping of a real write edits
        the stored object, which watch events and readers hold."""
        if not isinstance(patched, dict):
            raise errors.unprocessable("the patched object is not a JSON object")
        meta = _meta(patched)
        given_rv = meta.get("resourceVersion")
        if given_rv not in (None, "") and str(given_rv) != _meta(old)["resourceVersion"]:
            raise errors.conflict(rt.plural, rt.group, _meta(old)["name"])
        return self._commit(
            rt,
            old,
            _copy_object(patched),
            subresource=subresource,
            strict=strict,
            dry_run=dry_run,
            manager=manager,
            warnings=warnings,
        )

    def apply(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        config: Any,
        manager: Manager,
        *,
        force: bool = False,
        strict: bool = False,
        dry_run: bool = False,
        warnings: Warnings | None = None,
    ) -> tuple[Obj, bool]:
        """Server-side apply of ``config`` by ``manager`` (see ``managedfields``); creates the object
        when it is absent. Returns (object, created)."""
        if not isinstance(config, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        meta = config.get("metadata")
        if not isinstance(meta, dict) or meta.get("name") in (None, ""):
            raise errors.bad_request("metadata.name is required in an applied configuration")
        if meta["name"] != name:
            raise errors.bad_request("the name of the object does not match the name on the URL")
        if config.get("apiVersion") is None or config.get("kind") is None:
            raise errors.bad_request("apiVersion and kind are required in an applied configuration")
        self._check_type(rt, copy.deepcopy(config))
        live = self.try_get(rt, namespace, name)
        if live is None:
            if manager.subresource is not None:
                raise errors.not_found(rt.plural, rt.group, name)
            created = self.create(
                rt, namespace, config, strict=strict, dry_run=dry_run, manager=manager, applied=True, warnings=warnings
            )
            return created, True
        given_rv = meta.get("resourceVersion")
        if given_rv not in (None, "") and str(given_rv) != _meta(live)["resourceVersion"]:
            raise errors.conflict(rt.plural, rt.group, name)
        merged = managedfields.apply(
            live,
            config,
            manager,
            self.list_types(rt),
            force=force,
            status_subresource=rt.status_subresource,
            now=self.clock.timestamp(),
        )
        committed = self._commit(
            rt, live, merged, subresource=manager.subresource, strict=strict, dry_run=dry_run, warnings=warnings
        )
        return committed, False

    def list_types(self, rt: ResourceType) -> managedfields.ListTypes:
        return managedfields.ListTypes(rt.schema() if rt.custom else None, builtin=not rt.custom)

    def _commit(
        self,
        rt: ResourceType,
        old: Obj,
        new: Obj,
        *,
        subresource: str | None,
        strict: bool = False,
        dry_run: bool = False,
        manager: Manager | None = None,
        warnings: Warnings | None = None,
    ) -> Obj:
        """Admit ``new`` as the successor of ``old`` and, unless ``dry_run``, store it and emit it.

        ``new`` must be the caller's own: this edits it (metadata, defaults, pruning) and keeps it.
        ``old`` is stored state and is never edited; a dry-run returns the would-be object and
        leaves the store as it was (no resourceVersion, no event, no managedFields, no generation)."""
        old_meta = _meta(old)
        if subresource == "status":
            merged = _copy_object(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            new = merged
        else:
            if not isinstance(new.get("metadata"), dict):
                new["metadata"] = {}
            if "managedFields" not in new["metadata"] and "managedFields" in old_meta:
                # An update that leaves managedFields out keeps them; one that sends them replaces them.
                new["metadata"]["managedFields"] = old_meta["managedFields"]
            if rt.status_subresource and subresource is None:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
        meta = new["metadata"]
        for immutable in (
            "uid",
            "creationTimestamp",
            "name",
            "namespace",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ):
            if immutable in old_meta:
                meta[immutable] = old_meta[immutable]
            else:
                meta.pop(immutable, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        new.setdefault("apiVersion", old.get("apiVersion"))
        new.setdefault("kind", old.get("kind"))
        new = self._admit(rt, new, old, strict=strict, dry_run=dry_run, warnings=warnings)
        meta = new["metadata"]
        if manager is not None:
            _set_managed_fields(
                meta,
                managedfields.record_update(
                    old,
                    new,
                    manager,
                    self.list_types(rt),
                    status_subresource=rt.status_subresource,
                    now=self.clock.timestamp(),
                ),
            )
        if new == old:
            return old
        if _spec_changed(rt, old, new):
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        if dry_run:
            return new
        meta["resourceVersion"] = self._next_rv()
        key = self._key(rt, meta.get("namespace"), meta["name"])
        self.objects[rt.key][key] = new
        self._index_owners(rt.key, key, old, new)
        self._emit(rt, "MODIFIED", new, old)
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and not self._awaits_kubelet(rt, new):
            self._remove(rt, new, propagation=None)
        return new

    def bind_pod(
        self,
        namespace: str,
        name: str,
        node_name: str,
        annotations: dict[str, str] | None = None,
        *,
        dry_run: bool = False,
    ) -> Obj:
        """Bind a pending pod to a node: the pods/binding subresource, also the scheduler's way to bind."""
        pods = self.resource("", "pods")
        pod = self.get(pods, namespace, name)
        if (pod.get("spec") or {}).get("nodeName"):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned '
                f'to node "{pod["spec"]["nodeName"]}"',
            )
        if pod["metadata"].get("deletionTimestamp"):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is being deleted, '
                "cannot be assigned to a host",
            )
        now = self.clock.timestamp()

        def assign(obj: Obj) -> None:
            obj["spec"]["nodeName"] = node_name
            if annotations:
                # The registry copies a Binding's annotations onto the pod.
                obj["metadata"].setdefault("annotations", {}).update(annotations)
            status = obj.setdefault("status", {})
            status.pop("nominatedNodeName", None)
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            conditions.insert(
                0, {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
            )
            status["conditions"] = conditions

        # The binding writes spec and status in one commit, as the registry's binding storage does.
        return self.update(pods, namespace, name, assign, subresource="binding", dry_run=dry_run)

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        grace_period: int | None = None,
        propagation: str | None = None,
        preconditions: dict[str, Any] | None = None,
    ) -> Obj:
        obj, _ = self.delete_outcome(
            rt, namespace, name, grace_period=grace_period, propagation=propagation, preconditions=preconditions
        )
        return obj

    def delete_outcome(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        grace_period: int | None = None,
        propagation: str | None = None,
        preconditions: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> tuple[Obj, bool]:
        """DELETE: the object as the answer shows it, and whether it stays (marked with a
        deletionTimestamp, for finalizers, the kubelet or its contents). With ``dry_run`` the same
        checks and answer, and nothing changes: no mark, no removal, no garbage collection."""
        obj = self.get(rt, namespace, name)
        meta = _meta(obj)
        if preconditions:
            if preconditions.get("uid") not in (None, meta.get("uid")):
                raise errors.conflict(rt.plural, rt.group, name)
            if preconditions.get("resourceVersion") not in (None, meta.get("resourceVersion")):
                raise errors.conflict(rt.plural, rt.group, name)
        if propagation not in (None, "Background", "Foreground", "Orphan"):
            raise errors.bad_request(f"propagationPolicy: Unsupported value: {propagation!r}")
        if rt.key in (NAMESPACES, CRDS):
            return self._delete_container(rt, obj, dry_run=dry_run)
        if rt.key == ("", "pods") and self.graceful_pods and self._is_running_on_node(obj):
            grace = grace_period
            if grace is None:
                grace = int((obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            if grace > 0 or meta.get("finalizers"):
                current = meta.get("deletionGracePeriodSeconds")
                offset_s: float = grace
                if meta.get("deletionTimestamp"):
                    # apiserver's BeforeDelete: a graceful deletion under way may only be shortened, by an
                    # explicit grace period, counted from when it was asked (never into the past: then
                    # at once, with 1 s for a graceful one so the kubelet still acts). One at 0 s, which
                    # only finalizers hold, is not made graceful again.
                    if not current or grace_period is None or grace_period >= current:
                        return obj, True
                    past_deadline_s = self.clock.seconds_since(meta["deletionTimestamp"]) or 0.0
                    offset_s = grace - current - past_deadline_s
                    if offset_s < 0:
                        offset_s, grace = 0.0, min(grace, 1)
                new = _copy_object(obj)
                new["metadata"]["deletionTimestamp"] = self.clock.timestamp(offset_s)
                new["metadata"]["deletionGracePeriodSeconds"] = grace
                return self._store_marked(rt, obj, new, dry_run=dry_run), True
        elif meta.get("finalizers") or (propagation == "Foreground" and self._has_dependents(meta.get("uid", ""))):
            if meta.get("deletionTimestamp"):
                return obj, True
            new = _copy_object(obj)
            new["metadata"]["deletionTimestamp"] = self.clock.timestamp()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            if propagation == "Foreground" and self._has_dependents(meta.get("uid", "")):
                # Dependents go first, then the owner: what the foregroundDeletion finalizer does
                # (beside the owner's own finalizers, as apiserver adds it).
                new["metadata"]["finalizers"] = [*(meta.get("finalizers") or ()), "foregroundDeletion"]
                if not dry_run:
                    owner_key = (rt.key, self._key(rt, namespace, name))
                    self._schedule_gc(meta.get("uid", ""), "Foreground", owner_key=owner_key)
            return self._store_marked(rt, obj, new, dry_run=dry_run), True
        if dry_run:
            return obj, False
        return self._remove(rt, obj, propagation=propagation), False

    def _store_marked(self, rt: ResourceType, old: Obj, new: Obj, *, dry_run: bool = False) -> Obj:
        if not _meta(old).get("deletionTimestamp") and int(_meta(old).get("generation") or 0) > 0:
            # As the API server's markAsDeleting: setting deletionTimestamp bumps the generation.
            new["metadata"]["generation"] = int(_meta(old)["generation"]) + 1
        if dry_run:
            return new
        new["metadata"]["resourceVersion"] = self._next_rv()
        key = self._key(rt, _meta(new).get("namespace"), _meta(new)["name"])
        self.objects[rt.key][key] = new
        self._emit(rt, "MODIFIED", new, old)
        return new

    def _is_running_on_node(self, pod: Obj) -> bool:
        return bool((pod.get("spec") or {}).get("nodeName")) and not pod_has_ended(pod)

    def _awaits_kubelet(self, rt: ResourceType, obj: Obj) -> bool:
        if rt.key != ("", "pods") or not self.graceful_pods or not self._is_running_on_node(obj):
            return False
        return int(_meta(obj).get("deletionGracePeriodSeconds") or 0) > 0

    def _remove(self, rt: ResourceType, obj: Obj, *, propagation: str | None) -> Obj:
        meta = _meta(obj)
        key = self._key(rt, meta.get("namespace"), meta["name"])
        if self.objects[rt.key].get(key) is None:
            return obj
        del self.objects[rt.key][key]
        self.uids.pop(meta.get("uid", ""), None)
        self._index_owners(rt.key, key, obj, None)
        last = _copy_object(obj)
        last["metadata"]["resourceVersion"] = self._next_rv()
        self._emit(rt, "DELETED", last, obj)
        for ref in meta.get("ownerReferences") or ():
            owner_key = self.uids.get(ref.get("uid", "")) if ref.get("blockOwnerDeletion") else None
            if owner_key is not None:
                self._release_foreground(owner_key)  # it may have waited for this one last
        if rt.key == CRDS:
            self.unregister(_crd_resource_key(obj))
        self._schedule_gc(meta.get("uid", ""), propagation or "Background")
        if rt.namespaced and meta.get("namespace"):
            self._finish_container(NAMESPACES, ("", meta["namespace"]))
        elif rt.custom:
            self._finish_container(CRDS, ("", f"{rt.plural}.{rt.group}"))
        return last

    # ---- namespaces and CRDs: deleted after their contents ------------------------------------------

    def _contents(self, rt: ResourceType, obj: Obj) -> Contents:
        if rt.key == NAMESPACES:
            namespace = _meta(obj)["name"]
            return [(r, o) for r in self.resources.values() if r.namespaced for o in self.iter(r, namespace)]
        served = self.resources.get(_crd_resource_key(obj))
        if served is None or not served.custom:
            return []
        return [(served, o) for o in self.iter(served)]

    def _delete_container(self, rt: ResourceType, obj: Obj, *, dry_run: bool = False) -> tuple[Obj, bool]:
        """A namespace or CRD turns Terminating, its contents are deleted (their finalizers honoured),
        and it goes once they are gone, as the namespace controller and the CRD finalizer do."""
        meta = _meta(obj)
        if dry_run:
            marked = obj
            if not meta.get("deletionTimestamp"):
                marked = self._store_marked(rt, obj, self._terminating(rt, obj), dry_run=True)
            stays = bool(meta.get("finalizers")) or any(
                self.delete_outcome(r, _meta(o).get("namespace"), _meta(o)["name"], dry_run=True)[1]
                for r, o in self._contents(rt, obj)
            )
            return marked, stays
        if not meta.get("deletionTimestamp"):
            obj = self._store_marked(rt, obj, self._terminating(rt, obj))
            for content_rt, content in self._contents(rt, obj):
                content_meta = _meta(content)
                with contextlib.suppress(ApiError):
                    self.delete(content_rt, content_meta.get("namespace"), content_meta["name"])
        removed = self._finish_container(rt.key, ("", meta["name"]))
        return (removed, False) if removed is not None else (obj, True)

    def _terminating(self, rt: ResourceType, obj: Obj) -> Obj:
        new = _copy_object(obj)
        new["metadata"]["deletionTimestamp"] = self.clock.timestamp()
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        if rt.key == NAMESPACES:
            new["status"] = {"phase": "Terminating"}
        return new

    def _finish_container(self, key: ResourceKey, okey: ObjectKey) -> Obj | None:
        rt = self.resources.get(key)
        container = self.objects.get(key, {}).get(okey)
        if rt is None or container is None or not _meta(container).get("deletionTimestamp"):
            return None
        if _meta(container).get("finalizers") or self._contents(rt, container):
            return None
        return self._remove(rt, container, propagation=None)

    # ---- garbage collection ----------------------------------------------------------------------

    def _has_dependents(self, uid: str) -> bool:
        return any(True for _ in self._dependents(uid))

    def _index_owners(self, rkey: ResourceKey, okey: ObjectKey, old: Obj | None, new: Obj | None) -> None:
        """Keep ``owned``: owner uid -> the objects whose ownerReferences name it."""
        before = {ref.get("uid") for ref in _meta(old).get("ownerReferences") or ()} if old else set()
        after = {ref.get("uid") for ref in _meta(new).get("ownerReferences") or ()} if new else set()
        for uid in before - after:
            dependents = self.owned.get(uid)
            if dependents is not None:
                dependents.discard((rkey, okey))
                if not dependents:
                    del self.owned[uid]
        for uid in after - before:
            if uid:
                self.owned.setdefault(uid, set()).add((rkey, okey))

    def dependents(self, uid: str, rt: ResourceType) -> Iterator[Obj]:
        """The objects of type ``rt`` whose ownerReferences name ``uid`` (from the owner index)."""
        return (obj for dependent_rt, obj in self._dependents(uid) if dependent_rt.key == rt.key)

    def _dependents(self, uid: str) -> Iterator[tuple[ResourceType, Obj]]:
        for rkey, okey in sorted(self.owned.get(uid, ())):
            rt = self.resources.get(rkey)
            obj = self.objects.get(rkey, {}).get(okey)
            if rt is not None and obj is not None:
                yield rt, obj

    def _schedule_gc(self, uid: str, propagation: str, owner_key: tuple[ResourceKey, ObjectKey] | None = None) -> None:
        if not uid:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._collect(uid, propagation, owner_key)
            return
        # Background: the owner is gone already when the dependents go, as with the real GC.
        loop.call_soon(self._collect, uid, propagation, owner_key)

    def _collect(self, uid: str, propagation: str, owner_key: tuple[ResourceKey, ObjectKey] | None) -> None:
        for rt, obj in list(self._dependents(uid)):
            meta = _meta(obj)
            current = self.try_get(rt, meta.get("namespace"), meta["name"])
            if current is None:
                continue
            if propagation == "Orphan":
                self.update(
                    rt,
                    meta.get("namespace"),
                    meta["name"],
                    lambda o: o["metadata"].__setitem__(
                        "ownerReferences", [r for r in o["metadata"].get("ownerReferences", []) if r.get("uid") != uid]
                    ),
                )
                continue
            owners_alive = [
                ref
                for ref in meta.get("ownerReferences") or ()
                if ref.get("uid") != uid and ref.get("uid") in self.uids
            ]
            if owners_alive:
                continue
            # As the garbage collector: under an owner going in the foreground, a dependent with
            # dependents of its own goes in the foreground too.
            nested = propagation == "Foreground" and self._has_dependents(meta.get("uid", ""))
            try:
                self.delete(
                    rt, meta.get("namespace"), meta["name"], propagation="Foreground" if nested else "Background"
                )
            except ApiError:
                continue
        if owner_key is not None:
            self._release_foreground(owner_key)

    def _blocks_owner(self, uid: str) -> bool:
        """Whether a dependent that names ``uid`` with blockOwnerDeletion is still stored (also while
        its own finalizers or the kubelet hold it): a foreground deletion waits for those."""
        return any(
            ref.get("uid") == uid and ref.get("blockOwnerDeletion")
            for _, obj in self._dependents(uid)
            for ref in _meta(obj).get("ownerReferences") or ()
        )

    def _release_foreground(self, owner_key: tuple[ResourceKey, ObjectKey]) -> None:
        rkey, okey = owner_key
        rt = self.resources.get(rkey)
        owner = self.objects.get(rkey, {}).get(okey)
        if rt is None or owner is None or "foregroundDeletion" not in (_meta(owner).get("finalizers") or ()):
            return
        if not self._blocks_owner(_meta(owner).get("uid", "")):
            self.remove_finalizer(rt, okey[0] or None, okey[1], "foregroundDeletion")

    def remove_finalizer(self, rt: ResourceType, namespace: str | None, name: str, finalizer: str) -> Obj:
        """Take ``finalizer`` off the object (a controller's end of it: an object being deleted then
        goes, when no other finalizer holds it)."""

        def remove(o: Obj) -> None:
            o["metadata"]["finalizers"] = [f for f in o["metadata"].get("finalizers") or () if f != finalizer]

        return self.update(rt, namespace, name, remove)

    # ---- admission -------------------------------------------------------------------------------

    def _check_type(self, rt: ResourceType, obj: Obj) -> None:
        api_version = obj.get("apiVersion")
        kind = obj.get("kind")
        if api_version is not None and api_version not in {rt.api_version(v) for v in rt.versions}:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({rt.api_version()})"
            )
        if kind is not None and kind != rt.kind:
            raise errors.bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
        obj["apiVersion"] = api_version or rt.api_version()
        obj["kind"] = rt.kind

    def _admit(
        self,
        rt: ResourceType,
        obj: Obj,
        old: Obj | None,
        *,
        strict: bool,
        dry_run: bool = False,
        warnings: Warnings | None = None,
        name_errors: Causes | None = None,
    ) -> Obj:
        """Defaulting and validation per kind (what admission and the registry strategies do)."""
        meta = obj["metadata"]
        for list_field in ("finalizers", "ownerReferences"):
            if list_field in meta and meta[list_field] is None:
                del meta[list_field]
        for map_field in ("labels", "annotations"):
            value = meta.get(map_field)
            if value is None:
                meta.pop(map_field, None)
            elif not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise errors.invalid(
                    rt.kind,
                    rt.group,
                    meta.get("name", ""),
                    [(f"metadata.{map_field}", "Invalid value: values must be strings")],
                )
        if rt.custom:
            validation_errors, unknown = validate_custom_object(rt, obj)
            if unknown and strict:
                fields = ", ".join(f'unknown field "{path}"' for path in unknown)
                raise errors.bad_request(
                    f'{rt.kind} in version "{rt.storage_version}" cannot be handled as a {rt.kind}: '
                    f"strict decoding error: {fields}"
                )
            if warnings is not None:
                # fieldValidation=Warn (the default): the fields are dropped and the client told.
                warnings.extend(f'unknown field "{path}"' for path in unknown)
            if not validation_errors:
                validation_errors = check_rules(rt.schema(), obj, old, "")
            validation_errors = [*(name_errors or []), *validation_errors]
            if validation_errors:
                raise errors.invalid(rt.kind, rt.group, meta.get("name", ""), validation_errors)
        elif rt.key == ("", "pods"):
            self._admit_pod(obj, old)
        elif rt.key == ("", "resourcequotas"):
            spec = obj.get("spec") or {}
            hard = spec.get("hard") or {}
            undecodable = quantity_decode_error(hard)
            if undecodable:
                raise errors.bad_request(
                    f'{rt.kind} in version "{rt.storage_version}" cannot be handled as a {rt.kind}: {undecodable}'
                )
            problems = quota_hard_problems(hard) + quota_scope_problems(spec)
            if problems:
                raise errors.invalid(rt.kind, rt.group, meta.get("name", ""), problems)
        elif rt.key == ("", "namespaces"):
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Terminating" if meta.get("deletionTimestamp") else "Active"}
        elif rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            obj = self._crd_accepted(obj, register=not dry_run)
        elif rt.key == ("scheduling.k8s.io", "priorityclasses"):
            if not isinstance(obj.get("value"), int):
                raise errors.invalid(rt.kind, rt.group, meta.get("name", ""), [("value", "Required value")])
            obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
            if old is not None:
                self._validate_priority_class_update(rt, obj, old)
        return obj

    @staticmethod
    def _validate_priority_class_update(rt: ResourceType, obj: Obj, old: Obj) -> None:
        """A PriorityClass's value and preemptionPolicy are immutable (kubernetes
        pkg/apis/scheduling/validation, ValidatePriorityClassUpdate): a ``helm upgrade`` that changes
        one fails on a real API server, so it must fail here too."""
        causes = []
        if obj["value"] != old.get("value"):
            causes.append(("value", "Forbidden: may not be changed in an update."))
        policy = obj["preemptionPolicy"]
        if policy != old.get("preemptionPolicy", "PreemptLowerPriority"):
            causes.append(("preemptionPolicy", f'Invalid value: "{policy}": field is immutable'))
        if causes:
            raise errors.invalid(rt.kind, rt.group, _meta(obj).get("name", ""), causes)

    def _admit_service_account(self, pod: Obj, spec: dict[str, Any]) -> None:
        """The ServiceAccount admission plugin: a pod runs as the account it names, else ``default``,
        which must exist in its namespace. ``default`` always does here: kube-controller-manager's
        ServiceAccount controller makes it in every namespace, and the sandbox serves no such object."""
        name = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        spec["serviceAccountName"] = spec["serviceAccount"] = name
        if name == "default":
            return
        namespace = _meta(pod).get("namespace")
        if self.try_get(self.resources[("", "serviceaccounts")], namespace, name) is None:
            raise _forbidden_pod(
                pod, f'error looking up service account {namespace}/{name}: serviceaccount "{name}" not found'
            )

    def _limit_ranges(self, pod: Obj) -> tuple[dict[str, Any], ...]:
        """The ``type: Container`` items of the LimitRanges in the pod's namespace, with the API's
        defaulting (SetDefaults_LimitRange): a ``default`` limit unset is the ``max``, a
        ``defaultRequest`` unset is the ``default`` limit, else the ``min``."""
        items = []
        for limit_range in self.iter(self.resources[("", "limitranges")], _meta(pod).get("namespace")):
            for item in (limit_range.get("spec") or {}).get("limits") or []:
                if item.get("type") != "Container":
                    continue
                default = {**(item.get("max") or {}), **(item.get("default") or {})}
                default_request = {**(item.get("min") or {}), **default, **(item.get("defaultRequest") or {})}
                items.append({**item, "default": default, "defaultRequest": default_request})
        return tuple(items)

    def _default_limit_ranges(self, pod: Obj, spec: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        """The LimitRanger admission plugin's mutating half (kubernetes plugin/pkg/admission/limitranger):
        a container gets the LimitRanges' defaults of what it does not set. Returns their items, for
        :meth:`_check_limit_ranges`."""
        items = self._limit_ranges(pod)
        for item in items:
            for container in spec["containers"]:
                resources = container.setdefault("resources", {})
                for side, defaults in (("limits", item["default"]), ("requests", item["defaultRequest"])):
                    given = resources.get(side) or {}
                    unset = {k: v for k, v in defaults.items() if k not in given}
                    if side == "requests":
                        # A request left unset is its limit (the pod's own defaulting), not the default.
                        unset = {k: v for k, v in unset.items() if k not in (resources.get("limits") or {})}
                    if unset:
                        resources[side] = {**given, **unset}
        return items

    @staticmethod
    def _validate_requests(pod: Obj, spec: dict[str, Any]) -> None:
        """Pod validation (kubernetes pkg/apis/core/validation): no request above its limit (422)."""
        invalid = []
        for index, container in enumerate(spec["containers"]):
            resources = container.get("resources") or {}
            limits = resources.get("limits") or {}
            for name, request in (resources.get("requests") or {}).items():
                if name in limits and quantity(request) > quantity(limits[name]):
                    why = f'Invalid value: "{request}": must be less than or equal to {name} limit of {limits[name]}'
                    invalid.append((f"spec.containers[{index}].resources.requests", why))
        if invalid:
            raise errors.invalid("Pod", "", _meta(pod).get("name", ""), invalid)

    @staticmethod
    def _check_limit_ranges(pod: Obj, spec: dict[str, Any], items: tuple[dict[str, Any], ...]) -> None:
        """The LimitRanger's validating half: a container's request and limit within each item's
        ``min`` and ``max`` (403, in its words). ``maxLimitRequestRatio`` is not emulated."""
        refusals = []
        for item in items:
            for container in spec["containers"]:
                resources = container.get("resources") or {}
                requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
                for name, least in (item.get("min") or {}).items():
                    if name in requests and quantity(requests[name]) < quantity(least):
                        refusals.append(
                            f"minimum {name} usage per Container is {least}, but request is {requests[name]}"
                        )
                    elif name in limits and quantity(limits[name]) < quantity(least):
                        refusals.append(f"minimum {name} usage per Container is {least}, but limit is {limits[name]}")
                for name, most in (item.get("max") or {}).items():
                    if name not in limits:
                        refusals.append(f"maximum {name} usage per Container is {most}.  No limit is specified")
                    elif quantity(limits[name]) > quantity(most):
                        refusals.append(f"maximum {name} usage per Container is {most}, but limit is {limits[name]}")
                    elif name in requests and quantity(requests[name]) > quantity(most):
                        refusals.append(
                            f"maximum {name} usage per Container is {most}, but request is {requests[name]}"
                        )
        if refusals:
            # Go's aggregated error: one message as it is, several in brackets.
            raise _forbidden_pod(pod, refusals[0] if len(refusals) == 1 else "[" + ", ".join(refusals) + "]")

    def _check_resource_quotas(self, pod: Obj, spec: dict[str, Any]) -> None:
        """The ResourceQuota admission plugin, the last validating one (k8s.io/apiserver
        pkg/admission/plugin/resourcequota/controller.go, checkRequest): first every quota whose hard
        names a resource of pods must find a value for the cpu and memory ones it caps in each container
        (``failed quota: %s: %v`` around pods.go's Constraints, ``must specify %s`` of ``%s for: %s``),
        then none may be taken over its hard (``exceeded quota: %s, requested: %s, used: %s, limited:
        %s``, only the resources exceeded). Usage is computed here from the stored pods, not read from
        the quota's status (which :class:`~neuronfleet.sandbox.resourcequota.QuotaController` keeps for
        kubectl). A quota whose scopes or scopeSelector leave the pod out (a PriorityClass it does not
        select) is skipped, and counts only the pods it takes in (pods.go's podMatchesScopeFunc)."""
        namespace = _meta(pod).get("namespace")
        quotas = []
        for resource_quota in self.iter(self.resources[("", "resourcequotas")], namespace):
            quota_spec = resource_quota.get("spec") or {}
            hard = {str(k): v for k, v in (quota_spec.get("hard") or {}).items()}
            tracked = {name: quantity(value) for name, value in hard.items() if quota_tracks_for_pods(name)}
            if not tracked or not pod_in_quota_scopes(quota_spec, spec):
                continue
            name = str(_meta(resource_quota).get("name", ""))
            missing = quota_constraint_problem(spec, set(tracked))
            if missing:
                raise _forbidden_pod(pod, f"failed quota: {name}: {missing}")
            quotas.append((name, quota_spec, tracked))
        if not quotas:
            return
        requested = pod_quota_usage(spec)
        pods = list(self.iter(self.resources[("", "pods")], namespace))
        for name, quota_spec, hard_of in quotas:
            used = namespace_quota_usage(pods, quota_spec)
            asked = {k: v for k, v in requested.items() if k in hard_of and v != 0}
            exceeded = sorted(k for k, v in asked.items() if used.get(k, Decimal(0)) + v > hard_of[k])
            if exceeded:
                raise _forbidden_pod(
                    pod,
                    f"exceeded quota: {name}, requested: {_pretty(asked, exceeded)}, "
                    f"used: {_pretty(used, exceeded)}, limited: {_pretty(hard_of, exceeded)}",
                )

    def _admit_pod(self, pod: Obj, old: Obj | None) -> None:
        spec = pod.get("spec")
        if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list) or not spec["containers"]:
            raise errors.invalid("Pod", "", _meta(pod).get("name", ""), [("spec.containers", "Required value")])
        if old is not None:
            return
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("enableServiceLinks", True)
        tolerations = spec.setdefault("tolerations", [])
        for taint_key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(t.get("key") == taint_key for t in tolerations):
                tolerations.append(
                    {"key": taint_key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                )
        # kube-apiserver's order: mutating admission (LimitRanger, ServiceAccount, Priority), then the
        # object's validation, then validating admission (LimitRanger's min/max, then ResourceQuota).
        limit_ranges = self._default_limit_ranges(pod, spec)
        self._admit_service_account(pod, spec)
        class_name = spec.get("priorityClassName")
        pc_rt = self.resources[("scheduling.k8s.io", "priorityclasses")]
        if class_name:
            pc = self.try_get(pc_rt, None, class_name)
            if pc is None:
                raise _forbidden_pod(pod, f"no PriorityClass with name {class_name} was found")
            spec["priority"] = int(pc["value"])
            spec.setdefault("preemptionPolicy", pc.get("preemptionPolicy", "PreemptLowerPriority"))
        elif "priority" not in spec:
            default = next((pc for pc in self.iter(pc_rt) if pc.get("globalDefault")), None)
            spec["priority"] = int(default["value"]) if default else 0
            if default:
                spec["priorityClassName"] = _meta(default)["name"]
        self._validate_requests(pod, spec)
        self._check_limit_ranges(pod, spec, limit_ranges)
        self._check_resource_quotas(pod, spec)
        for container in spec["containers"]:
            container.setdefault("imagePullPolicy", "IfNotPresent")
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("resources", {})
        pod["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}


def _forbidden_pod(pod: Obj, why: str) -> errors.ApiError:
    """Admission's 403, named as kube-apiserver names it: a pod made with generateName (a Job
    controller's) is called by its prefix, its name being generated after admission there (here
    before: a generated name is the prefix and five characters)."""
    meta = _meta(pod)
    name, prefix = str(meta.get("name") or ""), str(meta.get("generateName") or "")
    if prefix and name.startswith(prefix) and len(name) == len(prefix) + 5:
        name = prefix
    return errors.forbidden(f'pods "{name or "Unknown"}" is forbidden: {why}')


def _pretty(values: dict[str, Decimal], names: list[str]) -> str:
    """The quota admission's prettyPrint of ``names`` in ``values``: ``name=quantity`` joined by commas."""
    return ",".join(f"{name}={format_quantity(values.get(name, Decimal(0)), name)}" for name in names)


def _copy_object(obj: Obj) -> Obj:
    """A deep copy to edit, sharing ``metadata.managedFields``: nothing edits those in place (field
    management builds new entries), and they are as big as the object itself."""
    copied = {k: copy.deepcopy(v) for k, v in obj.items() if k != "metadata"}
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        copied["metadata"] = {k: v if k == "managedFields" else copy.deepcopy(v) for k, v in meta.items()}
    elif "metadata" in obj:
        copied["metadata"] = copy.deepcopy(meta)
    return copied


def _set_managed_fields(meta: dict[str, Any], managed: list[Obj]) -> None:
    if managed:
        meta["managedFields"] = managed
    else:
        meta.pop("managedFields", None)


def _crd_resource_key(crd: Obj) -> tuple[str, str]:
    spec = crd.get("spec") or {}
    return (str(spec.get("group", "")), str((spec.get("names") or {}).get("plural", "")))


def _qos_class(spec: dict[str, Any]) -> str:
    containers = spec.get("containers") or []
    requests_any = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        if requests or limits:
            requests_any = True
        for resource in ("cpu", "memory"):
            if resource not in limits or requests.get(resource, limits.get(resource)) != limits.get(resource):
                guaranteed = False
    if guaranteed and requests_any:
        return "Guaranteed"
    return "Burstable" if requests_any else "BestEffort"


def _spec_changed(rt: ResourceType, old: Obj, new: Obj) -> bool:
    ignored = {"metadata", "status"} if rt.status_subresource else {"metadata"}
    return {k: v for k, v in old.items() if k not in ignored} != {k: v for k, v in new.items() if k not in ignored}
