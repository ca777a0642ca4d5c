"""The engine's whole-second path against every second on 10 ms bins, and the request paths it models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from neuronfleet.sim import engine, runner
from neuronfleet.sim.baselines import Hpa, Kpa, RayServe
from neuronfleet.sim.policies import MIN_COLD_START_SAMPLES, Policy, Static
from neuronfleet.sim.profiles import load_profile
from neuronfleet.sim.trace import Trace, load, rise_and_fall
from neuronfleet.sim.workload import Workload, build, factor_for_peak

NASA = Path(__file__).resolve().parents[3] / "shared" / "traces" / "nasa-http-1995-jul01-14.csv"


def daily_like(seconds: int = 5400, seed: int = 2) -> Trace:
    """A rise, a plateau with a burst at 2,400 s (none in a shorter trace) and a fall."""
    return rise_and_fall(seconds, seed, burst_at=2400)


def policies(peak: int) -> list[Policy]:
    return [
        Hpa(0.7, 1, 2 * peak, "0.7"),
        RayServe(2, 1, 2 * peak, "2"),
        Static(max(1, int(0.45 * peak)), "0.45xpeak"),  # short of the peak: queues, refusals
        # Its concurrency target above what a pod holds unqueued: a limit cycle of deep backlogs
        # behind the activator, the seconds the engine advances whole in a backlog.
        Kpa(70, 1, 2 * peak, "70"),
        runner.cases(["ours"], 2 * peak, peak, sweep=False)[0].make(),
    ]


def mismatches(workload: Workload, peak: int) -> list[str]:
    """Where the whole-second path departs from the fine one, per policy (empty: they agree)."""
    profile = load_profile("bert-base")
    found = []
    for policy_fine, policy_coarse in zip(policies(peak), policies(peak), strict=True):
        fine = engine.run(workload, profile, policy_fine, start_replicas=peak // 2, seed=3, coarse=False)
        coarse = engine.run(workload, profile, policy_coarse, start_replicas=peak // 2, seed=3)
        name = policy_fine.name
        if coarse.requests != pytest.approx(fine.requests):
            found.append(f"{name}: requests {coarse.requests} vs {fine.requests}")
        if abs(coarse.slo_attainment - fine.slo_attainment) > 0.001:
            found.append(f"{name}: attainment {coarse.slo_attainment:.5f} vs {fine.slo_attainment:.5f}")
        if coarse.usd != pytest.approx(fine.usd, rel=0.03):  # decisions may differ by a tick
            found.append(f"{name}: cost {coarse.usd:.3f} vs {fine.usd:.3f}")
        if not coarse.fine_seconds < fine.fine_seconds:
            found.append(f"{name}: {coarse.fine_seconds} fine seconds, no fewer than {fine.fine_seconds}")
    return found


def test_whole_seconds_match_the_fine_engine_within_a_tenth_of_a_point() -> None:
    trace = daily_like()
    profile = load_profile("bert-base")
    workload = build(trace, profile, factor_for_peak(trace, profile, 20), 1.0, 1, arrivals="superpose")
    assert mismatches(workload, 20) == []


@pytest.mark.skipif(not NASA.exists(), reason="the shared NASA trace is not on this machine")
def test_whole_seconds_match_the_fine_engine_on_a_nasa_afternoon() -> None:
    full = load(NASA)
    # 5 July 1995, 12:00-14:00 local: the weekday peak.
    start = 4 * 86400 + 12 * 3600
    keep = (full.arrivals >= start) & (full.arrivals < start + 7200)
    trace = Trace(full.arrivals[keep] - start, None, None, full.source)
    profile = load_profile("bert-base")
    workload = build(trace, profile, factor_for_peak(trace, profile, 30), 1.0, 1, arrivals="rate")
    assert mismatches(workload, 30) == []


def test_lindley_vectorized_equals_bin_by_bin() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 300))
        work = rng.exponential(1.0, n) * rng.choice([0.2, 1.0, 3.0])
        per_bin, bound = float(rng.uniform(0.3, 2)), float(rng.uniform(0.5, 20))
        q0 = float(rng.uniform(0, 1.5 * bound))
        q, refused = engine.lindley(work, q0, per_bin, bound)
        q_loop, refused_loop = np.empty(n), np.zeros(n)
        engine._lindley_loop(work, q0, per_bin, bound, 0, q_loop, refused_loop)
        assert np.allclose(q, q_loop, atol=1e-9)
        assert np.allclose(refused, refused_loop, atol=1e-9)


def test_ours_warm_runs_the_auto_warm_pool_that_ours_at_the_crd_defaults_does_not() -> None:
    # ours is the CRD's defaults, warm pool Off; ours-warm differs only in warmPool.mode Auto, so
    # the pair shows what the Auto pool adds or costs (they were once the same policy twice).
    profile = load_profile("bert-base")
    trace = daily_like()
    workload = build(trace, profile, factor_for_peak(trace, profile, 10), 1.0, 1)
    runs = {}
    for family in ("ours", "ours-warm"):
        (case,) = runner.cases([family], 40, 10, sweep=False)
        policy = case.make()
        runs[family] = (policy.warm_spec.mode, engine.run(workload, profile, policy, start_replicas=5, seed=3))  # type: ignore[attr-defined]
    assert runs["ours"][0] == "Off"
    assert max(runs["ours"][1].timeline["warm"]) == 0
    assert runs["ours-warm"][0] == "Auto"
    assert max(runs["ours-warm"][1].timeline["warm"]) > 0
    assert runs["ours-warm"][1].usd > runs["ours"][1].usd


def test_a_fine_chunk_computed_ahead_is_the_chunk_computed_again() -> None:
    # The engine serves a tick at a time (1-2 s for Knative and Ray Serve) and keeps the rest of
    # each 10 ms chunk for the next tick while the fleet stays the same: the same seconds as a
    # simulation that computes every tick's bins afresh from the backlog, to float rounding.
    trace = daily_like(seconds=1800)
    profile = load_profile("bert-base")
    workload = build(trace, profile, factor_for_peak(trace, profile, 20), 1.0, 1, arrivals="superpose")
    ticks = [(t, t + 2, 8 if t < 600 else 6 if t < 1200 else 9, t % 50 == 0) for t in range(0, 1800, 2)]
    kept, afresh = (engine.SecondsSimulation(workload, profile) for _ in range(2))
    reused = 0
    for start, stop, replicas, cold in ticks:
        reused += kept._pending is not None and kept._pending[1] == start
        kept.serve(start, stop, replicas, cold)
        afresh.serve(start, stop, replicas, cold)
        afresh._pending = None
    assert reused > 100  # the short ticks did reuse chunks (and the fleet changes dropped some)
    for sim in (kept, afresh):
        sim.finish()
    assert kept.fine.sum() > 300 and np.array_equal(kept.fine, afresh.fine)
    for series in ("queue_end", "queue_mean", "in_flight", "utilization"):
        np.testing.assert_allclose(getattr(kept, series), getattr(afresh, series), rtol=1e-9, atol=1e-9)
    assert kept.totals()[:4] == pytest.approx(afresh.totals()[:4], rel=1e-9)


def test_a_fleet_back_at_a_size_serves_its_stretch_from_what_it_computed_then(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whole seconds are served ahead of the next decision; a fleet that changes and comes back
    # (Knative's, tick after tick) serves the rest of the stretch it served at that size from the
    # metrics computed then. The same seconds as computing them again.
    trace = daily_like(seconds=1800)
    profile = load_profile("bert-base")
    workload = build(trace, profile, factor_for_peak(trace, profile, 20), 1.0, 1, arrivals="superpose")
    # Back and forth every tick for ten minutes, then every minute, then held to the end.
    ticks = [(t, t + 2, 12 + (t // 2) % 3, False) for t in range(0, 600, 2)]
    ticks += [(t, t + 2, 12 + (t // 60) % 3, False) for t in range(600, 1200, 2)]
    ticks += [(t, t + 2, 13, t < 1300) for t in range(1200, workload.seconds, 2)]

    def served(keep: bool) -> tuple[engine.SecondsSimulation, int]:
        sim = engine.SecondsSimulation(workload, profile)
        assert sim.batch is not None
        computed = 0
        metrics = sim.batch.expected_bin_metrics

        def counted(count_s: engine.FloatArray, replicas: int, dt: float) -> tuple[engine.FloatArray, ...]:
            nonlocal computed
            computed += 1
            return metrics(count_s, replicas, dt)

        monkeypatch.setattr(sim.batch, "expected_bin_metrics", counted)
        for start, stop, replicas, cold in ticks:
            if not keep:
                sim._whole_kept.clear()
            sim.serve(start, stop, replicas, cold)
        sim.finish()
        return sim, computed

    kept, kept_computed = served(keep=True)
    again, again_computed = served(keep=False)
    assert kept_computed < again_computed * 0.8
    assert (~kept.fine).sum() > 800  # half the seconds were served whole
    for series in ("queue_end", "queue_mean", "in_flight", "utilization", "capacity", "fine", "cold", "late"):
        assert np.array_equal(getattr(kept, series), getattr(again, series)), series
    assert kept.totals() == again.totals()


def test_a_deep_backlog_advanced_whole_is_the_fine_queue_to_the_bins_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    # Three replicas behind an unbounded queue (Ray Serve's router, Knative's activator) on a trace
    # that needs ~20: a backlog of minutes. Its seconds are advanced whole (arrivals spread evenly
    # over the bins instead of drawn Poisson): the queue, the metrics and the requests' latencies
    # are those of every second on bins, to the bins' noise.
    trace = daily_like(seconds=1800)
    profile = load_profile("bert-base")
    workload = build(trace, profile, factor_for_peak(trace, profile, 20), 1.0, 1, arrivals="superpose")
    taken: list[int] = []
    deep = engine.SecondsSimulation._deep

    def counted(self: engine.SecondsSimulation, start: int, stop: int, replicas: int, cold: bool) -> int:
        taken.append(deep(self, start, stop, replicas, cold))
        return taken[-1]

    monkeypatch.setattr(engine.SecondsSimulation, "_deep", counted)
    whole, fine = (engine.SecondsSimulation(workload, profile, coarse=coarse) for coarse in (True, False))
    for sim in (whole, fine):
        sim.set_request_path(None, unbounded=True)
        for start in range(0, workload.seconds, 2):
            sim.serve(start, start + 2, 3, start < 300)
        sim.finish()
    assert sum(taken) > workload.seconds * 0.8  # most of the run was a deep backlog, advanced whole
    backlog = fine.queue_end > 10_000
    assert backlog.sum() > workload.seconds * 0.8
    for series in ("queue_end", "queue_mean"):
        np.testing.assert_allclose(getattr(whole, series)[backlog], getattr(fine, series)[backlog], rtol=1e-3)
    for series in ("in_flight", "utilization"):
        np.testing.assert_allclose(getattr(whole, series)[backlog], getattr(fine, series)[backlog], rtol=1e-6)
    requests, rejected, within, cold_miss, p50, p99, worst, _ = whole.totals()
    assert (requests, rejected, within, cold_miss) == pytest.approx(fine.totals()[:4], rel=1e-3, abs=1.0)
    assert (p50, p99, worst) == pytest.approx(fine.totals()[4:7], rel=2e-3)


@pytest.mark.parametrize("coarse", [True, False])
def test_with_no_replica_requests_wait_behind_an_unbounded_queue_and_are_refused_behind_a_bounded_one(
    coarse: bool,
) -> None:
    # Before the first replica is ready (a fleet started at zero): behind Ray Serve's router or
    # Knative's activator every request waits until one is; without them, none has an endpoint.
    trace = daily_like(seconds=300)
    profile = load_profile("bert-base")
    workload = build(trace, profile, factor_for_peak(trace, profile, 4), 1.0, 1, arrivals="superpose")
    arrived = np.cumsum(workload.count_s[:20])
    for unbounded in (True, False):
        sim = engine.SecondsSimulation(workload, profile, coarse=coarse)
        sim.set_request_path(None, unbounded=unbounded)
        sim.serve(0, 20, 0, True)
        queued = sim.queue_end[:20].copy()
        sim.serve(20, workload.seconds, 8, False)
        sim.finish()
        requests, rejected = sim.totals()[:2]
        if unbounded:
            np.testing.assert_allclose(queued, arrived, rtol=1e-9)
            assert rejected == pytest.approx(0.0, abs=1e-6)
        else:
            assert not queued.any()
            assert rejected == pytest.approx(float(arrived[-1]), rel=1e-9)
        assert requests == pytest.approx(float(workload.count_s[: workload.trace_seconds].sum()))


def test_the_running_cold_start_p90_is_the_operators_estimate_of_every_sample_so_far() -> None:
    # The run keeps the samples sorted as they come (a million over an overloaded 14-day run) and
    # reads the operator's rule off them: the estimate of all of them, whatever the batches' sizes.
    from neuronfleet.planning import coldstart

    rng = np.random.default_rng(5)
    samples: list[float] = []
    running = engine._RunningP90()
    for batch in rng.integers(0, 40, size=300):
        # Cold starts of hundreds of seconds, now and then one many times slower (the outlier rule).
        samples += [float(x) for x in rng.gamma(9.0, 50.0, size=batch)]
        if rng.random() < 0.05:
            samples.append(float(rng.uniform(5_000, 20_000)))
        assert running.update(samples) == coldstart.estimate(samples, MIN_COLD_START_SAMPLES)
    assert len(samples) > 5_000


@pytest.mark.parametrize(
    ("accepted", "departed", "backlog", "waits"),
    [
        # Behind a backlog of 2, bin 0's arrival (the midpoint of its one) is the 2.5th of 4 served
        # in bin 0: it leaves 0.625 of the way through, having arrived halfway.
        ([1.0, 0.0], [4.0, 0.0], 2.0, [0.125, 0.0]),
        # Two arrive in bin 0; their midpoint leaves a third of the way into bin 2, behind the half
        # served in bin 0. (An empty bin's wait is that of the queue's last, and weighs nothing.)
        ([2.0, 0.0, 0.0], [0.5, 0.0, 1.5], 0.0, [2.0 + 1.0 / 3.0 - 0.5, 1.5, 0.5]),
        # Bin 1's arrival is never served: its wait is infinite.
        ([1.0, 1.0], [0.5, 0.0], 0.0, [0.5, np.inf]),
    ],
)
def test_fifo_waits_place_each_bins_midpoint_arrival_in_the_departures(
    accepted: list[float], departed: list[float], backlog: float, waits: list[float]
) -> None:
    got = engine.fifo_waits(np.array(accepted), np.array(departed), 1.0, backlog)
    served = np.isfinite(waits)
    assert list(np.isfinite(got)) == list(served)
    assert got[served] == pytest.approx(np.array(waits)[served])


@pytest.mark.parametrize("coarse", [True, False])
def test_a_backlog_left_with_no_replica_waits_for_one(coarse: bool) -> None:
    # One replica for four replicas of work fills the bounded queue (no activator or router in the
    # path); then every replica goes at once. New requests are refused; the queued ones are neither
    # served nor lost while none serves.
    trace = daily_like(seconds=300)
    profile = load_profile("bert-base")
    workload = build(trace, profile, factor_for_peak(trace, profile, 4), 1.0, 1, arrivals="superpose")
    sim = engine.SecondsSimulation(workload, profile, coarse=coarse)
    sim.serve(0, 20, 1, False)
    backlog = float(sim.queue_end[19])
    assert backlog > 100
    sim.serve(20, 30, 0, False)
    np.testing.assert_allclose(sim.queue_end[20:30], backlog, rtol=1e-12)


def test_a_latency_read_back_from_the_histogram_is_within_half_a_bin_of_it() -> None:
    # Percentiles are read from a log histogram (2,000 bins over 1 us to 10,000 s): each latency
    # comes back as its bin's centre, so within half a bin's width (0.58 %), on either side.
    latencies = np.geomspace(0.5, 60_000.0, 5000)
    back = engine._hist_value(engine._hist_index(latencies))
    half_bin = 10 ** (0.5 * 10.0 / 2000) - 1
    np.testing.assert_array_less(np.abs(back / latencies - 1), half_bin + 1e-12)
    assert (back > latencies).any() and (back < latencies).any()
