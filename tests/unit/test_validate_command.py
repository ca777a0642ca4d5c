"""`neuronfleet validate`: the examples pass; each invalid manifest fails with its field path."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kube_schema_cases import KUBE_SCHEMA_MESSAGES

from neuronfleet.api.crd import openapi_schema
from neuronfleet.api.v1alpha1 import ARTIFACT_STORE_MESSAGE, NAME_RULE_MESSAGE
from neuronfleet.api.validation import PATTERN_EXAMPLES, go_float, load_manifests, validate_manifest
from neuronfleet.cli import main, validate_files
from neuronfleet.planning.prometheus_urls import PrometheusUrlPolicy

REPO = Path(__file__).resolve().parents[2]
INVALID = sorted((REPO / "examples" / "invalid").glob("*.yaml"))


def _expected_message(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: <message>'"
    return first.removeprefix("# expect: ")


def test_examples_are_valid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "-f", str(REPO / "examples")]) == 0
    out = capsys.readouterr().out
    assert "3 valid, 0 invalid" in out


def _readme_example() -> str:
    """The YAML block under the README's "The API by example" heading."""
    text = (REPO / "README.md").read_text()
    section = text.split("## The API by example", 1)[1]
    return section.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_the_readme_example_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A user copies it first: it must pass the same checks as examples/ (schema, CEL rules, catalog).
    path = tmp_path / "readme.yaml"
    path.write_text(_readme_example())
    assert main(["validate", "-f", str(path)]) == 0, capsys.readouterr().out
    assert "1 valid, 0 invalid" in capsys.readouterr().out


def test_there_are_at_least_three_examples() -> None:
    assert len(list((REPO / "examples").glob("*.yaml"))) >= 3


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_manifest_gives_its_message(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "-f", str(path)]) == 1
    out = capsys.readouterr().out
    assert _expected_message(path) in out
    assert "Traceback" not in out


def test_each_invalid_manifest_is_reported_once_and_valid_ones_are_not() -> None:
    results = validate_files([str(REPO / "examples"), str(REPO / "examples" / "invalid")])
    bad = {r.source for r in results if r.problems}
    assert bad == {str(p) for p in INVALID}


def test_multi_document_file_reports_each_document(tmp_path: Path) -> None:
    good = (REPO / "examples" / "bert-embeddings.yaml").read_text()
    bad = (REPO / "examples" / "invalid" / "negative-replicas.yaml").read_text()
    path = tmp_path / "both.yaml"
    path.write_text(good + "\n---\n" + bad)
    results = validate_files([str(path)])
    assert [bool(r.problems) for r in results] == [False, True]
    assert results[1].source.endswith("#2")


def test_missing_file_and_empty_file_are_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert main(["validate", "-f", str(tmp_path / "nope.yaml"), str(empty)]) == 1
    out = capsys.readouterr().out
    assert "cannot read" in out and "no YAML documents" in out


def test_cli_runs_as_a_process_without_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "neuronfleet.cli", "validate", "-f", str(REPO / "examples" / "invalid")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    assert f"0 valid, {len(INVALID)} invalid" in proc.stdout


@pytest.mark.parametrize("name", ["a.b", "1abc", "bert.v2", "Bert"])
def test_names_the_operator_cannot_give_a_service_are_refused(name: str, tmp_path: Path) -> None:
    # The same rule and message as the API server's (the CRD's CEL rule): Service names are DNS-1035 labels.
    manifest = (REPO / "examples" / "invalid" / "name-not-dns-1035.yaml").read_text().replace("1bert.v2", name)
    path = tmp_path / "named.yaml"
    path.write_text(manifest)
    [result] = validate_files([str(path)])
    assert [str(p) for p in result.problems] == [NAME_RULE_MESSAGE]  # a root rule: the message names the field


def test_a_dns_1035_name_passes(tmp_path: Path) -> None:
    manifest = (REPO / "examples" / "invalid" / "name-not-dns-1035.yaml").read_text().replace("1bert.v2", "bert-v2")
    path = tmp_path / "named.yaml"
    path.write_text(manifest)
    [result] = validate_files([str(path)])
    assert not result.problems


def test_other_kinds_in_a_file_are_skipped_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A file that creates its namespace first, as `kubectl apply -f` takes it (and `plan` reads it).
    good = (REPO / "examples" / "bert-embeddings.yaml").read_text()
    path = tmp_path / "with-namespace.yaml"
    path.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: search}\n---\n" + good)
    assert main(["validate", "-f", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path}#1: skipped Namespace/search: not an InferenceDeployment" in out
    assert "1 valid, 0 invalid, 1 skipped" in out


def test_a_file_with_no_inference_deployment_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "namespace.yaml"
    path.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: search}\n")
    assert main(["validate", "-f", str(path)]) == 1
    assert "no InferenceDeployment manifests found" in capsys.readouterr().err


def test_a_fixed_warm_pool_is_not_capped_by_the_auto_modes_bounds(tmp_path: Path) -> None:
    # maxPods and maxNodePlaceholders are Auto mode's: a Fixed pool of 6 needs no change to them.
    manifest = (REPO / "examples" / "invalid" / "name-not-dns-1035.yaml").read_text().replace("1bert.v2", "bert-v2")
    path = tmp_path / "fixed.yaml"
    path.write_text(manifest + "  warmPool:\n    mode: Fixed\n    pods: 6\n    nodePlaceholders: 3\n")
    [result] = validate_files([str(path)])
    assert not result.problems


