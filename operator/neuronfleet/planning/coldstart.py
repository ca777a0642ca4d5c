"""Measured cold starts: per-pod start-up phases and rolling p50/p90 per instance type (pure).

The operator reads each pod's timestamps (:class:`PodTimeline`, extracted from the pod and its node
by :mod:`neuronfleet.kube.coldstart`) and folds every pod that has become Ready into a bounded
rolling window per instance type. Phases of one pod:

- ``scheduling``: created -> PodScheduled (includes the wait for a new node, when there was one);
- ``start``: scheduled -> container running (image pull and container start);
- ``load``: container running -> Ready (runtime init, artifact load and warm-up);
- ``pod``: the pod's own cold start: created -> Ready on a node that was up, or for a pod created
  before its node turned Ready (a node launched for it, for an earlier pod or for a placeholder),
  node Ready -> pod Ready (what a pod pays once a node has room);
- ``node``: only for pods created before their Node object (which the node registers when it
  joins; the instance's launch before that is not seen here) and bound after it: pod created ->
  node Ready. A pod created once the node had registered, NotReady, waited for the rest of its
  start only: no node sample. Samples are per pod, not per node: each pod pending while a node
  joined counts it.

The node's Ready time is at most the pod's binding (the scheduler binds only to a Ready node): a
later one, or none (NotReady now), is a later flap of the node, and the binding is taken instead.

Each pod counts once (its uid is remembered while the pod exists), and only on its first start:
a restarted container's timestamps describe the restart, not a cold start, and a pod once seen
failing to start (an image pull that failed, a container that could not be created: not
restarts, so its timestamps look like one long start) is no cold start either. Nor is a pod Ready
longer after its container started than its startup budget allows (:attr:`PodTimeline.startup_budget`,
from its startup probe; :data:`MAX_STARTUP_SECONDS` when unknown): the kubelet kills a container
whose startup probe fails that long, so such a Ready time is a later readiness flip (a pod that
went unready for a while hours into its life, or one a restarted operator sees for the first
time), not the end of a start. Stamps out of order by up to :data:`CLOCK_SKEW_SECONDS` (they come
from the API server's and the kubelet's clocks) are taken as simultaneous; further out of order,
the pod is no sample. A pod refused so is remembered while it exists, and reported once in
:attr:`ColdStartState.rejections`, which the operator logs. Samples expire
after :data:`MAX_SAMPLE_AGE_SECONDS`, besides the newest :data:`MAX_SAMPLES` being kept.
:func:`status` gives ``status.coldStart`` (p50/p90 with numpy's default linear interpolation, as
the simulator reports them) and :func:`for_warm_pool` the cold starts that size the Auto warm pool
(:func:`estimate`: the p90, without a slowest sample that stands alone, more than
:data:`OUTLIER_FACTOR` times the next, while there are fewer than :data:`ROBUST_SAMPLES`: with 3
samples numpy's p90 is nearly their maximum, so one slow start sized the pool), once a phase has
:data:`MIN_SAMPLES` samples (before that the spec's assumed values apply, as in the
simulator).

State in, state out: :func:`observe` returns a new :class:`ColdStartState`; the operator keeps it in
its per-object memory, so after a restart only the pods still present are measured again. What the
pods since gone measured survives in ``status.coldStart``: a restarted operator (or a new leader)
carries those figures over (:func:`take_over`, :class:`Carried`) and reports and sizes the warm pool
from them, phase by phase, until the samples it has measured since stand alone (as many as the
status counted, at most :data:`ROBUST_SAMPLES`), and until :data:`MAX_SAMPLE_AGE_SECONDS` after
the newest sample they count (``lastSampleTime``, written back with them: restarts in a row do not
count the day again).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from neuronfleet.api.v1alpha1 import ColdStartStatus, PhaseStats
from neuronfleet.planning.times import rfc3339, utc_seconds
from neuronfleet.planning.warmpool import ColdStart

#: Samples kept per instance type (newest by Ready time); enough for a stable p90.
MAX_SAMPLES = 100
#: Samples a phase needs before its p90 replaces the spec's assumed cold start (the simulator's rule).
MIN_SAMPLES = 3
#: Samples older than this (by their Ready time) are dropped: the image, the model and the nodes
#: change, and one slow start must not size the warm pool until a hundred newer ones displace it.
MAX_SAMPLE_AGE_SECONDS = 86400.0
#: Below this many samples, the slowest sample is left out of the p90 when it is more than
#: OUTLIER_FACTOR times the next slowest: with 3 samples numpy's p90 is nearly the maximum, so one
#: slow start (a retried image pull, a bad node) sized the pool alone. From 11 samples on, one
#: sample above the rest no longer moves the p90. Samples of one distribution (the simulator's
#: uniform and log-normal phases) hardly ever have such a gap, so their estimate is the plain p90;
#: a slow mode seen twice (pods that pull the image beside pods on nodes that have it) is kept.
ROBUST_SAMPLES = 10
OUTLIER_FACTOR = 2.0
#: How far out of order two of a pod's stamps may be and still be taken as simultaneous. They come
#: from different clocks (creationTimestamp and PodScheduled from the API server's, the container's
#: startedAt and the Ready condition from the kubelet's) and are whole seconds (metav1.Time drops
#: the fraction), so clocks 1 s apart can put a stamp up to 2 s before the one it follows (a
#: container started within the second it was scheduled, on a node with the image). 3 s tolerates
#: 2 s of skew between the clocks; beyond that the stamps say nothing reliable about a start.
CLOCK_SKEW_SECONDS = 3.0
#: Longest container start -> Ready taken as a start when the pod's startup budget is not known (a
#: pod without a startup probe: nothing bounds its start, so a readiness flip hours later would
#: look like one): twice the 30 minutes the operator's pods get (``BuilderConfig.startup_budget_seconds``).
MAX_STARTUP_SECONDS = 3600.0
#: Phases reported in ``status.coldStart``, in the API's order.
PHASES = ("scheduling", "start", "load", "pod", "node")


@dataclass(frozen=True)
class PodTimeline:
    """One pod's start-up timestamps in seconds (Unix time); None where not (yet) known."""

    uid: str
    instance_type: str | None
    created: float | None
    scheduled: float | None = None
    started: float | None = None
    ready: float | None = None
    #: When the pod's node was created and became Ready (None: unknown or no node yet).
    node_created: float | None = None
    node_ready: float | None = None
    #: Container restarts: after one, the timestamps describe the restart, not the cold start.
    restarts: int = 0
    #: A start-up failure is seen now (an image pull that failed, a container that could not be
    #: created): the pod's start, once it succeeds, is no cold start sample.
    start_failed: bool = False
    #: Longest container start -> Ready a first start can take (from the pod's startup probe; None:
    #: not known, :data:`MAX_STARTUP_SECONDS` applies).
    startup_budget: float | None = None
    #: The pod's name, for the log line of a pod refused as a sample (None: not known).
    name: str | None = None


