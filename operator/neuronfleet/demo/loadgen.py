"""The live demo's load: an open-loop HTTP client replaying a trace slice's arrival shape, measured at the client.

- **Arrivals** (:func:`superposed_arrivals`): K independent copies of the trace slice, each seeing
  the trace shifted by its own seeded offset in ``[0, window)`` seconds (K tenants of the same
  kind, as ``../shared/traces/README.md`` describes): the shape above ``window`` is the trace's,
  second-scale noise shrinks roughly as ``1/sqrt(K)``. Offsets are bounded (not spread over the
  whole trace) so that a slice of a few minutes keeps its rise and fall.
- **Open loop** (:class:`OpenLoopClient`): each request is sent at its arrival time whether or
  not earlier ones were answered (a closed loop would slow down with the server and hide
  overload). Bounded: at most ``max_requests``, for at most ``max_seconds``, at most
  ``max_outstanding`` at once (beyond it a request is counted ``not_sent``, never queued), each
  with a timeout; 127.0.0.1 only. Its HTTP is :mod:`neuronfleet.sandbox.http1`'s keep-alive client
  on uvloop, sending the same request bytes each time: its CPU is taken from the servers it measures.
- **Outcomes**, every request exactly one: ``ok`` (200), ``rejected`` (429: refused by a full
  queue), ``unavailable`` (503), ``error`` (another status), ``refused`` (the connection was not
  accepted: nothing was taken), ``lost`` (the request was sent and never answered: the server
  went away mid-request or the timeout ran out; through the sandbox's router, which like
  kube-proxy never re-sends a request a server took, that is its 502 for a request a server
  dropped and its 504 for one not answered in time), ``not_sent`` (the client's own bound).
- **The client's honesty**: latency is taken from the scheduled send time, so a late client
  counts its own delay against itself, and the event loop's lag is sampled (``loop_lag_*``)
  along with the client process's CPU seconds: if the client is the bottleneck the figures say so.
  The client process asks for a higher scheduling priority (``nice -5``, when allowed), so that on a
  machine short of CPU it is the servers, not the measuring client, that wait.
- **The machine's honesty**: on a virtual machine the hypervisor can take CPU time from every
  process at once (``steal`` in ``/proc/stat``, read with psutil each second). The totals say how much
  it took, and the SLO attainment of the requests scheduled in *quiet* seconds (the hypervisor took
  under ``QUIET_STEAL_SHARE`` of the machine), so a miss caused by the host can be told from one
  caused by the fleet.

Run in its own process (``python -m neuronfleet.demo.loadgen``) so that its event loop shares
nothing with the sandbox or the operator; it prints one JSON line per second (progress) and
writes every request's (scheduled time, latency, outcome) to ``--out`` at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import uvloop

from neuronfleet.sandbox import http1

FloatArray = npt.NDArray[np.float64]

OUTCOMES = ("ok", "rejected", "unavailable", "error", "refused", "lost", "not_sent")
#: Outcomes by HTTP status; any other status is an ``error``. 502 and 504 are the sandbox router's
#: answers for a request its endpoint took and then dropped or did not answer in time: lost.
STATUS_OUTCOMES = {200: "ok", 429: "rejected", 503: "unavailable", 502: "lost", 504: "lost"}
#: Codes of the per-request outcome array (index into OUTCOMES).
OUTCOME_CODE = {name: i for i, name in enumerate(OUTCOMES)}
LOOP_LAG_PERIOD_S = 0.05
#: Niceness increment of the client process (negative: scheduled before the servers it measures).
CLIENT_NICE = -5
#: A second is quiet when the hypervisor took less than this share of the machine's CPU time (on 2
#: cores: 5 % of one core). Above it, requests wait for CPU that no process on the machine had.
QUIET_STEAL_SHARE = 0.025


def superposed_arrivals(
    arrivals: FloatArray, start: float, duration: float, copies: int, window: float, seed: int
) -> FloatArray:
    """Arrival times in ``[0, duration)`` of ``copies`` copies of the trace, each shifted by a seeded offset.

    ``arrivals`` are the trace's times in seconds (sorted). Copy k takes the trace's arrivals in
    ``[start - o_k, start - o_k + duration)`` with ``o_k`` uniform in ``[0, window)``; the copies'
    arrivals are merged. The mean rate over the slice is ``copies`` times the trace's around it.
    """
    if copies < 1 or duration <= 0 or window < 0:
        raise ValueError("copies >= 1, duration > 0 and window >= 0 are required")
    rng = np.random.default_rng(seed)
    parts = []
    for offset in rng.uniform(0.0, window, size=copies):  # all 0 for a window of 0
        begin = start - offset
        lo, hi = np.searchsorted(arrivals, [begin, begin + duration], side="left")
        parts.append(arrivals[lo:hi] - begin)
    return np.sort(np.concatenate(parts)).astype(np.float64)  # copies >= 1: never an empty list


def rate_per_second(times: FloatArray, duration: float) -> FloatArray:
    """Arrivals per whole second of ``[0, duration)``."""
    seconds = max(1, math.ceil(duration))
    counts = np.bincount(np.clip(times.astype(np.int64), 0, seconds - 1), minlength=seconds)
    return counts.astype(np.float64)


def check_local(url: str) -> None:
    """The demo's load goes to this machine only."""
    host = urllib.parse.urlsplit(url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"the demo's load generator sends to 127.0.0.1 only, not {host!r} ({url})")


