"""The chart's ClusterRole against what the operator really calls.

The real operator (Kopf + reconcile, peering on) runs on the sandbox through a realistic flow: a new
InferenceDeployment starts a compile Job, a spec change supersedes it, a failed compile has its log
read, a compiled artifact brings the fleet up (pods, Service, PDB), ``kubectl scale`` up and down
(promote, drain, delete), someone edits the Service and the PDB (the operator patches them
back), then the object is deleted. Every API request of the operator (Kopf's
and the reconcile's clients, told apart from the test's own client by their User-Agent) is taken
from the sandbox's request log and mapped to the (apiGroup, resource[/subresource], verb) RBAC
would check. The test asserts both directions: the role allows every call, and grants nothing the
operator did not use, except what its client can call (below) and the allow-listed permissions
(each with its reason). It runs in both install modes: cluster-wide (ClusterKopfPeering) and
namespaced (``operator.watchNamespaces``: KopfPeering objects, and Kopf then lists and watches
namespaces).

A flow exercises only the paths it takes (a 409 on a pod create, answered by reading the pod, is
not one of them). So a second test derives, from the operator's source, every Kubernetes API
method its own clients can call (kubernetes_asyncio methods reached through ``KubeClient``'s API
attributes, in the modules of :data:`CLIENT_MODULES`), maps each to the permission RBAC checks
from the method's own path and HTTP method, and asserts the ClusterRole grants them all.
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
from chart_support import Permission, by_kind, granted, load_e2e_harness, render
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client import CustomObjectsApi

from neuronfleet.api.v1alpha1 import GROUP, PLURAL
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
    "cluster-wide": (
        [],
        [],
        {
            **{
                Permission("kopf.dev", "kopfpeerings", verb): "peering of a namespaced install (watchNamespaces)"
                for verb in ("list", "watch", "patch")
            },
            **BLOCK_OWNER_DELETION,
        },
    ),
    "namespaced": (
        [f"operator.watchNamespaces={{{NS}}}"],
        [NS],
        {
            **{
                Permission("kopf.dev", "clusterkopfpeerings", verb): "peering of a cluster-wide install"
                for verb in ("list", "watch", "patch")
            },
            **BLOCK_OWNER_DELETION,
        },
    ),
}

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


def permission_of(api_class: type, method: str, fill: dict[str, str]) -> Permission:
    """The permission RBAC checks for a generated API method: from the path and HTTP method the
    method sends (``call_api('/api/v1/namespaces/{namespace}/pods/{name}/log', 'GET', ...)``)."""
    source = inspect.getsource(getattr(api_class, f"{method}_with_http_info"))
    match = re.search(r"call_api\(\s*'([^']+)',\s*'(\w+)'", source)
    assert match, f"no call_api in {api_class.__name__}.{method}"
    path, http = match.groups()
    for key, value in fill.items():
        path = path.replace("{" + key + "}", value)
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if len(rest) > 2 and rest[0] == "namespaces" and rest[1] == "{namespace}":
        rest = rest[2:]
    resource, named, subresource = rest[0], len(rest) > 1, rest[2] if len(rest) > 2 else ""
    verb = {
        "GET": "get" if named else "list",
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
    }[http]
    return Permission(group, f"{resource}/{subresource}" if subresource else resource, verb)


def client_permissions() -> dict[Permission, set[str]]:
    """Every permission the operator's own API calls need, with the methods that need each."""
    classes = _client_api_classes()
    assert {"core", "batch"} <= set(classes), f"KubeClient's API attributes not found: {classes}"
    found: dict[Permission, set[str]] = {}
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


def operator_permissions(records: list[Any]) -> set[Permission]:
    used = set()
    for record in records:
        if record.user_agent != OPERATOR_AGENT and not record.user_agent.startswith("kopf/"):
            continue
        if not record.resource:
            continue  # /api, /apis, /version: discovery, allowed to every authenticated user
        resource = f"{record.resource}/{record.subresource}" if record.subresource else record.resource
        used.add(Permission(record.group, resource, record.verb))
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
    context.reconciler.kube.api_client.user_agent = OPERATOR_AGENT
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
        # Any: the generated stubs omit the `_content_type` keyword the methods accept.
        batch: Any = k8s.BatchV1Api(api)

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
        core: Any = k8s.CoreV1Api(api)
        policy: Any = k8s.PolicyV1Api(api)
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
async def test_cluster_role_allows_exactly_what_the_operator_uses(mode: str, tmp_path: Path) -> None:
    sets, namespaces, unexercised = MODES[mode]
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

    (role,) = by_kind(render(sets=sets), "ClusterRole")
    rules = role["rules"]
    assert all("*" not in rule.get(key, []) for rule in rules for key in ("apiGroups", "resources", "verbs"))
    allowed = granted(role)
    assert used, "the flow made no operator API call: the request log or the user agents are wrong"
    missing = sorted(str(p) for p in used - allowed)
    assert not missing, f"the ClusterRole denies calls the operator made: {missing}"
    # What the operator's client can call but the flow did not (the pod read after a 409): the
    # test below derives those.
    unused = sorted(str(p) for p in allowed - used - set(unexercised) - set(client_permissions()))
    assert not unused, f"the ClusterRole grants what the operator never used: {unused}"
    assert not [p for p in allowed if p.resource == "secrets"]


#: Calls of the operator's client made in one install mode only: (the mode, where).
ONLY_IN_MODE = {
    Permission("", "namespaces", "list"): ("namespaced", "run checks that the watched namespaces exist"),
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_cluster_role_allows_every_call_the_operators_client_can_make(mode: str) -> None:
    """Every API method the operator's own client can reach, taken or not by the flow above: e.g.
    the pod read after a 409 on a pod create (is it ours, or another controller's?)."""
    needed = {p: m for p, m in client_permissions().items() if ONLY_IN_MODE.get(p, (mode,))[0] == mode}
    # The derivation sees what it must: the typed APIs, the subresources, the custom objects API.
    assert {
        Permission("", "pods", "create"),
        Permission("", "pods", "get"),
        Permission("", "pods/log", "get"),
        Permission("policy", "poddisruptionbudgets", "patch"),
        Permission(GROUP, f"{PLURAL}/status", "patch"),
    } <= set(needed), sorted(map(str, needed))
    (role,) = by_kind(render(sets=MODES[mode][0]), "ClusterRole")
    missing = sorted(f"{p} (for {', '.join(sorted(needed[p]))})" for p in set(needed) - granted(role))
    assert not missing, f"the ClusterRole denies calls the operator's client makes: {missing}"