def test_square_brackets_in_a_file_name_are_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Rich read "[old]" as markup and printed "inv.yaml".
    bad = tmp_path / "inv[old].yaml"
    bad.write_text((REPO / "examples" / "invalid" / "inverted-replica-bounds.yaml").read_text())
    assert main(["validate", "-f", str(bad)]) == 1
    assert f"✗ {bad} (inverted)" in capsys.readouterr().out


def test_crds_write_to_a_place_it_cannot_write_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["crds", "--write", "--root", str(blocker)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot write {blocker}/crds/") and err.count("\n") == 1


def _manifest(tmp_path: Path, spec: str) -> Path:
    """An InferenceDeployment named m whose spec is ``spec`` (YAML indented under ``spec:``)."""
    path = tmp_path / "m.yaml"
    path.write_text(
        f"apiVersion: serving.neuronfleet.dev/v1alpha1\nkind: InferenceDeployment\nmetadata: {{name: m}}\nspec:\n{spec}"
    )
    return path


def _model_manifest(tmp_path: Path, model: str) -> str:
    return str(_manifest(tmp_path, f"  model:\n{model}"))


def test_inputs_are_for_torchscript_sources(tmp_path: Path) -> None:
    # A huggingface source is compiled with input_ids and attention_mask whatever inputs says:
    # a list naming others was silently ignored (yet changed the compile cache's key).
    custom = "    source: s3://acme/llm/\n    inputs: [{name: input_ids}]\n"
    [result] = validate_files([_model_manifest(tmp_path, custom)])
    assert [str(p) for p in result.problems] == [
        "spec.model.inputs: inputs are for torchscript sources: a huggingface source is compiled and served "
        "with input_ids and attention_mask (int64) from its tokenizer; leave inputs out"
    ]
    scripted = "    source: s3://acme/m.pt\n    format: torchscript\n    inputs: [{name: tokens, dtype: int32}]\n"
    [result] = validate_files([_model_manifest(tmp_path, scripted)])
    assert not result.problems


def test_a_float_input_is_refused_by_the_schema(tmp_path: Path) -> None:
    # The runtime's wire types are INT64 and INT32: a float32 input was refused on every request.
    floats = "    source: s3://acme/m.pt\n    format: torchscript\n    inputs: [{name: x, dtype: float32}]\n"
    [result] = validate_files([_model_manifest(tmp_path, floats)])
    assert [p.path for p in result.problems] == ["spec.model.inputs[0].dtype"]


@pytest.mark.parametrize(
    ("toleration", "problem"),
    [
        ("{effect: NoSchedule}", "spec.placement.tolerations[0].operator: operator must be Exists when key is empty"),
        ("{key: k, operator: Exists, value: v}", "spec.placement.tolerations[0].value: value must be empty"),
        (
            "{key: k, value: v, effect: NoSchedule, tolerationSeconds: 30}",
            "spec.placement.tolerations[0].tolerationSeconds: effect must be NoExecute",
        ),
    ],
)
def test_tolerations_the_api_server_refuses_in_a_pod_are_refused_in_the_spec(
    tmp_path: Path, toleration: str, problem: str
) -> None:
    # Accepted by the CRD before, then refused at every pod create.
    path = _manifest(tmp_path, f"  model: {{source: s3://acme/m/}}\n  placement:\n    tolerations: [{toleration}]\n")
    [result] = validate_files([str(path)])
    [first] = [str(p) for p in result.problems]
    assert first.startswith(problem), result.problems
    ok = "{key: k, operator: Exists, effect: NoExecute, tolerationSeconds: 30}"
    path.write_text(path.read_text().replace(toleration, ok))
    [result] = validate_files([str(path)])
    assert not result.problems


def test_auto_scaling_cannot_scale_to_zero(tmp_path: Path) -> None:
    # With no replica serving, no metric shows the traffic that would scale the fleet up again.
    path = _manifest(tmp_path, "  model: {source: s3://acme/m/}\n  scaling: {minReplicas: 0}\n")
    [result] = validate_files([str(path)])
    assert [p.path for p in result.problems] == ["spec.scaling.minReplicas"]
    assert "with no replica, no metric shows the traffic" in result.problems[0].message


def test_a_queue_target_above_the_queue_bound_is_refused(tmp_path: Path) -> None:
    # The queue never grows past maxQueue (429 beyond it): the burst signal could never fire.
    path = _manifest(
        tmp_path, "  model: {source: s3://acme/m/}\n  runtime: {maxQueue: 4}\n  scaling: {targetQueueDepth: 8}\n"
    )
    [result] = validate_files([str(path)])
    assert [p.path for p in result.problems] == ["spec.scaling.targetQueueDepth"]
    path.write_text(path.read_text().replace("maxQueue: 4", "maxQueue: 8"))
    [result] = validate_files([str(path)])
    assert not result.problems


def test_a_store_of_an_unsupported_scheme_is_explained_not_quoted_as_a_pattern(tmp_path: Path) -> None:
    # The pattern's explanation was cut from the field description: "Expected //bucket/prefix or a
    # directory). Defaults to ..."; the API server quoted the bare regular expression.
    manifest = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    manifest["spec"]["compile"] = {"artifactStore": "https://example.com/store"}
    path = tmp_path / "store.yaml"
    path.write_text(yaml.safe_dump(manifest))
    [result] = validate_files([str(path)])
    assert [(p.path, p.message) for p in result.problems] == [
        (
            "spec.compile.artifactStore",
            "artifactStore must be s3://bucket/prefix or an absolute directory path (not '//' after the bucket)",
        )
    ]
    rule = openapi_schema()["properties"]["spec"]["properties"]["compile"]["properties"]["artifactStore"]
    assert [r["message"] for r in rule["x-kubernetes-validations"]] == [ARTIFACT_STORE_MESSAGE]


def _with_prometheus_url(tmp_path: Path, url: str) -> Path:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["spec"]["scaling"].setdefault("metrics", {})["prometheusUrl"] = url
    path = tmp_path / "with-url.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_prometheus_url_the_operators_allow_list_refuses_is_warned_of(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _with_prometheus_url(tmp_path, "http://prometheus.monitoring.svc.evil.io:9090/")
    allowed = ["--prometheus-allowed-url", "http://prometheus.monitoring.svc:9090"]
    assert main(["validate", "-f", str(path), *allowed]) == 0  # valid all the same
    out = capsys.readouterr().out
    assert (
        "warning: spec.scaling.metrics.prometheusUrl (at http://prometheus.monitoring.svc.evil.io:9090) is not" in out
    )
    assert "PrometheusUrlNotAllowed" in out
    # Without the operator's allow-list nothing is known of it; under it, nothing to say.
    assert main(["validate", "-f", str(path)]) == 0
    assert "warning" not in capsys.readouterr().out
    allowed_path = _with_prometheus_url(tmp_path, "http://prometheus.monitoring.svc:9090/")
    assert main(["validate", "-f", str(allowed_path), *allowed]) == 0
    assert "warning" not in capsys.readouterr().out
    assert main(["validate", "-f", str(path), "--prometheus-allowed-url", "prometheus:9090"]) == 2
    assert "error: --prometheus-allowed-url: 'prometheus:9090' is not an http(s)://host" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://user:S3cr3t@prometheus.monitoring:9090/", "carries credentials or a query string"),
        ("http://prometheus.monitoring:9090/?token=T0ken", "carries credentials or a query string"),
        ("http://evil.io\\@prometheus.monitoring:9090/", "not an http(s) URL that an allow-list of Prometheus URLs"),
    ],
)
def test_a_prometheus_url_with_credentials_or_that_no_allow_list_can_judge_is_warned_of(
    tmp_path: Path, url: str, said: str
) -> None:
    [result] = validate_files([str(_with_prometheus_url(tmp_path, url))])
    assert not result.problems
    assert len(result.warnings) == 1 and said in result.warnings[0]
    assert "S3cr3t" not in result.warnings[0] and "T0ken" not in result.warnings[0]