@dataclass
class Progress:
    """One second of the run as the client saw it (printed as a JSON line)."""

    t: float
    sent: int
    outstanding: int
    counts: dict[str, int]
    #: Latency quantiles (ms) of the requests answered ok in the last second.
    p50_ms: float | None
    p99_ms: float | None
    loop_lag_max_ms: float
    #: Share of the machine's CPU time the hypervisor took in this second.
    steal_share: float = 0.0


@dataclass
class ClientTotals:
    """The whole run: counts by outcome, latency figures of ok answers, the client's own load."""

    scheduled: int
    counts: dict[str, int]
    slo_ms: float
    within_slo: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    wall_s: float
    client_cpu_s: float
    loop_lag_p99_ms: float
    loop_lag_max_ms: float
    send_lateness_p99_ms: float
    peak_outstanding: int
    #: Share of the machine's CPU time the hypervisor took (steal) during the run, and the share busy.
    machine_steal_share: float = 0.0
    machine_busy_share: float = 0.0
    #: Requests scheduled in quiet seconds (steal under QUIET_STEAL_SHARE); those of them ok within the SLO.
    quiet_requests: int = 0
    quiet_within_slo: int = 0
    timeline: list[dict[str, Any]] = field(default_factory=list)

    @property
    def answered(self) -> int:
        return sum(self.counts[k] for k in ("ok", "rejected", "unavailable", "error"))

    @property
    def slo_attainment(self) -> float:
        """Share of the scheduled requests answered ok within the SLO (anything else is a miss)."""
        return self.within_slo / self.scheduled if self.scheduled else 1.0


@dataclass(frozen=True)
class MachineSecond:
    """One second of the whole machine's CPU time, as shares of it (all cores)."""

    #: End of the second, on the client's clock (seconds since its start).
    t: float
    steal_share: float
    busy_share: float


class MachineCpu:
    """The machine's CPU time counters (psutil: ``/proc/stat`` on Linux), read as shares between readings."""

    def __init__(self) -> None:
        import psutil  # imported here: the arrival functions above are used without it

        # The platform's named tuple of float counters (its fields differ by OS).
        self._cpu_times: Callable[[], Any] = psutil.cpu_times
        self._last = self._read()

    def _read(self) -> tuple[float, float, float]:
        times = self._cpu_times()
        total = float(sum(times))
        # steal exists on Linux only; guest time is already counted in user (so not in the total twice).
        steal = float(getattr(times, "steal", 0.0))
        idle = float(times.idle) + float(getattr(times, "iowait", 0.0))
        guest = float(getattr(times, "guest", 0.0)) + float(getattr(times, "guest_nice", 0.0))
        total -= guest
        return total, steal, total - idle - steal

    def shares(self) -> tuple[float, float]:
        """(steal share, busy share) of the machine's CPU time since the last call (or since construction)."""
        (total, steal, busy), (total0, steal0, busy0) = self._read(), self._last
        span = total - total0
        if span <= 0:
            return 0.0, 0.0
        self._last = (total, steal, busy)
        # The counters are float sums of several fields: a share can read 1 + 4e-11 by rounding.
        return min(1.0, (steal - steal0) / span), min(1.0, (busy - busy0) / span)


def quiet_seconds_attainment(
    times: FloatArray, within_slo: npt.NDArray[np.bool_], seconds: list[MachineSecond], quiet: float = QUIET_STEAL_SHARE
) -> tuple[int, int]:
    """Requests scheduled in quiet seconds, and how many of them were within the SLO.

    A request at time ``t`` belongs to the first reading that ends after ``t``; a request after the
    last reading is in no second (left out of both counts).
    """
    if not seconds:
        return 0, 0
    ends = np.array([s.t for s in seconds])
    steal = np.array([s.steal_share for s in seconds])
    index = np.searchsorted(ends, times, side="right")
    inside = index < len(ends)
    quiet_mask = inside & (steal[np.minimum(index, len(ends) - 1)] < quiet)
    return int(quiet_mask.sum()), int((quiet_mask & within_slo).sum())


