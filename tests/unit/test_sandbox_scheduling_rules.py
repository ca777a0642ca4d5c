"""The sandbox scheduler's pure rules, as kube-scheduler and the Neuron scheduler extension apply
them: a toleration's key and value, node-affinity Gt and Lt, and which NeuronCores a pod gets."""

from __future__ import annotations

from typing import Any

import pytest

from neuronfleet.sandbox.scheduling import _expression_matches, allocate_cores, tolerates

TAINT = {"key": "dedicated", "value": "inference", "effect": "NoSchedule"}


def _pod(*tolerations: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"tolerations": list(tolerations)}}


def test_an_equal_toleration_needs_the_taints_key_and_value() -> None:
    assert tolerates(_pod({"key": "dedicated", "operator": "Equal", "value": "inference"}), TAINT)
    assert not tolerates(_pod({"key": "dedicated", "operator": "Equal", "value": "training"}), TAINT)
    assert not tolerates(_pod({"key": "other", "operator": "Equal", "value": "inference"}), TAINT)
    assert tolerates(_pod({"key": "dedicated", "value": "inference"}), TAINT)  # Equal is the default


@pytest.mark.parametrize(
    ("operator", "label", "matches"),
    [
        ("Gt", "7", True),
        ("Gt", "5", False),
        ("Gt", "3", False),
        ("Lt", "3", True),
        ("Lt", "5", False),
        ("Lt", "7", False),
    ],
)
def test_gt_and_lt_compare_the_label_as_an_integer(operator: str, label: str, matches: bool) -> None:
    expression = {"key": "neuron/cores", "operator": operator, "values": ["5"]}
    assert _expression_matches(expression, {"neuron/cores": label}) is matches


def test_gt_and_lt_match_no_node_without_the_label_or_with_a_non_integer_one() -> None:
    for operator in ("Gt", "Lt"):
        expression = {"key": "neuron/cores", "operator": operator, "values": ["5"]}
        assert _expression_matches(expression, {}) is False
        assert _expression_matches(expression, {"neuron/cores": "many"}) is False


def test_a_contiguous_block_may_end_at_the_last_core() -> None:
    assert allocate_cores(4, {0, 1}, 2, contiguous=True, ring=False) == [2, 3]
    assert allocate_cores(4, {0, 1, 3}, 2, contiguous=True, ring=False) is None  # 2 free, not adjacent
    assert allocate_cores(4, {1, 2}, 2, contiguous=True, ring=True) == [3, 0]  # the ring wraps


def test_a_contiguous_block_is_taken_from_the_smallest_free_run_that_holds_it() -> None:
    # Free runs 0-4 (5 cores) and 6-7 (2): a 2-core pod takes 6-7, keeping the long run for a large pod.
    assert allocate_cores(8, {5}, 2, contiguous=True, ring=False) == [6, 7]
    assert allocate_cores(8, {5}, 2, contiguous=False, ring=False) == [0, 1]  # without the extension: first free
