"""Whether a spec's fleet can exist at all: the one rule ``neuronfleet validate`` and
``neuronfleet simulate --policy`` refuse a CR by (pure).

A spec the API server admits can still describe pods that never run: no allowed Inf2 instance type
holds a replica (NeuronCores, HBM, host CPU and memory beside the DaemonSet allowance:
:func:`~neuronfleet.planning.placement.check_fits`), or the API server refuses every pod for a CPU
limit below its request (:mod:`~neuronfleet.planning.admission`). The serving pods' CPU request may
be the replica's share of the chosen type, and the type depends on how many pods are placed (an
8xlarge for one replica, a 48xlarge for many), so the limit is judged at every pod count the
operator places the fleet for (:func:`pod_counts`).

The operator applies the same functions at each reconcile, to the fleet it places then (a spec
whose replicas fit nowhere is Degraded and not compiled; a CPU limit below the request holds
creations): it needs no verdict over every count, only over the one it runs. Kept here, not in the
CLI, so that the simulator, which may not import the CLI, refuses what ``validate`` refuses, in the
same words.
"""

from __future__ import annotations

from neuronfleet.api.v1alpha1 import InferenceDeploymentSpec
from neuronfleet.planning import warmpool
from neuronfleet.planning.admission import compile_cpu_limit_problem, serving_cpu_limit_problem
from neuronfleet.planning.placement import DAEMONSET_HEADROOM, Headroom, check_fits, needs_from_spec, plan_placement


def pod_counts(spec: InferenceDeploymentSpec) -> list[int]:
    """Every pod count the operator places the fleet for, ascending: N active replicas (Auto:
    minReplicas to maxReplicas; Manual: 0 to maxReplicas, as ``kubectl scale`` may set) plus the warm
    pods and node placeholders its pool can keep beside them (:func:`warmpool.standby_range`, the rule
    the operator sizes the pool by). The operator places them on the same type, so they take part in
    its choice. 0 pods is planned as 1: the type is then chosen as for a first replica."""
    scaling = spec.scaling
    low = scaling.min_replicas if scaling.mode == "Auto" else 0
    counts: set[int] = set()
    for active in range(low, scaling.max_replicas + 1):
        least, most = warmpool.standby_range(
            spec.warm_pool, active, scaling.max_replicas, parked=warmpool.parked(scaling, active)
        )
        counts.update(max(1, active + standby) for standby in range(least, most + 1))
    return sorted(counts)


def fit_problems(spec: InferenceDeploymentSpec, headroom: Headroom = DAEMONSET_HEADROOM) -> list[str]:
    """Why the fleet of ``spec`` cannot exist, as ``"field.path: message"`` (empty when it can).

    First whether some allowed instance type holds one replica (beside ``headroom``, the operator's
    DaemonSet allowance); only where one does, the CPU limits: the compile Job's against its request,
    then the serving pods' at the first pod count where their request is above it (prefixed
    ``at N pod(s):`` when that count is not 1). Without a placement there is no request to compare.
    """
    problems = check_fits(spec, headroom)
    if problems:
        return problems
    compile_problem = compile_cpu_limit_problem(spec.compile)
    if compile_problem is not None:
        # The message starts with the field's path and its value: the path is split off as check_fits'.
        problems.append(f"spec.compile.cpuLimit: {compile_problem.removeprefix('spec.compile.cpuLimit ')}")
    serving_problem = _serving_cpu_limit_problem(spec, headroom)
    if serving_problem is not None:
        problems.append(f"spec.runtime.cpuLimit: {serving_problem.removeprefix('spec.runtime.cpuLimit ')}")
    return problems


def _serving_cpu_limit_problem(spec: InferenceDeploymentSpec, headroom: Headroom) -> str | None:
    """spec.runtime.cpuLimit below the CPU request of the replicas at the first pod count the spec can
    reach where it is (a computed request is the replica's share of the type chosen for that count)."""
    if not spec.runtime.cpu_limit:
        return None
    needs = needs_from_spec(spec)  # the caller checked the quantities (check_fits)
    for replicas in pod_counts(spec):
        chosen = plan_placement(needs, spec.placement.instance_types, replicas, headroom=headroom).chosen
        problem = serving_cpu_limit_problem(spec.runtime, chosen) if chosen is not None else None
        if problem:
            return problem if replicas == 1 else f"at {replicas} pod(s): {problem}"
    return None
