"""kubectl against the sandbox's ResourceQuotas: the install guide's two quotas scoped by PriorityClass
each count only the pods of their classes, every scope kube-apiserver knows is applied, and a scope
or a hard quantity kube-apiserver refuses is refused with its words."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from fixtures_cluster import RunKubectl

#: The ``run_kubectl`` fixture (tests/fixtures_cluster.py): ``run_kubectl(*args, check=True)`` runs kubectl.

PRIORITY_CLASSES = "\n---\n".join(
    f"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {name}}}\nvalue: {value}\n"
    for name, value in (("neuronfleet-active", 1000), ("neuronfleet-warm", 900), ("neuronfleet-placeholder", -1))
)


def pod(
    name: str, priority_class: str | None = None, requests: str = "{cpu: 100m, memory: 100Mi}", extra: str = ""
) -> str:
    """A pod manifest; ``requests`` is a YAML flow mapping, empty for a pod that requests nothing."""
    resources = f", resources: {{requests: {requests}}}" if requests else ""
    lines = [
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:",
        f"  containers: [{{name: c, image: x{resources}}}]",
    ]
    if priority_class:
        lines.append(f"  priorityClassName: {priority_class}")
    if extra:
        lines.append(f"  {extra}")
    return "\n".join(lines) + "\n"


def guide_quotas(repo_root: Path) -> str:
    """The two scoped quotas docs/install-eks.md recommends, verbatim but in namespace default."""
    guide = (repo_root / "docs/install-eks.md").read_text()
    found = re.search(
        r"```yaml\n(apiVersion: v1\nkind: ResourceQuota\nmetadata: \{name: neuron-serving.*?)```", guide, re.S
    )
    assert found is not None, "the guide's quotas moved: update this test"
    return found.group(1).replace("namespace: search", "namespace: default")


def test_install_guide_quotas_count_only_their_priority_classes(
    run_kubectl: RunKubectl, repo_root: Path, tmp_path: Path
) -> None:
    def create(text: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        path = tmp_path / f"m{len(list(tmp_path.glob('m*.yaml')))}.yaml"
        path.write_text(text)
        return run_kubectl("create", "-f", str(path), check=check)

    create(PRIORITY_CLASSES)
    quotas = guide_quotas(repo_root)
    assert [q["metadata"]["name"] for q in yaml.safe_load_all(quotas)] == ["neuron-serving", "neuron-placeholders"]
    create(quotas)
    # More serving pods than the placeholders' quota holds (pods: 4): they are not placeholders.
    for i in range(5):
        create(pod(f"active-{i}", "neuronfleet-active"))
    create(pod("warm-0", "neuronfleet-warm"))
    # A compile Job's pod names no PriorityClass and may request nothing: neither quota's business.
    create(pod("compile", None, requests=""))
    for i in range(4):
        create(pod(f"placeholder-{i}", "neuronfleet-placeholder", requests="{cpu: 10m, memory: 10Mi}"))
    refused = create(pod("placeholder-4", "neuronfleet-placeholder", requests="{cpu: 10m, memory: 10Mi}"), check=False)
    assert refused.returncode != 0
    assert (
        'pods "placeholder-4" is forbidden: exceeded quota: neuron-placeholders, requested: pods=1, used: pods=4, '
        "limited: pods=4" in refused.stderr
    )
    # A serving pod that sets no memory request is refused by the serving quota alone.
    unset = create(pod("active-bare", "neuronfleet-active", requests="{cpu: 100m}"), check=False)
    assert "failed quota: neuron-serving: must specify requests.memory for: c" in unset.stderr

    # The quota controller's status counts the same pods: six serving (600m), four placeholders.
    run_kubectl(
        "wait", "--for=jsonpath={.status.used.requests\\.cpu}=600m", "resourcequota/neuron-serving", "--timeout=20s"
    )
    run_kubectl("wait", "--for=jsonpath={.status.used.pods}=4", "resourcequota/neuron-placeholders", "--timeout=20s")


def test_every_scope_selects_its_pods(run_kubectl: RunKubectl, tmp_path: Path) -> None:
    def create(text: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        path = tmp_path / f"m{len(list(tmp_path.glob('m*.yaml')))}.yaml"
        path.write_text(text)
        return run_kubectl("create", "-f", str(path), check=check)

    def quota(name: str, scoping: str) -> str:
        head = f"apiVersion: v1\nkind: ResourceQuota\nmetadata: {{name: {name}}}\n"
        return f"{head}spec:\n  hard: {{pods: '1'}}\n  {scoping}\n"

    create(PRIORITY_CLASSES)
    create(quota("best-effort", "scopes: [BestEffort]"))
    create(quota("terminating", "scopes: [Terminating]"))
    create(
        quota(
            "not-active",
            "scopeSelector: {matchExpressions: "
            "[{scopeName: PriorityClass, operator: NotIn, values: [neuronfleet-active, neuronfleet-warm]}]}",
        )
    )
    create(
        quota(
            "warm",
            "scopeSelector: {matchExpressions: [{scopeName: PriorityClass, operator: In, values: [neuronfleet-warm]}]}",
        )
    )
    create(
        quota(
            "cross-ns", "scopeSelector: {matchExpressions: [{scopeName: CrossNamespacePodAffinity, operator: Exists}]}"
        )
    )

    # NotIn takes in a pod without a PriorityClass (the label is absent); it is also BestEffort.
    create(pod("plain", None, requests=""))
    second = create(pod("plain-2", None, requests=""), check=False)
    assert "exceeded quota: best-effort, requested: pods=1, used: pods=1, limited: pods=1" in second.stderr
    # Requests make it NotBestEffort; NotIn still holds it: refused by not-active alone.
    burstable = create(pod("burstable", None), check=False)
    assert "exceeded quota: not-active" in burstable.stderr
    # The active and warm classes are out of not-active's scope; an activeDeadlineSeconds makes one Terminating.
    create(pod("active-job", "neuronfleet-active", extra="activeDeadlineSeconds: 600"))
    deadline = create(pod("active-job-2", "neuronfleet-active", extra="activeDeadlineSeconds: 60"), check=False)
    assert "exceeded quota: terminating" in deadline.stderr
    create(pod("active", "neuronfleet-active"))
    create(pod("warm-0", "neuronfleet-warm", requests="{cpu: 10m}"))
    assert (
        "exceeded quota: warm" in create(pod("warm-1", "neuronfleet-warm", requests="{cpu: 10m}"), check=False).stderr
    )
    affinity = (
        "affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
        "[{topologyKey: zone, namespaceSelector: {}, labelSelector: {matchLabels: {a: b}}}]}}"
    )
    create(pod("cross-0", "neuronfleet-active", extra=affinity))
    assert (
        "exceeded quota: cross-ns" in create(pod("cross-1", "neuronfleet-active", extra=affinity), check=False).stderr
    )


def test_scopes_kube_apiserver_refuses_are_refused(run_kubectl: RunKubectl, tmp_path: Path) -> None:
    def create(name: str, spec: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"apiVersion: v1\nkind: ResourceQuota\nmetadata: {{name: {name}}}\nspec:\n{spec}")
        return run_kubectl("create", "-f", str(path), check=False)

    # A PriorityClass scope caps pods, cpu and memory (and extended resources), not local disk.
    disk = create(
        "disk",
        "  hard: {requests.ephemeral-storage: 64Gi, requests.aws.amazon.com/neuroncore: '4'}\n"
        "  scopeSelector: {matchExpressions: [{scopeName: PriorityClass, operator: In, values: [a]}]}\n",
    )
    assert disk.returncode != 0
    assert (
        'The ResourceQuota "disk" is invalid: spec.scopeSelector.matchExpressions: Invalid value: '
        "core.ScopeSelector{MatchExpressions:[]core.ScopedResourceSelectorRequirement{core.ScopedResourceSelectorRequirement"
        '{ScopeName:"PriorityClass", Operator:"In", Values:[]string{"a"}}}}: unsupported scope applied to resource'
    ) in disk.stderr
    unknown = create("unknown", "  hard: {pods: '1'}\n  scopes: [Spot]\n")
    assert 'spec.scopes: Invalid value: []core.ResourceQuotaScope{"Spot"}: unsupported scope' in unknown.stderr
    operator = create(
        "operator",
        "  hard: {pods: '1'}\n"
        "  scopeSelector: {matchExpressions: [{scopeName: BestEffort, operator: In, values: [x]}]}\n",
    )
    assert (
        "spec.scopeSelector.matchExpressions.operator: Invalid value: \"In\": must be 'Exist' when scope is any of"
        in operator.stderr
    )
    conflict = create("conflict", "  hard: {pods: '1'}\n  scopes: [BestEffort, NotBestEffort]\n")
    assert "conflicting scopes" in conflict.stderr
    assert "No resources found" in run_kubectl("get", "resourcequota").stderr


def test_hard_quantities_kube_apiserver_refuses_are_refused(run_kubectl: RunKubectl, tmp_path: Path) -> None:
    def apply(name: str, hard: str, verb: str = "create") -> subprocess.CompletedProcess[str]:
        path = tmp_path / f"{name}-{verb}.yaml"
        path.write_text(f"apiVersion: v1\nkind: ResourceQuota\nmetadata: {{name: {name}}}\nspec:\n  hard: {hard}\n")
        return run_kubectl(verb, "-f", str(path), check=False)

    # One it cannot parse is not decoded at all (400, no field path), as resource.Quantity fails.
    for bad in ("'10 pods'", "abc", "'1.5.5'", "1e+", "true"):
        typo = apply("typo", f"{{pods: '2', requests.cpu: {bad}}}")
        assert typo.returncode != 0
        assert 'Error from server (BadRequest): error when creating "' in typo.stderr
        assert (
            'ResourceQuota in version "v1" cannot be handled as a ResourceQuota: quantities must match the '
            "regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        ) in typo.stderr, bad
    negative = apply("negative", "{pods: '2', requests.memory: '-1.5Gi', requests.cpu: '-1'}")
    # kubectl lists the causes one a line.
    assert negative.stderr.splitlines() == [
        'The ResourceQuota "negative" is invalid: ',
        '* spec.hard[requests.cpu]: Invalid value: "-1": must be greater than or equal to 0',
        '* spec.hard[requests.memory]: Invalid value: "-1536Mi": must be greater than or equal to 0',
    ]
    assert "No resources found" in run_kubectl("get", "resourcequota").stderr

    # An update is validated too, and a valid quota still admits pods.
    assert apply("fine", "{pods: '2', requests.cpu: '1'}").returncode == 0
    assert "must be greater than or equal to 0" in apply("fine", "{pods: '-2'}", verb="apply").stderr
    assert "quantities must match" in apply("fine", "{pods: two}", verb="replace").stderr
    assert run_kubectl("get", "resourcequota", "fine", "-o", "jsonpath={.spec.hard.pods}").stdout == "2"
    (tmp_path / "pod.yaml").write_text(pod("p1", None))
    run_kubectl("create", "-f", str(tmp_path / "pod.yaml"))
