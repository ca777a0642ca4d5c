"""The live demo's load generator: superposed arrivals keep the rate and shape and smooth the seconds;
the client refuses to be unbounded or to leave this machine (its HTTP outcomes: tests/integration)."""

from __future__ import annotations

import numpy as np
import pytest

from neuronfleet.demo.loadgen import OpenLoopClient, rate_per_second, superposed_arrivals


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


def test_the_client_sends_to_this_machine_only() -> None:
    with pytest.raises(ValueError, match=r"127\.0\.0\.1 only"):
        OpenLoopClient("http://example.com/x", b"{}", np.zeros(1), slo_ms=50, max_requests=1, max_seconds=1)


def test_the_client_is_bounded() -> None:
    with pytest.raises(ValueError, match="exceed the bound"):
        OpenLoopClient("http://127.0.0.1:1/x", b"{}", np.zeros(3), slo_ms=50, max_requests=2, max_seconds=1)
    with pytest.raises(ValueError, match="beyond the bound"):
        OpenLoopClient("http://127.0.0.1:1/x", b"{}", np.array([5.0]), slo_ms=50, max_requests=2, max_seconds=1)
