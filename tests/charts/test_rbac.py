"""The chart's RBAC (its roles, and where each is bound) against what the operator really calls.

The real operator (Kopf + reconcile, peering on) runs on the sandbox through a realistic flow: a new
InferenceDeployment starts a compile Job, a spec change supersedes it, a failed compile has its log
read, a compiled artifact brings the fleet up (pods, Service, PDB), ``kubectl scale`` up and down
(promote, drain, delete), someone edits the Service and the PDB (the operator patches them
back), then the object is deleted. Every API request of the operator (Kopf's
and the reconcile's clients, told apart from the test's own client by their User-Agent) is taken
from the sandbox's request log and mapped to the (apiGroup, resource[/subresource], verb) RBAC
would check, and the namespace it is in. The test evaluates the chart's ClusterRoleBindings and
RoleBindings as RBAC does and asserts both directions: every call is allowed where it was made,
and nothing is granted that the operator did not use, except what its client can call (below)
and the allow-listed permissions (each with its reason). It runs in both install modes:
cluster-wide (ClusterKopfPeering) and namespaced (``operator.watchNamespaces``: KopfPeering
objects, Kopf then lists and watches namespaces, and the operator may write only in the watched
namespaces: cluster-wide it gets only what it did cluster-wide).

A flow exercises only the paths it takes (a 409 on a pod create, answered by reading the pod, is
not one of them). So a second test derives, from the operator's source, every Kubernetes API
method its own clients can call (kubernetes_asyncio methods reached through ``KubeClient``'s API
attributes, in the modules of :data:`CLIENT_MODULES`), maps each to the permission RBAC checks
and its scope from the method's own path and HTTP method, and asserts the chart grants them all.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from chart_support import Grants, Permission, by_kind, grants, load_e2e_harness, render
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client import CustomObjectsApi

from neuronfleet.api.v1alpha1 import GROUP, PLURAL
from neuronfleet.kube.client import KubeClient
from neuronfleet.run_command import build_context, operator_tasks
from neuronfleet.sandbox import NodeGroup, SandboxCluster

REPO = Path(__file__).resolve().parents[2]
NS = "search"
OPERATOR_AGENT = "neuronfleet-operator-under-test"
TEST_AGENT = "neuronfleet-rbac-test"

#: Granted in every mode though no request uses it: the sandbox does not run the admission plugin
#: that checks it.
BLOCK_OWNER_DELETION = {
    Permission(GROUP, f"{PLURAL}/finalizers", "update"): (
        "children set blockOwnerDeletion, which OwnerReferencesPermissionEnforcement (OpenShift) admits "
        "only with update on the owner's finalizers"
    )
}

#: Per operator mode: (chart --set values, namespaces the operator watches, permissions granted but
#: not exercised by the flow in that mode with the reason each is needed).
MODES: dict[str, tuple[list[str], list[str], dict[Permission, str]]] = {
    "cluster-wide": ([], [], BLOCK_OWNER_DELETION),
    "namespaced": ([f"operator.watchNamespaces={{{NS}}}"], [NS], BLOCK_OWNER_DELETION),
}
#: The chart's service account, as render() names it (release nf in neuronfleet-system).
SERVICE_ACCOUNT = ("nf-neuronfleet", "neuronfleet-system")


def chart_grants(mode: str) -> Grants:
    docs = render(sets=MODES[mode][0])
    for role in by_kind(docs, "ClusterRole") + by_kind(docs, "Role"):
        rules = role["rules"]
        assert all("*" not in rule.get(key, []) for rule in rules for key in ("apiGroups", "resources", "verbs"))
    return grants(docs, *SERVICE_ACCOUNT)


#: Requests the sandbox answers that RBAC does not check with a resource rule (discovery).
NON_RESOURCE = "non-resource"


#: The operator's modules that call the Kubernetes API with its own client (Kopf's calls are the
#: flow test's): where ``KubeClient`` wraps the generated API classes, and ``run``'s start-up checks.
CLIENT_MODULES = ("neuronfleet.kube.client", "neuronfleet.run_command")


def _client_api_classes() -> dict[str, type]:
    """``KubeClient``'s API attributes and their classes, from its ``__init__``
    (``self.core: Any = client.CoreV1Api(api_client)``)."""
    source = inspect.getsource(importlib.import_module("neuronfleet.kube.client").KubeClient.__init__)
    classes = {}
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        if isinstance(node, ast.AnnAssign | ast.Assign):
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            value = node.value
            if (
                isinstance(target, ast.Attribute)
                and isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and value.func.attr.endswith("Api")
            ):
                classes[target.attr] = getattr(k8s, value.func.attr)
    return classes


def _argument(module: Any, call: ast.Call | None, method: Any, param: str) -> str:
    """The constant a call passes for ``param`` (a literal or a module-level name), for the custom
    objects API, whose path takes its group and plural from the arguments."""
    if call is None:
        raise AssertionError(f"{method.__name__} is referenced without a call: its {param} cannot be read")
    names = [name for name in inspect.signature(method).parameters if name != "self"]
    arguments = dict(zip(names, call.args, strict=False)) | {k.arg: k.value for k in call.keywords if k.arg}
    node = arguments.get(param)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and isinstance(getattr(module, node.id, None), str):
        return str(getattr(module, node.id))
    raise AssertionError(f"{method.__name__}: {param} is not a constant: {ast.unparse(node) if node else 'missing'}")


def permission_of(api_class: type, method: str, fill: dict[str, str]) -> tuple[Permission, bool]:
    """The permission RBAC checks for a generated API method, and whether the request is in a
    namespace: from the path and HTTP method the method sends
    (``call_api('/api/v1/namespaces/{namespace}/pods/{name}/log', 'GET', ...)``)."""
    source = inspect.getsource(getattr(api_class, f"{method}_with_http_info"))
    match = re.search(r"call_api\(\s*'([^']+)',\s*'(\w+)'", source)
    assert match, f"no call_api in {api_class.__name__}.{method}"
    path, http = match.groups()
    for key, value in fill.items():
        path = path.replace("{" + key + "}", value)
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    namespaced = len(rest) > 2 and rest[0] == "namespaces" and rest[1] == "{namespace}"
    if namespaced:
        rest = rest[2:]
    resource, named, subresource = rest[0], len(rest) > 1, rest[2] if len(rest) > 2 else ""
    verb = {
        "GET": "get" if named else "list",
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
    }[http]
    return Permission(group, f"{resource}/{subresource}" if subresource else resource, verb), namespaced


def client_permissions() -> dict[tuple[Permission, bool], set[str]]:
    """Every permission the operator's own API calls need, whether in a namespace or not, with the
    methods that need each."""
    classes = _client_api_classes()
    assert {"core", "batch"} <= set(classes), f"KubeClient's API attributes not found: {classes}"
    found: dict[tuple[Permission, bool], set[str]] = {}
    for name in CLIENT_MODULES:
        module = importlib.import_module(name)
        tree = ast.parse(Path(module.__file__ or "").read_text())
        calls = {id(node.func): node for node in ast.walk(tree) if isinstance(node, ast.Call)}
        for node in ast.walk(tree):
            # <anything>.core.read_namespaced_pod, called or only referenced (a dict of readers).
            if not (
                isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr in classes
            ):
                continue
            api_class = classes[node.value.attr]
            method = getattr(api_class, node.attr, None)
            assert callable(method), f"{name}: {api_class.__name__} has no method {node.attr}"
            fill = {}
            if api_class is CustomObjectsApi:
                fill = {p: _argument(module, calls.get(id(node)), method, p) for p in ("group", "plural")}
            permission = permission_of(api_class, node.attr, fill)
            found.setdefault(permission, set()).add(f"{api_class.__name__}.{node.attr}")
    return found


def operator_permissions(records: list[Any]) -> set[tuple[Permission, str]]:
    """What the operator's requests needed, each with its namespace (empty: cluster-scoped, or a
    list or watch across all namespaces)."""
    used = set()
    for record in records:
        if record.user_agent != OPERATOR_AGENT and not record.user_agent.startswith("kopf/"):
            continue
        if not record.resource:
            continue  # /api, /apis, /version: discovery, allowed to every authenticated user
        resource = f"{record.resource}/{record.subresource}" if record.subresource else record.resource
        used.add((Permission(record.group, resource, record.verb), record.namespace))
    return used


async def _flow(cluster: SandboxCluster, tmp_path: Path, namespaces: list[str]) -> None:
    harness_module = load_e2e_harness()
    harness = harness_module.OperatorHarness(cluster, tmp_path)
    api = await harness.api()
    api.user_agent = TEST_AGENT
    # The peering object the chart's post-install hook creates.
    if namespaces:
        for namespace in namespaces:
            await harness.ensure_namespace(namespace)
            cluster.create("kopfpeerings", {"metadata": {"name": "neuronfleet"}}, namespace, group="kopf.dev")
    else:
        cluster.create("clusterkopfpeerings", {"metadata": {"name": "neuronfleet"}}, group="kopf.dev")
    await harness.ensure_priority_classes()
    context = await build_context(harness.settings, cluster.kubeconfig_path, clock=cluster.clock.wall)
    kube = context.reconciler.kube
    assert isinstance(kube, KubeClient)  # build_context's client
    kube.api_client.user_agent = OPERATOR_AGENT
    harness.context = context
    harness._tasks = list(
        await operator_tasks(context, namespaces=namespaces, peering_name="neuronfleet", priority=10, in_process=True)
    )
    try:
        manifest = harness.localize(
            harness_module.example(
                "bert-embeddings",
                scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0},
                warmPool={"mode": "Fixed", "pods": 1, "nodePlaceholders": 1},
            ),
            namespace=NS,
        )
        name = manifest["metadata"]["name"]
        batch = await harness.client(k8s.BatchV1Api)

        def jobs() -> list[dict[str, Any]]:
            return [j for j in cluster.list("jobs", NS, group="batch") if not j["metadata"].get("deletionTimestamp")]

        # 1. No artifact yet: a compile Job; a spec change supersedes (deletes) it.
        await harness.apply(manifest)
        first = (await harness.wait(jobs, what="a compile Job"))[0]["metadata"]["name"]
        await harness.patch_spec(NS, name, {"compile": {"extraArgs": ["--tag=v2"]}})
        await harness.wait(
            lambda: (
                [j for j in jobs() if j["metadata"]["name"] != first]
                and first not in {j["metadata"]["name"] for j in jobs()}
            ),
            what="the first compile Job superseded",
        )
        # 2. The compile fails: the operator reads its pod's log for the Compiled condition.
        second = jobs()[0]["metadata"]["name"]
        cluster.create(
            "pods",
            {
                "metadata": {"name": f"{second}-pod", "labels": {"job-name": second}},
                "spec": {"containers": [{"name": "compile", "image": "neuronserve"}], "nodeName": "nowhere"},
            },
            NS,
        )
        await batch.patch_namespaced_job_status(
            second,
            NS,
            {
                "status": {
                    "conditions": [
                        {
                            "type": "Failed",
                            "status": "True",
                            "reason": "BackoffLimitExceeded",
                            "message": "neuronx-cc exited 70",
                        }
                    ]
                }
            },
            _content_type="application/merge-patch+json",
        )
        await harness.wait(
            lambda: harness.condition(NS, name, "Compiled").get("reason") == "CompileFailed", what="CompileFailed"
        )
        # 3. A compiled artifact: the fleet comes up; scale up and down through the scale subresource.
        tagged = {
            **manifest,
            "spec": {**manifest["spec"], "compile": {**manifest["spec"]["compile"], "extraArgs": ["--tag=v3"]}},
        }
        harness.precompile(tagged, label="v3")
        await harness.patch_spec(NS, name, {"compile": {"extraArgs": ["--tag=v3"]}})
        ready = harness_module.ready
        await harness.wait(
            lambda: len([p for p in harness.pods(NS, name, "active") if ready(p)]) == 1, what="one active pod ready"
        )
        await harness.scale(NS, name, 3)
        await harness.wait(
            lambda: len([p for p in harness.pods(NS, name, "active") if ready(p)]) == 3, what="three active pods"
        )
        await harness.scale(NS, name, 1)
        await harness.wait(
            lambda: len(harness.pods(NS, name, "active")) == 1 and not harness.pods(NS, name, "draining"),
            timeout=300,
            what="scaled down to one, drained",
        )
        # 4. Drift: someone edits the Service and the PDB; the operator patches them back.
        core, policy = await harness.client(k8s.CoreV1Api), await harness.client(k8s.PolicyV1Api)
        await core.patch_namespaced_service(
            name, NS, {"spec": {"selector": {f"{GROUP}/role": "warm"}}}, _content_type="application/merge-patch+json"
        )
        await policy.patch_namespaced_pod_disruption_budget(
            name, NS, {"spec": {"minAvailable": 5}}, _content_type="application/merge-patch+json"
        )
        await harness.wait(
            lambda: (
                (cluster.get("services", name, NS) or {})["spec"]["selector"][f"{GROUP}/role"] == "active"
                and (cluster.get("poddisruptionbudgets", name, NS, group="policy") or {})["spec"]["minAvailable"] != 5
            ),
            what="the Service and the PDB repaired",
        )
        # 5. Deletion: garbage collection removes the children; the operator has nothing to do.
        await k8s.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, "v1alpha1", NS, PLURAL, name)
        await harness.wait(
            lambda: not [p for p in cluster.list("pods", NS) if p["metadata"]["name"] != f"{second}-pod"],
            timeout=300,
            what="children collected",
        )
    finally:
        await harness.close()


@pytest.mark.looptime
@pytest.mark.parametrize("mode", sorted(MODES))
async def test_rbac_allows_exactly_what_the_operator_uses(mode: str, tmp_path: Path) -> None:
    _, namespaces, unexercised = MODES[mode]
    groups = [NodeGroup("inf2-serving", "inf2.xlarge", count=2, zones=("us-east-1a", "us-east-1b"), max_nodes=6)]
    harness_module = load_e2e_harness()
    async with SandboxCluster(
        node_groups=groups,
        crd_dir=REPO / "crds",
        kopf_peering=True,
        cold_start=harness_module.FAST_START,
        provisioning_delay_s=5.0,
        neuron_scheduler_name=harness_module.NEURON_SCHEDULER,
    ) as cluster:
        await _flow(cluster, tmp_path, namespaces)
        used = operator_permissions(cluster.request_log)

    rights = chart_grants(mode)
    assert used, "the flow made no operator API call: the request log or the user agents are wrong"
    missing = sorted(f"{p} in {ns or 'the cluster'}" for p, ns in used if not rights.allows(p, ns))
    assert not missing, f"the chart's RBAC denies calls the operator made: {missing}"
    # What the operator's client can call but the flow did not (the pod read after a 409): the
    # test below derives those.
    derived = {p for p, _ in client_permissions()}
    unused = sorted(map(str, rights.everything() - {p for p, _ in used} - set(unexercised) - derived))
    assert not unused, f"the chart's RBAC grants what the operator never used: {unused}"
    if namespaces:
        # Namespaced: cluster-wide only what the operator did cluster-wide (nodes, CRDs,
        # namespaces); everything else only in the watched namespaces.
        cluster_derived = {p for p, in_namespace in client_permissions() if not in_namespace}
        wide = sorted(map(str, rights.cluster - {p for p, ns in used if not ns} - cluster_derived))
        assert not wide, f"a namespaced install grants cluster-wide what the operator does in namespaces: {wide}"
        assert set(rights.per_namespace) == set(namespaces)
    assert not [p for p in rights.everything() if p.resource == "secrets"]


#: Calls of the operator's client made in one install mode only: (the mode, where).
ONLY_IN_MODE = {
    Permission("", "namespaces", "list"): ("namespaced", "run checks that the watched namespaces exist"),
    Permission("kopf.dev", "clusterkopfpeerings", "list"): ("cluster-wide", "run checks its ClusterKopfPeering"),
    Permission("kopf.dev", "kopfpeerings", "list"): ("namespaced", "run checks the watched namespaces' KopfPeerings"),
}
#: Likewise, a call at one scope (namespaced or not) only: (the mode, where).
ONLY_IN_MODE_AT_SCOPE = {
    (Permission("", "pods", "list"), False): ("cluster-wide", "run checks it may list pods across the cluster"),
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_rbac_allows_every_call_the_operators_client_can_make(mode: str) -> None:
    """Every API method the operator's own client can reach, taken or not by the flow above: e.g.
    the pod read after a 409 on a pod create (is it ours, or another controller's?). A namespaced
    call must be allowed in every watched namespace (in any, for a cluster-wide install), a
    cluster-scoped one cluster-wide."""
    needed = {
        call: methods
        for call, methods in client_permissions().items()
        if ONLY_IN_MODE_AT_SCOPE.get(call, ONLY_IN_MODE.get(call[0], (mode,)))[0] == mode
    }
    # The derivation sees what it must: the typed APIs, the subresources, the custom objects API.
    assert {
        (Permission("", "pods", "create"), True),
        (Permission("", "pods", "get"), True),
        (Permission("", "pods/log", "get"), True),
        (Permission("", "nodes", "list"), False),
        (Permission("policy", "poddisruptionbudgets", "patch"), True),
        (Permission(GROUP, f"{PLURAL}/status", "patch"), True),
    } <= set(needed), sorted(map(str, needed))
    rights = chart_grants(mode)
    where = MODES[mode][1] or [NS]
    missing = sorted(
        f"{p} in {ns or 'the cluster'} (for {', '.join(sorted(methods))})"
        for (p, in_namespace), methods in needed.items()
        for ns in (where if in_namespace else [""])
        if not rights.allows(p, ns)
    )
    assert not missing, f"the chart's RBAC denies calls the operator's client makes: {missing}"


def test_a_namespaced_install_can_write_nowhere_else() -> None:
    """With watchNamespaces the operator's rights in a namespace it does not watch are read-only
    and cluster-scoped: no pod, Job or custom resource write anywhere but in its namespaces."""
    rights = chart_grants("namespaced")
    writes = {"create", "patch", "update", "delete", "deletecollection"}
    assert not [str(p) for p in rights.cluster if p.verb in writes]
    assert not [p for p in rights.cluster if p.resource in ("pods", "jobs", "services", PLURAL)]
    assert Permission("", "pods", "create") in rights.per_namespace[NS]
    assert not rights.allows(Permission("", "pods", "create"), "kube-system")
