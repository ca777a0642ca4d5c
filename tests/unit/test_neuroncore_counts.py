"""NeuronCores per replica: every count an Inf2 node can serve is accepted and packed as the ring allows.

On Inf2 the chips form a ring, on which the Neuron scheduler extension allocates any number of
contiguous cores (not only powers of two), so tensor parallelism over a whole inf2.24xlarge (12
cores) or inf2.48xlarge (24, the published Llama-2 figures) must validate and place.
"""

from __future__ import annotations

from typing import Any

import pytest

from neuronfleet.api.crd import openapi_schema
from neuronfleet.api.v1alpha1 import HBM_GIB_PER_NEURONCORE, MAX_NEURONCORES_PER_REPLICA
from neuronfleet.api.validation import validate_manifest
from neuronfleet.planning.catalog import HBM_GIB_PER_CHIP, INF2_INSTANCE_TYPES, NEURONCORES_PER_CHIP
from neuronfleet.planning.placement import ReplicaNeeds, check_fits, plan_placement
from neuronfleet.sim.profiles import BUILTIN, load_profile

ALL_TYPES = list(INF2_INSTANCE_TYPES)


def manifest(**model: Any) -> dict[str, Any]:
    placement = model.pop("placement", {})
    return {
        "apiVersion": "serving.neuronfleet.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "tp"},
        "spec": {"model": {"source": "s3://models/llm/", **model}, "placement": placement},
    }


@pytest.mark.parametrize("cores", [1, 2, 3, 4, 6, 8, 12, 16, 24])
def test_every_core_count_up_to_a_whole_inf2_48xlarge_validates(cores: int) -> None:
    # The schema, the defaults and the CRD's CEL rules, as the API server applies them.
    model, problems = validate_manifest(manifest(neuronCoresPerReplica=cores))
    assert problems == []
    assert model is not None
    assert check_fits(model.spec) == []


def test_more_cores_than_the_largest_node_has_are_refused_at_the_field() -> None:
    _, problems = validate_manifest(manifest(neuronCoresPerReplica=MAX_NEURONCORES_PER_REPLICA + 1))
    assert [p.path for p in problems] == ["spec.model.neuronCoresPerReplica"]


def test_the_api_bounds_agree_with_the_catalog() -> None:
    assert max(t.neuroncores for t in INF2_INSTANCE_TYPES.values()) == MAX_NEURONCORES_PER_REPLICA
    assert HBM_GIB_PER_CHIP // NEURONCORES_PER_CHIP == HBM_GIB_PER_NEURONCORE
    model_schema = openapi_schema()["properties"]["spec"]["properties"]["model"]["properties"]
    # hbmGiB's bound is what the most cores one may request address, no more, no less.
    assert model_schema["neuronCoresPerReplica"]["maximum"] == MAX_NEURONCORES_PER_REPLICA
    assert model_schema["hbmGiB"]["maximum"] == MAX_NEURONCORES_PER_REPLICA * HBM_GIB_PER_NEURONCORE
    _, problems = validate_manifest(manifest(neuronCoresPerReplica=24, hbmGiB=384))
    assert problems == []


@pytest.mark.parametrize(("itype", "per_node"), [("inf2.24xlarge", 1), ("inf2.48xlarge", 2)])
def test_a_twelve_core_replica_packs_by_whole_halves_of_the_ring(itype: str, per_node: int) -> None:
    plan = plan_placement(ReplicaNeeds(12, hbm_gib=150), [itype], 4)
    assert plan.chosen is not None, plan.problems
    assert plan.chosen.replicas_per_node == per_node
    assert plan.chosen.nodes == 4 // per_node


def test_a_whole_inf2_48xlarge_replica_goes_only_there() -> None:
    plan = plan_placement(ReplicaNeeds(24, hbm_gib=384), ALL_TYPES, 2)
    assert plan.chosen is not None, plan.problems
    assert (plan.chosen.name, plan.chosen.replicas_per_node, plan.chosen.nodes) == ("inf2.48xlarge", 1, 2)
    assert [c.name for c in plan.candidates if c.fits] == ["inf2.48xlarge"]


def test_a_count_that_does_not_divide_the_node_leaves_the_rest_idle() -> None:
    plan = plan_placement(ReplicaNeeds(5), ["inf2.48xlarge"], 4)
    assert plan.chosen is not None
    assert (plan.chosen.replicas_per_node, plan.chosen.limited_by) == (4, "neuroncores")


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_each_simulator_profile_is_a_deployment_the_operator_accepts_and_places_alike(name: str) -> None:
    # The simulator's llama-2-7b is TP=24 on inf2.48xlarge (the published figures): the operator must
    # be able to run what the simulator models.
    profile = load_profile(name)
    cores = profile.instance.neuroncores // profile.replicas_per_node
    model, problems = validate_manifest(
        manifest(neuronCoresPerReplica=cores, placement={"instanceTypes": [profile.instance_type]})
    )
    assert problems == []
    assert model is not None
    plan = plan_placement(ReplicaNeeds(cores), [profile.instance_type], 1)
    assert plan.chosen is not None
    assert plan.chosen.replicas_per_node == profile.replicas_per_node


def test_hbm_advice_names_a_core_count_one_can_request() -> None:
    (problem,) = plan_placement(ReplicaNeeds(2, hbm_gib=40), ALL_TYPES, 1).problems
    assert problem.startswith("spec.model.hbmGiB: 40 GiB exceeds the 32 GiB that 2 NeuronCore(s) address")
    assert problem.endswith("request at least 3 cores (spec.model.neuronCoresPerReplica)")
    # 200 GiB needs 13 cores: more than 16 was refused before, and is what the ring allows now.
    (problem,) = plan_placement(ReplicaNeeds(12, hbm_gib=200), ALL_TYPES, 1).problems
    assert problem.endswith("request at least 13 cores (spec.model.neuronCoresPerReplica)")
    beyond = plan_placement(ReplicaNeeds(24, hbm_gib=400), ALL_TYPES, 1).problems
    assert "no replica addresses more than 384 GiB" in beyond[0]
