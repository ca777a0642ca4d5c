"""The live demo's load generator: superposed arrivals keep the rate and shape and smooth the seconds;
the client refuses to be unbounded or to leave this machine, and tells the host's stolen CPU time
from the fleet's misses (its HTTP outcomes: tests/integration)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import psutil
import pytest

from neuronfleet.demo.live import ClientView, LiveLoad
from neuronfleet.demo.loadgen import (
    QUIET_STEAL_SHARE,
    MachineCpu,
    MachineSecond,
    OpenLoopClient,
    quiet_seconds_attainment,
    rate_per_second,
    superposed_arrivals,
)


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
    view.last = {"sent": 2, "counts": {"ok": 2}, "p99_ms": 12.0, "loop_lag_max_ms": 1.0, "steal_share": 0.12}
    assert "CPU taken by the hypervisor 12%" in view.status()


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