@dataclass(frozen=True)
class ColdStartSample:
    """The phases of one pod's cold start, in seconds; ``node`` only if it waited for a new node."""

    uid: str
    ready_at: float
    scheduling: float
    start: float
    load: float
    pod: float
    node: float | None = None

    def phase(self, name: str) -> float | None:
        value: float | None = getattr(self, name)
        return value


@dataclass(frozen=True)
class Rejection:
    """A pod whose timestamps were refused as a cold start sample, and why."""

    uid: str
    name: str | None
    reason: str


@dataclass(frozen=True)
class CarriedPhase:
    """One phase of ``status.coldStart`` as a takeover found it (:class:`~neuronfleet.api.v1alpha1.PhaseStats`)."""

    p50_seconds: float | None
    p90_seconds: float
    samples: int
    #: When the newest sample it counts became Ready (Unix time; ``lastSampleTime``), or, found
    #: without one (written by an operator before that field), the takeover that found it: it is
    #: dropped :data:`MAX_SAMPLE_AGE_SECONDS` later, when every sample it stands for has expired.
    last_sample: float

    @property
    def until(self) -> float:
        return self.last_sample + MAX_SAMPLE_AGE_SECONDS


@dataclass(frozen=True)
class Carried:
    """The cold starts a predecessor measured, as its ``status.coldStart`` says them: the samples of
    pods since gone, which a restarted operator cannot measure again (:func:`take_over`)."""

    instance_type: str
    #: Per phase name (of :data:`PHASES`), those with a p90 and samples, not yet expired.
    phases: tuple[tuple[str, CarriedPhase], ...]

    def phase(self, name: str) -> CarriedPhase | None:
        for phase, stats in self.phases:
            if phase == name:
                return stats
        return None


