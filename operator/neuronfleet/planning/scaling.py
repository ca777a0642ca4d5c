"""How many active replicas a deployment wants: the autoscaler's decision (pure).

:func:`decide` takes the deployment's :class:`~neuronfleet.api.v1alpha1.ScalingSpec`, the state
returned by its previous call, a :class:`~neuronfleet.planning.signals.MetricSnapshot`, the
current and ready active replica counts, and the time; it returns the desired count, a short
reason for status and Events, and the next state. Same inputs, same decision: the operator keeps
the state in memory per object, the simulator per run, and both call this function unchanged.

The rule, in order:

1. Signals, each turned into a replica count (float):
   - arrival rate (primary, once a per-replica service rate is known):
     ``arrival_rate / (service_rate * target_utilization)``. Linear in the demand, and it sees a
     ramp before queues build. The service rate is what a replica has been seen to serve:
     ``arrival_rate / (utilization * ready)``, with the utilization of the ready replicas (the
     default query averages ready pods only; a custom one must too), measured only while the
     snapshot covers every ready replica, the ready count and the arrival rate held still for
     :data:`STEADY_SECONDS` (the three are sampled over different windows) and the device was
     neither idle nor saturated, folded into an estimate that rises quickly and
     falls slowly: under dynamic batching a lightly loaded replica runs small batches, keeps its
     device busy for less work and so shows less than it can serve;
   - peak: the busiest second of the last minute (``arrival_peak``) over the service rate at
     ``peak_utilization``: bursts within the minute that the rate averages away (clients acting
     together) need the capacity when they come, not a cold start later;
   - burst (shorter than the rate's window, so seen only as a queue): when more than
     ``target_queue_depth`` requests per ready replica are queued, the ready replicas plus what
     the excess needs if it arrived within :data:`BURST_SECONDS`;
   - trend (a rising demand is met a cold start late): where the least-squares line of the
     demand over :data:`TREND_WINDOW_SECONDS` will be one cold start after now, when it rises, at
     the target utilization. The line is drawn through the replicas the arrivals keep busy
     (``arrival_rate / service_rate``), a unit the target does not enter: readings in replicas at
     the target made a changed ``targetUtilization`` read as a demand that rose (0.8 -> 0.5: 18
     replicas asked where 16 serve, for 30 minutes) or fell. The cold start is measured here: the
     time from a scale-up until the ready count reaches it (smoothed;
     :data:`ASSUMED_COLD_START_SECONDS` until then);
   - until the service rate is known: load ``(queue_depth + in_flight) / target_queue_depth``, at
     most ``panic_threshold x ready`` (a bounded queue saturates, so beyond that a reading says
     "overloaded", not "by how much"; relative to the ready count, pods still cold-starting do not
     make it compound), and utilization ``utilization * ready / target_utilization``. Neither is used
     afterwards, not even when the arrival rate is missing (rule 2): under dynamic batching
     in-flight requests grow with the batch size and the device-busy ratio stays high at low load,
     so both overstate the replicas a demand needs.
   The recommendation is their maximum. Within ``tolerance`` of the current count it is the
   current count (HPA's tolerance); otherwise it is rounded up.
2. Missing or stale signals (see :mod:`neuronfleet.planning.signals`): with none left the fleet
   holds; with some missing the recommendation may grow the fleet but never shrink it, and the
   reason names them. Once the service rate is known the arrival rate and the queue depth are the
   signals a scale-down needs (``rate()`` over a window holding fewer than two scrapes returns
   nothing), and the in-flight count and busy ratio are not: they no longer size the fleet.
   A snapshot whose samples cover fewer pods than the ready replicas (``reporting``: some pods'
   scrapes failed, so every sum reads low) is partial and treated alike: grow, never shrink. Either
   way the decision's ``demand`` is None: the warm pool holds as through an outage, neither counting
   the low reading as headroom nor recording it in its history. A
   signal whose query the spec left empty is turned off, not missing (:func:`turned_off`); with
   the arrival rate turned off the service rate sizes nothing (one learned before is kept, unused),
   and the fleet is sized on the signals of rule 1's last item, as before a measurement. When the
   spec turned off every signal left, the reason names those turned off, and the decision says so
   (``signals_off``): its demand is not measured by design, which the warm pool must not take for
   an outage (:func:`unmeasured`).
3. Panic mode (Knative's idea, on our signals): when the demand (the signals' maximum) averaged
   over the decisions within ``panic_window_seconds`` reaches ``panic_threshold`` times the ready
   replicas, scaling up skips the scale-up stabilization and rate limits, and nothing scales down
   until the condition has been false for one scale-down stabilization window (at least
   :data:`MIN_PANIC_HOLD_SECONDS`, Knative's stable window). Decisions come every
   ``interval_seconds``, so a window no longer than that (the default 6 s against 15 s) is the
   latest decision alone, and a longer one lets a burst that does not last pass without panic.
4. Otherwise HPA v2 behavior, as ``pkg/controller/podautoscaler`` does it: stabilization keeps the
   result between the minimum of the recommendations in the scale-up window and the maximum of
   those in the scale-down window; rate policies limit the change against the replica count at the
   start of each policy's period (the current count less what was added within it, plus what was
   removed, in both directions), and ``select_policy`` picks the most (Max) or least (Min)
   permissive, or forbids the direction (Disabled). A limit never moves the fleet the other way
   (HPA's guard), and from zero replicas a Percent policy allows one.
   The scale-down window is the longer of the stabilization window and the scale-down delay: in
   ``Fixed`` mode ``scale_down_delay_seconds`` (default 30 minutes: a released replica takes
   minutes to get back on Inf2, and bursts recur); in ``Learned`` mode (the default) the shortest
   window that a replay of the deployment's last day would have found enough, at most that
   (:mod:`neuronfleet.planning.hold`), so a steady decline is followed and a bursty demand held.
   While the rate signal's trend line falls, each recommendation the learned delay holds is lowered
   by :data:`DECLINE_CREDIT` of the decline since it was made: the fleet keeps its headroom for
   bursts and follows the decline instead of holding the level of its peak. Not in ``Fixed`` mode,
   and never below the maximum within behavior.scaleDown's own stabilization window: both promise
   the maximum. The reason says what held the count (that window, the delay, the fleet found).
5. ``min_replicas`` / ``max_replicas`` bound the result. Manual mode returns ``replicas``.

The service rate belongs to what it was measured on: the caller passes a key of it
(:func:`service_rate_key`: artifact revision, instance type, NeuronCores per replica, batching), and
a rate measured under another key is forgotten, with its checkpoint and the trend's readings: the
fleet is sized as before any measurement until the new one is measured. The simulator passes none.

What the autoscaler has learned (the service rate, the cold start, the scale-down window and the
history it replays) is also kept as a :class:`Checkpoint`, renewed every
:data:`CHECKPOINT_SECONDS` once the service rate is known; the operator writes it to the status.
The checkpoint also keeps what the next decisions are bound by: the scale events within the spec's
longest rate-policy period and panic mode (renewed at each scale event and when panic starts or
ends, decisions that write the status anyway). Kubernetes' HPA forgets both when its controller
restarts; here a restart is routine (every Helm upgrade, every leader hand-over), and forgetting
them let a restart 10 s after a scale-up of 100 % per 60 s add another 100 % at once, or end a
panic hold that kept a burst's fleet from shrinking. The panic window's demands are not kept: the
default window is the latest decision alone. The trend's readings are kept one a minute
(:func:`_per_minute`), renewed with the checkpoint: without them a restart turned the trend
signal and the decline credit off until the window was half full again (15 minutes). They are in
replicas at the target utilization (the status's unit), so a decision at another target renews the
checkpoint too (the status does not say which target they were written at: see
:attr:`Checkpoint.target_utilization`).
:func:`resume` starts a restarted operator (or a new leader) from it, and :func:`take_over` starts
one that finds no checkpoint (no service rate learned yet: a new deployment, revision or
placement). Either holds the fleet it finds through the scale-down window (``fleet_found``), as
a recommendation made at the takeover: without it, the first decision may release at once what the
lost recommendations held. With no scale-up stabilization window (the default) the fleet found
holds no scale-up: the first decision may grow the fleet as the old leader's would have. With one, it
holds a scale-up for that window from the takeover (the recommendations that told how long the
demand had held are lost, and the window promises no scale-up before it has held that long): a
restart may delay a scale-up by up to one window. Not when the checkpoint shows a scale-up under way
(its last scale event a scale-up within the window before the takeover): a ramp the rate policies
pace goes on as without the restart, where the hold stopped it for a window and left it a step
behind after. The demand is then taken to have held from that scale-up to the takeover, so a
demand that fell below the fleet in between and rose again just before the takeover is scaled up
for up to one window sooner than without the restart.

The window averages the decisions' demands, not Prometheus samples: the runtime is scraped every
15 s or so, so a window of seconds holds at most one sample of a gauge, and the simulator and the
operator then judge panic on the same numbers. ``panic_window_seconds: 0`` turns panic mode off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from neuronfleet.api.v1alpha1 import (
    MAX_STATUS_SCALE_EVENTS,
    MAX_STATUS_TREND_READINGS,
    InferenceDeploymentSpec,
    ScalingRules,
    ScalingSpec,
)
from neuronfleet.planning import hold
from neuronfleet.planning.rounding import ceil_whole
from neuronfleet.planning.signals import QUERIED, SIGNALS, MetricSnapshot

#: Knative's stable window: the shortest time panic mode holds after its trigger last fired.
MIN_PANIC_HOLD_SECONDS = 60.0
#: Weight of an observation above the service-rate estimate: capacity shown is learned quickly.
SERVICE_RATE_RISE = 0.3
#: Weight of an observation below it: under dynamic batching a lightly loaded replica runs small
#: batches and shows less than it can do, so the estimate forgets a higher figure only slowly.
SERVICE_RATE_DECAY = 0.0005
#: Below this utilization the service-rate estimate is too noisy to update.
SERVICE_RATE_MIN_UTILIZATION = 0.2
#: The ready count and arrival rate must have held this long for a service-rate measurement.
STEADY_SECONDS = 30.0
#: ... with the arrival rate within this fraction of its current value.
STEADY_RATE_CHANGE = 0.05
#: Above this utilization a replica may be saturated: arrivals then overstate what it serves.
SERVICE_RATE_MAX_UTILIZATION = 0.95
#: Window over which the demand's trend (least-squares slope of the rate signal) is taken.
TREND_WINDOW_SECONDS = 1800.0
#: Share of a falling trend's decline credited against the recommendations the scale-down window
#: holds.
DECLINE_CREDIT = 0.5
#: Cold start (scale-up to serving) assumed until one is measured: the warm pool's assumed pod plus
#: node cold starts (300 s + 180 s).
ASSUMED_COLD_START_SECONDS = 480.0
#: Weight of a new cold-start measurement.
COLD_START_SMOOTHING = 0.3
#: Scale-ups not served within this long are forgotten (replaced, cancelled or failed).
MAX_LAUNCH_AGE_SECONDS = 3600.0
#: A queue beyond its usual depth counts as requests that arrived within this many seconds: a
#: burst the 1-minute arrival rate cannot show, caught part-way (a 15 s scrape samples it at a
#: random instant).
BURST_SECONDS = 0.25
#: A signal above this many replicas counts as this many: far above any ``maxReplicas`` (the API
#: allows 1,000), so the bounded result is the same, and a huge but finite sample (1e308) no longer
#: overflows to inf, which ``math.ceil`` refuses (every reconcile of the deployment then failed).
MAX_SIGNAL_REPLICAS = 1e9
#: The highest service rate (requests per second per replica) taken as measured: above it a sample
#: is a broken exporter's, not a replica's (learned at 1e300, it shrank the fleet to minReplicas).
MAX_SERVICE_RATE = MAX_SIGNAL_REPLICAS
#: Longest rate-policy period the API allows; older scale events are forgotten.
MAX_POLICY_PERIOD_SECONDS = 1800.0
#: The checkpoint is renewed this often: each renewal is a status write (12 an hour per deployment
#: serving traffic), and a restart loses at most this much of the history.
CHECKPOINT_SECONDS = float(hold.REFRESH_SECONDS)


@dataclass(frozen=True)
class Checkpoint:
    """What the autoscaler has learned, as of ``time``: enough to resume after a restart."""

    time: float
    #: Requests per second one replica serves (see :func:`_update_service_rate`).
    service_rate: float
    #: Seconds from a scale-up to its pods serving, once measured.
    cold_start: float | None
    #: The scale-down window in effect, once chosen.
    hold_seconds: float | None
    history: hold.History
    #: What the service rate was measured on (:func:`service_rate_key`); None: not known (a checkpoint
    #: written without it is trusted, as before keys existed).
    service_rate_key: str | None = None
    #: (time, replica change) of the decisions applied within the spec's longest rate-policy period:
    #: a restarted autoscaler counts them against the rate policies as its predecessor did.
    scale_events: tuple[tuple[float, int], ...] = ()
    #: When panic mode started (None outside it), and when its condition last held as of ``time``
    #: (renewed at panic's start, at each scale event and every CHECKPOINT_SECONDS, not at each
    #: trigger, which would write the status every decision of a long panic): a restart may end the
    #: panic hold sooner by at most the time from ``time`` to the restart.
    panic_since: float | None = None
    panic_last_triggered: float | None = None
    #: (time, rate signal) of the trend's window as of ``time``, one reading a minute
    #: (:func:`_per_minute`), in replicas at the spec's target utilization then, as the status keeps
    #: them: a restarted autoscaler's trend and decline credit go on from them (:func:`resume`).
    rates: tuple[tuple[float, float], ...] = ()
    #: The spec's target utilization ``rates`` are in (None: not known, a checkpoint read from the
    #: status). Not written there: an operator that predates the field refuses a status section with
    #: a field it does not know, and would learn everything again after a downgrade. Instead a
    #: decision at another target renews the checkpoint (:func:`_checkpointed`), so that the status
    #: holds the readings at the spec's target, as a restarted operator takes them (:func:`resume`).
    target_utilization: float | None = None
    #: What is derived from this checkpoint once and read at every reconcile until it is renewed
    #: (the status section: rendering 120 scale events and 30 readings took ~0.6 ms a reconcile).
    #: Not a field of the checkpoint's value: not compared, not copied by ``replace``.
    derived: dict[str, object] = field(default_factory=dict, init=False, compare=False, repr=False)


@dataclass(frozen=True)
class ScalingState:
    """What the autoscaler remembers between decisions (immutable; each decision returns a new one)."""

    #: (time, recommendation) pairs inside the longest stabilization window.
    recommendations: tuple[tuple[float, int], ...] = ()
    #: (time, replica change) of applied decisions inside the longest rate-policy period.
    scale_events: tuple[tuple[float, int], ...] = ()
    #: When panic mode last started, or None outside panic mode.
    panic_since: float | None = None
    #: (time, demand) of the decisions within the panic window, the latest included.
    demands: tuple[tuple[float, float], ...] = ()
    #: When the panic condition last held.
    panic_last_triggered: float | None = None
    #: Requests per second one replica serves, once estimated.
    service_rate: float | None = None
    #: What it was measured on (:func:`service_rate_key`; None: not known).
    service_rate_key: str | None = None
    #: (time, ready replicas, arrival rate) of recent decisions: the service rate is measured only
    #: while both held still, since the rate, utilization and ready count are sampled over different
    #: windows and at different times.
    recent: tuple[tuple[float, int, float | None], ...] = ()
    #: (time, replicas the arrivals keep busy: arrival rate / service rate) within
    #: :data:`TREND_WINDOW_SECONDS`, for the trend: the rate signal at a target utilization of 1, so
    #: that a changed target does not move the line.
    rates: tuple[tuple[float, float], ...] = ()
    #: (time, replicas) of scale-ups whose pods are not all ready yet: when ready reaches the count,
    #: the time it took is a measured cold start.
    launches: tuple[tuple[float, int], ...] = ()
    #: Seconds from a scale-up to its pods serving, once measured.
    cold_start: float | None = None
    #: Per minute, the highest recommendation and need (see :mod:`neuronfleet.planning.hold`).
    history: hold.History = field(default_factory=hold.History)
    #: The scale-down window the history chose, and when (None until first chosen).
    hold_seconds: float | None = None
    hold_chosen_at: float | None = None
    #: When the rate signal was first used (or the state resumed); None before. The first such
    #: decision drops the recommendations the busy-ratio and in-flight signals made.
    measured_since: float | None = None
    #: The latest checkpoint (None until the service rate is known).
    checkpoint: Checkpoint | None = None
    #: (time, active replicas) of the fleet found when this autoscaler took over (a restart, a new
    #: leader: :func:`resume`, :func:`take_over`). The stabilization windows hold it as a
    #: recommendation made then (the scale-up window strictly within it: see the module docstring).
    fleet_found: tuple[float, int] | None = None


def take_over(checkpoint: Checkpoint | None, now: float, current: int, target_utilization: float) -> ScalingState:
    """The state of an autoscaler that takes over a fleet of ``current`` active replicas at ``now``
    (a restarted operator, a new leader), from its last ``checkpoint`` when there is one
    (:func:`resume`; ``target_utilization``: the spec's). Without one the autoscaler has learned
    nothing worth keeping (no service rate yet), but the scale-down window its predecessor was in
    still holds the fleet found.
    """
    if checkpoint is not None:
        return resume(checkpoint, now, current, target_utilization)
    return ScalingState(fleet_found=(now, current) if current > 0 else None)


def resume(checkpoint: Checkpoint, now: float, current: int, target_utilization: float) -> ScalingState:
    """The state of an autoscaler restarted at ``now`` with ``current`` replicas, from ``checkpoint``.

    The fleet found is held through the scale-down window (as it would have kept the
    recommendations the restart lost); the service rate, cold start and window are the
    checkpoint's, and its history is bridged up to now (:func:`hold.resume`). Its scale events count
    against the rate policies and its panic mode goes on, as without the restart (a checkpoint
    taken after ``now``, by a clock since stepped back, has their times moved back with it). Its
    trend readings still within :data:`TREND_WINDOW_SECONDS` of ``now`` are the trend's first: the
    trend signal and the decline credit need the window half full, 15 minutes of decisions that a
    restart lost, exactly when a ramp may be under way. They are kept in replicas at the target
    utilization (the status's unit), and taken at the target the checkpoint records, else (read from
    the status, which does not record it) at ``target_utilization``, the spec's; a decision at
    another target renews it (:func:`_checkpointed`). So the status holds them at the spec's target
    from the first decision after a change; a target changed while no operator ran, or between the
    last decision and the restart, moves them by the ratio of the two targets, until they leave the
    window.
    """
    shift = min(0.0, now - checkpoint.time)
    # The target the readings were written at, where the checkpoint knows it (one kept in memory, as
    # the simulator's); read from the status it does not: the spec's, which it is then taken to be.
    target = checkpoint.target_utilization or target_utilization
    return ScalingState(
        rates=tuple((t + shift, v * target) for t, v in checkpoint.rates if t + shift > now - TREND_WINDOW_SECONDS),
        scale_events=tuple((t + shift, change) for t, change in checkpoint.scale_events),
        panic_since=None if checkpoint.panic_since is None else checkpoint.panic_since + shift,
        panic_last_triggered=(
            None if checkpoint.panic_last_triggered is None else checkpoint.panic_last_triggered + shift
        ),
        fleet_found=(now, current) if current > 0 else None,
        service_rate=checkpoint.service_rate,
        service_rate_key=checkpoint.service_rate_key,
        cold_start=checkpoint.cold_start,
        history=hold.resume(checkpoint.history, now),
        hold_seconds=checkpoint.hold_seconds,
        hold_chosen_at=now if checkpoint.hold_seconds is not None else None,
        measured_since=now,
        # A target other than the spec's renews the checkpoint at the next decision, as before the restart.
        checkpoint=replace(checkpoint, target_utilization=target),
    )


@dataclass(frozen=True)
class ScalingDecision:
    """The desired active replicas, why, and the state for the next call."""

    desired: int
    reason: str
    new_state: ScalingState
    #: The demand in replicas before stabilization, rate limits and bounds (None when metrics
    #: were missing). The warm pool sizes itself from the history of this number.
    recommendation: int | None = None
    panic: bool = False
    signals: dict[str, float] = field(default_factory=dict)
    #: Replicas the demand needs at target, within [min, max], for the warm pool's history: the
    #: arrival-rate signal once the service rate is known (a backlog inflates the queue signal far
    #: beyond the demand, up to the queue bound), else the recommendation. None when metrics were
    #: missing, and when a signal a scale-down needs is missing or the snapshot is partial (the
    #: decision's gaps: its figures may read low; the warm pool then holds as through an outage).
    demand: int | None = None
    #: Seconds this decision moved the state's times by (negative: the wall clock stepped back, see
    #: :func:`decide`; 0 otherwise). The caller moves the warm pool's demand history by the same
    #: (:func:`~neuronfleet.planning.warmpool.shifted`), so the two memories stay on one clock.
    clock_shift: float = 0.0
    #: No signal to decide on because the spec turned off every one this decision could size the
    #: fleet on, none missing ("no signal to scale on"): the signals turned off (sorted; empty
    #: otherwise). The demand is not measured by design, as in Manual mode, not lost to an outage
    #: (:func:`unmeasured`). Kept in the decision: one re-served after the spec changed still says
    #: which were off when it was made.
    signals_off: tuple[str, ...] = ()


def service_rate_key(spec: InferenceDeploymentSpec, revision: str | None, instance_type: str | None) -> str | None:
    """What a replica's service rate depends on, as a key for :func:`decide`: the artifact revision
    (the compiled model, its buckets included), the instance type, the NeuronCores per replica and
    the batching (buckets, batch delay). None while the revision or instance type is not known: the
    learned rate is then kept, not forgotten on a reading that says nothing.
    """
    if not revision or not instance_type:
        return None
    model = spec.model
    buckets = ",".join(str(b) for b in model.batch_buckets)
    return (
        f"{revision} on {instance_type}, {model.neuron_cores_per_replica} cores, "
        f"batches {buckets}, delay {spec.runtime.max_batch_delay_ms:g} ms"
    )


def queries_off(spec: ScalingSpec) -> frozenset[str]:
    """The snapshot's fields (:data:`~neuronfleet.planning.signals.QUERIED`) whose query ``spec``
    left empty: the operator's Prometheus reader never asks them (``metrics.prometheus.queries_for``),
    so its snapshot has them None. The one rule for both the reader and the simulator (:func:`as_read`)."""
    return frozenset(name for name in QUERIED if not getattr(spec.metrics, name).strip())


def turned_off(spec: ScalingSpec) -> frozenset[str]:
    """The signals whose query ``spec`` left empty: turned off, never read, so never missing."""
    return queries_off(spec) & frozenset(SIGNALS)


def as_read(spec: ScalingSpec, snapshot: MetricSnapshot) -> MetricSnapshot:
    """``snapshot`` as the operator's reader returns it under ``spec``: the fields of the queries it
    never asks (:func:`queries_off`) are None. The simulator computes every signal; passed on, a
    signal turned off sized its fleet where the operator's had none (review r17 finding 2)."""
    unasked: dict[str, Any] = dict.fromkeys(queries_off(spec))  # signals only: never the time
    return replace(snapshot, **unasked) if unasked else snapshot


def unmeasured(spec: ScalingSpec, decision: ScalingDecision) -> str | None:
    """Why ``decision`` has no demand by design, for the warm pool (``warmpool.plan``'s
    ``unmeasured``); None when its demand is measured, or missing (an outage, which the Auto pool
    holds its history through). The operator and the simulator both ask here, so they agree.

    Manual mode measures none, and neither does a spec that turned off every signal the decision
    could use: nothing is read, so nothing is missing. Taken for an outage, that held the pool's
    history for good and said "metrics missing" while ScalingActive said "no signal to scale on"."""
    if spec.mode == "Manual":
        return "scaling.mode Manual does not measure"
    if decision.signals_off:
        return f"no signal measures ({', '.join(decision.signals_off)} turned off)"
    return None


def service_rate_figure(rate: float) -> float:
    """``rate`` to 0.1 or to 4 significant digits, whichever is finer (0.0 for no positive rate): as
    the status keeps it, and as reasons print it (to 0.1 only, a slow LLM's 0.06/s read 0.0/s)."""
    if not rate > 0 or not math.isfinite(rate):
        return 0.0
    return round(rate, max(1, 3 - math.floor(math.log10(rate))))


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def _signals(spec: ScalingSpec, snapshot: MetricSnapshot, ready: int, service_rate: float | None) -> dict[str, float]:
    signals: dict[str, float] = {}
    cap = spec.panic_threshold * max(ready, 1)
    if service_rate:
        per_replica = service_rate * spec.target_utilization
        if snapshot.arrival_rate is not None:
            # Arrivals over what a replica has been seen to serve: linear in the demand, unlike the
            # device-busy ratio (small batches at low load keep it high) and in-flight counts (a
            # larger batch holds more requests at once).
            signals["rate"] = snapshot.arrival_rate / per_replica
        # Without an arrival rate (a scrape gap: rate() needs two samples in its window) the rate
        # signal is missing, not replaced: the in-flight and busy-ratio signals below overstate the
        # demand under batching (one such tick once doubled a fleet in panic). The signals left
        # decide, and a missing one never lets the fleet shrink (see decide()).
        if snapshot.arrival_peak is not None:
            # Clients acting together send bursts within the minute the rate averages over; the
            # busiest second must fit too (a 50 ms SLO cannot queue a second's excess).
            signals["peak"] = snapshot.arrival_peak / (service_rate * spec.peak_utilization)
        queued = snapshot.queue_depth
        if queued is not None and queued > spec.target_queue_depth * ready:
            # A burst shorter than the rate's window shows only as a queue: the ready replicas
            # could not keep up, by the queue's excess over its usual depth arriving within about
            # BURST_SECONDS.
            excess = queued - spec.target_queue_depth * ready
            signals["burst"] = ready + excess / (BURST_SECONDS * per_replica)
        return _capped(signals)
    # Before a service rate is known: queued plus in-flight requests, and the device-busy ratio.
    if snapshot.load is not None:
        signals["load"] = min(snapshot.load / spec.target_queue_depth, cap)
    if snapshot.utilization is not None and ready > 0:
        signals["utilization"] = snapshot.utilization * ready / spec.target_utilization
    return _capped(signals)


def _capped(signals: dict[str, float]) -> dict[str, float]:
    """``signals`` with each value at most :data:`MAX_SIGNAL_REPLICAS` (inf included)."""
    return {name: min(value, MAX_SIGNAL_REPLICAS) for name, value in signals.items()}


def _steady(
    recent: tuple[tuple[float, int, float | None], ...], ready: int, rate: float, now: float, interval: float
) -> bool:
    """Whether the ready count and the arrival rate held still over the last STEADY_SECONDS."""
    # Decision intervals jitter: look a little further back than the span the samples must cover.
    window = [(t, r, a) for t, r, a in recent if t >= now - 1.5 * STEADY_SECONDS]
    if not window or window[0][0] > now - STEADY_SECONDS:
        # Decisions further apart than that (a longer intervalSeconds): the span starts at the
        # newest earlier sample, if it is the previous decision's (not one from before a pause).
        earlier = [
            sample for sample in recent if now - interval - 1.5 * STEADY_SECONDS <= sample[0] <= now - STEADY_SECONDS
        ]
        if not earlier:
            return False
        window = [earlier[-1], *window]
    return all(r == ready and a is not None and abs(a - rate) <= STEADY_RATE_CHANGE * rate for _, r, a in window)


def measured_service_rate(
    spec: ScalingSpec, state: ScalingState, snapshot: MetricSnapshot, ready: int, now: float, off: frozenset[str]
) -> float | None:
    """The service rate after ``snapshot`` (stale samples already dropped): ``state``'s estimate,
    updated when the snapshot covers every ready replica and the fleet held still (the rule of the
    module docstring); ``off``: the signals turned off (:func:`turned_off`). What :func:`decide` learns;
    public for a caller that sizes on another rate and learns this one beside it (the known-capacity
    benchmark)."""
    # Not from a partial snapshot: its arrival rate reads low, its utilization average does not.
    # (A replica still loading reports a busy ratio of 0: the default utilization query averages
    # ready pods only. Waiting here for every active replica to be ready starved the estimate: a
    # fleet that scales every few minutes is rarely all ready for STEADY_SECONDS, and the simulator's
    # conv replay then ran on the overstating pre-measurement signals at 2.4x the feasible oracle.)
    steady = (
        snapshot.arrival_rate is not None
        and not snapshot.partial(ready)
        and _steady(state.recent, ready, snapshot.arrival_rate, now, float(spec.interval_seconds))
    )
    return _update_service_rate(spec, snapshot, ready, state.service_rate, steady, "queue_depth" in off)


def _update_service_rate(
    spec: ScalingSpec, snapshot: MetricSnapshot, ready: int, previous: float | None, steady: bool, queue_off: bool
) -> float | None:
    util, rate, queued = snapshot.utilization, snapshot.arrival_rate, snapshot.queue_depth
    # With the queue signal turned off (an empty query) the busy ratio alone must show saturation;
    # waiting for a queue that is never read, the rate was never measured.
    if util is None or rate is None or (queued is None and not queue_off) or ready <= 0 or not steady:
        return previous
    # Only an unsaturated fleet tells the service rate: when backlogged, arrivals exceed throughput.
    # A saturated device (utilization near 1, or a queue building) serves less than arrives.
    if not SERVICE_RATE_MIN_UTILIZATION <= util <= SERVICE_RATE_MAX_UTILIZATION or (queued or 0.0) > ready:
        return previous
    observed = rate / (util * ready)
    if not math.isfinite(observed) or observed > MAX_SERVICE_RATE:
        # A huge sample over a small busy ratio (or a broken exporter's absurd but finite one): no
        # rate a replica serves. Learned, it read every later arrival rate as no demand at all.
        return previous
    if previous is None:
        return observed
    gain = SERVICE_RATE_RISE if observed > previous else SERVICE_RATE_DECAY
    return previous + gain * (observed - previous)


def _line(rates: tuple[tuple[float, float], ...]) -> tuple[float, float, float] | None:
    """The least-squares line of the rate signal as (mean time, mean value, slope); None while the
    window is less than half full."""
    if len(rates) < 3 or rates[-1][0] - rates[0][0] < TREND_WINDOW_SECONDS / 2:
        return None
    times = [t for t, _ in rates]
    # Lists, not generators, under the sums: the same additions in the same order, at every decision.
    mean_t, mean_v = sum(times) / len(times), sum([v for _, v in rates]) / len(rates)
    spread = sum([(t - mean_t) ** 2 for t in times])
    return mean_t, mean_v, sum([(t - mean_t) * (v - mean_v) for t, v in rates]) / spread


def _trend(line: tuple[float, float, float] | None, last: float, horizon: float) -> float | None:
    """Where the rate signal's least-squares ``line`` (:func:`_line`) will be ``horizon`` seconds
    after its last sample at ``last``, if rising (None while the window is less than half full, or
    not rising). The line, not the last sample: one noisy reading must not be extrapolated."""
    if line is None or line[2] <= 0:
        return None
    mean_t, mean_v, slope = line
    return mean_v + slope * (last - mean_t + horizon)


def _measure_cold_start(
    launches: tuple[tuple[float, int], ...], previous: float | None, ready: int, now: float
) -> tuple[tuple[tuple[float, int], ...], float | None]:
    """Scale-ups still waiting for their pods, and the cold-start estimate updated with those served."""
    measured = previous
    waiting = []
    for started, target in launches:
        if ready >= target:
            took = now - started
            measured = took if measured is None else measured + COLD_START_SMOOTHING * (took - measured)
        elif started > now - MAX_LAUNCH_AGE_SECONDS:
            waiting.append((started, target))
    return tuple(waiting), measured


def _reachable_launches(launches: tuple[tuple[float, int], ...], count: int) -> tuple[tuple[float, int], ...]:
    """The waiting scale-ups a fleet of ``count`` can still serve. Those above it were cancelled
    with their pods (by the decision setting ``count``, or by a count lowered before it, a Manual
    one say): left waiting, the next scale-up to their count would record their age as its cold
    start."""
    return tuple((started, target) for started, target in launches if target <= count)


def _period_start(events: tuple[tuple[float, int], ...], current: int, now: float, period: float) -> int:
    """The replicas at the start of the ``period`` before ``now``: ``current`` less what the events
    within it added, plus what they removed. HPA counts both since kubernetes/kubernetes#109058
    (``currentReplicas - replicasAddedInCurrentPeriod + replicasDeletedInCurrentPeriod`` in
    calculateScaleUpLimitWithScalingRules and calculateScaleDownLimitWithBehaviors): counting one
    direction, a scale-up right after a scale-down was limited from the lowered count (10 -> 4, then
    at most 8 where HPA allows 20)."""
    return current - sum(change for t, change in events if t > now - period)


def scale_up_limit(rules: ScalingRules, events: tuple[tuple[float, int], ...], current: int, now: float) -> int:
    """HPA's scale-up limit: the most replicas ``rules`` allow now, given the changes ``events``
    (time, replicas added or removed) made; shared with the simulator's HPA and KEDA baselines."""
    if rules.select_policy == "Disabled":
        return current
    limits = []
    for policy in rules.policies:
        start = _period_start(events, current, now, policy.period_seconds)
        if policy.type == "Pods":
            limits.append(start + policy.value)
        else:
            grown = math.ceil(start * (1 + policy.value / 100))
            # A percentage of no replicas is none: from zero a Percent policy allows one replica,
            # or a fleet scaled to zero could never start again.
            limits.append(grown if start > 0 else max(grown, 1))
    limit = max(limits) if rules.select_policy == "Max" else min(limits)
    # As HPA (convertDesiredReplicasWithBehaviorRate): a scale-up limit never shrinks the fleet.
    # Growth beyond the policies within the period (panic mode skips them, a raised minReplicas)
    # puts the period's start low enough for the limit to fall below the count.
    return max(limit, current)


def scale_down_limit(rules: ScalingRules, events: tuple[tuple[float, int], ...], current: int, now: float) -> int:
    """HPA's scale-down limit: the fewest replicas ``rules`` allow now (see :func:`scale_up_limit`)."""
    if rules.select_policy == "Disabled":
        return current
    limits = []
    for policy in rules.policies:
        start = _period_start(events, current, now, policy.period_seconds)
        if policy.type == "Pods":
            limits.append(start - policy.value)
        else:
            # Truncated, as HPA's calculateScaleDownLimitWithBehaviors does
            # (int32(float64(periodStartReplicas) * (1 - value/100))): rounded up, a 10 % policy
            # never let a fleet of 10 or fewer replicas shrink at all.
            limits.append(int(start * (1 - policy.value / 100)))
    # Max selects the policy allowing the largest change, i.e. the lowest replica floor.
    limit = min(limits) if rules.select_policy == "Max" else max(limits)
    # As HPA (convertDesiredReplicasWithBehaviorRate): a scale-down limit never grows the fleet
    # (removals beyond the policies within the period, such as a lowered maxReplicas, put the
    # period's start high enough for the floor to lie above the count).
    return min(limit, current)


def _describe(signals: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.1f}" for name, value in sorted(signals.items(), key=lambda kv: -kv[1]))


def decide(
    spec: ScalingSpec,
    state: ScalingState,
    snapshot: MetricSnapshot | None,
    current: int,
    ready: int,
    now: float,
    rate_key: str | None = None,
) -> ScalingDecision:
    """Desired active replicas for ``spec`` given the metrics; see the module docstring for the rule.

    ``current`` is the active replicas the fleet has (ready or starting), ``ready`` those serving.
    ``rate_key`` says what the replicas' service rate depends on (:func:`service_rate_key`; None:
    unknown, nothing forgotten): a learned rate measured under another key is forgotten.
    """
    low, high = spec.min_replicas, spec.max_replicas
    if spec.mode == "Manual":
        wanted = spec.replicas if spec.replicas is not None else low
        desired = _clamp(wanted, 0, high)
        # Said as it is: an unset replicas is not "replicas N" (the scale subresource reads it as 0).
        if spec.replicas is None:
            why = f"manual: spec.scaling.replicas is not set: minReplicas {desired}"
        elif desired != spec.replicas:
            why = f"manual: replicas {spec.replicas}, bounded to maxReplicas {desired}"
        else:
            why = f"manual: replicas {desired}"
        # The Auto scale events are forgotten: back in Auto, they were subtracted from a count they
        # never produced, and the rate limits pinned the fleet for the rest of their period (as HPA,
        # whose events are its own changes only: the Manual count is the period's start).
        state = replace(state, scale_events=(), launches=_reachable_launches(state.launches, desired))
        if state.checkpoint is not None and state.checkpoint.scale_events:
            # Nor resumed after a restart.
            state = replace(state, checkpoint=replace(state.checkpoint, scale_events=()))
        return ScalingDecision(desired, why, state, recommendation=desired)
    # Auto never scales to zero: no replica would report the traffic to scale up again (the CRD
    # refuses minReplicas 0 in Auto mode; an object stored before that rule is held at one).
    low = max(low, min(1, high))
    clock_shift = _clock_shift(state, now, float(spec.interval_seconds))
    state = _moved(state, clock_shift)

    forgotten = ""
    if rate_key is not None and state.service_rate_key not in (None, rate_key):
        # A new artifact revision, instance type, core count or batching serves at another rate: a
        # rate kept from before sized a model twice as slow at half its need for a day. Back to the
        # signals of an unmeasured fleet until it is measured again (and no checkpoint of the old one).
        if state.service_rate is not None:
            forgotten = f"service rate {service_rate_figure(state.service_rate):g}/s forgotten: now {rate_key}"
        # The trend's readings were taken at the old rate: a line through both would be a jump.
        state = replace(state, service_rate=None, measured_since=None, recent=(), rates=(), checkpoint=None)
    if rate_key is not None:
        state = replace(state, service_rate_key=rate_key)

    if snapshot is None:
        snapshot = MetricSnapshot(time=now)
    snapshot = snapshot.without_stale(now, spec.metrics.stale_after_seconds)
    # Once the service rate is known the arrival rate is the primary signal: without it the fleet
    # may grow on the signals left, never shrink.
    off = turned_off(spec)
    # With the arrival rate turned off the service rate sizes nothing (a rate learned before, or
    # resumed, is kept for when the query is back): the fleet is sized as before a measurement. Used
    # with it, the queue's bursts alone were left, and with the peak off too no signal at all: the
    # fleet held for good, the reason saying "metrics missing (all)".
    sizing_rate = state.service_rate if "arrival_rate" not in off else None
    missing = snapshot.missing(measured=bool(sizing_rate), off=off)
    # The rate signal uses the estimate from earlier snapshots: this snapshot's own arrival rate and
    # utilization would only restate the utilization signal.
    signals = _signals(spec, snapshot, ready, sizing_rate)
    partial = snapshot.partial(ready)
    service_rate = measured_service_rate(spec, state, snapshot, ready, now, off)
    # The newest sample older than that is kept too: with decisions further apart than
    # STEADY_SECONDS it is the only one to tell whether the rate held still.
    older = [x for x in state.recent if x[0] <= now - 2 * STEADY_SECONDS][-1:]
    recent = (
        *older,
        *[x for x in state.recent if x[0] > now - 2 * STEADY_SECONDS],
        (now, ready, snapshot.arrival_rate),
    )
    launches, cold_start = _measure_cold_start(state.launches, state.cold_start, ready, now)
    rates = tuple([(t, v) for t, v in state.rates if t > now - TREND_WINDOW_SECONDS])
    target = spec.target_utilization
    # The rate signal's line over the window: read here for the trend, below for a falling demand.
    rate_line: tuple[float, float, float] | None = None
    if "rate" in signals:
        # The replicas the arrivals keep busy (the rate signal at a target of 1): the line is the
        # demand's, whatever targetUtilization each reading was taken at.
        rates = (*rates, (now, signals["rate"] * target))
        rate_line = _line(rates)
        # A rising demand is met a cold start late: ask now for where its trend will be by then.
        busy = _trend(rate_line, now, cold_start if cold_start is not None else ASSUMED_COLD_START_SECONDS)
        trend = None if busy is None else busy / target
        if trend is not None and trend > signals["rate"]:
            signals["trend"] = min(trend, MAX_SIGNAL_REPLICAS)
    longest = float(spec.scale_down_delay_seconds)
    hold_seconds, hold_chosen_at = state.hold_seconds, state.hold_chosen_at
    if spec.scale_down_delay_mode == "Fixed":
        hold_seconds = longest
    elif hold_chosen_at is None or now - hold_chosen_at >= hold.REFRESH_SECONDS:
        measured = cold_start if cold_start is not None else ASSUMED_COLD_START_SECONDS
        hold_seconds, hold_chosen_at = hold.choose(state.history, longest, measured), now
    hold_seconds = min(hold_seconds if hold_seconds is not None else longest, longest)
    down_window = max(spec.behavior.scale_down.stabilization_window_seconds, hold_seconds)
    # Recommendations are kept for the longest window, so that a hold that grows again has them.
    horizon = max(
        spec.behavior.scale_up.stabilization_window_seconds,
        spec.behavior.scale_down.stabilization_window_seconds,
        longest,
    )
    recommendations = tuple([(t, r) for t, r in state.recommendations if t > now - horizon])
    fleet_found = state.fleet_found if state.fleet_found and state.fleet_found[0] > now - horizon else None
    measured_since = state.measured_since
    if "rate" in signals and measured_since is None:
        # The first decision on the measured service rate: the busy-ratio and in-flight signals it
        # replaces overstate the demand under batching, so their recommendations must not hold the
        # fleet up for a scale-down window (nor the fleet found, which they sized).
        recommendations = ()
        fleet_found = None
        measured_since = now
    events = tuple((t, c) for t, c in state.scale_events if t > now - MAX_POLICY_PERIOD_SECONDS)

    if not signals:
        desired = _clamp(current, low, high)
        new_state = replace(
            state,
            recommendations=recommendations,
            fleet_found=fleet_found,
            scale_events=events,
            service_rate=service_rate,
            recent=recent,
            rates=rates,
            launches=launches,
            cold_start=cold_start,
            hold_seconds=hold_seconds,
            hold_chosen_at=hold_chosen_at,
        )
        if desired != current:
            new_state = _with_event(new_state, now, desired - current)
        # Renewed here too: after a clock step back the one kept had a future time and the history
        # from before the step (status.autoscaler showed both while metrics were missing).
        new_state = _checkpointed(spec, new_state, now)
        # Nothing is missing: the spec turned off every signal this fleet could be sized on, or the
        # busy ratio is read but, with no replica ready, sizes nothing yet (a fleet waiting for its
        # first replica: measured, as soon as there is one to measure).
        waiting = not sizing_rate and ready == 0 and snapshot.utilization is not None
        signals_off = tuple(sorted(off)) if not missing and not waiting else ()
        if signals_off:
            reason = f"no signal to scale on ({', '.join(signals_off)} turned off): holding {desired}"
        elif waiting and not missing:
            turned = f" ({', '.join(sorted(off))} turned off)" if off else ""
            reason = f"no ready replica to measure utilization on{turned}: holding {desired}"
        else:
            reason = f"metrics missing ({', '.join(missing) or 'all'}): holding {desired}"
        if forgotten:
            reason += f"; {forgotten}"
        return ScalingDecision(
            desired,
            reason,
            new_state,
            recommendation=None,
            signals=signals,
            clock_shift=clock_shift,
            signals_off=signals_off,
        )

    demand = max(signals.values())
    recommendation = current if current > 0 and abs(demand / current - 1) <= spec.tolerance else ceil_whole(demand)
    notes: list[str] = [forgotten] if forgotten else []
    gaps = [f"{', '.join(missing)} missing"] if missing else []
    if partial:
        # Some pods' scrapes failed (their series went stale): the sums read part of the demand.
        gaps.append(f"metrics of {snapshot.reporting:.0f} of {ready} ready pods")
    if gaps and recommendation < current:
        recommendation = current
        notes.append(f"no scale-down: {'; '.join(gaps)}")
    elif gaps:
        # Said even when it changes nothing: ScalingActive must not read as if every signal was there.
        notes.append("; ".join(gaps))

    # Panic mode.
    panic_since, panic_last = state.panic_since, state.panic_last_triggered
    window = float(spec.panic_window_seconds)
    demands = (*((t, d) for t, d in state.demands if t > now - window), (now, demand)) if window > 0 else ()
    # The demand over the panic window: a burst must last it to panic (the latest decision alone
    # when the window is no longer than the decision interval).
    panic_demand = sum(d for _, d in demands) / len(demands) if demands else demand
    triggered = window > 0 and panic_demand >= spec.panic_threshold * max(ready, 1)
    if triggered:
        panic_last = now
        panic_since = panic_since if panic_since is not None else now
    elif panic_since is not None:
        panic_hold = max(MIN_PANIC_HOLD_SECONDS, float(spec.behavior.scale_down.stabilization_window_seconds))
        if panic_last is None or now - panic_last >= panic_hold:
            panic_since, panic_last = None, None
            notes.append("panic over")
    in_panic = panic_since is not None
    recommendations = (*recommendations, (now, recommendation))

    if panic_since is not None:
        desired = max(recommendation, current)
        notes.append(
            f"panic for {now - panic_since:.0f} s: {panic_demand:.1f}"
            + (f" (mean of {len(demands)} over {window:g} s)" if len(demands) > 1 else "")
            + f" >= {spec.panic_threshold:g}x ready {ready}"
            if triggered
            else "panic hold: no scale-down"
        )
        # Panic skips the scale-up rate limits (it exists to outrun them), not an SRE's "off".
        if desired > current and spec.behavior.scale_up.select_policy == "Disabled":
            desired = current
            notes.append("scale-up disabled")
    else:
        up_window = float(spec.behavior.scale_up.stabilization_window_seconds)
        up_cut = now - up_window
        down_cut = now - down_window
        up_rec = min(r for t, r in recommendations if t > up_cut or t == now)
        found_up = False
        if (
            fleet_found is not None
            and fleet_found[0] > up_cut
            and fleet_found[1] < up_rec
            and not _scaling_up_at(events, fleet_found[0], up_window)
        ):
            # The scale-up window promises no scale-up before the demand has held for it, and how long
            # it had held was lost at the takeover: the fleet found stands in for those
            # recommendations here too (strictly within the window: with none, the default, it holds
            # no scale-up), unless the checkpoint shows a scale-up under way.
            up_rec, found_up = fleet_found[1], True
        held = [(t, r) for t, r in recommendations if t > down_cut or t == now]
        if fleet_found is not None and fleet_found[0] > down_cut:
            held.append(fleet_found)
        window = float(spec.behavior.scale_down.stabilization_window_seconds)
        # What behavior.scaleDown's own window holds (HPA's maximum): never lowered.
        window_rec = max(r for t, r in held if t > now - window or t == now)
        delay_rec = max(r for _, r in held)
        lowered = False
        line = rate_line if "rate" in signals else _line(rates)
        if spec.scale_down_delay_mode == "Learned" and line is not None and line[2] < 0:
            # A falling demand: the learned delay holds each recommendation lowered by the decline
            # since it was made (at DECLINE_CREDIT of the trend line's slope), so the fleet keeps its
            # headroom for bursts yet follows the decline instead of holding the level of its peak.
            # Not in Fixed mode, nor within the stabilization window: both promise the maximum.
            slope = line[2] / target * DECLINE_CREDIT  # replicas at the target, per second
            following = ceil_whole(max(r + slope * (now - t) for t, r in held))
            lowered = following < delay_rec
            delay_rec = min(delay_rec, following)
        down_rec = max(recommendation, window_rec, delay_rec)
        stabilized = current
        if stabilized < up_rec:
            stabilized = up_rec
        if stabilized > down_rec:
            stabilized = down_rec
        if stabilized > recommendation:
            found = fleet_found[1] if fleet_found is not None and fleet_found in held else -1
            own = max(r for t, r in recommendations if t > now - window or t == now)
            if own >= stabilized:
                holder = f"scale-down stabilization window {window:.0f} s"
            elif found >= stabilized:
                holder = f"fleet found at the takeover, held {down_window:.0f} s"
            elif spec.scale_down_delay_mode == "Fixed":
                holder = f"scale-down delay {hold_seconds:.0f} s"
            else:
                holder = f"learned scale-down delay {hold_seconds:.0f} s" + (", less the decline" if lowered else "")
            notes.append(f"stabilized to {stabilized} ({holder})")
        elif stabilized != recommendation:
            held_up = found_up and stabilized == up_rec
            notes.append(
                f"stabilized to {stabilized}"
                + (f" (fleet found at the takeover, held {up_window:.0f} s)" if held_up else "")
            )
        desired = stabilized
        if stabilized > current:
            limit = scale_up_limit(spec.behavior.scale_up, events, current, now)
            if stabilized > limit:
                desired = limit
                notes.append(f"scale-up limited to {limit}")
        elif stabilized < current:
            limit = scale_down_limit(spec.behavior.scale_down, events, current, now)
            if stabilized < limit:
                desired = limit
                notes.append(f"scale-down limited to {limit}")

    bounded = _clamp(desired, low, high)
    if bounded != desired:
        notes.append(f"bounded to [{low}, {high}]")
    launches = _reachable_launches(launches, bounded)
    if bounded > max(current, ready):
        launches = (*launches, (now, bounded))
    history = state.history
    if "rate" in signals:
        # The need, without the target utilization's headroom: what the replay must cover (a burst
        # the rate's window cannot show included).
        need = ceil_whole(max(signals["rate"], signals.get("burst", 0.0)) * spec.target_utilization)
        history = hold.record(history, now, recommendation, need)
    new_state = ScalingState(
        recommendations=recommendations,
        scale_events=events,
        panic_since=panic_since,
        demands=demands,
        panic_last_triggered=panic_last,
        service_rate=service_rate,
        service_rate_key=state.service_rate_key,
        recent=recent,
        rates=rates,
        launches=launches,
        cold_start=cold_start,
        history=history,
        hold_seconds=hold_seconds,
        hold_chosen_at=hold_chosen_at,
        measured_since=measured_since,
        checkpoint=state.checkpoint,
        fleet_found=fleet_found,
    )
    if bounded != current:
        new_state = _with_event(new_state, now, bounded - current)
    new_state = _checkpointed(spec, new_state, now)
    reason = f"{_describe(signals)} -> {recommendation}"
    if notes:
        reason += "; " + "; ".join(notes)
    needed: int | None = ceil_whole(signals["rate"]) if "rate" in signals else recommendation
    if gaps:
        # A signal missing or a partial snapshot: the figures read low (the sums cover some pods only,
        # the rate may be the one missing), so the demand is unknown, as in an outage. Handed on, the
        # warm pool counted the false headroom against its pods and recorded the dip in its history
        # (deleting warm pods now, sizing for a "growth" back to the demand for the next hour).
        needed = None
    return ScalingDecision(
        bounded,
        reason,
        new_state,
        recommendation,
        in_panic,
        signals,
        None if needed is None else _clamp(needed, low, high),
        clock_shift,
    )


def _scaling_up_at(events: tuple[tuple[float, int], ...], takeover: float, window: float) -> bool:
    """Whether the scale events a takeover at ``takeover`` found show a scale-up under way: the last
    one is a scale-up within the scale-up ``window`` before it.

    That scale-up was allowed only once every recommendation in the window before it asked for at
    least the count it reached, which covers the part of the takeover's window before it; the
    recommendations after it, up to the takeover, are taken to have held (a ramp the rate policies
    pace: without this, a restart held it for a whole window and it stayed one step behind after).
    A later scale-down, or none within the window, and the fleet found holds the window as before.

    The status keeps event times rounded up to the second: a scale-up less than a second before the
    takeover reads back after it, so the events up to the takeover's second count (decisions are at
    least a second apart: none of the new autoscaler's own after the takeover is among them).
    """
    last = [(t, change) for t, change in events if t <= math.ceil(takeover)][-1:]
    return bool(last) and last[0][1] > 0 and last[0][0] > takeover - window


def _checkpointed(spec: ScalingSpec, state: ScalingState, now: float) -> ScalingState:
    """``state`` with the checkpoint after this decision: renewed every :data:`CHECKPOINT_SECONDS`
    once the service rate is known, at once when the one kept lies after ``now`` (a wall clock
    stepped back), and when a scale event is not in it or panic mode started or ended since (each
    such decision writes the status anyway: its desired count or its reason changed); and at the
    first decision at a target utilization other than the one its trend readings were written at.
    Kept until the next renewal (up to 5 minutes), readings at the old target were taken at the new
    one by an operator restarted meanwhile: a flat demand read as a trend (0.6 -> 0.5: one replica
    too many for 30 minutes)."""
    checkpoint = state.checkpoint
    if not state.service_rate:
        return state
    rules = (spec.behavior.scale_up, spec.behavior.scale_down)
    period = max((p.period_seconds for direction in rules for p in direction.policies), default=0)
    events = _kept(tuple((t, c) for t, c in state.scale_events if t > now - period))
    if (
        checkpoint is None
        or not 0 <= now - checkpoint.time < CHECKPOINT_SECONDS
        or (events and events[-1] not in checkpoint.scale_events)
        or checkpoint.panic_since != state.panic_since
        or (checkpoint.target_utilization is not None and checkpoint.target_utilization != spec.target_utilization)
    ):
        checkpoint = Checkpoint(
            now,
            state.service_rate,
            state.cold_start,
            state.hold_seconds,
            state.history,
            state.service_rate_key,
            events,
            state.panic_since,
            state.panic_last_triggered,
            # In replicas at the target, as the status keeps them (see Checkpoint.rates).
            tuple((t, v / spec.target_utilization) for t, v in _per_minute(state.rates)),
            spec.target_utilization,
        )
        return replace(state, checkpoint=checkpoint)
    return state


def _per_minute(rates: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
    """The trend's readings as the checkpoint keeps them: per minute, the mean time and mean value of
    its readings, the newest :data:`MAX_STATUS_TREND_READINGS` minutes (the window touches at most 31).

    Small (a decision every 15 s is 120 readings in the window, every second 1,800), and the
    least-squares line through them stays close to the one through every reading: readings on a
    line have their means on it too, so a steady ramp keeps its line exactly; otherwise the line
    loses only the spread within each minute, about (60^2 / 12) / (1800^2 / 12), or 0.1 %, of the
    times' spread over the window, and each minute's noise is averaged, where its last reading
    alone would keep all of that reading's. Until these leave the window a restarted autoscaler's
    line weighs each of them as one of its own readings, not as the several they stand for.
    """
    minutes: dict[int, list[tuple[float, float]]] = {}
    for t, v in rates:
        minutes.setdefault(math.floor(t / 60), []).append((t, v))
    means = [
        (sum(t for t, _ in group) / len(group), sum(v for _, v in group) / len(group))
        for _, group in sorted(minutes.items())
    ]
    return tuple(means[-MAX_STATUS_TREND_READINGS:])


def _kept(events: tuple[tuple[float, int], ...]) -> tuple[tuple[float, int], ...]:
    """``events`` as the status keeps them: at most :data:`MAX_STATUS_SCALE_EVENTS`, the newest
    ``MAX_STATUS_SCALE_EVENTS - 2`` as they are and the older ones summed per direction: one
    scale-up of all the older scale-ups, at the time of the newest of them, and one scale-down so.

    More than fit come only from decisions more often than every 15 s (``intervalSeconds``) within a
    long policy period. Dropped, they let a restarted autoscaler scale again by as much as they had
    (a ramp of 130 one-pod steps within a policy of 130 per 30 min: 10 more at once). Summed per
    direction, each sum counts until the newest of its events leaves the period: in a sum's own
    direction a restarted autoscaler may scale later than without the restart, never sooner; the
    other direction's limit may be looser by those of its events that had left the period, until
    then. (Summed into one change, a scale-down among them cancelled part of a ramp's scale-ups for
    as long as the sum counted, and a restart could scale up sooner.)
    """
    if len(events) <= MAX_STATUS_SCALE_EVENTS:
        return events
    older, newer = events[: 2 - MAX_STATUS_SCALE_EVENTS], events[2 - MAX_STATUS_SCALE_EVENTS :]
    summed = []
    for sign in (1, -1):
        mine = [(t, c) for t, c in older if c * sign > 0]
        if mine:
            summed.append((mine[-1][0], sum(c for _, c in mine)))
    return (*sorted(summed), *newer)


def _latest(state: ScalingState) -> float | None:
    """The latest time ``state`` holds (its last decision's, or its takeover's)."""
    times = [
        *(t for t, *_ in state.recent[-1:]),
        *(t for t, _ in state.recommendations[-1:]),
        *(t for t, _ in state.scale_events[-1:]),
        *(t for t, _ in state.launches[-1:]),
    ]
    found = state.fleet_found[0] if state.fleet_found is not None else None
    times += [
        t for t in (found, state.hold_chosen_at, state.measured_since, state.panic_last_triggered) if t is not None
    ]
    return max(times) if times else None


def _clock_shift(state: ScalingState, now: float, interval: float) -> float:
    """How far :func:`_moved` moves ``state``'s times: back so that its latest lies ``interval``
    before ``now``, when ``now`` reads before it (a wall clock stepped back: NTP, a restored VM);
    else 0."""
    latest = _latest(state)
    if latest is None or now >= latest:
        return 0.0
    return now - interval - latest


def _moved(state: ScalingState, shift: float) -> ScalingState:
    """``state`` with every time moved by ``shift`` seconds (:func:`_clock_shift`).

    Left in the future, its recommendations held the fleet (the scale-up window's minimum included a
    calm recommendation for the length of the step, so a burst was served late), its scale events
    counted against every rate limit and its history's minutes were folded into. The checkpoint keeps
    its time: it is renewed at once (its time is after ``now``). The warm pool's demand history is
    moved by the caller, by the same (:attr:`ScalingDecision.clock_shift`).
    """
    if not shift:
        return state
    latest = _latest(state)
    if latest is None:
        return state

    def moved(pairs: tuple[tuple[float, int], ...]) -> tuple[tuple[float, int], ...]:
        return tuple((t + shift, v) for t, v in pairs)

    history = state.history
    if history.needs:
        minutes = int((latest + shift) // hold.BUCKET_SECONDS) - int(latest // hold.BUCKET_SECONDS)
        history = replace(history, first_minute=history.first_minute + minutes)
    return replace(
        state,
        recommendations=moved(state.recommendations),
        scale_events=moved(state.scale_events),
        launches=moved(state.launches),
        demands=tuple((t + shift, d) for t, d in state.demands),
        rates=tuple((t + shift, v) for t, v in state.rates),
        recent=tuple((t + shift, r, a) for t, r, a in state.recent),
        panic_since=None if state.panic_since is None else state.panic_since + shift,
        panic_last_triggered=None if state.panic_last_triggered is None else state.panic_last_triggered + shift,
        hold_chosen_at=None if state.hold_chosen_at is None else state.hold_chosen_at + shift,
        measured_since=None if state.measured_since is None else state.measured_since + shift,
        fleet_found=None if state.fleet_found is None else (state.fleet_found[0] + shift, state.fleet_found[1]),
        history=history,
    )


def _with_event(state: ScalingState, now: float, change: int) -> ScalingState:
    return replace(state, scale_events=(*state.scale_events, (now, change)))
