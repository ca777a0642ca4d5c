"""The one rule for whether a spec's fleet can exist (``planning.fit``): some allowed instance type
holds a replica, and no pod the operator would make is refused for a CPU limit below its request,
at every pod count the operator places. ``neuronfleet validate`` and ``simulate --policy`` both
refuse a CR by it, in its words."""

from __future__ import annotations

from typing import Any

import pytest

from neuronfleet.api.v1alpha1 import InferenceDeployment, InferenceDeploymentSpec
from neuronfleet.planning.fit import fit_problems, pod_counts
from neuronfleet.planning.placement import Headroom


def spec(**sections: Any) -> InferenceDeploymentSpec:
    body = {"model": {"source": "s3://bucket/model/"}, **sections}
    return InferenceDeployment.model_validate(
        {"apiVersion": "serving.neuronfleet.dev/v1alpha1", "kind": "InferenceDeployment", "metadata": {"name": "m"}}
        | {"spec": body}
    ).spec


def test_a_spec_that_fits_has_no_problem() -> None:
    assert fit_problems(spec()) == []


def test_a_replica_no_allowed_type_holds_is_a_problem_of_the_instance_types() -> None:
    (problem,) = fit_problems(
        spec(
            model={"source": "s3://bucket/model/", "neuronCoresPerReplica": 16, "hbmGiB": 200},
            placement={"instanceTypes": ["inf2.xlarge", "inf2.8xlarge"]},
        )
    )
    assert problem.startswith(
        "spec.placement.instanceTypes: no allowed instance type holds a replica of 16 NeuronCores + 200 GiB HBM "
        "(inf2.xlarge: 2 NeuronCores < 16, 32 GiB HBM < 200 GiB;"
    )


def test_host_memory_beyond_every_allowed_type_is_a_problem() -> None:
    (problem,) = fit_problems(spec(runtime={"memory": "64Gi"}, placement={"instanceTypes": ["inf2.xlarge"]}))
    assert problem.startswith("spec.placement.instanceTypes: no allowed instance type holds a replica")
    assert "usable memory < spec.runtime.memory 65536Mi" in problem


def test_the_daemonset_allowance_is_the_callers() -> None:
    # 3000m fits beside the default allowance on an inf2.xlarge (3920m allocatable), not beside 1000m.
    fits = spec(runtime={"cpu": "3"}, placement={"instanceTypes": ["inf2.xlarge"]})
    assert fit_problems(fits) == []
    (problem,) = fit_problems(fits, Headroom(cpu_millis=1000, memory_mib=512))
    assert "2920m usable CPU < spec.runtime.cpu 3000m" in problem


def test_a_serving_cpu_limit_below_the_computed_request_is_a_problem() -> None:
    (problem,) = fit_problems(spec(runtime={"cpuLimit": "500m"}, placement={"instanceTypes": ["inf2.xlarge"]}))
    assert problem.startswith("spec.runtime.cpuLimit: 500m is below the CPU request of each replica, 3420m")


def _cpu_limited(pool: dict[str, Any]) -> InferenceDeploymentSpec:
    # 1-core replicas of 10Gi: an inf2.xlarge holds one, the cheapest up to 8 pods; from 9 pods an
    # inf2.24xlarge is, and its replicas' CPU share is above the limit of 4.
    return spec(
        model={"source": "s3://bucket/model/", "neuronCoresPerReplica": 1},
        runtime={"memory": "10Gi", "cpuLimit": "4"},
        placement={"instanceTypes": ["inf2.xlarge", "inf2.24xlarge"]},
        scaling={"minReplicas": 1, "maxReplicas": 8},
        warmPool=pool,
    )


def test_a_cpu_limit_is_judged_at_the_pod_counts_the_operator_reaches() -> None:
    assert fit_problems(_cpu_limited({"mode": "Auto", "maxPods": 2})) == []
    (problem,) = fit_problems(_cpu_limited({"mode": "Fixed", "pods": 0, "nodePlaceholders": 1}))
    assert problem.startswith("spec.runtime.cpuLimit: at 9 pod(s): spec.runtime.cpuLimit 4 is below")


def test_a_compile_cpu_limit_below_its_request_is_a_problem() -> None:
    # Units the CRD's CEL rule does not compare (3500m against 4): the planning check catches it.
    (problem,) = fit_problems(spec(compile={"cpu": "4", "cpuLimit": "3500m"}))
    assert problem.startswith("spec.compile.cpuLimit: 3500m is below spec.compile.cpu 4: the API server refuses")


def test_cpu_limits_are_not_judged_where_no_type_holds_a_replica() -> None:
    # With no placement there is no request to compare a limit with: the fit is the one problem said.
    problems = fit_problems(
        spec(
            model={"source": "s3://bucket/model/", "neuronCoresPerReplica": 16},
            runtime={"cpuLimit": "500m"},
            compile={"cpu": "4", "cpuLimit": "3500m"},
            placement={"instanceTypes": ["inf2.xlarge"]},
        )
    )
    assert [p.split(":", 1)[0] for p in problems] == ["spec.placement.instanceTypes"]


@pytest.mark.parametrize(
    ("sections", "counts"),
    [
        ({"scaling": {"minReplicas": 2, "maxReplicas": 4}}, [2, 3, 4]),
        # Manual: kubectl scale may set 0..maxReplicas; 0 pods are planned as 1.
        ({"scaling": {"mode": "Manual", "maxReplicas": 3}}, [1, 2, 3]),
        # A Fixed pool's pods and placeholders stand beside every active count.
        ({"scaling": {"minReplicas": 1, "maxReplicas": 2}, "warmPool": {"mode": "Fixed", "pods": 1}}, [2, 3]),
    ],
)
def test_pod_counts_are_every_count_the_operator_places(sections: dict[str, Any], counts: list[int]) -> None:
    assert pod_counts(spec(**sections)) == counts
