"""The sandbox scheduler's pure rules, as kube-scheduler and the Neuron scheduler extension apply
them: a toleration's key and value, node-affinity Gt and Lt, which NeuronCores a pod gets, and
which pods and nodes a topology spread constraint counts."""

from __future__ import annotations

from typing import Any

import pytest

from neuronfleet.sandbox.scheduling import (
    _expression_matches,
    allocate_cores,
    pod_affinity_violation,
    spread_violation,
    tolerates,
)

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


ZONE = "topology.kubernetes.io/zone"
SPREAD = {
    "maxSkew": 1,
    "topologyKey": ZONE,
    "whenUnsatisfiable": "DoNotSchedule",
    "labelSelector": {"matchLabels": {"app": "m"}},
}


def _node(name: str, zone: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {ZONE: zone}}}


def _placed(*, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "ns", "labels": {"app": "m"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-06T00:00:00Z"
    return {"metadata": meta}


def _spreading_pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "labels": {"app": "m"}},
        "spec": {"topologySpreadConstraints": [SPREAD], **spec},
    }


def test_spread_does_not_count_a_pod_being_deleted() -> None:
    # kube-scheduler's PodTopologySpread passes over terminating pods: the deleting pod in zone a leaves it empty.
    nodes = [_node("a1", "a"), _node("b1", "b")]
    pods_by_node = {"a1": [_placed(deleting=True)]}
    assert spread_violation(_spreading_pod(), nodes[0], nodes, pods_by_node, hard=True) == (False, 0)
    pods_by_node = {"a1": [_placed()]}
    assert spread_violation(_spreading_pod(), nodes[0], nodes, pods_by_node, hard=True)[0] is True
    elsewhere = {"metadata": {"namespace": "other", "labels": {"app": "m"}}}
    assert spread_violation(_spreading_pod(), nodes[0], nodes, {"a1": [elsewhere]}, hard=True) == (False, 0)


def test_spread_counts_only_the_domains_of_nodes_the_pod_may_run_on() -> None:
    # nodeAffinityPolicy Honor (the default): zone c is outside the pod's node affinity, so its
    # empty node does not set the minimum, and a pod may go to zone a beside one in b.
    nodes = [_node("a1", "a"), _node("b1", "b"), _node("c1", "c")]
    pods_by_node = {"b1": [_placed()]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a", "b"]}]}]
            }
        }
    }
    pods_by_node["a1"] = [_placed()]
    assert spread_violation(_spreading_pod(affinity=affinity), nodes[0], nodes, pods_by_node, hard=True)[0] is False
    assert spread_violation(_spreading_pod(), nodes[0], nodes, pods_by_node, hard=True)[0] is True  # c counts
    assert (
        spread_violation(_spreading_pod(nodeSelector={ZONE: "a"}), nodes[0], nodes, pods_by_node, hard=True)[0] is False
    )


def _affinity_pod(kind: str, **term: Any) -> dict[str, Any]:
    required = {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"app": "m"}}, **term}
    return {
        "metadata": {"namespace": "ns"},
        "spec": {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [required]}}},
    }


def test_required_pod_affinity_admits_only_a_domain_holding_a_matching_pod() -> None:
    # The match is per topology domain: b2 holds no pod, but shares zone b with b1's.
    nodes = [_node("a1", "a"), _node("b1", "b"), _node("b2", "b")]
    pods_by_node = {"b1": [_placed()]}
    affine = _affinity_pod("podAffinity")
    assert pod_affinity_violation(affine, nodes[0], nodes, pods_by_node) == "node(s) didn't match pod affinity rules"
    assert pod_affinity_violation(affine, nodes[1], nodes, pods_by_node) is None
    assert pod_affinity_violation(affine, nodes[2], nodes, pods_by_node) is None
    anti = _affinity_pod("podAntiAffinity")
    assert pod_affinity_violation(anti, nodes[0], nodes, pods_by_node) is None
    refused = "node(s) didn't match pod anti-affinity rules"
    assert pod_affinity_violation(anti, nodes[2], nodes, pods_by_node) == refused


def test_pod_affinity_reads_its_own_namespace_unless_it_names_others() -> None:
    nodes = [_node("b1", "b")]
    elsewhere = {"b1": [{"metadata": {"namespace": "other", "labels": {"app": "m"}}}]}
    assert pod_affinity_violation(_affinity_pod("podAffinity"), nodes[0], nodes, elsewhere) is not None
    named = _affinity_pod("podAffinity", namespaces=["other"])
    assert pod_affinity_violation(named, nodes[0], nodes, elsewhere) is None
