"""`neuronfleet plan`: the per-type table, the marked choice, and clear errors for bad manifests."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from neuronfleet.cli import main
from neuronfleet.plan_command import max_replicas_bound


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "manifest.yaml"
    path.write_text(text)
    return str(path)


EIGHT_CORES = """
apiVersion: serving.neuronfleet.dev/v1alpha1
kind: InferenceDeployment
metadata: {name: big-model}
spec:
  model: {source: s3://models/llm/, neuronCoresPerReplica: 8}
  placement: {instanceTypes: [inf2.24xlarge, inf2.48xlarge]}
"""


def test_plan_prints_each_type_and_marks_the_choice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "-f", write(tmp_path, EIGHT_CORES), "--replicas", "5", "--throughput", "10")
    assert code == 0
    rows = {line.split("│")[2].strip(): line for line in out.splitlines() if "inf2." in line and "│" in line}
    assert set(rows) == {"inf2.24xlarge", "inf2.48xlarge"}
    assert "→" in rows["inf2.48xlarge"] and "→" not in rows["inf2.24xlarge"]
    assert "32.45" in rows["inf2.24xlarge"]  # 5 nodes x $6.49063
    assert "25.96" in rows["inf2.48xlarge"]  # 2 nodes x $12.98127
    # $25.96/h over 5 x 10 inf/s x 3600 s = $144.2 per million inferences.
    assert "144.2" in rows["inf2.48xlarge"]
    assert "chosen: inf2.48xlarge" in out


def test_plan_defaults_to_the_spec_replica_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "-f", write(tmp_path, EIGHT_CORES))
    assert code == 0
    assert "1 replica(s) of 8 NeuronCores" in out
    assert "chosen: inf2.24xlarge" in out


def test_plan_exits_1_when_no_allowed_type_fits(repo_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "-f", str(repo_root / "examples/invalid/fits-no-instance-type.yaml"))
    assert code == 1
    assert "spec.placement.instanceTypes: no allowed instance type holds a replica of 16 NeuronCores" in out


def test_plan_reports_schema_errors_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = EIGHT_CORES.replace("neuronCoresPerReplica: 8", "neuronCoresPerReplica: 8, coresPerReplica: 3")
    code, out, err = run(capsys, "-f", write(tmp_path, bad))
    assert code == 2
    assert "spec.model.coresPerReplica" in err
    assert "Traceback" not in err + out


def test_plan_reports_malformed_yaml_and_missing_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "-f", write(tmp_path, "spec: [unclosed"))
    assert code == 2
    assert "malformed YAML at line" in err
    code, _, err = run(capsys, "-f", str(tmp_path / "absent.yaml"))
    assert code == 2
    assert "cannot read" in err


def test_every_example_manifest_has_a_placement(repo_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    examples = sorted((repo_root / "examples").glob("*.yaml"))
    assert examples
    for example in examples:
        code, out, err = run(capsys, "-f", str(example))
        assert code == 0, f"{example.name}: {out}{err}"
        assert "chosen: inf2." in out


def test_plan_reports_a_file_that_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The same message as `neuronfleet validate` (tests/unit/test_validate_encoding.py).
    path = tmp_path / "utf16.yaml"
    path.write_text(EIGHT_CORES, encoding="utf-16")
    code, _, err = run(capsys, "-f", str(path))
    assert code == 2
    assert err.strip() == f"error: {path}: not UTF-8 text: byte 0xff at offset 0"


def test_plan_for_zero_replicas_needs_no_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "-f", write(tmp_path, EIGHT_CORES), "--replicas", "0", "--throughput", "10")
    assert code == 0
    assert "0 replica(s) of 8 NeuronCores" in out
    rows = [line.split("│")[1:-1] for line in out.splitlines() if "inf2." in line and "│" in line]
    assert len(rows) == 2
    for _, _, per_node, _, nodes, usd, per_replica, per_million in rows:
        assert int(per_node) >= 1 and (nodes.strip(), usd.strip()) == ("0", "0.00")
        assert per_replica.strip() == per_million.strip() == "-"
    assert "chosen: none: 0 pods need no node ($0.00/h); a first replica would go on inf2.24xlarge" in out


def table_rows(out: str) -> dict[str, list[str]]:
    """The table's cells after the instance type (/node, limit, nodes, $/h, $/pod-h, $/M), by type."""
    cells = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if "│ inf2." in line]
    return {row[1]: row[2:] for row in cells}


STANDBY = (
    EIGHT_CORES
    + """  scaling: {mode: Manual, replicas: 2, minReplicas: 0}
  warmPool: {mode: Fixed, pods: 1, nodePlaceholders: 2}
"""
)


