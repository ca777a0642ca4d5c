"""The live demo's load generator: superposed arrivals keep the rate and shape and smooth the seconds;
the slice's busiest 30 s is scaled to the peak asked, within the trace and after an offset window;
the client refuses to be unbounded or to leave this machine, and tells the host's stolen CPU time
from the fleet's misses (its HTTP outcomes: tests/integration); the live view reads its counts and
the demand of the second asked."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import psutil
import pytest

from neuronfleet.demo.live import ClientView, LiveLoad, prepare_live_load
from neuronfleet.demo.loadgen import (
    QUIET_STEAL_SHARE,
    MachineCpu,
    MachineSecond,
    OpenLoopClient,
    quiet_seconds_attainment,
    rate_per_second,
    superposed_arrivals,
)
from neuronfleet.demo.options import DemoError, DemoOptions


def _bursty_trace(seconds: int = 3600, seed: int = 1) -> np.ndarray:
    """A trace with a slow shape (a ramp) and bursty seconds."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(np.linspace(2, 8, seconds))
    return np.sort(np.concatenate([s + rng.uniform(0, 1, c) for s, c in enumerate(counts)]))


def test_superposed_copies_keep_the_rate_and_shape_and_smooth_the_seconds() -> None:
    trace = _bursty_trace()
    start, duration = 1200.0, 600.0
    original = rate_per_second(trace[(trace >= start) & (trace < start + duration)] - start, duration)
    copies = 40
    times = superposed_arrivals(trace, start, duration, copies, window=30.0, seed=0)
    per_second = rate_per_second(times, duration)
    assert times.min() >= 0 and times.max() < duration and np.all(np.diff(times) >= 0)
    assert per_second.mean() == pytest.approx(copies * original.mean(), rel=0.03)
    # The ramp (slow shape) is kept: the last minute is busier than the first, as in the trace.
    assert per_second[-60:].mean() / per_second[:60].mean() == pytest.approx(
        original[-60:].mean() / original[:60].mean(), rel=0.1
    )
    cv = per_second.std() / per_second.mean()
    cv_original = original.std() / original.mean()
    assert cv < cv_original / 3, (cv, cv_original)


def test_superposed_arrivals_are_seeded() -> None:
    trace = _bursty_trace()
    a = superposed_arrivals(trace, 100.0, 60.0, 5, 10.0, seed=3)
    b = superposed_arrivals(trace, 100.0, 60.0, 5, 10.0, seed=3)
    assert np.array_equal(a, b)


def test_one_copy_is_the_trace_slice_that_ends_its_offset_earlier() -> None:
    # Copy k takes the trace's arrivals in [start - o_k, start - o_k + duration), o_k seeded in
    # [0, window): a copy is the trace up to the window earlier, never later (which the trace may
    # not hold).
    trace = _bursty_trace()
    (offset,) = np.random.default_rng(7).uniform(0.0, 10.0, size=1)
    begin = 100.0 - offset
    expected = trace[(trace >= begin) & (trace < begin + 60.0)] - begin
    assert np.array_equal(superposed_arrivals(trace, 100.0, 60.0, 1, 10.0, seed=7), expected)
    assert len(expected) > 0 and offset > 0
    with pytest.raises(ValueError, match="copies >= 1"):
        superposed_arrivals(trace, 100.0, 60.0, 0, 10.0, seed=7)


def test_the_client_sends_to_this_machine_only() -> None:
    with pytest.raises(ValueError, match=r"127\.0\.0\.1 only"):
        OpenLoopClient("http://example.com/x", b"{}", np.zeros(1), slo_ms=50, max_requests=1, max_seconds=1)


def test_the_client_is_bounded() -> None:
    with pytest.raises(ValueError, match="exceed the bound"):
        OpenLoopClient("http://127.0.0.1:1/x", b"{}", np.zeros(3), slo_ms=50, max_requests=2, max_seconds=1)
    with pytest.raises(ValueError, match="beyond the bound"):
        OpenLoopClient("http://127.0.0.1:1/x", b"{}", np.array([5.0]), slo_ms=50, max_requests=2, max_seconds=1)


def test_quiet_seconds_count_only_the_requests_sent_while_the_hypervisor_took_little() -> None:
    # Readings end at 1, 2, 3 s; the second one (1-2 s) lost 40 % of the machine to the hypervisor.
    seconds = [
        MachineSecond(t=1.0, steal_share=0.0, busy_share=0.5),
        MachineSecond(t=2.0, steal_share=0.4, busy_share=0.5),
        MachineSecond(t=3.0, steal_share=QUIET_STEAL_SHARE / 2, busy_share=0.5),
    ]
    times = np.array([0.2, 0.9, 1.0, 1.5, 2.5, 3.5])  # 1.0 is in the second reading; 3.5 in none
    within = np.array([True, False, False, False, True, True])
    quiet, quiet_within = quiet_seconds_attainment(times, within, seconds)
    assert (quiet, quiet_within) == (3, 2), "0.2, 0.9 and 2.5 s are in quiet seconds; 0.9 s missed the SLO"
    assert quiet_seconds_attainment(times, within, []) == (0, 0)


