"""The Kopf layer keeps nothing for objects that are gone, and no memory across a daemon's restart.

A deleted InferenceDeployment's pods are deleted by the garbage collector after it, and each of
their events reaches ``pod_changed``: waking a daemon that no longer exists must not create an
entry that stays for the life of the operator (one per deleted deployment).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import kopf
import pytest
from handler_calls import as_called, kopf_body

from neuronfleet import handlers
from neuronfleet.handlers import OperatorContext, kopf_settings
from neuronfleet.metrics.operator_metrics import OperatorMetrics
from neuronfleet.planning.labels import LABEL_DEPLOYMENT
from neuronfleet.planning.observation import DeploymentMemory
from neuronfleet.reconcile import OperatorSettings, ReconcileReport

deployment_changed = as_called(handlers.deployment_changed)
keep_converging = as_called(handlers.keep_converging)
pod_changed = as_called(handlers.pod_changed)


def context() -> OperatorContext:
    reconciler: Any = object()  # never called here
    return OperatorContext(reconciler)


async def test_pods_of_a_deleted_deployment_leave_nothing_behind() -> None:
    ctx = context()
    memo = kopf.Memo(context=ctx)
    wakeup = ctx.wakeups[("ns", "gone")]  # what the daemon takes when it starts
    await pod_changed(labels={LABEL_DEPLOYMENT: "gone"}, namespace="ns", memo=memo)
    assert wakeup.is_set(), "a pod change wakes the running daemon"

    await deployment_changed(type="DELETED", body=kopf_body({}), namespace="ns", name="gone", memo=memo)
    for _ in range(3):  # the garbage collector deletes the pods
        await pod_changed(labels={LABEL_DEPLOYMENT: "gone"}, namespace="ns", memo=memo)
    await pod_changed(labels={LABEL_DEPLOYMENT: "never-seen"}, namespace="ns", memo=memo)
    assert dict(ctx.wakeups) == {}
    assert (dict(ctx.memories), dict(ctx.locks), ctx.generations) == ({}, {}, {})


class FakeReconciler:
    """Records the memory each reconcile starts from; stops the daemon after one."""

    def __init__(self, stop: list[bool], wakeup: Any) -> None:
        self.settings = OperatorSettings(interval_seconds=10.0)
        self.given: list[DeploymentMemory] = []
        self.stop, self.wakeup = stop, wakeup
        self.status: dict[str, Any] = {}

    async def reconcile(self, body: Any, memory: DeploymentMemory, stopping: Any = None) -> ReconcileReport:
        self.given.append(memory)
        self.stop.append(True)
        self.wakeup().set()  # no wait for the interval
        return ReconcileReport((), (), self.status, DeploymentMemory(), None, 0)


class Stopped:
    def __init__(self, stop: list[bool]) -> None:
        self.stop = stop

    def __bool__(self) -> bool:
        return bool(self.stop)

    async def wait(self) -> None:
        await asyncio.Event().wait()  # the daemon ends on ``bool(self)`` in these tests


async def test_a_daemon_that_starts_again_starts_from_the_status_not_from_old_memory() -> None:
    # Kopf stops every daemon when a peer of higher priority appears and starts them again when it
    # leaves: the memory kept from before the pause is stale (what the peer did meanwhile is only in
    # the status). Its old apply errors were published again by the first status write of the resumed
    # daemon (Degraded flapping True and back), and its autoscaler ignored the peer's checkpoint.
    stop: list[bool] = []
    ctx = context()
    reconciler = FakeReconciler(stop, lambda: ctx.wakeups[("ns", "d")])
    ctx.reconciler = reconciler  # type: ignore[assignment]
    stale = DeploymentMemory(apply_errors=("Service d exists and belongs to no controller",))
    ctx.memories[("ns", "d")] = stale  # left by the daemon's run before the pause

    body = kopf_body({"metadata": {"name": "d", "namespace": "ns", "generation": 3}})
    await keep_converging(body=body, memo=kopf.Memo(context=ctx), namespace="ns", name="d", stopped=Stopped(stop))
    assert reconciler.given == [DeploymentMemory()]


class PostedEvents:
    """The Events posted through the operator's client, as "reason: message"."""

    def __init__(self) -> None:
        self.posted: list[str] = []

    async def post_event(self, involved: Any, type_: str, reason: str, message: str) -> bool:
        self.posted.append(f"{reason}: {message}")
        return True