@dataclass(frozen=True)
class ColdStartState:
    """Rolling samples per instance type (oldest first), the uids already measured (refused ones
    included), those of pods seen failing to start (never measured), and the figures a takeover
    carried over from the status (None: none, or dropped)."""

    samples: tuple[tuple[str, tuple[ColdStartSample, ...]], ...] = ()
    measured: frozenset[str] = frozenset()
    failed: frozenset[str] = frozenset()
    carried: Carried | None = None
    #: The pods refused by the :func:`observe` call that returned this state (each once while it
    #: exists): a report for the operator's log, not state (left out of equality).
    rejections: tuple[Rejection, ...] = field(default=(), compare=False)

    def for_type(self, instance_type: str) -> tuple[ColdStartSample, ...]:
        for name, samples in self.samples:
            if name == instance_type:
                return samples
        return ()


def _checked(timeline: PodTimeline) -> tuple[tuple[float, float, float, float] | None, str | None]:
    """The pod's (created, scheduled, started, ready), each at least the one before it, or why its
    stamps are no cold start; (None, None) while incomplete or after a restart."""
    created, scheduled, started, ready = timeline.created, timeline.scheduled, timeline.started, timeline.ready
    if created is None or scheduled is None or started is None or ready is None or timeline.restarts:
        return None, None
    stamps = [created]
    for name, stamp in (("scheduled", scheduled), ("started", started), ("ready", ready)):
        if stamp < stamps[-1] - CLOCK_SKEW_SECONDS:
            # Further out of order than the clocks' skew (a Ready time rewritten backwards): these
            # stamps describe no start.
            return None, f"{name} {stamps[-1] - stamp:.0f}s before the stamp it follows"
        stamps.append(max(stamp, stamps[-1]))
    budget = timeline.startup_budget if timeline.startup_budget is not None else MAX_STARTUP_SECONDS
    if stamps[3] - stamps[2] > budget:
        return None, (
            f"Ready {stamps[3] - stamps[2]:.0f}s after its container started, beyond its startup budget "
            f"{budget:.0f}s: a later readiness flip, not a cold start"
        )
    return (stamps[0], stamps[1], stamps[2], stamps[3]), None


def rejection(timeline: PodTimeline) -> str | None:
    """Why the pod's complete timestamps are no cold start (see the module docstring); None if they
    are one, or are not complete yet."""
    return _checked(timeline)[1]


def measure(timeline: PodTimeline) -> ColdStartSample | None:
    """The phases of a pod that became Ready on its first start; None while incomplete, or when
    :func:`rejection` refuses it."""
    stamps, _ = _checked(timeline)
    if stamps is None:
        return None
    created, scheduled, started, ready = stamps
    node: float | None = None
    pod = ready - created
    # A node "created" after the binding has an inconsistent timestamp: it says nothing of a wait.
    if timeline.node_created is not None and timeline.node_created <= scheduled:
        # The scheduler binds a pod only to a Ready node (a NotReady one is tainted NoSchedule), so
        # the node was up by the binding: a Ready time after it (or none, NotReady now) is a later
        # flap, which hides when the node came up. Taken as the binding then, which charges a pod on
        # a node long up with its scheduling's seconds as a wait, where the other guess (no wait)
        # charges a pod that did wait for a launch with the whole launch.
        node_ready = timeline.node_ready if timeline.node_ready is not None else scheduled
        node_up = max(min(node_ready, scheduled), created)
        if node_up > created:
            # Created before its node was up, the pod waited for it, whoever launched it (this pod,
            # an earlier one, a placeholder): its own cold start runs from the node's Ready.
            pod = ready - node_up
            if timeline.node_created > created:
                # Pending before the node registered: a node sample. One created once the node had
                # registered (NotReady) waited for the rest of its start only.
                node = node_up - created
    return ColdStartSample(
        uid=timeline.uid,
        ready_at=ready,
        scheduling=scheduled - created,
        start=started - scheduled,
        load=ready - started,
        pod=pod,
        node=node,
    )