class OpenLoopClient:
    """Sends one request per arrival time, open loop, and records each one's outcome and latency."""

    def __init__(
        self,
        url: str,
        body: bytes,
        arrivals: FloatArray,
        *,
        slo_ms: float,
        max_requests: int,
        max_seconds: float,
        max_outstanding: int = 2000,
        timeout_s: float = 30.0,
        progress: Callable[[Progress], None] | None = None,
    ) -> None:
        check_local(url)
        if len(arrivals) > max_requests:
            raise ValueError(f"{len(arrivals)} arrivals exceed the bound of {max_requests} requests")
        if len(arrivals) and float(arrivals[-1]) > max_seconds:
            raise ValueError(f"arrivals run to {float(arrivals[-1]):.0f} s, beyond the bound of {max_seconds:.0f} s")
        self.url, self.body, self.arrivals = url, body, arrivals
        self.slo_ms = slo_ms
        self.max_seconds = max_seconds
        self.max_outstanding = max_outstanding
        self.timeout_s = timeout_s
        self.progress = progress
        n = len(arrivals)
        self.latency_ms = np.full(n, np.nan)
        self.outcome = np.full(n, OUTCOME_CODE["not_sent"], dtype=np.int8)
        self.lateness_ms = np.zeros(n)
        #: When each answer came, in seconds since the run began (NaN: none came).
        self.answered_at = np.full(n, np.nan)
        self.outstanding = 0
        self.peak_outstanding = 0
        self.loop_lags: list[float] = []
        self.machine_seconds: list[MachineSecond] = []
        self._machine: MachineCpu | None = None
        self._t0 = 0.0

    async def run(self) -> ClientTotals:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        machine, self._machine = MachineCpu(), MachineCpu()
        target = urllib.parse.urlsplit(self.url)
        address = (target.hostname or "127.0.0.1", target.port or 80)
        path = (target.path or "/") + (f"?{target.query}" if target.query else "")
        headers = [(b"Content-Type", b"application/json")]
        # Every request is the same: its bytes are made once (the client's CPU is the servers' too).
        request = http1.encode_request("POST", path.encode(), target.netloc, headers, self.body)
        pool = http1.ConnectionPool()
        self._t0 = time.perf_counter()
        lag_task = asyncio.create_task(self._watch_loop_lag())
        progress_task = asyncio.create_task(self._report_progress())
        requests: set[asyncio.Task[None]] = set()
        try:
            for index, at in enumerate(self.arrivals):
                delay = self._t0 + float(at) - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                if time.perf_counter() - self._t0 > self.max_seconds:
                    break
                if self.outstanding >= self.max_outstanding:
                    continue  # counted not_sent: the client's bound, never an unbounded queue
                self.outstanding += 1
                self.peak_outstanding = max(self.peak_outstanding, self.outstanding)
                task = asyncio.create_task(self._one(pool, address, request, index, float(at)))
                requests.add(task)
                task.add_done_callback(requests.discard)
            if requests:
                await asyncio.wait(requests, timeout=self.timeout_s + 5.0)
        finally:
            for task in (lag_task, progress_task, *requests):
                task.cancel()
            await asyncio.gather(lag_task, progress_task, *requests, return_exceptions=True)
            pool.close()
        return self.totals(time.perf_counter() - wall0, time.process_time() - cpu0, machine.shares())

    async def _one(
        self, pool: http1.ConnectionPool, address: tuple[str, int], request: bytes, index: int, at: float
    ) -> None:
        scheduled = self._t0 + at
        self.lateness_ms[index] = (time.perf_counter() - scheduled) * 1000.0
        outcome = "lost"
        try:
            response = await pool.exchange(*address, request, self.timeout_s)
            outcome = STATUS_OUTCOMES.get(response.status, "error")
            answered = time.perf_counter()
            self.latency_ms[index] = (answered - scheduled) * 1000.0
            self.answered_at[index] = answered - self._t0
        except http1.ConnectFailed:
            outcome = "refused"  # the connection was not accepted: nothing was taken
        except (OSError, TimeoutError):
            outcome = "lost"  # sent, then the answer never came
        finally:
            self.outcome[index] = OUTCOME_CODE[outcome]
            self.outstanding -= 1

    async def _watch_loop_lag(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(LOOP_LAG_PERIOD_S)
            self.loop_lags.append(max(0.0, time.perf_counter() - before - LOOP_LAG_PERIOD_S) * 1000.0)

    async def _report_progress(self) -> None:
        last_report = 0.0
        lag_seen = 0
        while True:
            await asyncio.sleep(1.0)
            now = time.perf_counter() - self._t0
            sent_mask = self.arrivals < now
            # The answers that came since the last report, whenever their requests were sent: a
            # slow answer counts in the second it came (NaN, not yet answered, compares False).
            answered = (self.answered_at > last_report) & (self.answered_at <= now)
            latencies = self.latency_ms[answered & (self.outcome == OUTCOME_CODE["ok"])]
            last_report = now
            lags = self.loop_lags[lag_seen:]
            lag_seen = len(self.loop_lags)
            steal, busy = self._machine.shares() if self._machine is not None else (0.0, 0.0)
            self.machine_seconds.append(MachineSecond(round(now, 3), round(steal, 4), round(busy, 4)))
            if self.progress is not None:
                self.progress(
                    Progress(
                        t=round(now, 3),
                        sent=int(sent_mask.sum()),
                        outstanding=self.outstanding,
                        counts=self._counts(),
                        p50_ms=_quantile(latencies, 0.5),
                        p99_ms=_quantile(latencies, 0.99),
                        loop_lag_max_ms=round(max(lags, default=0.0), 2),
                        steal_share=round(steal, 4),
                    )
                )

    def _counts(self) -> dict[str, int]:
        codes = np.bincount(self.outcome.astype(np.int64), minlength=len(OUTCOMES))
        return {name: int(codes[i]) for i, name in enumerate(OUTCOMES)}

    def totals(self, wall_s: float, cpu_s: float, machine: tuple[float, float] = (0.0, 0.0)) -> ClientTotals:
        ok = self.outcome == OUTCOME_CODE["ok"]
        latencies = self.latency_ms[ok]
        sent = self.outcome != OUTCOME_CODE["not_sent"]
        within = ok & (np.nan_to_num(self.latency_ms, nan=np.inf) <= self.slo_ms)
        quiet_requests, quiet_within = quiet_seconds_attainment(self.arrivals, within, self.machine_seconds)
        return ClientTotals(
            scheduled=len(self.arrivals),
            counts=self._counts(),
            slo_ms=self.slo_ms,
            within_slo=int(within.sum()),
            p50_ms=_quantile(latencies, 0.5),
            p99_ms=_quantile(latencies, 0.99),
            max_ms=round(float(latencies.max()), 2) if len(latencies) else None,
            wall_s=round(wall_s, 2),
            client_cpu_s=round(cpu_s, 2),
            loop_lag_p99_ms=_quantile(np.asarray(self.loop_lags), 0.99) or 0.0,
            loop_lag_max_ms=round(max(self.loop_lags, default=0.0), 2),
            send_lateness_p99_ms=_quantile(self.lateness_ms[sent], 0.99) or 0.0,
            peak_outstanding=self.peak_outstanding,
            machine_steal_share=round(machine[0], 4),
            machine_busy_share=round(machine[1], 4),
            quiet_requests=quiet_requests,
            quiet_within_slo=quiet_within,
        )

    def per_request(self) -> dict[str, list[Any]]:
        """Every request: scheduled second, latency (ms, NaN when not answered), outcome name."""
        return {
            "t": [round(float(t), 4) for t in self.arrivals],
            "latency_ms": [None if math.isnan(v) else round(float(v), 3) for v in self.latency_ms],
            "outcome": [OUTCOMES[int(c)] for c in self.outcome],
        }


def _quantile(values: FloatArray, q: float) -> float | None:
    return round(float(np.quantile(values, q)), 3) if len(values) else None


# --------------------------------------------------------------------------------- the subprocess


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m neuronfleet.demo.loadgen", description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="POST target, e.g. http://127.0.0.1:PORT/v2/models/m/infer")
    parser.add_argument("--body", type=Path, required=True, help="file holding the request body (JSON)")
    parser.add_argument("--arrivals", type=Path, required=True, help=".npy of arrival seconds (sorted)")
    parser.add_argument("--out", type=Path, required=True, help="JSON with the totals and every request")
    parser.add_argument("--slo-ms", type=float, required=True)
    parser.add_argument("--max-requests", type=int, required=True)
    parser.add_argument("--max-seconds", type=float, required=True)
    parser.add_argument("--max-outstanding", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    # The measuring client goes before the system it measures when the CPU is short, so that its
    # own scheduling delays do not pass for the servers' latency (best effort: needs the privilege).
    with contextlib.suppress(OSError):
        os.nice(CLIENT_NICE)
    arrivals = np.load(args.arrivals)

    def emit(progress: Progress) -> None:
        print(json.dumps(asdict(progress)), flush=True)

    client = OpenLoopClient(
        args.url,
        args.body.read_bytes(),
        arrivals,
        slo_ms=args.slo_ms,
        max_requests=args.max_requests,
        max_seconds=args.max_seconds,
        max_outstanding=args.max_outstanding,
        timeout_s=args.timeout,
        progress=emit,
    )
    totals = uvloop.run(client.run())  # the measuring client's CPU is the servers' too: the leaner loop
    result = {
        "totals": asdict(totals),
        "requests": client.per_request(),
        "machine": [asdict(second) for second in client.machine_seconds],
    }
    args.out.write_text(json.dumps(result) + "\n")
    print(json.dumps({"done": True}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
