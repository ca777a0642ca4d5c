"""The benchmark figures users read, rendered from the committed results (bench/results/*.json).

README.md's benchmark table and the figures in docs/benchmarks.md are written here, between
``<!-- bench:NAME:start -->`` and ``<!-- bench:NAME:end -->`` markers, so that no figure a reader
sees is kept by hand: each is read from a result file, set beside its target, and judged met or
not met from the number itself. The hand-written text around the markers (what a benchmark
measures, the caveats) is left alone.

Targets are those the issues and docs state; where a benchmark records its own target in its
JSON (runtime, emulated device, replicate bound) that one is used, the rest are in ``TARGETS``.

    .venv/bin/python bench/render_docs.py            # rewrite the marked blocks (make bench-docs)
    .venv/bin/python bench/render_docs.py --check    # exit 1 if the committed docs are stale
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
README = REPO / "README.md"
DOC = REPO / "docs" / "benchmarks.md"
README_BLOCK = "summary"

Result = Mapping[str, Any]


def number(value: float, digits: int = 3) -> str:
    """A figure with at most ``digits`` decimals and no trailing zeros, thousands separated."""
    text = f"{value:,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def times(ratio: float, digits: int = 2) -> str:
    """A ratio with a fixed number of decimals, so that 1.20x does not read as a rounder 1.2x."""
    return f"{ratio:.{digits}f}x"


def percent(share: float) -> str:
    """A share of 1 as a percentage with two decimals, as SLO attainment is quoted."""
    return f"{share * 100:.2f} %"


@dataclass(frozen=True)
class Target:
    """A bound a figure must keep: ``low <= value <= high`` (``<`` when ``strict``), either end open."""

    low: float | None = None
    high: float | None = None
    strict: bool = False
    unit: str = ""
    as_percent: bool = False

    def met(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.strict else value < self.low):
            return False
        return self.high is None or (value < self.high if self.strict else value <= self.high)

    def _bound(self, value: float) -> str:
        if self.as_percent:
            return f"{number(value * 100, 2)} %"
        # Ratios with the decimals the issues state them with (≤ 1.10x), as the figures are shown.
        return times(value) if self.unit == "x" else f"{number(value)}{self.unit}"

    @property
    def text(self) -> str:
        if self.low is not None and self.high is not None:
            return "0" if self.low == self.high == 0 else f"{self._bound(self.low)}-{self._bound(self.high)}"
        if self.low is not None:
            return f"{'>' if self.strict else '≥'} {self._bound(self.low)}"
        assert self.high is not None, "a target bounds at least one end"
        return f"{'<' if self.strict else '≤'} {self._bound(self.high)}"


# The targets stated by the issues and docs for benchmarks that do not record their own.
TARGETS: dict[str, Target] = {
    # issue 11: ours at the CRD's defaults, scored on the held-out half of each trace.
    "fleet.attainment": Target(low=0.99, as_percent=True),
    "fleet.nasa.vs_cheapest_baseline": Target(high=0.75, unit="x"),
    "fleet.nasa.vs_feasible_oracle": Target(high=1.15, unit="x"),
    "fleet.conv.vs_cheapest_baseline": Target(high=1.0, strict=True, unit="x"),
    "fleet.conv.vs_feasible_oracle": Target(high=1.10, unit="x"),
    "fleet.replicate.vs_static": Target(high=1.05, unit="x"),
    "restart.attainment": Target(low=0.99, as_percent=True),
    "operator.peak_rss_mb": Target(high=500, unit=" MB"),
    "operator.cpu_s_per_deployment_cycle": Target(high=0.1, unit=" CPU-s"),
    "operator.idle_writes_per_deployment_hour": Target(low=0, high=0),
    "cluster.wall_s": Target(high=30, strict=True, unit=" s"),
    "demo.slo_attainment": Target(low=0.99, as_percent=True),
    # issue 11: the default sweep of every family over the 14-day trace, on 2 cores.
    "sweep.wall_s": Target(high=600, unit=" s"),
}


@dataclass(frozen=True)
class Figure:
    """One rendered figure: its value, its target if it has one, and whether the value keeps it."""

    label: str
    value: str
    target: str = ""
    met: bool | None = None
    headline: bool = False

    @property
    def verdict(self) -> str:
        return "" if self.met is None else "met" if self.met else "not met"

    def inline(self) -> str:
        judged = f" ({self.target}: {self.verdict})" if self.target else ""
        return f"{self.label} **{self.value}**{judged}"


def judged(label: str, value: float, shown: str, target: Target, *, headline: bool = False) -> Figure:
    return Figure(label, shown, target.text, target.met(value), headline)


def plain(label: str, shown: str, *, headline: bool = False) -> Figure:
    return Figure(label, shown, headline=headline)


def count_verdict(label: str, hits: int, total: int, *, headline: bool = False) -> Figure:
    """``hits`` of ``total`` against the target "all of them"."""
    return Figure(label, f"{hits} of {total}", f"{total} of {total}", hits == total, headline)


# ---- one function per benchmark: its figures, read from its JSON -------------------------------


def runtime(r: Result) -> list[Figure]:
    f = r["figures"]
    # The ratio is taken within each interleaved round; the rounds' spread is the host's noise.
    rounds = [c["figures"]["batched_vs_raw"] for c in r["cases"] if c["name"].startswith("round_")]
    return [
        judged(
            "batched vs the raw model",
            f["batched_vs_raw"],
            f"{f['batched_vs_raw']:.2f} (its {len(rounds)} rounds {min(rounds):.2f}-{max(rounds):.2f})",
            Target(low=f["target_batched_vs_raw"]),
            headline=True,
        ),
        judged(
            "batched vs unbatched",
            f["batched_vs_unbatched"],
            f"{f['batched_vs_unbatched']:.2f}",
            Target(low=f["target_batched_vs_unbatched"]),
            headline=True,
        ),
        judged(
            "p99 at 75 % load, in full-batch service times",
            f["p99_vs_batch_service"],
            times(f["p99_vs_batch_service"]),
            Target(high=f["target_p99_vs_batch_service"], unit="x"),
            headline=True,
        ),
        plain("raw model, best bucket", f"{number(f['raw_throughput_rps'], 1)} rows/s"),
        plain(
            "batched p50 / p99 at half load", f"{number(f['batched_p50_ms'], 1)} / {number(f['batched_p99_ms'], 1)} ms"
        ),
        plain("HTTP + JSON + batching CPU per request", f"{number(f['http_json_cpu_ms_per_request'])} ms"),
        plain("1 MiB text: tokenizer CPU whole vs from its prefix", times(f["long_text_whole_vs_prefix"], 0)),
    ]


BUCKETS = ("b16", "b8", "b4", "b1")


def emulated_device(r: Result) -> list[Figure]:
    f = r["figures"]
    target = Target(low=f["target_vs_profile_low"], high=f["target_vs_profile_high"], unit="x")
    out: list[Figure] = []
    for bucket in BUCKETS:
        ratio = f[f"{bucket}_vs_profile"]
        low, high = f[f"{bucket}_vs_profile_min"], f[f"{bucket}_vs_profile_max"]
        shown = (
            f"{ratio:.3f}x ({number(f[f'{bucket}_wall_inf_per_s'], 0)} of"
            f" {number(f[f'{bucket}_published_inf_per_s'], 0)} inf/s); rounds {low:.3f}-{high:.3f};"
            f" limited by {f[f'{bucket}_limited_by']}, the slowest round by {f[f'{bucket}_slowest_round_limited_by']}"
        )
        out.append(judged(f"batch {bucket[1:]} wall clock vs the published throughput", ratio, shown, target))
    hits = sum(target.met(f[f"{b}_vs_profile"]) for b in BUCKETS)
    out.insert(
        0,
        count_verdict("buckets within issue 12's band of the published throughput", hits, len(BUCKETS), headline=True),
    )
    return out


def http_path(r: Result) -> list[Figure]:
    f = r["figures"]
    return [
        plain(
            "router CPU per request, lean HTTP/1.1 vs aiohttp",
            times(f["router_cpu_http1_vs_aiohttp"]),
            headline=True,
        ),
        plain(
            "client CPU per request, lean HTTP/1.1 vs aiohttp",
            times(f["client_cpu_http1_vs_aiohttp"]),
            headline=True,
        ),
        plain("whole path with the servers", times(f["path_cpu_http1_vs_aiohttp"])),
    ]


SCENARIOS = ("nasa-14d/superpose", "nasa-14d/rate", "conv-1h/superpose", "conv-1h/rate", "conv-1h/replicate")
#: The families issue 11 compares ours with (bench_fleet.py scores each on every scored half).
BASELINES = ("hpa", "keda", "kpa", "ray", "static")


def scenario_name(key: str) -> str:
    trace, arrivals = key.split("/")
    return f"{'NASA' if trace.startswith('nasa') else 'conv'} {arrivals}"


def fleet_scenario(f: Mapping[str, Any], key: str) -> list[Figure]:
    """Issue 11's targets for one scored half, judged from the figures of ours at its defaults."""
    name = scenario_name(key)
    attainment = f[f"{key}.ours_default.slo_attainment"]
    out = [judged(f"{name}: within the SLO", attainment, percent(attainment), TARGETS["fleet.attainment"])]
    if key.endswith("/replicate"):
        vs_static = f[f"{key}.done.ours_vs_static"]
        target = TARGETS["fleet.replicate.vs_static"]
        out.append(judged(f"{name}: cost vs the static fleet", vs_static, times(vs_static), target, headline=True))
        return out
    trace = "nasa" if key.startswith("nasa") else "conv"
    target = TARGETS[f"fleet.{trace}.vs_cheapest_baseline"]
    vs_cheapest = f[f"{key}.done.ours_vs_cheapest_baseline"]
    if vs_cheapest is None:
        # Nothing reaches 99 % to be cheaper than: the target has nothing to judge, so no verdict;
        # ours' cost is shown against the cheapest baseline all the same.
        families = [name for name in BASELINES if f.get(f"{key}.{name}.usd_per_million")]
        cheapest = min(families, key=lambda name: f[f"{key}.{name}.usd_per_million"])
        ratio = f[f"{key}.ours_default.usd_per_million"] / f[f"{key}.{cheapest}.usd_per_million"]
        setting = f[f"{key}.{cheapest}.chosen_setting"]
        reached = percent(f[f"{key}.{cheapest}.slo_attainment"])
        shown = f"no baseline reaches 99 %; ours {times(ratio)} the cheapest ({cheapest} {setting}, {reached})"
        out.append(Figure(f"{name}: cost vs the cheapest baseline reaching 99 %", shown, headline=True))
    else:
        baseline = f[f"{key}.done.cheapest_baseline_reaching_99"]
        label = f"{name}: cost vs the cheapest baseline reaching 99 % ({baseline})"
        out.append(judged(label, vs_cheapest, times(vs_cheapest), target, headline=True))
    vs_feasible = f[f"{key}.done.ours_vs_feasible_oracle"]
    target = TARGETS[f"fleet.{trace}.vs_feasible_oracle"]
    out.append(judged(f"{name}: cost vs the feasible oracle", vs_feasible, times(vs_feasible), target, headline=True))
    return out


