"""How long the autoscaler holds replicas before releasing them, learned from the deployment's past (pure).

A released replica on Inf2 comes back a cold start (minutes) later, so the autoscaler keeps the
highest recommendation of a scale-down window. How long that window should be depends on the
traffic: web traffic that dips and rebounds within minutes needs a long hold, a demand that
declines steadily (the end of a busy period) wastes every replica-second the hold keeps. No one
window suits both, and an SRE cannot know ahead which one a deployment's traffic is.

So the window is chosen from the deployment's own history. Each minute, :func:`record` keeps the
highest recommendation (what the autoscaler asked for, headroom included) and the highest need (the
replicas the arrival rate needs at the measured service rate, without the target utilization's
headroom). :func:`choose` replays that history for each candidate window: the capacity the fleet
would have asked for is the highest recommendation within the window, and what serves is the lowest
of that over the last cold start (a replica released and asked for again is back only a cold start
later). The shortest candidate whose replay kept the serving capacity at or above the need for
:data:`COVERAGE` of the need is the window; until the history is long enough to replay a candidate
over :data:`MIN_REPLAYED_SECONDS` beyond it, the longest (the spec's ``scaleDownDelaySeconds``) is
used. The replay is the look-back rule that ``bench/bench_causal_bound.py`` tunes in hindsight,
run causally on the past only.

The history outlives the operator's process: :func:`pack` and :func:`unpack` turn its series into
the short strings the status keeps (``status.autoscaler``), and :func:`resume` bridges the minutes
the operator was down, so that a restart does not leave the replay with minutes of history to
trust (a restarted operator that learned its hold from the last half hour released on a calm
morning what the afternoon's bursts needed: ``bench/bench_restart.py``).
"""

from __future__ import annotations

import array
import base64
import binascii
import functools
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Minutes are the history's unit: decisions come every 15 s or so, and a cold start is minutes.
BUCKET_SECONDS = 60
#: How much history the replay sees: a day, so that a daily cycle's every hour is in it.
HISTORY_SECONDS = 24 * 3600
#: Candidate windows, shortest first; those at or above the spec's longest are not tried, and the
#: longest is the fallback.
CANDIDATE_SECONDS = (300, 600, 900, 1200)
#: Share of the recorded need the replayed serving capacity must have covered.
COVERAGE = 0.999
#: A candidate is replayed only over history this long beyond its window and a cold start.
MIN_REPLAYED_SECONDS = 600
#: The window is re-chosen this often (the replay of a day costs about a millisecond).
REFRESH_SECONDS = 300
#: A history that ends at most this long before a restart, or before a decision after a gap, is
#: continued, the missing minutes taken as its last one (a restart, a leader change, an upgrade, the
#: arrival rate missing for a while); an older one starts afresh.
RESUME_GAP_SECONDS = 1800
#: :func:`pack` stores each minute's value in two bytes.
MAX_PACKED_VALUE = 0xFFFF


@dataclass(frozen=True)
class History:
    """Per minute since ``first_minute`` (contiguous), the highest recommendation and need.

    Two tuples of ints rather than a tuple per minute: a day of history is then 22.6 KiB per
    deployment (``bench/bench_planning.py``), not ~150 KB.
    """

    first_minute: int = 0
    recommendations: tuple[int, ...] = ()
    needs: tuple[int, ...] = ()

    @functools.cached_property
    def packed(self) -> tuple[str, str]:
        """The recommendations and needs as :func:`pack` strings, packed once per history (the
        status shows them at every reconcile; a day takes ~0.3 ms to pack)."""
        return pack(self.recommendations), pack(self.needs)


