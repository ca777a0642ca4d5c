"""Outputs of ``neuronfleet simulate`` that say what they are: the phase a run was measured in, the
knob each setting is, one table where two would be the same, both traces of a held-out run, and
no run that measures nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neuronfleet.sim import report
from neuronfleet.sim.command import run_cli
from neuronfleet.sim.profiles import dump_profile, load_profile


def write_trace(path: Path, seconds: int = 600, rate: float = 3.0, seed: int = 4) -> Path:
    rng = np.random.default_rng(seed)
    path.write_text("timestamp\n" + "\n".join(f"{t:.3f}" for t in np.sort(rng.random(int(seconds * rate)) * seconds)))
    return path


QUICK = ["--no-sweep", "--jobs", "1", "--peak-replicas", "3"]


def test_a_run_without_held_out_scoring_is_labelled_in_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its cases said "phase": "tune" and its timeline "(tune phase)", as if a scored phase followed.
    labels: list[str] = []
    cdf_titles: list[str] = []

    def timeline(*args: Any) -> None:
        labels.append(args[-1])

    def cdf(path: Path, profile: Any, shown: Any, arrivals: str = "", phase_label: str = "") -> None:
        cdf_titles.append(report.cdf_title(profile, arrivals, phase_label))

    monkeypatch.setattr(report, "plot_timeline", timeline)
    monkeypatch.setattr(report, "plot_cdf", cdf)
    out = tmp_path / "out"
    args = ["--trace", str(write_trace(tmp_path / "t.csv")), "--policies", "static", *QUICK, "--out", str(out)]
    assert run_cli(args) == 0
    doc = json.loads((out / "simulate.json").read_text())
    assert {case["phase"] for case in doc["cases"]} == {"in-sample"}
    assert list(doc["profiles"]["bert-base"]["phases"]) == ["in-sample"]
    assert labels == ["in-sample"]
    assert cdf_titles == ["bert-base: latency CDF (best setting per policy), arrivals superpose, in-sample"]


def test_the_setting_column_names_each_policys_knob(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # "0.5", "70", "10=1xpeak" in one column: HPA's utilization, KPA's concurrency, replicas.
    policy = tmp_path / "warm.yaml"
    policy.write_text("warmPool: {mode: Auto}\n")
    out = tmp_path / "out"
    trace = write_trace(tmp_path / "t.csv")
    args = ["--trace", str(trace), "--policies", "hpa,kpa,static", "--policy", str(policy), "--no-plots", *QUICK]
    assert run_cli([*args, "--out", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "setting: hpa: HPA's target average utilization; kpa: KPA's concurrency target per pod (x 0.7 "
        "utilization applied); static: replicas=share x the oracle's peak; warm: a --policy file (ours with "
        "its scaling and warmPool)" in text
    )
    assert "ours-warm" not in text  # only the policies that ran
    knobs = {(c["policy"], c["setting"]): c["knob"] for c in json.loads((out / "simulate.json").read_text())["cases"]}
    assert knobs[("hpa", "0.5")] == "HPA's target average utilization"
    assert knobs[("warm", "warm.yaml")] == "a --policy file (ours with its scaling and warmPool)"
    assert knobs[("oracle", "clairvoyant")] is None


def test_no_sweep_prints_one_table_not_two_identical_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--trace", str(write_trace(tmp_path / "t.csv")), "--policies", "hpa,static", "--no-plots", *QUICK]
    assert run_cli([*args, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert out.count("bert-base superpose: ") == 1
    assert "bert-base superpose: one setting per policy" in out
    # A sweep runs several settings per policy: then the best settings are a subset, in a table of
    # their own. (A policy file no longer adds a setting to ours: it is a policy of its own.)
    args[args.index("hpa,static")] = "static"
    args.remove("--no-sweep")
    assert run_cli([*args, "--out", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "bert-base superpose: all runs" in out and "bert-base superpose: best setting per policy" in out


def test_a_held_out_run_on_two_traces_names_both_and_both_factors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The header named only the tuning trace and its factor; the scoring trace is sized on its own.
    tune = write_trace(tmp_path / "tune.csv", seconds=500, rate=3.0)
    score = write_trace(tmp_path / "score.csv", seconds=500, rate=6.0, seed=5)
    out = tmp_path / "out"
    args = ["--tune-on", str(tune), "--score-on", str(score), "--policies", "static", "--no-plots", *QUICK]
    assert run_cli([*args, "--out", str(out)]) == 0
    header = " ".join(capsys.readouterr().out.split()).split("; arrivals")[0]
    factors = json.loads((out / "simulate.json").read_text())["profiles"]["bert-base"]
    assert factors["score_rate_factor"] < factors["rate_factor"]  # twice the rate: half the factor
    assert "tuning trace tune.csv: 1,500 requests over 8.3 min from t = 0.294 s, 3 requests/s" in header
    assert f", x {factors['rate_factor']:.4g}; scoring trace score.csv: 3,000 requests over 8.3 min" in header
    assert header.endswith(f", x {factors['score_rate_factor']:.4g}")


@pytest.mark.parametrize("policies", ["", " , "])
def test_policies_naming_none_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], policies: str) -> None:
    # Ran only the oracles and reported them as a comparison.
    args = ["--trace", str(write_trace(tmp_path / "t.csv")), "--policies", policies, "--no-plots", *QUICK]
    assert run_cli([*args, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"error: --policies {policies!r} names no policy; choose from ours, ours-warm, hpa" in err
    assert not (tmp_path / "out").exists()  # nothing ran, nothing written


def test_an_empty_policies_list_runs_only_the_policy_files(tmp_path: Path) -> None:
    policy = tmp_path / "warm.yaml"
    policy.write_text("warmPool: {mode: Auto}\n")
    out = tmp_path / "out"
    args = ["--trace", str(write_trace(tmp_path / "t.csv")), "--policies", "", "--policy", str(policy)]
    assert run_cli([*args, "--no-plots", *QUICK, "--out", str(out)]) == 0
    cases = json.loads((out / "simulate.json").read_text())["cases"]
    assert [(c["policy"], c["setting"]) for c in cases if not c["policy"].startswith("oracle")] == [
        ("warm", "warm.yaml")
    ]


def test_the_retired_ours_nowarm_says_what_to_run_instead(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--trace", str(write_trace(tmp_path / "t.csv")), "--policies", "ours-nowarm", "--no-plots", *QUICK]
    assert run_cli([*args, "--out", str(tmp_path / "out")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "ours-nowarm is gone: it ran the same policy as ours" in err
    assert "ours-warm runs ours with warmPool mode Auto" in err


def test_two_profiles_of_one_name_are_refused_naming_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A dumped and edited bert-base keeps `name: bert-base`: its JSON entry and PNGs replaced the built-in's.
    edited = tmp_path / "my-model.yaml"
    edited.write_text(dump_profile("bert-base").replace("throughput_per_s: 1998", "throughput_per_s: 1500"))
    args = ["--trace", str(write_trace(tmp_path / "t.csv")), "--policies", "static", *QUICK]
    assert run_cli([*args, "--profile", "bert-base", "--profile", str(edited), "--out", str(tmp_path / "o")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"error: --profile bert-base and --profile {edited} are both named 'bert-base'" in err
    assert "give one of them its own `name`" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("../escaped", "holds '/', unfit for a file name"),  # wrote ../escaped-timeline.png outside --out
        ("sub/../bert-base", "holds '/', unfit for a file name"),  # overwrote bert-base's plots
        ("team/bert", "holds '/', unfit for a file name"),  # wrote into a subfolder of --out
        ("..", "holds '..', a path's step up"),
        ("a\\b", "holds '\\\\', unfit for a file name"),
        ("bert:v2", "holds ':', unfit for a file name"),
        ("tab\tname", "holds '\\t', unfit for a file name"),
        ("  ", "is empty"),
        ("x" * 240, "is longer than 239 bytes"),
    ],
)
def test_a_profile_name_unfit_for_a_file_name_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, problem: str
) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(dump_profile("bert-base").replace("name: bert-base", f"name: {json.dumps(name)}", 1))
    out = tmp_path / "runs" / "o"
    args = ["--trace", str(write_trace(tmp_path / "t.csv")), "--policies", "static", *QUICK]
    assert run_cli([*args, "--profile", "bert-base", "--profile", str(profile), "--out", str(out)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert " ".join(f"error: {profile}: name: {name!r} {problem}".split()) in err  # as err, whitespace runs as one
    assert (
        "the name is its outputs' (simulate.json's key, <name>-timeline.png and <name>-latency-cdf.png in --out)" in err
    )
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["p.yaml", "t.csv"]


@pytest.mark.parametrize("name", ["bert[prod]", "my-model_v1.2", "bert base", "bert.v2"])
def test_profile_names_fit_for_file_names_are_taken(tmp_path: Path, name: str) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(dump_profile("bert-base").replace("name: bert-base", f"name: {json.dumps(name)}", 1))
    assert load_profile(str(profile)).name == name


def test_two_policy_files_of_one_stem_are_refused_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = []
    for folder, utilization in (("a", 0.6), ("b", 0.7)):
        (tmp_path / folder).mkdir()
        paths.append(tmp_path / folder / "tuning.yaml")
        paths[-1].write_text(f"scaling: {{targetUtilization: {utilization}}}\n")
    args = ["--trace", str(write_trace(tmp_path / "t.csv")), "--policies", "", *QUICK]
    assert run_cli([*args, "--policy", str(paths[0]), "--policy", str(paths[1]), "--out", str(tmp_path / "o")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"error: --policy {paths[0]} and --policy {paths[1]} are both named 'tuning'" in err
    assert "rename one of the files" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("stem", ["ours", "hpa", "oracle-feasible", "ours-nowarm"])
def test_a_policy_file_named_as_a_built_in_policy_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stem: str
) -> None:
    # A file is a policy of its own named after the file: hpa.yaml would read as HPA's row.
    policy = tmp_path / f"{stem}.yaml"
    policy.write_text("scaling: {targetUtilization: 0.3}\n")
    run = ["--trace", str(write_trace(tmp_path / "t.csv")), *QUICK, "--no-plots"]
    assert run_cli([*run, "--policies", "static", "--policy", str(policy), "--out", str(tmp_path / "o")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        f"error: --policy {policy} is named '{stem}' (its file name), as a built-in policy or oracle is: its rows "
        f"would read as that one's in the tables and in simulate.json's cases and chosen; rename the file "
        f"(e.g. my-{stem}.yaml)" in err
    )
    assert not (tmp_path / "o").exists()


def test_a_policy_file_named_as_a_setting_of_ours_is_its_own_row(tmp_path: Path) -> None:
    # 0.6.yaml was refused beside ours' swept 0.6 (both were 'ours 0.6'): now it is the policy 0.6.
    policy = tmp_path / "0.8.yaml"
    policy.write_text("scaling: {targetUtilization: 0.3}\n")
    run = ["--trace", str(write_trace(tmp_path / "t.csv")), *QUICK, "--no-plots"]
    assert run_cli([*run, "--policies", "ours", "--policy", str(policy), "--out", str(tmp_path / "o")]) == 0
    cases = json.loads((tmp_path / "o" / "simulate.json").read_text())["cases"]
    assert [(c["policy"], c["setting"]) for c in cases if not c["policy"].startswith("oracle")] == [
        ("ours", "0.8"),
        ("0.8", "0.8.yaml"),
    ]


@pytest.mark.parametrize(("stem", "reserved"), [("HPA", "hpa"), ("Oracle", "oracle"), ("OURS-warm", "ours-warm")])
def test_a_policy_file_named_as_a_built_in_policy_in_another_case_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stem: str, reserved: str
) -> None:
    # HPA.yaml was taken beside hpa: two rows a reader tells apart by case alone.
    policy = tmp_path / f"{stem}.yaml"
    policy.write_text("scaling: {targetUtilization: 0.3}\n")
    run = ["--trace", str(write_trace(tmp_path / "t.csv")), *QUICK, "--no-plots"]
    assert run_cli([*run, "--policies", "static", "--policy", str(policy), "--out", str(tmp_path / "o")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        f"error: --policy {policy} is named '{stem}' (its file name), as a built-in policy or oracle is "
        f"('{reserved}', in another case): its rows would read as that one's" in err
    )
    assert f"rename the file (e.g. my-{stem}.yaml)" in err
    assert not (tmp_path / "o").exists()


def test_two_policy_files_whose_names_differ_only_in_case_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Both were taken: two rows told apart by case alone.
    paths = [tmp_path / "Warm.yaml", tmp_path / "warm.yaml"]
    for path in paths:
        path.write_text("warmPool: {mode: Auto}\n")
    args = ["--trace", str(write_trace(tmp_path / "t.csv")), "--policies", "", *QUICK]
    assert run_cli([*args, "--policy", str(paths[0]), "--policy", str(paths[1]), "--out", str(tmp_path / "o")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"error: --policy {paths[0]} and --policy {paths[1]} are named 'Warm' and 'warm'" in err
    assert "which differ only in case: their rows in the tables and in simulate.json would be told apart" in err
    assert "rename one of the files" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("target", "said"), [(0.99, "99%"), (0.995, "99.5%"), (0.999, "99.9%"), (0.9999, "99.99%"), (1.0, "100%")]
)
def test_the_captions_say_the_slo_target_as_given(target: float, said: str) -> None:
    # --slo-target 0.995 printed "reaches 100%" (a 0-decimal percent).
    held_out = str(report.table("x", [], 50, target, chosen_elsewhere=True).caption)
    assert f"✓ = reaches {said} here, ~ = misses it" in held_out
    tuning = str(report.table("x", [], 50, target).caption)
    assert f"✓ = cheapest reaching {said}, ~ = none reaches it" in tuning


@pytest.mark.parametrize(("hours", "unit", "span"), [(1, "minutes", 60.0), (7, "hours", 7.0)])
def test_the_timeline_reads_its_time_axis_in_the_unit_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hours: int, unit: str, span: float
) -> None:
    # A run of over six hours is read in hours, a shorter one in minutes; the label and the data agree.
    import matplotlib.figure

    axes: dict[str, Any] = {}
    monkeypatch.setattr(
        matplotlib.figure.Figure, "savefig", lambda figure, path, **_: axes.update({Path(path).name: figure.axes[-1]})
    )
    trace = write_trace(tmp_path / "t.csv", seconds=hours * 3600, rate=0.5)
    assert run_cli(["--trace", str(trace), "--policies", "static", *QUICK, "--out", str(tmp_path / "o")]) == 0
    timeline = axes["bert-base-timeline.png"]
    assert timeline.get_xlabel() == unit
    serving = next(line for line in timeline.get_lines() if line.get_label() == "serving")
    # The run goes on a little past the trace (the tail in which late requests are still served).
    assert span <= float(np.max(serving.get_xdata())) < span * 1.1
