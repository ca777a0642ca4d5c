"""kubectl (1.34 from hack/install-kube-tools.sh) against the sandbox: apply with validation,
printer columns, label selectors, explain, scale, delete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kube_schema_cases import KUBE_SCHEMA_MESSAGES

from fixtures_cluster import RunKubectl
from neuronfleet.api.v1alpha1 import NAME_RULE_MESSAGE
from neuronfleet.api.validation import go_value, load_manifests, validate_manifest
from neuronfleet.sandbox import SandboxCluster, ThreadedSandboxCluster

#: The ``run_kubectl`` fixture (tests/fixtures_cluster.py): ``run_kubectl(*args, check=True)`` runs kubectl.

MANIFEST = """\
apiVersion: serving.neuronfleet.dev/v1alpha1
kind: InferenceDeployment
metadata:
  name: bert
  labels: {team: search}
spec:
  model: {source: "s3://acme-models/bert/"}
  scaling: {mode: Manual, replicas: 1}
"""


def test_kubectl_inference_deployment_lifecycle(
    run_kubectl: RunKubectl, threaded_sandbox_cluster: ThreadedSandboxCluster, tmp_path: Path
) -> None:
    manifest = tmp_path / "bert.yaml"
    manifest.write_text(MANIFEST)
    assert "created" in run_kubectl("apply", "--validate=true", "-f", str(manifest)).stdout
    assert "unchanged" in run_kubectl("apply", "--validate=true", "-f", str(manifest)).stdout

    table = run_kubectl("get", "infdep").stdout.splitlines()
    assert table[0].split() == [
        "NAME",
        "MODEL",
        "INSTANCE",
        "READY",
        "UP-TO-DATE",
        "DESIRED",
        "WARM",
        "COMPILED",
        "STATUS",
        "AGE",
    ]
    assert table[1].split()[:2] == ["bert", "s3://acme-models/bert/"]
    assert "bert" in run_kubectl("get", "inferencedeployments", "-l", "team=search").stdout
    assert "No resources found" in run_kubectl("get", "inferencedeployments", "-l", "team=other").stderr

    explained = run_kubectl("explain", "inferencedeployment.spec.scaling.replicas").stdout
    assert "FIELD: replicas <integer>" in explained
    assert "scale subresource" in explained  # the CRD's field description
    # It said only "Why it changed.": say what changed.
    explained = run_kubectl("explain", "inferencedeployment.status.lastScaleReason").stdout
    assert "Why the desired active replicas (desiredReplicas) last changed" in explained
    # As the README says: --recursive lists the fields without descriptions; a field path shows the
    # field's and those of the fields right under it.
    recursive = run_kubectl("explain", "infdep.spec", "--recursive").stdout
    assert "assumedNodeColdStartSeconds" in recursive and "Node provisioning time" not in recursive
    explained = run_kubectl("explain", "infdep.spec.warmPool").stdout
    assert "Standby capacity against cold starts." in explained and "Node provisioning time" in explained
    explained = run_kubectl("explain", "infdep.status.autoscaler.trendReadings").stdout
    assert "FIELD: trendReadings <[]Object>" in explained and "resumes the demand's trend" in explained

    assert "scaled" in run_kubectl("scale", "infdep/bert", "--replicas=3").stdout
    assert run_kubectl("get", "infdep", "bert", "-o", "jsonpath={.spec.scaling.replicas}").stdout == "3"
    stored = threaded_sandbox_cluster.call(
        lambda c: c.get("inferencedeployments", "bert", "default", group="serving.neuronfleet.dev")
    )
    assert stored is not None and stored["metadata"]["generation"] == 2

    assert "deleted" in run_kubectl("delete", "infdep", "bert").stdout
    assert (
        threaded_sandbox_cluster.call(
            lambda c: c.get("inferencedeployments", "bert", "default", group="serving.neuronfleet.dev")
        )
        is None
    )


def test_kubectl_validation_rejects_bad_manifests(run_kubectl: RunKubectl, repo_root: Path) -> None:
    unknown = run_kubectl(
        "apply", "--validate=true", "-f", str(repo_root / "examples/invalid/unknown-field.yaml"), check=False
    )
    assert unknown.returncode != 0
    assert 'unknown field "spec.scaling.replica"' in unknown.stderr
    negative = run_kubectl("apply", "-f", str(repo_root / "examples/invalid/negative-replicas.yaml"), check=False)
    assert negative.returncode != 0
    assert "spec.scaling.minReplicas" in negative.stderr


def test_kubectl_apply_refuses_repeated_items_of_set_and_map_lists(run_kubectl: RunKubectl, tmp_path: Path) -> None:
    # As kube-apiserver's listtype validation does; the sandbox stored them.
    manifest = tmp_path / "dup.yaml"
    manifest.write_text(
        MANIFEST.replace(
            'model: {source: "s3://acme-models/bert/"}',
            'model: {source: "s3://acme-models/bert/", format: torchscript, batchBuckets: [1, 4, 4],'
            " inputs: [{name: input_ids}, {name: input_ids}]}",
        )
    )
    result = run_kubectl("apply", "--dry-run=server", "-f", str(manifest), check=False)
    assert result.returncode != 0
    assert "spec.model.batchBuckets[2]: Duplicate value: 4" in result.stderr
    assert 'spec.model.inputs[1]: Duplicate value: map[string]interface {}{"name":"input_ids"}' in result.stderr


def test_kubectl_apply_quotes_a_refused_pattern_in_kube_apiservers_words(
    run_kubectl: RunKubectl, tmp_path: Path
) -> None:
    # The sandbox said jsonschema's "'8GB' does not match '...'".
    manifest = tmp_path / "pattern.yaml"
    manifest.write_text(MANIFEST + "  compile: {memory: 8GB}\n")
    result = run_kubectl("apply", "--dry-run=server", "-f", str(manifest), check=False)
    assert result.returncode != 0
    quantity = r"^\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][-+]?[0-9]{1,2})?$"
    assert (
        f"spec.compile.memory: Invalid value: \"8GB\": spec.compile.memory in body should match '{quantity}'"
        in result.stderr
    )


def test_kubectl_apply_quotes_a_refused_value_as_go_does(run_kubectl: RunKubectl, tmp_path: Path) -> None:
    # Go's %q keeps printable characters of any script and escapes the others its own way; the
    # sandbox printed JSON's "8\u0413\u0411" and "8G\u0001".
    quantity = r"^\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][-+]?[0-9]{1,2})?$"
    for written, shown in (('"8ГБ"', '"8ГБ"'), ('"8G\\x01"', '"8G\\x01"'), ('"8\\u00a0G"', '"8\\u00a0G"')):
        manifest = tmp_path / "value.yaml"
        manifest.write_text(MANIFEST + f"  compile: {{memory: {written}}}\n", encoding="utf-8")
        result = run_kubectl("apply", "--dry-run=server", "-f", str(manifest), check=False)
        assert result.returncode != 0
        expected = f"spec.compile.memory: Invalid value: {shown}: spec.compile.memory in body should match '{quantity}'"
        assert expected in result.stderr, written
    # A name is quoted the same way.
    named = tmp_path / "name.yaml"
    named.write_text(MANIFEST.replace("name: bert", "name: берт"), encoding="utf-8")
    refused = run_kubectl("apply", "--dry-run=server", "-f", str(named), check=False)
    assert 'metadata.name: Invalid value: "берт": ' in refused.stderr


#: Plain scalars PyYAML 1.1 and go-yaml v2 (kubectl's reader) resolve differently, and some they agree on.
GO_YAML_SCALARS = [
    "1:30",
    "y",
    "n",
    "Y",
    "0o17",
    "0b11",
    "1_000",
    "1e3",
    "-.5",
    "08",
    "0x1F",
    "on",
    "2001-01-01",
    "abc",
    "=",
    "1e400",
    "+0b11",
    "0B11",
    ".5e3",
    "1_0.5",
]


@pytest.mark.parametrize("scalar", GO_YAML_SCALARS)
def test_validate_reads_a_plain_scalar_as_kubectl_sends_it(
    run_kubectl: RunKubectl, tmp_path: Path, scalar: str
) -> None:
    # The real go-yaml (inside kubectl) decides what the API server receives: a string env value is
    # accepted, anything else refused. validate must read the same manifest the same way.
    text = MANIFEST.replace("  model:", f"  runtime: {{env: [{{name: V, value: {scalar}}}]}}\n  model:")
    manifest = tmp_path / "scalar.yaml"
    manifest.write_text(text)
    result = run_kubectl("create", "--dry-run=server", "-f", str(manifest), check=False)
    loaded = load_manifests(text)[0]["spec"]["runtime"]["env"][0]["value"]
    _, problems = validate_manifest(load_manifests(text)[0])
    assert (result.returncode == 0) == (not problems), (scalar, loaded, result.stderr, problems)
    if isinstance(loaded, int):  # an int or a bool: kubectl sent the same value
        assert f"spec.runtime.env[0].value: Invalid value: {go_value(loaded)}: " in result.stderr


def test_validate_reads_mapping_keys_as_kubectl_sends_them(run_kubectl: RunKubectl, tmp_path: Path) -> None:
    # sigs.k8s.io/yaml writes a key go-yaml resolves to a boolean or a number as its text; a merge
    # key merges. Python's dict would also take the True of "y" and the 1 of "1" for one key.
    text = MANIFEST.replace("labels: {team: search}", "labels: {y: a, 1: b, 0x10: c, no: d, <<: {e: f}}")
    manifest = tmp_path / "keys.yaml"
    manifest.write_text(text)
    sent = run_kubectl("create", "--dry-run=server", "-f", str(manifest), "-o", "json").stdout
    assert json.loads(sent)["metadata"]["labels"] == load_manifests(text)[0]["metadata"]["labels"]
    assert load_manifests(text)[0]["metadata"]["labels"] == {"true": "a", "1": "b", "16": "c", "false": "d", "e": "f"}


def test_kubectl_sees_inf2_nodes(run_kubectl: RunKubectl) -> None:
    out = run_kubectl(
        "get",
        "nodes",
        "-l",
        "karpenter.k8s.aws/instance-family=inf2",
        "-o",
        "jsonpath={range .items[*]}{.metadata.labels.node\\.kubernetes\\.io/instance-type} "
        '{.status.allocatable.aws\\.amazon\\.com/neuroncore}{"\\n"}{end}',
    ).stdout
    assert out.split("\n")[:2] == ["inf2.xlarge 2", "inf2.xlarge 2"]


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        ("cores-beyond-a-node.yaml", "spec.model.neuronCoresPerReplica"),
        ("inverted-replica-bounds.yaml", "minReplicas must not exceed maxReplicas"),
        ("warm-pool-bounds.yaml", "warmPool.minPods must not exceed warmPool.maxPods"),
        # The API server's words, not a bare regular expression.
        (
            "unsupported-source.yaml",
            'spec.model.source: Invalid value: "string": source must be s3://bucket/prefix, an absolute path',
        ),
        ("name-not-dns-1035.yaml", f'<nil>: Invalid value: "object": {NAME_RULE_MESSAGE}'),
        # The operator requires the instance type it picks beside the nodeSelector's labels.
        (
            "node-selector-instance-type.yaml",
            'spec.placement.nodeSelector: Invalid value: "object": nodeSelector must not name the instance type',
        ),
    ],
)
def test_kubectl_apply_enforces_crd_schema_and_cel_rules(
    run_kubectl: RunKubectl, repo_root: Path, example: str, expected: str
) -> None:
    result = run_kubectl("apply", "-f", str(repo_root / "examples/invalid" / example), check=False)
    assert result.returncode != 0
    assert "is invalid" in result.stderr
    assert expected in result.stderr


@pytest.mark.parametrize(
    ("example", "quoted"),
    [("name-not-dns-1035.yaml", "DNS-1035 label"), ("unsupported-source.yaml", "spec.model.source: Invalid value")],
)
def test_the_troubleshooting_guide_quotes_the_refusal_as_kubectl_prints_it(
    run_kubectl: RunKubectl, repo_root: Path, example: str, quoted: str
) -> None:
    guide = (repo_root / "docs/troubleshooting.md").read_text()
    table = guide.split("## `kubectl apply` refuses the object\n", 1)[1].split("\n## ", 1)[0]
    quotes = [line.split("`")[1] for line in table.splitlines() if line.startswith("| `")]
    (quote,) = [q for q in quotes if quoted in q]
    result = run_kubectl("apply", "-f", str(repo_root / "examples/invalid" / example), check=False)
    assert quote.removesuffix("...").rstrip() in result.stderr


@pytest.mark.parametrize(
    ("spec", "refusal"), KUBE_SCHEMA_MESSAGES, ids=[r.split(": ")[0] for _, r in KUBE_SCHEMA_MESSAGES]
)
def test_bounds_and_values_are_refused_in_kube_apiservers_words(
    run_kubectl: RunKubectl, tmp_path: Path, spec: str, refusal: str
) -> None:
    manifest = tmp_path / "bounds.yaml"
    manifest.write_text(
        "apiVersion: serving.neuronfleet.dev/v1alpha1\nkind: InferenceDeployment\n"
        f"metadata: {{name: bounds}}\nspec:\n  {spec}\n"
    )
    result = run_kubectl("apply", "-f", str(manifest), check=False)
    assert result.returncode != 0
    assert refusal in result.stderr


def test_kubectl_applies_every_valid_example(run_kubectl: RunKubectl, repo_root: Path, tmp_path: Path) -> None:
    examples = sorted((repo_root / "examples").glob("*.yaml"))
    assert examples
    for example in examples:
        namespace = next(
            (
                line.split(":", 1)[1].strip()
                for line in example.read_text().splitlines()
                if line.startswith("  namespace:")
            ),
            None,
        )
        if namespace:
            namespace_manifest = tmp_path / f"{namespace}.yaml"
            namespace_manifest.write_text(f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n")
            run_kubectl("apply", "-f", str(namespace_manifest))
        result = run_kubectl("apply", "--validate=true", "-f", str(example), check=False)
        assert result.returncode == 0, f"{example.name}: {result.stderr}"


def test_kubectl_typed_commands_describe_events_and_logs(
    run_kubectl: RunKubectl, threaded_sandbox_cluster: ThreadedSandboxCluster, tmp_path: Path
) -> None:
    # Typed generators send protobuf bodies.
    assert "created" in run_kubectl("create", "namespace", "team").stdout
    run_kubectl("create", "configmap", "cfg", "--from-literal=model=bert", "-n", "team")
    assert run_kubectl("get", "configmap", "cfg", "-n", "team", "-o", "jsonpath={.data.model}").stdout == "bert"
    assert run_kubectl("auth", "can-i", "create", "pods").stdout.strip() == "yes"

    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p1}\nspec:\n"
        "  tolerations: [{key: aws.amazon.com/neuron, operator: Exists}]\n"
        "  containers: [{name: server, image: neuronserve:1, resources: {limits: {aws.amazon.com/neuroncore: 1}}}]\n"
    )
    run_kubectl("apply", "-f", str(manifest))

    async def bound(c: SandboxCluster) -> None:
        def node_name() -> object:
            pod = c.get("pods", "p1", "default")
            return pod and pod["spec"].get("nodeName")

        await c.wait_for(node_name, timeout=30)

    threaded_sandbox_cluster.call(bound)
    described = run_kubectl("describe", "pod", "p1").stdout
    assert "Successfully assigned default/p1" in described
    events = run_kubectl("get", "events").stdout.splitlines()
    assert events[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert any("Scheduled" in line and "pod/p1" in line for line in events[1:])

    def write_log(c: SandboxCluster) -> bool:
        assert c.kubelet is not None
        return c.kubelet.write_log("default", "p1", "model loaded")

    threaded_sandbox_cluster.call(write_log)
    assert "model loaded" in run_kubectl("logs", "p1").stdout
