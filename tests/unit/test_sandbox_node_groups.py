"""A sandbox node group's bounds: each of them is refused on its own, with the bounds it needs."""

from __future__ import annotations

from typing import Any

import pytest

from neuronfleet.sandbox import NodeGroup


@pytest.mark.parametrize(
    "bounds",
    [
        {"count": -1},
        {"count": 0, "min_nodes": -1},
        {"count": 0, "min_nodes": 3, "max_nodes": 2},
        {"count": 5, "max_nodes": 4},
    ],
    ids=["negative-count", "negative-min", "min-above-max", "count-above-max"],
)
def test_a_node_group_out_of_its_bounds_is_refused(bounds: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"need 0 <= min \(.*\) <= max \(.*\) and 0 <= count \(.*\) <= max"):
        NodeGroup("small", "inf2.xlarge", **bounds)


def test_a_node_group_at_its_bounds_is_taken() -> None:
    group = NodeGroup("small", "inf2.xlarge", count=4, min_nodes=4, max_nodes=4)
    assert (group.count, group.min_nodes, group.max_nodes) == (4, 4, 4)