def observe(
    state: ColdStartState,
    timelines: Iterable[PodTimeline],
    max_samples: int = MAX_SAMPLES,
    now: float | None = None,
) -> ColdStartState:
    """The state with every newly Ready pod of ``timelines`` measured, and samples
    :data:`MAX_SAMPLE_AGE_SECONDS` old or older at ``now`` dropped (``now`` None: ages are counted
    back from the newest sample's ready time).

    ``timelines`` are the deployment's current serving pods: uids of pods that are gone are
    forgotten (they cannot come back), which keeps the memory bounded by the fleet's size.
    """
    timelines = list(timelines)
    present = {t.uid for t in timelines}
    by_type = {name: list(samples) for name, samples in state.samples}
    measured = set(state.measured & present)
    # Remembered while the pod exists: once its container runs, nothing on it says the pull failed.
    failed = (state.failed & present) | {t.uid for t in timelines if t.start_failed}
    rejections: list[Rejection] = []
    for timeline in timelines:
        if timeline.uid in measured or timeline.uid in failed or timeline.instance_type is None:
            continue
        why = rejection(timeline)
        if why is not None:
            # Remembered as handled: its stamps only move further from a start (a later flip).
            measured.add(timeline.uid)
            rejections.append(Rejection(timeline.uid, timeline.name, why))
            continue
        sample = measure(timeline)
        if sample is None:
            continue
        measured.add(timeline.uid)
        by_type.setdefault(timeline.instance_type, []).append(sample)
    newest = max((s.ready_at for kept in by_type.values() for s in kept), default=None)
    until = now if now is not None else newest
    oldest = None if until is None else until - MAX_SAMPLE_AGE_SECONDS
    samples: list[tuple[str, tuple[ColdStartSample, ...]]] = []
    for name, kept in sorted(by_type.items()):
        # A day old is expired, as for the figures a takeover carries (:meth:`CarriedPhase.until`).
        fresh = [s for s in kept if oldest is None or s.ready_at > oldest]
        if fresh:
            samples.append((name, tuple(sorted(fresh, key=lambda s: (s.ready_at, s.uid))[-max_samples:])))
    return ColdStartState(
        tuple(samples), frozenset(measured), frozenset(failed), _unexpired(state.carried, until), tuple(rejections)
    )


def _unexpired(carried: Carried | None, now: float | None) -> Carried | None:
    """``carried`` without the phases whose samples have all expired by ``now`` (None: none left)."""
    if carried is None or now is None:
        return carried
    phases = tuple((name, stats) for name, stats in carried.phases if now < stats.until)
    return Carried(carried.instance_type, phases) if phases else None


def take_over(status: ColdStartStatus | None, now: float) -> ColdStartState:
    """The memory a restarted operator (or a new leader) starts with at ``now``: the figures of
    ``status`` (its object's ``status.coldStart``, as its predecessor wrote it) carried over, and no
    sample. Nothing from a section without an instance type, or without a phase measured."""
    if status is None or status.instance_type is None:
        return ColdStartState()
    phases = tuple(
        (name, CarriedPhase(stats.p50_seconds, stats.p90_seconds, stats.samples, _sampled(stats, now)))
        for name in PHASES
        if (stats := getattr(status, name)).p90_seconds is not None and stats.samples > 0
    )
    return ColdStartState(carried=_unexpired(Carried(status.instance_type, phases), now))


def _sampled(stats: PhaseStats, now: float) -> float:
    """When the phase's newest sample became Ready, as the status says it; ``now`` (the takeover)
    when it does not (an older operator's status), or says a time to come (a clock skewed)."""
    last = utc_seconds(stats.last_sample_time)
    return now if last is None else min(last, now)


def _carried(state: ColdStartState, instance_type: str, name: str, measured: int) -> CarriedPhase | None:
    """The phase's figures carried over, while they stand for more than the ``measured`` samples of
    it the process has (on the same instance type; None: none carried, or no longer)."""
    carried = state.carried
    if carried is None or carried.instance_type != instance_type:
        return None
    stats = carried.phase(name)
    # The samples measured since stand alone once they are as many as the status counted: then they
    # are as good a p90 as it was, and newer. Or ROBUST_SAMPLES, if fewer: from there the estimate
    # is the plain p90, one slow start no longer moves it, and a real change (a new image, a larger
    # model) seen in that many pods must not wait behind the predecessor's figure for the up to
    # MAX_SAMPLES (a day) it may have counted. Before that, 2 or 3 starts (the pods still present,
    # measured again) replaced a p90 of many: the swing that a restart alone should not cause.
    if stats is None or measured >= min(stats.samples, ROBUST_SAMPLES):
        return None
    return stats


