"""Baseline autoscalers, reimplemented from their documented algorithms and defaults (shared FACTS.md).

- :class:`Hpa`: Kubernetes HPA v2 (``pkg/controller/podautoscaler``) on average utilization. Sync
  every 15 s; ``ratio = utilization / target``; no change while ``|1 - ratio| <= 0.1``, else
  ``ceil(ratio * ready)``; then behavior (:class:`HpaBehavior`): stabilization (the result stays
  between the minimum of the recommendations in the scale-up window and the maximum of those in
  the scale-down window) and rate policies measured from the replica count at the start of each
  period (the limit functions are planning.scaling's, which ours uses too); defaults scale-up 0 s,
  {4 Pods/15 s, 100 %/15 s} Max; scale-down 300 s, {100 %/15 s}.
  Simplification: unready pods are left out of the ratio instead of HPA's assumed 0 %/100 % usage.
- :class:`Keda`: KEDA's Prometheus scaler on queued + in-flight requests, AverageValue
  ``threshold`` per replica: the HPA it creates computes ``ceil(metric / threshold)`` (with the
  tolerance against ``metric / (threshold * replicas)``) and applies HPA behavior. KEDA itself
  polls every 30 s for activation (``metric > activationThreshold``, strictly) and scales N -> 0 only
  after ``cooldownPeriod`` (300 s) without activity; 0 -> 1 on activation.
- :class:`Kpa`: Knative's KPA (``pkg/autoscaler/scaling/autoscaler.go``) on concurrency (queued +
  in flight). Tick 2 s; averages over a 60 s stable and a 6 s panic window; ``desired = ceil(avg /
  target)`` with ``target = 0.7 x container concurrency target`` (default 100 -> 70); the change per
  tick is limited to 1000x up and 2x down; panic starts when ``panic desired / ready >= 2``, then
  the count never drops and panic ends only after one stable window without the condition.
  Activator (``target-burst-capacity`` 200, the default): each tick the excess burst capacity
  ``floor(ready x total target - TBC - panic-window concurrency)`` is computed, ``total target`` =
  the per-pod target before the 0.7 utilization; while it is negative the activator is in the
  request path (the SKS in proxy mode) and buffers requests beyond what the pods hold instead of
  refusing them (:attr:`Kpa.activator_in_path`, read by the engine), until capacity frees up.
- :class:`RayServe`: Ray Serve's default autoscaling policy. ``desired = ceil(average total ongoing
  requests over look_back 30 s / target_ongoing_requests)`` (smoothing 1.0); applied only after the
  decision has pointed up for more than ``upscale_delay`` (30 s) of control-loop periods, or down for
  more than ``downscale_delay`` (600 s); a decision in the other direction resets the count.
  Request path: a replica runs at most ``max_ongoing_requests`` (5, the default since Ray 2.32,
  with target 2) at once, so its batcher never forms larger batches; the rest wait in the
  router's queue, unbounded (``max_queued_requests`` -1, the default), instead of a 429
  (:attr:`RayServe.max_ongoing_requests`, :attr:`RayServe.router_queue_unbounded`, read by the
  engine). The ongoing-requests metric counts both (handles report their queued requests).

Metrics: HPA and KEDA read Prometheus with the same scrape delay as ours; Knative and Ray Serve
get their metrics straight from the pods (1 s and 2 s delay), as they do in real clusters.

Scale-down: each sets a count, and whatever owns the pods picks which go (``scale_down``, see
:mod:`neuronfleet.sim.scaledown`): HPA, KEDA and the KPA scale a Deployment, so its ReplicaSet
picks; Ray Serve's controller picks its own replicas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from neuronfleet.api.v1alpha1 import ScalingBehavior
from neuronfleet.planning.rounding import ROUND_OFF, ceil_whole
from neuronfleet.planning.scaling import scale_down_limit, scale_up_limit
from neuronfleet.sim.metrics import MetricsView
from neuronfleet.sim.policies import DEFAULT_SCRAPE_DELAY, Observed, Targets
from neuronfleet.sim.scaledown import ScaleDownBy

HPA_TOLERANCE = 0.1
HPA_SYNC_SECONDS = 15.0


@dataclass
class HpaBehavior:
    """HPA v2's stabilization and rate policies (mutable: one per simulated autoscaler)."""

    behavior: ScalingBehavior = field(default_factory=ScalingBehavior)
    min_replicas: int = 1
    max_replicas: int = 1000
    recommendations: list[tuple[float, int]] = field(default_factory=list)
    events: list[tuple[float, int]] = field(default_factory=list)

    def normalize(self, recommendation: int, current: int, now: float) -> int:
        up_window = self.behavior.scale_up.stabilization_window_seconds
        down_window = self.behavior.scale_down.stabilization_window_seconds
        self.recommendations = [(t, r) for t, r in self.recommendations if t > now - max(up_window, down_window)]
        self.recommendations.append((now, recommendation))
        up_rec = min(r for t, r in self.recommendations if t > now - up_window or t == now)
        down_rec = max(r for t, r in self.recommendations if t > now - down_window or t == now)
        desired = min(max(current, up_rec), down_rec)
        if desired > current:
            desired = min(desired, scale_up_limit(self.behavior.scale_up, tuple(self.events), current, now))
        elif desired < current:
            desired = max(desired, scale_down_limit(self.behavior.scale_down, tuple(self.events), current, now))
        desired = max(self.min_replicas, min(self.max_replicas, desired))
        self.events = [(t, c) for t, c in self.events if t > now - 1800]
        if desired != current:
            self.events.append((now, desired - current))
        return desired