def test_a_url_no_allow_list_can_judge_is_not_said_to_be_refused_by_an_operator_without_one(tmp_path: Path) -> None:
    """An operator with the default (empty) allow-list requests ``http://prometheus_server:9090``
    (an underscore: no allow-list can judge it); validate without --prometheus-allowed-url must not
    say it is refused, only what an allow-list would do. With one, it is refused."""
    url = "http://prometheus_server:9090"
    assert PrometheusUrlPolicy().refusal(url) is None
    path = _with_prometheus_url(tmp_path, url)
    [result] = validate_files([str(path)])
    [warning] = result.warnings
    assert "is not requested" not in warning
    assert "an operator with any allow-list" in warning and "one without (the default) requests it" in warning
    [result] = validate_files([str(path)], url_policy=PrometheusUrlPolicy.from_entries(["http://prometheus:9090"]))
    [warning] = result.warnings
    assert "is not requested" in warning and "PrometheusUrlNotAllowed" in warning


def _with_metrics(tmp_path: Path, mode: str = "Auto", **metrics: str) -> Path:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["spec"]["scaling"]["mode"] = mode
    if mode == "Manual":
        doc["spec"]["scaling"]["replicas"] = 2
    doc["spec"]["scaling"].setdefault("metrics", {}).update(metrics)
    path = tmp_path / "with-queries.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_query_overrides_for_the_operators_prometheus_are_a_warning_and_an_error_under_the_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _with_metrics(tmp_path, utilization="avg(my_utilization)", reporting="count(up)")
    assert main(["validate", "-f", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "warning: spec.scaling.metrics.utilization, spec.scaling.metrics.reporting differ from the default and "
        "spec.scaling.metrics.prometheusUrl is unset: the operator sends them to its own Prometheus, with its "
        "credentials, for this deployment alone (a query left at its default comes from the shared fleet-wide read), "
        "and an operator with --prometheus-refuse-query-overrides"
    ) in out
    assert "PrometheusQueryNotAllowed" in out and "1 valid, 0 invalid" in out
    assert "avg(my_utilization)" not in out  # the fields are named, not the queries

    assert main(["validate", "-f", str(path), "--prometheus-refuse-query-overrides"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "✗ " in out
    assert "spec.scaling.metrics: spec.scaling.metrics.utilization, spec.scaling.metrics.reporting are not run" in out
    assert "warning" not in out and "0 valid, 1 invalid" in out


@pytest.mark.parametrize(
    ("mode", "metrics"),
    [
        ("Auto", {}),  # the defaults
        ("Auto", {"utilization": ""}),  # a signal turned off asks nothing
        ("Auto", {"utilization": "avg(my_utilization)", "prometheusUrl": "http://prometheus.team-a:9090"}),
        ("Manual", {"utilization": "avg(my_utilization)"}),  # no metrics are read
    ],
)
def test_no_query_override_finding_where_the_operator_would_run_none_against_its_own_prometheus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str, metrics: dict[str, str]
) -> None:
    path = _with_metrics(tmp_path, mode, **metrics)
    assert main(["validate", "-f", str(path), "--prometheus-refuse-query-overrides"]) == 0
    assert "spec.scaling.metrics" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (
            "  model: {source: s3://acme/bert/, batchBuckets: [1, 4, 4, 4]}\n",
            "spec.model.batchBuckets[2]: Duplicate value: 4",
        ),
        (
            "  model: {source: s3://acme/bert/, sequenceBuckets: [128, 512, 128]}\n",
            "spec.model.sequenceBuckets[2]: Duplicate value: 128",
        ),
        (
            "  model:\n    source: s3://acme/m.pt\n    format: torchscript\n"
            "    inputs: [{name: input_ids}, {name: input_ids, dtype: int32}]\n",
            'spec.model.inputs[1]: Duplicate value: map[string]interface {}{"name":"input_ids"}',
        ),
        (
            "  model: {source: s3://acme/bert/}\n  runtime:\n    env: [{name: A, value: '1'}, {name: A, value: '2'}]\n",
            'spec.runtime.env[1]: Duplicate value: map[string]interface {}{"name":"A"}',
        ),
        (
            "  model: {source: s3://acme/bert/}\n  placement: {instanceTypes: [inf2.xlarge, inf2.xlarge]}\n",
            'spec.placement.instanceTypes[1]: Duplicate value: "inf2.xlarge"',
        ),
        (
            "  model: {source: s3://acme/bert/}\n  placement: {zones: [us-east-1a, us-east-1b, us-east-1a]}\n",
            'spec.placement.zones[2]: Duplicate value: "us-east-1a"',
        ),
    ],
)
def test_repeated_items_of_set_and_map_lists_are_refused_in_the_api_servers_words(
    tmp_path: Path, spec: str, problem: str
) -> None:
    # kube-apiserver's listtype validation refuses these; validate and plan passed them.
    [result] = validate_files([str(_manifest(tmp_path, spec))])
    assert [str(p) for p in result.problems] == [problem]