def test_the_machine_reading_is_a_share_of_the_cpu_time_between_readings() -> None:
    machine = MachineCpu()
    # Spin for a little CPU time so that the counters move (wait on the counters, not a fixed sleep).
    deadline_ticks = sum(psutil.cpu_times()) + 0.2
    while sum(psutil.cpu_times()) < deadline_ticks:
        sum(i * i for i in range(10_000))
    steal, busy = machine.shares()
    assert 0.0 <= steal <= 1.0 and 0.0 < busy <= 1.0
    assert steal + busy <= 1.0 + 1e-9


def test_the_live_view_shows_the_hypervisors_share_of_the_last_second() -> None:
    view = ClientView(LiveLoad(np.array([0.5, 1.5]), 2.0, {}))
    view.last = {
        "sent": 2345,
        "counts": {"ok": 2300, "rejected": 40, "lost": 1},
        "p99_ms": 12.0,
        "loop_lag_max_ms": 1.0,
        "steal_share": 0.12,
    }
    assert view.status() == (
        "client: sent 2,345, answered ok 2,300, 429 40, lost 1; last second p99 12 ms, client loop lag 1 ms, "
        "CPU taken by the hypervisor 12%"
    )


def test_the_live_views_demand_is_the_arrivals_of_the_second_asked_held_at_the_ends() -> None:
    # Seconds 0..3 hold 1, 0, 3 and 2 arrivals; before the start the first second shows, past the
    # end the last.
    view = ClientView(LiveLoad(np.array([0.2, 2.1, 2.5, 2.9, 3.0, 3.7]), 4.0, {}))
    assert [view.demand(t) for t in (-5.0, 0.0, 1.5, 2.99, 3.0, 60.0)] == [1.0, 1.0, 0.0, 3.0, 2.0, 2.0]


def test_the_live_load_scales_the_slices_busiest_30_s_to_the_peak_asked() -> None:
    options = DemoOptions(load="real", peak_rps=360.0)
    load = prepare_live_load(options, slo_ms=50.0)
    one_copy = load.facts["trace_requests"] / (options.live_minutes * 60.0)
    busiest = np.bincount((load.arrivals // 30).astype(np.int64)).max() / 30.0
    # Whole copies: the busiest 30 s lands within half a copy's rate of the peak asked.
    assert load.facts["copies"] > 1
    assert abs(load.facts["peak_rps_30s"] - options.peak_rps) <= load.facts["peak_rps_30s"] / load.facts["copies"] / 2
    assert busiest == pytest.approx(load.facts["peak_rps_30s"], rel=0.1)
    # Each copy is the trace shifted by up to the offset window: about the slice's count each.
    assert len(load.arrivals) == pytest.approx(one_copy * options.live_minutes * 60.0 * load.facts["copies"], rel=0.05)


def test_the_live_slice_needs_its_offset_window_before_it_and_must_end_within_the_trace() -> None:
    window = DemoOptions().offset_window_s
    # Starting exactly one offset window into the trace is the earliest start taken.
    prepare_live_load(DemoOptions(load="real", live_start_minute=window / 60.0, live_minutes=0.5), slo_ms=50.0)
    for start, minutes in ((window / 60.0 - 0.01, 0.5), (58.0, 5.0)):
        with pytest.raises(DemoError, match=r"are not all in it"):
            prepare_live_load(DemoOptions(load="real", live_start_minute=start, live_minutes=minutes), slo_ms=50.0)


def test_a_busy_share_never_reads_above_one_by_float_rounding() -> None:
    """The counters are float sums: CI read a busy share of 1.0000000000363798 on a saturated host."""

    class CpuTimes(NamedTuple):  # psutil.cpu_times()'s shape: a tuple of named float counters
        user: float
        system: float
        idle: float
        steal: float

    # Only user time moves (the host was busy throughout), yet the float sums round the share above 1.
    times = iter([CpuTimes(69592.3, 61479.65, 65853.74, 0.0), CpuTimes(69596.21, 61479.65, 65853.74, 0.0)])
    machine = MachineCpu.__new__(MachineCpu)
    machine._cpu_times = lambda: next(times)
    machine._last = machine._read()
    assert machine.shares() == (0.0, 1.0)


def test_the_shares_are_of_the_time_between_readings_with_every_counter_moving() -> None:
    class CpuTimes(NamedTuple):  # Linux's fields that the reading uses
        user: float
        nice: float
        system: float
        idle: float
        iowait: float
        steal: float
        guest: float
        guest_nice: float

    # Between the readings: 3 s user (1 of them a guest's, counted in user already), 2 s nice (1 of
    # them a niced guest's, counted in nice already), 1 s system, 2 s idle, 1 s iowait, 1 s stolen:
    # 10 s of CPU time, 1 of it stolen and 6 busy.
    before = CpuTimes(100.0, 30.0, 50.0, 400.0, 10.0, 20.0, 5.0, 2.0)
    after = CpuTimes(103.0, 32.0, 51.0, 402.0, 11.0, 21.0, 6.0, 3.0)
    times = iter([before, after])
    machine = MachineCpu.__new__(MachineCpu)
    machine._cpu_times = lambda: next(times)
    machine._last = machine._read()
    assert machine.shares() == pytest.approx((1 / 10, 6 / 10))
