"""The Kopf layer: one reconcile loop per object (a daemon), and handlers that only wake it.

- start-up: clients are created once (Kubernetes, artifact store, metrics) and put in Kopf's
  ``memo`` as an :class:`OperatorContext`; nothing is global. Kopf's settings are made in one
  place, :func:`kopf_settings`.
- the per-object daemon is the only caller of the reconcile: at once when the object appears
  (or the operator starts, or resumes after a peering pause: it then starts from the status, with
  no in-process memory), then every ``interval`` seconds, or sooner when woken or when the
  autoscaler's next decision is due (the reconcile says when). Its back-off
  after a failure (doubling from the interval, at most :data:`MAX_BACKOFF_SECONDS`) is the
  operator's one retry policy; a refused spec with nothing kept to reconcile is retried on the
  same steps, counted apart from failures (:func:`retry_delay`).
- wake-ups: a spec change (a new ``metadata.generation``; the operator's own status writes do
  not wake it) and any change of one of the object's pods.
- the same pod watch keeps an index of the pods by the node each holds (:func:`pods_on_nodes`),
  handed to the reconciler once at start-up: a plan counts other models' pods on its nodes from
  it, with no request of its own.
- stopping: when the daemon stops (the operator exits, or pauses because a peer of higher priority
  runs: Kopf's peering), its reconcile under way writes nothing more and its reads are cancelled,
  since the peer taking over acts at once. Everything kept for the object (memory, its metric
  series) is dropped then, and on its deletion: a replica holds state and exports series only for
  the objects whose daemons run on it.
- children (pods, Service, PDB, compile Jobs) carry an ownerReference, so the API server's garbage
  collector removes them; Kopf's finalizer only lets it stop the daemon first.

There are no create/update handlers, so Kopf keeps no per-handler progress on the object; the
framework still parses its ``last-handled-configuration`` annotation on every event, so a corrupted
one is tolerated (:class:`TolerantDiffBaseStorage`) and reported by the reconcile as a condition.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kopf

from neuronfleet.aio import wait_event
from neuronfleet.api.v1alpha1 import GROUP, PLURAL, VERSION
from neuronfleet.kube.client import kubeconfig_files, load_configuration
from neuronfleet.kube.observe import node_held
from neuronfleet.metrics.operator_metrics import OperatorMetrics
from neuronfleet.planning.labels import LABEL_DEPLOYMENT
from neuronfleet.planning.observation import DeploymentMemory
from neuronfleet.planning.reasons import Event, Reason
from neuronfleet.reconcile import Reconciler, ReconcileReport

if TYPE_CHECKING:
    from kubernetes_asyncio.client import Configuration

logger = logging.getLogger(__name__)

#: Longest pause between retries of a failing reconcile: a blocked deployment (a missing
#: PriorityClass, an unreachable store) is retried within this, not only when a pod changes.
MAX_BACKOFF_SECONDS = 30.0

registry = kopf.OperatorRegistry()

Key = tuple[str, str]


class TolerantDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """Kopf's annotation storage, reading a value that is not JSON as absent instead of raising.

    Kopf parses this annotation for every event of the object; unparseable, it raised each time
    and the object was retried forever with nothing but log lines to show for it.
    """

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        try:
            return super().fetch(body=body)
        except ValueError:
            return None


def kopf_settings(*, in_process: bool = False) -> kopf.OperatorSettings:
    """Every Kopf setting of the operator.

    ``in_process``: the operator shares its process with others (tests, the sandbox demo), so
    Kopf's last-resort SIGKILL of a stuck exit, which would take the host process along, is off.
    """
    settings = kopf.OperatorSettings()
    # The operator posts its own Events about what it did; Kopf's per-handler chatter is noise.
    settings.posting.level = logging.WARNING
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = TolerantDiffBaseStorage(prefix=GROUP)
    settings.watching.server_timeout = 300
    # Only the deployments' pods are streamed: the handler's label filter alone is applied in this
    # process, so every pod event of the cluster (every other team's workloads) was sent, parsed
    # and dropped here.
    settings.watching.label_selectors["pods"] = LABEL_DEPLOYMENT
    if in_process:
        settings.process.ultimate_exiting_timeout = None
    return settings


@dataclass
class OperatorContext:
    """What the handlers share: the reconciler and per-object memory, wake-ups and locks."""

    reconciler: Reconciler
    memories: dict[Key, DeploymentMemory] = field(default_factory=lambda: defaultdict(DeploymentMemory))
    wakeups: dict[Key, asyncio.Event] = field(default_factory=lambda: defaultdict(asyncio.Event))
    locks: dict[Key, asyncio.Lock] = field(default_factory=lambda: defaultdict(asyncio.Lock))
    #: The spec generation each object was last reconciled at (a new one wakes its daemon).
    generations: dict[Key, int | None] = field(default_factory=dict)
    #: The message of the ReconcileFailed Event last posted per object, while its reconciles keep
    #: raising: the Event is posted again only when the message changes or after a success.
    failures_posted: dict[Key, str] = field(default_factory=dict)
    metrics: OperatorMetrics | None = None
    reconciles: int = 0
    failures: int = 0
    #: Status writes made, in all (0 per idle object: nothing is written when nothing changed).
    status_writes: int = 0
    #: The kubeconfig Kopf logs in with, when one was given (never put in the process environment).
    kubeconfig: Path | None = None
    #: Bounds the reconciles running at once (OperatorSettings.max_concurrent_reconciles); made on
    #: first use, in the operator's event loop.
    reconcile_slots: asyncio.Semaphore | None = None

    def _slots(self) -> asyncio.Semaphore:
        if self.reconcile_slots is None:
            self.reconcile_slots = asyncio.Semaphore(max(1, self.reconciler.settings.max_concurrent_reconciles))
        return self.reconcile_slots

    async def reconcile(
        self, body: Any, namespace: str, name: str, stopping: asyncio.Event | None = None
    ) -> ReconcileReport:
        """Reconcile one object; one at a time per object, at most ``max_concurrent_reconciles``
        across objects. Nothing is written once ``stopping`` is set. The reconcile posts its Events
        itself, each group as soon as the write it tells of lands (see :meth:`Reconciler.reconcile`)."""
        key = (namespace, name)
        async with self.locks[key], self._slots():
            self.reconciles += 1
            self.generations[key] = (body.get("metadata") or {}).get("generation")
            started = time.perf_counter()
            try:
                report = await self.reconciler.reconcile(dict(body), self.memories[key], stopping)
            except Exception as exc:
                if self.metrics is not None:
                    self.metrics.record_reconcile(
                        namespace, name, time.perf_counter() - started, None, type(exc).__name__
                    )
                raise
            self.memories[key] = report.memory
            self.status_writes += report.writes
            if self.metrics is not None:
                error_kind = "ReconcileError" if report.error else None
                self.metrics.record_reconcile(namespace, name, time.perf_counter() - started, report.status, error_kind)
        return report

    async def post_events(self, body: Any, events: Sequence[Event]) -> None:
        """Post ``events`` about the object ``body`` (a failed reconcile's: the reconcile posts its
        own), with the operator's own client (see :meth:`neuronfleet.kube.client.KubeClient.post_event`)."""
        if not events:
            return
        kube = self.reconciler.kube
        await asyncio.gather(*(kube.post_event(dict(body), e.type, e.reason.value, e.message) for e in events))

    def failure_to_post(self, namespace: str, name: str, message: str | None) -> bool:
        """Whether a reconcile that raised ``message`` (None: one that did not raise) gets a
        ReconcileFailed Event: the first failure after a success, or a new message. A persistent
        error retried every 30 s posted one per retry (Kopf names each Event anew, so they are not
        aggregated): about 120 an hour per object."""
        key = (namespace, name)
        if message is None:
            self.failures_posted.pop(key, None)
            return False
        if self.failures_posted.get(key) == message:
            return False
        self.failures_posted[key] = message
        return True

    def wake(self, namespace: str, name: str) -> None:
        """Wake the object's daemon, if it has one: a pod of a deleted object (the garbage collector
        deletes them after it) must not leave an entry behind for good."""
        wakeup = self.wakeups.get((namespace, name))
        if wakeup is not None:
            wakeup.set()

    def forget(self, namespace: str, name: str) -> None:
        """Drop everything kept for an object, its metric series included: when it is deleted, and
        when its daemon stops. A paused replica then exports no stale series of objects a peer runs
        (nor, later, of objects deleted meanwhile, whose DELETED event it never saw), and its scaling
        decisions count from the status it resumes from, not from before the pause."""
        key = (namespace, name)
        self.memories.pop(key, None)
        self.wakeups.pop(key, None)
        self.locks.pop(key, None)
        self.generations.pop(key, None)
        self.failures_posted.pop(key, None)
        if self.metrics is not None:
            self.metrics.forget(namespace, name)


