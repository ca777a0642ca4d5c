"""Placement properties (hypothesis): the choice is the cheapest that fits, and what fits really fits."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from neuronfleet.planning.catalog import INF2_INSTANCE_TYPES
from neuronfleet.planning.placement import (
    COST_TIE_TOLERANCE,
    DAEMONSET_HEADROOM,
    HBM_GIB_PER_NEURONCORE,
    ReplicaNeeds,
    plan_placement,
)

needs = st.builds(
    ReplicaNeeds,
    # Any count up to a whole inf2.48xlarge: the Neuron scheduler extension allocates any number of
    # contiguous cores on the Inf2 chip ring, not only powers of two.
    neuron_cores=st.integers(1, 24),
    hbm_gib=st.one_of(st.none(), st.floats(1, 384)),
    cpu_millis=st.one_of(st.none(), st.integers(100, 200_000)),
    memory_mib=st.one_of(st.none(), st.integers(128, 800_000)),
)
allowed = st.lists(st.sampled_from(list(INF2_INSTANCE_TYPES)), min_size=1, max_size=4, unique=True)


@settings(max_examples=300, deadline=None)
@given(needs=needs, types=allowed, replicas=st.integers(0, 50))
def test_chosen_type_is_cheapest_and_its_replicas_fit_their_nodes(
    needs: ReplicaNeeds, types: list[str], replicas: int
) -> None:
    plan = plan_placement(needs, types, replicas)
    fitting = [c for c in plan.candidates if c.fits]
    hbm_addressable = needs.hbm_gib is None or needs.hbm_gib <= needs.neuron_cores * HBM_GIB_PER_NEURONCORE
    if not fitting or not hbm_addressable:
        assert plan.chosen is None
        assert plan.problems and all(": " in problem for problem in plan.problems)
        return
    chosen = plan.chosen
    assert chosen is not None and not plan.problems
    if replicas == 0:
        # No pod takes no node, on any type; the type chosen is the one a first replica goes on.
        assert all((c.nodes, c.usd_per_hour) == (0, 0.0) for c in plan.candidates)
        one = plan_placement(needs, types, 1)
        assert one.chosen is not None and one.chosen.name == chosen.name
        plan, chosen, replicas = one, one.chosen, 1
        fitting = [c for c in plan.candidates if c.fits]
    assert chosen.usd_per_hour <= min(c.usd_per_hour for c in fitting) * (1 + COST_TIE_TOLERANCE)
    assert chosen.nodes * chosen.replicas_per_node >= replicas
    assert (chosen.nodes - 1) * chosen.replicas_per_node < replicas
    itype = chosen.instance_type
    per_node = chosen.replicas_per_node
    assert per_node * needs.neuron_cores <= itype.neuroncores
    assert per_node * needs.effective_hbm_gib <= itype.hbm_gib
    assert per_node * chosen.cpu_millis_per_replica <= itype.allocatable_cpu_millis - DAEMONSET_HEADROOM.cpu_millis
    assert per_node * chosen.memory_mib_per_replica <= itype.allocatable_memory_mib - DAEMONSET_HEADROOM.memory_mib
    # One more replica per node would break one of the limits.
    more = per_node + 1
    assert (
        more * needs.neuron_cores > itype.neuroncores
        or more * needs.effective_hbm_gib > itype.hbm_gib
        or more * chosen.cpu_millis_per_replica > itype.allocatable_cpu_millis - DAEMONSET_HEADROOM.cpu_millis
        or more * chosen.memory_mib_per_replica > itype.allocatable_memory_mib - DAEMONSET_HEADROOM.memory_mib
    )
    assert chosen.name in plan.reason
