"""Server-side apply in the sandbox as kubectl 1.34 (and GitOps tools) use it: managedFields per
manager, removal of fields a manager stops applying, 409 conflicts unless forced; client-side
apply keeps working; unknown kinds and unknown fields get kubectl's own messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from fixtures_cluster import RunKubectl

GROUP = "serving.neuronfleet.dev"

#: The ``run_kubectl`` fixture (tests/fixtures_cluster.py): ``run_kubectl(*args, check=True)`` runs kubectl.


def example_with_labels(repo_root: Path, labels: dict[str, str]) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load((repo_root / "examples" / "llama2-7b-chat.yaml").read_text())
    manifest["metadata"].pop("namespace", None)
    manifest["metadata"]["labels"] = labels
    return manifest


def write(path: Path, manifest: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(manifest))
    return str(path)


def stored(run_kubectl: RunKubectl, name: str) -> dict[str, Any]:
    out = run_kubectl("get", "inferencedeployment", name, "-o", "json", "--show-managed-fields").stdout
    result: dict[str, Any] = json.loads(out)
    return result


def owners(obj: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj["metadata"].get("managedFields", [])}


def test_an_example_applied_server_side_then_without_one_label_loses_it(
    run_kubectl: RunKubectl, repo_root: Path, tmp_path: Path
) -> None:
    """What a new user (or Argo CD, Flux) does: apply an example, then the same file minus one label."""
    example = repo_root / "examples" / "batch-classifier-fixed.yaml"
    run_kubectl("create", "namespace", "support")
    assert "serverside-applied" in run_kubectl("apply", "--server-side", "-f", str(example)).stdout
    labels = "jsonpath={.metadata.labels}"
    before = json.loads(run_kubectl("get", "infdep", "ticket-classifier", "-n", "support", "-o", labels).stdout)
    assert before == {"app.kubernetes.io/part-of": "helpdesk", "team": "support"}
    edited = tmp_path / example.name
    edited.write_text(example.read_text().replace("    team: support\n", ""))
    assert "serverside-applied" in run_kubectl("apply", "--server-side", "-f", str(edited)).stdout
    after = json.loads(run_kubectl("get", "infdep", "ticket-classifier", "-n", "support", "-o", labels).stdout)
    assert after == {"app.kubernetes.io/part-of": "helpdesk"}


def test_server_side_apply_owns_removes_and_conflicts(run_kubectl: RunKubectl, repo_root: Path, tmp_path: Path) -> None:
    manifest = example_with_labels(repo_root, {"team": "chat", "tier": "gold"})
    name = manifest["metadata"]["name"]
    path = write(tmp_path / "app.yaml", manifest)
    assert "serverside-applied" in run_kubectl("apply", "--server-side", "-f", path).stdout
    obj = stored(run_kubectl, name)
    fields = owners(obj)[("kubectl", "Apply")]
    assert fields["f:metadata"]["f:labels"] == {"f:team": {}, "f:tier": {}}
    assert "f:model" in fields["f:spec"]
    assert "f:status" not in fields
    first_rv = obj["metadata"]["resourceVersion"]
    assert "serverside-applied" in run_kubectl("apply", "--server-side", "-f", path).stdout
    assert stored(run_kubectl, name)["metadata"]["resourceVersion"] == first_rv  # a no-op apply writes nothing

    # The same manifest without one label: the label goes, the rest stays.
    del manifest["metadata"]["labels"]["tier"]
    write(tmp_path / "app.yaml", manifest)
    run_kubectl("apply", "--server-side", "-f", path)
    obj = stored(run_kubectl, name)
    assert obj["metadata"]["labels"] == {"team": "chat"}
    assert owners(obj)[("kubectl", "Apply")]["f:metadata"]["f:labels"] == {"f:team": {}}

    # Another manager applying a different value for an owned field: 409, listing field and manager.
    rival = {
        "apiVersion": manifest["apiVersion"],
        "kind": manifest["kind"],
        "metadata": {"name": name, "labels": {"team": "platform"}},
    }
    rival_path = write(tmp_path / "rival.yaml", rival)
    refused = run_kubectl("apply", "--server-side", "--field-manager=argocd", "-f", rival_path, check=False)
    assert refused.returncode != 0
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .metadata.labels.team' in refused.stderr
    assert stored(run_kubectl, name)["metadata"]["labels"] == {"team": "chat"}

    forced = run_kubectl("apply", "--server-side", "--field-manager=argocd", "--force-conflicts", "-f", rival_path)
    assert "serverside-applied" in forced.stdout
    obj = stored(run_kubectl, name)
    assert obj["metadata"]["labels"] == {"team": "platform"}
    managed = owners(obj)
    assert managed[("argocd", "Apply")]["f:metadata"]["f:labels"] == {"f:team": {}}
    assert "f:labels" not in managed[("kubectl", "Apply")].get("f:metadata", {})
    assert "f:model" in managed[("kubectl", "Apply")]["f:spec"]

    # The first manager drops the label from its manifest: argocd owns it now, so it stays.
    del manifest["metadata"]["labels"]
    write(tmp_path / "app.yaml", manifest)
    run_kubectl("apply", "--server-side", "-f", path)
    assert stored(run_kubectl, name)["metadata"]["labels"] == {"team": "platform"}


def test_updates_by_other_managers_are_recorded(run_kubectl: RunKubectl, repo_root: Path, tmp_path: Path) -> None:
    manifest = example_with_labels(repo_root, {"team": "chat"})
    name = manifest["metadata"]["name"]
    run_kubectl("apply", "--server-side", "-f", write(tmp_path / "app.yaml", manifest))
    run_kubectl("patch", "infdep", name, "--type", "merge", "-p", '{"metadata":{"labels":{"team":"ops"}}}')
    obj = stored(run_kubectl, name)
    managed = owners(obj)
    assert managed[("kubectl-patch", "Update")]["f:metadata"]["f:labels"] == {"f:team": {}}
    assert "f:labels" not in managed[("kubectl", "Apply")].get("f:metadata", {})  # the update took it over
    entry = next(e for e in obj["metadata"]["managedFields"] if e["manager"] == "kubectl-patch")
    assert entry["apiVersion"] == f"{GROUP}/v1alpha1" and entry["fieldsType"] == "FieldsV1" and entry["time"]

    # A PUT (kubectl replace) is an Update too.
    del obj["metadata"]["managedFields"]
    obj["metadata"]["labels"]["tier"] = "gold"
    run_kubectl("replace", "-f", write(tmp_path / "replaced.yaml", obj))
    managed = owners(stored(run_kubectl, name))
    assert managed[("kubectl-replace", "Update")]["f:metadata"]["f:labels"] == {"f:tier": {}}
    assert managed[("kubectl-patch", "Update")]["f:metadata"]["f:labels"] == {"f:team": {}}


def test_client_side_apply_still_works(run_kubectl: RunKubectl, repo_root: Path, tmp_path: Path) -> None:
    manifest = example_with_labels(repo_root, {"team": "chat", "tier": "gold"})
    name = manifest["metadata"]["name"]
    path = write(tmp_path / "app.yaml", manifest)
    assert "created" in run_kubectl("apply", "-f", path).stdout
    del manifest["metadata"]["labels"]["tier"]
    write(tmp_path / "app.yaml", manifest)
    assert "configured" in run_kubectl("apply", "-f", path).stdout
    obj = stored(run_kubectl, name)
    assert obj["metadata"]["labels"] == {"team": "chat"}
    assert ("kubectl-client-side-apply", "Update") in owners(obj)
    # Moving the object to server-side apply (kubectl migrates the client-side owner's fields).
    assert "serverside-applied" in run_kubectl("apply", "--server-side", "-f", path).stdout


def test_unknown_kind_says_no_matches_for_kind(run_kubectl: RunKubectl, tmp_path: Path) -> None:
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}}
    result = run_kubectl("apply", "-f", write(tmp_path / "widget.yaml", widget), check=False)
    assert result.returncode != 0
    assert 'no matches for kind "Widget" in version "example.com/v1"' in result.stderr
    assert "openapi" not in result.stderr


def test_unknown_fields_warn_with_kubectl(run_kubectl: RunKubectl, repo_root: Path, tmp_path: Path) -> None:
    manifest = example_with_labels(repo_root, {"team": "chat"})
    name = manifest["metadata"]["name"]
    run_kubectl("apply", "-f", write(tmp_path / "app.yaml", manifest))
    patched = run_kubectl("patch", "infdep", name, "--type", "merge", "-p", '{"spec":{"foo":1}}')
    assert 'Warning: unknown field "spec.foo"' in patched.stderr
    manifest["spec"]["bar"] = 2
    applied = run_kubectl("apply", "--server-side", "--validate=warn", "-f", write(tmp_path / "app.yaml", manifest))
    assert 'Warning: unknown field "spec.bar"' in applied.stderr


def test_scale_subresource_writes_are_owned(run_kubectl: RunKubectl, repo_root: Path, tmp_path: Path) -> None:
    manifest = example_with_labels(repo_root, {"team": "chat"})
    manifest["spec"]["scaling"] = {"mode": "Manual", "replicas": 1}
    name = manifest["metadata"]["name"]
    path = write(tmp_path / "app.yaml", manifest)
    run_kubectl("apply", "--server-side", "-f", path)
    run_kubectl("scale", "infdep", name, "--replicas=3")
    entry = next(e for e in stored(run_kubectl, name)["metadata"]["managedFields"] if e.get("subresource") == "scale")
    assert entry["operation"] == "Update"
    assert entry["fieldsV1"] == {"f:spec": {"f:scaling": {"f:replicas": {}}}}
    refused = run_kubectl("apply", "--server-side", "-f", path, check=False)
    assert refused.returncode != 0
    assert "Apply failed with 1 conflict" in refused.stderr and ".spec.scaling.replicas" in refused.stderr
