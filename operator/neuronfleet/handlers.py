"""The Kopf layer: thin handlers that call the one reconcile, and post its Events.

- start-up: clients are created once (Kubernetes, artifact store, metrics) and put in Kopf's
  ``memo`` as an :class:`OperatorContext`; nothing is global.
- create / update / resume: reconcile at once (so a new object gets its status immediately);
- a per-object daemon: reconciles every ``interval`` seconds, or sooner when one of the object's
  pods changes (a pod event handler wakes it);
- deletion needs no handler: every child (pods, Service, PDB, compile Jobs) carries an
  ownerReference, so the API server's garbage collector removes them, and the object is never
  blocked by a finalizer while the operator is down.

Failures never crash the operator: the reconcile reports errors in the Degraded condition, the
handler posts a Warning Event and Kopf retries with back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import kopf
from kubernetes_asyncio.client.exceptions import ApiException

from neuronfleet.api.v1alpha1 import GROUP, PLURAL, VERSION
from neuronfleet.metrics.operator_metrics import OperatorMetrics
from neuronfleet.planning.labels import LABEL_DEPLOYMENT
from neuronfleet.planning.reasons import Reason
from neuronfleet.reconcile import DeploymentMemory, Reconciler, ReconcileReport

logger = logging.getLogger(__name__)

#: Longest pause between retries of a failing reconcile.
MAX_BACKOFF_SECONDS = 300.0

registry = kopf.OperatorRegistry()

Key = tuple[str, str]


@dataclass
class OperatorContext:
    """What the handlers share: the reconciler and per-object memory, wake-ups and locks."""

    reconciler: Reconciler
    memories: dict[Key, DeploymentMemory] = field(default_factory=lambda: defaultdict(DeploymentMemory))
    wakeups: dict[Key, asyncio.Event] = field(default_factory=lambda: defaultdict(asyncio.Event))
    locks: dict[Key, asyncio.Lock] = field(default_factory=lambda: defaultdict(asyncio.Lock))
    metrics: OperatorMetrics | None = None
    reconciles: int = 0
    failures: int = 0

    async def reconcile(self, body: Any, namespace: str, name: str) -> ReconcileReport:
        """Reconcile one object; one at a time per object, whoever asks."""
        key = (namespace, name)
        async with self.locks[key]:
            self.reconciles += 1
            started = time.perf_counter()
            try:
                report = await self.reconciler.reconcile(dict(body), self.memories[key])
            except Exception as exc:
                if self.metrics is not None:
                    self.metrics.record_reconcile(
                        namespace, name, time.perf_counter() - started, None, type(exc).__name__
                    )
                raise
            if self.metrics is not None:
                error_kind = "ReconcileError" if report.error else None
                self.metrics.record_reconcile(namespace, name, time.perf_counter() - started, report.status, error_kind)
        for event in report.events:
            kopf.event(body, type=event.type, reason=event.reason, message=event.message[:1000])
        return report


def context_of(memo: Any) -> OperatorContext:
    context = memo.get("context") if hasattr(memo, "get") else None
    if not isinstance(context, OperatorContext):
        raise kopf.PermanentError("the operator was started without its context (see neuronfleet.run_command)")
    return context


@kopf.on.login(registry=registry)
def login(**kwargs: Any) -> Any:
    """In a pod: the service account; elsewhere: $KUBECONFIG (what `neuronfleet run` points at)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup(registry=registry)
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # The operator posts its own Events about what it did; Kopf's per-handler chatter is noise.
    settings.posting.level = logging.WARNING
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    settings.queueing.error_delays = [1, 2, 5, 10, 30, 60]
    settings.watching.server_timeout = 300


@kopf.on.cleanup(registry=registry)
async def close_clients(memo: kopf.Memo, **_: Any) -> None:
    context = memo.get("context")
    if isinstance(context, OperatorContext):
        await context.reconciler.kube.close()


@kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec", registry=registry)
@kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry)
async def reconcile_now(body: kopf.Body, memo: kopf.Memo, namespace: str | None, name: str, **_: Any) -> None:
    context = context_of(memo)
    namespace = namespace or "default"
    try:
        report = await context.reconcile(body, namespace, name)
    except ApiException as exc:
        raise kopf.TemporaryError(f"Kubernetes API: {exc.status} {exc.reason}", delay=5) from exc
    if report.error:
        raise kopf.TemporaryError(report.error, delay=10)


@kopf.daemon(GROUP, VERSION, PLURAL, registry=registry, cancellation_timeout=2.0)
async def keep_converging(
    body: kopf.Body, memo: kopf.Memo, namespace: str | None, name: str, stopped: kopf.DaemonStopped, **_: Any
) -> None:
    """Reconcile every interval, or as soon as a pod of this deployment changes."""
    context = context_of(memo)
    namespace = namespace or "default"
    wakeup = context.wakeups[(namespace, name)]
    failures = 0
    while not stopped:
        interval = context.reconciler.settings.interval_seconds
        try:
            report = await context.reconcile(body, namespace, name)
            failures = failures + 1 if report.error else 0
        except Exception as exc:  # any failure: report it, back off, try again; never crash-loop
            failures += 1
            context.failures += 1
            logger.warning("reconcile of %s/%s failed (%d in a row): %s", namespace, name, failures, exc)
            kopf.warn(body, reason=Reason.RECONCILE_FAILED, message=f"{exc}"[:1000])
        delay = min(MAX_BACKOFF_SECONDS, interval * (2 ** min(failures, 6))) if failures else interval
        wakeup.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wakeup.wait(), timeout=delay)


@kopf.on.event("pods", labels={LABEL_DEPLOYMENT: kopf.PRESENT}, registry=registry)
async def pod_changed(labels: kopf.Labels, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    """A pod of a deployment changed (bound, ready, deleted...): wake that deployment's daemon."""
    context = memo.get("context")
    if isinstance(context, OperatorContext):
        context.wakeups[(namespace or "default", labels[LABEL_DEPLOYMENT])].set()


@kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry, optional=True)
async def forget(memo: kopf.Memo, namespace: str | None, name: str, **_: Any) -> None:
    """Drop the object's in-memory state and metric series (children go by garbage collection)."""
    context = memo.get("context")
    if isinstance(context, OperatorContext):
        key = (namespace or "default", name)
        for table in (context.memories, context.wakeups, context.locks):
            table.pop(key, None)
        if context.metrics is not None:
            context.metrics.forget(*key)