class FailingReconciler:
    """Raises the scripted errors in turn (None: a reconcile that succeeds), then stops the daemon."""

    def __init__(self, script: list[str | None], stop: list[bool], wakeup: Any) -> None:
        self.settings = OperatorSettings(interval_seconds=10.0)
        self.script, self.stop, self.wakeup = list(script), stop, wakeup
        self.kube = PostedEvents()

    async def reconcile(self, body: Any, memory: DeploymentMemory, stopping: Any = None) -> ReconcileReport:
        error = self.script.pop(0)
        if not self.script:
            self.stop.append(True)
        self.wakeup().set()  # no wait for the back-off
        if error is not None:
            raise RuntimeError(error)
        return ReconcileReport((), (), {}, DeploymentMemory(), None, 0)


async def test_a_persistent_failure_posts_one_warning_until_its_message_changes_or_a_reconcile_succeeds() -> None:
    # Regression: a Warning per failed reconcile, retried every 30 s at most, and Kopf names each
    # Event anew (no aggregation): ~120 Events an hour per object for one persistent error.
    stop: list[bool] = []
    ctx = context()
    script = ["403 Forbidden", "403 Forbidden", "403 Forbidden", "timed out", None, "timed out", "timed out"]
    reconciler = FailingReconciler(script, stop, lambda: ctx.wakeups[("ns", "d")])
    ctx.reconciler = reconciler  # type: ignore[assignment]
    body = kopf_body({"metadata": {"name": "d", "namespace": "ns", "generation": 1}})
    await keep_converging(body=body, memo=kopf.Memo(context=ctx), namespace="ns", name="d", stopped=Stopped(stop))
    assert reconciler.kube.posted == [
        "ReconcileFailed: 403 Forbidden",
        "ReconcileFailed: timed out",
        "ReconcileFailed: timed out",  # again after the success between
    ]
    assert ctx.failures == 6
    await deployment_changed(type="DELETED", body=body, namespace="ns", name="d", memo=kopf.Memo(context=ctx))
    assert ctx.failures_posted == {}


async def test_a_reconcile_that_raised_is_timed_as_one_that_returned() -> None:
    # Both outcomes feed one duration histogram: each reconcile's duration is the time it took, so
    # the two together take no longer than the daemon that ran them.
    stop: list[bool] = []
    ctx = context()
    ctx.metrics = OperatorMetrics()
    reconciler = FailingReconciler(["403 Forbidden", None], stop, lambda: ctx.wakeups[("ns", "d")])
    ctx.reconciler = reconciler  # type: ignore[assignment]
    body = kopf_body({"metadata": {"name": "d", "namespace": "ns", "generation": 1}})
    started = time.perf_counter()
    await keep_converging(body=body, memo=kopf.Memo(context=ctx), namespace="ns", name="d", stopped=Stopped(stop))
    elapsed = time.perf_counter() - started
    histogram = {
        s.name: s.value
        for f in ctx.metrics.registry.collect()
        if f.name == "neuronfleet_reconcile_duration_seconds"
        for s in f.samples
    }
    assert histogram["neuronfleet_reconcile_duration_seconds_count"] == 2
    assert 0 <= histogram["neuronfleet_reconcile_duration_seconds_sum"] <= elapsed


async def test_a_stopped_daemon_leaves_no_state_and_no_metric_series_behind() -> None:
    # A daemon stops when the operator pauses for a peer of higher priority: the paused replica kept
    # exporting the object's last counts (stale once the peer scales) and, for an object deleted
    # while it was paused (a DELETED event it never sees), for good; and its remembered desired count
    # made it count the peer's scale-up again as its own scaling decision once it resumed.
    stop: list[bool] = []
    ctx = context()
    ctx.metrics = OperatorMetrics()
    reconciler = FakeReconciler(stop, lambda: ctx.wakeups[("ns", "d")])
    reconciler.status = {"desiredReplicas": 2, "replicas": 2}
    ctx.reconciler = reconciler  # type: ignore[assignment]
    body = kopf_body({"metadata": {"name": "d", "namespace": "ns", "generation": 3}})
    ctx.failures_posted[("ns", "d")] = "an old failure"
    await keep_converging(body=body, memo=kopf.Memo(context=ctx), namespace="ns", name="d", stopped=Stopped(stop))
    exported = [s for f in ctx.metrics.registry.collect() for s in f.samples if s.labels.get("name") == "d"]
    assert exported == []
    assert (dict(ctx.memories), ctx.generations, ctx.failures_posted, dict(ctx.wakeups)) == ({}, {}, {}, {})

    # Resumed after the peer scaled to 3: the first reconcile is no scaling decision of this replica.
    stop.clear()
    reconciler.status = {"desiredReplicas": 3, "replicas": 3}
    await keep_converging(body=body, memo=kopf.Memo(context=ctx), namespace="ns", name="d", stopped=Stopped(stop))
    decisions = [
        s for f in ctx.metrics.registry.collect() for s in f.samples if s.name == "neuronfleet_scaling_decisions_total"
    ]
    assert decisions == []


