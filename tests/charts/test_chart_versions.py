"""The chart runs the operator of its own version, and the guides make it run the build they pushed.

The chart passes the operator the arguments and variables of its version; an older operator image
crash-loops on an argument it does not know, or ignores a variable it does not read. So the
chart's appVersion (the default image tag) is the operator package's version, and every install
and upgrade command of the guides sets the image repository and a tag of its own for the build
(nodes pull a tag they have only once: ``IfNotPresent``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import CHART, by_kind, helm, helm_command, render, section, shell_lines, tool

import neuronfleet

REPO = CHART.parents[1]
GUIDE = REPO / "docs" / "install-eks.md"
README = REPO / "README.md"


def _app_version() -> str:
    return str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])


def test_the_charts_app_version_is_the_operator_packages_version() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert _app_version() == neuronfleet.__version__ == pyproject
    (deployment,) = by_kind(render(), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"ghcr.io/neuronfleet/neuronfleet-operator:{neuronfleet.__version__}"


def _image_rendered(command: str, substitutions: dict[str, str]) -> str:
    """The operator image ``helm template`` renders from a guide's helm command."""
    (container,) = _operator_containers(command, substitutions)
    return str(container["image"])


def _operator_containers(command: str, substitutions: dict[str, str]) -> list[dict[str, Any]]:
    """The operator Deployment's containers as ``helm template`` renders them from a guide's helm
    command, its placeholders replaced (``-f`` files dropped: the flags are what is checked)."""
    for placeholder, value in substitutions.items():
        command = command.replace(placeholder, value)
    args = shlex.split(command)[2:]
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("-f", "--values"):
            skip = True
            continue
        if arg != "--create-namespace":
            kept.append(arg.replace("charts/neuronfleet", str(CHART)))
    if "operator.artifactStore" not in " ".join(kept):
        kept += ["--set", "operator.artifactStore=s3://bucket/prefix"]
    result = helm("template", *kept)
    assert result.returncode == 0, result.stderr
    (deployment,) = by_kind([d for d in yaml.safe_load_all(result.stdout) if d], "Deployment")
    return list(deployment["spec"]["template"]["spec"]["containers"])


def test_the_install_guides_command_runs_compiles_and_servers_as_the_accounts_it_made() -> None:
    # Section 1 creates neuronfleet-compile and neuronfleet-serving (S3 write and read roles) and
    # says to name them in section 2; the command there did not: compile Jobs ran as the
    # namespace's default account, with no S3 write role, and the first compile failed.
    install = helm_command(section(GUIDE.read_text(), "## 2. Install"), "install")
    (container,) = _operator_containers(install, {"$TAG": "0.2.0-abc1234"})
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env.get("NEURONFLEET_COMPILE_SERVICE_ACCOUNT") == "neuronfleet-compile"
    assert env.get("NEURONFLEET_SERVING_SERVICE_ACCOUNT") == "neuronfleet-serving"


def test_the_readme_install_runs_the_operator_image_pushed() -> None:
    command = helm_command(section(README.read_text(), "## Install on EKS with Helm"), "install")
    image = _image_rendered(command, {"<registry>": "registry.example", "<tag>": "0.2.0-abc1234"})
    assert image == "registry.example/neuronfleet-operator:0.2.0-abc1234"


def test_the_install_guide_pushes_a_tag_per_build_and_installs_it() -> None:
    text = GUIDE.read_text()
    images = shell_lines(section(text, "### The images: build and push"))
    (tag,) = [line for line in images if line.startswith("TAG=")]
    assert "docker build -f operator/Dockerfile -t $REGISTRY/neuronfleet-operator:$TAG ." in images
    assert "docker push $REGISTRY/neuronfleet-operator:$TAG" in images
    install = helm_command(section(text, "## 2. Install"), "install")
    registry = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
    assert _image_rendered(install, {"$TAG": "0.2.0-abc1234"}) == f"{registry}/neuronfleet-operator:0.2.0-abc1234"
    # The Upgrade section builds, pushes and sets a new tag, the same way, before the upgrade.
    upgrade = shell_lines(section(text, "## Upgrade"))
    assert upgrade.index(tag) < upgrade.index("docker push $REGISTRY/neuronfleet-operator:$TAG")
    helm_upgrade = next(i for i, line in enumerate(upgrade) if line.startswith("helm upgrade "))
    assert upgrade.index("docker push $REGISTRY/neuronfleet-operator:$TAG") < helm_upgrade
    assert "--set image.tag=$TAG" in upgrade[helm_upgrade]


def test_the_guides_tag_is_the_charts_app_version_and_the_commit() -> None:
    """The TAG line, run as written in this checkout: a new tag whenever the commit changes."""
    git = shutil.which("git")
    if git is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    tags = {line for line in shell_lines(GUIDE.read_text()) if line.startswith("TAG=")}
    (tag,) = tags  # one way to compute it, wherever the guide builds
    path = f"{Path(tool('helm')).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    result = subprocess.run(
        ["bash", "-c", f"{tag}; echo $TAG"], cwd=REPO, env={**os.environ, "PATH": path}, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    commit = subprocess.run([git, "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    assert result.stdout.strip() == f"{_app_version()}-{commit.strip()}"