def fleet_verdicts(r: Result) -> dict[str, bool]:
    """Per scored half, whether ours meets every one of issue 11's targets there."""
    f = r["figures"]
    return {key: all(fig.met is not False for fig in fleet_scenario(f, key)) for key in SCENARIOS}


def fleet(r: Result) -> list[Figure]:
    f = r["figures"]
    reaching = sum(TARGETS["fleet.attainment"].met(f[f"{key}.ours_default.slo_attainment"]) for key in SCENARIOS)
    verdicts = fleet_verdicts(r)
    met = [scenario_name(k) for k, v in verdicts.items() if v]
    missed = [scenario_name(k) for k, v in verdicts.items() if not v]
    summary = [
        count_verdict("scored halves within the SLO at 99 %", reaching, len(SCENARIOS), headline=True),
        count_verdict("scored halves meeting all of issue 11's targets", len(met), len(SCENARIOS), headline=True),
        plain("met on", ", ".join(met) or "none"),
        plain("not met on", ", ".join(missed) or "none"),
    ]
    return summary + [fig for key in SCENARIOS for fig in fleet_scenario(f, key)]


def fleet_full_sweep(r: Result) -> list[Figure]:
    """As :func:`fleet`; README's line keeps only the counts (its results are older than fleet.json's)."""
    return [fig if fig.label.startswith("scored halves") else replace(fig, headline=False) for fig in fleet(r)]


