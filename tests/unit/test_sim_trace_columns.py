"""Which trace columns were taken (time, context and output tokens) and which ignored, said in the
report, and the profile's default token counts named where they stand in for missing ones."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from neuronfleet.sim.command import run_cli
from neuronfleet.sim.profiles import load_profile
from neuronfleet.sim.trace import Columns, load

QUICK = ["--policies", "static", "--no-sweep", "--no-plots", "--jobs", "1", "--peak-replicas", "4"]


def write(path: Path, header: str, seconds: int = 600, rate: float = 3.0) -> Path:
    rng = np.random.default_rng(6)
    times = np.sort(rng.random(int(seconds * rate)) * seconds)
    extra = header.count(",")
    rows = [",".join([f"{t:.3f}", *(str(rng.integers(10, 900)) for _ in range(extra))]) for t in times]
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def test_load_records_the_columns_taken_and_ignored(tmp_path: Path) -> None:
    trace = load(write(tmp_path / "t.csv", "time,tokens,output_len,user"))
    assert trace.columns == Columns("time", None, "output_len", ("tokens", "user"))
    assert trace.context_tokens is None and trace.generated_tokens is not None
    azure = load(write(tmp_path / "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens"))
    assert azure.columns == Columns("TIMESTAMP", "ContextTokens", "GeneratedTokens", ())


def test_an_unrecognised_token_column_is_reported_and_the_default_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A reviewer's header: `tokens` is no context size, so llama-2-7b gave every request its
    # default 1,024 context tokens, and nothing said so.
    out = tmp_path / "out"
    csv = write(tmp_path / "t.csv", "time,tokens,output_len")
    assert run_cli(["--trace", str(csv), "--profile", "llama-2-7b", *QUICK, "--out", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "columns of t.csv: time 'time', context tokens none, output tokens 'output_len'; ignored 'tokens'" in text
    default = "t.csv has no context-token column: every request takes llama-2-7b's default of 1,024 context tokens"
    assert f"note: {default}" in text
    assert "output-token column" not in text  # output_len was taken
    doc = json.loads((out / "simulate.json").read_text())
    assert doc["profiles"]["llama-2-7b"]["assumptions"][-1] == default
    assert doc["columns"]["trace"] == {
        "time": "time",
        "context": None,
        "generated": "output_len",
        "ignored": ["tokens"],
    }


def test_a_batch_profile_names_no_token_defaults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert run_cli(["--trace", str(write(tmp_path / "t.csv", "timestamp")), *QUICK, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "columns of t.csv: time 'timestamp', context tokens none, output tokens none; ignored none" in text
    assert "default of" not in text  # bert-base does not use token counts
    assumptions = json.loads((out / "simulate.json").read_text())["profiles"]["bert-base"]["assumptions"]
    assert assumptions == load_profile("bert-base").assumptions
