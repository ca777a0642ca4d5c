"""Cold-start distributions in profiles: bounds that keep sampling and its arithmetic finite."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from neuronfleet.sim.command import run_cli
from neuronfleet.sim.distributions import MAX_LOGNORMAL_SIGMA, DistributionError, parse
from neuronfleet.sim.profiles import dump_profile


def test_the_widest_accepted_lognormal_samples_finite_durations() -> None:
    dist = parse({"lognormal": {"median": 86_400, "sigma": MAX_LOGNORMAL_SIGMA}}, "node")
    samples = [dist.sample(np.random.default_rng(seed)) for seed in range(200)]
    assert all(np.isfinite(samples)) and np.isfinite(dist.mean())


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"lognormal": {"median": 120, "sigma": 3.5}}, "node: lognormal sigma 3.5 is above 3"),
        ({"lognormal": {"median": 120, "sigma": 50}}, "node: lognormal sigma 50 is above 3"),  # mean: OverflowError
        ({"normal": {"mean": 10, "sd": 1e300}}, "node: N(10s, sd 1e+300) is longer than a cold-start phase can be"),
        ({"uniform": [0, 1e308]}, "node: U(0-1e+308s) is longer than a cold-start phase can be"),
        (1e200, "node: 1e+200s is longer than a cold-start phase can be (at most 86,400 s, one day)"),
    ],
)
def test_distributions_beyond_the_bounds_are_refused(spec: object, message: str) -> None:
    with pytest.raises(DistributionError, match=message.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        parse(spec, "node")


def test_a_huge_sigma_in_a_profile_is_a_profile_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # sigma >= ~38 raised OverflowError from the mean's exp() deep in a run.
    profile = tmp_path / "p.yaml"
    text = dump_profile("bert-base")
    assert "sigma: 0.3" in text
    profile.write_text(text.replace("sigma: 0.3", "sigma: 50", 1))
    csv = tmp_path / "t.csv"
    csv.write_text("timestamp\n" + "".join(f"{t}\n" for t in range(0, 600)))
    assert (
        run_cli(
            [
                "--trace",
                str(csv),
                "--profile",
                str(profile),
                "--policies",
                "static",
                "--no-plots",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "lognormal sigma 50 is above 3" in err
