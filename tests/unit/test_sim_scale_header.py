"""What ``--peak-replicas`` sizes, said where it is used: the header next to the oracle's peak, and --help."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neuronfleet.sim import engine
from neuronfleet.sim.command import run_cli

QUICK = ["--policies", "static", "--no-sweep", "--no-plots", "--jobs", "1"]


def llm_trace(path: Path, seconds: int = 600, rate: float = 3.0, seed: int = 2) -> Path:
    rng = np.random.default_rng(seed)
    times = np.sort(rng.random(int(seconds * rate)) * seconds)
    rows = [f"{t:.3f},{rng.integers(50, 2000)},{rng.integers(10, 600)}" for t in times]
    path.write_text("timestamp,context_tokens,generated_tokens\n" + "\n".join(rows) + "\n")
    return path


def test_the_header_says_peak_replicas_sizes_the_busiest_minutes_mean_work_and_shows_the_oracles_peak(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --peak-replicas 8 with llama-2-7b gave an oracle peaking at 17 replicas, and nothing said so.
    out = tmp_path / "out"
    args = ["--trace", str(llm_trace(tmp_path / "t.csv")), "--profile", "llama-2-7b", *QUICK]
    assert run_cli([*args, "--peak-replicas", "4", "--out", str(out)]) == 0
    peak = json.loads((out / "simulate.json").read_text())["profiles"]["llama-2-7b"]["oracle_peak_replicas"]
    assert peak > 4  # bursts within the minute and the latency budget need more than the minute's mean
    assert (
        f"oracle peak {peak} replicas; --peak-replicas 4 sizes the mean work of the busiest minute "
        "(replicas 100 % busy at full batch), not the peak the SLO needs" in capsys.readouterr().out
    )


def test_with_a_rate_factor_the_header_shows_the_oracles_peak(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--trace", str(llm_trace(tmp_path / "t.csv")), *QUICK, "--rate-factor", "300"]
    assert run_cli([*args, "--out", str(tmp_path / "out")]) == 0
    assert "replicas at --rate-factor 300" in capsys.readouterr().out


def test_help_says_what_peak_replicas_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_cli(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "--peak-replicas N scale the trace so that the mean work of its busiest minute keeps N replicas 100 % busy"
        in text
    )
    assert "the header prints the clairvoyant oracle's" in text


def test_an_in_sample_run_says_the_autoscalers_start_cold_with_the_fleet_they_start_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first example of --help (in-sample on the conv trace) read ours at 92.9 % against static's
    # 100 %, most of the gap in the first cold start, and nothing in the output said why. The note
    # first said every policy started with the same fleet: static starts with its own.
    first_serving: dict[str, float] = {}
    real = engine.run

    def spy(*args: Any, **kwargs: Any) -> engine.RunResult:
        result = real(*args, **kwargs)
        if kwargs.get("schedule") is None:
            first_serving[args[2].name] = result.timeline["serving"][0]
        return result

    monkeypatch.setattr(engine, "run", spy)  # the module runner calls
    out = tmp_path / "out"
    trace = llm_trace(tmp_path / "t.csv")
    args = ["--trace", str(trace), "--policies", "ours,hpa,static", "--no-sweep", "--no-plots", "--jobs", "1"]
    assert run_cli([*args, "--out", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    start = json.loads((out / "simulate.json").read_text())["profiles"]["bert-base"]["start_replicas"]
    assert first_serving["ours"] == first_serving["hpa"] == start != first_serving["static"]
    assert (
        f"in-sample from a cold start: every autoscaling policy starts with the same {start} replicas ready "
        "(the instant oracle's most in the first minute; static with its own fleet) and nothing learned "
        "(ours has no service rate or history yet)" in text
    )
    assert "--history-pass starts them as in steady operation" in text
    # Without ours the note says nothing of ours; static alone starts with its own fleet: no note.
    assert run_cli(["--trace", str(trace), *QUICK[:1], "hpa", *QUICK[2:], "--out", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "every autoscaling policy starts" in text and "ours has no service rate" not in text
    assert run_cli(["--trace", str(trace), *QUICK, "--out", str(out)]) == 0
    assert "from a cold start" not in capsys.readouterr().out


@pytest.mark.parametrize("option", [["--history-pass"], ["--tune-fraction", "0.5"]])
def test_runs_starting_from_history_do_not_say_they_start_cold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    trace = llm_trace(tmp_path / "t.csv", seconds=1200)
    hpa = ["--policies", "hpa", *QUICK[2:]]
    assert run_cli(["--trace", str(trace), *hpa, *option, "--out", str(tmp_path / "out")]) == 0
    assert "from a cold start" not in capsys.readouterr().out
