"""Timing script (not a test, not a benchmark result): warmpool.plan() per call as its history grows.

Feeds the Auto warm pool one decision every 15 s (a sawtooth demand) with pod cold starts of 5 min
to 10 h, and times one plan() call after 500 to 10,000 decisions. Before the history was capped
(``warmpool.MAX_HISTORY_SECONDS`` / ``MAX_HISTORY_SAMPLES``) a long cold start kept four times it
in history and the time per call grew with it; capped, it stays flat once the cap is reached.
Run: ``PYTHONPATH=operator .venv/bin/python hack/time_warmpool_plan.py``.
"""

from __future__ import annotations

import time

from neuronfleet.api.v1alpha1 import WarmPoolSpec
from neuronfleet.planning import warmpool

STEP_SECONDS = 15.0
FED = (500, 1000, 2000, 5000, 10000)
COLD_STARTS = (300.0, 1800.0, 3 * 3600.0, 10 * 3600.0)
CALLS = 50


def per_call_ms(pod_seconds: float, fed: int) -> tuple[float, int]:
    """Milliseconds per plan() call after ``fed`` decisions, and the history's length then."""
    spec = WarmPoolSpec(mode="Auto")
    cold = warmpool.ColdStart(pod_seconds, 180.0)
    state = warmpool.WarmPoolState()
    for i in range(fed):
        state = warmpool.plan(spec, state, 2 + (i // 20) % 6, i * STEP_SECONDS, cold, active=8, max_active=40).new_state
    now = fed * STEP_SECONDS
    start = time.perf_counter()
    for _ in range(CALLS):
        warmpool.plan(spec, state, 5, now, cold, active=8, max_active=40)
    return (time.perf_counter() - start) / CALLS * 1000, len(state.history)


def main() -> None:
    print("pod cold start | " + " | ".join(f"{n} fed" for n in FED))
    for pod_seconds in COLD_STARTS:
        cells = [per_call_ms(pod_seconds, n) for n in FED]
        print(f"{pod_seconds:>8.0f} s | " + " | ".join(f"{ms:6.2f} ms ({kept})" for ms, kept in cells))


if __name__ == "__main__":
    main()
