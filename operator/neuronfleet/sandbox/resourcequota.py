"""The ResourceQuota controller's status: each quota's ``status.hard`` and ``status.used``, kept current.

Pod admission (``Store._check_resource_quotas``) computes usage itself from the stored pods; this
controller only writes it where ``kubectl describe resourcequota`` reads it. A namespace is
recomputed when one of its quotas' spec changes, or one of its pods is made, deleted or finishes.
"""

from __future__ import annotations

import asyncio
import contextlib

from neuronfleet.sandbox.clock import run_controller
from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.nodes import pod_has_ended
from neuronfleet.sandbox.quotas import namespace_quota_usage, quota_status
from neuronfleet.sandbox.store import Obj, Store, WatchEvent


class QuotaController:
    """Writes the quotas' status of the namespaces marked since its last round."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._quotas = store.resource("", "resourcequotas")
        self._pods = store.resource("", "pods")
        self._wake = asyncio.Event()
        self._marked: set[str] = set()
        store.listeners.append(self._on_event)

    def _mark(self, namespace: str) -> None:
        self._marked.add(namespace)
        self._wake.set()

    def _on_event(self, event: WatchEvent) -> None:
        namespace = str(event.obj["metadata"].get("namespace") or "")
        if event.resource == ("", "resourcequotas"):
            if event.type != "DELETED" and (event.old is None or event.old.get("spec") != event.obj.get("spec")):
                self._mark(namespace)
        elif event.resource == ("", "pods"):
            # Usage changes when a pod is made or gone, or becomes terminal; its own status writes
            # (the kubelet's progress) change nothing, and are most of the pods' events.
            counted = event.type in ("ADDED", "DELETED") or (pod_has_ended(event.old) != pod_has_ended(event.obj))
            if counted and next(iter(self.store.iter(self._quotas, namespace)), None) is not None:
                self._mark(namespace)

    async def run(self) -> None:
        await run_controller("resource quota controller", self.sync, self._wake, None)

    def sync(self) -> None:
        marked, self._marked = self._marked, set()
        for namespace in sorted(marked):
            pods = list(self.store.iter(self._pods, namespace))
            for quota in list(self.store.iter(self._quotas, namespace)):
                spec = quota.get("spec") or {}
                status = quota_status(spec.get("hard") or {}, namespace_quota_usage(pods, spec))
                if quota.get("status") == status:
                    continue

                def write(obj: Obj, status: dict[str, object] = status) -> None:
                    obj["status"] = status

                with contextlib.suppress(ApiError):  # deleted meanwhile
                    self.store.update(self._quotas, namespace, quota["metadata"]["name"], write, subresource="status")