def context_of(memo: Any) -> OperatorContext | None:
    context = memo.get("context") if hasattr(memo, "get") else None
    return context if isinstance(context, OperatorContext) else None


def connection_info(configuration: Configuration) -> kopf.ConnectionInfo:
    """Kopf's credentials from the operator's own client configuration: one reading of a kubeconfig
    for both clients, so they cannot end up on different clusters."""
    scheme, _, token = str(configuration.api_key.get("BearerToken") or "").partition(" ")
    return kopf.ConnectionInfo(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert or None,
        insecure=not configuration.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=configuration.cert_file or None,
        private_key_path=configuration.key_file or None,
    )


@kopf.on.login(registry=registry)
async def login(memo: kopf.Memo, **kwargs: Any) -> Any:
    """The credentials the operator's own client uses, read afresh at each login (an exec plugin's
    token expires): the kubeconfig it was given (``neuronfleet run --kubeconfig``, the sandbox
    demo), else in a pod the service account, elsewhere ``$KUBECONFIG``'s files or
    ``~/.kube/config`` (see :func:`~neuronfleet.kube.client.kubeconfig_files`). Kopf's own
    kubeconfig login runs no exec plugin (EKS's ``aws eks get-token``) and fails on a listed file
    that is missing, so it is not used."""
    context = context_of(memo)
    kubeconfig = context.kubeconfig if context is not None else None
    if kubeconfig_files(kubeconfig) is None:
        return kopf.login_with_service_account(**kwargs)
    return connection_info(await load_configuration(kubeconfig))