def generalisation(r: Result) -> list[Figure]:
    f = r["figures"]
    probes = f["summary.probes"]
    return [
        count_verdict(
            "probes where ours at its defaults reaches 99 %",
            f["summary.ours_default_reaches_99"],
            probes,
            headline=True,
        ),
        plain("lowest attainment", percent(f["summary.lowest_attainment"])),
        plain(
            "probes where ours is cheaper than every baseline reaching 99 %",
            f"{f['summary.ours_cheaper_than_every_baseline_reaching_99']} of {probes}",
            headline=True,
        ),
        plain(
            "median cost vs the feasible oracle, conv",
            times(f["summary.conv.median_ours_vs_feasible_oracle"]),
        ),
        plain(
            "median cost vs the feasible oracle, NASA",
            times(f["summary.nasa.median_ours_vs_feasible_oracle"]),
        ),
    ]


def restart(r: Result) -> list[Figure]:
    f = r["figures"]
    target = TARGETS["restart.attainment"]
    out: list[Figure] = []
    for key in SCENARIOS[:4]:
        name = scenario_name(key)
        steady = f[f"{key}.steady.slo_attainment"]
        resumed = f[f"{key}.resumed_lowest_attainment"]
        lost = f[f"{key}.lost_lowest_attainment"]
        costs = [v for k, v in f.items() if k.startswith(f"{key}.restart-resumed_") and k.endswith(".cost_vs_steady")]
        spread = sorted({f"{min(costs):.3f}", f"{max(costs):.3f}"})
        shown = f"{percent(resumed)} (no restart {percent(steady)}; cost {'-'.join(spread)}x no restart's)"
        out.append(judged(f"{name}: restarted, resumed from the checkpoint (lowest)", resumed, shown, target))
        out.append(plain(f"{name}: restarted, memory lost (lowest)", percent(lost)))
    resumed_all = min(f[f"{key}.resumed_lowest_attainment"] for key in SCENARIOS[:4])
    lost_all = min(f[f"{key}.lost_lowest_attainment"] for key in SCENARIOS[:4])
    return [
        judged("restarted daily, resumed: lowest", resumed_all, percent(resumed_all), target, headline=True),
        plain("memory lost instead (what the checkpoint saves): lowest", percent(lost_all), headline=True),
        *out,
    ]


