"""Placement planner: which Inf2 type, how many replicas per node, what it costs, and why."""

from __future__ import annotations

import re

import pytest

from neuronfleet.api.v1alpha1 import QUANTITY_PATTERN, InferenceDeploymentSpec
from neuronfleet.planning.catalog import INF2_INSTANCE_TYPES
from neuronfleet.planning.placement import (
    DAEMONSET_HEADROOM,
    QuantityError,
    ReplicaNeeds,
    check_fits,
    parse_cpu_millis,
    parse_memory_mib,
    plan_for_spec,
    plan_placement,
)

ALL_TYPES = list(INF2_INSTANCE_TYPES)


def spec(placement: dict[str, object] | None = None, **model: object) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate(
        {"model": {"source": "s3://models/bert/", **model}, "placement": placement or {}}
    )


def test_two_core_model_goes_to_inf2_xlarge() -> None:
    plan = plan_placement(ReplicaNeeds(2), ALL_TYPES, 3)
    assert plan.chosen is not None
    assert plan.chosen.name == "inf2.xlarge"
    assert plan.chosen.replicas_per_node == 1
    assert plan.chosen.nodes == 3
    assert plan.chosen.usd_per_hour == pytest.approx(3 * 0.7582)
    # The runner-up named is the next cheapest (3 single-chip inf2.8xlarge nodes), not any other.
    assert plan.reason.endswith("cheapest: next is inf2.8xlarge at $5.90/h")


@pytest.mark.parametrize(
    ("replicas", "expected_type", "expected_nodes", "expected_usd"),
    [
        # 24xlarge has 12 cores: one 8-core replica per node; 48xlarge (24 cores) holds three.
        (1, "inf2.24xlarge", 1, 6.49063),
        (3, "inf2.48xlarge", 1, 12.98127),
        (5, "inf2.48xlarge", 2, 2 * 12.98127),
        (6, "inf2.48xlarge", 2, 2 * 12.98127),
    ],
)
def test_eight_core_model_type_depends_on_replica_count(
    replicas: int, expected_type: str, expected_nodes: int, expected_usd: float
) -> None:
    plan = plan_placement(ReplicaNeeds(8), ALL_TYPES, replicas)
    assert plan.chosen is not None
    assert (plan.chosen.name, plan.chosen.nodes) == (expected_type, expected_nodes)
    assert plan.chosen.usd_per_hour == pytest.approx(expected_usd)
    single_chip = [c for c in plan.candidates if c.name in ("inf2.xlarge", "inf2.8xlarge")]
    assert all(not c.fits for c in single_chip)


def test_cost_tie_prefers_more_nodes_and_says_so() -> None:
    # 2 x 24xlarge = $12.98126/h vs 1 x 48xlarge = $12.98127/h: a tie; two nodes do not share fate.
    plan = plan_placement(ReplicaNeeds(8), ALL_TYPES, 2)
    assert plan.chosen is not None
    assert (plan.chosen.name, plan.chosen.nodes) == ("inf2.24xlarge", 2)
    assert "ties on cost with inf2.48xlarge, chosen for more nodes" in plan.reason


def test_candidates_report_per_type_figures() -> None:
    plan = plan_placement(ReplicaNeeds(8), ALL_TYPES, 5, throughput_rps=100.0)
    by_name = {c.name: c for c in plan.candidates}
    big, medium = by_name["inf2.48xlarge"], by_name["inf2.24xlarge"]
    assert (big.replicas_per_node, big.nodes, big.limited_by) == (3, 2, "neuroncores")
    assert (medium.replicas_per_node, medium.nodes) == (1, 5)
    assert medium.usd_per_hour == pytest.approx(5 * 6.49063)
    # $/h over (5 replicas x 100 inf/s x 3600 s) inferences, per million.
    assert big.usd_per_million_inferences == pytest.approx(2 * 12.98127 / (5 * 100 * 3600) * 1e6)
    assert by_name["inf2.xlarge"].usd_per_million_inferences is None


def test_host_share_follows_core_share_after_headroom() -> None:
    plan = plan_placement(ReplicaNeeds(8), ["inf2.24xlarge"], 1)
    chosen = plan.chosen
    assert chosen is not None
    itype = INF2_INSTANCE_TYPES["inf2.24xlarge"]
    usable_cpu = itype.allocatable_cpu_millis - DAEMONSET_HEADROOM.cpu_millis
    assert chosen.cpu_millis_per_replica == int(usable_cpu * 8 / 12)
    usable_memory = itype.allocatable_memory_mib - DAEMONSET_HEADROOM.memory_mib
    assert chosen.memory_mib_per_replica == int(usable_memory * 8 / 12)