@pytest.mark.parametrize(
    ("pool", "standby"),
    [
        # Auto: minPods, and no placeholder (the rest follows measured demand).
        ("{mode: Auto, minPods: 2, maxPods: 4}", " + 2 warm pod(s) + 0 node placeholder(s) of the same size"),
        ('{mode: "Off"}', ""),
    ],
)
def test_plan_counts_the_standby_each_warm_pool_mode_keeps_at_least(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pool: str, standby: str
) -> None:
    manifest = EIGHT_CORES + f"  scaling: {{mode: Manual, replicas: 2, minReplicas: 0}}\n  warmPool: {pool}\n"
    code, out, _ = run(capsys, "-f", write(tmp_path, manifest))
    assert code == 0
    assert f"big-model: 2 replica(s) of 8 NeuronCores{standby};" in out


def test_plan_places_the_warm_pods_and_placeholders_and_prices_inferences_by_the_active_replicas(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The placeholders were not placed (3 pods: 1 x 48xlarge, $12.98/h), and $/M divided by the
    # warm pod's throughput too ($120.2).
    code, out, _ = run(capsys, "-f", write(tmp_path, STANDBY), "--throughput", "10")
    assert code == 0
    assert "2 replica(s) of 8 NeuronCores + 1 warm pod(s) + 2 node placeholder(s) of the same size" in out
    rows = table_rows(out)
    # 5 pods: 5 x 24xlarge ($32.45/h) or 2 x 48xlarge ($25.96/h), over 2 x 10 inf/s.
    assert rows["inf2.24xlarge"] == ["1", "cores", "5", "32.45", "6.491", "450.7"]
    assert rows["inf2.48xlarge"] == ["3", "cores", "2", "25.96", "5.193", "360.6"]
    assert "chosen: inf2.48xlarge: 3 replica(s) per node (limited by neuroncores), 2 node(s) for 5 pod(s)" in out
    # --warm and --placeholders replace the spec's figures; standby alone serves nothing.
    code, out, _ = run(
        capsys,
        "-f",
        write(tmp_path, STANDBY),
        "--replicas",
        "0",
        "--warm",
        "0",
        "--placeholders",
        "1",
        "--throughput",
        "10",
    )
    assert code == 0
    rows = table_rows(out)
    assert rows["inf2.24xlarge"][2:] == ["1", "6.49", "6.491", "-"]
    code, _, err = run(capsys, "-f", write(tmp_path, STANDBY), "--placeholders", "-1")
    assert (code, err) == (2, "error: --placeholders must be 0 or more\n")


@pytest.mark.parametrize("throughput", ["nan", "inf", "0", "-1"])
def test_plan_refuses_a_throughput_that_is_not_a_positive_finite_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], throughput: str
) -> None:
    # nan printed "nan" in the $/M column, inf printed 0.
    code, out, err = run(capsys, "-f", write(tmp_path, EIGHT_CORES), "--throughput", throughput)
    assert (code, out) == (2, "")
    assert err == "error: --throughput must be a positive, finite number of inferences/s\n"


def test_plan_refuses_more_replicas_than_any_spec_may_ask_for(
    tmp_path: Path, repo_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """100000 replicas were priced without a word; the CRD caps spec.scaling.maxReplicas at 1000."""
    (crd,) = yaml.safe_load_all((repo_root / "crds" / "serving.neuronfleet.dev_inferencedeployments.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    bound = spec["properties"]["scaling"]["properties"]["maxReplicas"]["maximum"]
    assert max_replicas_bound() == bound == 1000
    code, out, err = run(capsys, "-f", write(tmp_path, EIGHT_CORES), "--replicas", str(bound + 1))
    assert (code, out) == (2, "")
    assert err == f"error: --replicas {bound + 1} is above {bound}, the most spec.scaling.maxReplicas allows\n"
    code, out, _ = run(capsys, "-f", write(tmp_path, EIGHT_CORES), "--replicas", str(bound))
    assert code == 0 and f"{bound} replica(s)" in out


@pytest.mark.parametrize(
    ("flag", "fields"),
    [("--warm", ("pods", "maxPods")), ("--placeholders", ("nodePlaceholders", "maxNodePlaceholders"))],
)
def test_plan_refuses_more_standby_pods_than_any_spec_may_keep(
    tmp_path: Path, repo_root: Path, capsys: pytest.CaptureFixture[str], flag: str, fields: tuple[str, str]
) -> None:
    """--warm 100000000 was priced as --replicas 100000 was; the CRD caps the warm pool's counts at 100."""
    (crd,) = yaml.safe_load_all((repo_root / "crds" / "serving.neuronfleet.dev_inferencedeployments.yaml").read_text())
    pool = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["warmPool"]
    bound = max(pool["properties"][field]["maximum"] for field in fields)
    assert bound == 100
    code, out, err = run(capsys, "-f", write(tmp_path, EIGHT_CORES), flag, str(bound + 1))
    assert (code, out) == (2, "")
    assert err == (
        f"error: {flag} {bound + 1} is above {bound}, the most spec.warmPool.{fields[0]} and {fields[1]} allow\n"
    )
    code, out, _ = run(capsys, "-f", write(tmp_path, EIGHT_CORES), flag, str(bound))
    assert code == 0 and f" {bound} " in out
