"""Policies a simulation can run: ours (the operator's planning code) and the common interface.

Every policy answers :meth:`Policy.decide` every ``interval`` simulated seconds with
:class:`Targets` (active replicas, warm pods, node placeholders). Baselines live in
:mod:`neuronfleet.sim.baselines`, the oracle in :mod:`neuronfleet.sim.oracle`.

:class:`Ours` calls :func:`neuronfleet.planning.scaling.decide` and
:func:`neuronfleet.planning.warmpool.plan` exactly as the operator does, on a
:class:`~neuronfleet.planning.signals.MetricSnapshot` taken ``scrape_delay`` seconds earlier, with
the cold starts the fleet has measured so far (p90, as ``status.coldStart`` reports them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from neuronfleet.api.v1alpha1 import ScalingSpec, WarmPoolSpec
from neuronfleet.planning import coldstart, reconcile_plan, scaling, warmpool
from neuronfleet.planning.observation import StatusMemory
from neuronfleet.planning.status import autoscaler_status
from neuronfleet.sim.fleet import FleetCounts
from neuronfleet.sim.metrics import MetricsView
from neuronfleet.sim.scaledown import ScaleDownBy

#: Seconds from a sample to the decision that uses it (15 s scrape, half on average, plus query).
DEFAULT_SCRAPE_DELAY = 10.0
#: Measured cold starts needed before the measurement replaces the assumed value.
MIN_COLD_START_SAMPLES = 3


@dataclass(frozen=True)
class Targets:
    """What a policy wants the fleet to hold."""

    active: int
    warm: int = 0
    placeholders: int = 0
    reason: str = ""


@dataclass(frozen=True)
class Observed:
    """What the fleet looks like and has measured, as the operator would see it in status."""

    counts: FleetCounts
    pod_cold_start_p90: float | None
    node_cold_start_p90: float | None


class Policy(Protocol):
    """One autoscaler under test."""

    name: str
    setting: str
    interval: float
    #: Serving replicas at t=0 (None: the run's common start).
    start_replicas: int | None
    #: Who picks the ready pods its scale-downs take (:mod:`neuronfleet.sim.scaledown`).
    scale_down: ScaleDownBy
    #: Whether :meth:`decide` reads the measured cold starts (:class:`Observed`'s p90s): the engine
    #: keeps their running p90 only for a policy that does (a Knative run measures two million).
    reads_cold_starts: bool

    def decide(self, now: float, metrics: MetricsView, observed: Observed) -> Targets: ...

    def prime(self, replicas: int, now: float) -> None:
        """Start as if the policy had been running at ``replicas`` (its stabilization memory)."""


def p90(samples: list[float]) -> float | None:
    """The cold start the warm pool sizes for: the operator's rule (:func:`coldstart.estimate`)."""
    return coldstart.estimate(samples, MIN_COLD_START_SAMPLES)


