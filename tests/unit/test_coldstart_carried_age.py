"""Cold-start figures carried over by restarts in a row expire a day after their newest sample
(review r16, finding 5).

A takeover carries ``status.coldStart``'s figures over (the pods they measured may be gone) for at
most a day. The status said nothing of their age, so each takeover counted the day again: an
operator restarted less than a day apart (Helm upgrades, node rotations, HA hand-overs) carried a
steady fleet's figures forever. Each phase now says when its newest sample became Ready
(``lastSampleTime``), which a takeover reads back; the day counts from there.
"""

from __future__ import annotations

from datetime import UTC, datetime

from neuronfleet.api.v1alpha1 import ColdStartStatus, PhaseStats
from neuronfleet.planning import coldstart
from neuronfleet.planning.coldstart import ColdStartState, PodTimeline
from neuronfleet.planning.times import rfc3339

T0 = 1_800_000_000.0
DAY = coldstart.MAX_SAMPLE_AGE_SECONDS
TYPE = "inf2.xlarge"


def at(moment: float) -> str:
    return rfc3339(datetime.fromtimestamp(moment, UTC))


def written(last_sample_time: str | None) -> ColdStartStatus:
    """What an operator wrote of 50 pods, p90 800 s, the newest Ready at ``last_sample_time``."""
    stats = PhaseStats(p50_seconds=600.0, p90_seconds=800.0, samples=50, last_sample_time=last_sample_time)
    return ColdStartStatus(instance_type=TYPE, scheduling=stats, start=stats, load=stats, pod=stats)


def restarts(status: ColdStartStatus, first: float, every: float, count: int) -> list[tuple[float, ColdStartStatus]]:
    """Takeovers ``every`` seconds from ``first`` on a steady fleet (no pod Ready in between): the
    time each process last wrote, and what it wrote."""
    out, now = [], first
    for _ in range(count):
        state = coldstart.take_over(status, now)
        now += every
        status = coldstart.status(coldstart.observe(state, [], now=now), TYPE)
        out.append((now, status))
    return out


def test_restarts_less_than_a_day_apart_carry_the_figures_no_longer_than_a_day_after_their_newest_sample() -> None:
    # The reviewer's repro: a restart every 20 hours carried p90 800 s for days on end.
    seen = restarts(written(at(T0)), T0, 20 * 3600, 5)
    assert [(now - T0, status.pod.samples) for now, status in seen] == [
        (20 * 3600, 50),
        (40 * 3600, 0),
        (60 * 3600, 0),
        (80 * 3600, 0),
        (100 * 3600, 0),
    ]
    assert seen[0][1].pod.last_sample_time == at(T0)
    # The warm pool falls back to the spec's assumed cold start from then on, as the docs say.
    late = coldstart.observe(coldstart.take_over(seen[0][1], T0 + 20 * 3600), [], now=T0 + DAY)
    assert coldstart.for_warm_pool(late, TYPE).pod_seconds is None
    early = coldstart.observe(coldstart.take_over(seen[0][1], T0 + 20 * 3600), [], now=T0 + DAY - 1)
    assert coldstart.for_warm_pool(early, TYPE).pod_seconds == 800.0


def test_figures_found_a_day_after_their_newest_sample_are_not_carried() -> None:
    assert coldstart.take_over(written(at(T0)), T0 + DAY) == ColdStartState()


def test_the_status_says_when_its_newest_sample_became_ready() -> None:
    pods = [
        PodTimeline(f"u{i}", TYPE, T0 + i, T0 + i + 5, T0 + i + 20, T0 + i + 300 + i, node_created=T0 - 900)
        for i in range(4)
    ]
    status = coldstart.status(coldstart.observe(ColdStartState(), pods, now=T0 + 400), TYPE)
    assert status.pod.samples == 4
    assert status.pod.last_sample_time == at(T0 + 3 + 303)
    # No node sample: no time either.
    assert status.node == PhaseStats()


def test_figures_found_without_a_sample_time_count_their_day_from_the_first_takeover_that_found_them() -> None:
    # Written by an operator before lastSampleTime: the takeover's time stands for it, and is written
    # back, so the next takeover does not count the day again.
    seen = restarts(written(None), T0, 20 * 3600, 2)
    assert seen[0][1].pod.samples == 50
    assert seen[0][1].pod.last_sample_time == at(T0)
    assert seen[1][1].pod.samples == 0


def test_a_takeover_carries_only_the_phases_with_a_p90_from_samples() -> None:
    # As status() writes it: a phase with too few samples has no p90 yet; a p90 with no sample behind
    # it is no measurement either (a status written by hand). Neither is carried.
    measured = PhaseStats(p50_seconds=600.0, p90_seconds=800.0, samples=50, last_sample_time=at(T0))
    too_few = PhaseStats(p50_seconds=30.0, p90_seconds=None, samples=2, last_sample_time=at(T0))
    unsampled = PhaseStats(p50_seconds=30.0, p90_seconds=40.0, samples=0, last_sample_time=at(T0))
    status = ColdStartStatus(instance_type=TYPE, scheduling=too_few, start=unsampled, load=measured, pod=measured)
    carried = coldstart.status(coldstart.take_over(status, T0 + 60), TYPE)
    assert [getattr(carried, name).samples for name in ("scheduling", "start", "load", "pod")] == [0, 0, 50, 50]
    assert carried.load.p90_seconds == carried.pod.p90_seconds == 800.0
