"""``SandboxCluster.host_examples``: the namespaces the example manifests name exist afterwards, so
``kubectl apply -f examples/...`` works as it is; a document naming none, or no mapping at all, is
passed over, and a namespace already there is left as it was."""

from __future__ import annotations

from pathlib import Path

from neuronfleet.sandbox import SandboxCluster

MANIFESTS = {
    "a.yaml": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: one, namespace: search}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: two, namespace: search}\n---\n"
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: cluster-scoped}\n---\n"
        "---\n"
        "- a list, not a manifest\n"
    ),
    "b.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: three, namespace: already-here}\n",
    "c.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: four\n  namespace: support\n",
    # Not a manifest file: ignored.
    "notes.txt": "namespace: nowhere\n",
}


async def test_the_examples_namespaces_are_created_once_and_others_left_alone(tmp_path: Path) -> None:
    for name, text in MANIFESTS.items():
        (tmp_path / name).write_text(text)
    async with SandboxCluster(run_scheduler=False, run_kubelet=False) as cluster:
        before = {ns["metadata"]["name"] for ns in cluster.list("namespaces")}
        existing = cluster.create("namespaces", {"metadata": {"name": "already-here", "labels": {"kept": "yes"}}})
        stocked = await cluster.host_examples(tmp_path)
        after = {ns["metadata"]["name"] for ns in cluster.list("namespaces")}
        assert stocked == []  # no S3 here: no sources to stock
        assert after - before == {"search", "support", "already-here"}
        kept = cluster.get("namespaces", "already-here")
        assert kept is not None and kept["metadata"]["uid"] == existing["metadata"]["uid"]
        assert kept["metadata"]["labels"] == {"kept": "yes"}
        # A second call (a restarted sandbox up on the same examples) changes nothing.
        await cluster.host_examples(tmp_path)
        assert {ns["metadata"]["name"] for ns in cluster.list("namespaces")} == after
