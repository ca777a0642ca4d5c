"""Numeric trace times in milliseconds or microseconds (``--time-unit``), the refusal of Unix times in
those units read as seconds, and the header line saying what the trace is (span, start, mean rate)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from neuronfleet.sim.command import run_cli
from neuronfleet.sim.trace import TraceError, describe, load

#: 2023-11-14 22:13:20 UTC as a Unix time.
EPOCH = 1_700_000_000
QUICK = ["--policies", "static", "--no-sweep", "--no-plots", "--jobs", "1"]


def epoch_trace(path: Path, per_second: float, seconds: float = 3600.0, requests: int = 3000) -> Path:
    """An hour of arrivals as Unix times in units of 1 / ``per_second`` s, the last one at ``seconds``."""
    rng = np.random.default_rng(1)
    offsets = np.concatenate([[0.0], np.sort(rng.random(requests - 2)) * seconds, [seconds]])
    path.write_text("timestamp\n" + "\n".join(f"{round((EPOCH + t) * per_second)}" for t in offsets) + "\n")
    return path


@pytest.mark.parametrize(("per_second", "unit"), [(1e3, "ms"), (1e6, "us")])
def test_unix_times_in_ms_or_us_read_as_seconds_are_refused_naming_the_flag(
    tmp_path: Path, per_second: float, unit: str
) -> None:
    # An hour of epoch milliseconds read as seconds spanned 42 days (below the 60-day bound) and
    # was simulated as such: 2.8 billion rejected requests.
    path = epoch_trace(tmp_path / "t.csv", per_second)
    with pytest.raises(
        TraceError, match=rf"t\.csv: the times read as seconds are around 1\.7e\+(12|15) s, .* pass --time-unit {unit}$"
    ):
        load(path)
    trace = load(path, unit)
    assert trace.duration == pytest.approx(3600.0, abs=1e-3)
    assert trace.start == pytest.approx(EPOCH)
    assert len(trace) == 3000


def test_microseconds_read_as_milliseconds_name_the_next_unit_and_nanoseconds_ask_for_conversion(
    tmp_path: Path,
) -> None:
    with pytest.raises(TraceError, match=r"read as milliseconds .* pass --time-unit us$"):
        load(epoch_trace(tmp_path / "us.csv", 1e6), "ms")
    with pytest.raises(TraceError, match=r"convert the times to seconds, milliseconds or microseconds"):
        load(epoch_trace(tmp_path / "ns.csv", 1e9))


def test_relative_microseconds_read_as_seconds_name_both_smaller_units_with_their_spans(tmp_path: Path) -> None:
    # Ten minutes of relative microseconds span 6.9 days as milliseconds, within the 60-day bound:
    # the hint named ms alone, and following it simulated 6.9 days, 1,000x stretched.
    path = tmp_path / "us.csv"
    path.write_text("timestamp\n" + "".join(f"{i * 6_000_000}\n" for i in range(101)))
    with pytest.raises(TraceError) as refused:
        load(path)
    assert str(refused.value) == (
        f"{path}: the times span 6,944.4 days (earliest at line 2, latest at line 102); a trace may span at "
        "most 60 days: split the trace; or pass --time-unit ms if the times are milliseconds (the trace then "
        "spans 6.9 days) or --time-unit us if the times are microseconds (the trace then spans 10.0 min)"
    )
    assert load(path, "us").duration == pytest.approx(600.0)


def test_one_stray_row_is_named_as_such_without_a_unit_hint(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("timestamp\n" + "".join(f"{i * 6}\n" for i in range(100)) + "1000000000\n")
    with pytest.raises(TraceError) as refused:
        load(path)
    assert str(refused.value) == (
        f"{path}:102: this row's time makes the trace span 11,574.1 days (earliest at line 2, latest at line "
        "102), and without it the trace spans 9.9 min; a trace may span at most 60 days: remove the stray row "
        "or split the trace"
    )


def test_unix_seconds_and_relative_times_still_read_as_seconds(tmp_path: Path) -> None:
    # Whole seconds, a second's repeats spread within it: within a second of the hour.
    assert load(epoch_trace(tmp_path / "s.csv", 1.0)).duration == pytest.approx(3600.0, abs=1.0)
    relative = tmp_path / "r.csv"
    relative.write_text("time\n12.5\n14\n100\n")
    trace = load(relative)
    assert (trace.start, trace.duration) == (12.5, 87.5)


def test_the_header_says_what_the_trace_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = epoch_trace(tmp_path / "t.csv", 1e3)
    assert run_cli(["--trace", str(path), "--time-unit", "ms", *QUICK, "--out", str(tmp_path / "o")]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("bert-base on"))
    assert (
        "trace t.csv: 3,000 requests over 60.0 min from 1700000000 s (2023-11-14 22:13:20 UTC as a Unix time), "
        "0.833 requests/s" in header
    )


def test_a_dated_trace_is_described_from_its_first_date_time(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP\n2023-11-16 18:15:46.68\n2023-11-16 18:16:46.68+00:00\n2023-11-16 20:15:46.68Z\n")
    assert describe(load(path)) == "3 requests over 2.00 h from 2023-11-16 18:15:46.680, 0.000417 requests/s"
    relative = tmp_path / "r.csv"
    relative.write_text("time\n5\n65\n")
    assert describe(load(relative)) == "2 requests over 60 s from t = 5 s, 0.0333 requests/s"


def test_date_times_past_numpys_nanosecond_years_keep_their_fractions(tmp_path: Path) -> None:
    # Years numpy cannot hold in nanoseconds (here 3000) are read as whole seconds plus the fraction.
    csv = tmp_path / "far.csv"
    csv.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "3000-01-01 00:00:00.25,10,10\n3000-01-01 00:00:01.75,10,10\n3000-01-01 00:00:03.5,10,10\n"
    )
    trace = load(csv)
    np.testing.assert_allclose(trace.arrivals, [0.0, 1.5, 3.25])
    assert trace.dated and trace.start == 32_503_680_000.25
