"""Could the autoscaler learn its headroom from the past, as it learns its scale-down delay? A measurement for issue 11.

``bench_causal_bound.py`` found that one headroom for every trace (one ``h`` on a look-back
signal, as a default must be) costs 1.55-1.59x the clairvoyant fleet on the conv trace, because the
NASA trace needs more headroom than conv does: tuned per trace, the same rules cost 1.15-1.22x on
conv. A headroom each deployment learns from its own past could, in principle, give each trace
what it needs with one default. This benchmark measures that, on the same demand, signals, cold
start and scored halves as ``bench_causal_bound.py``, through the simulator's queue:

- the signal: the look-back peak of the demand (the instant oracle's need) over ``W`` seconds
  (300 or 900: ours' learned scale-down delay picks from 300-1200 s), and where its least-squares
  line over ours' 30 minutes will be one cold start ahead (``lookback+trend1800``);
- ``constant`` (the reference, tuned in hindsight): the least ``h`` reaching 99 % on the scored
  half itself, per scenario; and ``joint``: the largest of the four applied to every scenario;
- ``replay`` (learned): every 5 minutes, the least ``h`` (0.80-2.00 in steps of 0.02) whose replay
  of the last day, per minute, covered ``coverage`` of the need: capacity ``ceil(h x signal)``,
  ready only as the least of it over the last cold start. It is how ``planning/hold.py`` chooses
  the scale-down window, applied to the headroom;
- ``quantile-day`` (learned): every 5 minutes, the ``q`` quantile of the multiplier each minute of
  the last day needed (the need's peak over the next cold start over that minute's signal; a
  minute's multiplier is known only a cold start after it);
- ``quantile-hour`` (learned, NASA only: conv has no earlier day): the same over the same time of
  day (within 30 minutes) on earlier days.

- ``sqrt`` (not learned; sized to the fleet): capacity ``ceil(signal + beta x sqrt(signal))``, the
  square-root staffing rule of queueing theory (the headroom Poisson noise needs shrinks as
  1/sqrt(fleet)): a fleet of 40 replicas gets less headroom than one of 10. Conv's fleets are 2-5x
  NASA's, so if the traces' different needs were noise, one ``beta`` could serve both. Per scenario
  the least ``beta`` (to 0.05) reaching 99 %, and ``joint.sqrt`` the largest of them applied to
  every scenario.

Before 20 minutes of history the learned families use 1.25, the headroom of the CRD's default
target utilization (0.8). Each learned family sweeps its one knob (``coverage`` or ``q``); per
scenario the cheapest value reaching 99 % is reported, and ``joint.{family}`` is the one value
(and ``W``) that reaches 99 % on all four scenarios at the least total cost, set beside the
constant ``joint`` rule and a static fleet tuned in hindsight, both measured in the same run.

    .venv/bin/python bench/bench_learned_headroom.py [--only nasa-14d/superpose,...]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from bench_causal_bound import (
    FloatArray,
    Scored,
    backward_min,
    engine_headroom,
    engine_static,
    forward_max,
    least_reaching,
    rule_signal,
    scored_span,
)
from bench_fleet import PEAK_REPLICAS, PROFILE, SEED, SLO_TARGET, load_traces, scenarios

from _common import write_result
from neuronfleet.planning import scaling
from neuronfleet.sim.oracle import launch_seconds
from neuronfleet.sim.profiles import load_profile

MINUTE = 60
DAY_MINUTES = 24 * 60
LOOKBACKS = (300, 900)
#: Ours' trend line (30 minutes), one cold start ahead, on top of the look-back peak.
FAMILY = f"lookback+trend{round(scaling.TREND_WINDOW_SECONDS)}"
#: Headrooms the replay tries, least first.
H_GRID = np.round(np.arange(0.80, 2.0 + 1e-9, 0.02), 2)
#: The CRD default's headroom (1 / targetUtilization 0.8), used until the history is long enough.
START_H = 1.25
MIN_HISTORY_MINUTES = 20
REFRESH_MINUTES = 5
HOUR_SPAN_MINUTES = 30
COVERAGES = (0.99, 0.995, 0.999, 1.0)
#: The square-root rule's ``beta`` is searched over (0, SQRT_BETA_MAX] to SQRT_BETA_STEP.
SQRT_BETA_MAX = 4.0
SQRT_BETA_STEP = 0.05
QUANTILES = (0.9, 0.95, 0.98, 0.99, 0.995)


def per_minute(x: FloatArray) -> FloatArray:
    """The peak of each whole minute of ``x`` (a per-second series)."""
    whole = len(x) // MINUTE
    return np.asarray(x[: whole * MINUTE].reshape(whole, MINUTE).max(axis=1))


def to_seconds(h: FloatArray, seconds: int) -> FloatArray:
    """A per-minute headroom as a per-second one of ``seconds`` samples (the last minute held)."""
    out = np.repeat(h, MINUTE)
    return np.concatenate((out, np.full(max(0, seconds - len(out)), h[-1])))[:seconds]


def replay_headroom(signal: FloatArray, need: FloatArray, coverage: float, lag: int) -> FloatArray:
    """Per minute, the headroom a replay of the last day chose (see the module docstring).

    ``signal`` and ``need`` are per minute; ``lag`` is the cold start in minutes.
    """
    h = np.empty(len(signal))
    current = START_H
    for m in range(len(signal)):
        if m % REFRESH_MINUTES == 0 and m >= MIN_HISTORY_MINUTES:
            start = max(0, m - DAY_MINUTES)
            past_signal, past_need = signal[start:m], need[start:m]
            wanted = coverage * past_need[lag:].sum()
            current = float(H_GRID[-1])
            for candidate in H_GRID:
                ready = backward_min(np.ceil(candidate * past_signal - 1e-9), lag)
                if np.minimum(ready[lag:], past_need[lag:]).sum() >= wanted - 1e-9:
                    current = float(candidate)
                    break
        h[m] = current
    return h


def needed_multiplier(signal: FloatArray, need: FloatArray, lag: int) -> FloatArray:
    """Per minute, the headroom that minute's capacity needed: the need's peak over the next cold
    start over the signal."""
    return np.asarray(forward_max(need, lag) / np.maximum(signal, 1e-9))


def quantile_headroom(multiplier: FloatArray, q: float, lag: int, same_hour: bool) -> FloatArray:
    """Per minute, the ``q`` quantile of the multipliers known by then: those of the last day, or
    (``same_hour``) those within :data:`HOUR_SPAN_MINUTES` of the same time on earlier days.

    A minute's multiplier is known ``lag + 1`` minutes after it (it looks a cold start ahead).
    """
    h = np.empty(len(multiplier))
    current = START_H
    for m in range(len(multiplier)):
        if m % REFRESH_MINUTES == 0:
            known = m - lag - 1
            if same_hour:
                days = range(m - DAY_MINUTES, -1, -DAY_MINUTES)
                parts = [
                    multiplier[max(0, d - HOUR_SPAN_MINUTES) : min(d + HOUR_SPAN_MINUTES + 1, known)] for d in days
                ]
                past = np.concatenate(parts) if parts else np.empty(0)
            else:
                past = multiplier[max(0, m - DAY_MINUTES) : max(0, known)]
            if len(past) >= MIN_HISTORY_MINUTES:
                current = float(np.quantile(past, q, method="inverted_cdf"))
        h[m] = current
    return h


def _self_check() -> None:
    """The learned headrooms on cases whose answer is known (a wrong window would shift every figure)."""
    rng = np.random.default_rng(0)
    # Square-root staffing: 16 + 1 x 4 = 20 replicas, 100 + 1 x 10 = 110 (10 % headroom, not 25 %).
    assert list(sqrt_capacity(np.array([0.0, 16.0, 100.0]), 1.0)) == [0.0, 20.0, 110.0]
    # A flat need of 10 replicas with one minute of 15, on a flat signal of 10 (cold start 7 minutes).
    signal = np.full(120, 10.0)
    need = signal.copy()
    need[30] = 15.0
    # Coverage 1.0: the least h on the grid with ceil(10 h) >= 10 (0.92) until the spike is in the
    # history (the refresh at 35), then the least with ceil(10 h) >= 15 (1.42).
    full = replay_headroom(signal, need, 1.0, 7)
    assert np.all(full[:MIN_HISTORY_MINUTES] == START_H)
    assert np.all(full[MIN_HISTORY_MINUTES:35] == 0.92) and np.all(full[35:] == 1.42), full
    # Coverage 0.99 over minutes 7..m-1: at 35, 283 of 285 needs ceil(10 h) = 13; at 55, 481 of 485
    # needs 11; from 60 on, 530 of 535 is enough at 10 (0.92).
    partial = replay_headroom(signal, need, 0.99, 7)
    assert partial[35] == 1.22 and partial[55] == 1.02 and np.all(partial[60:] == 0.92), partial
    multiplier = rng.uniform(1.0, 2.0, size=3 * DAY_MINUTES)
    for same_hour in (False, True):
        h = quantile_headroom(multiplier, 0.9, 7, same_hour)
        for m in range(0, len(multiplier), 97):
            # h[m] is the value chosen at the last refresh at or before m, from the minutes known then.
            r = m - m % REFRESH_MINUTES
            known = range(max(0, r - 8))
            if same_hour:
                days = [d for d in range(r - DAY_MINUTES, -1, -DAY_MINUTES)]
                idx = [i for i in known if any(abs(i - d) <= HOUR_SPAN_MINUTES for d in days)]
            else:
                idx = [i for i in known if i >= r - DAY_MINUTES]
            if len(idx) < MIN_HISTORY_MINUTES:
                continue
            expected = np.quantile(multiplier[idx], 0.9, method="inverted_cdf")
            assert abs(h[m] - expected) < 1e-12, (same_hour, m)


def sqrt_capacity(signal: FloatArray, beta: float) -> FloatArray:
    """The square-root staffing rule: the signal plus ``beta`` times its square root, whole replicas."""
    return np.ceil(signal + beta * np.sqrt(signal) - 1e-9)


def least_beta(signal: FloatArray, scored: Scored) -> tuple[float, float, float] | None:
    """The least ``beta`` whose square-root rule reaches the SLO target through the queue:
    (beta, attainment, cost vs the fluid oracle); None if :data:`SQRT_BETA_MAX` misses."""
    return least_reaching(lambda beta: scored.run(sqrt_capacity(signal, beta)), 0.0, SQRT_BETA_MAX, SQRT_BETA_STEP)


def scored_scenarios(only: set[str]) -> dict[str, Scored]:
    """The scored halves of ``bench_fleet``'s scenarios (replicate left out, as in the causal bound)."""
    traces = load_traces()
    if traces is None:
        raise SystemExit(2)
    profile = load_profile(PROFILE)
    launch = round(launch_seconds(profile))
    out: dict[str, Scored] = {}
    for scenario in scenarios(False, math.ceil(traces["conv"].duration), math.ceil(traces["nasa"].duration)):
        if scenario.arrivals == "replicate" or (only and scenario.name not in only):
            continue
        out[scenario.name] = scored_span(scenario, traces[scenario.trace], profile, launch)[0]
    return out


