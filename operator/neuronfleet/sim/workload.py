"""A trace turned into arrivals and work for one profile (shared by every policy of a run).

Work is measured in replica-seconds: the time one replica needs for the request at full batch.
For a batch profile every request costs ``1 / max throughput``; for an LLM profile a request holds
one of the replica's ``slots`` for prefill plus decode, i.e. ``service_time / slots`` replica-seconds.

Arrivals models (``arrivals``; how a small trace becomes a fleet's traffic at ``factor`` = K times
its rate; see ``../shared/traces/README.md``):

- ``superpose`` (the CLI's default): K independent copies of the trace, each shifted by a seeded
  uniform offset in ``[0, spread)`` (default :data:`SUPERPOSE_SPREAD_SECONDS`) and wrapped around
  the trace's length: K tenants of the same kind, in the same time zone, whose bursts are
  independent. The shape slower than the spread (daily cycle, trends) is kept and second-scale
  noise shrinks roughly as ``1/sqrt(K)`` (offsets spread over the whole trace would flatten the
  daily cycle too: tenants of one kind share it). The sum of
  K shifted histograms is the circular convolution of the trace's histogram ``h`` with the
  histogram ``g`` of the K offsets, computed with one FFT pair in ``O(P log P)`` for ``P`` bins,
  whatever K (tens of thousands of copies cost what one does); both histograms hold integers, so
  rounding the result is exact. A fractional K adds one more copy thinned binomially.
- ``rate``: a Poisson process at K times the trace's rate averaged over ``rate_window`` seconds
  (a centred box), piecewise constant per second: the shape above the window, nothing below it.
- ``replicate``: each arrival copied K times within ``jitter`` seconds (the correlated-burst stress
  case: every original request becomes a pulse of K requests).

Resolution. A workload keeps per-second counts and work (what the engine and the policies' metrics
use) and, on demand, counts per ``BIN_SECONDS`` bin inside a second (what the queue needs near
saturation). Short workloads materialize every fine bin: ``replicate`` keeps its sub-second pulses,
``superpose`` offsets are drawn on fine bins. Long ones (more than :data:`MATERIALIZE_MAX_BINS`)
are stored per second only, and a second's arrivals are spread uniformly over its fine bins (a
seeded multinomial, generated block by block): exact for ``rate`` (Poisson within the second),
and for ``superpose`` with whole-second offsets it is what a trace of 1 s resolution such as
NASA's means by "spread within the second".

A workload runs :data:`TAIL_SECONDS` past its last arrival so that queues drain and late requests
are counted; :attr:`Workload.trace_seconds` marks where the arrivals end, and costs with them.

LLM profiles materialize every scaled request, because each one's tokens set its own service and
first-token times (superposed copies keep their tokens; ``rate`` draws each arrival's tokens from a
seeded pick of the trace's requests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from neuronfleet.sim.profiles import Profile
from neuronfleet.sim.trace import Trace, binned_counts, scale

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

Arrivals = Literal["superpose", "rate", "replicate"]
ARRIVALS: tuple[Arrivals, ...] = ("superpose", "rate", "replicate")

#: Width of a fine time bin: the resolution of queueing delays (well under any SLO of the profiles).
BIN_SECONDS = 0.01
#: Fine bins per second.
PER_SECOND = 100
#: Simulated time after the last arrival, so queues drain and late requests are accounted. It is
#: not billed (:attr:`Workload.trace_seconds`): what a fleet does once the traffic has ended is
#: no cost of serving it.
TAIL_SECONDS = 120.0
#: Default window of the ``rate`` model.
RATE_MODEL_WINDOW_SECONDS = 60.0
#: Default range of the ``superpose`` copies' offsets.
SUPERPOSE_SPREAD_SECONDS = 300.0
#: Above this many fine bins (~11 h) a workload is kept per second and refined on demand.
MATERIALIZE_MAX_BINS = 4_000_000
#: Seconds per generated block of fine bins (for workloads kept per second).
BLOCK_SECONDS = 600
#: Bytes of generated blocks a workload keeps over all the processes that run it (see
#: :class:`BlockCache`; :func:`neuronfleet.sim.runner.run_cases` gives each worker its share).
#: Counts are kept as the smallest unsigned integers that hold them: 14 days of a fleet at ~1,500
#: arrivals per bin take ~240 MB.
BLOCK_CACHE_BYTES = 512 * 2**20
#: Blocks drawn beyond the budget that are kept too, the newest (a run reads a block many times in a row).
RECENT_BLOCKS = 8

UIntArray = npt.NDArray[np.unsignedinteger[Any]]


class BlockCache:
    """The fine-bin blocks a workload has drawn: the first ones up to ``budget`` bytes, kept for the
    runs that follow (the runs of a sweep read the same blocks: drawing them again for every run
    was a tenth of an overloaded run's time), and the :data:`RECENT_BLOCKS` newest beyond it. The
    first ones rather than the newest: a run reads the blocks in order, so a budget short of the
    whole trace still saves its share, where keeping the newest would save nothing."""

    def __init__(self, budget: int = BLOCK_CACHE_BYTES) -> None:
        self.budget = budget
        self.kept: dict[int, UIntArray] = {}
        self.kept_bytes = 0
        self.recent: dict[int, UIntArray] = {}

    def get(self, block: int) -> UIntArray | None:
        found = self.kept.get(block)
        return found if found is not None else self.recent.get(block)

    def put(self, block: int, data: UIntArray) -> None:
        if self.kept_bytes + data.nbytes <= self.budget:
            self.kept[block] = data
            self.kept_bytes += data.nbytes
            return
        if len(self.recent) >= RECENT_BLOCKS:
            self.recent.pop(next(iter(self.recent)))
        self.recent[block] = data


#: The most items a workload materializes (an LLM workload's scaled requests, superposed copies'
#: offsets): refuse what would not fit in memory (see :func:`check_materialized`).
MAX_MATERIALIZED = 20_000_000
#: LLM workloads materialize each request (the limit of :func:`check_materialized`).
MAX_LLM_REQUESTS = MAX_MATERIALIZED


@dataclass(frozen=True)
class Workload:
    """Arrivals and work per second (and per fine bin on demand), plus LLM per-request times."""

    dt: float
    seconds: int
    count_s: FloatArray
    work_s: FloatArray
    mean_work: float
    #: Mean seconds a request occupies the replica (for in-flight counts by Little's law).
    mean_service_seconds: float
    duration: float
    factor: float
    #: Seconds ``[0, trace_seconds)`` hold every arrival: the span costs are billed over (the
    #: :data:`TAIL_SECONDS` after it are simulated, so late requests count, but not billed).
    trace_seconds: int
    arrivals: str = "replicate"
    seed: int = 0
    #: Fine-bin counts and work of the whole span (None: generated per block on demand).
    fine_count: FloatArray | None = None
    fine_work: FloatArray | None = None
    request_bin: IntArray | None = None
    request_latency: FloatArray | None = None
    block_cache: BlockCache = field(default_factory=BlockCache, compare=False, repr=False)

    @property
    def requests(self) -> float:
        return float(self.count_s.sum())

    @property
    def bins(self) -> int:
        return self.seconds * PER_SECOND

    @property
    def materialized(self) -> bool:
        return self.fine_count is not None

    @property
    def count(self) -> FloatArray:
        """Arrivals per fine bin of the whole span (materialized workloads only)."""
        if self.fine_count is None:
            raise ValueError("this workload is kept per second; use fine_counts(first, stop)")
        return self.fine_count

    @property
    def work(self) -> FloatArray:
        """Work per fine bin of the whole span (materialized workloads only)."""
        if self.fine_work is not None:
            return self.fine_work
        return self.count * self.mean_work

    def fine_counts(self, first: int, stop: int) -> FloatArray:
        """Arrivals per fine bin of seconds ``[first, stop)``."""
        if self.fine_count is not None:
            return self.fine_count[first * PER_SECOND : stop * PER_SECOND]
        parts = []
        for block in range(first // BLOCK_SECONDS, (stop - 1) // BLOCK_SECONDS + 1):
            data = self._block(block)
            lo = max(first, block * BLOCK_SECONDS) - block * BLOCK_SECONDS
            hi = min(stop, (block + 1) * BLOCK_SECONDS) - block * BLOCK_SECONDS
            parts.append(data[lo * PER_SECOND : hi * PER_SECOND])
        return (np.concatenate(parts) if len(parts) > 1 else parts[0]).astype(np.float64)

    def fine_works(self, first: int, stop: int) -> FloatArray:
        """Work per fine bin of seconds ``[first, stop)``."""
        if self.fine_work is not None:
            return self.fine_work[first * PER_SECOND : stop * PER_SECOND]
        return self.fine_counts(first, stop) * self.mean_work

    def _block(self, block: int) -> UIntArray:
        """Arrivals per fine bin of one block's seconds (drawn once while :class:`BlockCache` keeps it)."""
        cached = self.block_cache.get(block)
        if cached is not None:
            return cached
        lo = block * BLOCK_SECONDS
        hi = min(self.seconds, lo + BLOCK_SECONDS)
        # Seeded by block, so a second's bins do not depend on which seconds were asked for first.
        rng = np.random.default_rng((self.seed, 0xB10C, block))
        counts = self.count_s[lo:hi].astype(np.int64)
        spread = rng.multinomial(counts, np.full(PER_SECOND, 1.0 / PER_SECOND))
        data = np.zeros(BLOCK_SECONDS * PER_SECOND, dtype=np.min_scalar_type(max(1, int(counts.max(initial=0)))))
        data[: (hi - lo) * PER_SECOND] = spread.ravel()
        self.block_cache.put(block, data)
        return data


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
    """The rate factor at which the mean work of the trace's busiest ``window`` keeps ``peak_replicas``
    replicas 100 % busy at full batch (LLM: every slot busy). The SLO needs more at the peak
    (bursts within the window, a latency budget shorter than it): the oracles' schedule says how many."""
    per_second = np.bincount(trace.arrivals.astype(np.int64), weights=work_per_request(trace, profile), minlength=1)
    width = max(1, min(len(per_second), round(window)))
    peak = float(np.convolve(per_second, np.ones(width) / width, mode="valid").max())
    if peak <= 0:
        raise ValueError("the trace has no work to scale")
    return peak_replicas / peak


def check_materialized(count: float, what: str) -> None:
    """ValueError if a workload would materialize more than :data:`MAX_MATERIALIZED` items (one
    rule for every arrivals model and profile kind: a large --peak-replicas or --rate-factor)."""
    if not count <= MAX_MATERIALIZED:
        raise ValueError(
            f"{count:,.0f} {what} is more than a workload can hold ({MAX_MATERIALIZED:,}); "
            "use a shorter --duration or fewer replicas (--peak-replicas, --rate-factor)"
        )


def _copies(factor: float, rng: np.random.Generator) -> tuple[int, float]:
    whole = math.floor(factor)
    return whole, factor - whole


def superpose_counts(histogram: FloatArray, factor: float, spread_bins: int, rng: np.random.Generator) -> FloatArray:
    """``histogram`` (arrivals per bin over one period) summed over K copies, each shifted by a
    uniform offset in ``[0, spread_bins)`` bins and wrapped.

    ``sum_k h[(i - o_k) mod P]`` is the circular convolution of ``h`` with the offsets' histogram
    ``g``: one real FFT pair, independent of K (see the module docstring).
    """
    period = len(histogram)
    spread_bins = max(1, min(period, spread_bins))
    check_materialized(factor, "superposed copies of the trace")
    whole, extra = _copies(factor, rng)
    offsets = np.bincount(rng.integers(0, spread_bins, size=whole), minlength=period).astype(np.float64)
    total = np.zeros(period)
    if whole:
        spectrum = np.fft.rfft(histogram) * np.fft.rfft(offsets)
        total = np.rint(np.fft.irfft(spectrum, n=period))
        np.maximum(total, 0.0, out=total)
    if extra > 0:
        thinned = rng.binomial(histogram.astype(np.int64), extra).astype(np.float64)
        total += np.roll(thinned, int(rng.integers(0, spread_bins)))
    return total


def rate_counts(histogram_s: FloatArray, factor: float, window: float, rng: np.random.Generator) -> FloatArray:
    """Per-second Poisson counts at ``factor`` x the per-second ``histogram_s`` averaged over ``window`` s."""
    # Any window of twice the histogram or more averages every second over the whole histogram:
    # bounding it so keeps a huge (finite) window from overflowing the index arithmetic.
    width = max(1, round(min(window, 2.0 * len(histogram_s) + 2)))
    cumulative = np.concatenate(([0.0], np.cumsum(histogram_s)))
    index = np.arange(len(histogram_s))
    half = width // 2
    lo = np.clip(index - half, 0, len(histogram_s))
    hi = np.clip(index - half + width, 0, len(histogram_s))
    smoothed = (cumulative[hi] - cumulative[lo]) / np.maximum(hi - lo, 1)
    return np.asarray(rng.poisson(factor * smoothed), dtype=np.float64)


def _spread_requests(trace: Trace, picks: IntArray, arrivals: FloatArray) -> Trace:
    order = np.argsort(arrivals, kind="stable")
    pick = picks[order]
    return Trace(
        arrivals[order],
        trace.context_tokens[pick] if trace.context_tokens is not None else None,
        trace.generated_tokens[pick] if trace.generated_tokens is not None else None,
        trace.source,
    )


def scaled_requests(
    trace: Trace, factor: float, arrivals: Arrivals, jitter: float, seed: int, rate_window: float, spread: float
) -> Trace:
    """The scaled trace as individual requests (LLM profiles), under the given arrivals model."""
    check_materialized(factor * len(trace), "scaled requests")
    if arrivals == "replicate":
        return scale(trace, factor, jitter, seed)
    rng = np.random.default_rng(seed)
    period = max(1.0, trace.whole_seconds)
    if arrivals == "superpose":
        whole, extra = _copies(factor, rng)
        span = min(period, spread)
        offsets = rng.random(whole) * span
        index = np.tile(np.arange(len(trace)), whole)
        times = (np.tile(trace.arrivals, whole) + np.repeat(offsets, len(trace))) % period
        if extra > 0:
            keep = np.flatnonzero(rng.random(len(trace)) < extra)
            index = np.concatenate([index, keep])
            times = np.concatenate([times, (trace.arrivals[keep] + rng.random() * span) % period])
        return _spread_requests(trace, index, times)
    histogram = np.bincount(trace.arrivals.astype(np.int64), minlength=int(period)).astype(np.float64)
    per_second = rate_counts(histogram, factor, rate_window, rng).astype(np.int64)
    times = np.repeat(np.arange(len(per_second), dtype=np.float64), per_second) + rng.random(int(per_second.sum()))
    picks = rng.integers(0, len(trace), size=len(times))
    return _spread_requests(trace, picks, times)


def _per_second(fine: FloatArray, seconds: int) -> FloatArray:
    padded = np.zeros(seconds * PER_SECOND)
    padded[: min(len(fine), len(padded))] = fine[: len(padded)]
    return np.asarray(padded.reshape(seconds, PER_SECOND).sum(axis=1), dtype=np.float64)


def build(
    trace: Trace,
    profile: Profile,
    factor: float,
    jitter: float,
    seed: int,
    *,
    arrivals: Arrivals = "replicate",
    rate_window: float = RATE_MODEL_WINDOW_SECONDS,
    spread: float = SUPERPOSE_SPREAD_SECONDS,
    materialize: bool | None = None,
) -> Workload:
    """Bin the trace at ``factor`` x its rate for ``profile`` under the ``arrivals`` model.

    ``materialize`` forces (True) or forbids (False) keeping every fine bin; by default only
    workloads up to :data:`MATERIALIZE_MAX_BINS` are materialized.
    """
    if arrivals not in ARRIVALS:
        raise ValueError(f"unknown arrivals model {arrivals!r}; known: {', '.join(ARRIVALS)}")
    if factor <= 0:
        raise ValueError(f"rate factor must be positive, got {factor}")
    dt = BIN_SECONDS
    span = trace.duration + (jitter if arrivals == "replicate" else 0.0)
    if arrivals != "replicate":
        span = max(1.0, trace.whole_seconds)
    seconds = math.ceil(span + TAIL_SECONDS)
    # Arrivals fall before the span's end (superposed and rate ones wrap within it, a replicated
    # copy lands in [t, t + jitter)), except a copy without jitter: at the end itself.
    trace_seconds = math.floor(span) + 1 if arrivals == "replicate" and jitter == 0 else math.ceil(span)
    fine_ok = seconds * PER_SECOND <= MATERIALIZE_MAX_BINS if materialize is None else materialize
    common = {
        "duration": span,
        "factor": factor,
        "trace_seconds": min(seconds, trace_seconds),
        "arrivals": arrivals,
        "seed": seed,
    }
    if profile.kind == "batch":
        best = max(p.throughput_per_s for p in profile.efficient_batches())
        mean_latency = min(p.latency_ms for p in profile.efficient_batches()) / 1000.0
        rng = np.random.default_rng(seed)
        fine: FloatArray | None = None
        if arrivals == "replicate":
            if fine_ok:
                fine = binned_counts(trace, factor, jitter, seed, dt, seconds * PER_SECOND)
                count_s = _per_second(fine, seconds)
            else:
                count_s = binned_counts(trace, factor, 1.0, seed, 1.0, seconds)
        elif arrivals == "superpose":
            period_s = int(span)
            if fine_ok:
                h = np.bincount(
                    np.minimum((trace.arrivals / dt).astype(np.int64), period_s * PER_SECOND - 1),
                    minlength=period_s * PER_SECOND,
                ).astype(np.float64)
                fine = np.zeros(seconds * PER_SECOND)
                fine[: period_s * PER_SECOND] = superpose_counts(h, factor, round(spread * PER_SECOND), rng)
                count_s = _per_second(fine, seconds)
            else:
                per_s = np.bincount(np.minimum(trace.arrivals.astype(np.int64), period_s - 1), minlength=period_s)
                count_s = np.zeros(seconds)
                count_s[:period_s] = superpose_counts(per_s.astype(np.float64), factor, round(spread), rng)
        else:
            period_s = int(span)
            per_s = np.bincount(np.minimum(trace.arrivals.astype(np.int64), period_s - 1), minlength=period_s)
            count_s = np.zeros(seconds)
            count_s[:period_s] = rate_counts(per_s.astype(np.float64), factor, rate_window, rng)
        workload = Workload(
            dt,
            seconds,
            count_s,
            count_s / best,
            1.0 / best,
            mean_latency,
            fine_count=fine,
            **common,  # type: ignore[arg-type]
        )
        if fine_ok and fine is None:
            # Uniform within each second, materialized once for the whole (short) span.
            blocks = [
                workload.fine_counts(s, min(seconds, s + BLOCK_SECONDS)) for s in range(0, seconds, BLOCK_SECONDS)
            ]
            workload = replace(workload, fine_count=np.concatenate(blocks), block_cache=BlockCache())
        return workload
    assert profile.llm is not None
    scaled = scaled_requests(trace, factor, arrivals, jitter, seed, rate_window, spread)
    first, busy = _llm_times(scaled, profile)
    bins = seconds * PER_SECOND
    request_bin = np.minimum((scaled.arrivals / dt).astype(np.int64), bins - 1)
    count = np.bincount(request_bin, minlength=bins).astype(np.float64)
    work = np.asarray(np.bincount(request_bin, weights=busy / profile.llm.slots, minlength=bins), dtype=np.float64)
    return Workload(
        dt,
        seconds,
        _per_second(count, seconds),
        _per_second(work, seconds),
        float(busy.mean() / profile.llm.slots),
        float(busy.mean()),
        fine_count=count,
        fine_work=work,
        request_bin=request_bin,
        request_latency=first,
        **common,  # type: ignore[arg-type]
    )