def test_every_set_and_map_list_of_the_crd_is_one_the_duplicate_tests_cover() -> None:
    # A new list-type field would need its own case above.
    found: list[str] = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            if node.get("x-kubernetes-list-type") in ("set", "map"):
                found.append(path)
            for key, sub in (node.get("properties") or {}).items():
                walk(sub, f"{path}.{key}")
            walk(node.get("items"), path)

    walk(openapi_schema(), "")
    assert sorted(found) == [
        ".spec.model.batchBuckets",
        ".spec.model.inputs",
        ".spec.model.sequenceBuckets",
        ".spec.placement.instanceTypes",
        ".spec.placement.zones",
        ".spec.runtime.env",
        ".status.conditions",
    ]


def test_an_object_read_back_from_the_cluster_validates_with_any_field_in_its_last_valid_spec() -> None:
    # `kubectl get -o yaml` output carries status.lastValidSpec.spec, which the CRD keeps as it is
    # (x-kubernetes-preserve-unknown-fields: a spec of another version may be there): strict field
    # validation must not reach into it, while an unknown field beside it is still one.
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    kept = {"model": {"source": "s3://acme/bert/"}, "aFieldOfAnotherVersion": {"x": 1}}
    doc["status"] = {"lastValidSpec": {"generation": 3, "spec": kept}}
    assert validate_manifest(json.loads(json.dumps(doc)))[1] == []
    doc["status"]["lastValidSpec"]["typo"] = 1
    assert [str(p) for p in validate_manifest(doc)[1]] == ['status.lastValidSpec.typo: unknown field "typo"']


def test_a_value_its_pattern_refuses_is_quoted_with_the_pattern_and_an_example(tmp_path: Path) -> None:
    # The message quoted the field's description ("Expected Memory request and limit of the compile
    # Job ..."), which says nothing of the form accepted.
    spec = (
        "  model: {source: s3://acme/bert/, name: Bad_Name}\n  compile: {cpu: two, memory: 8GB}\n"
        "  scaling: {metrics: {prometheusUrl: not a url}}\n"
    )
    [result] = validate_files([str(_manifest(tmp_path, spec))])
    quantity = r"^\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][-+]?[0-9]{1,2})?$"
    assert [str(p) for p in result.problems] == [
        f"spec.compile.cpu: Invalid value: \"two\": should match '{quantity}' (e.g. 16 or 500m)",
        f"spec.compile.memory: Invalid value: \"8GB\": should match '{quantity}' (e.g. 8Gi)",
        "spec.model.name: Invalid value: \"Bad_Name\": should match '^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$' "
        "(e.g. bert-base)",
        "spec.scaling.metrics.prometheusUrl: Invalid value: \"not a url\": should match '^https?://.+' "
        "(e.g. http://prometheus.monitoring:9090)",
    ]


