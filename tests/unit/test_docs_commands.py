"""The kubectl commands the install and troubleshooting guides give work as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GUIDES = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]


@pytest.mark.parametrize("path", GUIDES, ids=[p.name for p in GUIDES])
def test_auth_can_i_names_subresources_with_the_flag(path: Path) -> None:
    # `can-i patch things/status` asks about an object named "status"; `--subresource=status` asks
    # about the subresource.
    wrong = re.findall(r"kubectl auth can-i \S+ \S+/\S+", path.read_text())
    assert not wrong, f"{path.name}: use --subresource: {wrong}"


@pytest.mark.parametrize("path", GUIDES, ids=[p.name for p in GUIDES])
def test_no_get_by_name_across_all_namespaces(path: Path) -> None:
    # kubectl: "a resource cannot be retrieved by name across all namespaces".
    wrong = re.findall(r"kubectl get \S+ -A [a-z0-9][-a-z0-9.]*(?=[ `]|$)", path.read_text(), re.M)
    assert not wrong, f"{path.name}: {wrong}"


def test_the_troubleshooting_rbac_check_is_the_operators_status_write() -> None:
    text = (REPO / "docs" / "troubleshooting.md").read_text()
    assert "kubectl auth can-i patch inferencedeployments.serving.neuronfleet.dev --subresource=status --as=" in text


def test_install_guide_says_what_to_change_before_applying_the_example() -> None:
    text = (REPO / "docs" / "install-eks.md").read_text()
    check = text.split("## 3. Check", 1)[1].split("\n## ", 1)[0]
    before_apply = check.split("kubectl apply -f examples/bert-embeddings.yaml", 1)[0]
    assert "kubectl create namespace search" in before_apply
    assert "`spec.model.source`" in before_apply and "`spec.compile.artifactStore`" in before_apply