def causal_bound(r: Result) -> list[Figure]:
    f = r["figures"]
    out: list[Figure] = []
    for key in SCENARIOS[:4]:
        trace = "nasa" if key.startswith("nasa") else "conv"
        ratio = f[f"{key}.engine.best_vs_fluid_oracle"]
        rule = f[f"{key}.engine.best_rule"]
        label = f"{scenario_name(key)}: best rule tuned in hindsight vs the clairvoyant fleet ({rule})"
        out.append(judged(label, ratio, times(ratio), TARGETS[f"fleet.{trace}.vs_feasible_oracle"]))
    reached = sum(bool(fig.met) for fig in out)
    out.insert(
        0,
        plain(
            "scored halves where a rule tuned in hindsight reaches issue 11's cost target",
            f"{reached} of {len(out)}",
            headline=True,
        ),
    )
    for key in SCENARIOS[:4]:
        trace = "nasa" if key.startswith("nasa") else "conv"
        ratio = f[f"joint.{key}.vs_fluid_oracle"]
        label = f"{scenario_name(key)}: one rule for every trace ({f['joint.best_rule']})"
        shown = f"{times(ratio)} ({percent(f[f'joint.{key}.attainment'])})"
        out.append(judged(label, ratio, shown, TARGETS[f"fleet.{trace}.vs_feasible_oracle"]))
    vs_static = f["joint.conv-1h/rate.vs_static"]
    out.append(
        judged(
            "conv rate: that rule vs a static fleet tuned in hindsight",
            vs_static,
            times(vs_static),
            TARGETS["fleet.conv.vs_cheapest_baseline"],
        )
    )
    return out