class Ours:
    """The operator's policy: :mod:`neuronfleet.planning.scaling` plus :mod:`neuronfleet.planning.warmpool`."""

    name = "ours"
    #: The operator drains its own pods (planning.promotion.drain_order).
    scale_down: ScaleDownBy = "operator"
    #: The warm pool is sized from them.
    reads_cold_starts = True

    def __init__(
        self,
        scaling_spec: ScalingSpec,
        warm_spec: WarmPoolSpec,
        setting: str,
        scrape_delay: float = DEFAULT_SCRAPE_DELAY,
    ) -> None:
        self.scaling_spec = scaling_spec
        self.warm_spec = warm_spec
        self.setting = setting
        self.interval = float(scaling_spec.interval_seconds)
        self.scrape_delay = scrape_delay
        self.start_replicas: int | None = None
        self.scaling_state = scaling.ScalingState()
        self.warm_state = warmpool.WarmPoolState()
        #: The warm pods and placeholders last wanted, and since when a pool found was held (the
        #: operator's ``status.warmPool``: desiredPods, desiredPlaceholders, heldSince).
        self.pool_wanted: tuple[int, int, float | None] = (0, 0, None)
        #: The most replicas recommended (the recommendation before bounds), and when: a
        #: user's maxReplicas (or its CRD default) that capped the fleet is named in a note.
        self.most_wanted: tuple[int, float] = (0, 0.0)

    def prime(self, replicas: int, now: float) -> None:
        self.scaling_state = scaling.ScalingState(recommendations=((now, replicas),))

    def restart(self, now: float, current: int, resume: bool = True) -> None:
        """The operator restarts at ``now`` with ``current`` active replicas: its in-process memory
        is lost; it takes over from the status as the operator does (the autoscaler from its last
        checkpoint as the status holds it, else holding the fleet found; the warm pool holding the pool
        last wanted: :func:`neuronfleet.planning.reconcile_plan.take_over`), or,
        without ``resume``, starts afresh as before it kept either. The cold starts measured are the
        simulated fleet's (:class:`Observed`), kept either way: the operator carries its figures over
        in ``status.coldStart`` (:func:`neuronfleet.planning.coldstart.take_over`)."""
        if resume:
            # Through the status, as the operator's successor reads it: from the exact checkpoint the
            # simulator resumed with figures the status rounds (times to the second, the service
            # rate), and its reasons differed from the operator's (review r17 finding 4).
            pods, placeholders, held_since = self.pool_wanted
            status: dict[str, Any] = {
                "warmPool": reconcile_plan.warm_pool_status(pods, placeholders, held_since, "").to_wire()
            }
            section = autoscaler_status(self.scaling_state.checkpoint)
            if section is not None:
                status["autoscaler"] = section.to_wire()
            self.scaling_state, self.warm_state = reconcile_plan.take_over(
                StatusMemory.from_status(status), now, current, self.scaling_spec.target_utilization
            )
        else:
            self.scaling_state = scaling.ScalingState()
            self.warm_state = warmpool.WarmPoolState()

    def decide(self, now: float, metrics: MetricsView, observed: Observed) -> Targets:
        counts = observed.counts
        # As the operator's reader returns it: a signal whose query the spec empties is not asked.
        snapshot = scaling.as_read(self.scaling_spec, metrics.snapshot(now, self.scrape_delay, counts.serving))
        decision = scaling.decide(self.scaling_spec, self.scaling_state, snapshot, counts.active, counts.serving, now)
        self.scaling_state = decision.new_state
        return self.targets(decision, now, observed)

    def targets(self, decision: scaling.ScalingDecision, now: float, observed: Observed) -> Targets:
        """The targets of a scaling ``decision``, with the warm pool planned from its demand (variants
        of this policy that decide otherwise, e.g. a benchmark's, plan their pool here too)."""
        if decision.recommendation is not None and decision.recommendation > self.most_wanted[0]:
            self.most_wanted = (decision.recommendation, now)
        pool = warmpool.plan(
            self.warm_spec,
            # Moved as the decision moved the autoscaler's times, as the operator does.
            warmpool.shifted(self.warm_state, decision.clock_shift),
            decision.demand,
            now,
            warmpool.ColdStart(observed.pod_cold_start_p90, observed.node_cold_start_p90),
            active=decision.desired,
            max_active=self.scaling_spec.max_replicas,
            unmeasured=scaling.unmeasured(self.scaling_spec, decision),
            parked=warmpool.parked(self.scaling_spec, decision.desired),
        )
        self.warm_state = pool.new_state
        self.pool_wanted = (pool.pods, pool.node_placeholders, pool.held_since)
        return Targets(decision.desired, pool.pods, pool.node_placeholders, f"{decision.reason} | {pool.reason}")

    def notes(self) -> list[str]:
        """What a report must say about the run: a maxReplicas below the recommendation at some point."""
        wanted, when = self.most_wanted
        cap = self.scaling_spec.max_replicas
        if wanted <= cap:
            return []
        return [
            f"maxReplicas {cap} capped the fleet: the autoscaler recommended up to {wanted} replicas "
            f"(first at t = {when:,.0f} s of the run)"
        ]


def crd_max_replicas() -> int:
    """The largest ``spec.scaling.maxReplicas`` the CRD accepts (the operator can never go above it)."""
    bounds = [m.le for m in ScalingSpec.model_fields["max_replicas"].metadata if getattr(m, "le", None) is not None]
    return int(min(bounds))


def ours_from_policy_file(data: dict[str, Any], max_replicas: int, setting: str) -> Ours:
    """:class:`Ours` from a mapping with the CR's ``scaling`` and ``warmPool`` sections (camelCase).

    ``maxReplicas`` defaults to ``max_replicas``, at most :func:`crd_max_replicas` (the run's bound
    may be larger: twice the oracle's peak), when ``data`` does not set it: for the built-in sweeps,
    which are no user's CR. A user's ``--policy`` file gets the CRD's default before it comes here
    (``simulate``'s ``_policy_file``), as the operator would run it.
    """
    scaling_data = dict(data.get("scaling") or {})
    scaling_data.setdefault("maxReplicas", min(max_replicas, crd_max_replicas()))
    return Ours(
        ScalingSpec.model_validate(scaling_data),
        WarmPoolSpec.model_validate(data.get("warmPool") or {}),
        setting,
    )


#: "Ours" as benchmarked: exactly the CR's defaults (what an SRE who changes nothing gets; the
#: runner sets only the swept target). Nothing here depends on the trace.
DEFAULT_OURS: dict[str, Any] = {"scaling": {}, "warmPool": {}}


class Static:
    """A fixed number of active replicas (static provisioning)."""

    name = "static"
    reads_cold_starts = False
    #: A Deployment at a fixed count (it never scales down; a ReplicaSet would pick).
    scale_down: ScaleDownBy = "replicaset"

    def __init__(self, replicas: int, setting: str) -> None:
        self.replicas = replicas
        self.setting = setting
        self.interval = 3600.0
        self.start_replicas: int | None = replicas

    def prime(self, replicas: int, now: float) -> None:
        return None

    def decide(self, now: float, metrics: MetricsView, observed: Observed) -> Targets:
        return Targets(self.replicas, reason=f"static {self.replicas}")
