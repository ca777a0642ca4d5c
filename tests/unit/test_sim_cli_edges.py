"""`neuronfleet simulate` on unusual but valid (or plainly bad) input: large fleets, odd options,
broken timestamps, tiny held-out splits, and what the report says a phase measured."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from neuronfleet.api.v1alpha1 import ScalingSpec
from neuronfleet.sim import runner
from neuronfleet.sim.command import MIN_SCORED_REQUESTS, Span, UsageError, _check_span, run_cli
from neuronfleet.sim.policies import crd_max_replicas, ours_from_policy_file
from neuronfleet.sim.profiles import load_profile
from neuronfleet.sim.trace import TraceError, load


def write_trace(path: Path, seconds: int = 600, rate: float = 3.0, seed: int = 5) -> Path:
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1 / rate, size=int(seconds * rate * 1.5)))
    times = times[times < seconds]
    path.write_text("timestamp\n" + "\n".join(f"{t:.4f}" for t in times) + "\n")
    return path


# ------------------------------------------------------------------------ fleets above the CRD's bound


def test_ours_max_replicas_defaults_to_at_most_the_crd_limit() -> None:
    # The run's bound is 2 x the oracle's peak: a peak of 700 replicas makes it 1,400, which the
    # CRD (and so the operator) cannot hold; ours used to die on a pydantic ValidationError.
    limit = crd_max_replicas()
    assert limit == 1000
    (case,) = runner.cases(["ours"], 2 * 700, 700, sweep=False)
    policy = case.make()
    assert policy.scaling_spec.max_replicas == limit  # type: ignore[attr-defined]
    # Below the limit the run's bound is kept as it was.
    assert ours_from_policy_file({}, 86, "x").scaling_spec.max_replicas == 86
    # A policy file's own maxReplicas is its own.
    assert ours_from_policy_file({"scaling": {"maxReplicas": 7}}, 1400, "x").scaling_spec.max_replicas == 7


def test_ours_sweep_moves_both_targets_in_the_crd_defaults_ratio() -> None:
    # Its one swept knob is targetUtilization; targetQueueDepth follows in the CRD defaults' ratio,
    # so the default setting is the CRD's default policy, both targets.
    crd = ScalingSpec()
    by_setting = {case.value: case.make() for case in runner.cases(["ours"], 40, 20)}
    default = by_setting[crd.target_utilization].scaling_spec  # type: ignore[attr-defined]
    assert (default.target_utilization, default.target_queue_depth) == (crd.target_utilization, crd.target_queue_depth)
    ratio = crd.target_queue_depth / crd.target_utilization
    for value, policy in by_setting.items():
        spec = policy.scaling_spec  # type: ignore[attr-defined]
        assert spec.target_queue_depth == pytest.approx(ratio * value)
    assert len(by_setting) >= 3  # a sweep, not one setting


def test_simulate_with_more_replicas_than_the_crd_allows_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = write_trace(tmp_path / "t.csv", seconds=600)
    out = tmp_path / "out"
    args = ["--trace", str(csv), "--policies", "ours,hpa", "--no-sweep", "--no-plots", "--jobs", "1"]
    assert run_cli([*args, "--peak-replicas", "3", "--max-replicas", "1500", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert "maxReplicas defaults to 1000" in captured.out
    doc = json.loads((out / "simulate.json").read_text())
    assert {"ours", "hpa"} <= {c["policy"] for c in doc["cases"]}
    # At the limit itself every policy runs with it: nothing to note.
    assert run_cli([*args, "--peak-replicas", "3", "--max-replicas", "1000", "--out", str(tmp_path / "at")]) == 0
    assert "maxReplicas defaults" not in capsys.readouterr().out


@pytest.mark.parametrize("option", ["--tune-on", "--score-on"])
def test_one_held_out_trace_without_the_other_says_they_go_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    # Not "--trace CSV is required": the user gave a trace, only its partner is missing.
    csv = write_trace(tmp_path / "t.csv", seconds=600)
    assert run_cli([option, str(csv), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--tune-on and --score-on go together" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-replicas", "0"], "--max-replicas must be at least 1"),
        (["--max-replicas", "-4"], "--max-replicas must be at least 1"),
        (["--slo-ms", "0"], "--slo-ms must be a positive number"),
        (["--slo-ms", "-50"], "--slo-ms must be a positive number"),
        (["--slo-ms", "nan"], "--slo-ms must be a positive number"),
    ],
)
def test_simulate_refuses_bounds_it_used_to_ignore_or_crash_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    # --max-replicas 0 and --slo-ms 0 were silently replaced by the defaults; -4 was a traceback;
    # a negative SLO made every request late.
    csv = write_trace(tmp_path / "t.csv", seconds=20)
    code = run_cli(
        ["--trace", str(csv), "--policies", "hpa", "--no-sweep", "--no-plots", "--out", str(tmp_path), *args]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("policies", "twice"), [("ours,ours", "ours"), ("hpa, kpa,hpa", "hpa"), ("static,ours,static,ours", "static")]
)
def test_a_policy_named_twice_in_policies_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policies: str, twice: str
) -> None:
    # `--policies ours,ours` ran ours twice: two rows of the same name in the tables and in simulate.json.
    out = tmp_path / "out"
    code = run_cli(["--trace", str(tmp_path / "unread.csv"), "--policies", policies, "--out", str(out)])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2
    assert err == (
        f"error: --policies {policies!r} names {twice} twice; the outputs (simulate.json entries and plots) are "
        f"keyed by a policy's name and each runs once: name it once"
    )
    assert not out.exists()


# ------------------------------------------------------------------------ timestamps that are not times


@pytest.mark.parametrize("bad", ["", "nan", "inf", "-inf", "NaT"])
def test_trace_refuses_missing_or_non_finite_times(tmp_path: Path, bad: str) -> None:
    # An empty cell used to read as numpy's NaT (-2**63 ns): a 292-year trace that then asked for an
    # 81 GiB array; "nan" and "inf" went through as arrival times and crashed later.
    path = tmp_path / "t.csv"
    path.write_text(f"timestamp,ContextTokens\n2023-11-16 18:15:46.68,10\n{bad},12\n2023-11-16 18:15:47.10,9\n")
    with pytest.raises(TraceError, match=r"t\.csv:3: cannot read time"):
        load(path)


def test_trace_with_whole_second_and_iso_times_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP\n2023-11-16 18:15:46.5\n2023-11-16 18:15:48.25\n")
    assert load(path).arrivals.tolist() == pytest.approx([0.0, 1.75], abs=1e-6)


# ------------------------------------------------------------------------ held-out splits


def test_tune_fraction_leaving_no_second_to_tune_on_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = write_trace(tmp_path / "t.csv", seconds=20)
    code = run_cli(["--trace", str(csv), "--tune-fraction", "0.01", "--policies", "hpa", "--no-plots"])
    err = capsys.readouterr().err
    assert code == 2
    assert "leaves no whole second to tune on" in err  # was: "no arrivals in the span 0--1e-09 s"


CONV = Path(__file__).resolve().parents[2] / "operator" / "neuronfleet" / "data" / "azure-llm-2023-conv.csv"


@pytest.fixture
def no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a simulation starts: a split too short to score is refused first."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a simulation ran")

    monkeypatch.setattr(runner, "run_oracles", refuse)


@pytest.mark.usefixtures("no_simulation")
def test_a_tune_fraction_leaving_a_moment_to_score_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A reviewer's: 10 minutes of the conv trace, 0.999 tuned on, left under a second (7 requests)
    # to score on, and the table presented that as a result.
    args = ["--trace", str(CONV), "--duration", "600", "--tune-fraction", "0.999", "--out", str(tmp_path / "o")]
    assert run_cli(args) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        "--tune-fraction 0.999 of a 599 s trace (cut to --duration 600) leaves under 1 s and 7 trace requests to "
        "score on; a scored span must last at least one cold start of bert-base (450.52 s) and hold at least 100 "
        "trace requests: use a smaller fraction, a longer trace with more requests or a longer --duration" in err
    )


def test_a_span_of_exactly_one_cold_start_and_the_least_requests_is_scored() -> None:
    # The limits are "at least": the bound itself is enough, one request fewer is not.
    profile = load_profile("bert-base")
    _check_span(Span("--trace t.csv", 450.52, MIN_SCORED_REQUESTS, "score on", "use"), profile)
    with pytest.raises(UsageError, match=r"hold at least 100 trace requests"):
        _check_span(Span("--trace t.csv", 450.52, MIN_SCORED_REQUESTS - 1, "score on", "use"), profile)
    with pytest.raises(UsageError, match=r"one cold start of bert-base \(450\.52 s\)"):
        _check_span(Span("--trace t.csv", 450.51, MIN_SCORED_REQUESTS, "score on", "use"), profile)


@pytest.mark.parametrize(
    ("seconds", "rate", "profile", "message"),
    [
        # Many requests, shorter than a cold start (450.52 s).
        (
            800,
            3.0,
            "bert-base",
            "of a 798 s trace leaves 399 s and 1,201 trace requests to score on; a scored span must last at least "
            "one cold start of bert-base (450.52 s): use a smaller fraction or a longer trace",
        ),
        # Long enough, too few requests: only that limit is named, and so is its remedy (the cold
        # start and "a longer trace" were named too).
        (
            1000,
            0.1,
            "bert-base",
            "of a 975 s trace leaves 488 s and 38 trace requests to score on; a scored span must hold at least 100 "
            "trace requests: use a smaller fraction or a trace with more requests",
        ),
        # Enough for bert-base, not for llama's cold start.
        (
            1000,
            3.0,
            "llama-2-7b",
            "of a 999 s trace leaves 500 s and 1,546 trace requests to score on; a scored span must last at least "
            "one cold start of llama-2-7b (553.02 s): use a smaller fraction or a longer trace",
        ),
    ],
)
@pytest.mark.usefixtures("no_simulation")
def test_a_scored_half_shorter_than_a_cold_start_or_with_few_requests_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seconds: int, rate: float, profile: str, message: str
) -> None:
    csv = write_trace(tmp_path / "t.csv", seconds=seconds, rate=rate)
    args = ["--trace", str(csv), "--tune-fraction", "0.5", "--profile", profile, "--out", str(tmp_path / "o")]
    assert run_cli(args) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "error: --tune-fraction 0.5 of a " in err and message in err


@pytest.mark.usefixtures("no_simulation")
def test_a_score_on_trace_too_short_to_score_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tune = write_trace(tmp_path / "tune.csv", seconds=1000)
    score = write_trace(tmp_path / "score.csv", seconds=1000)
    args = ["--tune-on", str(tune), "--score-on", str(score), "--out", str(tmp_path / "o")]
    assert run_cli([*args, "--duration", "300"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--score-on {score} cut to --duration 300 leaves 299 s and " in err
    assert (
        "a scored span must last at least one cold start of bert-base (450.52 s): score on a longer trace or a "
        "longer --duration" in err
    )


def test_phase_requests_count_the_measured_span_only(tmp_path: Path) -> None:
    # The score phase's workload is the whole trace (the tuning part is its history) and a history
    # pass doubles the tuning one: "requests" of a phase must be what its cases were measured on.
    csv = write_trace(tmp_path / "t.csv", seconds=1000)  # a scored half longer than a cold start
    out = tmp_path / "out"
    args = ["--trace", str(csv), "--peak-replicas", "4", "--policies", "static", "--no-sweep", "--no-plots"]
    assert run_cli([*args, "--tune-fraction", "0.5", "--history-pass", "--jobs", "1", "--out", str(out)]) == 0
    doc = json.loads((out / "simulate.json").read_text())
    profile = doc["profiles"]["bert-base"]
    for phase in ("tune", "score"):
        measured = {c["requests"] for c in doc["cases"] if c["phase"] == phase}
        assert len(measured) == 1  # every case of a phase is measured on the same requests
        assert profile["phases"][phase]["requests"] == pytest.approx(measured.pop(), abs=1)
    assert profile["requests"] == profile["phases"]["tune"]["requests"]
    total = profile["phases"]["tune"]["requests"] + profile["phases"]["score"]["requests"]
    assert profile["phases"]["score"]["requests"] == pytest.approx(total / 2, rel=0.25)


def test_held_out_latency_cdf_says_it_shows_the_scored_phase(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The CDF drawn after held-out scoring shows the scored phase's runs of the settings chosen on
    # the tuning data; its title used to say "best setting per policy" and name no phase.
    from neuronfleet.sim import report

    titles: list[str] = []

    def record_cdf(path: Path, profile: object, shown: object, arrivals: str = "", phase_label: str = "") -> None:
        titles.append(report.cdf_title(profile, arrivals, phase_label))  # type: ignore[arg-type]

    monkeypatch.setattr(report, "plot_cdf", record_cdf)
    monkeypatch.setattr(report, "plot_timeline", lambda *args, **kwargs: None)
    csv = write_trace(tmp_path / "t.csv", seconds=1000)  # a scored half longer than a cold start
    args = ["--trace", str(csv), "--peak-replicas", "3", "--policies", "static", "--no-sweep", "--jobs", "1"]
    assert run_cli([*args, "--out", str(tmp_path / "a")]) == 0
    assert run_cli([*args, "--tune-fraction", "0.5", "--out", str(tmp_path / "b")]) == 0
    plain, held_out = titles
    assert "best setting per policy" in plain and "phase" not in plain
    assert "setting chosen on the tuning data" in held_out and "score phase" in held_out


@pytest.mark.usefixtures("no_simulation")
def test_a_tuning_span_shorter_than_a_cold_start_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Only the scored side was checked: 0.2 of 1,000 s (199 s, shorter than one cold start) picked every
    # family's setting on a span where no scale-up could serve, and scored that choice as "held out".
    csv = write_trace(tmp_path / "t.csv", seconds=1000)
    assert run_cli(["--trace", str(csv), "--tune-fraction", "0.2", "--out", str(tmp_path / "o")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--tune-fraction 0.2 of a" in err and "leaves 199 s and" in err and "to tune on; a tuning span" in err
    assert "use a larger fraction or a longer trace" in err


@pytest.mark.usefixtures("no_simulation")
def test_a_tune_on_trace_too_short_to_tune_on_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tune = write_trace(tmp_path / "tune.csv", seconds=300)
    score = write_trace(tmp_path / "score.csv", seconds=1000)
    assert run_cli(["--tune-on", str(tune), "--score-on", str(score), "--out", str(tmp_path / "o")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--tune-on {tune} leaves" in err and "to tune on; a tuning span must last" in err
    assert "tune on a longer trace" in err
