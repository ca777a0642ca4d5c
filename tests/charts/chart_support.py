"""Shared helpers of the chart tests: render the chart with the real helm binary, read its RBAC.

The binaries come from ``hack/install-kube-tools.sh`` (run by ``make test``): helm 4 in .venv/bin.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "neuronfleet"
CI_VALUES = Path(__file__).resolve().parent / "values-ci.yaml"
#: Only what the chart requires (operator.artifactStore): the chart's defaults for everything else.
MINIMAL_VALUES = Path(__file__).resolve().parent / "values-minimal.yaml"


def tool(name: str) -> str:
    """A binary from the project's virtualenv (where make test installs it), else from PATH."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed: run hack/install-kube-tools.sh (make test does)")
    return found


def helm(*args: str, timeout: float = 60.0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("helm"), *args], capture_output=True, text=True, timeout=timeout, env=env)


def render(
    values_files: Sequence[Path] = (MINIMAL_VALUES,),
    sets: Sequence[str] = (),
    namespace: str = "neuronfleet-system",
    include_crds: bool = False,
) -> list[dict[str, Any]]:
    """``helm template`` output as documents (hooks included, like an install would apply them)."""
    args = ["template", "nf", str(CHART), "--namespace", namespace]
    if include_crds:
        args.append("--include-crds")
    for values in values_files:
        args += ["--values", str(values)]
    for item in sets:
        args += ["--set", item]
    result = helm(*args)
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(docs: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc.get("kind") == kind]


@dataclass(frozen=True)
class Permission:
    """One (API group, resource[/subresource], verb) triple, as RBAC authorizes a request."""

    group: str
    resource: str
    verb: str

    def __str__(self) -> str:
        return f"{self.verb} {self.resource}.{self.group or 'core'}"


def granted(cluster_role: dict[str, Any]) -> set[Permission]:
    """Every permission a ClusterRole grants (it has no wildcards: a test checks that first)."""
    return {
        Permission(group, resource, verb)
        for rule in cluster_role.get("rules") or []
        for group in rule.get("apiGroups") or []
        for resource in rule.get("resources") or []
        for verb in rule.get("verbs") or []
    }


@dataclass(frozen=True)
class Grants:
    """What a service account may do, as RBAC evaluates the chart's bindings: ``cluster`` through
    ClusterRoleBindings (cluster-scoped resources, and namespaced ones in every namespace),
    ``per_namespace`` through RoleBindings (there only)."""

    cluster: frozenset[Permission]
    per_namespace: dict[str, frozenset[Permission]]

    def allows(self, permission: Permission, namespace: str = "") -> bool:
        """``namespace``: where the request is (empty: cluster-scoped or across all namespaces)."""
        return permission in self.cluster or (
            bool(namespace) and permission in self.per_namespace.get(namespace, frozenset())
        )

    def everything(self) -> set[Permission]:
        return set(self.cluster).union(*self.per_namespace.values())


def grants(docs: Iterable[dict[str, Any]], service_account: str, namespace: str) -> Grants:
    """The permissions the rendered roles and bindings give ``namespace/service_account``."""
    docs = list(docs)
    roles = {("", doc["metadata"]["name"]): granted(doc) for doc in by_kind(docs, "ClusterRole")}
    roles |= {(doc["metadata"]["namespace"], doc["metadata"]["name"]): granted(doc) for doc in by_kind(docs, "Role")}
    subject = {"kind": "ServiceAccount", "name": service_account, "namespace": namespace}

    def bound(binding: dict[str, Any]) -> bool:
        return any({key: item.get(key) for key in subject} == subject for item in binding.get("subjects") or [])

    def role_of(binding: dict[str, Any], where: str) -> set[Permission]:
        ref = binding["roleRef"]
        return roles[("" if ref["kind"] == "ClusterRole" else where, ref["name"])]

    cluster: set[Permission] = set()
    for binding in by_kind(docs, "ClusterRoleBinding"):
        if bound(binding):
            cluster |= role_of(binding, "")
    per_namespace: dict[str, set[Permission]] = {}
    for binding in by_kind(docs, "RoleBinding"):
        if bound(binding):
            where = binding["metadata"]["namespace"]
            per_namespace.setdefault(where, set()).update(role_of(binding, where))
    return Grants(frozenset(cluster), {ns: frozenset(p) for ns, p in per_namespace.items()})


def load_e2e_harness() -> ModuleType:
    """The e2e harness module (tests/e2e/conftest.py), under its own name.

    Loaded by path: every test folder's conftest is called ``conftest``, so a plain import would
    pick whichever pytest loaded last.
    """
    name = "neuronfleet_e2e_harness"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "e2e" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def section(markdown: str, heading: str) -> str:
    """A guide's section under ``heading`` (a line of its own), up to the next ``## `` heading."""
    return markdown.split(heading + "\n", 1)[1].split("\n## ", 1)[0]


def shell_lines(markdown: str) -> list[str]:
    """The commands of a guide's console and sh blocks, continuations joined, comments dropped."""
    blocks = re.findall(r"^```(?:console|sh)\n(.*?)^```", markdown, re.M | re.S)
    lines = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("   #", 1)[0].split("  # ", 1)[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def helm_command(markdown: str, verb: str) -> str:
    """The one ``helm <verb>`` command of a guide's text."""
    (line,) = [line for line in shell_lines(markdown) if line.startswith(f"helm {verb} ")]
    return line