def test_every_pattern_field_has_an_example_that_its_pattern_accepts() -> None:
    found: dict[str, str] = {}

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            if "pattern" in node:
                found[path] = node["pattern"]
            for key, sub in (node.get("properties") or {}).items():
                walk(sub, f"{path}.{key}" if path else key)
            walk(node.get("items"), path)

    walk(openapi_schema(), "")
    assert sorted(found) == sorted(PATTERN_EXAMPLES)
    for path, example in PATTERN_EXAMPLES.items():
        for value in example.split(" or "):
            assert re.search(found[path], value), (path, value)


def test_simulate_policy_quotes_a_refused_pattern_as_validate_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text('scaling: {metrics: {prometheusUrl: "not a url"}}\n')
    assert main(["simulate", "--trace", str(tmp_path / "unread.csv"), "--policy", str(policy)]) == 2
    assert capsys.readouterr().err.strip() == (
        f'error: {policy}: scaling.metrics.prometheusUrl: Invalid value: "not a url": should match '
        "'^https?://.+' (e.g. http://prometheus.monitoring:9090)"
    )


def test_whole_number_floats_pass_for_integer_fields_as_the_api_server_takes_them(tmp_path: Path) -> None:
    # kube-apiserver accepts 2.0 and 1e3 for `type: integer` (and kubectl sends them as 2 and 1000);
    # validate and plan refused them.
    spec = "  model: {source: s3://acme/bert/}\n  scaling: {minReplicas: 2.0, maxReplicas: 1e3}\n"
    [result] = validate_files([str(_manifest(tmp_path, spec))])
    assert not result.problems
    model, problems = validate_manifest(load_manifests(_manifest(tmp_path, spec).read_text())[0])
    assert not problems and model is not None
    assert (model.spec.scaling.min_replicas, model.spec.scaling.max_replicas) == (2, 1000)


@pytest.mark.parametrize(
    ("scaling", "problem"),
    [
        ("{minReplicas: 2.5}", "spec.scaling.minReplicas: 2.5 is not of type 'integer'"),
        ("{maxReplicas: '1e3'}", "spec.scaling.maxReplicas: '1e3' is not of type 'integer'"),
        ("{maxReplicas: 1e16}", "spec.scaling.maxReplicas: 1e+16 is not of type 'integer'"),
    ],
)
def test_fractions_strings_and_floats_beyond_json_integers_are_still_refused(
    tmp_path: Path, scaling: str, problem: str
) -> None:
    [result] = validate_files(
        [str(_manifest(tmp_path, f"  model: {{source: s3://acme/bert/}}\n  scaling: {scaling}\n"))]
    )
    assert problem in [str(p) for p in result.problems]


@pytest.mark.parametrize(
    ("spec", "problem"), KUBE_SCHEMA_MESSAGES, ids=[p.split(": ")[0] for _, p in KUBE_SCHEMA_MESSAGES]
)
def test_bounds_and_values_are_refused_in_kube_apiservers_words(tmp_path: Path, spec: str, problem: str) -> None:
    [result] = validate_files([str(_manifest(tmp_path, f"  {spec}\n"))])
    assert problem in [str(p) for p in result.problems]


def test_bounds_print_as_go_prints_a_float64() -> None:
    # kube-openapi holds a bound as a float64 and prints it with %v.
    shown = [go_float(x) for x in (24, 0.999, 600000, 1e6, 1.5e7, 0.0001, 0.00001, -3.25, 0)]
    assert shown == ["24", "0.999", "600000", "1e+06", "1.5e+07", "0.0001", "1e-05", "-3.25", "0"]


def test_a_type_refusal_comes_before_the_enum_refusal_of_the_same_field(tmp_path: Path) -> None:
    # kube-openapi checks a value's type first, then its enum.
    [result] = validate_files(
        [str(_manifest(tmp_path, "  model: {source: s3://acme/bert/}\n  warmPool: {mode: yes}\n"))]
    )
    assert [str(p) for p in result.problems] == [
        "spec.warmPool.mode: True is not of type 'string'",
        'spec.warmPool.mode: Unsupported value: true: supported values: "Off", "Fixed", "Auto"',
    ]


def test_a_bare_off_is_refused_with_the_quotes_it_needs(tmp_path: Path) -> None:
    # YAML 1.1 (kubectl's and PyYAML's) reads a bare Off as false: the API server's words name the
    # value false and "Off" among the supported ones, not why one became the other.
    [result] = validate_files(
        [str(_manifest(tmp_path, "  model: {source: s3://acme/bert/}\n  warmPool: {mode: Off}\n"))]
    )
    assert [str(p) for p in result.problems][-1] == (
        'spec.warmPool.mode: Unsupported value: false: supported values: "Off", "Fixed", "Auto" '
        '(YAML reads a bare Off as false: quote it, "Off")'
    )
    quoted = tmp_path / "quoted"
    quoted.mkdir()
    [fixed] = validate_files(
        [str(_manifest(quoted, '  model: {source: s3://acme/bert/}\n  warmPool: {mode: "Off"}\n'))]
    )
    assert fixed.problems == []


