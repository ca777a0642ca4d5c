"""The DaemonSet allowance is an operator setting: run's flags and variables, the planner's input,
and `neuronfleet plan` / `validate` flags; nothing reads a global.

A replica with no CPU or memory request gets its share of what the allowance leaves of a node. With
examples/bert-embeddings.yaml two replicas fill an inf2.xlarge exactly, so DaemonSets requesting
more than the allowance leave the second replica Pending (Insufficient cpu).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronfleet import run_command
from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.cli import main
from neuronfleet.kube.builders import BuilderConfig
from neuronfleet.planning.catalog import INF2_INSTANCE_TYPES
from neuronfleet.planning.placement import (
    DAEMONSET_HEADROOM,
    Headroom,
    ReplicaNeeds,
    check_fits,
    headroom_from_quantities,
    plan_for_spec,
    plan_placement,
)
from neuronfleet.reconcile import OperatorSettings

REPO = Path(__file__).resolve().parents[2]
XLARGE = INF2_INSTANCE_TYPES["inf2.xlarge"]


def bert() -> InferenceDeployment:
    return InferenceDeployment.model_validate(yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text()))


def test_replicas_fit_beside_daemonsets_the_allowance_covers() -> None:
    # DaemonSets requesting 1.2 CPU on the node: what is left for the two bert replicas.
    daemonsets_cpu = 1200
    left = XLARGE.allocatable_cpu_millis - daemonsets_cpu
    default = plan_for_spec(bert().spec, 2).chosen
    assert default is not None and default.replicas_per_node == 2
    assert 2 * default.cpu_millis_per_replica > left  # the second replica would stay Pending
    measured = plan_for_spec(bert().spec, 2, headroom=Headroom(cpu_millis=daemonsets_cpu, memory_mib=1024)).chosen
    assert measured is not None and measured.replicas_per_node == 2
    assert 2 * measured.cpu_millis_per_replica <= left
    assert measured.memory_mib_per_replica == (XLARGE.allocatable_memory_mib - 1024) // 2


def test_explicit_requests_must_fit_beside_the_allowance() -> None:
    spec = bert().spec.model_copy(update={"runtime": bert().spec.runtime.model_copy(update={"cpu": "3"})})
    assert check_fits(spec) == []  # 3000m within 3920m - 500m
    (problem,) = check_fits(spec, Headroom(cpu_millis=1000, memory_mib=512))
    assert "inf2.xlarge: 2920m usable CPU < spec.runtime.cpu 3000m" in problem


def test_an_allowance_that_takes_the_whole_node_leaves_no_replica_there() -> None:
    # Not a share of nothing (a pod requesting 0 CPU): the type does not fit, and says why.
    plan = plan_placement(
        ReplicaNeeds(1), ["inf2.xlarge", "inf2.48xlarge"], 1, headroom=Headroom(cpu_millis=4000, memory_mib=512)
    )
    by_name = {c.name: c for c in plan.candidates}
    assert not by_name["inf2.xlarge"].fits
    assert "the DaemonSet allowance of 4000m CPU leaves none of 3920m" in by_name["inf2.xlarge"].problems
    assert plan.chosen is not None and plan.chosen.name == "inf2.48xlarge"


def test_the_default_allowance_is_the_settings_default() -> None:
    assert headroom_from_quantities("500m", "512Mi") == DAEMONSET_HEADROOM
    assert BuilderConfig().daemonset_headroom == DAEMONSET_HEADROOM
    assert OperatorSettings().builder.daemonset_headroom == DAEMONSET_HEADROOM


EXPLICIT_CPU = """
apiVersion: serving.neuronfleet.dev/v1alpha1
kind: InferenceDeployment
metadata: {name: big-host}
spec:
  model: {source: s3://models/m/, neuronCoresPerReplica: 1}
  runtime: {cpu: "3"}
  placement: {instanceTypes: [inf2.xlarge]}
"""


def test_plan_and_validate_take_the_allowance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(EXPLICIT_CPU)
    assert main(["plan", "-f", str(path)]) == 0
    assert "500m CPU and 512Mi per node left for DaemonSets" in capsys.readouterr().out
    assert main(["plan", "-f", str(path), "--daemonset-headroom-cpu", "1", "--daemonset-headroom-memory", "1Gi"]) == 1
    out = capsys.readouterr().out
    assert "1000m CPU and 1024Mi per node left for DaemonSets" in out
    assert "inf2.xlarge does not fit: 2920m usable CPU < spec.runtime.cpu 3000m" in out
    assert main(["validate", "-f", str(path)]) == 0
    capsys.readouterr()
    assert main(["validate", "-f", str(path), "--daemonset-headroom-cpu", "1"]) == 1
    assert "2920m usable CPU < spec.runtime.cpu 3000m" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["plan", "validate"])
def test_an_unreadable_allowance_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(EXPLICIT_CPU)
    assert main([command, "-f", str(path), "--daemonset-headroom-cpu", "2Gi"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: --daemonset-headroom-cpu/--daemonset-headroom-memory: "
        "'2Gi' is not a CPU quantity (e.g. 2, 1.5 or 500m)\n"
    )


class Stop(Exception):
    pass


def _kubeconfig(path: Path) -> str:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return str(path)


@pytest.mark.parametrize(
    ("flags", "env", "expected"),
    [
        ([], {}, DAEMONSET_HEADROOM),
        (
            [],
            {"NEURONFLEET_DAEMONSET_HEADROOM_CPU": "1.5", "NEURONFLEET_DAEMONSET_HEADROOM_MEMORY": "2Gi"},
            Headroom(1500, 2048),
        ),
        # A flag wins over its variable.
        (["--daemonset-headroom-cpu", "750m"], {"NEURONFLEET_DAEMONSET_HEADROOM_CPU": "1.5"}, Headroom(750, 512)),
    ],
)
def test_run_hands_the_allowance_to_the_operators_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], env: dict[str, str], expected: Headroom
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for name in ("NEURONFLEET_DAEMONSET_HEADROOM_CPU", "NEURONFLEET_DAEMONSET_HEADROOM_MEMORY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    seen: list[OperatorSettings] = []

    async def build_context(settings: OperatorSettings, *args: Any, **kwargs: Any) -> Any:
        seen.append(settings)
        raise run_command.RunSetupError("stopped before connecting")

    monkeypatch.setattr(run_command, "build_context", build_context)
    assert main(["run", "--kubeconfig", _kubeconfig(tmp_path / "kubeconfig"), *flags]) == 2
    (settings,) = seen
    assert settings.builder.daemonset_headroom == expected


def test_run_refuses_an_unreadable_allowance_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("NEURONFLEET_DAEMONSET_HEADROOM_MEMORY", "lots")
    assert main(["run", "--kubeconfig", _kubeconfig(tmp_path / "kubeconfig")]) == 2
    assert capsys.readouterr().err == (
        "error: --daemonset-headroom-memory (env NEURONFLEET_DAEMONSET_HEADROOM_MEMORY): 'lots' is not a memory "
        "quantity (e.g. 4Gi, 512Mi or 2G)\n"
    )