def _quantile(ordered: Sequence[float], q: float) -> float:
    """numpy's default (linear) quantile of sorted values."""
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def estimate_sorted(ordered: Sequence[float], min_samples: int = MIN_SAMPLES) -> float | None:
    """The cold start the warm pool sizes for, from samples sorted ascending (see :func:`estimate`):
    for a caller that keeps them sorted as they come, as the simulator does."""
    if len(ordered) < min_samples:
        return None
    if len(ordered) < ROBUST_SAMPLES and ordered[-1] > OUTLIER_FACTOR * ordered[-2]:
        # A few samples' p90 is about their maximum: a lone outlier would be the estimate.
        ordered = ordered[:-1]
    return _quantile(ordered, 0.9)


def estimate(values: Iterable[float], min_samples: int = MIN_SAMPLES) -> float | None:
    """The cold start the warm pool sizes for: the p90 of ``values``, while fewer than
    :data:`ROBUST_SAMPLES` without a slowest one more than :data:`OUTLIER_FACTOR` times the next;
    None below ``min_samples``."""
    return estimate_sorted(sorted(values), min_samples)


def phase_stats(values: Iterable[float]) -> PhaseStats:
    """p50/p90 (numpy's default linear interpolation) and the count; no percentiles without samples."""
    array = np.fromiter(values, dtype=float)
    if array.size == 0:
        return PhaseStats()
    p50, p90 = np.quantile(array, [0.5, 0.9])
    return PhaseStats(p50_seconds=round(float(p50), 3), p90_seconds=round(float(p90), 3), samples=int(array.size))


def status(state: ColdStartState, instance_type: str | None) -> ColdStartStatus:
    """``status.coldStart`` for the pods on ``instance_type`` (the placement's current type)."""
    if instance_type is None:
        return ColdStartStatus()
    samples = state.for_type(instance_type)
    stats = {}
    for name in PHASES:
        values = [v for s in samples if (v := s.phase(name)) is not None]
        carried = _carried(state, instance_type, name, len(values))
        # The figures carried over while they size the warm pool: the status says what it sizes
        # from, and the next takeover carries them again (not the few pods measured since).
        if carried is not None:
            stats[name] = PhaseStats(
                p50_seconds=carried.p50_seconds,
                p90_seconds=carried.p90_seconds,
                samples=carried.samples,
                # Its own time, not the takeover's: the next takeover drops it when this one would.
                last_sample_time=_rfc3339(carried.last_sample),
            )
        else:
            newest = max((s.ready_at for s in samples if s.phase(name) is not None), default=None)
            stats[name] = phase_stats(values).model_copy(
                update={"last_sample_time": None if newest is None else _rfc3339(newest)}
            )
    return ColdStartStatus(instance_type=instance_type, **stats)


def _rfc3339(moment: float) -> str:
    return rfc3339(datetime.fromtimestamp(moment, UTC))


def for_warm_pool(state: ColdStartState, instance_type: str | None, min_samples: int = MIN_SAMPLES) -> ColdStart:
    """The pod and node cold starts to size the Auto warm pool (:func:`estimate`); None where too
    few samples. While the figures a takeover carried over stand for more samples than measured
    since, their p90 (when they counted ``min_samples``: else the assumed value applied before the
    restart too). It is the status's p90, which unlike :func:`estimate` keeps a lone slow sample
    of fewer than :data:`ROBUST_SAMPLES` (the status does not say the samples): after a restart the
    pool may then be sized for a longer cold start than before, never a shorter one."""
    if instance_type is None:
        return ColdStart()
    samples = state.for_type(instance_type)

    def phase(values: list[float], name: str) -> float | None:
        carried = _carried(state, instance_type, name, len(values))
        if carried is not None:
            return carried.p90_seconds if carried.samples >= min_samples else None
        return estimate(values, min_samples)

    pods = phase([s.pod for s in samples], "pod")
    nodes = phase([s.node for s in samples if s.node is not None], "node")
    return ColdStart(pod_seconds=pods, node_seconds=nodes)


__all__ = [
    "CLOCK_SKEW_SECONDS",
    "MAX_SAMPLES",
    "MAX_SAMPLE_AGE_SECONDS",
    "MAX_STARTUP_SECONDS",
    "MIN_SAMPLES",
    "OUTLIER_FACTOR",
    "PHASES",
    "ROBUST_SAMPLES",
    "Carried",
    "CarriedPhase",
    "ColdStartSample",
    "ColdStartState",
    "PodTimeline",
    "Rejection",
    "estimate",
    "estimate_sorted",
    "for_warm_pool",
    "measure",
    "observe",
    "phase_stats",
    "rejection",
    "status",
    "take_over",
]
