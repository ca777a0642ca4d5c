"""Simulator invariants, trace reading and scaling, profiles, and the `simulate` command."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest
import yaml

from neuronfleet.sim import engine, oracle, runner
from neuronfleet.sim.baselines import Hpa, Keda, Kpa, RayServe
from neuronfleet.sim.command import _policy_file, run_cli
from neuronfleet.sim.policies import DEFAULT_OURS, Policy, Static, ours_from_policy_file
from neuronfleet.sim.profiles import Profile, ProfileError, dump_profile, load_profile
from neuronfleet.sim.trace import Trace, TraceError, load, scale, with_history_pass
from neuronfleet.sim.workload import build, factor_for_peak

REPO = Path(__file__).resolve().parents[2]
ZERO_COLD_START = {"node": 0, "scheduling": 0, "pull": 0, "init": 0, "load": 0, "warmup": 0}


def write_trace(path: Path, seconds: int = 600, seed: int = 3) -> Path:
    """A bursty synthetic trace: a base rate with a doubling in the middle, tokens included."""
    rng = np.random.default_rng(seed)
    times: list[float] = []
    t = 0.0
    while t < seconds:
        rate = 4.0 if seconds / 3 < t < 2 * seconds / 3 else 2.0
        t += rng.exponential(1 / rate)
        times.append(t)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for x in times:
        lines.append(f"{x:.4f},{rng.integers(50, 2000)},{rng.integers(10, 400)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def zero_cold(profile: Profile) -> Profile:
    return profile.model_copy(
        update={"cold_start": profile.cold_start.model_copy(update=ZERO_COLD_START), "promote_seconds": 0.0}
    )


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    return load(write_trace(tmp_path_factory.mktemp("trace") / "t.csv"))


def all_policies(low: int, high: int, static: int) -> list[Policy]:
    return [
        ours_from_policy_file({**DEFAULT_OURS, "scaling": {"minReplicas": low}}, high, "default"),
        Hpa(0.5, low, high, "0.5"),
        Keda(8, low, high, "8"),
        Kpa(70, low, high, "70"),
        RayServe(2, low, high, "2"),
        Static(static, "static"),
    ]


@pytest.mark.parametrize("name", ["bert-base", "llama-2-7b"])
def test_zero_cold_start_and_ample_capacity_meet_the_slo(trace: Trace, name: str) -> None:
    profile = zero_cold(load_profile(name))
    workload = build(trace, profile, factor_for_peak(trace, profile, 6), jitter=1.0, seed=1)
    _, schedule = oracle.run(workload, profile, seed=1)
    ample = 2 * int(schedule.max())
    for policy in all_policies(ample, 4 * ample, ample):
        result = engine.run(workload, profile, policy, start_replicas=ample, seed=1)
        assert result.slo_attainment >= 0.999, (policy.name, result.slo_attainment)
        assert result.rejected == 0


@pytest.mark.parametrize("name", ["bert-base", "llama-2-7b"])
def test_the_instant_oracle_adds_replicas_in_the_seconds_its_first_schedule_missed(
    trace: Trace, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its first schedule one replica short everywhere: requests miss. The refinement adds replicas in
    # the seconds that were late, and only there, until none is.
    profile = load_profile(name)
    workload = build(trace, profile, factor_for_peak(trace, profile, 6), jitter=1.0, seed=1)
    short = np.maximum(oracle.initial_schedule(workload, profile) - 1, 0)
    first = engine.run(workload, profile, oracle.Oracle(), start_replicas=0, seed=1, schedule=short)
    assert first.slo_attainment < 0.99
    monkeypatch.setattr(oracle, "initial_schedule", lambda _workload, _profile: short.copy())
    refined, schedule = oracle.run(workload, profile, seed=1)
    assert refined.slo_attainment >= 0.999
    assert (schedule >= short).all() and (schedule > short).any()
    assert (schedule - short).sum() < (short > 0).sum() / 2  # where it missed, not everywhere


@pytest.mark.parametrize("name", ["bert-base", "llama-2-7b"])
def test_oracle_is_never_more_expensive_than_a_policy_meeting_the_slo(trace: Trace, name: str) -> None:
    profile = load_profile(name)
    workload = build(trace, profile, factor_for_peak(trace, profile, 6), jitter=1.0, seed=1)
    best, schedule = oracle.run(workload, profile, seed=1)
    assert best.slo_attainment >= 0.999
    peak = int(schedule.max())
    results = [
        engine.run(workload, profile, policy, start_replicas=peak, seed=1) for policy in all_policies(1, 2 * peak, peak)
    ]
    meeting = [r for r in results if r.slo_attainment >= 0.99]
    assert meeting, "the static peak at least meets the SLO"
    for r in meeting:
        assert best.usd <= r.usd, (r.policy, r.usd, best.usd)


@pytest.mark.parametrize("name", ["bert-base", "llama-2-7b"])
def test_requests_in_equal_served_plus_rejected(trace: Trace, name: str) -> None:
    profile = load_profile(name)
    factor = factor_for_peak(trace, profile, 6)
    workload = build(trace, profile, factor, jitter=1.0, seed=1)
    expected = round(len(trace) * factor) if profile.kind == "llm" else workload.requests
    for replicas in (1, 3, 20):  # 1 and 3 are overloaded: the queue bound rejects
        result = engine.run(workload, profile, Static(replicas, "x"), start_replicas=replicas, seed=1)
        assert result.requests == pytest.approx(expected, rel=0.01)
        assert result.served + result.rejected == pytest.approx(result.requests)
        assert result.within_slo <= result.served + 1e-6
    overloaded = engine.run(workload, profile, Static(1, "x"), start_replicas=1, seed=1)
    assert overloaded.rejected > 0


def test_batch_binning_keeps_every_copy(trace: Trace) -> None:
    profile = load_profile("bert-base")
    workload = build(trace, profile, 1000, jitter=1.0, seed=1)
    assert workload.requests == len(trace) * 1000


def test_runs_are_deterministic(trace: Trace) -> None:
    profile = load_profile("bert-base")
    workload = build(trace, profile, factor_for_peak(trace, profile, 6), jitter=1.0, seed=7)

    def once() -> tuple[float, float, float]:
        policy = ours_from_policy_file(DEFAULT_OURS, 20, "d")
        r = engine.run(workload, profile, policy, start_replicas=4, seed=7)
        return r.within_slo, r.usd, r.p99_ms

    assert once() == once()


def test_cold_starts_cost_slo_and_warm_pool_is_counted(trace: Trace) -> None:
    profile = load_profile("bert-base")
    workload = build(trace, profile, factor_for_peak(trace, profile, 6), jitter=1.0, seed=1)
    # Start far too small: the doubling in the middle waits on minutes of cold start.
    result = engine.run(workload, profile, Hpa(0.9, 1, 40, "0.9"), start_replicas=1, seed=1)
    assert result.slo_attainment < 0.99
    assert result.cold_start_misses > 0
    assert result.chip_hours >= result.replica_hours * profile.chips_per_replica - 1e-9


def test_best_picks_the_cheapest_setting_reaching_the_target(trace: Trace) -> None:
    profile = load_profile("bert-base")
    workload = build(trace, profile, factor_for_peak(trace, profile, 6), jitter=1.0, seed=1)
    peak = int(oracle.initial_schedule(workload, profile).max())
    todo = runner.cases(["static"], 2 * peak, peak)
    outcomes = runner.run_cases(workload, profile, todo, seed=1, start=peak)
    chosen = runner.best(outcomes, 0.99)["static"]
    assert chosen.result.slo_attainment >= 0.99
    cheaper = [o for o in outcomes if o.result.usd < chosen.result.usd]
    assert all(o.result.slo_attainment < 0.99 for o in cheaper)


# ------------------------------------------------------------------------------------- traces


def test_trace_columns_are_detected(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("request_id,Arrival,prompt_tokens,completion_tokens\na,10.5,5,7\nb,10.0,6,8\n")
    trace = load(path)
    assert trace.arrivals.tolist() == [0.0, 0.5]  # sorted, from the first arrival
    assert trace.context_tokens is not None and trace.context_tokens.tolist() == [6.0, 5.0]
    assert trace.generated_tokens is not None and trace.generated_tokens.tolist() == [8.0, 7.0]


def test_trace_with_dates_and_without_tokens(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("timestamp\n2023-11-16 18:15:46.5\n2023-11-16 18:15:48.0\n")
    trace = load(path)
    assert trace.arrivals.tolist() == [0.0, 1.5]
    assert trace.context_tokens is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty file"),
        ("when,tokens\n1,2\n", "no arrival-time column"),
        ("timestamp\n", "no requests"),
        ("timestamp,ContextTokens\n1.0,5\nyesterday,5\n", ":3: cannot read time"),
        ("timestamp,ContextTokens\n1.0,many\n", "context tokens 'many' is not a number"),
        ("timestamp,ContextTokens\n1.0\n", "1 fields, the header has 2"),
    ],
)
def test_malformed_traces_are_clear_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(TraceError, match=message):
        load(path)


def test_missing_trace_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot open"):
        load(tmp_path / "nope.csv")


def test_compressed_trace_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(write_trace(tmp_path / "t.csv", seconds=30).read_bytes()))
    with pytest.raises(TraceError, match=r"t\.csv\.gz: not a UTF-8 CSV \(byte 0x8b .*decompress it first\)"):
        load(path)


def test_scaling_keeps_the_burst_structure(trace: Trace) -> None:
    scaled = scale(trace, 10, jitter=1.0, seed=1)
    assert len(scaled) == 10 * len(trace)
    scaled_per_minute = np.bincount((scaled.arrivals // 60).astype(int))
    original_per_minute = np.bincount((trace.arrivals // 60).astype(int), minlength=len(scaled_per_minute))
    # Minute by minute the scaled trace is 10x the original (jitter moves copies by < 1 s,
    # so only the few arrivals in the last second of a minute spill into the next).
    assert np.allclose(scaled_per_minute[:-1], 10 * original_per_minute[: len(scaled_per_minute) - 1], rtol=0.05)


# ------------------------------------------------------------------------------------ profiles


def test_profiles_round_trip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(dump_profile("llama-2-7b"))
    assert load_profile(str(path)) == load_profile("llama-2-7b")
    path.write_text(dump_profile("bert-base").replace("inf2.xlarge", "inf2.huge"))
    with pytest.raises(ProfileError, match=r"inf2\.huge"):
        load_profile(str(path))
    path.write_text(dump_profile("bert-base").replace("uniform:", "triangular:"))
    with pytest.raises(ProfileError, match="unknown distribution 'triangular'"):
        load_profile(str(path))
    with pytest.raises(ProfileError, match="neither a built-in profile"):
        load_profile("gpt-5")
    path.write_text("name: x\n  batch: [1\n")
    with pytest.raises(ProfileError, match=r"p\.yaml: cannot read: malformed YAML at line 2, column 8: ") as error:
        load_profile(str(path))
    assert "\n" not in str(error.value)


def test_builtin_figures_match_facts() -> None:
    bert = load_profile("bert-base")
    assert [p.batch for p in bert.efficient_batches()] == [1, 4, 16]  # batch 8 is slower than 4
    assert bert.instance.usd_per_hour == 0.7582
    llama = load_profile("llama-2-7b")
    assert llama.llm is not None and llama.llm.decode_ms_per_token == 12.1
    assert llama.instance.chips == 12


# ------------------------------------------------------------------------------------- command


def test_simulate_command_writes_report_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = write_trace(tmp_path / "t.csv", seconds=600)
    policy = tmp_path / "tuning.yaml"
    policy.write_text("scaling:\n  targetUtilization: 0.6\nwarmPool:\n  mode: Fixed\n  pods: 1\n")
    out = tmp_path / "out"
    code = run_cli(
        [
            "--trace",
            str(csv),
            "--peak-replicas",
            "5",
            "--policies",
            "ours,hpa",
            "--no-sweep",
            "--policy",
            str(policy),
            "--out",
            str(out),
        ]
    )
    assert code == 0
    doc = json.loads((out / "simulate.json").read_text())
    assert doc["attribution"] is None  # a synthetic trace: no third-party attribution to carry
    policies = {(c["policy"], c["setting"]) for c in doc["cases"]}
    ours_default = f"{runner.DEFAULTS['ours']:g}"
    assert {("ours", ours_default), ("hpa", "0.5"), ("tuning", "tuning.yaml"), ("oracle", "clairvoyant")} <= policies
    assert "oracle-feasible" in {c["policy"] for c in doc["cases"]}
    assert doc["arrivals"] == "superpose"
    for case in doc["cases"]:
        assert 0 <= case["slo_attainment"] <= 1
        assert case["usd_per_million"] > 0
        assert case["phase"] == "in-sample" and case["arrivals"] == "superpose"  # no held-out scoring
        assert case["cost_vs_feasible_oracle"] > 0
    assert (out / "bert-base-timeline.png").stat().st_size > 10_000
    assert (out / "bert-base-latency-cdf.png").stat().st_size > 10_000
    assert "bert-base superpose: one setting per policy" in capsys.readouterr().out  # a file is a policy of its own


def test_simulate_json_records_the_arrivals_models_own_option_only(tmp_path: Path) -> None:
    # An option of another arrivals model changes nothing (and is refused): a reader of
    # simulate.json must not take a rate window for part of a superpose run.
    csv = write_trace(tmp_path / "t.csv", seconds=600)
    for arrivals, extra, expected in (
        ("rate", ["--rate-window", "30"], (30.0, None)),
        ("rate", [], (60.0, None)),  # the default window, a minute
        ("superpose", ["--superpose-spread", "120"], (None, 120.0)),
        ("replicate", [], (None, None)),
    ):
        out = tmp_path / f"{arrivals}{len(extra)}"
        args = ["--trace", str(csv), "--peak-replicas", "3", "--policies", "static", "--no-sweep", "--no-plots"]
        assert run_cli([*args, "--arrivals", arrivals, *extra, "--out", str(out)]) == 0
        doc = json.loads((out / "simulate.json").read_text())
        assert (doc["arrivals"], doc["rate_window_s"], doc["superpose_spread_s"]) == (arrivals, *expected)


def _swept(costs: list[float], attainments: list[float]) -> list[runner.Outcome]:
    """Outcomes of one family swept over rising targets, with these costs and attainments."""
    values = [0.5, 0.6, 0.7, 0.8][: len(costs)]
    return [
        runner.Outcome(
            runner.Case("hpa", f"{value:g}", False, lambda: Static(1, "x"), value),
            cast(engine.RunResult, SimpleNamespace(usd=cost, slo_attainment=attainment)),
        )
        for value, cost, attainment in zip(values, costs, attainments, strict=True)
    ]


def test_monotonicity_reads_either_direction_and_tolerates_run_to_run_noise() -> None:
    verdict = runner.monotonicity
    assert verdict(_swept([100, 90, 80, 70], [0.999, 0.99, 0.98, 0.95])) == {"hpa": {"cost": True, "attainment": True}}
    assert verdict(_swept([70, 80, 90, 100], [0.95, 0.98, 0.99, 0.999])) == {"hpa": {"cost": True, "attainment": True}}
    # Within 0.5 % of the largest cost and 0.0005 of attainment, a step back is noise.
    assert verdict(_swept([100, 100.4, 100.2, 101], [0.99, 0.9903, 0.9899, 0.991]))["hpa"] == {
        "cost": True,
        "attainment": True,
    }
    assert verdict(_swept([100, 110, 105, 120], [0.99, 0.95, 0.97, 0.9]))["hpa"] == {"cost": False, "attainment": False}
    assert verdict(_swept([100, 90], [0.99, 0.98]))["hpa"] == {"cost": None, "attainment": None}  # too few to say


def test_held_out_scoring_tunes_on_one_part_and_scores_on_the_rest(tmp_path: Path) -> None:
    # Each half outlasts one of bert-base's cold starts (451 s), as a scored span must.
    csv = write_trace(tmp_path / "t.csv", seconds=1000)
    out = tmp_path / "out"
    args = ["--trace", str(csv), "--peak-replicas", "5", "--policies", "hpa,static", "--no-plots", "--out", str(out)]
    assert run_cli([*args, "--tune-fraction", "0.5", "--jobs", "1"]) == 0
    doc = json.loads((out / "simulate.json").read_text())
    tune = [c for c in doc["cases"] if c["phase"] == "tune" and not c["policy"].startswith("oracle")]
    score = [c for c in doc["cases"] if c["phase"] == "score" and not c["policy"].startswith("oracle")]
    assert len(tune) == len(runner.GRIDS["hpa"]) + len(runner.GRIDS["static"])
    # One scored case per family: its setting chosen on the tuning part.
    chosen = doc["profiles"]["bert-base"]["chosen"]
    assert sorted((c["policy"], c["setting"]) for c in score) == sorted(chosen.items())
    assert {c["setting"] for c in tune if c["best"]} == set(chosen.values())
    # The scored part is the second half: about half the requests, measured after the tuning half.
    phases = doc["profiles"]["bert-base"]["phases"]
    assert phases["score"]["measured_from_s"] == pytest.approx(500, abs=1)
    assert set(doc["profiles"]["bert-base"]["monotonic_in_target"]) == {"hpa", "static"}
    assert doc["held_out"] == {"tune_fraction": 0.5}


def test_azure_trace_reports_carry_its_attribution(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = write_trace(tmp_path / "azure-llm-sample.csv", seconds=600)
    out = tmp_path / "out"
    assert run_cli(["--trace", str(csv), "--policies", "static", "--no-sweep", "--no-plots", "--out", str(out)]) == 0
    doc = json.loads((out / "simulate.json").read_text())
    assert "CC-BY 4.0" in doc["attribution"]
    assert "Splitwise" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", "/nonexistent.csv"], "cannot open"),
        (["--policies", "hpa,magic"], "unknown policies"),
        (["--profile", "nope"], "neither a built-in profile"),
        (["--peak-replicas", "-3"], "must be a positive number"),
        (["--tune-fraction", "0"], "--tune-fraction must be between 0 and 1"),  # nothing to tune on
        (["--tune-fraction", "1"], "--tune-fraction must be between 0 and 1"),  # nothing to score on
        ([], "--trace CSV is required"),
    ],
)
def test_simulate_bad_input_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    if args and args[0] != "--trace":
        args = ["--trace", str(write_trace(tmp_path / "t.csv", seconds=30)), *args]
    assert run_cli(args) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_simulate_bad_policy_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("scaling:\n  targetUtilization: 7\n")
    csv = write_trace(tmp_path / "t.csv", seconds=30)
    assert run_cli(["--trace", str(csv), "--policy", str(policy)]) == 2
    assert "targetUtilization" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("scaling: 5\n", "p.yaml: `scaling` must be a mapping of its fields"),
        ("warmPool: [Auto]\n", "p.yaml: `warmPool` must be a mapping of its fields"),
        ("scaling: {}\nwarmpool: {mode: Auto}\n", "p.yaml: unknown key `warmpool`; expected `scaling`, `warmPool`"),
        ("scaling:\ntargetQueueDepth: 4\n", "unknown key `targetQueueDepth`"),
        ("scaling: {targetQueDepth: 4}\n", 'scaling.targetQueDepth: unknown field "targetQueDepth"'),
        # The CRD's CEL rules, as `neuronfleet validate` applies them.
        ("scaling: {minReplicas: 5, maxReplicas: 2}\n", "scaling.minReplicas: minReplicas must not exceed maxReplicas"),
        ("warmPool: {minPods: 3, maxPods: 1}\n", "warmPool.minPods: warmPool.minPods must not exceed warmPool.maxPods"),
        ("kind: InferenceDeployment\nspce: {}\nspec: {scaling: {}}\n", "unknown key `spce`"),
        ("spec: {scaling: {}, scalling: {}}\n", "unknown key `spec.scalling`"),
        (
            "spec: {model: {source: 's3://bucket/m/'}, scaling: {minReplicas: 3, maxReplicas: 1}}\n",
            "spec.scaling.minReplicas: minReplicas must not",
        ),
        # A whole CR is checked whole, as the API server checks it.
        ("spec: {scaling: {minReplicas: 3, maxReplicas: 1}}\n", "p.yaml: spec.model: required field is missing"),
        ("scaling: {mode: Auto}\n---\nwarmPool: {}\n", "holds several YAML documents and 0 InferenceDeployments"),
        ("scaling: {minReplicas: 3\n", "cannot read policy file: malformed YAML at line 2, column 1: expected ','"),
    ],
    ids=[
        "scaling-not-a-mapping",
        "warmpool-not-a-mapping",
        "unknown-section",
        "misindented",
        "unknown-field",
        "inverted-replicas",
        "inverted-warm-pods",
        "cr-unknown-key",
        "cr-unknown-spec-key",
        "cr-inverted-replicas",
        "cr-without-model",
        "two-documents",
        "malformed-yaml",
    ],
)
def test_simulate_policy_file_is_checked_as_validate_checks_a_cr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(content)
    assert run_cli(["--trace", str(tmp_path / "unread.csv"), "--policy", str(policy)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def read_policy_only(
    tmp_path: Path, content: str, capsys: pytest.CaptureFixture[str], *, accepted: bool
) -> tuple[Path, str, str]:
    """``content`` as a policy file, given to a run whose trace is missing: policy files are read
    before the trace, so the run ends at the trace (exit 2, "cannot open") when the file passed,
    and before it when the file is refused. Asserts which of the two happened (exit 2 alone holds
    either way); returns the file and the run's stdout and stderr."""
    policy = tmp_path / "p.yaml"
    policy.write_text(content)
    assert run_cli(["--trace", str(tmp_path / "absent.csv"), "--policy", str(policy)]) == 2
    out, err = capsys.readouterr()
    assert ("absent.csv: cannot open" in err) == accepted, err
    return policy, out, err


