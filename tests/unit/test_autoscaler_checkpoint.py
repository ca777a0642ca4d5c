"""The autoscaler's checkpoint: kept while it learns, written to the status, resumed after a restart."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from neuronfleet.api.v1alpha1 import (
    MAX_STATUS_SCALE_EVENTS,
    MAX_STATUS_TREND_READINGS,
    MAX_STATUS_TREND_REPLICAS,
    InferenceDeployment,
    ScaleUpRules,
    ScalingPolicy,
    ScalingSpec,
)
from neuronfleet.planning import hold
from neuronfleet.planning.compile import CompileObservation, StoredArtifact, compile_request
from neuronfleet.planning.fleet import FleetPolicy, PodView, apply_actions
from neuronfleet.planning.hold import History
from neuronfleet.planning.observation import DeploymentMemory, Observation, StatusMemory
from neuronfleet.planning.reconcile_plan import ReconcilePlan, plan_reconcile
from neuronfleet.planning.scaling import (
    CHECKPOINT_SECONDS,
    MAX_SIGNAL_REPLICAS,
    Checkpoint,
    ScalingState,
    _kept,
    _line,
    _per_minute,
    decide,
    resume,
    scale_up_limit,
    take_over,
)
from neuronfleet.planning.signals import MetricSnapshot
from neuronfleet.planning.status import autoscaler_status, checkpoint_from_status
from neuronfleet.sim.policies import DEFAULT_OURS, ours_from_policy_file

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def spec(**overrides: Any) -> ScalingSpec:
    base: dict[str, Any] = {"minReplicas": 1, "maxReplicas": 100, "panicWindowSeconds": 0}
    base.update(overrides)
    return ScalingSpec.model_validate(base)


def load(now: float, rate: float, utilization: float) -> MetricSnapshot:
    return MetricSnapshot(time=now, queue_depth=0, in_flight=4, arrival_rate=rate, utilization=utilization)


def run(s: ScalingSpec, state: ScalingState, start: float, stop: float, rate: float, current: int) -> ScalingState:
    """Decisions every 15 s from ``start`` to ``stop`` at a steady ``rate`` on ``current`` replicas
    that serve 100/s each."""
    now = start
    while now < stop:
        state = decide(s, state, load(now, rate, rate / (100 * current)), current, current, now).new_state
        now += 15
    return state


# ------------------------------------------------------------------------------- history as text


def test_pack_round_trips_and_clamps_to_sixteen_bits() -> None:
    values = (0, 1, 7, 300, 65535)
    assert hold.unpack(hold.pack(values)) == values
    assert hold.unpack(hold.pack([-3, 70000])) == (0, hold.MAX_PACKED_VALUE)
    assert hold.unpack(hold.pack([])) == ()
    # A day of minutes is a few kilobytes of one line, not a list of 1,440 numbers.
    assert len(hold.pack([5] * 1440)) == 3840


@pytest.mark.parametrize("text", ["not base64!", "AAE", "AA==", "é"])
def test_unpack_refuses_what_pack_cannot_have_written(text: str) -> None:
    with pytest.raises(ValueError, match=r"not base64|16-bit"):
        hold.unpack(text)


# ------------------------------------------------------------------------------------- resume


def minutes(first: int, recs: list[int], needs: list[int]) -> History:
    return History(first, tuple(recs), tuple(needs))


def test_resume_takes_the_missed_minutes_as_the_last_one() -> None:
    history = minutes(100, [5, 9], [4, 7])  # minutes 100 and 101
    resumed = hold.resume(history, 105 * 60 + 30)  # restarted in minute 105: 102-104 were missed
    assert resumed == minutes(100, [5, 9, 9, 9, 9], [4, 7, 7, 7, 7])
    # The next decision then records minute 105 onto it, not afresh.
    assert hold.record(resumed, 105 * 60 + 45, 3, 2).first_minute == 100


def test_resume_keeps_a_history_that_reaches_now_and_drops_one_too_old() -> None:
    history = minutes(100, [5, 9], [4, 7])
    assert hold.resume(history, 102 * 60) is history
    assert hold.resume(history, 101 * 60 + 10) is history
    too_late = (101 + 1 + hold.RESUME_GAP_SECONDS // 60 + 1) * 60
    assert hold.resume(history, too_late) == History()
    # A clock before the history's end (stepped back): moved back to end the minute before now.
    assert hold.resume(history, 99 * 60) == minutes(97, [5, 9], [4, 7])
    assert hold.resume(History(), 1e6) == History()


def test_resume_keeps_one_day() -> None:
    day = hold.HISTORY_SECONDS // hold.BUCKET_SECONDS
    history = minutes(0, [1] * day, [1] * day)
    resumed = hold.resume(history, (day + 3) * 60)
    assert len(resumed.needs) == day and resumed.first_minute == 3


# ---------------------------------------------------------------------------------- checkpoint


def test_the_checkpoint_is_taken_once_the_service_rate_is_known_and_renewed_every_five_minutes() -> None:
    s = spec()
    state = run(s, ScalingState(), 0, 30, 640, 8)
    assert state.service_rate is None and state.checkpoint is None
    state = run(s, state, 30, 45, 640, 8)
    assert state.service_rate == pytest.approx(100)
    first = state.checkpoint
    assert first is not None and first.time == 30 and first.service_rate == pytest.approx(100)
    state = run(s, state, 45, 30 + CHECKPOINT_SECONDS, 640, 8)
    # Unchanged in between: no status write (the fleet is at its demand: a scale event renews it).
    assert state.checkpoint is first and state.scale_events == ()
    state = run(s, state, 30 + CHECKPOINT_SECONDS, 45 + CHECKPOINT_SECONDS, 640, 8)
    renewed = state.checkpoint
    assert renewed is not None and renewed.time == 30 + CHECKPOINT_SECONDS
    assert renewed.history == state.history and len(renewed.history.needs) == 6


def test_a_scale_event_and_panic_renew_the_checkpoint_and_their_expiry_does_not() -> None:
    s = spec(panicWindowSeconds=6)
    state = run(s, ScalingState(), 0, 60, 640, 8)
    kept = state.checkpoint
    assert kept is not None and kept.time == 30
    grown = decide(s, state, load(60, 960, 0.8), 8, 8, 60).new_state  # 12 replicas' worth: +4
    assert grown.checkpoint is not None and grown.checkpoint.time == 60
    assert grown.checkpoint.scale_events == ((60, 4),) and grown.checkpoint.panic_since is None
    state = run(s, grown, 75, 120, 960, 12)
    assert state.checkpoint is grown.checkpoint  # the event's expiry (15 s policies) writes nothing
    burst = decide(s, state, load(120, 4000, 1.0), 12, 12, 120).new_state  # 50 >= 2 x 12: panic
    assert burst.checkpoint is not None and burst.checkpoint.time == 120
    assert (burst.checkpoint.panic_since, burst.checkpoint.panic_last_triggered) == (120, 120)
    assert burst.checkpoint.scale_events == ((120, 38),)  # the policies' 15 s: the event at 60 s is gone


def test_a_resumed_autoscaler_holds_the_fleet_it_finds_and_knows_its_service_rate() -> None:
    # Two hours at 4,000/s on 50 replicas serving 100/s each, then the demand falls to 2,000/s.
    s = spec(scaleDownDelayMode="Fixed", scaleDownDelaySeconds=1800)
    before = run(s, ScalingState(), 0, 7200, 4000, 50)
    assert before.checkpoint is not None
    now = 7200 + 60  # the operator was down for a minute
    falling = load(now, 2000, 2000 / (100 * 50))

    resumed = decide(s, resume(before.checkpoint, now, 50, s.target_utilization), falling, 50, 50, now)
    assert resumed.signals["rate"] == pytest.approx(25)  # 2,000 / (100 x 0.8): no relearning
    assert resumed.desired == 50  # held: the window keeps the fleet found at the restart
    assert "(fleet found at the takeover, held 1800 s)" in resumed.reason

    # Before checkpoints: an empty memory knew no service rate and no window to hold.
    lost = decide(s, ScalingState(), falling, 50, 50, now)
    assert "rate" not in lost.signals and lost.desired < 50


def test_resume_restores_the_learned_window_and_its_day_of_history() -> None:
    history = minutes(100, [8] * 600, [6] * 600)
    checkpoint = Checkpoint(time=700 * 60, service_rate=120.0, cold_start=400.0, hold_seconds=600.0, history=history)
    state = resume(checkpoint, 702 * 60, 9, 0.8)
    assert (state.service_rate, state.cold_start, state.hold_seconds) == (120.0, 400.0, 600.0)
    assert state.hold_chosen_at == 702 * 60  # re-chosen on the usual schedule, over the whole day
    assert len(state.history.needs) == 602 and state.history.first_minute == 100  # minutes 700, 701 bridged
    assert state.fleet_found == (702 * 60, 9) and state.recommendations == ()
    # Kept, and said to be at the target it was resumed at (a change from it renews it).
    assert state.checkpoint == replace(checkpoint, target_utilization=0.8)


# ------------------------------------------------------------------------------------- status


def test_the_status_section_round_trips_the_checkpoint() -> None:
    history = minutes(29_000_000, [8, 9, 12], [6, 7, 10])
    checkpoint = Checkpoint(
        time=1_740_000_000.0, service_rate=2637.44, cold_start=451.3, hold_seconds=900.0, history=history
    )
    section = autoscaler_status(checkpoint)
    assert section is not None
    wire = section.to_wire()
    assert wire["checkpointTime"] == "2025-02-19T21:20:00Z"
    assert wire["serviceRatePerReplica"] == 2637.4 and wire["coldStartSeconds"] == 451
    assert wire["scaleDownDelaySeconds"] == 900.0 and wire["historyStartMinute"] == 29_000_000
    back = checkpoint_from_status(wire)
    assert back == Checkpoint(1_740_000_000.0, 2637.4, 451, 900.0, history)
    assert autoscaler_status(None) is None
    # No service rate: no section, no invalid status.
    assert autoscaler_status(Checkpoint(1.0, 0.0, None, None, History())) is None


def test_the_status_section_keeps_the_scale_events_and_panic_rounded_up_to_the_second() -> None:
    checkpoint = Checkpoint(
        time=1_740_000_000.0,
        service_rate=100.0,
        cold_start=None,
        hold_seconds=None,
        history=History(),
        scale_events=((1_739_999_950.0, 8), (1_739_999_990.2, -2)),
        panic_since=1_739_999_950.0,
        panic_last_triggered=1_739_999_990.2,
    )
    section = autoscaler_status(checkpoint)
    assert section is not None
    wire = section.to_wire()
    assert wire["scaleEvents"] == [
        {"time": "2025-02-19T21:19:10Z", "replicas": 8},
        # Rounded down, it would stop counting against a policy before the old operator's did.
        {"time": "2025-02-19T21:19:51Z", "replicas": -2},
    ]
    assert (wire["panicSince"], wire["panicLastTriggered"]) == ("2025-02-19T21:19:10Z", "2025-02-19T21:19:51Z")
    back = checkpoint_from_status(wire)
    assert back == replace(
        checkpoint, scale_events=((1_739_999_950.0, 8), (1_739_999_991.0, -2)), panic_last_triggered=1_739_999_991.0
    )
    calm = autoscaler_status(replace(checkpoint, scale_events=(), panic_since=None, panic_last_triggered=None))
    assert calm is not None and {"scaleEvents", "panicSince", "panicLastTriggered"}.isdisjoint(calm.to_wire())
    assert checkpoint_from_status({**wire, "scaleEvents": [{"time": "soon", "replicas": 8}]}) is None


def test_the_status_section_is_rendered_once_per_checkpoint_and_handed_out_as_a_copy() -> None:
    events = tuple((1_739_999_000.0 + 5 * i, 1 if i % 2 else -1) for i in range(120))
    checkpoint = Checkpoint(1_740_000_000.0, 100.0, None, None, History(), scale_events=events)
    first = autoscaler_status(checkpoint)
    assert first is not None and len(first.to_wire()["scaleEvents"]) == 120
    # Every reconcile until the next renewal reads the section rendered at the first.
    assert checkpoint.derived["status"] == first
    # What was rendered is no part of the checkpoint's value: it equals an unrendered copy.
    unrendered = replace(checkpoint)
    assert not unrendered.derived and unrendered == checkpoint
    first.service_rate_per_replica = 1.0  # a caller's model is its own, lists included
    assert first.scale_events is not None
    first.scale_events.append(first.scale_events[0])
    with pytest.raises(ValidationError):  # the items are shared, and frozen
        first.scale_events[0].replicas = 5
    again = autoscaler_status(checkpoint)
    assert again is not None and again is not first and again.service_rate_per_replica == 100.0
    assert again.scale_events is not None and len(again.scale_events) == 120
    # A renewed checkpoint (equal or not) renders its own section.
    renewed = replace(checkpoint, scale_events=events[:1])
    assert not renewed.derived and renewed == replace(checkpoint, scale_events=events[:1])
    section = autoscaler_status(renewed)
    assert section is not None and len(section.to_wire()["scaleEvents"]) == 1
    assert autoscaler_status(Checkpoint(1.0, 0.0, None, None, History())) is None


def test_a_checkpoint_from_after_now_is_resumed_with_its_events_moved_back() -> None:
    # The wall clock stepped back 100 s between the checkpoint and the restart.
    checkpoint = Checkpoint(1000.0, 100.0, None, None, History(), None, ((990.0, 4),), 980.0, 990.0)
    state = resume(checkpoint, 900.0, 12, 0.8)
    assert state.scale_events == ((890.0, 4),)
    assert (state.panic_since, state.panic_last_triggered) == (880.0, 890.0)
    assert resume(checkpoint, 1010.0, 12, 0.8).scale_events == ((990.0, 4),)


@pytest.mark.parametrize(
    ("learned", "written"),
    [(0.06, 0.06), (0.04, 0.04), (0.14, 0.14), (0.0612345, 0.06123), (12.34567, 12.35), (2637.44, 2637.4)],
)
def test_a_slow_replicas_service_rate_is_checkpointed_to_four_significant_digits(
    learned: float, written: float
) -> None:
    # Rounded to 0.1/s, an LLM replica's 0.06/s resumed as 0.1 (sized a third too small: 8 replicas
    # where 13 were needed, then panic to 49) and one of 0.04/s wrote no checkpoint at all.
    section = autoscaler_status(Checkpoint(1_740_000_000.0, learned, None, None, History()))
    assert section is not None and section.service_rate_per_replica == written
    back = checkpoint_from_status(section.to_wire())
    assert back is not None and back.service_rate == written


@pytest.mark.parametrize(
    "section",
    [
        None,
        "garbage",
        {},
        {"checkpointTime": "2025-02-19T21:20:00Z"},  # no service rate
        {"checkpointTime": "yesterday", "serviceRatePerReplica": 100},
        {"checkpointTime": "2025-02-19T21:20:00Z", "serviceRatePerReplica": "fast"},
        {"checkpointTime": "2025-02-19T21:20:00Z", "serviceRatePerReplica": -5},  # an edit gone wrong
        {"checkpointTime": "2025-02-19T21:20:00Z", "serviceRatePerReplica": 100, "coldStartSeconds": -1},
        {
            "checkpointTime": "2025-02-19T21:20:00Z",
            "serviceRatePerReplica": 100,
            "historyStartMinute": 5,
            "historyRecommendations": hold.pack([1, 2]),
            "historyNeeds": hold.pack([1]),  # lengths differ
        },
        {
            "checkpointTime": "2025-02-19T21:20:00Z",
            "serviceRatePerReplica": 100,
            "historyStartMinute": 5,
            "historyRecommendations": "%%%",
            "historyNeeds": "%%%",
        },
    ],
)
def test_a_section_that_is_not_a_checkpoint_is_not_resumed_from(section: object) -> None:
    assert checkpoint_from_status(section) is None


@pytest.mark.parametrize("dropped", ["historyStartMinute", "historyRecommendations", "historyNeeds"])
def test_a_history_missing_a_part_is_learned_again_and_the_rest_resumed(dropped: str) -> None:
    # An edited section: its service rate still holds; a history without its start, or without one
    # of its two series, is no history (the autoscaler learns it again), not an error.
    checkpoint = Checkpoint(
        time=1_740_000_000.0,
        service_rate=100.0,
        cold_start=None,
        hold_seconds=None,
        history=minutes(29_000_000, [8, 9], [6, 7]),
    )
    section = autoscaler_status(checkpoint)
    assert section is not None
    wire = section.to_wire()
    del wire[dropped]
    assert checkpoint_from_status(wire) == replace(checkpoint, history=History())


# ------------------------------------------------------------- rate limits and panic across a restart


def restarted(state: ScalingState, now: float, current: int, target_utilization: float = 0.8) -> ScalingState:
    """``state``'s autoscaler restarted at ``now`` (a Helm upgrade, a new leader): its checkpoint as
    the status holds it, read back by the new operator, which takes over ``current`` active replicas
    (``target_utilization``: its spec's, the default's unless given)."""
    section = autoscaler_status(state.checkpoint)
    assert section is not None
    return take_over(checkpoint_from_status(section.to_wire()), now, current, target_utilization)


def test_a_restart_right_after_a_scale_up_does_not_grant_the_rate_policy_again() -> None:
    # At most 100 % more per 60 s; 8 replicas serving 100/s each, their service rate learned.
    s = spec(behavior={"scaleUp": {"policies": [{"type": "Percent", "value": 100, "periodSeconds": 60}]}})
    state = run(s, ScalingState(), 0, 600, 640, 8)
    assert state.scale_events == ()
    busy = decide(s, state, load(600, 4000, 1.0), 8, 8, 600)
    assert busy.desired == 16 and "scale-up limited to 16" in busy.reason
    # The operator restarts 10 s later; the 8 new pods are still starting.
    resumed_state = restarted(busy.new_state, 610, 16)
    stayed = decide(s, busy.new_state, load(615, 4000, 1.0), 16, 8, 615)
    resumed = decide(s, resumed_state, load(615, 4000, 1.0), 16, 8, 615)
    assert stayed.desired == 16
    assert resumed.desired == stayed.desired, resumed.reason  # was 32: the policy granted twice
    # Once the period has passed, both double again.
    assert decide(s, stayed.new_state, load(661, 4000, 1.0), 16, 16, 661).desired == 32
    assert decide(s, resumed.new_state, load(661, 4000, 1.0), 16, 16, 661).desired == 32


def test_a_restart_right_after_a_scale_down_does_not_grant_the_rate_policy_again() -> None:
    # A fleet that follows the demand down at once, one replica per 2 minutes.
    s = spec(
        scaleDownDelayMode="Fixed",
        scaleDownDelaySeconds=0,
        behavior={
            "scaleDown": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}],
            }
        },
    )
    state = run(s, ScalingState(), 0, 600, 800, 10)
    assert state.scale_events == ()
    quiet = decide(s, state, load(600, 400, 0.4), 10, 10, 600)
    assert quiet.desired == 9 and "scale-down limited to 9" in quiet.reason
    resumed_state = restarted(quiet.new_state, 610, 9)
    stayed = decide(s, quiet.new_state, load(615, 400, 0.45), 9, 9, 615)
    resumed = decide(s, resumed_state, load(615, 400, 0.45), 9, 9, 615)
    assert stayed.desired == 9
    assert resumed.desired == stayed.desired, resumed.reason  # was 8


def test_a_restart_after_more_scale_events_than_the_status_keeps_does_not_grant_the_rate_policy_again() -> None:
    # Decisions every 5 s, at most 1 pod per 5 s and 130 per 30 min: a ramp of 130 scale events of
    # one pod each, more than the status keeps (120), all within the 30-minute period.
    s = spec(
        maxReplicas=1000,
        intervalSeconds=5,
        behavior={
            "scaleUp": {
                "selectPolicy": "Min",
                "policies": [
                    {"type": "Pods", "value": 1, "periodSeconds": 5},
                    {"type": "Pods", "value": 130, "periodSeconds": 1800},
                ],
            }
        },
    )
    state = run(s, ScalingState(), 0, 600, 800, 10)
    current = 10
    for now in range(600, 1260, 5):  # 250 replicas' worth
        decision = decide(s, state, load(now, 20000, 1.0), current, current, now)
        state, current = decision.new_state, decision.desired
    assert current == 140 and len(state.scale_events) == 130
    assert "scale-up limited to 140" in decision.reason
    assert state.checkpoint is not None and len(state.checkpoint.scale_events) == 119
    assert state.checkpoint.scale_events[0] == (655, 12)
    resumed_state = restarted(state, 1262, 140)
    stayed = decide(s, state, load(1265, 20000, 1.0), 140, 140, 1265)
    resumed = decide(s, resumed_state, load(1265, 20000, 1.0), 140, 140, 1265)
    assert stayed.desired == 140
    assert resumed.desired == stayed.desired, resumed.reason  # was 141, and 150 ten decisions later
    # The first event (600 s) leaves the period at 2400 s; the status summed the 12 oldest (600 to
    # 655 s) into one at 655 s, which leaves it at 2455 s: the restarted autoscaler scales later, not
    # sooner.
    for now, grown in ((2395, (140, 140)), (2405, (141, 140)), (2460, (141, 141))):
        assert decide(s, stayed.new_state, load(now, 20000, 1.0), 140, 140, now).desired == grown[0]
        assert decide(s, resumed.new_state, load(now, 20000, 1.0), 140, 140, now).desired == grown[1]


def test_scale_events_beyond_what_the_status_keeps_are_summed_per_direction() -> None:
    # A scale-down of 10, then a ramp of 130 one-pod scale-ups within a policy of 130 per 30 min: 131
    # events, more than the status keeps (120). Summed into one change, the scale-down cancelled 10 of
    # the oldest scale-ups: once it left the period (1800 s), a restarted autoscaler could add 10 more
    # than the one that ran on, for as long as the summed change counted.
    up = ScaleUpRules(
        stabilization_window_seconds=0,
        select_policy="Max",
        policies=[ScalingPolicy(type="Pods", value=130, period_seconds=1800)],
    )
    events = ((0.0, -10), *((1000.0 + 5 * k, 1) for k in range(130)))
    kept = _kept(events)
    assert len(kept) <= MAX_STATUS_SCALE_EVENTS
    assert kept[:2] == ((0.0, -10), (1055.0, 12))  # the older scale-ups summed, at the newest's time
    assert kept[2:] == events[-(MAX_STATUS_SCALE_EVENTS - 2) :]
    for now in range(1645, 3500, 5):
        assert scale_up_limit(up, kept, 150, now) <= scale_up_limit(up, events, 150, now), now


def test_a_restart_in_panic_keeps_the_panic_hold() -> None:
    # No scale-down window: only panic mode's hold (60 s after its last trigger) keeps the fleet a
    # burst grew from shrinking at once.
    s = spec(
        panicWindowSeconds=6,
        scaleDownDelayMode="Fixed",
        scaleDownDelaySeconds=0,
        behavior={"scaleDown": {"stabilizationWindowSeconds": 0}},
    )
    state = run(s, ScalingState(), 0, 600, 640, 8)
    burst = decide(s, state, load(600, 4000, 1.0), 8, 8, 600)
    assert burst.panic and burst.desired == 50
    resumed_state = restarted(burst.new_state, 610, 50)
    stayed = decide(s, burst.new_state, load(615, 400, 0.5), 50, 8, 615)
    resumed = decide(s, resumed_state, load(615, 400, 0.5), 50, 8, 615)
    assert stayed.panic and stayed.desired == 50 and "panic hold" in stayed.reason
    assert (resumed.panic, resumed.desired) == (stayed.panic, stayed.desired), resumed.reason  # was 5
    # The hold ends 60 s after the last trigger for both.
    assert decide(s, stayed.new_state, load(660, 400, 0.5), 50, 50, 660).desired == 5
    assert decide(s, resumed.new_state, load(660, 400, 0.5), 50, 50, 660).desired == 5


def test_a_restart_while_the_scale_down_window_holds_never_scales_down_sooner() -> None:
    """The recommendations the scale-down window held are lost with the memory, and the checkpoint's
    hold history (the highest recommendation per minute) only chooses the learned delay, it holds
    nothing; the fleet found at the takeover, held as a recommendation made then, stands in for them
    (the checkpoint need not keep them): the restarted autoscaler scales down no sooner, and at most
    one window later."""
    s = spec(scaleDownDelayMode="Fixed", scaleDownDelaySeconds=300)
    state = run(s, ScalingState(), 0, 600, 800, 10)
    # From 600 s the demand is half the fleet; the operator restarts at 700 s.
    stayed_state, resumed_state, current = state, state, {"stayed": 10, "resumed": 10}
    released: dict[str, float] = {}
    for now in range(600, 1100, 15):
        if now == 705:
            resumed_state = restarted(stayed_state, 700, current["stayed"])
        stayed = decide(
            s, stayed_state, load(now, 400, 4 / current["stayed"]), current["stayed"], current["stayed"], now
        )
        resumed = decide(
            s, resumed_state, load(now, 400, 4 / current["resumed"]), current["resumed"], current["resumed"], now
        )
        assert resumed.desired >= stayed.desired, resumed.reason
        for name, decision in (("stayed", stayed), ("resumed", resumed)):
            if decision.desired < 10:
                released.setdefault(name, now)
            current[name] = decision.desired
        stayed_state, resumed_state = stayed.new_state, resumed.new_state
    # The last recommendation of 10 was at 585; the takeover at 700.
    assert released == {"stayed": 885, "resumed": 1005}


def test_a_restart_does_not_cut_the_scale_up_stabilization_window_short() -> None:
    """The scale-up window promises no scale-up before the demand has held for it; the recommendations
    that told how long it had held are lost with the memory. The fleet found counts as a recommendation
    made at the takeover in that window too (it holds no scale-up when the window is 0, the default)."""
    s = spec(behavior={"scaleUp": {"stabilizationWindowSeconds": 120}})
    state = run(s, ScalingState(), 0, 600, 800, 10)
    # From 600 s the demand is 15 replicas' worth; the operator restarts at 640 s.
    stayed_state, resumed_state, current = state, state, {"stayed": 10, "resumed": 10}
    grown: dict[str, float] = {}
    for now in range(600, 900, 15):
        if now == 645:
            resumed_state = restarted(stayed_state, 640, current["stayed"])
        stayed = decide(
            s, stayed_state, load(now, 1200, 12 / current["stayed"]), current["stayed"], current["stayed"], now
        )
        resumed = decide(
            s, resumed_state, load(now, 1200, 12 / current["resumed"]), current["resumed"], current["resumed"], now
        )
        assert resumed.desired <= stayed.desired, resumed.reason  # was 15 at 645 s
        for name, decision in (("stayed", stayed), ("resumed", resumed)):
            if decision.desired > 10:
                grown.setdefault(name, now)
            current[name] = decision.desired
        if now == 645:
            assert "stabilized to 10 (fleet found at the takeover, held 120 s)" in resumed.reason
        stayed_state, resumed_state = stayed.new_state, resumed.new_state
    # The demand rose at 600 s (the window's last 10 at 585 s); the takeover was at 640 s.
    assert grown == {"stayed": 705, "resumed": 765}


def test_a_restart_during_a_rate_limited_ramp_does_not_hold_the_ramp_for_a_window() -> None:
    """The fleet found holds a scale-up only when the checkpoint does not show one under way: its
    last scale event, a scale-up within the window before the takeover, says the window had been
    satisfied up to the count that event reached."""
    s = spec(
        behavior={
            "scaleUp": {
                "stabilizationWindowSeconds": 60,
                "policies": [{"type": "Pods", "value": 4, "periodSeconds": 60}],
            }
        }
    )
    state = run(s, ScalingState(), 0, 600, 800, 10)
    # From 600 s the demand is 50 replicas' worth: a ramp of 4 pods a minute; a restart at 820 s.
    # (Until 1170 s: from 1185 s the two part for another reason: the rising trend the unrestarted
    # autoscaler follows past 50 is drawn from rate samples the checkpoint does not keep.)
    stayed_state, resumed_state, current = state, state, {"stayed": 10, "resumed": 10}
    for now in range(600, 1185, 15):
        if now == 825:
            resumed_state = restarted(stayed_state, 820, current["stayed"])
            current["resumed"] = current["stayed"]
        stayed = decide(
            s, stayed_state, load(now, 4000, 40 / current["stayed"]), current["stayed"], current["stayed"], now
        )
        resumed = decide(
            s, resumed_state, load(now, 4000, 40 / current["resumed"]), current["resumed"], current["resumed"], now
        )
        # Was 22 (held 60 s) against 26 at 825 s, then 4 behind at every step (42 against 46 at 1170 s).
        assert resumed.desired == stayed.desired, (now, resumed.reason)
        if now == 825:
            assert "scale-up limited to 26" in resumed.reason
        current["stayed"], current["resumed"] = stayed.desired, resumed.desired
        stayed_state, resumed_state = stayed.new_state, resumed.new_state
    assert current == {"stayed": 46, "resumed": 46}


@pytest.mark.parametrize(
    ("events", "desired"),
    [
        (((790.0, 4),), 26),  # a scale-up 30 s before the takeover: under way, not held
        (((790.0, 4), (800.0, -1)), 22),  # a scale-down after it: the demand fell, held
        (((750.0, 4),), 22),  # the last scale-up before the 60 s window: held
        ((), 22),  # no scale event: held (the demand may have just risen)
    ],
)
def test_the_fleet_found_holds_a_scale_up_unless_the_checkpoint_shows_one_under_way(
    events: tuple[tuple[float, int], ...], desired: int
) -> None:
    s = spec(
        behavior={
            "scaleUp": {
                "stabilizationWindowSeconds": 60,
                "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}],
            }
        }
    )
    checkpoint = Checkpoint(800.0, 100.0, None, None, History(), None, events)
    decision = decide(
        s, resume(checkpoint, 820.0, 22, s.target_utilization), load(825, 4000, 1.0), 22, 22, 825
    )  # 50 needed
    assert decision.desired == desired, decision.reason
    if desired == 22:
        assert "stabilized to 22 (fleet found at the takeover, held 60 s)" in decision.reason


def test_a_takeover_within_a_second_of_a_scale_up_sees_it_under_way() -> None:
    # The status keeps a scale event's time rounded up to the second (so it counts no shorter): a
    # scale-up at 810.3 s reads back as 811 s, after a takeover at 810.8 s, and was not seen as
    # under way: the fleet found held the ramp for the whole 60 s window.
    s = spec(
        behavior={
            "scaleUp": {
                "stabilizationWindowSeconds": 60,
                "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}],
            }
        }
    )
    checkpoint = Checkpoint(810.3, 100.0, None, None, History(), None, ((810.3, 4),))
    resumed_state = restarted(ScalingState(checkpoint=checkpoint), 810.8, 22)
    assert resumed_state.scale_events == ((811.0, 4),)
    # 826 s: the scale-up has left the rate policy's 15 s period (as 810.3 s, and as 811 s).
    decision = decide(s, resumed_state, load(826, 4000, 1.0), 22, 22, 826)  # 50 needed
    assert decision.desired == 26, decision.reason


# ---------------------------------------------------------------------------- the operator's plan


def deployment() -> InferenceDeployment:
    manifest = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    manifest["metadata"].update({"namespace": "ns", "generation": 1})
    manifest["spec"].update(
        {
            "scaling": {"mode": "Auto", "minReplicas": 1, "maxReplicas": 20, "intervalSeconds": 15},
            "warmPool": {"mode": "Off"},
        }
    )
    return InferenceDeployment.model_validate(manifest)


def plan_at(
    dep: InferenceDeployment, second: float, pods: tuple[PodView, ...], memory: DeploymentMemory, status: dict[str, Any]
) -> ReconcilePlan:
    """One reconcile at ``T0 + second``: 400 requests/s on ``pods``, their devices half busy."""
    request = compile_request(dep.spec, "/store", "fp")
    stored = StoredArtifact("c" * 64, "/store/cccc", "d" * 64, "cpu")
    now = T0 + timedelta(seconds=second)
    metrics = MetricSnapshot(time=now.timestamp(), queue_depth=0, in_flight=2, arrival_rate=400, utilization=0.5)
    observation = Observation(now, pods=pods, compile=CompileObservation(request, stored), metrics=metrics)
    return plan_reconcile(dep, observation, memory, StatusMemory.from_status(status), FleetPolicy(), lambda c: "t" * 10)


def serving(pods: list[PodView], now: datetime) -> tuple[PodView, ...]:
    """The pods the actions left, all running and ready (a fleet that starts at once)."""
    return tuple(replace(p, ready=True, phase="Running", ready_at=p.ready_at or now, node="node-1") for p in pods)


def test_the_operator_writes_the_checkpoint_at_most_every_five_minutes_and_resumes_from_it() -> None:
    dep = deployment()
    status: dict[str, Any]
    pods: tuple[PodView, ...]
    memory, status, pods = DeploymentMemory(), {}, ()
    sections = []
    for second in range(0, 1200, 15):
        result = plan_at(dep, second, pods, memory, status)
        memory, status = result.memory, result.status
        now = T0 + timedelta(seconds=second)
        pods = serving(apply_actions(list(pods), result.actions, now), now)
        sections.append(status.get("autoscaler"))
    written = [s for s in sections if s is not None]
    assert written, "no checkpoint in the status"
    assert len({s["checkpointTime"] for s in written}) <= 1200 / CHECKPOINT_SECONDS
    assert all(a == b for a, b in itertools.pairwise(written) if a["checkpointTime"] == b["checkpointTime"])

    # A restarted operator (within five minutes of the last checkpoint): empty memory, the status
    # and pods as they were.
    assert written[-1]["checkpointTime"] == "2026-11-30T12:16:00Z"
    restarted = plan_at(dep, 1215, pods, DeploymentMemory(), status)
    state = restarted.memory.scaling_state
    assert state.service_rate == pytest.approx(written[-1]["serviceRatePerReplica"])
    assert state.checkpoint is not None and len(state.history.needs) >= 15
    assert restarted.inputs.scaling_message.startswith("rate ")  # no relearning from busy ratios
    assert restarted.status["autoscaler"] == written[-1]  # resuming writes nothing new


# ------------------------------------------------------------------------------------ simulator


def test_the_simulated_operator_restarts_with_or_without_its_checkpoint() -> None:
    ours = ours_from_policy_file(DEFAULT_OURS, 100, "default")
    ours.scaling_state = run(ours.scaling_spec, ScalingState(), 0, 900, 4000, 50)
    kept = ours.scaling_state.checkpoint
    assert kept is not None
    ours.restart(960, 50)
    assert ours.scaling_state.service_rate == kept.service_rate and ours.scaling_state.fleet_found == (960, 50)
    ours.restart(990, 50, resume=False)
    assert ours.scaling_state == ScalingState()


# --------------------------------------------------------------------- the trend across a restart


def ramp(s: ScalingSpec, state: ScalingState, start: float, stop: float, current: int) -> ScalingState:
    """Decisions every 15 s from ``start`` to ``stop`` on ``current`` replicas that serve 100/s each,
    the arrival rate rising 20/s a minute from 400/s at 0 s (slowly enough that the service rate is
    measured as it goes)."""
    now = start
    while now < stop:
        rate = 400 + now / 3
        state = decide(s, state, load(now, rate, rate / (100 * current)), current, current, now).new_state
        now += 15
    return state


@pytest.mark.parametrize("target", [0.8, 0.5])
def test_a_restart_mid_ramp_keeps_the_trend_signal(target: float) -> None:
    s = spec(targetUtilization=target)
    state = ramp(s, ScalingState(), 0, 2400, 10)
    rate = 400 + 2400 / 3
    snapshot = load(2400, rate, rate / 1000)
    steady = decide(s, state, snapshot, 10, 10, 2400)
    assert "trend" in steady.signals
    # Restarted at 2400 s through the status (the operator's path): the trend is there at once, not
    # after 15 minutes of new readings.
    resumed = decide(s, restarted(state, 2400, 10, target), snapshot, 10, 10, 2400)
    assert "trend" in resumed.signals
    assert resumed.signals["trend"] == pytest.approx(steady.signals["trend"], rel=0.01)
    # The status keeps the readings in replicas at the target (the rate signal's unit), whatever unit
    # the autoscaler draws its line in.
    assert state.checkpoint is not None
    section = autoscaler_status(state.checkpoint)
    assert section is not None and section.trend_readings
    last = section.trend_readings[-1]
    assert last.replicas == pytest.approx(state.checkpoint.rates[-1][1], abs=1e-3)
    service_rate = state.checkpoint.service_rate
    assert last.replicas == pytest.approx(state.rates[-1][1] / target, rel=0.05)  # the minute's mean
    assert state.rates[-1][1] == pytest.approx((400 + state.rates[-1][0] / 3) / service_rate, rel=0.01)
    assert resumed.signals["rate"] == pytest.approx(steady.signals["rate"])


def test_a_restart_mid_decline_keeps_the_decline_credit() -> None:
    # Learned delay of 1,800 s in the checkpoint; the demand fell a replica a minute for 20 minutes.
    s = spec(behavior={"scaleDown": {"stabilizationWindowSeconds": 0}})

    def demand(t: float) -> float:
        return 30 - (t - 2400) / 60

    readings = tuple((float(t), demand(t)) for t in range(2400, 3600, 60))
    held = []
    for kept in (readings, ()):
        state = take_over(
            Checkpoint(3600.0, 100.0, 300.0, 1800.0, History(), rates=kept), 3600.0, 30, s.target_utilization
        )
        current, now = 30, 3600.0
        while now < 3900:
            rate = demand(now) * 80  # 100/s a replica at the target utilization 0.8
            decision = decide(s, state, load(now, rate, rate / (100 * current)), current, current, now)
            state, current, now = decision.new_state, decision.desired, now + 15
        held.append(current)
    # The fleet found is lowered by half the decline since the takeover (285 s at 1/60 replica a
    # second: 27.6, rounded up); without the readings it stays held whole until the trend's window
    # is half full again.
    assert held == [28, 30]


def test_the_status_section_round_trips_the_trend_readings() -> None:
    rates = ((1_739_998_230.4, 12.3456), (1_739_998_290.0, 13.0), (1_739_999_999.9, 0.0))
    checkpoint = Checkpoint(1_740_000_000.0, 100.0, None, None, History(), rates=rates)
    section = autoscaler_status(checkpoint)
    assert section is not None
    wire = section.to_wire()
    assert wire["trendReadings"] == [
        {"time": "2025-02-19T20:50:30Z", "replicas": 12.346},
        {"time": "2025-02-19T20:51:30Z", "replicas": 13.0},
        # Truncated to the second as checkpointTime is: never after it.
        {"time": "2025-02-19T21:19:59Z", "replicas": 0.0},
    ]
    back = checkpoint_from_status(wire)
    assert back == replace(
        checkpoint, rates=((1_739_998_230.0, 12.346), (1_739_998_290.0, 13.0), (1_739_999_999.0, 0.0))
    )
    # Without readings (no arrival rate read at the measured rate): no field.
    calm = autoscaler_status(replace(checkpoint, rates=()))
    assert calm is not None and "trendReadings" not in calm.to_wire()
    assert checkpoint_from_status(calm.to_wire()) == replace(checkpoint, rates=())


GOOD_SECTION = {"checkpointTime": "2025-02-19T21:20:00Z", "serviceRatePerReplica": 100}


@pytest.mark.parametrize(
    "readings",
    [
        [{"time": "soon", "replicas": 3}],
        [{"time": "2025-02-19T21:19:00Z", "replicas": -1}],
        [{"time": "2025-02-19T21:19:00Z", "replicas": 1e12}],
        [{"time": "2025-02-19T21:19:00Z", "replicas": float("nan")}],
        [{"time": "2025-02-19T21:19:00Z", "replicas": "many"}],
        [{"time": "2025-02-19T21:19:00Z"}],
        [{"time": "2025-02-19T21:19:00Z", "replicas": 3, "weight": 4}],
        # After the checkpoint was taken: no reading this operator wrote.
        [{"time": "2025-02-19T21:21:00Z", "replicas": 3}],
        [{"time": "2025-02-19T21:19:00Z", "replicas": 3}] * 31,
        {"time": "2025-02-19T21:19:00Z", "replicas": 3},
    ],
)
def test_corrupt_trend_readings_are_not_resumed_from(readings: object) -> None:
    assert checkpoint_from_status({**GOOD_SECTION, "trendReadings": readings}) is None
    # A reconcile that reads it takes over as without a checkpoint, holding the fleet found.
    state = take_over(checkpoint_from_status({**GOOD_SECTION, "trendReadings": readings}), 1_740_000_100.0, 4, 0.8)
    assert state.rates == () and state.service_rate is None and state.fleet_found == (1_740_000_100.0, 4)


def test_unordered_trend_readings_are_resumed_in_order() -> None:
    readings = [
        {"time": "2025-02-19T21:19:00Z", "replicas": 3},
        {"time": "2025-02-19T21:00:00Z", "replicas": 2},
    ]
    back = checkpoint_from_status({**GOOD_SECTION, "trendReadings": readings})
    assert back is not None and [v for _, v in back.rates] == [2, 3]


def test_resume_drops_readings_outside_the_window_and_moves_them_with_a_stepped_back_clock() -> None:
    rates = ((100.0, 1.0), (1000.0, 2.0), (1900.0, 3.0))
    checkpoint = Checkpoint(2000.0, 100.0, None, None, History(), rates=rates)
    # The window at a restart at 2,100 s starts at 300 s: the reading at 100 s is out.
    # (Taken at a target utilization of 1: the readings' replicas at the target are the busy ones.)
    assert resume(checkpoint, 2100.0, 4, 1.0).rates == ((1000.0, 2.0), (1900.0, 3.0))
    assert resume(checkpoint, 2750.0, 4, 1.0).rates == ((1000.0, 2.0), (1900.0, 3.0))
    assert resume(checkpoint, 2850.0, 4, 1.0).rates == ((1900.0, 3.0),)
    # The clock stepped back 100 s between the checkpoint and the restart: moved back with it.
    assert resume(checkpoint, 1900.0, 4, 1.0).rates == ((900.0, 2.0), (1800.0, 3.0))


def test_readings_measured_under_another_service_rate_key_are_not_kept_across_a_restart() -> None:
    s = spec()
    state = ScalingState()
    now = 0.0
    while now < 2400:
        rate = 400 + now / 3
        state = decide(s, state, load(now, rate, rate / 1000), 10, 10, now, rate_key="r1 on inf2.xlarge").new_state
        now += 15
    resumed = restarted(state, 2400, 10)
    assert resumed.rates and resumed.service_rate_key == "r1 on inf2.xlarge"
    after = decide(s, resumed, load(2400, 1200, 1.2), 10, 10, 2400, rate_key="r2 on inf2.xlarge")
    assert after.new_state.rates == () and "trend" not in after.signals


def test_the_checkpoint_keeps_at_most_one_trend_reading_a_minute_in_a_small_status() -> None:
    # Decisions every 5 s for 40 minutes: 360 readings in the trend's window.
    s = spec(intervalSeconds=5)
    state = ScalingState()
    now = 0.0
    while now < 2400:
        rate = 400 + now / 3
        state = decide(s, state, load(now, rate, rate / 1000), 10, 10, now).new_state
        now += 5
    assert len(state.rates) == 360
    assert state.checkpoint is not None
    kept = state.checkpoint.rates
    assert len(kept) == MAX_STATUS_TREND_READINGS
    assert len({math.floor(t / 60) for t, _ in kept}) == len(kept)
    section = autoscaler_status(state.checkpoint)
    assert section is not None
    assert len(json.dumps(section.to_wire()["trendReadings"])) < 2000
    # The CRD refuses a longer list: the operator never writes one.
    crd = yaml.safe_load((REPO / "crds" / "serving.neuronfleet.dev_inferencedeployments.yaml").read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["properties"]["autoscaler"]["properties"]["trendReadings"]["maxItems"] == MAX_STATUS_TREND_READINGS
    assert MAX_STATUS_TREND_REPLICAS == MAX_SIGNAL_REPLICAS


def test_a_minutes_mean_keeps_the_trend_line() -> None:
    # A steady ramp: the means lie on its line, which is kept exactly.
    ramp_readings = tuple((float(t), 5 + t / 300) for t in range(0, 1800, 15))
    ramp_line, minutes_line = _line(ramp_readings), _line(_per_minute(ramp_readings))
    assert ramp_line is not None and minutes_line is not None
    assert minutes_line[2] == pytest.approx(ramp_line[2], rel=1e-9)
    # A noisy one: the slope moves by far less than the noise.
    noise = (0.7, -0.4, 1.1, -0.9, 0.2, -0.6)
    noisy = tuple((t, v + noise[i % len(noise)]) for i, (t, v) in enumerate(ramp_readings))
    noisy_line, noisy_minutes_line = _line(noisy), _line(_per_minute(noisy))
    assert noisy_line is not None and noisy_minutes_line is not None
    assert noisy_minutes_line[2] == pytest.approx(noisy_line[2], rel=0.02)


# A target changed less than CHECKPOINT_SECONDS before a restart (a reviewer's reproduction): the
# checkpoint's readings were written in replicas at the old target, the restarted operator took
# them at the new one, and a flat demand read as a rising or falling one until they left the window.
def flat_then_new_target(before: float, after: float, arrival: float, decisions_after: int) -> tuple[ScalingState, int]:
    """30 minutes of a flat ``arrival`` rate at ``before``, then ``decisions_after`` decisions at
    ``after``: the state and the desired count (replicas serve 10/s)."""
    flat = {"panicWindowSeconds": 0}
    state, current, t = ScalingState(service_rate=10.0), math.ceil(arrival / (10.0 * before)), 0.0
    for k in range(121 + decisions_after):
        s = spec(**flat, targetUtilization=before if k < 121 else after)
        snapshot = MetricSnapshot(t, queue_depth=0.0, in_flight=1.0, arrival_rate=arrival, arrival_peak=arrival)
        d = decide(s, state, snapshot, current, current, t)
        state, current, t = d.new_state, d.desired, t + 15
    return state, current


@pytest.mark.parametrize(("before", "after", "arrival"), [(0.8, 0.75, 30.0), (0.6, 0.5, 20.0), (0.5, 0.8, 80.0)])
def test_a_target_change_renews_the_checkpoint_at_its_first_decision(
    before: float, after: float, arrival: float
) -> None:
    # No scale event (or one held by the scale-down delay), so nothing else renews it for 5 minutes.
    state, _ = flat_then_new_target(before, after, arrival, 0)
    assert state.checkpoint is not None and state.checkpoint.time == 1800
    state, _ = flat_then_new_target(before, after, arrival, 1)
    assert state.checkpoint is not None
    assert state.checkpoint.time == 1815  # 1800: kept, at the old target, up to 5 minutes
    # Its readings in replicas at the new target, as the status keeps them.
    assert state.checkpoint.rates[-1][1] == pytest.approx(arrival / (10.0 * after), rel=1e-6)
    # Renewed once: the next decisions at the same target leave it (no status write each).
    again, _ = flat_then_new_target(before, after, arrival, 4)
    assert again.checkpoint is not None and again.checkpoint.time == 1815


@pytest.mark.parametrize(("before", "after", "arrival"), [(0.8, 0.75, 30.0), (0.6, 0.5, 20.0), (0.5, 0.8, 80.0)])
def test_a_restart_a_minute_after_a_target_change_sees_no_trend(before: float, after: float, arrival: float) -> None:
    state, current = flat_then_new_target(before, after, arrival, 4)
    state = restarted(state, 1815 + 60, current, after)
    s = spec(panicWindowSeconds=0, targetUtilization=after)
    needed = math.ceil(arrival / (10.0 * after) - 1e-9)
    t, off = 1815.0 + 60, []
    for _ in range(120):
        snapshot = MetricSnapshot(t, queue_depth=0.0, in_flight=1.0, arrival_rate=arrival, arrival_peak=arrival)
        d = decide(s, state, snapshot, current, current, t)
        state, current, t = d.new_state, d.desired, t + 15
        if "trend" in d.signals or "decline" in d.reason:
            off.append((t, d.reason))
    assert current == needed and not off, off[:1]


def test_a_resumed_checkpoint_is_renewed_when_the_target_changes_after_the_restart() -> None:
    # Read back from the status, a checkpoint says no target: it was resumed at the spec's, so a
    # change after the restart renews it as one before would.
    state, current = flat_then_new_target(0.8, 0.8, 30.0, 4)
    resumed = restarted(state, 1900, current, 0.8)
    assert resumed.checkpoint is not None
    snapshot = MetricSnapshot(1900, queue_depth=0.0, in_flight=1.0, arrival_rate=30.0, arrival_peak=30.0)
    same = decide(spec(panicWindowSeconds=0), resumed, snapshot, current, current, 1900).new_state
    assert same.checkpoint is not None and same.checkpoint.time == resumed.checkpoint.time
    changed = decide(spec(panicWindowSeconds=0, targetUtilization=0.75), resumed, snapshot, current, current, 1900)
    assert changed.new_state.checkpoint is not None and changed.new_state.checkpoint.time == 1900
    # The status section is as before: no field an older operator would refuse (it resumes from it).
    section, before = autoscaler_status(changed.new_state.checkpoint), autoscaler_status(state.checkpoint)
    assert section is not None and before is not None and set(section.to_wire()) <= set(before.to_wire())