def test_a_json_false_gets_no_hint_about_yaml(tmp_path: Path) -> None:
    # In a JSON file false was written as false: no bare Off was misread, and the hint would mislead.
    manifest = tmp_path / "dep.json"
    manifest.write_text(
        json.dumps(
            {
                "apiVersion": "serving.neuronfleet.dev/v1alpha1",
                "kind": "InferenceDeployment",
                "metadata": {"name": "bert"},
                "spec": {"model": {"source": "s3://acme/bert/"}, "warmPool": {"mode": False}},
            }
        )
    )
    [result] = validate_files([str(manifest)])
    assert [str(p) for p in result.problems][-1] == (
        'spec.warmPool.mode: Unsupported value: false: supported values: "Off", "Fixed", "Auto"'
    )


def test_manifests_are_read_as_kubectl_reads_them() -> None:
    # go-yaml reads a plain 1e3 as a float; PyYAML's YAML 1.1 rules as the string '1e3'.
    assert load_manifests("a: 1e3\nb: -5E-1\nc: '1e3'\nd: 10\ne: 1.5\nf: e3\n") == [
        {"a": 1000.0, "b": -0.5, "c": "1e3", "d": 10, "e": 1.5, "f": "e3"}
    ]


@pytest.mark.parametrize(
    ("memory", "shown"),
    [
        ("8ГБ", '"8ГБ"'),
        ("8G\x01", '"8G\\x01"'),
        ("8\u00a0G", '"8\\u00a0G"'),
        ('8"G', '"8\\"G"'),
        ("8\U000e0001G", '"8\\U000e0001G"'),  # past the Basic Multilingual Plane, not printable
    ],
)
def test_a_refused_string_is_quoted_as_go_quotes_it(memory: str, shown: str) -> None:
    # kube-apiserver prints field values with Go's %q: printable characters of any script as they
    # are, others as \x01 or \u00a0 (JSON would write \u0001 and \u00a0 both ways).
    obj = yaml.safe_load(
        "apiVersion: serving.neuronfleet.dev/v1alpha1\nkind: InferenceDeployment\nmetadata: {name: x}\n"
        "spec: {model: {source: 's3://b/m/'}}\n"
    )
    obj["spec"]["compile"] = {"memory": memory}
    _, problems = validate_manifest(obj)
    assert [p.path for p in problems] == ["spec.compile.memory"]
    assert problems[0].message.startswith(f"Invalid value: {shown}: should match ")


def test_manifest_loader_resolves_tags_as_go_yaml_v2() -> None:
    # go-yaml v2 resolve.go: a written tag is resolved the same way (an int is taken for !!float, a
    # timestamp decoded into interface{} stays its text); what does not resolve to it is an error.
    doc = "a: !!int '0o17'\nb: !!float 1\nc: !!timestamp 2001-01-02\nd: !!bool y\ne: !!str 0o17\nf: 2001-01-02\n"
    assert load_manifests(doc) == [{"a": 15, "b": 1.0, "c": "2001-01-02", "d": True, "e": "0o17", "f": "2001-01-02"}]
    with pytest.raises(yaml.YAMLError, match="cannot decode !!str `abc` as a !!int"):
        load_manifests("a: !!int abc\n")


def _cpu_limit_manifest(tmp_path: Path, pool: str) -> str:
    # 1-core replicas of 10Gi: an inf2.xlarge (16 GiB) holds one, for up to 8 pods the cheapest; from
    # 9 pods one inf2.24xlarge is cheaper, and its replicas' CPU share (7932m) is above the limit of 4.
    path = tmp_path / "cpu-limit.yaml"
    path.write_text(
        "apiVersion: serving.neuronfleet.dev/v1alpha1\n"
        "kind: InferenceDeployment\n"
        "metadata: {name: model}\n"
        "spec:\n"
        "  model: {source: s3://models/m/, neuronCoresPerReplica: 1}\n"
        "  runtime: {memory: 10Gi, cpuLimit: '4'}\n"
        "  placement: {instanceTypes: [inf2.xlarge, inf2.24xlarge]}\n"
        "  scaling: {minReplicas: 1, maxReplicas: 8}\n"
        f"  warmPool: {pool}\n"
    )
    return str(path)


def test_validate_refuses_a_cpu_limit_only_at_pod_counts_the_operator_reaches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: an Auto pool was planned up to maxReplicas + maxPods (10 pods), and validate refused
    # the manifest "at 9 pod(s)", a count the operator never places (standby beside N active stops at
    # maxReplicas - N, but for minPods).
    assert main(["validate", "-f", _cpu_limit_manifest(tmp_path, "{mode: Auto, maxPods: 2}")]) == 0
    assert "cpuLimit" not in capsys.readouterr().out
    # Reached: minPods beside 8 active replicas, or a Fixed pool beside them.
    for pool in ("{mode: Auto, minPods: 1, maxPods: 2}", "{mode: Fixed, pods: 0, nodePlaceholders: 1}"):
        assert main(["validate", "-f", _cpu_limit_manifest(tmp_path, pool)]) == 1
        assert "spec.runtime.cpuLimit: at 9 pod(s): spec.runtime.cpuLimit 4 is below" in capsys.readouterr().out