@pytest.mark.parametrize(
    "content",
    [
        "scaling:\nwarmPool: {mode: Auto}\n",
        # maxReplicas left out is the CRD's default (10), as in a cluster: a floor up to it is taken
        # (above it is refused: test_sim_policy_files).
        "scaling: {minReplicas: 10}\n",
        (REPO / "examples" / "bert-embeddings.yaml").read_text(),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml}\n---\n"
        + (REPO / "examples" / "bert-embeddings.yaml").read_text(),
    ],
    ids=["empty-section", "min-at-the-default-max", "whole-cr", "cr-beside-its-namespace"],
)
def test_simulate_accepts_good_policy_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str) -> None:
    _, _, err = read_policy_only(tmp_path, content, capsys, accepted=True)
    # The run's one complaint is the missing trace: nothing about the policy file.
    assert err.strip().splitlines() == [f"error: {tmp_path / 'absent.csv'}: cannot open: No such file or directory"]


def test_read_policy_only_tells_an_accepted_file_from_a_refused_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It asserted exit 2 alone, which a refused file gives too: a test that a file runs with no
    # note passed for a file the run refused.
    refused = "scaling: {targetUtilization: 7}\nwarmPool: {mode: Bogus}\n"
    _, _, err = read_policy_only(tmp_path, refused, capsys, accepted=False)
    assert "p.yaml: " in err and "warmPool.mode" in err
    with pytest.raises(AssertionError):
        read_policy_only(tmp_path, refused, capsys, accepted=True)
    with pytest.raises(AssertionError):
        read_policy_only(tmp_path, "scaling: {targetUtilization: 0.6}\n", capsys, accepted=False)


