"""The instant oracle's schedule against its definition, where a latency budget exceeds one second."""

from __future__ import annotations

import numpy as np
import pytest

from neuronfleet.sim import oracle
from neuronfleet.sim.profiles import load_profile
from neuronfleet.sim.trace import Trace
from neuronfleet.sim.workload import BLOCK_SECONDS, PER_SECOND, build


def reference_schedule(work: np.ndarray, work_s: np.ndarray, window: int, dt: float) -> np.ndarray:
    """Module docstring: ceil(max over windows [t, t + L) starting in the second of work / L), at
    least the second's own work, at least 1; computed on the whole span at once."""
    padded = np.concatenate([work, np.zeros(window)])
    sums = np.convolve(padded, np.ones(window), "full")[window - 1 : window - 1 + len(work)]
    need = sums.reshape(-1, PER_SECOND).max(axis=1) / (window * dt)
    needed: np.ndarray = np.maximum(np.ceil(np.maximum(need, work_s) - 1e-9), 1).astype(np.int64)
    return needed


@pytest.mark.parametrize("slo_ms", [1000.0, 5000.0])
def test_instant_oracle_windows_reach_past_a_block_boundary(slo_ms: float) -> None:
    # A quiet LLM workload with a burst 1.5 s after the first 600 s block ends. With a 5 s SLO the
    # windows starting in the block's last seconds reach the burst; the schedule used to see only
    # one second past the block and gave those seconds less than their windows need.
    profile = load_profile("llama-2-7b").model_copy(update={"slo_ms": slo_ms})
    arrivals = np.sort(np.concatenate([np.arange(0.0, 1200.0, 5.0), np.full(40, BLOCK_SECONDS + 1.5)]))
    workload = build(Trace(arrivals, None, None, "burst"), profile, 1.0, 0.0, 1, arrivals="replicate")
    budget = profile.slo_ms / 1e3 - oracle._service_allowance(workload, profile)
    window = max(1, int(max(workload.dt, budget) / workload.dt))
    assert (window > PER_SECOND) == (slo_ms > 1000)
    expected = reference_schedule(workload.work, workload.work_s, window, workload.dt)
    np.testing.assert_array_equal(oracle.initial_schedule(workload, profile), expected)