def replicate_bound(r: Result) -> list[Figure]:
    f = r["figures"]
    out: list[Figure] = []
    for prefix, against in (
        ("vs_fleet-full-sweep_static", "the full sweep's"),
        ("vs_fleet_static", "the narrow sweep's"),
    ):
        target = Target(high=f[f"{prefix}.target"], unit="x")
        replicas = f[f"{prefix}.static_replicas"]
        for field, what in (
            ("ours_default", "ours at its defaults"),
            ("own_best_rule", "best rule tuned on replicate alone"),
            ("hindsight_static", "least static fleet reaching 99 % in hindsight"),
            ("cheapest_one_rule", "cheapest one rule for every trace"),
        ):
            value = f[f"{prefix}.{field}"]
            label = f"{what} vs {against} static ({replicas} replicas)"
            headline = prefix.startswith("vs_fleet-full") and field != "hindsight_static"
            out.append(judged(label, value, times(value, 3), target, headline=headline))
    return out


LEARNED = ("replay", "quantile-day", "quantile-hour")


def learned_headroom(r: Result) -> list[Figure]:
    """Per scored half the cheapest learned headroom against the constant one, then the one-rule totals."""
    slo = r["params"]["slo_target"]
    best: dict[tuple[str, str], float] = {}
    for case in r["cases"]:
        if case["attainment"] is not None and case["attainment"] >= slo:
            pair = (case["scenario"], case["family"])
            best[pair] = min(best.get(pair, float("inf")), case["vs_fluid_oracle"])
    out: list[Figure] = []
    beaten = 0
    for key in SCENARIOS[:4]:
        learned = min(v for (s, family), v in best.items() if s == key and family in LEARNED)
        constant = best[(key, "constant")]
        beaten += learned < constant
        out.append(
            plain(
                f"{scenario_name(key)}: best learned vs constant headroom (x the clairvoyant fleet)",
                f"{times(learned)} vs {times(constant)}",
            )
        )
    out.insert(
        0, plain("scored halves where a learned headroom beats the constant one", f"{beaten} of 4", headline=True)
    )
    f = r["figures"]
    for family in ("constant", "sqrt", "replay", "quantile-day"):
        total = f[f"joint.{family}.total_vs_fluid_oracle"]
        label = f"one {family} rule for every trace ({f[f'joint.{family}.rule']}): total over the four"
        out.append(plain(label, f"{total:.2f}"))
    return out


def known_capacity(r: Result) -> list[Figure]:
    f = r["figures"]
    variants = [
        k.split(".", 1)[1].rsplit(".", 1)[0] for k in f if k.startswith("verdict.") and k.endswith(".scenarios_run")
    ]
    out: list[Figure] = []
    both = 0
    for variant in variants:
        if variant == "learned":
            continue
        v = f"verdict.{variant}"
        holds = f[f"{v}.reaches_99_everywhere"] and f[f"{v}.reaches_99_on_every_probe"]
        cheaper = bool(f[f"{v}.cheaper_than_learned_everywhere"])
        both += holds and cheaper
        missing = f[f"{v}.probes_missing_99"]
        shown = (
            f"99 % on its {f[f'{v}.scenarios_run']} scenarios: {'yes' if f[f'{v}.reaches_99_everywhere'] else 'no'};"
            f" on the {f[f'{v}.probes_run']} probes: {'yes' if f[f'{v}.reaches_99_on_every_probe'] else 'no'}"
            f"{f' (misses {missing})' if missing else ''};"
            f" cheaper than the learned rate everywhere: {'yes' if cheaper else 'no'}"
        )
        out.append(plain(f"`{variant}`", shown))
    out.insert(
        0,
        plain(
            "variants that hold 99 % everywhere and cost less everywhere",
            f"{both} of {len(variants) - 1}",
            headline=True,
        ),
    )
    return out


def operator(r: Result) -> list[Figure]:
    f = r["figures"]
    failures = f["reconcile_failures_converging"] + f["reconcile_failures_steady"]
    return [
        plain(
            f"{number(f['resources'], 0)} InferenceDeployments converged in",
            f"{number(f['converge_wall_s'], 0)} s"
            f" ({number(f['operator_cpu_s'], 0)} operator CPU-s, {failures} reconciles failed)",
            headline=True,
        ),
        judged(
            "operator peak RSS",
            f["operator_peak_rss_mb"],
            f"{number(f['operator_peak_rss_mb'], 0)} MB",
            TARGETS["operator.peak_rss_mb"],
            headline=True,
        ),
        judged(
            "idle: CPU per deployment per reconcile cycle",
            f["steady_cpu_s_per_deployment_cycle"],
            f"{number(f['steady_cpu_s_per_deployment_cycle'], 4)} CPU-s",
            TARGETS["operator.cpu_s_per_deployment_cycle"],
            headline=True,
        ),
        judged(
            "idle: API writes per deployment per hour",
            f["idle_writes_per_deployment_hour"],
            number(f["idle_writes_per_deployment_hour"]),
            TARGETS["operator.idle_writes_per_deployment_hour"],
            headline=True,
        ),
        plain("API requests while converging", number(f["requests"], 0)),
        plain("idle: API requests per deployment per cycle", number(f["steady_requests_per_deployment_cycle"], 2)),
    ]


