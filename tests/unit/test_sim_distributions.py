"""Cold-start distributions in profiles: bounds that keep sampling and its arithmetic finite."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neuronfleet.sim.command import run_cli
from neuronfleet.sim.distributions import MAX_LOGNORMAL_SIGMA, MAX_PHASE_SECONDS, DistributionError, parse
from neuronfleet.sim.profiles import dump_profile


def test_the_widest_accepted_lognormal_samples_finite_durations() -> None:
    # The widest: sigma 3 at the median whose mean is one day (median 86,400 s, sigma 3 has a mean
    # of 90 days and was accepted, though the docs said phases above a day are refused).
    median = MAX_PHASE_SECONDS / math.exp(MAX_LOGNORMAL_SIGMA**2 / 2)
    dist = parse({"lognormal": {"median": median, "sigma": MAX_LOGNORMAL_SIGMA}}, "node")
    samples = [dist.sample(np.random.default_rng(seed)) for seed in range(200)]
    assert all(np.isfinite(samples)) and dist.mean() == pytest.approx(MAX_PHASE_SECONDS)
    with pytest.raises(DistributionError, match=r"node: logN\(median 961s, sigma 3\) has a mean of 86,506 s"):
        parse({"lognormal": {"median": 961, "sigma": MAX_LOGNORMAL_SIGMA}}, "node")


@pytest.mark.parametrize(
    "spec",
    [
        86_400,
        {"fixed": 86_400},
        {"uniform": [0, 86_400]},
        {"uniform": [86_400, 86_400]},
        {"normal": {"mean": 80_000, "sd": 1_000}},
    ],
)
def test_phases_up_to_a_day_are_accepted(spec: object) -> None:
    assert parse(spec, "node").mean() <= MAX_PHASE_SECONDS


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"lognormal": {"median": 120, "sigma": 3.5}}, "node: lognormal sigma 3.5 is above 3"),
        ({"lognormal": {"median": 120, "sigma": 50}}, "node: lognormal sigma 50 is above 3"),  # mean: OverflowError
        ({"normal": {"mean": 10, "sd": 1e300}}, "node: N(10s, sd 1e+300) is longer than a cold-start phase can be"),
        ({"uniform": [0, 1e308]}, "node: U(0-1e+308s) is longer than a cold-start phase can be"),
        (1e200, "node: 1e+200s is longer than a cold-start phase can be (at most 86,400 s, one day)"),
        (
            {"lognormal": {"median": 86_400, "sigma": 3}},
            "node: logN(median 86400s, sigma 3) has a mean of 7,777,480 s (90.0 days), longer than a cold-start "
            "phase can be (at most 86,400 s, one day)",
        ),
        # Cut at zero, a normal's mean is above its `mean` parameter: 93,598 s here.
        ({"normal": {"mean": 86_400, "sd": 86_400}}, "node: N(86400s, sd 86400) has a mean of 93,598 s (1.1 days)"),
    ],
)
def test_distributions_beyond_the_bounds_are_refused(spec: object, message: str) -> None:
    with pytest.raises(DistributionError, match=message.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        parse(spec, "node")


def simulate_with_profile(tmp_path: Path, profile: Path) -> int:
    """``simulate`` of a 600-request, 600 s trace with ``profile`` (static only, no plots): its exit code."""
    csv = tmp_path / "t.csv"
    csv.write_text("timestamp\n" + "".join(f"{t}\n" for t in range(0, 600)))
    args = ["--trace", str(csv), "--profile", str(profile), "--policies", "static", "--no-plots"]
    return run_cli([*args, "--out", str(tmp_path / "o")])


def test_a_huge_sigma_in_a_profile_is_a_profile_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # sigma >= ~38 raised OverflowError from the mean's exp() deep in a run.
    profile = tmp_path / "p.yaml"
    text = dump_profile("bert-base")
    assert "sigma: 0.3" in text
    profile.write_text(text.replace("sigma: 0.3", "sigma: 50", 1))
    assert simulate_with_profile(tmp_path, profile) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "lognormal sigma 50 is above 3" in err


def test_a_phase_with_a_mean_of_months_is_a_profile_error_not_a_refused_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It was accepted, and every trace was then refused as shorter than its 90-day cold start.
    profile = tmp_path / "p.yaml"
    profile.write_text(
        dump_profile("bert-base").replace("median: 120", "median: 86400", 1).replace("sigma: 0.3", "sigma: 3", 1)
    )
    assert simulate_with_profile(tmp_path, profile) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"error: {profile}: " in err
    assert "cold_start.node: logN(median 86400s, sigma 3) has a mean of 7,777,480 s (90.0 days)" in err
    assert "leaves" not in err


@pytest.mark.parametrize(
    ("spec", "numpy_draw"),
    [
        ({"uniform": [240, 360]}, lambda rng: float(rng.uniform(240.0, 360.0))),
        ({"lognormal": {"median": 120, "sigma": 0.3}}, lambda rng: 120.0 * math.exp(0.3 * rng.standard_normal())),
        ({"normal": {"mean": 10, "sd": 4}}, lambda rng: max(0.0, float(rng.normal(10.0, 4.0)))),
        (5, lambda rng: 5.0),
    ],
)
def test_a_sampler_draws_what_numpy_draws_from_the_same_stream(spec: object, numpy_draw: Any) -> None:
    # The simulated fleet draws its pods' phases through samplers made once (a run binds ~945,000 pods):
    # a uniform is drawn without Generator.uniform's checks, and must still be its draw to the last
    # bit, or every run's figures would move.
    dist = parse(spec, "phase")
    draw = dist.sampler(np.random.default_rng(7))
    reference = np.random.default_rng(7)
    drawn = [draw() for _ in range(2_000)]
    assert drawn == [numpy_draw(reference) for _ in range(2_000)]
    assert drawn[:5] == [dist.sample(rng) for rng in [np.random.default_rng(7)] for _ in range(5)]


@pytest.mark.parametrize(
    "spec",
    [
        {"fixed": math.nan},
        {"uniform": [math.nan, 5]},
        {"normal": {"mean": 5, "sd": math.nan}},
        {"normal": {"mean": math.inf, "sd": 1}},
        {"lognormal": {"median": 5, "sigma": math.inf}},
    ],
)
def test_a_phase_not_finite_in_either_parameter_is_refused_as_such(spec: object) -> None:
    # A NaN compares false with every later bound (the day, the sigma), so only this check stops it,
    # in either parameter: accepted, it would sample NaN cold starts.
    with pytest.raises(DistributionError, match="node: durations and spreads must be finite and >= 0"):
        parse(spec, "node")


@pytest.mark.parametrize("spec", [{"fixed": 1, "uniform": [0, 2]}, {}, [5], "5", None, True])
def test_a_phase_that_is_neither_a_number_nor_one_distribution_is_refused_as_such(spec: object) -> None:
    # Two kinds in one phase are refused, not read as whichever comes first; a one-item list or a
    # one-character string gets the same message, not an AttributeError.
    with pytest.raises(DistributionError, match=r"^node: expected a number or one of \{fixed\|uniform"):
        parse(spec, "node")