def record(history: History, now: float, recommendation: int, need: int) -> History:
    """The history with this decision's recommendation and need folded into its minute.

    Minutes without a recorded decision (the arrival rate missing for a while, a Prometheus restart,
    decisions more than a minute apart) are bridged as :func:`resume` bridges a restart's: taken as
    the last minute recorded, for up to :data:`RESUME_GAP_SECONDS`. A longer gap starts the history
    afresh: a replay across it would treat it as minutes without demand. (Live gaps of even two
    minutes once started it afresh, and the day of history the Learned delay replays was then
    minutes long for the next hours. Decisions come at the first reconcile at least
    ``intervalSeconds`` after the last, so at 60 or 120 s they land up to ~70 s or ~130 s apart and
    skip a clock minute now and then: bridged only up to the interval, such a skip reset the history
    some 75 times a day. The longest interval the API allows, 600 s, skips at most 11 minutes.)
    """
    minute = int(now // BUCKET_SECONDS)
    last = history.first_minute + len(history.needs) - 1
    if history.needs and minute > last + 1:
        history = resume(history, now)
        last = minute - 1
    if not history.needs or minute > last + 1 or minute < history.first_minute:
        return History(minute, (recommendation,), (need,))
    if minute <= last:
        # Decisions within one minute (or a clock step back within it): fold into that minute.
        i = minute - history.first_minute
        if history.recommendations[i] >= recommendation and history.needs[i] >= need:
            return history
        recs, needs = list(history.recommendations), list(history.needs)
        recs[i], needs[i] = max(recs[i], recommendation), max(needs[i], need)
        return History(history.first_minute, tuple(recs), tuple(needs))
    drop = max(0, len(history.needs) + 1 - HISTORY_SECONDS // BUCKET_SECONDS)
    return History(
        history.first_minute + drop,
        (*history.recommendations[drop:], recommendation),
        (*history.needs[drop:], need),
    )


def _sliding(values: np.ndarray, width: int, highest: bool) -> np.ndarray:
    """``out[i]`` = the max (or min) of ``values[i - width .. i]`` (from the start while ``i <
    width``).

    One vector pass per value a window holds (a window is tens of values over a day's 1,440): a
    plain loop was a third of a simulated run of ours, and numpy's windowed view reduced along its
    short strided axis at ~36 µs a call, most of a Learned delay's refresh. Padding the front with
    the first value changes no window: that value is already in every window it reaches.
    """
    if not len(values):
        return values
    padded = np.concatenate((np.full(width, values[0]), values))
    result = values.copy()
    combine = np.maximum if highest else np.minimum
    for start in range(width):
        combine(result, padded[start : start + len(values)], out=result)
    return result


def covered(history: History, window_seconds: float, cold_start_seconds: float) -> float | None:
    """Share of the need a hold of ``window_seconds`` would have served in time over ``history``;
    None when the history is too short to replay it."""
    return _covered(_arrays(history), window_seconds, cold_start_seconds)


def _arrays(history: History) -> tuple[np.ndarray, np.ndarray]:
    """The history's recommendations and needs as arrays (made once per :func:`choose`: a day's
    tuples take ~20 µs each to convert). Not kept on the history, which the operator holds per
    deployment and whose size ``bench/bench_planning.py`` measures."""
    return np.asarray(history.recommendations, dtype=np.int64), np.asarray(history.needs, dtype=np.int64)


def _covered(arrays: tuple[np.ndarray, np.ndarray], window_seconds: float, cold_start_seconds: float) -> float | None:
    """:func:`covered` over the history's :func:`_arrays`."""
    recommendations, all_needs = arrays
    window = math.ceil(window_seconds / BUCKET_SECONDS)
    lag = math.ceil(cold_start_seconds / BUCKET_SECONDS)
    skip = window + lag
    if len(all_needs) - skip < MIN_REPLAYED_SECONDS / BUCKET_SECONDS:
        return None
    asked = _sliding(recommendations, window, highest=True)
    serving = _sliding(asked, lag, highest=False)
    needs = all_needs[skip:]
    total = int(needs.sum())
    if total <= 0:
        return 1.0
    return int(np.minimum(serving[skip:], needs).sum()) / total


def choose(history: History, longest: float, cold_start_seconds: float) -> float:
    """The shortest candidate window (below ``longest``) that the history says is enough, else
    ``longest``."""
    arrays = _arrays(history)
    for candidate in CANDIDATE_SECONDS:
        if candidate >= longest:
            break
        share = _covered(arrays, candidate, cold_start_seconds)
        if share is not None and share >= COVERAGE:
            return float(candidate)
    return float(longest)


def pack(values: Sequence[int]) -> str:
    """``values`` as base64 of little-endian 16-bit integers (4 characters per 3 bytes: a day of
    minutes is 3,840 characters), each clamped to 0..:data:`MAX_PACKED_VALUE`."""
    if values and (min(values) < 0 or max(values) > MAX_PACKED_VALUE):
        values = [min(max(v, 0), MAX_PACKED_VALUE) for v in values]
    packed = array.array("H", values)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def unpack(text: str) -> tuple[int, ...]:
    """The values :func:`pack` stored; ValueError when ``text`` is not such a string."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as error:
        raise ValueError(f"not base64: {error}") from error
    if len(raw) % 2:
        raise ValueError(f"{len(raw)} bytes: not whole 16-bit values")
    values = array.array("H", raw)
    if sys.byteorder != "little":
        values.byteswap()
    return tuple(values)


def resume(history: History, now: float) -> History:
    """``history`` continued up to the minute before ``now`` after the operator was down (or
    recorded nothing: :func:`record`).

    The minutes missed are taken as the last one recorded (the demand is assumed to have held
    while the operator was away); when the history ends more than :data:`RESUME_GAP_SECONDS`
    before ``now``, it starts afresh. A history that ends after ``now``'s minute (the wall clock
    stepped back before the restart) is moved back to end the minute before it, as
    :func:`~neuronfleet.planning.scaling.decide` moves its state's times back after a step: left
    there, the new decisions were folded into its future minutes and the history stopped growing.
    """
    if not history.needs:
        return History()
    minute = int(now // BUCKET_SECONDS)
    last = history.first_minute + len(history.needs) - 1
    if last > minute:
        return History(minute - len(history.needs), history.recommendations, history.needs)
    missing = minute - 1 - last
    if missing * BUCKET_SECONDS > RESUME_GAP_SECONDS:
        return History()
    if missing <= 0:
        return history
    recs = (*history.recommendations, *([history.recommendations[-1]] * missing))
    needs = (*history.needs, *([history.needs[-1]] * missing))
    drop = max(0, len(needs) - HISTORY_SECONDS // BUCKET_SECONDS)
    return History(history.first_minute + drop, recs[drop:], needs[drop:])
