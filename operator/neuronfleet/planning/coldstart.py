"""Measured cold starts: per-pod start-up phases and rolling p50/p90 per instance type (pure).

The operator reads each pod's timestamps (:class:`PodTimeline`, extracted from the pod and its node
by :mod:`neuronfleet.kube.coldstart`) and folds every pod that has become Ready into a bounded
rolling window per instance type. Phases of one pod:

- ``scheduling``: created -> PodScheduled (includes the wait for a new node, when there was one);
- ``start``: scheduled -> container running (image pull and container start);
- ``load``: container running -> Ready (runtime init, artifact load and warm-up);
- ``pod``: the pod's own cold start, on a node that was there: created -> Ready, or for a pod that
  waited for a new node, node ready -> pod Ready (what a pod pays once a node has room);
- ``node``: for pods that waited for a new node only (the node was created after the pod and
  before the pod was bound to it): pod created -> node Ready (node created when the node's Ready
  time is unknown).

Each pod counts once (its uid is remembered while the pod exists), and only on its first start:
a restarted container's timestamps describe the restart, not a cold start. :func:`status` gives
``status.coldStart`` (p50/p90 with numpy's default linear interpolation, as the simulator reports
them) and :func:`for_warm_pool` the p90s that size the Auto warm pool, once a phase has
:data:`MIN_SAMPLES` samples (before that the spec's assumed values apply, as in the simulator).

State in, state out: :func:`observe` returns a new :class:`ColdStartState`; the operator keeps it in
its per-object memory, so after a restart only the pods still present are measured again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from neuronfleet.api.v1alpha1 import ColdStartStatus, PhaseStats
from neuronfleet.planning.warmpool import ColdStart

#: Samples kept per instance type (newest by Ready time); enough for a stable p90.
MAX_SAMPLES = 100
#: Samples a phase needs before its p90 replaces the spec's assumed cold start (the simulator's rule).
MIN_SAMPLES = 3
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
class ColdStartState:
    """Rolling samples per instance type (oldest first) and the uids already measured."""

    samples: tuple[tuple[str, tuple[ColdStartSample, ...]], ...] = ()
    measured: frozenset[str] = frozenset()

    def for_type(self, instance_type: str) -> tuple[ColdStartSample, ...]:
        for name, samples in self.samples:
            if name == instance_type:
                return samples
        return ()


def measure(timeline: PodTimeline) -> ColdStartSample | None:
    """The phases of a pod that became Ready on its first start; None while incomplete or inconsistent."""
    created, scheduled, started, ready = timeline.created, timeline.scheduled, timeline.started, timeline.ready
    if created is None or scheduled is None or started is None or ready is None or timeline.restarts:
        return None
    # Clocks of different components can disagree by a little; out-of-order stamps beyond that
    # (e.g. a readiness flip long after the start rewrote Ready's transition time backwards) are
    # not a cold start.
    if not created <= scheduled <= started <= ready:
        return None
    node: float | None = None
    pod = ready - created
    # A node created after the pod, yet before the pod was bound to it, is one the pod waited for.
    # A node "created" after the binding has an inconsistent timestamp: no node sample from it.
    if timeline.node_created is not None and created < timeline.node_created <= scheduled:
        node_up = timeline.node_ready if timeline.node_ready is not None else timeline.node_created
        node_up = min(max(node_up, created), ready)
        node = node_up - created
        pod = ready - node_up
    return ColdStartSample(
        uid=timeline.uid,
        ready_at=ready,
        scheduling=scheduled - created,
        start=started - scheduled,
        load=ready - started,
        pod=pod,
        node=node,
    )


def observe(state: ColdStartState, timelines: Iterable[PodTimeline], max_samples: int = MAX_SAMPLES) -> ColdStartState:
    """The state with every newly Ready pod of ``timelines`` measured.

    ``timelines`` are the deployment's current serving pods: uids of pods that are gone are
    forgotten (they cannot come back), which keeps the memory bounded by the fleet's size.
    """
    timelines = list(timelines)
    present = {t.uid for t in timelines}
    by_type = {name: list(samples) for name, samples in state.samples}
    measured = set(state.measured & present)
    for timeline in timelines:
        if timeline.uid in measured or timeline.instance_type is None:
            continue
        sample = measure(timeline)
        if sample is None:
            continue
        measured.add(timeline.uid)
        by_type.setdefault(timeline.instance_type, []).append(sample)
    samples = tuple(
        (name, tuple(sorted(kept, key=lambda s: (s.ready_at, s.uid))[-max_samples:]))
        for name, kept in sorted(by_type.items())
    )
    return ColdStartState(samples, frozenset(measured))


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
    stats = {name: phase_stats(v for s in samples if (v := s.phase(name)) is not None) for name in PHASES}
    return ColdStartStatus(instance_type=instance_type, **stats)


def for_warm_pool(state: ColdStartState, instance_type: str | None, min_samples: int = MIN_SAMPLES) -> ColdStart:
    """The p90 pod and node cold starts to size the Auto warm pool; None where too few samples."""
    if instance_type is None:
        return ColdStart()
    samples = state.for_type(instance_type)
    pods = [s.pod for s in samples]
    nodes = [s.node for s in samples if s.node is not None]
    pod_p90 = float(np.quantile(pods, 0.9)) if len(pods) >= min_samples else None
    node_p90 = float(np.quantile(nodes, 0.9)) if len(nodes) >= min_samples else None
    return ColdStart(pod_seconds=pod_p90, node_seconds=node_p90)


__all__ = [
    "MAX_SAMPLES",
    "MIN_SAMPLES",
    "PHASES",
    "ColdStartSample",
    "ColdStartState",
    "PodTimeline",
    "for_warm_pool",
    "measure",
    "observe",
    "phase_stats",
    "status",
]
