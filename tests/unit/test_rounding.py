"""The one rounding every replica count and whole second goes through (planning/rounding), and a
trace's whole seconds, which round the other way."""

from __future__ import annotations

import numpy as np
import pytest

from neuronfleet.planning.rounding import ROUND_OFF, ceil_whole
from neuronfleet.sim.trace import Trace


@pytest.mark.parametrize(
    ("value", "whole"),
    [
        (sum([0.07] * 100), 7),  # 7.0000000000000036, which a plain ceil reads as 8
        (7.0, 7),
        (7.0 + 10 * ROUND_OFF, 8),  # past round-off: a real excess asks for one more
        (6.9999999, 7),
        (0.0, 0),
        (-0.5, 0),
    ],
)
def test_a_value_a_round_off_above_a_whole_number_is_that_number(value: float, whole: int) -> None:
    assert ceil_whole(value) == whole


@pytest.mark.parametrize(("last", "seconds"), [(3600.0, 3601), (3599.5, 3600), (3600.0 - 1e-12, 3601), (0.0, 1)])
def test_a_traces_whole_seconds_hold_its_last_arrival(last: float, seconds: int) -> None:
    # An arrival at exactly 3600.0 falls in second 3600: the span must reach 3601 to hold it.
    trace = Trace(np.array([0.0, last]), None, None, "t")
    assert trace.whole_seconds == seconds
