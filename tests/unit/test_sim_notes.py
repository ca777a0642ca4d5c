"""Notes ``neuronfleet simulate`` prints where a table alone would mislead: an SLO no fleet can
meet, and a staleness limit below the modelled age of the samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from neuronfleet.sim.command import run_cli


def write_trace(path: Path, seconds: int = 600, rate: float = 3.0, seed: int = 4) -> Path:
    rng = np.random.default_rng(seed)
    path.write_text("timestamp\n" + "\n".join(f"{t:.3f}" for t in np.sort(rng.random(int(seconds * rate)) * seconds)))
    return path


QUICK = ["--no-sweep", "--jobs", "1", "--peak-replicas", "3", "--no-plots"]


def printed(capsys: pytest.CaptureFixture[str]) -> str:
    return " ".join(capsys.readouterr().out.split())


def test_an_slo_below_the_profiles_fastest_answer_is_named_out_of_reach(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --slo-ms 0.5 with bert-base (1 ms at batch 1): 0 % everywhere, oracles included, without a word.
    args = ["--trace", str(write_trace(tmp_path / "t.csv")), "--policies", "static", *QUICK]
    assert run_cli([*args, "--slo-ms", "0.5", "--out", str(tmp_path / "o")]) == 0
    text = printed(capsys)
    assert (
        "note: SLO 0.5 ms is below bert-base's fastest answer (1 ms, its batch of 1): no request can meet it, "
        "whatever the fleet" in text
    )
    assert (
        "note: even the clairvoyant oracles answer only 0.00% of requests within the SLO (0.5 ms; target 99%): "
        "it is out of reach for bert-base on this trace" in text
    )


def test_an_slo_the_oracles_miss_is_named_out_of_reach(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Above the fastest batch (1 ms), below what this load is answered in (batches of several,
    # formed within the profile's 5 ms batch delay): the oracles miss it too.
    args = ["--trace", str(write_trace(tmp_path / "t.csv")), "--policies", "static", *QUICK, "--peak-replicas", "20"]
    assert run_cli([*args, "--slo-ms", "3", "--out", str(tmp_path / "o")]) == 0
    text = printed(capsys)
    assert "fastest answer" not in text
    assert "note: even the clairvoyant oracles answer only" in text and "(3 ms; target 99%)" in text
    # A reachable SLO: no note.
    assert run_cli([*args, "--out", str(tmp_path / "p")]) == 0
    assert "out of reach" not in printed(capsys)


@pytest.mark.parametrize(("stale", "noted"), [(5, True), (9, True), (10, True), (11, False), (60, False)])
def test_a_stale_limit_at_or_below_the_modelled_sample_age_is_noted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stale: int, noted: bool
) -> None:
    # Every simulated sample is 10 s old: staleAfterSeconds 5-9 (the CRD takes >= 5) froze the
    # fleet for the whole run without a word, where a cluster's 0-15 s old samples would not.
    policy = tmp_path / "st.yaml"
    policy.write_text(f"scaling: {{metrics: {{staleAfterSeconds: {stale}}}}}\n")
    args = ["--trace", str(write_trace(tmp_path / "t.csv")), "--policies", "", *QUICK, "--policy", str(policy)]
    assert run_cli([*args, "--out", str(tmp_path / "o")]) == 0
    text = printed(capsys)
    note = (
        f"note: {policy}: scaling.metrics.staleAfterSeconds {stale} is at or below the age the simulator gives "
        "every sample (10 s at each decision: a 15 s scrape, half of it on average, plus the query): "
    )
    assert (note in text) == noted
    if noted:
        assert (
            "in a cluster samples are 0-15 s old when read, so the operator would hold (never scale down) only "
            f"while the newest is older than {stale} s, and scale on the others" in text
        )
    assert ("counts as missing at every decision" in text) == (stale < 10)


def test_help_says_when_x_feasible_reads_below_1_and_when_the_oracles_are_not_simulated(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A static fleet at 99 % showed 0.9x feasible on a 24 h span, with both oracles' latencies "-".
    with pytest.raises(SystemExit):
        run_cli(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "Both are sized to answer every request within the SLO, not only the --slo-target share: a policy letting "
        "the rest miss (1 % at the default 0.99) can cost less than the feasible oracle (x feasible below 1)." in text
    )
    assert (
        "On workloads over about 11 hours (4 million 10 ms bins, history pass included) the oracles are not "
        "simulated: their schedules meet the SLO by construction, their attainment is reported as 1 and their "
        'latencies as "-".' in text
    )


def test_the_out_of_reach_note_says_the_slo_target_as_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # It said "target 100%" for --slo-target 0.995.
    args = ["--trace", str(write_trace(tmp_path / "t.csv")), "--policies", "static", *QUICK]
    assert run_cli([*args, "--slo-ms", "0.5", "--slo-target", "0.995", "--out", str(tmp_path / "o")]) == 0
    assert "(0.5 ms; target 99.5%)" in printed(capsys)
