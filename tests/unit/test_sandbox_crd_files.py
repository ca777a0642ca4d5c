"""``load_crd_documents``: the CustomResourceDefinitions of the given YAML files (several documents
to a file allowed); empty documents and other kinds in the same files are passed over."""

from __future__ import annotations

from pathlib import Path

from neuronfleet.sandbox.cluster import load_crd_documents

CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
"""


def test_only_the_crds_are_taken(tmp_path: Path) -> None:
    first = tmp_path / "first.yaml"
    first.write_text("---\n" + CRD + "---\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: widgets}\n")
    second = tmp_path / "second.yaml"
    second.write_text("- not a mapping\n---\n" + CRD.replace("widgets.", "gadgets."))
    names = [crd["metadata"]["name"] for crd in load_crd_documents([first, second])]
    assert names == ["widgets.example.com", "gadgets.example.com"]
