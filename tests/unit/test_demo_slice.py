"""The simulated demo replays the trace minutes --minutes asks for, or refuses the slice; its sandbox
has room for the example's maxReplicas."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.demo.options import DEFAULT_EXAMPLE, DemoError, DemoOptions
from neuronfleet.demo.orchestration import prepare_example, prepare_load, sandbox_cluster
from neuronfleet.sim import trace as traces

DEPLOYMENT = InferenceDeployment.model_validate(yaml.safe_load(DEFAULT_EXAMPLE.read_text()))


def test_the_slice_lasts_the_minutes_asked_for() -> None:
    load = prepare_load(DemoOptions(load="simulated", start_minute=22.0, minutes=36.0), DEPLOYMENT)
    assert load.facts["minutes"] == 36.0
    assert load.duration == (3.0 + 36.0) * 60.0  # the lead-in, then the minutes measured
    assert (load.lead_in, load.facts["lead_in_minutes"]) == (180.0, 3.0)  # the report states minutes


def test_a_slice_past_the_end_of_the_trace_is_refused_not_shortened() -> None:
    # The shipped trace ends at minute 58.36: from minute 22, 40 minutes were replayed as 36.36
    # (the bound is said rounded down, so that it is one the demo accepts).
    end = traces.load(DemoOptions().trace_path).duration / 60.0
    assert 58 < end < 59
    refused = r"lasts 58\.36 min: minutes 22-62 are not all in it \(--minutes at most 36\.3 from there\)"
    with pytest.raises(DemoError, match=refused):
        prepare_load(DemoOptions(load="simulated", start_minute=22.0, minutes=40.0), DEPLOYMENT)
    with pytest.raises(DemoError, match=r"minutes 60-61 are not all in it$"):
        prepare_load(DemoOptions(load="simulated", start_minute=60.0, minutes=1.0), DEPLOYMENT)


@pytest.mark.parametrize(("max_replicas", "nodes"), [(12, 8), (5, 5), (2, 4), (40, 14)])
def test_the_demos_node_group_has_room_for_max_replicas_and_two_nodes_more(
    max_replicas: int, nodes: int, tmp_path: Path
) -> None:
    # Two 1-core replicas per inf2.xlarge, two nodes spare; at least the 4 the demo starts with
    # room for, at most 14 (what the machine's sandbox holds).
    options = DemoOptions(load="simulated", skip_compile=True)
    example = prepare_example(options, tmp_path, {"scaling": {"maxReplicas": max_replicas}})
    assert example.deployment.spec.model.neuron_cores_per_replica == 1
    (group,) = sandbox_cluster(example, tmp_path, seed=0).node_groups
    assert (group.instance_type, group.count, group.max_nodes) == ("inf2.xlarge", 2, nodes)