class Hpa:
    """Kubernetes HPA v2 on device utilization."""

    name = "hpa"
    reads_cold_starts = False
    #: HPA scales a Deployment: its ReplicaSet deletes the pods.
    scale_down: ScaleDownBy = "replicaset"

    def __init__(self, target_utilization: float, min_replicas: int, max_replicas: int, setting: str) -> None:
        self.target = target_utilization
        self.setting = setting
        self.start_replicas: int | None = None
        self.interval = HPA_SYNC_SECONDS
        self.behavior = HpaBehavior(min_replicas=min_replicas, max_replicas=max_replicas)

    def recommend(self, utilization: float | None, current: int, ready: int) -> int:
        if utilization is None or ready == 0:
            return current
        ratio = utilization / self.target
        if abs(1 - ratio) <= HPA_TOLERANCE:
            return current
        return math.ceil(ratio * ready)

    def prime(self, replicas: int, now: float) -> None:
        self.behavior.recommendations = [(now, replicas)]

    def decide(self, now: float, metrics: MetricsView, observed: Observed) -> Targets:
        snapshot = metrics.snapshot(now, DEFAULT_SCRAPE_DELAY)
        counts = observed.counts
        if snapshot.utilization is None:
            return Targets(counts.active, reason="hpa: no metrics")
        rec = self.recommend(snapshot.utilization, counts.active, counts.serving)
        desired = self.behavior.normalize(rec, counts.active, now)
        return Targets(desired, reason=f"hpa: utilization {snapshot.utilization:.2f} -> {rec}")


class Keda:
    """KEDA's Prometheus scaler (AverageValue on queued + in-flight requests) over an HPA."""

    name = "keda"
    reads_cold_starts = False
    #: KEDA's HPA scales a Deployment: its ReplicaSet deletes the pods.
    scale_down: ScaleDownBy = "replicaset"

    def __init__(
        self,
        threshold: float,
        min_replicas: int,
        max_replicas: int,
        setting: str,
        activation_threshold: float = 0.0,
        polling_interval: float = 30.0,
        cooldown_period: float = 300.0,
    ) -> None:
        self.threshold = threshold
        self.setting = setting
        self.start_replicas: int | None = None
        self.min_replicas = min_replicas
        self.activation_threshold = activation_threshold
        self.polling_interval = polling_interval
        self.cooldown_period = cooldown_period
        self.interval = HPA_SYNC_SECONDS
        self.behavior = HpaBehavior(min_replicas=max(1, min_replicas), max_replicas=max_replicas)
        self.last_active: float | None = None
        self.last_poll: float | None = None

    def step(self, now: float, metric: float | None, current: int) -> tuple[int, str]:
        """One HPA sync (and KEDA poll when due) on ``metric``; returns the replicas and why."""
        if self.last_poll is None or now - self.last_poll >= self.polling_interval - ROUND_OFF:
            self.last_poll = now
            if metric is not None and metric > self.activation_threshold:
                self.last_active = now
            if current == 0 and self.last_active == now:
                return 1, "keda: activated 0 -> 1"
            if (
                self.min_replicas == 0
                and current > 0
                and metric is not None
                and metric <= self.activation_threshold
                and now - (self.last_active if self.last_active is not None else -math.inf) >= self.cooldown_period
            ):
                return 0, f"keda: inactive for {self.cooldown_period:.0f}s cooldown -> 0"
        if current == 0 or metric is None:
            return current, "keda: holding"
        ratio = metric / (self.threshold * current)
        rec = current if abs(1 - ratio) <= HPA_TOLERANCE else math.ceil(metric / self.threshold)
        return self.behavior.normalize(rec, current, now), f"keda: {metric:.1f} / {self.threshold:g} -> {rec}"

    def prime(self, replicas: int, now: float) -> None:
        self.behavior.recommendations = [(now, replicas)]

    def decide(self, now: float, metrics: MetricsView, observed: Observed) -> Targets:
        snapshot = metrics.snapshot(now, DEFAULT_SCRAPE_DELAY)
        desired, reason = self.step(now, snapshot.load, observed.counts.active)
        return Targets(desired, reason=reason)