class ConflictingReconciler:
    """Reports the scripted outcomes in turn ("conflict": a status write refused twice,
    "failed": an error, "refused": a refused spec with nothing to reconcile, "raised": an exception,
    None: a success), noting the loop's time of each; then stops the daemon."""

    def __init__(self, script: Sequence[str | None], stop: list[bool], metrics: OperatorMetrics) -> None:
        self.settings = OperatorSettings(interval_seconds=10.0)
        self.script, self.stop, self.metrics = list(script), stop, metrics
        self.kube = PostedEvents()
        self.started: list[float] = []
        self.errors: list[tuple[str, float]] = []

    async def reconcile(self, body: Any, memory: DeploymentMemory, stopping: Any = None) -> ReconcileReport:
        self.started.append(asyncio.get_running_loop().time())
        outcome = self.script.pop(0)
        if not self.script:
            self.stop.append(True)
            # The earlier reconciles' errors, as exported (a stopped daemon's series are dropped).
            self.errors = [
                (s.labels["kind"], s.value)
                for f in self.metrics.registry.collect()
                for s in f.samples
                if s.name == "neuronfleet_reconcile_errors_total"
            ]
        if outcome == "conflict":
            return ReconcileReport((), (), {}, memory, None, 0, conflict=True)
        if outcome == "conflict after a failed apply":
            return ReconcileReport((), (), {}, memory, "create pod d-0: 403 Forbidden", 0, conflict=True)
        if outcome == "refused":
            return ReconcileReport((), (), {}, memory, None, 1, refusal="spec.scaling.replicas", refusal_idle=True)
        if outcome == "raised":
            raise RuntimeError("the API server hung up")
        return ReconcileReport((), (), {}, memory, outcome, 0)


@pytest.mark.looptime
async def test_a_status_write_conflict_is_retried_at_once_and_is_no_failure() -> None:
    # A reconcile whose first status write met another writer's change twice applies nothing. It
    # was counted a failure: backed off 20 s, then 30 s, counted in the reconcile errors, and the
    # other writer's status-only change (same generation) woke nothing. It is now run again at
    # once, once; a second conflict in a row waits the interval, not a back-off.
    stop: list[bool] = []
    ctx = context()
    ctx.metrics = OperatorMetrics()
    script = ["conflict", None, "conflict", "conflict", None, "failed", "conflict", None]
    reconciler = ConflictingReconciler(script, stop, ctx.metrics)
    ctx.reconciler = reconciler  # type: ignore[assignment]
    body = kopf_body({"metadata": {"name": "d", "namespace": "ns", "generation": 1}})
    start = asyncio.get_running_loop().time()
    await keep_converging(body=body, memo=kopf.Memo(context=ctx), namespace="ns", name="d", stopped=Stopped(stop))
    assert [round(t - start) for t in reconciler.started] == [0, 0, 10, 10, 20, 30, 50, 50]
    assert reconciler.errors == [("ReconcileError", 1.0)], "only the failure is a reconcile error"


