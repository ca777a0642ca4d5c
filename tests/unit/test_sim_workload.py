"""Arrivals models: rate preserved, superposed noise shrinking as 1/sqrt(K), the FFT sum, trace shapes,
the fine bins of long workloads drawn on demand and kept."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neuronfleet.sim import engine, runner
from neuronfleet.sim import workload as workload_module
from neuronfleet.sim.profiles import load_profile
from neuronfleet.sim.trace import Trace, load
from neuronfleet.sim.workload import ARRIVALS, BlockCache, Workload, build, rate_counts, superpose_counts


def steady_trace(seconds: int = 2000, rate: float = 3.0, seed: int = 5) -> Trace:
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.random(rng.poisson(rate * seconds)) * seconds)
    return Trace(arrivals, None, None, "steady")


@pytest.mark.parametrize("arrivals", ARRIVALS)
def test_every_model_keeps_the_mean_rate(arrivals: str) -> None:
    trace = steady_trace()
    workload = build(trace, load_profile("bert-base"), 40.0, jitter=1.0, seed=2, arrivals=arrivals)  # type: ignore[arg-type]
    assert workload.requests == pytest.approx(40 * len(trace), rel=0.01)
    if workload.materialized:
        assert workload.count.sum() == pytest.approx(workload.requests)


def test_superposed_per_second_noise_falls_as_one_over_sqrt_k() -> None:
    trace = steady_trace()
    profile = load_profile("bert-base")

    def cv(k: float) -> float:
        w = build(trace, profile, k, jitter=1.0, seed=3, arrivals="superpose", spread=2000.0)
        per_second = w.count_s[:2000]
        return float(per_second.std() / per_second.mean())

    ratio = cv(4) / cv(64)
    assert ratio == pytest.approx(4.0, rel=0.3)  # sqrt(64 / 4)
    # Replicating arrivals keeps every original burst: its noise does not shrink with K.
    replicated = build(trace, profile, 64, jitter=1.0, seed=3, arrivals="replicate").count_s[:2000]
    assert replicated.std() / replicated.mean() > 3 * cv(64)


def test_superpose_by_fft_is_the_sum_of_shifted_copies() -> None:
    rng = np.random.default_rng(0)
    histogram = rng.poisson(2.0, 500).astype(np.float64)
    k, spread = 37, 120
    total = superpose_counts(histogram, k, spread, np.random.default_rng(9))
    offsets = np.random.default_rng(9).integers(0, spread, size=k)
    expected = sum(np.roll(histogram, int(o)) for o in offsets)
    assert np.array_equal(total, expected)


def test_rate_model_keeps_the_shape_above_its_window() -> None:
    # A step from 2/s to 8/s: minute means follow it, within Poisson noise.
    times = np.concatenate([np.arange(0, 600, 0.5), 600 + np.arange(0, 600, 0.125)])
    trace = Trace(times, None, None, "step")
    w = build(trace, load_profile("bert-base"), 100, jitter=1.0, seed=1, arrivals="rate")
    minutes = w.count_s[:1200].reshape(20, 60).mean(axis=1)
    assert minutes[:9] == pytest.approx(200, rel=0.05)
    assert minutes[11:] == pytest.approx(800, rel=0.05)


def test_a_one_second_rate_window_keeps_each_seconds_own_rate() -> None:
    histogram = np.array([1.0, 0.0, 3.0, 0.0, 2.0])
    counts = rate_counts(histogram, 1000.0, 1.0, np.random.default_rng(5))
    # Poisson at 1,000 x each second's count: within 5 standard deviations of it, zero where it is zero.
    expected = 1000.0 * histogram
    assert np.all(np.abs(counts - expected) <= 5 * np.sqrt(expected)), counts


@pytest.mark.parametrize("materialize", [True, False])
def test_one_superposed_copy_keeps_every_second_of_the_trace_in_place(materialize: bool) -> None:
    # One arrival in the middle of each of 10 seconds, one copy, no shift: the trace itself, its
    # last second included, whether kept per fine bin or per second (a multi-day trace's path).
    trace = Trace(np.arange(10, dtype=np.float64) + 0.5, None, None, "one a second")
    profile = load_profile("bert-base")
    workload = build(trace, profile, 1.0, jitter=1.0, seed=1, arrivals="superpose", spread=0.0, materialize=materialize)
    assert workload.trace_seconds == 10
    np.testing.assert_array_equal(workload.count_s[:10], np.ones(10))


def test_only_a_workload_within_the_fine_bin_budget_is_materialized_by_default() -> None:
    # MATERIALIZE_MAX_BINS bins of 10 ms: 40,000 s. The 14-day trace's 121 million would not fit.
    profile = load_profile("bert-base")
    # A workload is its trace's span plus the tail; one of exactly the budget's seconds still fits.
    limit = workload_module.MATERIALIZE_MAX_BINS // workload_module.PER_SECOND
    tail = int(workload_module.TAIL_SECONDS)
    short = build(steady_trace(seconds=600), profile, 1, jitter=1.0, seed=4, arrivals="rate")
    assert short.materialized
    at_limit = build(steady_trace(seconds=limit - tail), profile, 1, jitter=1.0, seed=4, arrivals="rate")
    assert at_limit.materialized and at_limit.bins == workload_module.MATERIALIZE_MAX_BINS
    long = build(steady_trace(seconds=limit - tail + 1), profile, 1, jitter=1.0, seed=4, arrivals="rate")
    assert not long.materialized


def test_long_workloads_are_kept_per_second_and_refined_on_demand() -> None:
    trace = steady_trace(seconds=2000)
    profile = load_profile("bert-base")
    lazy = build(trace, profile, 50, jitter=1.0, seed=4, arrivals="rate", materialize=False)
    assert not lazy.materialized
    fine = lazy.fine_counts(595, 605)  # across two generated blocks
    assert fine.reshape(10, 100).sum(axis=1) == pytest.approx(lazy.count_s[595:605])
    assert np.array_equal(lazy.fine_counts(600, 601), fine[500:600])  # same bins whatever was asked first


def test_generated_blocks_are_kept_within_their_budget_and_drawn_the_same_again() -> None:
    trace = steady_trace(seconds=2000)
    lazy = build(trace, load_profile("bert-base"), 50, jitter=1.0, seed=4, arrivals="rate", materialize=False)
    first = lazy.fine_counts(0, 1900)
    assert first.dtype == np.float64 and sorted(lazy.block_cache.kept) == [0, 1, 2, 3]  # kept for the next run
    # A budget of two blocks keeps the first two drawn; the rest are drawn again, to the same bins.
    block_bytes = max(b.nbytes for b in lazy.block_cache.kept.values())
    lazy = replace(lazy, block_cache=BlockCache(2 * block_bytes))
    for start in range(0, 1900, 100):
        lazy.fine_counts(start, start + 100)
    assert sorted(lazy.block_cache.kept) == [0, 1] and lazy.block_cache.kept_bytes <= 2 * block_bytes
    assert np.array_equal(lazy.fine_counts(0, 1900), first)
    assert len(lazy.block_cache.recent) <= workload_module.RECENT_BLOCKS


def test_a_sweeps_workers_share_the_block_budget_out() -> None:
    trace = steady_trace(seconds=2000)
    profile = load_profile("bert-base")
    lazy = build(trace, profile, 50, jitter=1.0, seed=4, arrivals="rate", materialize=False)
    todo = runner.cases(["static"], 20, 10)[:3]
    real_run = engine.run

    def run_saying_its_budget(workload: Workload, *args: Any, **kwargs: Any) -> engine.RunResult:
        # Runs in the forked worker: what it knew comes back with the result.
        result = real_run(workload, *args, **kwargs)
        result.notes = (f"budget {workload.block_cache.budget}",)
        return result

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine, "run", run_saying_its_budget)
        outcomes = runner.run_cases(lazy, profile, todo, 1, 5, jobs=2)
    budget = workload_module.BLOCK_CACHE_BYTES
    assert {o.result.notes for o in outcomes} == {(f"budget {budget // 2}",)}
    assert lazy.block_cache.budget == budget  # the parent's again


def test_both_trace_shapes_load(tmp_path: Path) -> None:
    azure = tmp_path / "azure.csv"
    azure.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:50.99,396,109\n"
    )
    nasa = tmp_path / "nasa.csv"
    nasa.write_text("timestamp\n0\n5\n5\n5\n6\n")
    a = load(azure)
    assert a.arrivals == pytest.approx([0.0, 4.31], abs=1e-6)
    assert a.context_tokens is not None and list(a.context_tokens) == [374, 396]
    n = load(nasa)
    # Requests sharing a logged second are spread evenly within it (times from the first request).
    assert n.arrivals == pytest.approx([0.0, 4 + 2 / 3, 5.0, 5 + 1 / 3, 6.0])
    assert n.context_tokens is None
