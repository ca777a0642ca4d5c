"""The one rounding every replica count and whole second goes through (planning/rounding)."""

from __future__ import annotations

import pytest

from neuronfleet.planning.rounding import ROUND_OFF, ceil_whole


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
