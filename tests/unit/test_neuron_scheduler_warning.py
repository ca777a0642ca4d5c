"""Replicas that need contiguous NeuronCores, with no Neuron scheduler named: warned by the planner,
`neuronfleet validate`, `neuronfleet plan` and `neuronfleet run` (once, at start-up).

The Neuron docs require the scheduler extension for pods requesting more than one NeuronCore (it
picks contiguous cores on the chip ring), except a pod that takes every core of its node.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from neuronfleet.cli import main
from neuronfleet.planning.placement import ReplicaNeeds, plan_placement, scheduler_warning
from neuronfleet.run_command import NO_NEURON_SCHEDULER


@pytest.mark.parametrize(
    ("cores", "itype", "needs_extension"),
    [
        (1, "inf2.48xlarge", False),  # one core is contiguous wherever it is
        (2, "inf2.xlarge", False),  # the whole node
        (2, "inf2.24xlarge", True),  # six replicas share the ring
        (8, "inf2.24xlarge", True),  # one replica, but not the whole node
        (12, "inf2.24xlarge", False),  # the whole node
        (12, "inf2.48xlarge", True),  # two replicas on one ring
        (24, "inf2.48xlarge", False),  # the whole node
    ],
)
def test_contiguous_cores_are_needed_for_more_than_one_core_short_of_the_node(
    cores: int, itype: str, needs_extension: bool
) -> None:
    plan = plan_placement(ReplicaNeeds(cores), [itype], 1)
    assert plan.chosen is not None
    assert plan.needs_contiguous_cores is needs_extension
    warning = scheduler_warning(plan, None)
    assert (warning is not None) is needs_extension
    # A named scheduler (the spec's or the operator's) is taken to be the extension's.
    assert scheduler_warning(plan, "my-scheduler") is None


def test_the_warning_says_where_and_what_to_set() -> None:
    warning = scheduler_warning(plan_placement(ReplicaNeeds(12), ["inf2.48xlarge"], 2), None)
    assert warning is not None
    assert warning.startswith("replicas of 12 NeuronCores on inf2.48xlarge (24 cores, room for 2 per node)")
    assert "spec.placement.schedulerName" in warning and "--neuron-scheduler" in warning


def test_no_placement_no_warning() -> None:
    plan = plan_placement(ReplicaNeeds(8), ["inf2.xlarge"], 1)
    assert plan.chosen is None
    assert scheduler_warning(plan, None) is None


def manifest(tmp_path: Path, cores: int, types: str, extra: str = "", max_replicas: int = 10) -> str:
    path = tmp_path / f"m{cores}.yaml"
    path.write_text(
        "apiVersion: serving.neuronfleet.dev/v1alpha1\n"
        "kind: InferenceDeployment\n"
        "metadata: {name: model}\n"
        "spec:\n"
        f"  model: {{source: s3://models/m/, neuronCoresPerReplica: {cores}}}\n"
        f"  placement: {{instanceTypes: [{types}]{extra}}}\n"
        f"  scaling: {{minReplicas: 1, maxReplicas: {max_replicas}}}\n"
    )
    return str(path)


def test_validate_warns_and_still_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = manifest(tmp_path, 8, "inf2.24xlarge, inf2.48xlarge")
    assert main(["validate", "-f", path]) == 0
    out = capsys.readouterr().out
    assert "1 valid, 0 invalid" in out
    assert f"{path}: warning: at 1 pod(s): replicas of 8 NeuronCores on inf2.24xlarge" in out
    assert "unless the operator runs with a Neuron scheduler name" in out
    # Quiet mode keeps warnings: they are about what the operator will do.
    assert main(["validate", "-q", "-f", path]) == 0
    assert "warning: at 1 pod(s)" in capsys.readouterr().out


def test_validate_plans_every_count_the_spec_reaches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 2 cores: inf2.8xlarge (the whole node) up to 6 replicas; from 7, one inf2.48xlarge is cheaper
    # (7 x $1.97 > $12.98/h) and its replicas share a ring.
    path = manifest(tmp_path, 2, "inf2.8xlarge, inf2.48xlarge")
    assert main(["validate", "-f", path]) == 0
    assert "warning: at 7 pod(s): replicas of 2 NeuronCores on inf2.48xlarge" in capsys.readouterr().out
    small = manifest(tmp_path, 2, "inf2.8xlarge, inf2.48xlarge", max_replicas=6)
    assert main(["validate", "-f", small]) == 0
    assert "warning" not in capsys.readouterr().out
    # A Fixed placeholder is placed beside the 6 replicas on the same type: 7 pods (it was not counted).
    with open(small, "a") as file:
        file.write("  warmPool: {mode: Fixed, pods: 0, nodePlaceholders: 1}\n")
    assert main(["validate", "-f", small]) == 0
    assert "warning: at 7 pod(s): replicas of 2 NeuronCores on inf2.48xlarge" in capsys.readouterr().out


def test_validate_plans_no_count_an_auto_pool_cannot_reach(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # An Auto pool's standby beside N active replicas stops at maxReplicas - N (but for minPods), so
    # with maxReplicas 6 and minPods 0 the operator places at most 6 pods: inf2.8xlarge, no warning.
    # Regression: validate planned up to maxReplicas + maxPods = 7 and warned "at 7 pod(s)".
    small = manifest(tmp_path, 2, "inf2.8xlarge, inf2.48xlarge", max_replicas=6)
    with open(small, "a") as file:
        file.write("  warmPool: {mode: Auto, maxPods: 1}\n")
    assert main(["validate", "-f", small]) == 0
    assert "warning" not in capsys.readouterr().out
    # minPods are kept even beside maxReplicas active replicas: 6 + 1 = 7 pods are reached.
    small = manifest(tmp_path, 2, "inf2.8xlarge, inf2.48xlarge", max_replicas=6)
    with open(small, "a") as file:
        file.write("  warmPool: {mode: Auto, minPods: 1, maxPods: 1}\n")
    assert main(["validate", "-f", small]) == 0
    assert "warning: at 7 pod(s): replicas of 2 NeuronCores on inf2.48xlarge" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("cores", "types", "extra", "flags"),
    [
        (8, "inf2.24xlarge", "", ["--neuron-scheduler", "my-scheduler"]),  # the operator's
        (8, "inf2.24xlarge", ", schedulerName: my-scheduler", []),  # the spec's
        (1, "inf2.48xlarge", "", []),  # one core
        (12, "inf2.24xlarge", "", []),  # a whole node
    ],
)
def test_validate_is_quiet_when_nothing_needs_the_extension_or_a_scheduler_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cores: int, types: str, extra: str, flags: list[str]
) -> None:
    assert main(["validate", *flags, "-f", manifest(tmp_path, cores, types, extra)]) == 0
    assert "warning" not in capsys.readouterr().out


def test_plan_prints_the_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = manifest(tmp_path, 12, "inf2.48xlarge")
    assert main(["plan", "-f", path, "--replicas", "2"]) == 0
    out = capsys.readouterr().out
    assert "warning: replicas of 12 NeuronCores on inf2.48xlarge (24 cores, room for 2 per node)" in out
    assert "unless the operator runs with a Neuron scheduler name" in out
    assert main(["plan", "-f", path, "--replicas", "2", "--neuron-scheduler", "my-scheduler"]) == 0
    assert "warning" not in capsys.readouterr().out


def _kubeconfig(path: Path) -> Path:
    # Well-formed; never reached: the metrics port in use stops `run` right after its start-up log.
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return path


@pytest.mark.parametrize(("flags", "warnings"), [([], 1), (["--neuron-scheduler", "my-scheduler"], 0)])
def test_run_warns_once_at_start_up_without_a_neuron_scheduler(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    flags: list[str],
    warnings: int,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("NEURONFLEET_NEURON_SCHEDULER", raising=False)
    caplog.set_level(logging.WARNING, logger="neuronfleet.run_command")
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        kubeconfig = str(_kubeconfig(tmp_path / "kubeconfig"))
        assert main(["run", "--kubeconfig", kubeconfig, "--metrics-port", port, *flags]) == 2
    assert [r.getMessage() for r in caplog.records].count(NO_NEURON_SCHEDULER) == warnings


@pytest.mark.parametrize(("cores", "warned"), [(3, True), (6, True), (4, False), (12, False), (24, False)])
def test_validate_warns_of_a_core_count_that_can_fragment_shared_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cores: int, warned: bool
) -> None:
    # Any count is schedulable, but FACTS.md's advice stands where deployments of other sizes share
    # the nodes: Karpenter does not see the extension's choices on the ring.
    path = manifest(tmp_path, cores, "inf2.48xlarge", ", schedulerName: my-scheduler")
    assert main(["validate", "-f", path]) == 0
    out = capsys.readouterr().out
    assert ("is neither a power of two nor a whole node's cores (2, 12, 24)" in out) is warned, out