#: A learned family's per-minute headroom from (signal, need, knob, cold start in minutes), per minute.
Headroom = Callable[[FloatArray, FloatArray, float, int], FloatArray]


def learned_families(name: str) -> dict[str, tuple[tuple[float, ...], Headroom]]:
    """Each learned family's knob values and its headroom."""
    families: dict[str, tuple[tuple[float, ...], Headroom]] = {
        "replay": (COVERAGES, replay_headroom),
        "quantile-day": (
            QUANTILES,
            lambda signal, need, q, lag: quantile_headroom(needed_multiplier(signal, need, lag), q, lag, False),
        ),
    }
    if name.startswith("nasa"):
        families["quantile-hour"] = (
            QUANTILES,
            lambda signal, need, q, lag: quantile_headroom(needed_multiplier(signal, need, lag), q, lag, True),
        )
    return families


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated scenario names (default: all but replicate)")
    args = parser.parse_args()
    _self_check()
    started = time.perf_counter()
    scored = scored_scenarios({n.strip() for n in args.only.split(",") if n.strip()})
    rows: list[dict[str, Any]] = []
    # (family, W, knob) -> scenario -> (attainment, cost vs fluid oracle)
    outcomes: dict[tuple[str, int, float], dict[str, tuple[float, float]]] = {}
    statics = {name: engine_static(s) for name, s in scored.items()}
    # The constant rule's own least h per (scenario, W), unrounded: a rounded-down h can fall below
    # an integer step of ceil(h x signal).
    own_h: dict[tuple[str, int], float | None] = {}
    own_beta: dict[tuple[str, int], float | None] = {}
    for name, s in scored.items():
        t0 = time.perf_counter()
        lag = math.ceil(s.launch / MINUTE)
        for lookback in LOOKBACKS:
            signal = rule_signal(s.demand, FAMILY, lookback, s.launch)
            found = engine_headroom(signal, s, (0.7, 2.5))
            h, attainment, ratio = found if found else (None, None, None)
            own_h[(name, lookback)] = h
            rows.append(_row(name, "constant", lookback, None, h, attainment, ratio))
            found = least_beta(signal, s)
            beta, attainment, ratio = found if found else (None, None, None)
            own_beta[(name, lookback)] = beta
            mean_h = None
            if beta is not None:
                scored_signal = signal[s.first : len(s.demand)]
                mean_h = float((sqrt_capacity(scored_signal, beta).sum()) / max(scored_signal.sum(), 1e-9))
            rows.append(_row(name, "sqrt", lookback, beta, mean_h, attainment, ratio))
            signal_m, need_m = per_minute(signal), per_minute(s.demand)
            for family, (knobs, headroom) in learned_families(name).items():
                for knob in knobs:
                    h_s = to_seconds(headroom(signal_m, need_m, knob, lag), len(signal))
                    attainment, ratio = s.run(np.ceil(h_s * signal - 1e-9))
                    outcomes.setdefault((family, lookback, knob), {})[name] = (attainment, ratio)
                    rows.append(_row(name, family, lookback, knob, float(h_s[s.first :].mean()), attainment, ratio))
        print(f"{name}: {time.perf_counter() - t0:.0f} s", flush=True)

    figures: dict[str, Any] = {}
    for name in scored:
        run = sorted({r["family"] for r in rows if r["scenario"] == name})
        for family in run:
            reached = [
                r
                for r in rows
                if r["scenario"] == name and r["family"] == family and (r["attainment"] or 0) >= SLO_TARGET
            ]
            best = min(reached, key=lambda r: r["vs_fluid_oracle"]) if reached else None
            prefix = f"{name}.{family}"
            figures[f"{prefix}.best"] = _describe(best) if best else None
            figures[f"{prefix}.vs_fluid_oracle"] = best["vs_fluid_oracle"] if best else None
        constant = figures[f"{name}.constant.vs_fluid_oracle"]
        learned = [figures[f"{name}.{f}.vs_fluid_oracle"] for f in run if f not in ("constant", "sqrt")]
        learned = [v for v in learned if v is not None]
        figures[f"{name}.learned_beats_constant"] = bool(learned and constant and min(learned) < constant)
        figures[f"{name}.static_vs_fluid_oracle"] = round(statics[name][2], 4)

    # One rule for every scenario: the constant's largest own h per W, and each learned family's
    # one knob value.
    joint_candidates: list[tuple[str, int, float, dict[str, tuple[float, float]]]] = []
    for lookback in LOOKBACKS:
        heads = [own_h[(name, lookback)] for name in scored]
        if all(h is not None for h in heads):
            h = max(h for h in heads if h is not None)
            per = {
                name: s.run(np.ceil(h * rule_signal(s.demand, FAMILY, lookback, s.launch) - 1e-9))
                for name, s in scored.items()
            }
            joint_candidates.append(("constant", lookback, h, per))
        betas = [own_beta[(name, lookback)] for name in scored]
        if all(b is not None for b in betas):
            beta = max(b for b in betas if b is not None)
            per = {
                name: s.run(sqrt_capacity(rule_signal(s.demand, FAMILY, lookback, s.launch), beta))
                for name, s in scored.items()
            }
            joint_candidates.append(("sqrt", lookback, beta, per))
    # A family run on only some scenarios (quantile-hour: NASA) has no one rule for every scenario.
    joint_candidates += [
        (family, lookback, knob, per) for (family, lookback, knob), per in outcomes.items() if set(per) == set(scored)
    ]
    for family in sorted({c[0] for c in joint_candidates}):
        reaching = [c for c in joint_candidates if c[0] == family and all(a >= SLO_TARGET for a, _ in c[3].values())]
        prefix = f"joint.{family}"
        if not reaching:
            figures[f"{prefix}.rule"] = None
            continue
        _, lookback, knob, per = min(reaching, key=lambda c: sum(r for _, r in c[3].values()))
        knob_name = {"constant": "h", "sqrt": "beta"}.get(family, "knob")
        figures[f"{prefix}.rule"] = f"W={lookback} s {knob_name}={knob:g}"
        figures[f"{prefix}.total_vs_fluid_oracle"] = round(sum(r for _, r in per.values()), 4)
        for name, (attainment, ratio) in per.items():
            figures[f"{prefix}.{name}.attainment"] = round(attainment, 5)
            figures[f"{prefix}.{name}.vs_fluid_oracle"] = round(ratio, 4)
            figures[f"{prefix}.{name}.vs_static"] = round(ratio / statics[name][2], 4)
    figures["bench_wall_s"] = round(time.perf_counter() - started, 1)
    params = {
        "profile": PROFILE,
        "peak_replicas": PEAK_REPLICAS,
        "seed": SEED,
        "slo_target": SLO_TARGET,
        "signal": FAMILY,
        "lookbacks_s": list(LOOKBACKS),
        "h_grid": [float(H_GRID[0]), float(H_GRID[-1]), 0.02],
        "start_h": START_H,
        "min_history_min": MIN_HISTORY_MINUTES,
        "refresh_min": REFRESH_MINUTES,
        "coverages": list(COVERAGES),
        "quantiles": list(QUANTILES),
        "sqrt_beta": [0.0, SQRT_BETA_MAX, SQRT_BETA_STEP],
    }
    for key, value in figures.items():
        print(f"{key}: {value}")
    path = write_result("learned-headroom", params, figures, rows)
    print(f"wrote {path}")
    return 0


def _row(
    name: str,
    family: str,
    lookback: int,
    knob: float | None,
    h: float | None,
    attainment: float | None,
    ratio: float | None,
) -> dict[str, Any]:
    return {
        "scenario": name,
        "family": family,
        "lookback_s": lookback,
        "knob": knob,
        "mean_h": None if h is None else round(h, 4),
        "attainment": None if attainment is None else round(attainment, 5),
        "vs_fluid_oracle": None if ratio is None else round(ratio, 4),
    }


def _describe(row: dict[str, Any]) -> str:
    knob = "" if row["knob"] is None else f" knob={row['knob']:g}"
    return f"W={row['lookback_s']} s{knob} mean h={row['mean_h']:g}"


if __name__ == "__main__":
    raise SystemExit(main())