def test_explicit_cpu_request_limits_packing() -> None:
    # 1-core replicas: 24 per 48xlarge by cores, but 40 CPUs each leaves room for only 4.
    plan = plan_placement(ReplicaNeeds(1, cpu_millis=40_000), ["inf2.48xlarge"], 10)
    assert plan.chosen is not None
    assert plan.chosen.limited_by == "cpu"
    assert plan.chosen.replicas_per_node == (191450 - DAEMONSET_HEADROOM.cpu_millis) // 40_000
    assert plan.chosen.nodes == 3


def test_memory_request_that_no_host_holds_is_a_problem_with_its_field() -> None:
    plan = plan_placement(ReplicaNeeds(2, memory_mib=20_000), ["inf2.xlarge"], 1)
    assert plan.chosen is None
    assert "spec.runtime.memory 20000Mi" in plan.problems[0]


def test_hbm_within_what_the_cores_address_never_limits_packing_further() -> None:
    # HBM is 16 GiB per core on every type, so a valid need (<= 16 GiB per core) packs as cores do.
    for cores, hbm in [(1, 16), (2, 32), (2, 20), (8, 128)]:
        plan = plan_placement(ReplicaNeeds(cores, hbm_gib=hbm), ["inf2.48xlarge"], 1)
        assert plan.chosen is not None
        assert plan.chosen.replicas_per_node == 24 // cores


@pytest.mark.parametrize("hbm", [None, 32])
def test_a_replica_using_all_of_a_types_hbm_fits_it(hbm: int | None) -> None:
    # Two NeuronCores address all 32 GiB of an inf2.xlarge's one chip (by default, or asked for):
    # exactly what the type has, so it fits, one per node, with nothing to report.
    plan = plan_placement(ReplicaNeeds(2, hbm_gib=hbm), ["inf2.xlarge"], 3)
    assert plan.chosen is not None and plan.problems == () and plan.chosen.problems == ()
    assert (plan.chosen.name, plan.chosen.replicas_per_node, plan.chosen.nodes) == ("inf2.xlarge", 1, 3)


def test_sixteen_cores_and_hbm_that_no_allowed_type_holds() -> None:
    allowed: dict[str, object] = {"instanceTypes": ["inf2.xlarge", "inf2.24xlarge"]}
    problems = check_fits(spec(allowed, neuronCoresPerReplica=16, hbmGiB=200))
    assert len(problems) == 1
    message = problems[0]
    assert message.startswith(
        "spec.placement.instanceTypes: no allowed instance type holds a replica of 16 NeuronCores"
    )
    assert "inf2.24xlarge: 12 NeuronCores < 16, 192 GiB HBM < 200 GiB" in message
    assert "inf2.xlarge: 2 NeuronCores < 16" in message


def test_sixteen_cores_fit_inf2_48xlarge_when_allowed() -> None:
    assert check_fits(spec(neuronCoresPerReplica=16, hbmGiB=200)) == []
    plan = plan_for_spec(spec(neuronCoresPerReplica=16, hbmGiB=200), 2)
    assert plan.chosen is not None
    assert (plan.chosen.name, plan.chosen.nodes) == ("inf2.48xlarge", 2)
    assert "only allowed type that fits" in plan.reason


def test_hbm_beyond_what_the_cores_address_names_the_field() -> None:
    plan = plan_placement(ReplicaNeeds(2, hbm_gib=40), ALL_TYPES, 1)
    assert plan.chosen is None
    assert any(p.startswith("spec.model.hbmGiB: 40 GiB exceeds the 32 GiB") for p in plan.problems)


def test_current_type_is_kept_unless_the_saving_is_large() -> None:
    # 4 replicas of 8 cores: 24xlarge and 48xlarge tie at $25.96/h; the current type stays.
    kept = plan_placement(ReplicaNeeds(8), ALL_TYPES, 4, current_type="inf2.48xlarge")
    assert kept.chosen is not None
    assert kept.chosen.name == "inf2.48xlarge"
    assert "kept the current type" in kept.reason
    # 3 replicas: 48xlarge costs $12.98/h against $19.47/h; moving is worth it.
    moved = plan_placement(ReplicaNeeds(8), ALL_TYPES, 3, current_type="inf2.24xlarge")
    assert moved.chosen is not None
    assert moved.chosen.name == "inf2.48xlarge"