def planning(r: Result) -> list[Figure]:
    f = r["figures"]
    return [
        plain("one reconcile's pure plan, per deployment", f"{number(f['reconcile_steady_ms'], 2)} ms", headline=True),
        plain("the same in a rollout", f"{number(f['reconcile_rollout_ms'], 2)} ms"),
        plain(f"a round of {r['params']['deployments']} deployments", f"{number(f['round_200_deployments_s'], 2)} s"),
        plain(
            "one scaling decision (a day of history)",
            f"{number(f['scaling_decide_day_of_history_us'], 0)} µs",
            headline=True,
        ),
        plain("the same, re-choosing the scale-down delay", f"{number(f['scaling_decide_rechoosing_delay_us'], 0)} µs"),
        plain("placement (four Inf2 types scored)", f"{number(f['placement_us'], 1)} µs"),
        *(
            [
                plain(
                    f"an Auto warm pool's decision ({f['warm_pool_auto_history_samples']} decisions of history)",
                    f"{number(f['warm_pool_auto_full_history_us'], 0)} µs",
                )
            ]
            if "warm_pool_auto_full_history_us" in f
            else []
        ),
        plain(
            "autoscaler checkpoint in the status, at its largest",
            f"{number(f['checkpoint_status_section_kib'], 1)} KiB",
        ),
        plain(
            "checkpoint rendered once / read again at each reconcile",
            f"{number(f['checkpoint_render_first_us'] / 1000, 2)} ms / {number(f['checkpoint_render_again_us'], 0)} µs",
        ),
        plain("actions when re-planning after the apply", number(f["replan_actions_after_apply"], 0)),
    ]


def sweep(r: Result) -> list[Figure]:
    f = r["figures"]
    families = [key.removesuffix(".cpu_s") for key in f if key.endswith(".cpu_s")]
    return [
        judged(
            f"default sweep of every family over the 14-day NASA trace ({f['runs']} runs, "
            f"--jobs {r['params']['jobs']}), wall clock",
            f["wall_s"],
            f"{number(f['wall_s'], 0)} s ({number(f['wall_s'] / 60, 1)} min)",
            TARGETS["sweep.wall_s"],
            headline=True,
        ),
        plain("CPU of its processes", f"{number(f['cpu_s'], 0)} CPU-s"),
        *(
            [
                plain(
                    "host reference (KPA and ours over four fixed hours) before / after, CPU-s",
                    f"{number(f['reference_cpu_s_before'], 2)} / {number(f['reference_cpu_s_after'], 2)}",
                )
            ]
            if "reference_cpu_s_before" in f
            else []
        ),
        *(
            plain(f"{family}: {f[family + '.runs']} runs", f"{number(f[family + '.cpu_s'], 0)} CPU-s")
            for family in families
        ),
    ]


def cluster(r: Result) -> list[Figure]:
    f = r["figures"]
    label = (
        f"{number(f['simulated_s'] / 3600, 1)} simulated hour of a {f['nodes']}-node sandbox with pod churn, wall clock"
    )
    return [
        judged(label, f["wall_s"], f"{number(f['wall_s'], 1)} s", TARGETS["cluster.wall_s"], headline=True),
        plain("pods created / nodes launched", f"{f['pods_created']} / {f['nodes_launched']}"),
    ]


