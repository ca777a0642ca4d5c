"""Progress when stdout is not a terminal (a pipe, a CI log): one plain line on stderr per finished run."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from neuronfleet.sim.command import run_cli


def write_trace(path: Path, seconds: int = 600, rate: float = 3.0) -> Path:
    rng = np.random.default_rng(3)
    path.write_text("timestamp\n" + "\n".join(f"{t:.3f}" for t in np.sort(rng.random(int(seconds * rate)) * seconds)))
    return path


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_each_finished_run_is_one_line_on_stderr_when_stdout_is_not_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], jobs: str
) -> None:
    # Rich's progress bar (transient, on stdout) showed nothing on a pipe: a long run looked hung.
    args = ["--trace", str(write_trace(tmp_path / "t.csv")), "--policies", "hpa,static", "--no-sweep", "--no-plots"]
    assert run_cli([*args, "--jobs", jobs, "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert re.fullmatch(r"bert-base superpose: oracles done in \d+\.\d s", lines[0])
    runs = lines[1:]
    assert len(runs) == 2
    for index, line in enumerate(runs, start=1):
        assert re.fullmatch(
            rf"bert-base superpose: run {index}/2 done: (hpa 0\.5|static \d+=1xpeak) in \d+\.\d s", line
        )
    assert {line.split(" done: ")[1].split()[0] for line in runs} == {"hpa", "static"}
    assert "done in" not in captured.out  # the tables' stream stays clean