@pytest.mark.parametrize("value", ["0", "-5", "nan"])
def test_simulate_duration_must_be_positive(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_cli(["--trace", str(tmp_path / "t.csv"), "--duration", value])
    assert exit_info.value.code == 2
    assert f"argument --duration: must be a positive number of seconds, got {value}" in capsys.readouterr().err


def test_simulate_help_reads_well(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_cli(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for topic in (
        "superpose",
        "rate",
        "replicate",
        "feasible oracle",
        "instant oracle",
        "--tune-fraction",
        "--score-on",
    ):
        assert topic in text
    assert "--peak-replicas" in text


def test_history_pass_measures_only_the_second_copy(trace: Trace) -> None:
    profile = load_profile("bert-base")
    factor = factor_for_peak(trace, profile, 6)
    single = build(trace, profile, factor, jitter=1.0, seed=1)
    doubled_trace, measure_from = with_history_pass(trace)
    doubled = build(doubled_trace, profile, factor, jitter=1.0, seed=1)
    once = engine.run(single, profile, Static(10, "x"), start_replicas=10, seed=1)
    twice = engine.run(doubled, profile, Static(10, "x"), start_replicas=10, seed=1, measure_from=measure_from)
    assert twice.requests == pytest.approx(once.requests, rel=0.02)
    # Billed from the measured copy's start to its last arrival (the tail after it is not billed).
    measured_hours = (doubled.trace_seconds - measure_from) / 3600
    assert twice.usd == pytest.approx(10 * profile.usd_per_replica_hour * measured_hours, rel=1e-4)  # bin rounding
    assert twice.usd == pytest.approx(once.usd, abs=10 * profile.usd_per_replica_hour / 3600)  # within a second
    assert twice.timeline["t"][0] == pytest.approx(0.0, abs=0.01)  # the measured span starts the timeline


def test_simulate_names_the_fields_of_a_whole_cr_it_does_not_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A CR's maxQueue, cores per replica and SLO were silently ignored, so a tighter CR printed the
    # same row as the original as if they had been applied.
    cr = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    # (At least its targetQueueDepth, 16: the API server refuses a queue target past the queue's bound.)
    cr["spec"]["runtime"] = {**cr["spec"].get("runtime", {}), "maxQueue": 16}
    cr["spec"]["model"]["neuronCoresPerReplica"] = 2
    cr["spec"]["scaling"]["latencySloMs"] = 2
    policy, out, _ = read_policy_only(tmp_path, yaml.safe_dump(cr, sort_keys=False), capsys, accepted=True)
    out = " ".join(out.split())
    assert f"note: {policy}: fields the simulator does not use: " in out
    assert "spec.runtime.maxQueue (set by the profile's max_queue)" in out
    assert "spec.model.neuronCoresPerReplica (set by the profile's replicas_per_node and service times)" in out
    assert "spec.scaling.latencySloMs (set by --slo-ms, default the profile's slo_ms)" in out
    assert "not modelled: spec.model.name, spec.model.source" in out
    assert "spec.scaling.targetUtilization" not in out and "spec.warmPool" not in out


def test_simulate_names_the_scaling_metrics_fields_it_does_not_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The simulator computes each signal as the default queries read it: a Prometheus URL or a
    # custom query in the file changed nothing, and no note said so. staleAfterSeconds does apply,
    # and so does an empty query: it turns its signal off as in the operator (review r17 finding 2:
    # the note named it "not modelled").
    content = (
        "scaling:\n  targetUtilization: 0.6\n  metrics:\n    prometheusUrl: http://prom.example:9090\n"
        "    utilization: 'sum(rate(foo[1m]))'\n    arrivalPeak: ''\n    arrivalRate: ' '\n"
        "    staleAfterSeconds: 30\n"
    )
    policy, out, _ = read_policy_only(tmp_path, content, capsys, accepted=True)
    out = " ".join(out.split())
    assert (
        f"note: {policy}: fields the simulator does not use: not modelled: scaling.metrics.prometheusUrl, "
        "scaling.metrics.utilization" in out
    )
    assert "arrivalPeak" not in out and "arrivalRate" not in out
    assert "staleAfterSeconds" not in out and "targetUtilization" not in out
    _, out, _ = read_policy_only(tmp_path, "scaling: {metrics: {inFlight: ''}}\n", capsys, accepted=True)
    assert "note:" not in out
    _, out, _ = read_policy_only(tmp_path, "scaling: {metrics: {staleAfterSeconds: 30}}\n", capsys, accepted=True)
    assert "note:" not in out


def test_simulate_policy_takes_whole_number_floats_as_validate_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `neuronfleet validate` and the API server take maxReplicas: 1e3 and minReplicas: 2.0; the
    # simulator refused the same file ("'1e3' is not of type 'integer'").
    policy, _, _ = read_policy_only(tmp_path, "scaling: {minReplicas: 2.0, maxReplicas: 1e3}\n", capsys, accepted=True)
    name, sections = _policy_file(str(policy))
    assert sections["scaling"] == {"minReplicas": 2, "maxReplicas": 1000}
    assert all(type(value) is int for value in sections["scaling"].values())
    ours = ours_from_policy_file(sections, 50, name)
    assert (ours.scaling_spec.min_replicas, ours.scaling_spec.max_replicas) == (2, 1000)
    _, _, err = read_policy_only(tmp_path, "scaling: {minReplicas: 2.5}\n", capsys, accepted=False)
    assert "scaling.minReplicas: 2.5 is not of type 'integer'" in err


def test_simulate_says_nothing_of_a_policy_file_it_uses_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = read_policy_only(
        tmp_path, "scaling: {targetUtilization: 0.6}\nwarmPool: {mode: Auto}\n", capsys, accepted=True
    )
    assert "note:" not in out


def test_the_swept_baselines_may_scale_down_to_one_replica() -> None:
    # minReplicas 1 for each: HPA's own default, and the same floor for every family.
    floors = {}
    for case in runner.cases(["hpa", "keda", "kpa", "ray"], 40, 10):
        policy: object = case.make()
        floor = policy.behavior.min_replicas if isinstance(policy, Hpa) else getattr(policy, "min_replicas", None)
        floors[(case.family, case.setting)] = floor
    assert len(floors) > 4 and set(floors.values()) == {1}, floors


def test_a_worker_run_stops_at_its_next_progress_report_once_the_parent_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    stop = multiprocessing.get_context("fork").Event()
    monkeypatch.setattr(runner, "_STOP", stop)
    runner._stop_if_asked(0.5)  # not asked: the run goes on
    stop.set()
    with pytest.raises(runner.Stopped):
        runner._stop_if_asked(0.51)
    monkeypatch.setattr(runner, "_STOP", None)
    runner._stop_if_asked(0.52)  # a run in this process has no worker stop to read


def test_profiles_serve_with_the_crds_runtime_defaults_unless_they_say_otherwise(tmp_path: Path) -> None:
    # An SRE who sets no runtime section gets the CRD's queue bound and batch delay: the simulated
    # replica of a profile that names none must be that one.
    from neuronfleet.api.v1alpha1 import RuntimeSpec

    crd = RuntimeSpec()
    bert = load_profile("bert-base")
    assert (bert.max_queue, bert.max_batch_delay_ms) == (crd.max_queue, crd.max_batch_delay_ms)
    written = yaml.safe_load(dump_profile("bert-base"))
    assert (written["max_queue"], written["max_batch_delay_ms"]) == (crd.max_queue, crd.max_batch_delay_ms)
    del written["max_queue"], written["max_batch_delay_ms"]
    path = tmp_path / "unsaid.yaml"
    path.write_text(yaml.safe_dump(written))
    unsaid = load_profile(str(path))
    assert (unsaid.max_queue, unsaid.max_batch_delay_ms) == (crd.max_queue, crd.max_batch_delay_ms)