def demo(r: Result) -> list[Figure]:
    f = r["figures"]
    return [
        judged(
            f"{number(f['real_requests'], 0)} real requests within the 50 ms SLO",
            f["real_slo_attainment"],
            percent(f["real_slo_attainment"]),
            TARGETS["demo.slo_attainment"],
            headline=True,
        ),
        plain("lost / rejected", f"{f['real_lost']} / {f['real_rejected']}", headline=True),
        plain("p50 / p99 at the client", f"{number(f['real_p50_ms'], 1)} / {number(f['real_p99_ms'], 1)} ms"),
        plain("scale-ups / scale-downs", f"{f['real_scale_ups']} / {f['real_scale_downs']}"),
        plain("CPU stolen by the hypervisor during the load", percent(f["real_machine_steal_share"])),
        plain("simulated replay", f"{number(f['simulated_max_speed_sim_s_per_wall_s'], 0)} simulated s per wall s"),
    ]


@dataclass(frozen=True)
class Benchmark:
    """A result file and how its figures are read."""

    name: str
    title: str
    figures: Callable[[Result], list[Figure]]

    @property
    def file(self) -> str:
        return f"{self.name}.json"


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("runtime", "runtime", runtime),
    Benchmark("emulated-device", "emulated device", emulated_device),
    Benchmark("http_path", "HTTP path", http_path),
    Benchmark("fleet", "fleet", fleet),
    Benchmark("fleet-full-sweep", "fleet, every baseline's full grid", fleet_full_sweep),
    Benchmark("sweep", "simulate's default sweep over 14 days", sweep),
    Benchmark("generalisation", "generalisation", generalisation),
    Benchmark("restart", "restart", restart),
    Benchmark("causal-bound", "causal bound", causal_bound),
    Benchmark("replicate-bound", "replicate bound", replicate_bound),
    Benchmark("learned-headroom", "learned headroom", learned_headroom),
    Benchmark("known-capacity", "known capacity", known_capacity),
    Benchmark("operator", "operator", operator),
    Benchmark("planning", "planning", planning),
    Benchmark("cluster", "cluster", cluster),
    Benchmark("demo", "demo", demo),
)


def load_results(directory: Path = RESULTS) -> dict[str, Result]:
    return {b.name: json.loads((directory / b.file).read_text()) for b in BENCHMARKS}


def commit(result: Result) -> str:
    return f"`{result['commit'][:7]}`"


def render_benchmark(benchmark: Benchmark, result: Result) -> str:
    """The figures of one benchmark as a table, with the commit and machine they were taken on."""
    lines = [
        f"`bench/results/{benchmark.file}`, taken at {commit(result)} on {result['machine']}:",
        "",
        "| figure | value | target | |",
        "|---|---|---|---|",
    ]
    lines += [f"| {f.label} | {f.value} | {f.target} | {f.verdict} |" for f in benchmark.figures(result)]
    return "\n".join(lines)


def render_summary(results: Mapping[str, Result]) -> str:
    """README's table: one line of headline figures per benchmark."""
    lines = ["| benchmark | headline figures (target: verdict) | taken at |", "|---|---|---|"]
    for b in BENCHMARKS:
        headline = "; ".join(f.inline() for f in b.figures(results[b.name]) if f.headline)
        lines.append(f"| {b.title} (`{b.file}`) | {headline} | {commit(results[b.name])} |")
    return "\n".join(lines)


def markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"


def splice(text: str, name: str, body: str) -> str:
    """``text`` with what stands between ``name``'s markers replaced by ``body``."""
    start, end = markers(name)
    head, found, rest = text.partition(start)
    if not found or end not in rest:
        raise ValueError(f"no {start} ... {end} block")
    return f"{head}{start}\n{body}\n{end}{rest.partition(end)[2]}"


def render_readme(text: str, results: Mapping[str, Result]) -> str:
    return splice(text, README_BLOCK, render_summary(results))


def render_doc(text: str, results: Mapping[str, Result]) -> str:
    for b in BENCHMARKS:
        text = splice(text, b.name, render_benchmark(b, results[b.name]))
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if the docs differ from what the results render")
    args = parser.parse_args(argv)
    results = load_results()
    stale = []
    for path, render in ((README, render_readme), (DOC, render_doc)):
        committed = path.read_text()
        rendered = render(committed, results)
        if rendered == committed:
            continue
        stale.append(path.relative_to(REPO))
        if not args.check:
            path.write_text(rendered)
    if args.check and stale:
        print(f"stale: {', '.join(map(str, stale))}: run `make bench-docs`", file=sys.stderr)
        return 1
    for path in stale:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
