"""Would ours be cheaper if it knew a replica's full-batch capacity? A measurement for issue 11.

Ours sizes the fleet by a service rate it learns (arrival rate / (busy ratio x ready replicas),
measured while the fleet is steady and unsaturated). A replica's full-batch throughput is known
before any traffic (the profile's, 2,940/s for bert-base on inf2.xlarge), and the learned rate
reads below it (batches rarely fill at everyday load). This benchmark asks whether sizing by the
known capacity instead, or by a mix of the two, makes ours cheaper at 99 % SLO attainment, on
``bench_fleet.py``'s held-out scoring: the same scenarios, workloads, seed, ``max_replicas`` (twice
the tuning half's oracle peak), replay from the tuning start and measurement from the scoring
start. Only ours runs; each variant is a subclass of the simulator's :class:`Ours` (the planning
code is unchanged) sizing by:

- ``learned``: the learned rate, exactly as today (its figures must equal ``fleet.json``'s
  ``ours_default``: the script checks that and stops if they do not);
- ``fixed``: the known capacity C from the first decision, never learned (at the CRD's
  targetUtilization 0.8 and peakUtilization 1.1, and at 0.75 / 1.0 and 0.7 / 1.0: a truthful
  capacity leaves none of the headroom the learned under-read gives, so it needs a lower target);
- ``prior``: C until a rate is learned, then the learned rate;
- ``floor0.9``: max(learned rate, 0.9 C);
- ``peakcap1.1``: the 1-minute rate signal on the learned rate, the busiest-second signal on
  1.1 x C instead of the learned rate x peakUtilization;
- ``learned:tu=0.85``: the learned rate at targetUtilization 0.85, for comparison (what a
  higher target alone buys without any known capacity).

A ``tu`` override sets targetQueueDepth with it, in the ratio the runner's sweep of ours keeps.
Per scenario and variant, ``figures`` give the scored half's SLO attainment, its cost as a multiple
of the feasible oracle's (the scoring run's own), and as a multiple of the static fleet
``bench_fleet`` chose on the tuning half (its scored $/M read from ``bench/results/fleet.json``, not
rerun). ``verdict.<variant>`` says whether every scored half reaches 99 % and whether the variant is
cheaper than ``learned`` on every scenario it ran. The NASA weeks take about a minute per variant
per scenario, so variants whose NASA figures the conv ones and the mechanism already tell are run
on conv only (``params.nasa_skipped`` says why; ``--nasa-all`` runs them too). The cases also carry
the learned rate's 10th/50th/90th percentiles over the scored half, read from the policies, so only
at ``--jobs 1``, the default (with more, the policies live in worker processes).

Five scenarios are few to choose a sizing rule on, so every variant also runs on
``bench_generalisation.py``'s probes of the conv scenarios (its ``PROBES``: ``reversed``, the trace
played backwards by its ``reversed_trace``; ``seed-2`` and ``seed-3``, the workload and the fleet's
cold starts drawn at another seed; the spans are the unprobed scenarios', as there), scored the same
way. Their figures are ``probe.<probe>.<scenario>.<variant>.*``; ``learned`` must equal
``generalisation.json``'s ``ours_default`` for the probe (checked; the script stops if not), and
``x_static`` divides by the static fleet ``generalisation.json`` chose for that probe (read, not
rerun). The reversed NASA weeks, the only NASA probes, are not run (``params.probe_nasa_skipped``).
``verdict.<variant>`` also says whether it reaches 99 % on every probe and is cheaper than
``learned`` on every probe, and which probes it misses or is not cheaper on.

    .venv/bin/python bench/bench_known_capacity.py [--quick] [--nasa-all] [--jobs N]

``--quick`` runs conv (and its probes) only and writes ``known-capacity-quick.json``. The result
file is rewritten after each scenario, so an interrupted run keeps what it finished.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

from bench_fleet import PEAK_REPLICAS, PROFILE, SEED, SLO_TARGET, Scenario, load_traces, scenarios, window
from bench_generalisation import PROBES, reversed_trace

from _common import RESULTS_DIR, write_result
from neuronfleet.api.v1alpha1 import ScalingSpec
from neuronfleet.planning import scaling
from neuronfleet.sim import report, runner
from neuronfleet.sim.metrics import MetricsView
from neuronfleet.sim.policies import Observed, Ours, Targets, ours_from_policy_file
from neuronfleet.sim.profiles import Profile, load_profile
from neuronfleet.sim.trace import Trace
from neuronfleet.sim.workload import Workload, build, factor_for_peak

FLEET_JSON = RESULTS_DIR / "fleet.json"
GENERALISATION_JSON = RESULTS_DIR / "generalisation.json"
_CRD_DEFAULT = {name: ScalingSpec.model_fields[name].default for name in ("target_utilization", "peak_utilization")}
#: ``fleet.json``'s (``generalisation.json``'s, on a probe) ours_default fields ``learned`` must reproduce exactly.
CHECKED = ("slo_attainment", "usd_per_million", "cost_vs_feasible_oracle", "cost_vs_oracle")


@dataclass(frozen=True)
class Variant:
    name: str
    #: learned, fixed, prior, floor or peakcap (see the module docstring).
    rule: str
    #: floor: the share of C the rate never goes below; peakcap: the share of C the peak may use.
    k: float = 1.0
    target_utilization: float | None = None
    peak_utilization: float | None = None
    #: Why the NASA weeks are not run for it (None: they are).
    nasa_skipped: str | None = None


VARIANTS = (
    Variant("learned", "learned"),
    Variant("fixed", "fixed"),
    Variant("fixed:tu=0.75:pu=1.0", "fixed", target_utilization=0.75, peak_utilization=1.0),
    Variant(
        "fixed:tu=0.7:pu=1.0",
        "fixed",
        target_utilization=0.7,
        peak_utilization=1.0,
        nasa_skipped="a lower target than fixed:tu=0.75:pu=1.0 at the same peak share: it sizes for more "
        "replicas at every rate, so it is not expected to be cheaper than that variant, which NASA runs",
    ),
    Variant(
        "prior",
        "prior",
        nasa_skipped="differs from learned only until a rate is learned, which NASA's week of history "
        "replayed before the scored half provides",
    ),
    Variant(
        "floor0.9",
        "floor",
        k=0.9,
        nasa_skipped="binds only while the learned rate is below 0.9 C = 2,646/s; on NASA's scored halves "
        "the learned rate's 10th percentile is above that (learned_rate_p10_p50_p90)",
    ),
    Variant("peakcap1.1", "peakcap", k=1.1),
    Variant("learned:tu=0.85", "learned", target_utilization=0.85),
)


class KnownCapacityOurs(Ours):
    """Ours sizing by a variant's service rate instead of (or beside) the learned one.

    Everything else is :class:`Ours`' (the same scaling rule, warm pool and scrape delay): only the
    rate handed to :func:`scaling.decide`, or the peak signal it sees, changes.
    """

    def __init__(self, base: Ours, variant: Variant, capacity: float) -> None:
        super().__init__(base.scaling_spec, base.warm_spec, variant.name, base.scrape_delay)
        self.variant = variant
        self.capacity = capacity
        #: The learned rate, kept beside the one the variant sizes by (fixed, prior, floor), as
        #: decide() would have kept it.
        self.learned: float | None = None
        #: (time, learned rate) at each decision, for the percentiles over the scored half.
        self.trace: list[tuple[float, float | None]] = []

    def decide(self, now: float, metrics: MetricsView, observed: Observed) -> Targets:
        if self.variant.rule == "learned":
            out = super().decide(now, metrics, observed)
            self.trace.append((now, self.scaling_state.service_rate))
        elif self.variant.rule == "peakcap":
            out = self._decide_peakcap(now, metrics, observed)
            self.trace.append((now, self.scaling_state.service_rate))
        else:
            out = self._decide_known(now, metrics, observed)
            self.trace.append((now, self.learned))
        return out

    def _decide_peakcap(self, now: float, metrics: MetricsView, observed: Observed) -> Targets:
        counts = observed.counts
        spec = self.scaling_spec
        snapshot = metrics.snapshot(now, self.scrape_delay, counts.serving)
        rate = self.scaling_state.service_rate
        if rate and snapshot.arrival_peak is not None:
            # decide() sizes the peak by peak / (rate x peakUtilization); scaling the peak makes that
            # peak / (k x C), leaving the rate signal on the learned rate.
            scale = rate * spec.peak_utilization / (self.capacity * self.variant.k)
            snapshot = replace(snapshot, arrival_peak=snapshot.arrival_peak * scale)
        decision = scaling.decide(spec, self.scaling_state, snapshot, counts.active, counts.serving, now)
        self.scaling_state = decision.new_state
        return self.targets(decision, now, observed)

    def _decide_known(self, now: float, metrics: MetricsView, observed: Observed) -> Targets:
        counts = observed.counts
        spec = self.scaling_spec
        snapshot = metrics.snapshot(now, self.scrape_delay, counts.serving)
        state = self.scaling_state
        learned = self.learned
        if self.variant.rule == "fixed":
            rate = self.capacity
        elif self.variant.rule == "prior":
            rate = learned if learned else self.capacity
        elif self.variant.rule == "floor":
            rate = max(learned or 0.0, self.variant.k * self.capacity)
        else:
            raise ValueError(f"unknown rule {self.variant.rule!r}")
        decision = scaling.decide(spec, replace(state, service_rate=rate), snapshot, counts.active, counts.serving, now)
        # decide() would overwrite the learned rate with its update of the rate it was given (C):
        # keep the learned one apart, updated by the same steadiness test and rule decide() uses.
        fresh = snapshot.without_stale(now, spec.metrics.stale_after_seconds)
        self.learned = scaling.measured_service_rate(
            spec, replace(state, service_rate=learned), fresh, counts.serving, now, scaling.turned_off(spec)
        )
        self.scaling_state = decision.new_state
        return self.targets(decision, now, observed)


def make_case(variant: Variant, max_replicas: int, capacity: float, made: dict[str, KnownCapacityOurs]) -> runner.Case:
    """The variant as a runner case; the policy it makes is kept in ``made`` (in-process runs only)."""
    overrides: dict[str, float] = {}
    if variant.target_utilization is not None:
        overrides["targetUtilization"] = variant.target_utilization
        # As the runner's sweep of ours does: the queue target moves with the utilization target.
        overrides["targetQueueDepth"] = runner.OURS_QUEUE_PER_UTILIZATION * variant.target_utilization
    if variant.peak_utilization is not None:
        overrides["peakUtilization"] = variant.peak_utilization
    data = {"scaling": overrides, "warmPool": {}}

    def make() -> KnownCapacityOurs:
        policy = KnownCapacityOurs(ours_from_policy_file(data, max_replicas, variant.name), variant, capacity)
        made[variant.name] = policy
        return policy

    return runner.Case("ours", variant.name, False, make)


def learned_percentiles(policy: KnownCapacityOurs | None, measure_from: float) -> list[int] | None:
    """The learned rate's 10th, 50th and 90th percentiles over the scored half's decisions."""
    if policy is None:
        return None
    values = sorted(v for t, v in policy.trace if t >= measure_from and v)
    if not values:
        return None
    return [round(values[int(q * (len(values) - 1))]) for q in (0.1, 0.5, 0.9)]


def run_scenario(
    scenario: Scenario,
    trace: Trace,
    profile: Profile,
    variants: list[Variant],
    capacity: float,
    jobs: int,
    seed: int = SEED,
) -> tuple[list[dict[str, Any]], float]:
    """One row per variant on the scenario's scored half, and the feasible oracle's $/M.

    ``seed`` draws the workload and the fleet, as ``bench_fleet.run_scenario``'s does (a probe's).
    """
    factor = factor_for_peak(trace, profile, PEAK_REPLICAS)

    def workload(start: float, stop: float) -> Workload:
        return build(window(trace, start, stop), profile, factor, 1.0, seed, arrivals=scenario.arrivals)

    # max_replicas as bench_fleet sets it: twice the tuning half's oracle peak.
    max_replicas = 2 * runner.run_oracles(workload(*scenario.tune), profile, seed).peak
    score_w = workload(scenario.tune[0], scenario.score[1])
    measure_from = scenario.score[0] - scenario.tune[0]
    oracles = runner.run_oracles(score_w, profile, seed, measure_from)
    made: dict[str, KnownCapacityOurs] = {}
    cases = [make_case(v, max_replicas, capacity, made) for v in variants]
    started = time.perf_counter()

    def done(outcome: runner.Outcome) -> None:
        r = outcome.result
        print(
            f"  {outcome.case.setting}: {r.slo_attainment:.4%} within the SLO, ${r.usd_per_million:.5f}/M "
            f"({time.perf_counter() - started:.0f} s into the scenario's runs)",
            flush=True,
        )

    outcomes = runner.run_cases(
        score_w, profile, cases, seed, oracles.start, on_done=done, measure_from=measure_from, jobs=jobs
    )
    records = report.records(profile, outcomes, oracles, {}, "score", scenario.arrivals)
    rows = [r for r in records if r["policy"] == "ours"]
    for row in rows:
        row["scenario"] = scenario.name
        row["name"] = f"{scenario.name}/score/ours/{row['setting']}"
        row["knob"] = "known-capacity variant (params.variants)"
        row["learned_rate_p10_p50_p90"] = learned_percentiles(made.get(row["setting"]), measure_from)
    return rows, oracles.feasible.usd_per_million


def check_learned(name: str, row: dict[str, Any], ref: dict[str, Any], source: str = "fleet_json") -> dict[str, Any]:
    """The learned row against ``ref``'s (fleet.json's figures, or generalisation.json's) ours_default
    for scenario ``name``: per field, both values and whether they are equal."""
    out: dict[str, Any] = {}
    for field in CHECKED:
        expected = ref.get(f"{name}.ours_default.{field}")
        out[field] = {source: expected, "here": row[field], "equal": expected == row[field]}
    return out


def score_rows(
    figures: dict[str, Any], key: str, rows: list[dict[str, Any]], static_usd: float | None, feasible_usd: float
) -> None:
    """Each row's x_static, and its figures under ``<key>.<variant>.*``."""
    for row in rows:
        row["x_static"] = round(row["usd_per_million"] / static_usd, 4) if static_usd else None
        prefix = f"{key}.{row['setting']}"
        figures[f"{prefix}.slo_attainment"] = row["slo_attainment"]
        figures[f"{prefix}.usd_per_million"] = row["usd_per_million"]
        figures[f"{prefix}.x_feasible_oracle"] = row["cost_vs_feasible_oracle"]
        figures[f"{prefix}.x_static"] = row["x_static"]
    figures[f"{key}.feasible_oracle_usd_per_million"] = round(feasible_usd, 5)