def test_a_duplicate_key_is_refused_naming_it_and_both_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # PyYAML kept the last `scaling:` silently (1..10 at 0.9); kubectl refuses such a manifest.
    path = tmp_path / "dup.yaml"
    path.write_text(
        "apiVersion: serving.neuronfleet.dev/v1alpha1\nkind: InferenceDeployment\nmetadata: {name: x}\nspec:\n"
        "  model: {source: 's3://bucket/model/'}\n  scaling: {targetUtilization: 0.5}\n"
        "  scaling: {targetUtilization: 0.9}\n"
    )
    assert main(["validate", "-f", str(path)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "malformed YAML at line 7, column 3: key 'scaling' already set in this mapping at line 6" in out


def test_surrogate_escapes_are_read_as_kubectl_reads_them_in_json_and_refused_in_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Python's json.dumps writes an emoji as a surrogate pair ("\\ud83d\\ude00"), which PyYAML kept as
    # two surrogates: RE2 could not encode them, and `validate` ended in a UnicodeEncodeError
    # traceback. kubectl reads a JSON stream with Go's encoding/json (the pair is the emoji; a lone
    # surrogate U+FFFD), and YAML with go-yaml, which refuses any surrogate escape.
    manifest = {
        "apiVersion": "serving.neuronfleet.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "x"},
        "spec": {"model": {"source": "s3://b/m/"}, "compile": {"memory": "8\U0001f600G"}},
    }
    as_json = tmp_path / "emoji.json"
    as_json.write_text(json.dumps(manifest))
    assert "\\ud83d\\ude00" in as_json.read_text()
    assert main(["validate", "-f", str(as_json)]) == 1
    out = capsys.readouterr().out
    assert 'spec.compile.memory: Invalid value: "8\U0001f600G": should match ' in out
    assert "Traceback" not in out

    lone = as_json.read_text().replace("\\ude00", "")
    assert load_manifests(lone)[0]["spec"]["compile"]["memory"] == "8\ufffdG"

    as_yaml = tmp_path / "emoji.yaml"
    as_yaml.write_text(
        "apiVersion: serving.neuronfleet.dev/v1alpha1\nkind: InferenceDeployment\nmetadata: {name: x}\n"
        'spec:\n  model: {source: "s3://b/m/"}\n  compile: {memory: "8\\ud83d\\ude00G"}\n'
    )
    assert main(["validate", "-f", str(as_yaml)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "malformed YAML at line 6, column 21: found invalid Unicode character escape code" in out


def test_a_key_over_a_merged_one_is_an_override_not_a_duplicate() -> None:
    # YAML's merge: a key written beside `<<` replaces the merged one (as go-yaml reads it).
    text = "base: &b {a: 1, b: 2}\nx:\n  <<: *b\n  a: 3\n"
    assert load_manifests(text) == [{"base": {"a": 1, "b": 2}, "x": {"a": 3, "b": 2}}]


def _bert(namespace: str | None, cores: int = 1) -> str:
    """The bert example with ``namespace`` (None: the line removed) and ``cores`` per replica."""
    text = (REPO / "examples" / "bert-embeddings.yaml").read_text()
    assert "  namespace: search\n" in text and "neuronCoresPerReplica: 1\n" in text
    line = f"  namespace: {namespace}\n" if namespace else ""
    return text.replace("  namespace: search\n", line).replace(
        "neuronCoresPerReplica: 1\n", f"neuronCoresPerReplica: {cores}\n"
    )


def test_two_manifests_of_one_namespace_and_name_are_refused_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `kubectl apply -f dir/` applies both to one object: the last one wins, the first is lost.
    (tmp_path / "a.yaml").write_text(_bert("search", cores=1))
    (tmp_path / "b.yaml").write_text(_bert("search", cores=2))
    assert main(["validate", "-f", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert (
        f"metadata.name: search/minilm-embeddings is also defined in {tmp_path / 'a.yaml'}: kubectl apply "
        "applies both to one object and keeps the last" in out
    )
    assert f"✗ {tmp_path / 'b.yaml'} (minilm-embeddings)" in out
    assert "1 valid, 1 invalid" in out


def test_documents_without_a_namespace_are_one_namespace_and_others_differ(tmp_path: Path) -> None:
    # A manifest naming no namespace goes to the one it is applied to (kubectl's -n, else the
    # context's): the same for every such document of one apply, unknown beside a named one.
    path = tmp_path / "all.yaml"
    path.write_text("\n---\n".join([_bert(None), _bert("search"), _bert("other"), _bert(None, cores=2)]))
    results = validate_files([str(path)])
    assert [[str(p) for p in r.problems] for r in results] == [
        [],
        [],
        [],
        [
            f"metadata.name: minilm-embeddings (no metadata.namespace: the namespace it is applied to) is also "
            f"defined in {path}#1: kubectl apply applies both to one object and keeps the last"
        ],
    ]


def test_a_file_named_twice_is_not_a_duplicate_of_itself(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bert.yaml"
    path.write_text(_bert("search"))
    assert main(["validate", "-f", str(tmp_path), str(path)]) == 0, capsys.readouterr().out


def _as_list(*documents: str, api_version: str | None = "v1", kind: str = "List") -> str:
    """``documents`` as the items of one list document (``kubectl get -o yaml`` writes a v1 List)."""
    items = [yaml.safe_load(document) for document in documents]
    return yaml.safe_dump({"apiVersion": api_version, "kind": kind, "metadata": {}, "items": items})


def test_the_items_of_a_list_are_validated_one_by_one_as_kubectl_apply_applies_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "got.yaml"
    path.write_text(_as_list(_bert("search"), _bert("other", cores=2), _bert("search", cores=2)))
    assert main(["validate", "-f", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"✓ {path}#1.items[0]: minilm-embeddings: 1 NeuronCores/replica" in out
    assert f"✓ {path}#1.items[1]: minilm-embeddings: 2 NeuronCores/replica" in out
    assert f"✗ {path}#1.items[2] (minilm-embeddings)" in out
    assert f"search/minilm-embeddings is also defined in {path}#1.items[0]" in out
    assert "2 valid, 1 invalid" in out and "skipped" not in out


def test_an_inference_deployment_list_gives_its_items_its_version_and_kind_and_lists_nest(tmp_path: Path) -> None:
    # The API server's list names the kind once; kubectl's decoder gives it to each item naming neither.
    bare = yaml.safe_load(_bert("search"))
    del bare["apiVersion"], bare["kind"]
    typed = yaml.safe_dump(
        {"apiVersion": "serving.neuronfleet.dev/v1alpha1", "kind": "InferenceDeploymentList", "items": [bare]}
    )
    path = tmp_path / "lists.yaml"
    path.write_text(_as_list(typed, _bert("other")) + "---\n" + _as_list())
    results = validate_files([str(path)])
    assert [(r.source, r.name, [str(p) for p in r.problems], r.skipped) for r in results] == [
        (f"{path}#1.items[0].items[0]", "minilm-embeddings", [], ""),
        (f"{path}#1.items[1]", "minilm-embeddings", [], ""),
        (f"{path}#2", None, [], "skipped List: no items"),
    ]


@pytest.mark.parametrize(
    ("api_version", "kind", "said"),
    [
        ("serving.other.dev/v1alpha1", "InferenceDeploymentList", "skipped InferenceDeploymentList: not an"),
        ("serving.neuronfleet.dev/v1alpha1", "WidgetList", "kind: expected apiVersion"),
        (None, "InferenceDeploymentList", "apiVersion: expected apiVersion"),
    ],
    ids=["our-list-kind-of-another-group", "another-list-kind-of-our-group", "our-list-kind-without-apiversion"],
)
def test_only_this_groups_inference_deployment_list_is_unpacked(
    api_version: str | None, kind: str, said: str, tmp_path: Path
) -> None:
    # kubectl's decoder unpacks a v1 List or a registered type's list; any other is one object.
    path = tmp_path / "other-list.yaml"
    path.write_text(_as_list(_bert("search"), api_version=api_version, kind=kind))
    (result,) = validate_files([str(path)])
    assert (result.source, result.name) == (str(path), None)  # the document, not its items
    assert (result.skipped or str(result.problems[0])).startswith(said)


def test_documents_without_a_name_are_not_duplicates_of_each_other(tmp_path: Path) -> None:
    unnamed = _bert("search").replace("name: minilm-embeddings", 'name: ""')
    assert 'name: ""' in unnamed
    path = tmp_path / "unnamed.yaml"
    path.write_text(unnamed + "---\n" + unnamed)
    results = validate_files([str(path)])
    assert [[str(p) for p in r.problems] for r in results] == [["metadata.name: required field is missing"]] * 2


def test_an_empty_list_alone_is_no_inference_deployment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "none.yaml"
    path.write_text(_as_list())
    assert main(["validate", "-f", str(path)]) == 1
    captured = capsys.readouterr()
    assert f"{path}: skipped List: no items" in captured.out
    assert "no InferenceDeployment manifests found" in captured.err


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [
        ("serving.other.dev/v1", "InferenceDeployment"),
        ("v1", "ConfigMap"),
        ("serving.neuronfleet.dev/v1alpha1", "InferenceDeploymentList"),
    ],
    ids=["another-group", "another-kind", "a-kind-of-ours-without-items"],
)
def test_a_document_of_another_group_or_kind_is_another_object(api_version: str, kind: str, tmp_path: Path) -> None:
    # kubectl apply makes one object of two documents only if their group and kind are the same too.
    other = _bert("search").replace("apiVersion: serving.neuronfleet.dev/v1alpha1", f"apiVersion: {api_version}")
    other = other.replace("kind: InferenceDeployment\n", f"kind: {kind}\n")
    assert f"apiVersion: {api_version}\n" in other and f"kind: {kind}\n" in other
    path = tmp_path / "two.yaml"
    path.write_text(other + "---\n" + _bert("search"))
    results = validate_files([str(path)])
    assert [str(p) for p in results[1].problems] == []


def test_another_version_of_the_same_group_and_kind_is_the_same_object(tmp_path: Path) -> None:
    # One object whichever served version writes it: the duplicate is named (the version is refused too).
    other = _bert("search").replace("serving.neuronfleet.dev/v1alpha1", "serving.neuronfleet.dev/v1beta1")
    path = tmp_path / "two.yaml"
    path.write_text(other + "---\n" + _bert("search"))
    results = validate_files([str(path)])
    assert [p.path for p in results[0].problems] == ["apiVersion"]
    assert [str(p) for p in results[1].problems] == [
        f"metadata.name: search/minilm-embeddings is also defined in {path}#1: kubectl apply applies both to one "
        "object and keeps the last"
    ]
