"""How much standby capacity to keep: warm pods and node placeholders (pure).

Warm pods have the model loaded but sit outside the Service; promoting one is a label change
(seconds) instead of a cold start (minutes on Inf2: image pull, runtime init, artifact load,
warm-up, and node provisioning when no node has room). Node placeholders are low-priority pods
that keep Inf2 nodes provisioned, so a new pod pays only the pod cold start.

:func:`plan` returns the warm pods and placeholders wanted and a reason stating the sizing
inputs (it goes to ``status.warmPool.reason``). Modes:

- ``Off``: none. ``Fixed``: ``pods`` and ``nodePlaceholders`` as given.
- ``Auto``, beside a parked model (``scaling.mode`` Manual with 0 replicas: :func:`parked`, the way
  the CRD tells users to park one): none, ``minPods`` and a pool found at a takeover included. A
  warm pod or placeholder takes an Inf2 node, and the model serves nothing it could be promoted
  for; parked so, a model kept paying for a node. A Fixed pool is kept: its size is the user's own.
- ``Auto``: from the recent demand history (active replicas the autoscaler recommended, recorded
  once per scaling decision: ``plan(..., sample=False)`` between decisions) and the cold starts
  (measured, else the spec's assumed values):

  * pod horizon ``h_pod = pod_cold_start - cold_start_target``: demand growth within it cannot be
    met by starting a pod in time, so warm pods cover it. Warm pods = the ``coverage`` quantile,
    over every start time ``t`` in the history, of ``max(demand in (t, t + h_pod]) - demand(t)``
    (the empirical distribution of the increase within one cold start; the peak within the window
    counts because requests arriving at the peak wait too).
  * node horizon ``h_node = node_cold_start + pod_cold_start - cold_start_target``: placeholders
    cover the growth within it beyond what the warm pods cover, so that a pod started for it finds
    a node and pays only the pod cold start.

  Headroom the active fleet already holds above the current demand (given as ``active``) counts
  against both, and standby beyond ``maxReplicas - active`` could never be promoted (``minPods``
  still holds: warm pods also replace failed active ones). They are bounded by
  ``minPods``/``maxPods`` and ``maxNodePlaceholders`` (:func:`bounded`). So beside ``N`` active
  replicas the pool keeps at most ``max(maxReplicas - N, minPods)`` standby pods, and the fleet at
  most ``maxReplicas + minPods`` pods; :func:`standby_range` gives the fewest and most standby
  beside ``N``, which ``neuronfleet validate`` plans every count of. Windows that run past the
  end of the history are truncated there, so a young history gives smaller (not missing) figures.
  The history keeps :data:`HISTORY_SECONDS` or four node horizons, whichever is longer, but at most
  :data:`MAX_HISTORY_SECONDS` and the newest :data:`MAX_HISTORY_SAMPLES` decisions. Without the
  cap a measured cold start of hours (a wait for capacity counted in it, or a readiness flip
  taken for a start) kept four times that in history, and every call walked it: 18 ms per call at
  a 3 h cold start, 150 ms at 10 h. The cap keeps the estimate honest because it cuts from the old
  end only: every decision within the span kept stays, so each window's maximum is still the true
  maximum of the decisions in it (thinning the samples instead would drop the peaks the windows
  look for and bias the quantile low, a pool too small with no sign of it). Node horizons up to a
  quarter of the cap (30 min: every pod plus node cold start of minutes) keep their four horizons,
  so their quantile is the same as uncapped; a longer horizon is sized from the increases seen
  within the last 2 h, its late windows truncated as a young history's are: a figure the history
  showed, lower than a longer history might give, and said in the reason (``history N samples
  over S s``).

  While the demand is unknown (metrics missing: the autoscaler holds its count; or a decision with
  gaps, whose figures may read low: it may grow, not shrink) the history is held as it was, its
  samples not aging (:func:`held`), so an outage does not empty the pool, and the active headroom
  is counted above the last demand known, never more than the last decision that knew it counted:
  the pool is sized as that decision sized it, beside a fleet as large or larger. A demand
  not measured by design (``scaling.mode`` Manual, or every signal the autoscaler could use turned
  off by the spec: nothing is read, so nothing is missing) lets it age out.

  The history lives in the operator's memory only. An operator that takes over a pool (a new
  leader, a restart, an upgrade: :func:`take_over`) finds the warm pods and placeholders its
  predecessor wanted (``status.warmPool``); sized from an empty history, the pool would drop to
  ``minPods`` and the next burst would pay the cold starts it was kept for. The predecessor's
  history showed at least those increases (the warm pods within the pod horizon, warm pods plus
  placeholders within the node horizon: the active headroom it counted only lowered them), so they
  count as the increases until the new history is as long as the one lost, and the usual rules
  (headroom now, bounds) apply to them. The predecessor's bursts leave its history within that
  time too, so after one takeover the pool is never released sooner than it would have been; at
  most it is kept that much longer.

  A pool found is not found again: while the hold raises the pool above what the new history alone
  wants, its start goes to the status (``status.warmPool.heldSince``, :attr:`WarmPoolDecision.held_since`),
  and the next takeover holds what it finds only until the same end. Otherwise takeovers less than
  an hour apart (a crash-looping or often rescheduled operator, rolling upgrades) would renew the
  hold for good and the pool would never fall to what the demand needs. So whatever the takeovers,
  a pool is held at most one history length after the first takeover that held it; the price is
  that increases an operator saw while it held a pool count only until that hold ends.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from operator import itemgetter

import numpy as np

from neuronfleet.api.v1alpha1 import ScalingSpec, WarmPoolSpec
from neuronfleet.planning.times import rfc3339

#: Shortest demand history kept.
HISTORY_SECONDS = 3600.0
#: Longest demand history kept, however long the node horizon (see the module docstring): four
#: horizons of 30 minutes.
MAX_HISTORY_SECONDS = 7200.0
#: Most decisions kept (the newest): MAX_HISTORY_SECONDS at one decision every 5 s (the default
#: interval is 15 s); a shorter interval keeps a shorter span (24 minutes at 1 s).
MAX_HISTORY_SAMPLES = 1440
#: A history sample's time (samples are (time, demand)).
_TIME = itemgetter(0)


@dataclass(frozen=True)
class ColdStart:
    """Cold-start durations to size for, in seconds (e.g. measured p90); None = not measured yet."""

    pod_seconds: float | None = None
    node_seconds: float | None = None


@dataclass(frozen=True)
class FoundPool:
    """The standby an operator found when it took over the pool (see the module docstring)."""

    since: float
    pods: int
    placeholders: int


@dataclass(frozen=True)
class WarmPoolState:
    """The demand history: (time, active replicas recommended) pairs, oldest first; and the pool
    found at a takeover, held while the history is younger than the one lost."""

    history: tuple[tuple[float, int], ...] = ()
    found: FoundPool | None = None
    #: The time of the last decision the history took (None: none yet): a decision without a
    #: demand moves the history forward by the time since (:func:`held`).
    decided_at: float | None = None
    #: The demand and the active replicas of the last decision that knew the demand (None: none
    #: since the start or the takeover): a decision without one counts the headroom above that
    #: demand, as that decision did (see :func:`plan`).
    last_known: tuple[int, int] | None = None


def take_over(now: float, pods: int | None, placeholders: int | None, held_since: float | None = None) -> WarmPoolState:
    """The state of an operator that takes over at ``now`` a pool its predecessor sized at ``pods``
    warm pods and ``placeholders`` node placeholders (None: not known, taken as none).

    ``held_since``: the predecessor itself held a pool found since then (its
    :attr:`WarmPoolDecision.held_since`); the hold goes on from there instead of starting again at
    ``now`` (a time ahead of ``now``, from a skewed clock, counts as ``now``). None: it sized the
    pool from its own history, or the status predates the field."""
    pods, placeholders = max(0, pods or 0), max(0, placeholders or 0)
    since = now if held_since is None else min(now, held_since)
    return WarmPoolState(found=FoundPool(since, pods, placeholders) if pods or placeholders else None)


@dataclass(frozen=True)
class WarmPoolDecision:
    """Warm pods and node placeholders wanted, why, and the state for the next call."""

    pods: int
    node_placeholders: int
    reason: str
    new_state: WarmPoolState
    #: When the hold of a pool found began, while that hold raises ``pods`` or
    #: ``node_placeholders`` above what the history alone wants; None otherwise. Written to the
    #: status so that the next takeover ends the hold at the same time (see the module docstring).
    held_since: float | None = None


def demand_increase_quantile(history: tuple[tuple[float, int], ...], horizon_seconds: float, coverage: float) -> float:
    """The ``coverage`` quantile of the demand increase within ``horizon_seconds`` (0 if unknown)."""
    return demand_increase_quantiles(history, (horizon_seconds,), coverage)[0]


def demand_increase_quantiles(
    history: tuple[tuple[float, int], ...], horizons_seconds: Sequence[float], coverage: float
) -> tuple[float, ...]:
    """:func:`demand_increase_quantile` for each of ``horizons_seconds``, the history read once
    (a decision asks for the pod and the node horizon: the simulator makes one every 15 s)."""
    n = len(history)
    if n < 2:
        return tuple(0.0 for _ in horizons_seconds)
    times = np.fromiter((t for t, _ in history), dtype=float, count=n)
    demand = np.fromiter((d for _, d in history), dtype=float, count=n)
    # Each window's maximum from a sparse table (levels[k][j] = max of demand[j : j + 2**k]): two
    # overlapping power-of-two blocks cover any window, so every maximum is exact in O(n log n).
    levels = [demand]
    while 2 ** len(levels) <= n:
        below, step = levels[-1], 2 ** (len(levels) - 1)
        levels.append(np.maximum(below[:-step], below[step:]))
    table = np.full((len(levels), n), -np.inf)
    for row, level in enumerate(levels):
        table[row, : len(level)] = level
    first = np.arange(1, n)
    # numpy's "inverted_cdf" quantile is this order statistic; a partial sort finds it sooner.
    rank = max(0, math.ceil((n - 1) * coverage) - 1)
    found = []
    for horizon in horizons_seconds:
        if horizon <= 0:
            found.append(0.0)
            continue
        # The window of the start i is the samples [i + 1, end_i). A window always reaches the next
        # sample, even when the horizon is shorter than a tick: the demand between two samples is
        # unknown, and the next one bounds its growth from above, where scaling it down by the
        # horizon's share of the tick could leave a burst without warm pods.
        end = np.maximum(np.searchsorted(times, times[:-1] + horizon, side="right"), first + 1)
        block = np.floor(np.log2(end - first)).astype(int)
        peaks = np.maximum(table[block, first], table[block, end - 2**block])
        increases = np.maximum(peaks - demand[:-1], 0.0)
        found.append(float(np.partition(increases, rank)[rank]))
    return tuple(found)


def shifted(state: WarmPoolState, seconds: float) -> WarmPoolState:
    """``state`` with its times moved by ``seconds``: the autoscaler's decision moved its own by as
    much after the wall clock stepped back (:attr:`~neuronfleet.planning.scaling.ScalingDecision.clock_shift`).
    Left in the future, the demand history was no longer oldest first (``searchsorted`` ran on an
    unsorted array) and its windows missed the growth after the step: 9 warm pods where the same
    history moved back wanted 5 (``tests/unit/test_warmpool.py``)."""
    if not seconds:
        return state
    found, decided_at = state.found, state.decided_at
    return replace(
        state,
        history=tuple((t + seconds, d) for t, d in state.history),
        found=None if found is None else replace(found, since=found.since + seconds),
        decided_at=None if decided_at is None else decided_at + seconds,
    )


def held(state: WarmPoolState, now: float) -> WarmPoolState:
    """``state`` at a decision at ``now`` that knows no demand (metrics missing): its history moved
    forward by the time since the last decision, so that its samples keep the age they had when the
    demand went missing (the history's clock stops until the demand is known again).

    Aged as usual, an outage as long as the history (an hour) emptied an Auto pool while the
    autoscaler held the active fleet, and it stayed empty after metrics returned until a new
    history showed the bursts again: those bursts paid the cold starts the pool is kept for.
    Recording the last demand known at each such decision instead (as the autoscaler holds its
    count) would empty it all the same, only later: flat samples show no growth, and an outage as
    long as the history leaves nothing else; a shorter one still adds windows of no growth that pull
    the quantile down. Held still, the history sizes the pool as it did before the outage, and after
    it as if the outage had not happened: the demand before and after it sit one decision apart.

    The pool found at a takeover (``found``) is not moved: its hold ends on the wall clock, so that
    whatever happens a pool is held at most one history length after the first takeover that held it
    (see the module docstring)."""
    if state.decided_at is None or now <= state.decided_at:
        return state
    gap = now - state.decided_at
    return replace(state, history=tuple((t + gap, d) for t, d in state.history), decided_at=now)


def record(
    state: WarmPoolState, now: float, demand: int | None, keep_seconds: float, max_samples: int = MAX_HISTORY_SAMPLES
) -> WarmPoolState:
    """The state with ``demand`` at ``now`` appended, and samples older than ``keep_seconds`` or
    beyond the newest ``max_samples`` dropped; so are samples after ``now`` (a wall clock stepped back
    by less than a decision moves the history, :func:`shifted`, or between decisions): the history
    stays oldest first, as the quantile's ``searchsorted`` needs."""
    cutoff = now - keep_seconds
    # Oldest first (as every change here keeps it), the samples kept are one slice: found by bisection,
    # not by a pass over the history's hour at every decision.
    history = state.history
    history = history[bisect_left(history, cutoff, key=_TIME) : bisect_right(history, now, key=_TIME)]
    if demand is not None:
        history = (*history, (now, demand))
    return replace(state, history=history[-max_samples:])


def bounded(
    spec: WarmPoolSpec, pod_increase: int, node_increase: int, active: int | None = None, max_active: int | None = None
) -> tuple[int, int]:
    """Auto mode's warm pods and node placeholders for the increases to cover within the pod and the
    node horizon (the active headroom already taken off), within the spec's bounds: ``minPods`` to
    ``maxPods`` warm pods, placeholders for the rest of the node increase up to
    ``maxNodePlaceholders``, and together no more than ``max_active - active`` (what could ever be
    promoted; ``minPods`` still holds: warm pods also replace failed active ones)."""
    pods = max(spec.min_pods, min(spec.max_pods, pod_increase))
    placeholders = max(0, min(spec.max_node_placeholders, node_increase - pods))
    if max_active is not None and active is not None:
        room = max(0, max_active - active)
        pods = max(spec.min_pods, min(pods, room))
        # minPods may take more than the room: no room is then left for placeholders (never a
        # negative count).
        placeholders = max(0, min(placeholders, room - pods))
    return pods, placeholders


def parked(scaling: ScalingSpec, active: int) -> bool:
    """Whether a fleet of ``active`` replicas under ``scaling`` is a parked model: Manual mode with 0
    replicas (``replicas: 0``, ``kubectl scale --replicas 0``, or none set with ``minReplicas`` 0). An
    Auto pool keeps nothing beside it (see the module docstring); the operator and the simulator ask
    here, so they agree."""
    return scaling.mode == "Manual" and active == 0


#: The start of ``status.warmPool.reason`` beside a parked model.
PARKED_REASON = "parked: Manual replicas 0"


def standby_range(spec: WarmPoolSpec, active: int, max_active: int, *, parked: bool = False) -> tuple[int, int]:
    """The fewest and the most standby pods (warm pods plus node placeholders) :func:`plan` can want
    beside ``active`` replicas with ``max_active`` (``maxReplicas``), whatever the demand history:
    Off none, Fixed its figures, Auto :func:`bounded` of no increase and of one past every bound, and
    none beside a ``parked`` model (:func:`parked`)."""
    if spec.mode == "Off" or (spec.mode == "Auto" and parked):
        return 0, 0
    if spec.mode == "Fixed":
        return spec.pods + spec.node_placeholders, spec.pods + spec.node_placeholders
    least = bounded(spec, 0, 0, active, max_active)
    # The bounds stop both counts; a larger increase wants no more (each count only grows with it).
    most = bounded(spec, spec.max_pods, spec.max_pods + spec.max_node_placeholders, active, max_active)
    return sum(least), sum(most)


def plan(
    spec: WarmPoolSpec,
    state: WarmPoolState,
    demand: int | None,
    now: float,
    cold_start: ColdStart | None = None,
    active: int | None = None,
    max_active: int | None = None,
    *,
    sample: bool = True,
    unmeasured: str | None = None,
    parked: bool = False,
) -> WarmPoolDecision:
    """Warm pods and node placeholders for ``spec``; ``demand`` is this tick's demand in replicas.

    ``demand`` None (metrics missing) records nothing, and the history is held as it was
    (:func:`held`): the pool is sized from it as before the demand went missing, until it is known
    again, and the headroom of ``active`` is counted above the last demand known
    (:attr:`WarmPoolState.last_known`; none if no decision since the takeover knew it).
    ``unmeasured`` says why no demand is measured by design (``scaling.mode`` Manual, or every
    signal turned off: :func:`~neuronfleet.planning.scaling.unmeasured`), None when it is measured: a
    demand None is then no outage, the history ages out as usual (the pool falls to ``minPods``),
    and the reason says why.
    ``active``, the active replicas wanted now, lets Auto mode count the headroom the active fleet
    already holds above ``demand`` (scale-down stabilization keeps recent peaks) against the growth
    to cover, so the same growth is not paid for twice. ``max_active`` (the scaling spec's
    ``maxReplicas``) caps the standby at what could ever be promoted: ``max_active - active``.
    ``parked`` (:func:`parked`): an Auto pool wants nothing; its history is kept as Manual mode
    keeps it (nothing measured, it ages out), for when the model is served again.

    ``sample``: whether this call is a scaling decision's, which records ``demand``. The history
    holds one sample per decision (its cap, :data:`MAX_HISTORY_SAMPLES`, counts decisions). The
    operator reconciles on every pod event and its daemon's tick, most often between two decisions;
    those rounds re-serve the decision and pass False: the pool is sized from the state as the last
    decision left it, and that state is returned unchanged (nothing recorded, dropped or expired
    until the next decision), so the operator's history is the simulator's, which plans once per
    decision. Sampled at every reconcile, a scale-up's pod events filled the history with the new
    level right after the step and pulled the quantile down: 0 warm pods for a step the same hour
    sampled per decision covers with 20 (``tests/unit/test_warmpool_history.py``).
    """
    cold_start = cold_start or ColdStart()
    pod_seconds = cold_start.pod_seconds or spec.assumed_pod_cold_start_seconds
    node_seconds = cold_start.node_seconds or spec.assumed_node_cold_start_seconds
    pod_horizon = max(0.0, pod_seconds - spec.cold_start_target_seconds)
    node_horizon = max(0.0, pod_seconds + node_seconds - spec.cold_start_target_seconds)
    keep_seconds = min(max(HISTORY_SECONDS, 4 * node_horizon), MAX_HISTORY_SECONDS)
    kept = state
    unknown = demand is None and unmeasured is None
    if sample:
        if unknown:
            state = held(state, now)
        state = replace(record(state, now, demand, keep_seconds), decided_at=now)
        if demand is not None and active is not None:
            state = replace(state, last_known=(demand, active))
        elif unmeasured is not None:
            state = replace(state, last_known=None)  # (a demand from before Manual mode says nothing now)
    if state.found is not None and now - state.found.since >= keep_seconds:
        state = replace(state, found=None)  # the history is as long as the one lost

    if spec.mode != "Auto":
        # The pool found is Auto's: a pool of another mode says nothing of the demand's growth.
        state = replace(state, found=None)
    # Between decisions the state is only looked at (see above).
    new_state = state if sample else kept
    if spec.mode == "Off":
        return WarmPoolDecision(0, 0, "warm pool off", new_state)
    if spec.mode == "Fixed":
        return WarmPoolDecision(
            spec.pods,
            spec.node_placeholders,
            f"fixed: {spec.pods} warm pods, {spec.node_placeholders} node placeholders",
            new_state,
        )

    if parked:
        return WarmPoolDecision(
            0,
            0,
            f"{PARKED_REASON}: an Auto pool keeps no warm pods or placeholders beside no replica "
            "(use warmPool.mode Fixed to keep some)",
            new_state,
        )

    headroom, basis = 0, ""
    if active is not None and demand is not None:
        headroom = max(0, active - demand)
    elif active is not None and unknown and state.last_known is not None:
        # The demand unknown (an outage, or a decision with gaps: the figures read low), the headroom
        # is counted above the last demand known, as the last decision that knew it counted it. None
        # counted, one late scrape beside a fleet held above the demand (scale-down delay) asked the
        # warm pods that headroom covered, deleted at the next decision. The replicas added since
        # are no headroom (the fleet grew on the signals read: the demand grew unseen), so it is
        # never more than then, and less if the fleet is smaller: a gap never shrinks the pool but
        # through the maxReplicas cap (bounded), as a known demand would not.
        known, known_active = state.last_known
        headroom = max(0, min(active, known_active) - known)
        basis = f" (above the last demand known, {known})"

    def size(pod_increase: float, node_increase: float) -> tuple[int, int]:
        return bounded(
            spec, math.ceil(pod_increase) - headroom, math.ceil(node_increase) - headroom, active, max_active
        )

    pod_increase, node_increase = demand_increase_quantiles(state.history, (pod_horizon, node_horizon), spec.coverage)
    pods, placeholders = size(pod_increase, node_increase)
    found, held_since = state.found, None
    if found is not None:
        pod_increase = max(pod_increase, float(found.pods))
        node_increase = max(node_increase, float(found.pods + found.placeholders))
        history_alone = (pods, placeholders)
        pods, placeholders = size(pod_increase, node_increase)
        if (pods, placeholders) != history_alone:
            held_since = found.since
    span = state.history[-1][0] - state.history[0][0] if state.history else 0.0
    reason = (
        f"p{spec.coverage * 100:g} demand increase {pod_increase:g} within {pod_horizon:.0f}s "
        f"(pod cold start {pod_seconds:.0f}s - target {spec.cold_start_target_seconds:.0f}s) -> {pods} warm; "
        f"{node_increase:g} within {node_horizon:.0f}s (+node {node_seconds:.0f}s) -> {placeholders} "
        f"placeholders; active headroom {headroom}{basis}; history {len(state.history)} samples over {span:.0f}s"
    )
    if found is not None:
        # When the hold ends, not how long it has left: a countdown changed the reason at every
        # reconcile (the daemon's tick, each pod event), and each wrote the status for the hour.
        ends = rfc3339(datetime.fromtimestamp(math.ceil(found.since + keep_seconds), UTC))
        reason += (
            f"; at least the increases of the {found.pods} warm pods and {found.placeholders} placeholders "
            f"found at the takeover, held until {ends} ({keep_seconds:.0f}s from the first takeover that "
            "held them)"
        )
    if unknown:
        reason += "; demand unknown (metrics missing): the history is held as it was (its samples do not age)"
    elif unmeasured is not None:
        # Allowed (an SRE pinning the replicas in an incident need not retune the pool), but said.
        keeps = (
            "the pool found at the takeover is kept while held (above), then only minPods"
            if found is not None
            else "only minPods are kept"
        )
        reason += f"; Auto sizing needs the demand that {unmeasured}: {keeps} (use warmPool.mode Fixed)"
    return WarmPoolDecision(pods, placeholders, reason, new_state, held_since)
