"""The learned scale-down delay: the per-minute history, its replay, the choice, and decide() using it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from neuronfleet.api.v1alpha1 import ScalingSpec
from neuronfleet.planning import hold
from neuronfleet.planning.hold import History, choose, covered, record
from neuronfleet.planning.scaling import ScalingState, decide
from neuronfleet.planning.signals import MetricSnapshot

COLD_START = 480.0  # 8 one-minute buckets of lag


def history_of(recommendations: list[int], needs: list[int]) -> History:
    out = History()
    for minute, (rec, need) in enumerate(zip(recommendations, needs, strict=True)):
        out = record(out, minute * 60.0 + 7, rec, need)
    return out


def test_record_keeps_the_highest_of_each_minute_and_appends_the_next() -> None:
    h = record(History(), 60.0, 5, 4)
    h = record(h, 75.0, 9, 3)
    h = record(h, 119.0, 7, 6)
    assert (h.first_minute, h.recommendations, h.needs) == (1, (9,), (6,))
    h = record(h, 120.0, 2, 1)
    assert (h.first_minute, h.recommendations, h.needs) == (1, (9, 2), (6, 1))
    # Nothing higher in a minute: the same history, not a copy.
    assert record(h, 150.0, 1, 1) is h


def test_a_gap_without_decisions_starts_the_history_afresh() -> None:
    h = history_of([5, 6, 7], [4, 5, 6])
    later = 3 * 60.0 + hold.RESUME_GAP_SECONDS + 60.0  # 31 minutes missing
    restarted = record(h, later, 3, 2)
    assert (restarted.first_minute, restarted.recommendations, restarted.needs) == (34, (3,), (2,))


def test_a_short_live_gap_is_bridged_as_a_restart_is() -> None:
    # Two minutes without an arrival rate (a Prometheus restart, a scrape gap) once started the day
    # of history afresh: the Learned delay was then chosen from minutes for the next hours.
    day = hold.HISTORY_SECONDS // hold.BUCKET_SECONDS
    h = history_of([9] * day, [7] * day)
    after = record(h, (day + 2) * 60.0 + 7, 4, 3)  # minutes day and day + 1 missing
    assert len(after.needs) == day and after.first_minute == 3
    assert after.recommendations[-3:] == (9, 9, 4) and after.needs[-3:] == (7, 7, 3)
    assert after == record(hold.resume(h, (day + 2) * 60.0 + 7), (day + 2) * 60.0 + 7, 4, 3)
    # 30 minutes missing are bridged, 31 are not.
    edge = 3 * 60.0 + hold.RESUME_GAP_SECONDS
    assert record(history_of([5, 6, 7], [4, 5, 6]), edge, 3, 2).first_minute == 0


def test_minutes_skipped_by_a_long_decision_interval_repeat_the_held_decision() -> None:
    # intervalSeconds 120: a decision every other minute. The minute between is no gap (the last
    # decision held through it).
    h = History()
    for now, recommendation in ((0.0, 5), (120.0, 7), (240.0, 6)):
        h = record(h, now, recommendation, recommendation - 1)
    assert (h.first_minute, h.recommendations, h.needs) == (0, (5, 5, 7, 7, 6), (4, 4, 6, 6, 5))


@pytest.mark.parametrize("interval", [60, 120, 600])
def test_decisions_at_the_operators_cadence_never_restart_the_history(interval: int) -> None:
    # A decision is due at the first reconcile (every 10 s, plus its own time) at least intervalSeconds
    # after the last: at 60 s they land 60-71 s apart and now and then skip a clock minute, which
    # counted as a gap (only skips within the interval were bridged) and reset the history ~75
    # times a day, so the Learned delay replayed minutes, not the day.
    s = ScalingSpec.model_validate({"maxReplicas": 50, "panicWindowSeconds": 0, "intervalSeconds": interval})
    state, current = ScalingState(service_rate=100.0, measured_since=0.0), 10
    now, last = 0.0, -1e9
    step = 0
    while now < 6 * 3600:
        step += 1
        now += 10.05 + (step * 0.618) % 1.0  # the daemon's 10 s, the reconcile's time, some jitter
        if now - last < interval:
            continue
        snapshot = MetricSnapshot(now, queue_depth=0, in_flight=0, arrival_rate=600.0)
        decision = decide(s, state, snapshot, current, current, now)
        state, current, last = decision.new_state, decision.desired, now
        assert state.history.first_minute == 0
    assert len(state.history.needs) >= 6 * 60 - interval // 60 - 1


@pytest.mark.parametrize("interval", [120, 300])
def test_the_scale_down_delay_is_learned_at_a_long_decision_interval(interval: int) -> None:
    # Steady demand for three hours: the history (which the hold replays) must grow past a minute.
    s = ScalingSpec.model_validate({"maxReplicas": 50, "intervalSeconds": interval, "panicWindowSeconds": 0})
    state = ScalingState(service_rate=100.0)
    current = 10
    for step in range(3 * 3600 // interval):
        now = step * float(interval)
        snapshot = MetricSnapshot(time=now, queue_depth=0, in_flight=0, arrival_rate=600.0, utilization=0.6)
        decision = decide(s, state, snapshot, current, current, now)
        state, current = decision.new_state, decision.desired
    assert len(state.history.needs) >= 3 * 60 - interval // 60
    assert state.hold_seconds != s.scale_down_delay_seconds


def test_history_keeps_one_day() -> None:
    day = hold.HISTORY_SECONDS // hold.BUCKET_SECONDS
    h = history_of(list(range(day + 5)), [1] * (day + 5))
    assert len(h.needs) == day
    assert h.first_minute == 5
    assert h.recommendations[0] == 5


@pytest.mark.parametrize("width", [0, 1, 2, 5, 13, 119, 200])
def test_sliding_window_matches_brute_force(width: int) -> None:
    values = [(i * 37) % 23 for i in range(120)]
    expected_max = [max(values[max(0, i - width) : i + 1]) for i in range(len(values))]
    expected_min = [min(values[max(0, i - width) : i + 1]) for i in range(len(values))]
    array = np.asarray(values, dtype=np.int64)
    assert hold._sliding(array, width, highest=True).tolist() == expected_max
    assert hold._sliding(array, width, highest=False).tolist() == expected_min
    assert array.tolist() == values, "the values were changed in place"
    assert hold._sliding(np.asarray([], dtype=np.int64), width, highest=True).tolist() == []


def test_replay_counts_a_dip_released_and_missed_for_a_cold_start() -> None:
    # Window 0 and a cold start of one bucket: what serves is the lower of this and the last
    # minute's recommendation. The dip to 2 at minute 3 leaves minutes 3 and 4 serving 2 of 8.
    recs = [10, 10, 10, 2] + [10] * 12
    needs = [8] * 16
    h = history_of(recs, needs)
    replayed = len(needs) - 1  # skip = window 0 + lag 1
    assert replayed * 60 >= hold.MIN_REPLAYED_SECONDS
    expected = (replayed * 8 - 2 * (8 - 2)) / (replayed * 8)
    assert covered(h, 0, 60) == pytest.approx(expected)
    # Holding one minute bridges the dip.
    assert covered(h, 60, 60) == 1.0


def test_replay_needs_enough_history_beyond_window_and_cold_start() -> None:
    h = history_of([10] * 20, [8] * 20)
    assert covered(h, 300, COLD_START) is None  # 20 - (5 + 8) buckets < 10
    assert choose(h, 1800, COLD_START) == 1800
    # Exactly MIN_REPLAYED_SECONDS beyond the window and the cold start is enough; a minute less is not.
    assert covered(history_of([10] * 22, [8] * 22), 300, COLD_START) is None
    assert covered(history_of([10] * 23, [8] * 23), 300, COLD_START) == 1.0


def test_a_steady_decline_gets_the_shortest_window() -> None:
    needs = [max(1, 200 - m) for m in range(150)]
    recs = [math.ceil(n / 0.8) for n in needs]
    assert choose(history_of(recs, needs), 1800, COLD_START) == hold.CANDIDATE_SECONDS[0]


def test_a_history_without_demand_is_covered_by_any_window() -> None:
    # An idle fleet (no arrivals since the replayed span began): nothing was needed, so nothing was
    # missed; the replay must not divide by the zero it needed.
    idle = history_of([1] * 60, [5] * 10 + [0] * 50)  # the replay starts at minute 13 (window + lag)
    assert covered(idle, 300, COLD_START) == 1.0
    assert choose(idle, 1800, COLD_START) == hold.CANDIDATE_SECONDS[0]


def test_dips_that_rebound_get_a_window_longer_than_the_dips() -> None:
    # 10 busy minutes, then 8 quiet ones, repeated: a 5-minute hold releases the busy capacity in
    # the dip and the rebound finds it gone for a cold start; 10 minutes bridges the dips.
    needs = ([40] * 10 + [10] * 8) * 10
    recs = [math.ceil(n / 0.8) for n in needs]
    h = history_of(recs, needs)
    assert (covered(h, 300, COLD_START) or 0) < hold.COVERAGE
    assert choose(h, 1800, COLD_START) == 600
    # Dips longer than every candidate: the longest (the spec's delay) stays.
    long_dips = ([40] * 10 + [10] * 25) * 6
    assert choose(history_of([math.ceil(n / 0.8) for n in long_dips], long_dips), 1800, COLD_START) == 1800
    # Candidates at or above the longest are never chosen.
    assert choose(h, 500, COLD_START) == 500


def test_the_api_describes_the_constants_the_planner_uses() -> None:
    description = ScalingSpec.model_fields["scale_down_delay_mode"].description or ""
    minutes = [str(c // 60) for c in hold.CANDIDATE_SECONDS]
    assert f"{', '.join(minutes[:-1])} and {minutes[-1]} minutes" in description
    assert f"{hold.COVERAGE * 100:g} %" in description
    assert f"every {hold.REFRESH_SECONDS / 60:g} minutes" in description
    assert "last day" in description and hold.HISTORY_SECONDS == 86400


def test_the_learned_window_is_chosen_again_five_minutes_after_the_last_choice() -> None:
    # The API promises a choice every 5 minutes: one held since 12:00 is kept until 12:05 and
    # chosen again from the day's history then (a steady decline: the shortest window).
    s = ScalingSpec.model_validate({"maxReplicas": 200, "panicWindowSeconds": 0, "scaleDownDelayMode": "Learned"})
    needs = [max(1, 200 - m) for m in range(150)]
    history = history_of([math.ceil(n / 0.8) for n in needs], needs)
    chosen_at = 150 * 60.0
    state = ScalingState(service_rate=100.0, history=history, hold_seconds=1200.0, hold_chosen_at=chosen_at)

    def after(seconds: float) -> ScalingState:
        now = chosen_at + seconds
        snapshot = MetricSnapshot(time=now, queue_depth=0, in_flight=0, arrival_rate=5000.0, utilization=0.6)
        return decide(s, state, snapshot, 80, 80, now).new_state

    kept = after(299.0)
    assert (kept.hold_seconds, kept.hold_chosen_at) == (1200.0, chosen_at)
    again = after(300.0)
    assert (again.hold_seconds, again.hold_chosen_at) == (hold.CANDIDATE_SECONDS[0], chosen_at + 300.0)


def _declining_run(mode: str) -> tuple[list[int], ScalingState]:
    """Two hours of a demand declining steadily, with the service rate known (100/s a replica)."""
    s = ScalingSpec.model_validate({"maxReplicas": 200, "panicWindowSeconds": 0, "scaleDownDelayMode": mode})
    state = ScalingState(service_rate=100.0)
    current = 80
    desired = []
    for step in range(0, 7200 // 15):
        now = step * 15.0
        rate = 6000.0 - 0.7 * now  # replicas needed: 60 falling to about 18
        snapshot = MetricSnapshot(
            time=now, queue_depth=0, in_flight=0, arrival_rate=rate, utilization=rate / (100.0 * current)
        )
        decision = decide(s, state, snapshot, current, current, now)
        state, current = decision.new_state, decision.desired
        desired.append(current)
    return desired, state


def test_decide_follows_a_steady_decline_sooner_when_learned() -> None:
    learned, learned_state = _declining_run("Learned")
    fixed, fixed_state = _declining_run("Fixed")
    assert learned_state.hold_seconds == hold.CANDIDATE_SECONDS[0]
    assert fixed_state.hold_seconds == ScalingSpec().scale_down_delay_seconds
    # Both start from the same fleet; in the last hour the learned window releases sooner.
    assert learned[0] == fixed[0]
    assert sum(learned[240:]) < sum(fixed[240:])
    # What it keeps still covers the demand at the target utilization, held 5 minutes.
    for step in range(240, len(learned)):
        needed = math.ceil((6000.0 - 0.7 * step * 15) / (100 * 0.8))
        assert learned[step] >= needed


def test_decisions_without_an_arrival_rate_for_two_minutes_keep_the_history() -> None:
    s = ScalingSpec.model_validate({"maxReplicas": 50, "panicWindowSeconds": 0})
    state, current = ScalingState(service_rate=100.0, measured_since=0.0), 10
    for step in range(2 * 60 * 4 + 8 * 4 + 1):  # two hours, 8 minutes without the rate, then one
        now = step * 15.0
        gap = 7200 <= now < 7200 + 8 * 60
        snapshot = MetricSnapshot(now, queue_depth=0, in_flight=0, arrival_rate=None if gap else 600.0)
        decision = decide(s, state, snapshot, current, current, now)
        state, current = decision.new_state, decision.desired
    assert state.history.first_minute == 0 and len(state.history.needs) == 129


def test_resume_moves_a_history_that_ends_after_now_back_before_it() -> None:
    # A wall clock stepped back before a restart: kept where it was, the history's minutes lay after
    # now and the new decisions were folded into them (see test_scaling's restart test).
    h = History(1000, (5, 6, 7), (4, 5, 6))
    assert hold.resume(h, 990 * 60.0 + 30) == History(987, (5, 6, 7), (4, 5, 6))
    assert hold.resume(h, 1002 * 60.0 + 30) == h  # ends in now's minute: as it is