@kopf.on.cleanup(registry=registry)
async def close_clients(memo: kopf.Memo, **_: Any) -> None:
    context = context_of(memo)
    if context is not None:
        await context.reconciler.kube.close()


def failure_message(exc: BaseException) -> str:
    """What a failed reconcile's log line and Warning Event say: the exception's message, else its
    type (``asyncio.timeout`` raises a TimeoutError whose str() is empty)."""
    return str(exc) or type(exc).__name__


#: Seconds a reconcile under way gets to end when its daemon stops (Kopf then cancels it); it
#: normally ends at once: its reads are cancelled and it skips its writes (a write already sent
#: completes). A loop between reconciles ends at once. Well inside the operator pod's termination grace.
STOP_GRACE_SECONDS = 5.0


@kopf.daemon(
    GROUP, VERSION, PLURAL, registry=registry, cancellation_backoff=STOP_GRACE_SECONDS, cancellation_timeout=2.0
)
async def keep_converging(
    body: kopf.Body, memo: kopf.Memo, namespace: str | None, name: str, stopped: kopf.DaemonStopped, **_: Any
) -> None:
    """The object's one reconcile loop: now, then every interval, when woken or when the autoscaler
    is due to decide; back off on failure."""
    context = context_of(memo)
    if context is None:
        raise kopf.PermanentError("the operator was started without its context (see neuronfleet.run_command)")
    namespace = namespace or "default"
    wakeup = context.wakeups[(namespace, name)]
    # A daemon starts when the object appears, when the operator starts, and again when Kopf resumes
    # it after a peering pause (a peer of higher priority ran the object meanwhile). Memory left from
    # an earlier run is stale then: the object is picked up from its status, as after a restart.
    context.memories.pop((namespace, name), None)
    # Kopf stops a daemon by setting ``stopped`` and cancels it STOP_GRACE_SECONDS later, with a
    # WARNING per object ("is cancelled. Will escalate."): the wait between reconciles must end on it,
    # and the reconcile under way must write nothing more: the peer taking over (Kopf's goodbye on
    # exit, or its pausing of this replica, lets it act at once) may be reconciling a newer spec.
    stopping = DaemonStopping(stopped)
    watch = asyncio.create_task(_signal_when_stopped(stopped, wakeup, stopping))
    try:
        await _converge(context, body, namespace, name, stopped, wakeup, stopping)
    finally:
        watch.cancel()
        context.forget(namespace, name)


class DaemonStopping(asyncio.Event):
    """An event set when Kopf's ``stopped`` is; ``is_set()`` reads ``stopped`` itself, so a check
    before a write is not a loop step behind (``wait()`` wakes once the daemon's watch sets it)."""

    def __init__(self, stopped: kopf.DaemonStopped) -> None:
        super().__init__()
        self.stopped = stopped

    def is_set(self) -> bool:
        return super().is_set() or bool(self.stopped)


async def _signal_when_stopped(stopped: kopf.DaemonStopped, wakeup: asyncio.Event, stopping: asyncio.Event) -> None:
    await stopped.wait()
    stopping.set()
    wakeup.set()


def retry_delay(interval: float, failures: int, idle: int) -> float:
    """Seconds until the next reconcile: ``interval`` doubled per failure in a row (at most
    :data:`MAX_BACKOFF_SECONDS`), and likewise per reconcile in a row of a refused spec with nothing
    to reconcile (``idle``): that one is no error, but retried every interval it would only rewrite
    the same InvalidSpec status, for as long as the spec stays refused."""
    steps = max(failures, idle)
    return min(MAX_BACKOFF_SECONDS, interval * 2 ** min(steps, 6)) if steps else interval


