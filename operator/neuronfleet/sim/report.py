"""Reporting a comparison: per-case records, a rich table, a JSON document and PNG plots.

Per case: SLO attainment (share of all requests, rejected ones included, served within the SLO),
p50/p99/max latency of served requests, rejected requests, requests that missed the SLO while
active replicas were cold-starting, rejected ones included (``cold_start_waits``, the table's
"cold waits": a count of requests, not of seconds), replica-hours (pods holding the
model: active, warm, starting, draining), chip-hours and dollars (nodes billed from launch to
removal at the catalog's on-demand price; all three within the measured span, up to the trace's
last arrival), dollars per million requests, and cost relative to
the feasible clairvoyant oracle (the headline, ``cost_vs_feasible_oracle``) and to the instant one
(``cost_vs_oracle``, a lower bound no fleet can reach). Each case names the arrivals model and its
phase: ``in-sample`` (no held-out scoring: swept, chosen and reported on the same data), ``tune``
(held-out scoring: swept on the tuning data) or ``score`` (a family's setting chosen on the tuning
data, on the scoring data).

Trace attribution (printed with every report): the Azure LLM inference trace is published by
Microsoft (Azure/AzurePublicDataset) under CC-BY 4.0; cite Patel et al., "Splitwise: Efficient
generative LLM inference using phase splitting", ISCA 2024.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.markup import escape
from rich.table import Table

from neuronfleet.sim.engine import RunResult
from neuronfleet.sim.profiles import Profile
from neuronfleet.sim.runner import Oracles, Outcome
from neuronfleet.sim.workload import Workload

ATTRIBUTION = (
    "Azure LLM inference trace: Microsoft, Azure/AzurePublicDataset, CC-BY 4.0. Patel et al., "
    '"Splitwise: Efficient generative LLM inference using phase splitting", ISCA 2024.'
)
NASA_ATTRIBUTION = (
    "NASA-HTTP trace (Kennedy Space Center WWW server, July 1995): Internet Traffic Archive, collected by "
    "Jim Dumoulin (KSC), contributed by Martin Arlitt and Carey Williamson (University of Saskatchewan); "
    '"The traces may be freely redistributed."'
)


def attribution(path: str) -> str | None:
    """The attribution a report made from the trace at ``path`` must carry (None if unknown)."""
    name = Path(path).name.lower()
    if "azure" in name:
        return ATTRIBUTION
    if "nasa" in name:
        return NASA_ATTRIBUTION
    return None


def _num(value: float, digits: int = 4) -> float | None:
    """``value`` rounded for JSON, or None (JSON's null) where it is NaN or infinite."""
    return round(float(value), digits) if math.isfinite(value) else None


def record(
    profile: Profile,
    policy: str,
    setting: str,
    result: RunResult,
    oracle_usd: float,
    feasible_usd: float | None = None,
    phase: str = "in-sample",
    arrivals: str | None = None,
) -> dict[str, Any]:
    """One case in the project's fleet.json shape."""
    return {
        "name": f"{profile.name}/{policy}/{setting}",
        "profile": profile.name,
        "policy": policy,
        "setting": setting,
        "slo_attainment": _num(result.slo_attainment, 6),
        "p50_ms": _num(result.p50_ms, 2),
        "p99_ms": _num(result.p99_ms, 2),
        "max_ms": _num(result.max_ms, 2),
        "requests": round(result.requests),
        "rejected": round(result.rejected),
        "cold_start_waits": round(result.cold_start_misses),
        "replica_hours": _num(result.replica_hours, 3),
        "chip_hours": _num(result.chip_hours, 3),
        "usd": _num(result.usd, 3),
        "usd_per_million": _num(result.usd_per_million, 5),
        "cost_vs_feasible_oracle": _num(result.usd / feasible_usd, 4) if feasible_usd else None,
        "cost_vs_oracle": _num(result.usd / oracle_usd, 4) if oracle_usd > 0 else None,
        "phase": phase,
        "arrivals": arrivals,
        "sim_wall_s": _num(result.sim_wall_s, 3),
        "sim_cpu_s": _num(result.sim_cpu_s, 3),
    }


def records(
    profile: Profile,
    outcomes: Sequence[Outcome],
    oracles: Oracles,
    best: dict[str, Outcome],
    phase: str = "in-sample",
    arrivals: str | None = None,
) -> list[dict[str, Any]]:
    """Every case, then both oracles; ``default`` and ``best`` flags mark the reported settings."""
    out = []
    instant, feasible = oracles.instant.usd, oracles.feasible.usd
    for o in outcomes:
        rec = record(profile, o.case.family, o.case.setting, o.result, instant, feasible, phase, arrivals)
        rec["knob"] = o.case.knob
        rec["default"] = o.case.default
        rec["best"] = best.get(o.case.family) is o
        out.append(rec)
    for name, result in (("oracle-feasible", oracles.feasible), ("oracle", oracles.instant)):
        rec = record(profile, name, result.setting, result, instant, feasible, phase, arrivals)
        rec["knob"] = None
        rec["default"] = True
        rec["best"] = True
        out.append(rec)
    return out


def target_percent(slo_target: float) -> str:
    """An SLO attainment target as a percent with the digits it was given (0.995: 99.5%; a
    0-decimal percent rounded it to 100%, a target no run short of perfect reaches)."""
    return f"{slo_target * 100:g}%"


def table(
    title: str, rows: Sequence[dict[str, Any]], slo_ms: float, slo_target: float, chosen_elsewhere: bool = False
) -> Table:
    """A rich table of the given records; ``chosen_elsewhere``: each family's one setting was chosen
    on other data (held-out scoring), so its mark says whether it reached the target here, not that
    it was the cheapest of its family to."""
    knobs = dict.fromkeys((r["policy"], r["knob"]) for r in rows if r.get("knob"))
    marks = (
        f"✓ = reaches {target_percent(slo_target)} here, ~ = misses it"
        if chosen_elsewhere
        else f"✓ = cheapest reaching {target_percent(slo_target)}, ~ = none reaches it: highest attainment"
    )
    caption = (
        f"SLO {slo_ms:g} ms; * = default setting, {marks}; cold waits = requests that missed the SLO (rejected "
        "included) while a replica was starting; x feasible = cost / feasible oracle (pays cold starts "
        "and whole nodes); x LB = cost / instant oracle (lower bound, infeasible)"
    )
    if knobs:
        # A setting is a number whose meaning differs per policy: name each one's knob.
        caption += "\nsetting: " + "; ".join(f"{policy}: {knob}" for policy, knob in knobs)
    t = Table(title=escape(title), caption=caption, caption_justify="left")
    for heading in (
        "policy",
        "setting",
        "SLO att.",
        "p50 ms",
        "p99 ms",
        "max ms",
        "rejected",
        "cold waits",
        "replica-h",
        "chip-h",
        "$/M inf",
        "x feasible",
        "x LB",
        "wall s",
    ):
        t.add_column(heading, justify="left" if heading in ("policy", "setting") else "right")
    for r in rows:
        att = r["slo_attainment"]
        reached = att is not None and att >= slo_target
        best_mark = ("✓" if reached else "~") if r.get("best") and not r["policy"].startswith("oracle") else ""
        mark = ("*" if r.get("default") else "") + best_mark
        style = "green" if att is not None and att >= slo_target else None
        t.add_row(
            escape(r["policy"]),
            escape(f"{r['setting']} {mark}".strip()),
            f"{att:.4f}" if att is not None else "-",
            _cell(r["p50_ms"], "{:.1f}"),
            _cell(r["p99_ms"], "{:.1f}"),
            _cell(r["max_ms"], "{:.0f}"),
            f"{r['rejected']:,}",
            f"{r['cold_start_waits']:,}",
            _cell(r["replica_hours"], "{:.1f}"),
            _cell(r["chip_hours"], "{:.1f}"),
            _cell(r["usd_per_million"], "{:.4g}"),
            _cell(r.get("cost_vs_feasible_oracle"), "{:.2f}"),
            _cell(r["cost_vs_oracle"], "{:.2f}"),
            _cell(r["sim_wall_s"], "{:.1f}"),
            style=style,
        )
    return t


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")


def plot_timeline(
    path: Path,
    workload: Workload,
    profile: Profile,
    shown: dict[str, RunResult],
    schedule: Sequence[int],
    trace_label: str = "",
) -> None:
    """Demand (replicas needed, per step) against each policy's serving and warm replicas."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured_from = round(next(iter(shown.values())).measured_from) if shown else 0
    work = workload.work_s[measured_from:]
    step = max(10, len(work) // 2000)
    usable = len(work) // step * step
    demand = work[:usable].reshape(-1, step).sum(axis=1) / step
    schedule = list(schedule[measured_from:])
    hours = len(work) > 6 * 3600
    unit, scale = ("hours", 3600.0) if hours else ("minutes", 60.0)
    families = list(shown)
    fig, axes = plt.subplots(len(families), 1, figsize=(11, 2.2 * len(families) + 0.6), sharex=True, squeeze=False)
    t_demand = np.arange(len(demand)) * step / scale
    for ax, family in zip(axes[:, 0], families, strict=True):
        r = shown[family]
        t = np.asarray(r.timeline["t"]) / scale
        ax.fill_between(t_demand, demand, step="post", color="0.85", label=f"demand (replicas, {step} s)")
        ax.step(np.arange(len(schedule)) / scale, schedule, where="post", color="0.5", lw=0.6, label="instant oracle")
        ax.step(t, r.timeline["serving"], where="post", color="tab:blue", label="serving")
        if any(r.timeline["warm"]):
            ax.step(t, r.timeline["warm"], where="post", color="tab:orange", label="warm")
        ax.set_title(f"{family} ({r.setting}): SLO {r.slo_attainment:.2%}, ${r.usd_per_million:.3g}/M", fontsize=9)
        ax.set_ylabel("replicas")
        ax.legend(loc="upper right", fontsize=7, ncol=4)
    axes[-1, 0].set_xlabel(unit)
    fig.suptitle(
        f"{profile.name}: demand vs replicas, arrivals {workload.arrivals}{f' ({trace_label})' if trace_label else ''}",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cdf_title(profile: Profile, arrivals: str = "", phase_label: str = "") -> str:
    """The latency CDF's title: which settings it shows (on held-out data: those chosen on the tuning data)."""
    shown = "setting chosen on the tuning data" if phase_label == "score phase" else "best setting per policy"
    where = f", {phase_label}" if phase_label else ""
    return f"{profile.name}: latency CDF ({shown}), arrivals {arrivals}{where}"


def plot_cdf(
    path: Path, profile: Profile, shown: dict[str, RunResult], arrivals: str = "", phase_label: str = ""
) -> None:
    """Latency CDF of served requests per policy, with the SLO marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for family, r in shown.items():
        if r.cdf_ms:
            qs = np.linspace(0, 1, len(r.cdf_ms))
            ax.plot(np.maximum(r.cdf_ms, 1e-2), qs, label=f"{family} ({r.setting})")
    ax.axvline(profile.slo_ms, color="k", ls="--", lw=0.8, label=f"SLO {profile.slo_ms:g} ms")
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms)" + (", time to first token" if profile.kind == "llm" else ""))
    ax.set_ylabel("share of served requests")
    ax.set_title(cdf_title(profile, arrivals, phase_label), fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