def _standing(figures: dict[str, Any], keys: list[str], variant: str) -> tuple[list[str], list[str], list[str]]:
    """Of the ``keys`` (``<key>.<variant>.*`` in figures) the variant ran on: all, those it reaches 99 % on,
    and those it is cheaper than learned on."""
    ran = [k for k in keys if f"{k}.{variant}.slo_attainment" in figures]
    reaches = [k for k in ran if figures[f"{k}.{variant}.slo_attainment"] >= SLO_TARGET]
    cheaper = [k for k in ran if figures[f"{k}.{variant}.usd_per_million"] < figures[f"{k}.learned.usd_per_million"]]
    return ran, reaches, cheaper


def verdicts(
    figures: dict[str, Any], names: list[str], variants: list[Variant], probes: list[str] | None = None
) -> dict[str, Any]:
    """Per variant, over the scenarios ``names`` and the probe scenarios ``probes`` (``<probe>:<scenario>``)."""
    out: dict[str, Any] = {}
    for v in variants:
        ran, reaches, cheaper = _standing(figures, names, v.name)
        prefix = f"verdict.{v.name}"
        out[f"{prefix}.scenarios_run"] = len(ran)
        out[f"{prefix}.reaches_99_everywhere"] = bool(ran) and len(reaches) == len(ran)
        out[f"{prefix}.cheaper_than_learned_everywhere"] = None if v.name == "learned" else len(cheaper) == len(ran)
        out[f"{prefix}.cheaper_than_learned_on"] = None if v.name == "learned" else ", ".join(cheaper) or None
        if probes is None:
            continue
        keys = {probe_key(p): p for p in probes}
        ran, reaches, cheaper = _standing(figures, list(keys), v.name)
        out[f"{prefix}.probes_run"] = len(ran)
        out[f"{prefix}.reaches_99_on_every_probe"] = bool(ran) and len(reaches) == len(ran)
        out[f"{prefix}.probes_missing_99"] = ", ".join(keys[k] for k in ran if k not in reaches) or None
        learned = v.name == "learned"
        out[f"{prefix}.cheaper_than_learned_on_every_probe"] = (
            None if learned else bool(ran) and len(cheaper) == len(ran)
        )
        out[f"{prefix}.probes_not_cheaper_than_learned"] = (
            None if learned else ", ".join(keys[k] for k in ran if k not in cheaper) or None
        )
    return out