async def _converge(
    context: OperatorContext,
    body: kopf.Body,
    namespace: str,
    name: str,
    stopped: kopf.DaemonStopped,
    wakeup: asyncio.Event,
    stopping: asyncio.Event,
) -> None:
    failures = 0
    conflicts = 0
    # Reconciles in a row that met a refused spec and had nothing to reconcile (no error: see
    # ReconcileReport.refusal_idle); spaced as failures are, counted apart from them.
    idle = 0
    while not stopped:
        interval = context.reconciler.settings.interval_seconds
        # Cleared before the reconcile: a change during it wakes the next one at once.
        wakeup.clear()
        decision_in: float | None = None
        try:
            report = await context.reconcile(body, namespace, name, stopping)
            decision_in = report.next_decision_in
            if report.conflict:
                # Another writer changed the object during the status write: a race, not a failure.
                # Only a new generation wakes the daemon, so the reconcile runs again at once; a
                # second conflict in a row waits as usual. An apply error the conflicting reconcile
                # also met counts from the re-run on (two writers fighting over the status would
                # otherwise retry a refused create every interval for good); none ends the back-off.
                conflicts += 1
                if report.error and conflicts > 1:
                    failures += 1
                elif not report.error:
                    failures = 0  # the apply succeeded: an earlier error's back-off is over
            else:
                conflicts = 0
                failures = failures + 1 if report.error else 0
                idle = idle + 1 if report.refusal_idle else 0
                context.failure_to_post(namespace, name, None)
        except Exception as exc:  # any failure: report it, back off, try again; never crash-loop
            conflicts = 0
            idle = 0
            failures += 1
            context.failures += 1
            message = failure_message(exc)
            logger.warning("reconcile of %s/%s failed (%d in a row): %s", namespace, name, failures, message)
            if context.failure_to_post(namespace, name, message):
                await context.post_events(body, [Event("Warning", Reason.RECONCILE_FAILED, message)])
        if conflicts == 1:
            continue
        delay = retry_delay(interval, failures, idle)
        if not failures and decision_in is not None:
            # The autoscaler decides every spec.scaling.intervalSeconds, not at the first periodic
            # reconcile after that (every 20 s for 15 under a 10 s interval; 10 s for 5).
            delay = min(delay, decision_in)
        # wait_event, not wait_for: Kopf may stop a daemon by cancelling it (see neuronfleet.aio).
        await wait_event(wakeup, delay)


@kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
async def deployment_changed(
    type: str, body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **_: Any
) -> None:
    """A new spec generation wakes the object's daemon; deletion drops its memory (already dropped
    when its daemon stopped, unless it had none)."""
    context = context_of(memo)
    if context is None:
        return
    namespace = namespace or "default"
    if type == "DELETED":
        context.forget(namespace, name)
        return
    key = (namespace, name)
    if key in context.generations and context.generations[key] != body.get("metadata", {}).get("generation"):
        context.wake(namespace, name)


@kopf.on.event("pods", labels={LABEL_DEPLOYMENT: kopf.PRESENT}, registry=registry)
async def pod_changed(labels: kopf.Labels, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    """A pod of a deployment changed (bound, ready, deleted...): wake that deployment's daemon."""
    context = context_of(memo)
    if context is not None:
        context.wake(namespace or "default", labels[LABEL_DEPLOYMENT])


@kopf.index("pods", labels={LABEL_DEPLOYMENT: kopf.PRESENT}, registry=registry)
async def pods_on_nodes(body: kopf.Body, **_: Any) -> dict[str, tuple[str, str]]:
    """neuronfleet's pods by the node each holds (see :func:`~neuronfleet.kube.observe.node_held`).

    Kopf keeps it from the pod watch it runs for :func:`pod_changed` (the same pods, in every
    namespace it watches) and updates it before any handler sees an event; its first reconciles
    wait until the initial list is indexed. A list of every model's pods sent by the reconciles
    instead held them all up when slow, was resent by each after a 429, and parsed thousands of
    whole pods on the event loop every few seconds. Async: Kopf runs a sync handler in a thread.
    """
    return node_held(body)


@kopf.on.startup(registry=registry)
async def share_pod_index(memo: kopf.Memo, **kwargs: Any) -> None:
    """Hand the pod index to the reconciler, once: it is a live view Kopf keeps up to date. (Kopf
    passes each index by its function's name; taken from ``kwargs``, as Kopf's type of a start-up
    handler names no index.)"""
    index: kopf.Index[str, tuple[str, str]] = kwargs["pods_on_nodes"]
    context = context_of(memo)
    if context is not None:
        context.reconciler.occupancy = index


__all__ = ["MAX_BACKOFF_SECONDS", "OperatorContext", "TolerantDiffBaseStorage", "kopf_settings", "registry"]