@pytest.mark.looptime
async def test_conflicts_that_each_carry_an_apply_error_back_off_from_the_re_run_on() -> None:
    # Two writers fighting over the status while a pod create is refused every time: each reconcile
    # is a conflict that also carries the apply's error. The conflict alone is no failure, but the
    # error is: from the at-once re-run on it backs off as a failed reconcile does (20 s, then the
    # 30 s cap; it re-applied every 10 s for good before).
    stop: list[bool] = []
    ctx = context()
    ctx.metrics = OperatorMetrics()
    reconciler = ConflictingReconciler(["conflict after a failed apply"] * 5 + [None], stop, ctx.metrics)
    ctx.reconciler = reconciler  # type: ignore[assignment]
    body = kopf_body({"metadata": {"name": "d", "namespace": "ns", "generation": 1}})
    start = asyncio.get_running_loop().time()
    await keep_converging(body=body, memo=kopf.Memo(context=ctx), namespace="ns", name="d", stopped=Stopped(stop))
    assert [round(t - start) for t in reconciler.started] == [0, 0, 20, 50, 80, 110]


@pytest.mark.looptime
async def test_conflicts_without_an_error_end_an_earlier_errors_back_off() -> None:
    # Errors, then the error fixed while two writers still conflict: the conflicts alone are no
    # failure, so the back-off the errors built ends (it stayed at the 30 s cap for as long as the
    # conflicts went on).
    stop: list[bool] = []
    ctx = context()
    ctx.metrics = OperatorMetrics()
    reconciler = ConflictingReconciler(["failed"] * 3 + ["conflict"] * 4, stop, ctx.metrics)
    ctx.reconciler = reconciler  # type: ignore[assignment]
    body = kopf_body({"metadata": {"name": "d", "namespace": "ns", "generation": 1}})
    start = asyncio.get_running_loop().time()
    await keep_converging(body=body, memo=kopf.Memo(context=ctx), namespace="ns", name="d", stopped=Stopped(stop))
    assert [round(t - start) for t in reconciler.started] == [0, 20, 50, 80, 80, 90, 100]


@pytest.mark.looptime
async def test_a_failure_breaks_a_run_of_refused_reconciles_and_its_back_off_starts_again() -> None:
    # A refused spec with nothing to reconcile is retried on a back-off of its own (20 s, then the
    # 30 s cap). A reconcile that raised in between is a failure (20 s), and the refusals after it
    # are a new run: 20 s again, not the cap.
    stop: list[bool] = []
    ctx = context()
    ctx.metrics = OperatorMetrics()
    reconciler = ConflictingReconciler(["refused", "refused", "raised", "refused", None], stop, ctx.metrics)
    ctx.reconciler = reconciler  # type: ignore[assignment]
    body = kopf_body({"metadata": {"name": "d", "namespace": "ns", "generation": 1}})
    start = asyncio.get_running_loop().time()
    await keep_converging(body=body, memo=kopf.Memo(context=ctx), namespace="ns", name="d", stopped=Stopped(stop))
    assert [round(t - start) for t in reconciler.started] == [0, 20, 50, 70, 90]
    assert [line.split(":")[0] for line in reconciler.kube.posted] == ["ReconcileFailed"]


def test_only_the_deployments_pods_are_watched() -> None:
    # The pod handler's label filter is applied by Kopf in this process: without a server-side
    # selector, every pod event of the cluster was streamed to the operator and dropped there.
    pods = kopf.Resource("", "v1", "pods", namespaced=True)
    jobs = kopf.Resource("batch", "v1", "jobs", namespaced=True)
    selectors = kopf_settings().watching.label_selectors
    assert selectors.collect(pods) == [LABEL_DEPLOYMENT]
    assert selectors.collect(jobs) == []


async def test_only_a_new_spec_generation_wakes_the_daemon_not_the_operators_own_status_write() -> None:
    ctx = context()
    ctx.reconciler = FakeReconciler([], lambda: asyncio.Event())  # type: ignore[assignment]
    memo = kopf.Memo(context=ctx)
    reconciled = {"metadata": {"name": "d", "namespace": "ns", "generation": 3}}
    await ctx.reconcile(kopf_body(reconciled), "ns", "d")
    wakeup = ctx.wakeups[("ns", "d")]

    # The watch's event of the status the reconcile wrote: the same generation.
    written = {**reconciled, "status": {"observedGeneration": 3}}
    await deployment_changed(type="MODIFIED", body=kopf_body(written), namespace="ns", name="d", memo=memo)
    assert not wakeup.is_set(), "the operator's own status write woke its daemon"

    edited = {"metadata": {**reconciled["metadata"], "generation": 4}}
    await deployment_changed(type="MODIFIED", body=kopf_body(edited), namespace="ns", name="d", memo=memo)
    assert wakeup.is_set(), "a new spec generation did not wake the daemon"