def test_an_auto_pools_standby_alone_never_moves_the_fleet() -> None:
    # 1 active 8-core replica on inf2.24xlarge; an Auto pool's decision adds 2 standby pods, which
    # fit one inf2.48xlarge for less. Moving is a rollout of every pod, and the pool shrinking again
    # moved it back: the serving replica alone gains nothing on the other type.
    varies = plan_placement(ReplicaNeeds(8), ALL_TYPES, 3, serving=1, current_type="inf2.24xlarge", standby_varies=True)
    assert varies.chosen is not None and varies.chosen.name == "inf2.24xlarge"
    assert "cheaper only with the 2 standby pod(s) counted" in varies.reason
    # A Fixed pool's standby is the spec's: counted as before.
    fixed = plan_placement(ReplicaNeeds(8), ALL_TYPES, 3, serving=1, current_type="inf2.24xlarge")
    assert fixed.chosen is not None and fixed.chosen.name == "inf2.48xlarge"
    # Where the serving replicas alone save enough, the fleet moves, standby or not.
    serving = plan_placement(
        ReplicaNeeds(8), ALL_TYPES, 6, serving=3, current_type="inf2.24xlarge", standby_varies=True
    )
    assert serving.chosen is not None and serving.chosen.name == "inf2.48xlarge"


def test_zero_pods_take_no_node_and_the_type_is_the_cheapest_for_a_first_replica() -> None:
    # Planned as one replica, 0 pods were reported as one node at $0.76/h.
    plan = plan_placement(ReplicaNeeds(2), ALL_TYPES, 0)
    assert plan.replicas == 0
    assert plan.chosen is not None
    assert (plan.chosen.name, plan.chosen.nodes, plan.chosen.usd_per_hour) == ("inf2.xlarge", 0, 0.0)
    assert plan.reason.startswith("no pod to place: 0 nodes, $0.00/h; chosen for a first replica: inf2.xlarge")
    # Where a first replica costs least, not the first type listed (at 0 pods all cost $0).
    plan = plan_placement(ReplicaNeeds(8), ["inf2.48xlarge", "inf2.24xlarge"], 0)
    assert plan.chosen is not None and plan.chosen.name == "inf2.24xlarge"


def test_warm_pods_and_placeholders_take_node_slots_and_only_the_serving_replicas_earn() -> None:
    # 2 active + 1 warm + 2 placeholders of 8 cores: 5 pods, 2 x 48xlarge (3 per node) = $25.96/h.
    plan = plan_placement(ReplicaNeeds(8), ALL_TYPES, 5, serving=2, throughput_rps=10)
    assert plan.chosen is not None
    assert (plan.chosen.name, plan.chosen.nodes) == ("inf2.48xlarge", 2)
    assert plan.chosen.usd_per_hour == pytest.approx(2 * 12.98127)
    # Over what the 2 serving replicas answer (2 x 10 inf/s), not what 5 would.
    assert plan.chosen.usd_per_million_inferences == pytest.approx(2 * 12.98127 / (2 * 10 * 3600) * 1e6)
    # Nothing serves: no $ per million inferences, the nodes still cost.
    idle = plan_placement(ReplicaNeeds(8), ALL_TYPES, 1, serving=0, throughput_rps=10)
    assert idle.chosen is not None and idle.chosen.usd_per_hour > 0
    assert idle.chosen.usd_per_million_inferences is None


@pytest.mark.parametrize(
    ("quantity", "millis"),
    [("2", 2000), ("500m", 500), ("1.5", 1500), ("0.1", 100), ("1e1", 10_000), ("+1", 1000), ("1.", 1000), (".5", 500)],
)
def test_parse_cpu(quantity: str, millis: int) -> None:
    assert parse_cpu_millis(quantity) == millis


@pytest.mark.parametrize(
    ("quantity", "mib"),
    [
        ("4Gi", 4096),
        ("512Mi", 512),
        ("1G", 954),
        ("1048576", 1),
        ("1Ti", 1024 * 1024),
        ("1e9", 954),
        ("1.5Gi", 1536),
        ("1048576000m", 1),  # millibytes: a quantity Kubernetes takes
    ],
)
def test_parse_memory(quantity: str, mib: int) -> None:
    assert parse_memory_mib(quantity) == mib


# Every form the CRD's pattern admits is one planning reads: they share QUANTITY_PATTERN.
@pytest.mark.parametrize("quantity", ["-1", "-1Gi", "1e", "1e999", "2 Gi", "1.2.3", "Gi", "", "1ki", "0x10", "2E-1Mi"])
def test_what_the_schema_refuses_planning_refuses(quantity: str) -> None:
    assert re.fullmatch(QUANTITY_PATTERN, quantity) is None
    with pytest.raises(QuantityError):
        parse_memory_mib(quantity)
    with pytest.raises(QuantityError):
        parse_cpu_millis(quantity)


def test_unreadable_quantity_is_reported_with_its_field() -> None:
    with pytest.raises(QuantityError, match="not a CPU quantity"):
        parse_cpu_millis("2Gi")  # Kubernetes takes 2 GiB of CPUs; always a mistake
    bad = spec().model_copy(update={"runtime": spec().runtime.model_copy(update={"memory": "4 bananas"})})
    assert check_fits(bad)[0].startswith("spec.runtime.memory:")
