"""core/v1 Events written by the sandbox's own components (scheduler, kubelet, provisioner).

What ``kubectl describe`` and an operator measuring cold starts see on a real cluster: Scheduled /
FailedScheduling / Preempted, Pulling / Pulled / Created / Started / Killing, Nominated. A repeated
event (same object, reason and message) bumps ``count`` and ``lastTimestamp`` instead of adding an
object; events expire after ``ttl_s`` (kube-apiserver's default event TTL is one hour).
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import Any

from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.store import Obj, Store


class EventRecorder:
    def __init__(self, store: Store, component: str, *, ttl_s: float = 3600.0) -> None:
        self.store = store
        self.component = component
        self.ttl_s = ttl_s
        self._events = store.resource("", "events")
        self._series: dict[tuple[str, str, str], tuple[str, str]] = {}
        self._expiry: deque[tuple[float, str, str]] = deque()

    def record(self, obj: Obj, type_: str, reason: str, message: str, *, host: str = "") -> None:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        now = self.store.clock.timestamp()
        self._expire()
        key = (str(meta.get("uid", "")), reason, message)
        existing = self._series.get(key)
        if existing is not None and self.store.try_get(self._events, *existing) is not None:

            def bump(event: Obj) -> None:
                event["count"] = int(event.get("count", 1)) + 1
                event["lastTimestamp"] = now

            with contextlib.suppress(ApiError):
                self.store.update(self._events, existing[0], existing[1], bump)
            return
        # The resourceVersion the event will get: unique across recorders, increasing like kube's
        # timestamp-derived suffixes.
        name = f"{meta.get('name', 'object')}.{self.store.rv + 1:016x}"
        source: dict[str, Any] = {"component": self.component}
        if host:
            source["host"] = host
        body = {
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "kind": obj.get("kind", ""),
                "apiVersion": obj.get("apiVersion", ""),
                "name": meta.get("name", ""),
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
                **({"namespace": meta["namespace"]} if meta.get("namespace") else {}),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "source": source,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "reportingComponent": self.component,
            "reportingInstance": host or self.component,
        }
        with contextlib.suppress(ApiError):
            self.store.create(self._events, namespace, body)
            self._series[key] = (namespace, name)
            self._expiry.append((self.store.clock.monotonic() + self.ttl_s, namespace, name))

    def _expire(self) -> None:
        now = self.store.clock.monotonic()
        while self._expiry and self._expiry[0][0] <= now:
            _, namespace, name = self._expiry.popleft()
            with contextlib.suppress(ApiError):
                self.store.delete(self._events, namespace, name)
        if len(self._series) > 4 * max(len(self._expiry), 256):
            live = {(ns, n) for _, ns, n in self._expiry}
            self._series = {k: v for k, v in self._series.items() if v in live}
