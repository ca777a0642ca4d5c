"""A trace turned into per-bin arrivals and work for one profile (shared by every policy of a run).

Work is measured in replica-seconds: the time one replica needs for the request at full batch.
For a batch profile every request costs ``1 / max throughput``; for an LLM profile a request holds
one of the replica's ``slots`` for prefill plus decode, i.e. ``service_time / slots`` replica-seconds.

Token-less (batch) profiles are binned straight from the original trace
(:func:`neuronfleet.sim.trace.binned_counts`), so a rate factor of tens of thousands costs nothing;
LLM profiles materialize every scaled request, because each one's tokens set its own service and
first-token times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from neuronfleet.sim.profiles import Profile
from neuronfleet.sim.trace import Trace, binned_counts, scale

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Width of a time bin: the resolution of queueing delays (well under any SLO of the profiles).
BIN_SECONDS = 0.01
#: Simulated time after the last arrival, so queues drain and late requests are accounted.
TAIL_SECONDS = 120.0


@dataclass(frozen=True)
class Workload:
    """Arrivals and work per bin, plus per-request first-token times for LLM profiles."""

    dt: float
    bins: int
    count: FloatArray
    work: FloatArray
    mean_work: float
    #: Mean seconds a request occupies the replica (for in-flight counts by Little's law).
    mean_service_seconds: float
    duration: float
    factor: float
    request_bin: IntArray | None = None
    request_latency: FloatArray | None = None

    @property
    def requests(self) -> float:
        return float(self.count.sum())


def _llm_times(trace: Trace, profile: Profile) -> tuple[FloatArray, FloatArray]:
    """Per request: seconds to first token, and seconds the request holds a slot."""
    assert profile.llm is not None
    llm = profile.llm
    n = len(trace)
    ctx = trace.context_tokens if trace.context_tokens is not None else np.full(n, llm.default_context_tokens)
    gen = trace.generated_tokens if trace.generated_tokens is not None else np.full(n, llm.default_generated_tokens)
    first = (llm.ttft_ms + ctx * llm.prefill_ms_per_token) / 1000.0
    busy = first + gen * llm.decode_ms_per_token / 1000.0
    return first, busy


def work_per_request(trace: Trace, profile: Profile) -> FloatArray:
    """Replica-seconds each request of the (unscaled) trace needs."""
    if profile.kind == "batch":
        best = max(p.throughput_per_s for p in profile.efficient_batches())
        return np.full(len(trace), 1.0 / best)
    assert profile.llm is not None
    return _llm_times(trace, profile)[1] / profile.llm.slots


def factor_for_peak(trace: Trace, profile: Profile, peak_replicas: float, window: float = 60.0) -> float:
    """The rate factor at which the busiest ``window`` of the trace needs ``peak_replicas`` replicas."""
    per_second = np.bincount(trace.arrivals.astype(np.int64), weights=work_per_request(trace, profile), minlength=1)
    width = max(1, min(len(per_second), round(window)))
    peak = float(np.convolve(per_second, np.ones(width) / width, mode="valid").max())
    if peak <= 0:
        raise ValueError("the trace has no work to scale")
    return peak_replicas / peak


def build(trace: Trace, profile: Profile, factor: float, jitter: float, seed: int) -> Workload:
    """Bin the trace scaled by ``factor`` (copies jittered over ``jitter`` s) for ``profile``."""
    dt = BIN_SECONDS
    duration = trace.duration + jitter
    bins = math.ceil((duration + TAIL_SECONDS) / dt)
    if profile.kind == "batch":
        best = max(p.throughput_per_s for p in profile.efficient_batches())
        count = binned_counts(trace, factor, jitter, seed, dt, bins)
        mean_latency = min(p.latency_ms for p in profile.efficient_batches()) / 1000.0
        return Workload(dt, bins, count, count / best, 1.0 / best, mean_latency, duration, factor)
    assert profile.llm is not None
    scaled = scale(trace, factor, jitter, seed)
    first, busy = _llm_times(scaled, profile)
    request_bin = np.minimum((scaled.arrivals / dt).astype(np.int64), bins - 1)
    count = np.bincount(request_bin, minlength=bins).astype(np.float64)
    work = np.asarray(np.bincount(request_bin, weights=busy / profile.llm.slots, minlength=bins), dtype=np.float64)
    return Workload(
        dt,
        bins,
        count,
        work,
        float(busy.mean() / profile.llm.slots),
        float(busy.mean()),
        duration,
        factor,
        request_bin,
        first,
    )