class Kpa:
    """Knative Pod Autoscaler on concurrency."""

    name = "kpa"
    reads_cold_starts = False
    #: The KPA sets its revision's Deployment's replicas: its ReplicaSet deletes the pods.
    scale_down: ScaleDownBy = "replicaset"

    def __init__(
        self,
        target: float,
        min_replicas: int,
        max_replicas: int,
        setting: str,
        stable_window: float = 60.0,
        panic_window: float = 6.0,
        panic_threshold: float = 2.0,
        max_scale_up_rate: float = 1000.0,
        max_scale_down_rate: float = 2.0,
        tick: float = 2.0,
        target_utilization: float = 0.7,
        target_burst_capacity: float = 200.0,
    ) -> None:
        self.target = target
        #: Per-pod concurrency before the utilization factor (``TotalValue`` in the decider).
        self.total_target = target / target_utilization
        self.target_burst_capacity = target_burst_capacity
        self.activator_in_path = True
        self.setting = setting
        self.start_replicas: int | None = None
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self.stable_window = stable_window
        self.panic_window = panic_window
        self.panic_threshold = panic_threshold
        self.max_up = max_scale_up_rate
        self.max_down = max_scale_down_rate
        self.interval = tick
        self.panic_time: float | None = None
        self.max_panic_pods = 0

    def step(self, now: float, stable: float, panic: float, ready: int) -> tuple[int, bool]:
        """One KPA tick on window averages of total concurrency; returns (desired, in panic)."""
        ready_f = float(max(1, ready))
        max_up = math.ceil(self.max_up * ready_f)
        max_down = math.floor(ready_f / self.max_down)
        dspc = min(max(math.ceil(stable / self.target), max_down), max_up)
        dppc = min(max(math.ceil(panic / self.target), max_down), max_up)
        over = dppc / ready_f >= self.panic_threshold
        if over:
            self.panic_time = now
        elif self.panic_time is not None and now > self.panic_time + self.stable_window:
            self.panic_time = None
            self.max_panic_pods = 0
        desired = dspc
        if self.panic_time is not None:
            desired = max(desired, dppc)
            if desired > self.max_panic_pods:
                self.max_panic_pods = desired
            else:
                desired = self.max_panic_pods
        return max(self.min_replicas, min(self.max_replicas, desired)), self.panic_time is not None

    def excess_burst_capacity(self, ready: int, panic_concurrency: float) -> float:
        """Knative's excess burst capacity; negative puts the activator in the request path."""
        if self.target_burst_capacity == 0:
            return 0.0
        if self.target_burst_capacity < 0:
            return -1.0
        return math.floor(ready * self.total_target - self.target_burst_capacity - panic_concurrency)

    def prime(self, replicas: int, now: float) -> None:
        return None

    def decide(self, now: float, metrics: MetricsView, observed: Observed) -> Targets:
        stable = metrics.mean_load(now, self.stable_window, 1.0)
        panic = metrics.mean_load(now, self.panic_window, 1.0)
        if stable is None or panic is None:
            return Targets(observed.counts.active, reason="kpa: no metrics")
        desired, in_panic = self.step(now, stable, panic, observed.counts.serving)
        self.activator_in_path = self.excess_burst_capacity(observed.counts.serving, panic) < 0
        return Targets(desired, reason=f"kpa: stable {stable:.1f} panic {panic:.1f}{' PANIC' if in_panic else ''}")


class RayServe:
    """Ray Serve's default autoscaling policy on ongoing requests."""

    name = "ray"
    reads_cold_starts = False
    #: Ray Serve's controller picks the replicas it stops.
    scale_down: ScaleDownBy = "ray-serve"

    def __init__(
        self,
        target_ongoing: float,
        min_replicas: int,
        max_replicas: int,
        setting: str,
        look_back: float = 30.0,
        upscale_delay: float = 30.0,
        downscale_delay: float = 600.0,
        tick: float = 1.0,
        metrics_delay: float = 2.0,
        max_ongoing_requests: int = 5,
    ) -> None:
        self.max_ongoing_requests = max_ongoing_requests
        self.router_queue_unbounded = True
        self.target = target_ongoing
        self.setting = setting
        self.start_replicas: int | None = None
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self.look_back = look_back
        self.upscale_delay = upscale_delay
        self.downscale_delay = downscale_delay
        self.interval = tick
        self.metrics_delay = metrics_delay
        self.counter = 0

    def step(self, total_ongoing: float, current: int) -> int:
        """One control-loop iteration; returns the replica count to apply."""
        desired = max(self.min_replicas, min(self.max_replicas, ceil_whole(total_ongoing / self.target)))
        if desired > current:
            self.counter = max(self.counter, 0) + 1
            if self.counter > int(self.upscale_delay / self.interval):
                self.counter = 0
                return desired
        elif desired < current:
            self.counter = min(self.counter, 0) - 1
            if -self.counter > int(self.downscale_delay / self.interval):
                self.counter = 0
                return desired
        else:
            self.counter = 0
        return current

    def prime(self, replicas: int, now: float) -> None:
        return None

    def decide(self, now: float, metrics: MetricsView, observed: Observed) -> Targets:
        ongoing = metrics.mean_load(now, self.look_back, self.metrics_delay)
        if ongoing is None:
            return Targets(observed.counts.active, reason="ray: no metrics")
        desired = self.step(ongoing, observed.counts.active)
        return Targets(desired, reason=f"ray: ongoing {ongoing:.1f} / {self.target:g}")