def probe_key(probed: str) -> str:
    """The figures' key of probe scenario ``<probe>:<scenario>``: ``probe.<probe>.<scenario>``."""
    probe, scenario = probed.split(":", 1)
    return f"probe.{probe}.{scenario}"


def print_table(
    figures: dict[str, Any], names: list[str], variants: list[Variant], probes: bool = False, static: str = "fleet"
) -> None:
    """The scenarios' table, or with ``probes`` the probe scenarios' (``names`` as ``<probe>:<scenario>``)."""
    short = {n: n.replace("conv-1h/", "conv ").replace("nasa-14d/", "nasa ") for n in names}
    keys = {n: probe_key(n) if probes else n for n in names}
    reaches_key, cheaper_key = (
        ("reaches_99_on_every_probe", "cheaper_than_learned_on_every_probe")
        if probes
        else ("reaches_99_everywhere", "cheaper_than_learned_everywhere")
    )
    print(f"{'variant':22s}" + "".join(f"{short[n]:>26s}" for n in names) + "  all>=99  cheaper everywhere")
    for v in variants:
        cells = []
        for n in names:
            key = f"{keys[n]}.{v.name}"
            if f"{key}.slo_attainment" not in figures:
                cells.append(f"{'-':>26s}")
                continue
            cells.append(
                f"{figures[f'{key}.slo_attainment']:8.2%} {figures[f'{key}.x_feasible_oracle']:6.3f}x "
                f"{figures[f'{key}.x_static']:5.3f}s"
            )
        reaches = figures[f"verdict.{v.name}.{reaches_key}"]
        cheaper = figures[f"verdict.{v.name}.{cheaper_key}"]
        print(f"{v.name:22s}" + "".join(f"{c:>26s}" for c in cells) + f"  {reaches!s:7s}  {cheaper}")
    print(f"cells: attainment, x feasible oracle, x static ({static}.json's chosen static)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="conv only; writes known-capacity-quick.json")
    parser.add_argument("--nasa-all", action="store_true", help="run every variant on the NASA weeks")
    # One by default: the learned-rate percentiles the NASA skips cite are read from the policies,
    # which live in worker processes with more (3.5 minutes in all here, 2.5 with two).
    parser.add_argument(
        "--jobs", type=int, default=1, help="parallel simulations (more: no learned-rate percentiles; default 1)"
    )
    args = parser.parse_args()
    traces = load_traces()
    if traces is None:
        return 2
    fleet_doc = json.loads(FLEET_JSON.read_text())
    fleet = fleet_doc["figures"]
    generalisation_doc = json.loads(GENERALISATION_JSON.read_text())
    generalisation = generalisation_doc["figures"]
    profile = load_profile(PROFILE)
    # The replica's known capacity: the profile's best full-batch throughput.
    capacity = max(p.throughput_per_s for p in profile.efficient_batches())
    todo = scenarios(False, math.ceil(traces["conv"].duration), math.ceil(traces["nasa"].duration))
    if args.quick:
        todo = [s for s in todo if s.trace == "conv"]
    names = [s.name for s in todo]
    # bench_generalisation's probes of the conv scenarios: (probe, its scenario, trace, seed). The spans
    # are the unprobed scenarios', as bench_generalisation keeps them.
    conv = [s for s in todo if s.trace == "conv"]
    flipped = reversed_trace(traces["conv"])
    probe_todo = [
        (probe, replace(s, name=f"{probe}:{s.name}"), flipped if flip else traces["conv"], seed)
        for probe, flip, seed, covers in PROBES
        if "conv" in covers
        for s in conv
    ]
    probed = [p.name for _, p, _, _ in probe_todo]
    name = "known-capacity-quick" if args.quick else "known-capacity"
    params: dict[str, Any] = {
        "profile": PROFILE,
        "known_capacity_per_s": capacity,
        "peak_replicas": PEAK_REPLICAS,
        "seed": SEED,
        "slo_target": SLO_TARGET,
        "quick": args.quick,
        "nasa_all": args.nasa_all,
        "jobs": args.jobs,
        "scenarios": [{"name": s.name, "arrivals": s.arrivals, "tune_s": s.tune, "score_s": s.score} for s in todo],
        "variants": {
            v.name: {
                "rule": v.rule,
                "k": v.k if v.rule in ("floor", "peakcap") else None,
                # The values in force: the CRD's defaults where the variant leaves them.
                "target_utilization": v.target_utilization or _CRD_DEFAULT["target_utilization"],
                "peak_utilization": v.peak_utilization or _CRD_DEFAULT["peak_utilization"],
            }
            for v in VARIANTS
        },
        "nasa_skipped": {} if args.nasa_all else {v.name: v.nasa_skipped for v in VARIANTS if v.nasa_skipped},
        "static": "x_static divides by the scored $/M of the static fleet bench_fleet chose on the tuning half, "
        "read from bench/results/fleet.json (not rerun here)",
        "static_chosen": {n: fleet.get(f"{n}.static.chosen_setting") for n in names},
        "static_usd_per_million": {n: fleet.get(f"{n}.static.usd_per_million") for n in names},
        "fleet_json_commit": fleet_doc.get("commit"),
        "probes": [
            {"name": probe, "reversed": flip, "seed": seed, "scenarios": [f"{probe}:{s.name}" for s in conv]}
            for probe, flip, seed, covers in PROBES
            if "conv" in covers
        ],
        "probe_nasa_skipped": "bench_generalisation's reversed NASA weeks (its only NASA probes) are not run: "
        "each NASA scenario takes about 4 minutes here (nasa-14d/*.wall_s), the conv probes about 1.5 s",
        "probe_static": "probe x_static divides by the scored $/M of the static fleet bench_generalisation chose "
        "on the probe's tuning half, read from bench/results/generalisation.json (not rerun here)",
        "probe_static_chosen": {n: generalisation.get(f"{n}.static.chosen_setting") for n in probed},
        "probe_static_usd_per_million": {n: generalisation.get(f"{n}.static.usd_per_million") for n in probed},
        "generalisation_json_commit": generalisation_doc.get("commit"),
    }
    started = time.perf_counter()
    figures: dict[str, Any] = {}
    cases: list[dict[str, Any]] = []
    checks: dict[str, Any] = {}
    for scenario in todo:
        t0 = time.perf_counter()
        variants = [v for v in VARIANTS if scenario.trace == "conv" or args.nasa_all or v.nasa_skipped is None]
        print(f"{scenario.name}: {len(variants)} variants, tune {scenario.tune}, score {scenario.score}", flush=True)
        rows, feasible_usd = run_scenario(scenario, traces[scenario.trace], profile, variants, capacity, args.jobs)
        static_usd = fleet.get(f"{scenario.name}.static.usd_per_million")
        score_rows(figures, scenario.name, rows, static_usd, feasible_usd)
        learned = next(r for r in rows if r["setting"] == "learned")
        figures[f"{scenario.name}.learned_rate_p10_p50_p90"] = learned["learned_rate_p10_p50_p90"]
        checks[scenario.name] = check_learned(scenario.name, learned, fleet)
        reproduced = all(c["equal"] for c in checks[scenario.name].values())
        figures[f"check.{scenario.name}.learned_reproduces_fleet_json"] = reproduced
        figures[f"{scenario.name}.wall_s"] = round(time.perf_counter() - t0, 1)
        figures["bench_wall_s"] = round(time.perf_counter() - started, 1)
        cases.extend(rows)
        params["check_learned_vs_fleet_json"] = checks
        write_result(name, params, figures, cases)
        print(f"{scenario.name}: done in {figures[f'{scenario.name}.wall_s']:.0f} s", flush=True)
        if not reproduced:
            # Every other row is read against learned and fleet.json: without the match they mean nothing.
            print(
                f"error: learned does not reproduce fleet.json's ours_default on {scenario.name}: "
                f"{json.dumps(checks[scenario.name])}",
                file=sys.stderr,
            )
            return 1
    figures["check.learned_reproduces_fleet_json"] = True
    probe_checks: dict[str, Any] = {}
    for probe, scenario, trace, seed in probe_todo:
        t0 = time.perf_counter()
        key = probe_key(scenario.name)
        print(
            f"{scenario.name}: {len(VARIANTS)} variants, seed {seed}, tune {scenario.tune}, score {scenario.score}",
            flush=True,
        )
        rows, feasible_usd = run_scenario(scenario, trace, profile, list(VARIANTS), capacity, args.jobs, seed)
        for row in rows:
            row["probe"] = probe
        static_usd = generalisation.get(f"{scenario.name}.static.usd_per_million")
        score_rows(figures, key, rows, static_usd, feasible_usd)
        learned = next(r for r in rows if r["setting"] == "learned")
        figures[f"{key}.learned_rate_p10_p50_p90"] = learned["learned_rate_p10_p50_p90"]
        probe_checks[scenario.name] = check_learned(scenario.name, learned, generalisation, "generalisation_json")
        reproduced = all(c["equal"] for c in probe_checks[scenario.name].values())
        figures[f"check.{key}.learned_reproduces_generalisation_json"] = reproduced
        figures[f"{key}.wall_s"] = round(time.perf_counter() - t0, 1)
        figures["bench_wall_s"] = round(time.perf_counter() - started, 1)
        cases.extend(rows)
        params["check_learned_vs_generalisation_json"] = probe_checks
        write_result(name, params, figures, cases)
        print(f"{scenario.name}: done in {figures[f'{key}.wall_s']:.0f} s", flush=True)
        if not reproduced:
            # The probe rows are read against learned and generalisation.json, as the scenarios' against fleet.json.
            print(
                f"error: learned does not reproduce generalisation.json's ours_default on {scenario.name}: "
                f"{json.dumps(probe_checks[scenario.name])}",
                file=sys.stderr,
            )
            return 1
    figures["check.learned_reproduces_generalisation_json"] = True
    figures.update(verdicts(figures, names, list(VARIANTS), probed))
    figures["bench_wall_s"] = round(time.perf_counter() - started, 1)
    path = write_result(name, params, figures, cases)
    print_table(figures, names, list(VARIANTS))
    print_table(figures, probed, list(VARIANTS), probes=True, static="generalisation")
    print(f"wrote {path} in {figures['bench_wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
