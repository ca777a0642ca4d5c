"""The Helm chart with the real helm 4 binary: lint, render, validate, install on the sandbox.

- ``helm lint --strict`` with the default and the CI values (tests/charts/values-ci.yaml);
- ``helm template`` output (CRDs included) validated with kubernetes-validate against the
  Kubernetes 1.34 schemas in strict mode (unknown fields fail). Custom resources have no schema
  there: the kopf.dev peering objects are validated against the peering CRD the chart renders; the
  Prometheus Operator PodMonitor is checked by the fields the relabeling needs (its CRD is not
  vendored here), its PrometheusRule by promtool (test_alert_rules.py);
- every pod template against the restricted Pod Security profile (``pod_security``);
- ``helm install`` / ``helm uninstall`` against the sandbox API server over HTTP (its storage-only
  apps, rbac and Secret resources are what helm's release storage and the chart need).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from chart_support import CHART, CI_VALUES, MINIMAL_VALUES, by_kind, grants, helm, render
from pod_security import pod_spec_of, restricted_violations

from fixtures_cluster import create_namespaces
from neuronfleet.api.v1alpha1 import DEFAULT_IMAGE, InferenceDeployment
from neuronfleet.cli import build_parser
from neuronfleet.kube.builders import build_priority_classes
from neuronfleet.planning.admission import OperatorAccount
from neuronfleet.planning.placement import DAEMONSET_HEADROOM, Headroom, headroom_from_quantities
from neuronfleet.reconcile import OperatorSettings
from neuronfleet.run_command import (
    KNOWN_VARIABLES,
    RunSetupError,
    check_variables,
    daemonset_headroom,
    device_group_id,
    operator_account,
    prometheus_credentials,
    prometheus_url_policy,
    resolve_defaults,
    workload_service_accounts,
)
from neuronfleet.sandbox.cluster import SandboxCluster, ThreadedSandboxCluster

KUBERNETES_VERSION = "1.34.0"
VALUES = {"default": [MINIMAL_VALUES], "ci": [CI_VALUES]}


@pytest.fixture(scope="module", params=sorted(VALUES))
def rendered(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(VALUES[request.param], include_crds=True)


@pytest.mark.parametrize("values", sorted(VALUES))
def test_helm_lint_strict(values: str) -> None:
    args = ["lint", "--strict", str(CHART)] + [arg for path in VALUES[values] for arg in ("--values", str(path))]
    result = helm(*args)
    assert result.returncode == 0, result.stdout + result.stderr


def test_manifests_valid_for_kubernetes_1_34(rendered: list[dict[str, Any]]) -> None:
    peering_schemas = {
        crd["spec"]["names"]["kind"]: crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for crd in by_kind(rendered, "CustomResourceDefinition")
        if crd["spec"]["group"] == "kopf.dev"
    }
    custom: list[str] = []
    for doc in rendered:
        name = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["apiVersion"] == "kopf.dev/v1":
            jsonschema.validate(doc, peering_schemas[doc["kind"]])
            custom.append(doc["kind"])
            continue
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            custom.append(doc["kind"])
            continue
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name} is invalid for Kubernetes {KUBERNETES_VERSION}: {exc.message} at {list(exc.path)}")
    # Nothing else escaped the schema check.
    assert set(custom) <= {"ClusterKopfPeering", "KopfPeering", "PodMonitor", "PrometheusRule"}
    assert {"Deployment", "ClusterRole", "ClusterRoleBinding", "ServiceAccount", "PriorityClass"} <= {
        d["kind"] for d in rendered
    }
    crds = {crd["metadata"]["name"] for crd in by_kind(rendered, "CustomResourceDefinition")}
    assert "inferencedeployments.serving.neuronfleet.dev" in crds


def test_pod_templates_meet_restricted_pod_security(rendered: list[dict[str, Any]]) -> None:
    pods = [(doc["metadata"]["name"], pod_spec_of(doc)) for doc in rendered]
    pods_found = [(name, pod) for name, pod in pods if pod is not None]
    assert pods_found, "no pod template rendered"
    for name, pod in pods_found:
        assert restricted_violations(pod) == [], name
        for container in pod["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_pod_security_check_reports_each_violation() -> None:
    pod = {
        "hostNetwork": True,
        "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
        "containers": [
            {
                "name": "bad",
                "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
                "ports": [{"containerPort": 80, "hostPort": 80}],
            }
        ],
    }
    problems = "\n".join(restricted_violations(pod))
    for expected in (
        "hostNetwork",
        "hostPath",
        "privileged",
        "allowPrivilegeEscalation",
        "runAsNonRoot",
        "seccomp",
        "drop ALL",
        "SYS_ADMIN",
        "hostPort",
    ):
        assert expected in problems


def test_priority_classes_are_the_operators() -> None:
    """Same names, values and preemption as the operator's builder; placeholders in [-10, 0)."""
    chart = {pc["metadata"]["name"]: pc for pc in by_kind(render(), "PriorityClass")}
    for wanted in build_priority_classes():
        got = chart[wanted["metadata"]["name"]]
        assert (got["value"], got["preemptionPolicy"], got["globalDefault"]) == (
            wanted["value"],
            wanted["preemptionPolicy"],
            wanted["globalDefault"],
        )
    assert -10 <= chart["neuronfleet-placeholder"]["value"] < 0


def _operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = by_kind(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_default_install_peers_cluster_wide() -> None:
    docs = render()
    (deployment,) = by_kind(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    container = _operator_container(docs)
    assert "--peering=neuronfleet" in container["args"]
    assert "--priority" in container["args"][0]
    assert {e["name"] for e in container["env"]} >= {"POD_ID", "NEURONFLEET_ARTIFACT_STORE"}
    (peering,) = by_kind(docs, "ClusterKopfPeering")
    assert peering["metadata"]["name"] == "neuronfleet"
    assert "post-install" in peering["metadata"]["annotations"]["helm.sh/hook"]
    assert not by_kind(docs, "PodMonitor")


def test_the_peering_object_is_rendered_only_while_it_is_absent(tmp_path: Path) -> None:
    """Rendered against a cluster (``--dry-run=server``, as install and upgrade render), the peering
    object is a hook only while it does not exist: an upgrade never deletes and recreates it (that
    empties the keep-alives in its status, and the standby acts beside the leader until the next
    one). Without a cluster it is rendered, as on a first install, as a post-install hook (its CRD
    is a template, served only once the release's resources are applied)."""
    (offline,) = by_kind(render(), "ClusterKopfPeering")
    assert "post-install" in offline["metadata"]["annotations"]["helm.sh/hook"]
    with ThreadedSandboxCluster(kopf_peering=True) as cluster:
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig_path),
            "HELM_CACHE_HOME": str(tmp_path / "cache"),
            "HELM_CONFIG_HOME": str(tmp_path / "config"),
            "HELM_DATA_HOME": str(tmp_path / "data"),
        }

        def peerings(*sets: str) -> list[tuple[str, str | None]]:
            args = ["template", "nf", str(CHART), "--dry-run=server", "--namespace", "default"]
            # The sandbox serves the peering CRDs already (not this release's: it must not take them).
            args += ["--values", str(MINIMAL_VALUES), "--set", "peering.createCRDs=false"]
            result = helm(*args, *(arg for item in sets for arg in ("--set", item)), env=env)
            assert result.returncode == 0, result.stderr
            docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
            return sorted(
                (doc["kind"], doc["metadata"].get("namespace")) for doc in docs if doc["apiVersion"] == "kopf.dev/v1"
            )

        assert peerings() == [("ClusterKopfPeering", None)]
        cluster.call(lambda c: c.create("clusterkopfpeerings", {"metadata": {"name": "neuronfleet"}}, group="kopf.dev"))
        assert peerings() == []
        # Namespaced: the same, per watched namespace.
        create_namespaces(cluster, "team-a", "team-b")
        cluster.call(
            lambda c: c.create("kopfpeerings", {"metadata": {"name": "neuronfleet"}}, "team-a", group="kopf.dev")
        )
        assert peerings("operator.watchNamespaces={team-a,team-b}") == [("KopfPeering", "team-b")]


def test_a_namespaced_install_needs_its_namespaces_first(tmp_path: Path) -> None:
    """Against a cluster, a watched namespace that does not exist fails the render with what to do,
    before anything is applied (it failed the post-install hook, after the rest was installed)."""
    with ThreadedSandboxCluster(kopf_peering=True) as cluster:
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig_path), "HELM_CONFIG_HOME": str(tmp_path)}
        args = ["template", "nf", str(CHART), "--dry-run=server", "--namespace", "default"]
        args += ["--values", str(MINIMAL_VALUES), "--set", "peering.createCRDs=false"]
        args += ["--set", "operator.watchNamespaces={default,team-a,team-b}"]
        result = helm(*args, env=env)
        assert result.returncode != 0
        assert (
            "operator.watchNamespaces: namespaces team-a, team-b do not exist. Create the watched namespaces "
            "first (kubectl create namespace team-a team-b)"
        ) in result.stderr
        create_namespaces(cluster, "team-a", "team-b")
        result = helm(*args, env=env)
        assert result.returncode == 0, result.stderr
    # Without a cluster (helm template) nothing can be looked up: it renders.
    assert by_kind(render(sets=["operator.watchNamespaces={team-a}"]), "KopfPeering")


def test_ci_values_reach_the_operator() -> None:
    docs = render([CI_VALUES])
    container = _operator_container(docs)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NEURONFLEET_ARTIFACT_STORE"] == "s3://neuronfleet-ci-artifacts/compiled/"
    assert env["NEURONFLEET_NEURON_SCHEDULER"] == "my-scheduler"
    assert (env["NEURONFLEET_DAEMONSET_HEADROOM_CPU"], env["NEURONFLEET_DAEMONSET_HEADROOM_MEMORY"]) == ("1500m", "2Gi")
    assert env["NEURONFLEET_PROMETHEUS_URL"] == "http://prometheus-operated.monitoring.svc:9090"
    assert (
        env["NEURONFLEET_MODEL_SERVER_IMAGE"] == "123456789012.dkr.ecr.us-east-1.amazonaws.com/neuronserve:0.1.0-neuron"
    )
    assert (env["NEURONFLEET_COMPILE_SERVICE_ACCOUNT"], env["NEURONFLEET_SERVING_SERVICE_ACCOUNT"]) == (
        "neuronfleet-compile",
        "neuronfleet-serving",
    )
    assert env["NEURONFLEET_DEVICE_GROUP_ID"] == "994"
    assert env["NEURONFLEET_PROMETHEUS_ALLOWED_URLS"] == (
        "http://prometheus-operated.monitoring.svc:9090,https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-ci"
    )
    assert {"--namespace=search", "--namespace=chat", "--interval=5", "--verbose"} <= set(container["args"])
    # Namespaced operator: a KopfPeering and a RoleBinding per namespace, and Kopf may follow
    # namespaces (cluster-wide).
    assert sorted(p["metadata"]["namespace"] for p in by_kind(docs, "KopfPeering")) == ["chat", "search"]
    assert sorted(b["metadata"]["namespace"] for b in by_kind(docs, "RoleBinding")) == ["chat", "search"]
    (role,) = [r for r in by_kind(docs, "ClusterRole") if r["metadata"]["name"] == "nf-neuronfleet"]
    assert any("namespaces" in rule["resources"] for rule in role["rules"])
    (monitor,) = [m for m in by_kind(docs, "PodMonitor") if m["metadata"]["name"].endswith("-runtime")]
    relabel = {r["targetLabel"]: r["sourceLabels"] for r in monitor["spec"]["podMetricsEndpoints"][0]["relabelings"]}
    assert relabel["deployment"] == ["__meta_kubernetes_pod_label_serving_neuronfleet_dev_deployment"]
    assert relabel["role"] == ["__meta_kubernetes_pod_label_serving_neuronfleet_dev_role"]
    assert relabel["namespace"] == ["__meta_kubernetes_namespace"]
    (rule,) = by_kind(docs, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "prometheus"


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("priorityClasses.placeholderValue=-20", "placeholderValue"),
        ("operator.prometheusUrl=prometheus:9090", "prometheusUrl"),
        ("operator.artifactStore=bucket/prefix", "artifactStore"),
        # A directory would be a different one in the operator's, the Jobs' and the pods' filesystems.
        ("operator.artifactStore=/data/artifacts", "artifactStore"),
        # S3 takes '//' after the bucket for a key starting with '/': refused, as in the CRD.
        ("operator.artifactStore=s3://acme-artifacts//compiled", "artifactStore"),
        ("replicaCont=2", "replicaCont"),
        ("peering.enabled=false", "needs peering.enabled=true"),
        # The pod runs as non-root with every capability dropped: no port below 1024.
        ("operator.metricsPort=80", "/operator/metricsPort"),
        ("operator.metricsPort=8080", "operator.metricsPort and liveness.port are both 8080"),
        # An operator PodMonitor asked for with the metrics off was left out without a word.
        (
            "monitoring.operatorPodMonitor.enabled=true,operator.metricsPort=0",
            "monitoring.operatorPodMonitor.enabled: the PodMonitor scrapes the operator's metrics, "
            "which operator.metricsPort=0 turns off",
        ),
        # An env value is a string in Kubernetes: the schema says so, not the API server at apply.
        ("operator.extraEnv[0].name=WORKERS,operator.extraEnv[0].value=4", "/operator/extraEnv/0/value"),
        # Names of objects and label values: DNS-1123 labels.
        ("nameOverride=Neuron_Fleet", "/nameOverride"),
        ("fullnameOverride=nf.operator", "/fullnameOverride"),
        # The Deployment's selector is the chart's: a pod label overriding it would orphan the pods.
        (
            "podLabels.app\\.kubernetes\\.io/instance=other",
            "podLabels: app.kubernetes.io/instance is a selector label of the operator's Deployment",
        ),
        ("resources.requests.memory=lots", "/resources/requests/memory"),
        ("resources.limits.cpu=-1", "/resources/limits/cpu"),
        ("resources.request.cpu=1", "/resources"),
        ("operator.reconcileIntervalSeconds=soon", "/operator/reconcileIntervalSeconds"),
        # The operator refuses a CPU quantity in bytes at start-up: the schema refuses it first.
        ("operator.daemonSetHeadroom.cpu=2Gi", "/operator/daemonSetHeadroom/cpu"),
        ("operator.daemonSetHeadroom.memory=lots", "/operator/daemonSetHeadroom/memory"),
        # A pod naming an account that is no DNS-1123 subdomain is refused: the schema refuses it first.
        ("workloads.compileServiceAccount=Compile_SA", "/workloads/compileServiceAccount"),
        ("workloads.servingSA=reader", "servingSA"),
        # Accounts to create need names and namespaces; one account cannot carry two IAM roles.
        (
            "workloads.serviceAccounts.create=true,workloads.compileServiceAccount=c",
            "needs workloads.serviceAccounts.namespaces",
        ),
        (
            "workloads.serviceAccounts.create=true,workloads.serviceAccounts.namespaces={search}",
            "needs the accounts' names",
        ),
        (
            "workloads.serviceAccounts.create=true,workloads.serviceAccounts.namespaces={search},"
            "workloads.compileServiceAccount=nf,workloads.servingServiceAccount=nf,"
            "workloads.serviceAccounts.servingAnnotations.role=reader",
            "both nf, with different annotations",
        ),
        # A workload account named like the operator's own, in the release's namespace ("default"
        # here), was rendered as a second definition of it and replaced it.
        (
            "workloads.serviceAccounts.create=true,workloads.serviceAccounts.namespaces={search,default},"
            "workloads.compileServiceAccount=nf-neuronfleet",
            "workloads.compileServiceAccount is nf-neuronfleet, the operator's own ServiceAccount",
        ),
        (
            "serviceAccount.create=false,serviceAccount.name=ops,workloads.serviceAccounts.create=true,"
            "workloads.serviceAccounts.namespaces={default},workloads.servingServiceAccount=ops",
            "workloads.servingServiceAccount is ops, the operator's own ServiceAccount",
        ),
        ("workloads.serviceAccounts.namespaces={Search}", "/workloads/serviceAccounts/namespaces/0"),
        # supplementalGroups [0] would give the pods root's group.
        ("workloads.deviceGroupId=0", "/workloads/deviceGroupId"),
        ("workloads.deviceGroupId=neuron", "/workloads/deviceGroupId"),
        # Prometheus credentials: one Authorization header, basic auth whole, a URL to send them to.
        (
            "operator.prometheusUrl=http://p:9090,operator.prometheusAuth.existingSecret=s,"
            "operator.prometheusAuth.bearerTokenKey=t,operator.prometheusAuth.usernameKey=u,"
            "operator.prometheusAuth.passwordKey=p",
            "bearerTokenKey and usernameKey/passwordKey are both set",
        ),
        (
            "operator.prometheusUrl=http://p:9090,operator.prometheusAuth.existingSecret=s,"
            "operator.prometheusAuth.usernameKey=u",
            "basic auth needs both usernameKey and passwordKey",
        ),
        ("operator.prometheusAuth.existingSecret=s", "existingSecret is set but none of its keys"),
        (
            "operator.prometheusUrl=http://p:9090,operator.prometheusAuth.existingSecret=s,"
            "operator.prometheusAuth.bearerTokenKey=t,operator.prometheusAuth.sigv4Region=us-east-1",
            "sigv4Region and bearerTokenKey or basic auth are both set",
        ),
        ("operator.prometheusAuth.sigv4Region=us-east-1", "sigv4Region is set but operator.prometheusUrl is empty"),
        (
            "operator.prometheusUrl=http://p:9090,operator.prometheusAuth.sigv4Region=us-east1",
            "/operator/prometheusAuth/sigv4Region",
        ),
        (
            "operator.prometheusAuth.existingSecret=s,operator.prometheusAuth.bearerTokenKey=t",
            "operator.prometheusUrl is empty",
        ),
        ("operator.prometheusAuth.bearerKey=t", "bearerKey"),
        # An allowed URL is scheme://host[:port][/path]: no user-info, query or list in one entry.
        ("operator.prometheusAllowedUrls={http://user@prom:9090}", "/operator/prometheusAllowedUrls/0"),
        ("operator.prometheusAllowedUrls={prom.monitoring:9090}", "/operator/prometheusAllowedUrls/0"),
        ("operator.prometheusRefuseQueryOverrides=yes", "/operator/prometheusRefuseQueryOverrides"),
        # A fraction comes through --set as a string: the range is still checked.
        (
            "operator.reconcileIntervalSeconds=3600.5",
            "operator.reconcileIntervalSeconds is 3600.5: it must be at least 1",
        ),
        # A tiny interval is a busy loop as 0 is: as a number the schema refuses it, as a string the chart.
        (
            "operator.reconcileIntervalSeconds=0.0000001",
            "operator.reconcileIntervalSeconds is 0.0000001: it must be at least 1",
        ),
        ("operator.reconcileIntervalSeconds=0", "/operator/reconcileIntervalSeconds"),
        # Alert thresholds: shares between 0 and 1 (a number, or a fraction as --set passes it),
        # Prometheus durations.
        ("monitoring.alerts.requestsRejected.ratio=5", "/monitoring/alerts/requestsRejected/ratio"),
        ("monitoring.alerts.latencySLO.objective=99%", "/monitoring/alerts/latencySLO/objective"),
        ("monitoring.alerts.operatorDown.for=5min", "/monitoring/alerts/operatorDown/for"),
        ("monitoring.alerts.keepFiringFor=5 minutes", "/monitoring/alerts/keepFiringFor"),
        ("monitoring.alerts.ruleLabels.release=x", "ruleLabels"),
        # Never the namespace's default account: it would get the operator's cluster-wide rights.
        ("serviceAccount.create=false", "serviceAccount.create is false but serviceAccount.name is empty"),
        # Nor named: every pod there naming no account would run with the operator's rights.
        (
            "serviceAccount.create=false,serviceAccount.name=default",
            "serviceAccount.name is default, the namespace's default account: every pod of namespace default "
            "that names no account would run with the operator's cluster-wide rights",
        ),
        ("serviceAccount.create=true,serviceAccount.name=default", "serviceAccount.name is default"),
        # Nor by its resolved name: the release's full name when serviceAccount.name is empty.
        (
            "serviceAccount.create=true,fullnameOverride=default",
            "the operator's account would be the namespace's default account",
        ),
        (
            "serviceAccount.create=false,serviceAccount.name=nf-operator,serviceAccount.annotations.a=b",
            "serviceAccount.annotations are set but serviceAccount.create is false",
        ),
    ],
)
def test_bad_values_fail_with_a_clear_message(setting: str, complaint: str) -> None:
    result = helm("template", "nf", str(CHART), "--values", str(MINIMAL_VALUES), "--set", setting)
    assert result.returncode != 0
    assert complaint in result.stderr


def test_the_default_install_reconciles_at_the_operators_own_defaults() -> None:
    """The chart's values and ``neuronfleet run`` agree on the cadence: an operator installed with
    Helm and one run by hand reconcile alike unless told otherwise."""
    args = _operator_container(render([MINIMAL_VALUES]))["args"]
    parsed = resolve_defaults(build_parser().parse_args(["run"]))
    assert f"--interval={parsed.interval:g}" in args, args
    assert f"--max-concurrent-reconciles={parsed.max_concurrent_reconciles}" in args, args
    assert (parsed.interval, parsed.max_concurrent_reconciles) == (
        OperatorSettings.interval_seconds,
        OperatorSettings.max_concurrent_reconciles,
    )


def test_fractions_and_quantities_given_with_set_are_accepted() -> None:
    """``--set`` hands a fraction over as a string ("0.5"): the schema takes numeric strings where
    the chart wants a number, and Kubernetes quantities as strings or numbers."""
    docs = render(
        sets=[
            "operator.reconcileIntervalSeconds=1.5",
            "monitoring.dashboard.usdPerReplicaHour=1.97",
            "resources.requests.cpu=0.25,resources.requests.memory=256Mi,resources.limits.memory=1Gi",
            "podLabels.team=search,nameOverride=nf-operator",
        ]
    )
    container = _operator_container(docs)
    assert "--interval=1.5" in container["args"]
    assert resolve_defaults(build_parser().parse_args(["run", "--interval=1.5"])).interval == 1.5
    # As a YAML number (a values file, --set-json) the schema holds the floor of 1 s.
    tiny = helm(
        "template",
        "nf",
        str(CHART),
        "--values",
        str(MINIMAL_VALUES),
        "--set-json",
        "operator.reconcileIntervalSeconds=0.5",
    )
    assert tiny.returncode != 0 and "/operator/reconcileIntervalSeconds" in tiny.stderr
    assert container["resources"]["requests"] == {"cpu": "0.25", "memory": "256Mi"}
    # A DaemonSet allowance as YAML numbers (a values file, --set-json) reaches the operator as quantities.
    result = helm(
        "template",
        "nf",
        str(CHART),
        "--values",
        str(MINIMAL_VALUES),
        "--set-json",
        'operator.daemonSetHeadroom={"cpu": 1.5, "memory": 536870912}',
    )
    assert result.returncode == 0, result.stderr
    numeric = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    env = {e["name"]: e.get("value") for e in _operator_container(numeric)["env"]}
    cpu, memory = env["NEURONFLEET_DAEMONSET_HEADROOM_CPU"], env["NEURONFLEET_DAEMONSET_HEADROOM_MEMORY"]
    assert headroom_from_quantities(cpu, memory) == Headroom(1500, 512)
    (dashboard,) = [cm for cm in by_kind(docs, "ConfigMap") if cm["metadata"]["name"].endswith("-dashboard")]
    assert '"query": "1.97"' in dashboard["data"]["neuronfleet-fleet.json"]
    for doc in docs:
        if doc["apiVersion"].split("/")[0] not in ("kopf.dev", "monitoring.coreos.com"):
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    # A quantity as a YAML number (values files, --set-json) is one too; an env value given as a
    # string (--set-string) passes.
    base = ("template", "nf", str(CHART), "--values", str(MINIMAL_VALUES))
    result = helm(*base, "--set-json", "resources.limits.cpu=1.5")
    assert result.returncode == 0, result.stderr
    result = helm(*base, "--set", "operator.extraEnv[0].name=WORKERS", "--set-string", "operator.extraEnv[0].value=4")
    assert result.returncode == 0, result.stderr
    assert {"name": "WORKERS", "value": "4"} in _operator_container(
        [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    )["env"]


def test_without_an_artifact_store_the_install_says_what_to_set() -> None:
    # The store the operator, its compile Jobs and its serving pods share: nothing works without it.
    result = helm("template", "nf", str(CHART))
    assert result.returncode != 0
    assert "operator.artifactStore is required: an s3://bucket/prefix" in result.stderr


def _notes(*sets: str) -> str:
    """The NOTES.txt an install prints (a client-side dry run: no cluster)."""
    args = ["install", "nf", str(CHART), "--dry-run=client", "--namespace", "neuronfleet-system"]
    args += ["--values", str(MINIMAL_VALUES)]
    result = helm(*args, *(arg for item in sets for arg in ("--set", item)))
    assert result.returncode == 0, result.stderr
    return result.stdout.split("\nNOTES:\n", 1)[1]


def test_notes_print_peering_commands_kubectl_accepts() -> None:
    # kubectl refuses a name with -A ("a resource cannot be retrieved by name across all namespaces").
    namespaced = _notes("operator.watchNamespaces={search,ml}")
    assert "kubectl -n search get kopfpeering neuronfleet -o yaml" in namespaced
    assert "kubectl -n ml get kopfpeering neuronfleet -o yaml" in namespaced
    assert " -A neuronfleet" not in namespaced
    assert "kubectl get clusterkopfpeering neuronfleet -o yaml" in _notes()


def test_notes_print_the_prometheus_url_without_its_credentials() -> None:
    # The install's output is shared and logged; the URL may carry basic-auth or a token.
    notes = _notes("operator.prometheusUrl=http://prom-user:S3cr3t@prometheus.monitoring:9090/?token=T0ken")
    assert "Prometheus: http://***@prometheus.monitoring:9090/?***\n" in notes
    assert "S3cr3t" not in notes and "prom-user" not in notes and "T0ken" not in notes
    assert "Prometheus: http://prometheus.monitoring:9090\n" in _notes(
        "operator.prometheusUrl=http://prometheus.monitoring:9090"
    )


def test_prometheus_credentials_are_files_of_the_secret_the_operator_reads() -> None:
    docs = render(
        sets=[
            "operator.prometheusUrl=https://prom-proxy.monitoring:8443",
            "operator.prometheusAuth.existingSecret=prometheus-auth",
            "operator.prometheusAuth.usernameKey=user,operator.prometheusAuth.passwordKey=pass",
            "operator.prometheusAuth.caBundleKey=ca",
        ]
    )
    for doc in docs:
        if doc["apiVersion"].split("/")[0] not in ("kopf.dev", "monitoring.coreos.com"):
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    (deployment,) = by_kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = _operator_container(docs)
    env = {e["name"]: e for e in container["env"]}
    # The username from the Secret's key; nothing secret in a plain value.
    assert env["NEURONFLEET_PROMETHEUS_USERNAME"]["valueFrom"]["secretKeyRef"] == {
        "name": "prometheus-auth",
        "key": "user",
    }
    assert "NEURONFLEET_PROMETHEUS_BEARER_TOKEN_FILE" not in env
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "prometheus-auth"]
    assert "subPath" not in mount  # a subPath mount is never updated: rotation needs the directory
    (volume,) = [v for v in pod["volumes"] if v["name"] == "prometheus-auth"]
    files = {item["key"]: f"{mount['mountPath']}/{item['path']}" for item in volume["secret"]["items"]}
    assert volume["secret"]["secretName"] == "prometheus-auth"
    assert files == {
        "pass": env["NEURONFLEET_PROMETHEUS_PASSWORD_FILE"]["value"],
        "ca": env["NEURONFLEET_PROMETHEUS_CA_FILE"]["value"],
    }
    # Nothing of it without a Secret.
    plain = _operator_container(render())
    assert not [e for e in plain["env"] if e["name"].startswith("NEURONFLEET_PROMETHEUS_")]
    assert [m["name"] for m in plain["volumeMounts"]] == ["tmp"]


def test_amp_signing_needs_no_secret_and_reaches_the_operators_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1"
    docs = render(sets=[f"operator.prometheusUrl={url}", "operator.prometheusAuth.sigv4Region=eu-west-1"])
    container = _operator_container(docs)
    env = {e["name"]: e["value"] for e in container["env"] if e["name"].startswith("NEURONFLEET_PROMETHEUS_")}
    assert env == {"NEURONFLEET_PROMETHEUS_URL": url, "NEURONFLEET_PROMETHEUS_SIGV4_REGION": "eu-west-1"}
    assert [m["name"] for m in container["volumeMounts"]] == ["tmp"]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    credentials = prometheus_credentials(resolve_defaults(build_parser().parse_args(["run"])))
    assert credentials.sigv4_region == "eu-west-1" and credentials.bearer_token_file is None
    notes = _notes(f"operator.prometheusUrl={url}", "operator.prometheusAuth.sigv4Region=eu-west-1")
    assert "Prometheus requests signed with AWS SigV4 for Amazon Managed Service for Prometheus in eu-west-1" in notes
    assert "SigV4" not in _notes(f"operator.prometheusUrl={url}")


@pytest.mark.parametrize(
    ("url", "region"),
    [
        ("https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1", "us-east-1"),
        ("https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1", "eu-west-1"),
        ("https://aps-workspaces-fips.us-gov-west-1.amazonaws.com/workspaces/ws-1", "us-east-1"),
        ("https://aps-workspaces.cn-north-1.amazonaws.com.cn/workspaces/ws-1", "cn-north-1"),
        ("https://APS-Workspaces.EU-West-1.amazonaws.com:443/workspaces/ws-1", "us-east-1"),
        ("https://APS-Workspaces.EU-West-1.amazonaws.com:443/workspaces/ws-1", "eu-west-1"),
        ("http://sigv4-proxy.monitoring:8005/workspaces/ws-1", "us-east-1"),  # not AMP's host: not checked
    ],
)
def test_the_chart_refuses_a_sigv4_region_the_operator_would_refuse(
    url: str, region: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An AMP workspace of one region with sigv4Region of another rendered, and the operator then
    refused to start (a crash loop): the chart fails on exactly what the operator refuses."""
    for name, value in {"NEURONFLEET_PROMETHEUS_URL": url, "NEURONFLEET_PROMETHEUS_SIGV4_REGION": region}.items():
        monkeypatch.setenv(name, value)
    try:
        prometheus_credentials(resolve_defaults(build_parser().parse_args(["run"])))
        refused = ""
    except RunSetupError as error:
        refused = str(error)
    result = helm(
        "template",
        "nf",
        str(CHART),
        "--values",
        str(MINIMAL_VALUES),
        "--set",
        f"operator.prometheusUrl={url},operator.prometheusAuth.sigv4Region={region}",
    )
    assert (result.returncode != 0) == bool(refused), result.stderr
    if refused:
        workspace = refused.rpartition(" AMP workspace in ")[2].partition(":")[0]
        assert (
            f"operator.prometheusAuth.sigv4Region is {region} but operator.prometheusUrl is an AMP workspace in "
            f"{workspace}: AMP accepts only signatures for its own region, and the operator would refuse to start; "
            f"set sigv4Region to {workspace}"
        ) in result.stderr


def test_notes_say_which_spec_prometheus_urls_the_operator_may_request() -> None:
    assert "Spec Prometheus URLs: any (operator.prometheusAllowedUrls is empty)" in _notes()
    assert "Spec Prometheus URLs: none" in _notes("operator.prometheusAllowedUrls={none}")
    only = _notes("operator.prometheusAllowedUrls={http://prom.monitoring:9090}")
    assert "Spec Prometheus URLs: only under http://prom.monitoring:9090 (operator.prometheusAllowedUrls)" in only
    with_secret = _notes(
        "operator.prometheusUrl=http://prom.monitoring:9090,operator.prometheusAuth.existingSecret=pa,"
        "operator.prometheusAuth.bearerTokenKey=token"
    )
    assert "Prometheus credentials: Secret pa (bearer token), sent to that URL only" in with_secret


def test_notes_say_what_to_change_in_the_example_before_applying_it() -> None:
    notes = _notes()
    assert "kubectl create namespace search" in notes
    assert "spec.model.source" in notes and "spec.compile.artifactStore" in notes
    assert "kubectl apply -f bert-embeddings.yaml" in notes
    assert "spec.compile.image" in notes and "spec.runtime.image" in notes
    assert "kubectl apply -f https://" not in notes
    # The example of this release (its tag), not whatever main holds now; kubectl finds it in its
    # namespace, by the name the example has.
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    url = f"https://raw.githubusercontent.com/neuronfleet/neuronfleet/v{version}/examples/bert-embeddings.yaml"
    assert url in notes and "/main/" not in notes
    example = yaml.safe_load((CHART.parents[1] / "examples" / "bert-embeddings.yaml").read_text())["metadata"]
    assert f"kubectl -n {example['namespace']} describe inferencedeployment {example['name']} " in notes
    elsewhere = _notes("operator.watchNamespaces={chat}")
    assert "set metadata.namespace to chat" in elsewhere
    assert f"kubectl -n chat describe inferencedeployment {example['name']} " in elsewhere
    # A watched namespace exists before the install (the chart refuses otherwise): nothing to create.
    assert "kubectl create namespace" not in elsewhere


def test_install_guide_builds_the_images_the_chart_and_the_specs_name() -> None:
    """docs/install-eks.md says where the two images come from, with the Dockerfiles' real build
    arguments, and names the chart value and the spec fields that point at them."""
    guide = (CHART.parents[1] / "docs" / "install-eks.md").read_text()
    images = guide.split("### The images: build and push", 1)[1].split("\n## ", 1)[0]
    runtime_args = set(re.findall(r"^ARG (\w+)", (CHART.parents[1] / "runtime" / "Dockerfile").read_text(), re.M))
    used_args = set(re.findall(r"--build-arg (\w+)=", images))
    assert {"BASE_IMAGE", "INSTALL_TORCH"} <= used_args <= runtime_args
    assert "--build-arg INSTALL_TORCH=none" in images and "docker build -f operator/Dockerfile" in images
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert f"`{values['image']['repository']}:<appVersion>`" in images and "`image.repository`" in images
    # The spec fields, as the API spells them, and their default.
    schema = InferenceDeployment.model_json_schema(by_alias=True)
    spec = schema["$defs"]
    assert "image" in spec["CompileSpec"]["properties"] and "image" in spec["RuntimeSpec"]["properties"]
    assert "`spec.compile.image`" in images and "`spec.runtime.image`" in images
    assert f"`{DEFAULT_IMAGE}`" in images
    assert "backend: cpu" in images


def _runtime_build_args(text: str) -> dict[str, str]:
    """The ``--build-arg``s of the one ``docker build -f runtime/Dockerfile`` command in ``text``
    (shell or a comment's: ``#`` and line continuations joined), BASE_IMAGE's value left out."""
    lines = [line.lstrip("#").strip() for line in text.splitlines()]
    command = " ".join(lines).replace("\\ ", " ")
    (build,) = re.findall(r"docker build -f runtime/Dockerfile .*? \.(?:\s|$)", command)
    args = dict(re.findall(r"--build-arg (\w+)=(\S*)", build))
    return {name: ("<image>" if name == "BASE_IMAGE" else value) for name, value in args.items()}


def test_the_runtime_dockerfiles_inf2_build_command_is_the_install_guides() -> None:
    """runtime/Dockerfile's header gives the Inf2 build command: without MODEL_PACKAGES= its default
    (the demo model) resolved hack/constraints.txt's CPU torch into the image over the Neuron base's.
    It must pass the build arguments the guide's command passes."""
    guide = (CHART.parents[1] / "docs" / "install-eks.md").read_text()
    images = guide.split("### The images: build and push", 1)[1].split("\n## ", 1)[0]
    header = (CHART.parents[1] / "runtime" / "Dockerfile").read_text().split("\nARG ", 1)[0]
    inf2 = header.split("Inf2:", 1)[1]
    wanted = _runtime_build_args(images)
    assert wanted == {"BASE_IMAGE": "<image>", "INSTALL_TORCH": "none", "MODEL_PACKAGES": ""}
    assert _runtime_build_args(inf2) == wanted


def test_dashboard_has_the_fleet_panels() -> None:
    (config_map,) = [cm for cm in by_kind(render(), "ConfigMap") if cm["metadata"]["name"].endswith("-dashboard")]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["neuronfleet-fleet.json"])
    titles = " | ".join(panel["title"] for panel in dashboard["panels"]).lower()
    for topic in ("fleet size", "warm pool", "queue depth", "latency", "cold start", "cost"):
        assert topic in titles
    constants = {v["name"]: v["query"] for v in dashboard["templating"]["list"] if v["type"] == "constant"}
    assert float(constants["usd_per_replica_hour"]) == pytest.approx(0.7582)


def test_helm_install_and_uninstall_on_the_sandbox(tmp_path: Path) -> None:
    with ThreadedSandboxCluster() as cluster:
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig_path),
            "HELM_CACHE_HOME": str(tmp_path / "cache"),
            "HELM_CONFIG_HOME": str(tmp_path / "config"),
            "HELM_DATA_HOME": str(tmp_path / "data"),
        }
        install = helm(
            "install",
            "nf",
            str(CHART),
            "--namespace",
            "default",
            "--values",
            str(CI_VALUES),
            # Cluster-wide, and no PodMonitor or PrometheusRule: the sandbox serves no
            # monitoring.coreos.com (an install with them there fails on the unknown kinds).
            "--set",
            "operator.watchNamespaces=null,monitoring.runtimePodMonitor.enabled=false,"
            "monitoring.operatorPodMonitor.enabled=false,monitoring.alerts.enabled=false",
            # The workload accounts of values-ci.yaml, made in the namespace the workloads run in.
            "--set",
            "workloads.serviceAccounts.create=true,workloads.serviceAccounts.namespaces={default}",
            env=env,
        )
        assert install.returncode == 0, install.stderr

        def stored(plural: str, name: str, namespace: str | None = None, group: str = "") -> dict[str, Any] | None:
            return cluster.call(lambda c: c.get(plural, name, namespace, group=group))

        assert stored("deployments", "nf-neuronfleet", "default", group="apps") is not None
        role = stored("clusterroles", "nf-neuronfleet", group="rbac.authorization.k8s.io")
        assert role is not None and role["rules"]
        placeholder = stored("priorityclasses", "neuronfleet-placeholder", group="scheduling.k8s.io")
        assert placeholder is not None and placeholder["value"] == -1
        assert stored(
            "customresourcedefinitions", "inferencedeployments.serving.neuronfleet.dev", group="apiextensions.k8s.io"
        )
        # The post-install hook created the peering object once its CRD (a template) was served.
        assert stored("clusterkopfpeerings", "neuronfleet", group="kopf.dev") is not None
        for account in ("neuronfleet-compile", "neuronfleet-serving"):
            made = stored("serviceaccounts", account, "default")
            assert made is not None and made["automountServiceAccountToken"] is False
        status = helm("status", "nf", "--namespace", "default", env=env)
        assert status.returncode == 0 and "STATUS: deployed" in status.stdout

        uninstall = helm("uninstall", "nf", "--namespace", "default", env=env)
        assert uninstall.returncode == 0, uninstall.stderr
        assert stored("deployments", "nf-neuronfleet", "default", group="apps") is None
        assert stored("clusterroles", "nf-neuronfleet", group="rbac.authorization.k8s.io") is None
        assert stored("serviceaccounts", "neuronfleet-compile", "default") is None
        # Kept on purpose (helm.sh/resource-policy: keep): other Kopf operators may peer through it.
        assert stored("customresourcedefinitions", "clusterkopfpeerings.kopf.dev", group="apiextensions.k8s.io")
        # So are the PriorityClasses: another release's pods may name them.
        assert stored("priorityclasses", "neuronfleet-active", group="scheduling.k8s.io") is not None


def test_releases_share_the_priority_classes_whoever_created_them(tmp_path: Path) -> None:
    """PriorityClasses are cluster-wide and every release names the same four: a second release
    (one namespaced operator per team) uses the first's, as it uses classes no release owns
    (``neuronfleet sandbox`` creates them itself); its install failed on them ("exists and cannot be
    imported into the current release"). A value other than the classes' fails the render."""
    with ThreadedSandboxCluster() as cluster:
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig_path),
            "HELM_CACHE_HOME": str(tmp_path / "cache"),
            "HELM_CONFIG_HOME": str(tmp_path / "config"),
            "HELM_DATA_HOME": str(tmp_path / "data"),
        }
        create_namespaces(cluster, "nf-a", "team-a", "nf-b", "team-b", "nf-c", "team-c")

        def install(team: str, *sets: str, verb: str = "install") -> subprocess.CompletedProcess[str]:
            args = [verb, f"nf-{team}", str(CHART), "--namespace", f"nf-{team}", "--values", str(MINIMAL_VALUES)]
            args += ["--set", f"operator.watchNamespaces={{team-{team}}}"]
            return helm(*args, *(arg for item in sets for arg in ("--set", item)), env=env)

        def owner(name: str) -> str | None:
            found = cluster.call(lambda c: c.get("priorityclasses", name, group="scheduling.k8s.io"))
            assert found is not None, name
            return (found["metadata"].get("annotations") or {}).get("meta.helm.sh/release-name")

        names = [wanted["metadata"]["name"] for wanted in build_priority_classes()]
        first = install("a")
        assert first.returncode == 0, first.stderr
        second = install("b")
        assert second.returncode == 0, second.stderr
        assert [owner(name) for name in names] == ["nf-a"] * len(names)
        uninstall = helm("uninstall", "nf-a", "--namespace", "nf-a", env=env)
        assert uninstall.returncode == 0, uninstall.stderr
        assert [owner(name) for name in names] == ["nf-a"] * len(names)  # kept: nf-b's pods name them
        changed = install("b", "priorityClasses.servingValue=5000", verb="upgrade")
        assert changed.returncode != 0
        assert (
            "priorityClasses.servingValue is 5000 but PriorityClass neuronfleet-active exists with value 1000, "
            "created by Helm release nf-a in namespace nf-a"
        ) in changed.stderr

        # Classes no release owns, as `neuronfleet sandbox` makes them.
        def recreate_unowned(c: SandboxCluster) -> None:
            for name in names:
                c.delete("priorityclasses", name, group="scheduling.k8s.io")
            for priority_class in build_priority_classes():
                c.create("priorityclasses", priority_class, group="scheduling.k8s.io")

        cluster.call(recreate_unowned)
        third = install("c")
        assert third.returncode == 0, third.stderr
        assert [owner(name) for name in names] == [None] * len(names)
        # The compile Jobs' class has no setting: found with another value, the render says how to fix it.
        cluster.call(lambda c: c.delete("priorityclasses", "neuronfleet-compile", group="scheduling.k8s.io"))
        other = {"metadata": {"name": "neuronfleet-compile"}, "value": 5, "preemptionPolicy": "Never"}
        cluster.call(lambda c: c.create("priorityclasses", other, group="scheduling.k8s.io"))
        refused = install("c", verb="upgrade")
        assert refused.returncode != 0
        assert (
            "PriorityClass neuronfleet-compile exists with value 5, but the compile Jobs' class has value 0"
        ) in refused.stderr
        assert "kubectl delete priorityclass neuronfleet-compile" in refused.stderr


@pytest.mark.parametrize(
    "setting",
    [
        "peering.enabled=false,replicaCount=1",
        "liveness.enabled=false",
        "rbac.create=false",
        "serviceAccount.create=false,serviceAccount.name=existing",
        "priorityClasses.create=false",
        "monitoring.dashboard.enabled=false",
        "operator.metricsPort=0",
        "liveness.enabled=false,operator.metricsPort=8080",
    ],
)
def test_optional_parts_render_valid_manifests(setting: str) -> None:
    docs = render(sets=[setting])
    for doc in docs:
        if doc["apiVersion"].split("/")[0] not in ("kopf.dev", "monitoring.coreos.com"):
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    container = _operator_container(docs)
    if setting.startswith("peering.enabled=false"):
        assert not any("--peering" in arg for arg in container["args"]) and "command" not in container
        assert not by_kind(docs, "ClusterKopfPeering")
    if setting.startswith("rbac.create=false"):
        assert not by_kind(docs, "ClusterRole")


def test_replicas_spread_over_nodes_by_default() -> None:
    """values.yaml promises a standby on another node: a soft hostname spread over this release's
    operator pods (a one-node cluster still schedules both)."""
    (deployment,) = by_kind(render(), "Deployment")
    pod = deployment["spec"]["template"]
    (constraint,) = pod["spec"]["topologySpreadConstraints"]
    assert constraint["topologyKey"] == "kubernetes.io/hostname"
    assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"
    assert constraint["labelSelector"] == {"matchLabels": deployment["spec"]["selector"]["matchLabels"]}
    # A constraint of the user's keeps its own selector; [] turns spreading off.
    (ci,) = by_kind(render([CI_VALUES]), "Deployment")
    (kept,) = ci["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert kept["labelSelector"] == {"matchLabels": {"app.kubernetes.io/name": "neuronfleet"}}
    result = helm(
        "template", "nf", str(CHART), "--values", str(MINIMAL_VALUES), "--set-json", "topologySpreadConstraints=[]"
    )
    assert result.returncode == 0, result.stderr
    assert "topologySpreadConstraints" not in result.stdout


def test_an_existing_service_account_gets_the_operators_roles_and_default_never_does() -> None:
    docs = render(sets=["serviceAccount.create=false,serviceAccount.name=existing"])
    assert not by_kind(docs, "ServiceAccount")
    (deployment,) = by_kind(docs, "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "existing"
    assert grants(docs, "existing", "neuronfleet-system").everything()
    assert not grants(docs, "default", "neuronfleet-system").everything()


def test_the_operators_pod_gets_no_service_links() -> None:
    """The kubelet would set NEURONFLEET_*_SERVICE_HOST and the like for each Service neuronfleet-*
    of the release's namespace (the operator makes one for each InferenceDeployment neuronfleet-*
    there): the operator needs none."""
    for values in VALUES.values():
        (deployment,) = by_kind(render(values), "Deployment")
        assert deployment["spec"]["template"]["spec"]["enableServiceLinks"] is False


@pytest.mark.parametrize("automount", [True, False])
def test_automount_service_account_token_reaches_the_pod_and_the_account(automount: bool) -> None:
    docs = render(sets=[f"serviceAccount.automountServiceAccountToken={str(automount).lower()}"])
    (deployment,) = by_kind(docs, "Deployment")
    (account,) = by_kind(docs, "ServiceAccount")
    # The pod's field wins over the account's: both follow the value.
    assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is automount
    assert account["automountServiceAccountToken"] is automount


@pytest.mark.parametrize("values", sorted(VALUES))
def test_operator_command_is_what_neuronfleet_run_accepts(
    values: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container's command through a real shell, its argv parsed by the real CLI parser.

    A stand-in ``neuronfleet`` on PATH records the argv the shell hands it (the random peering
    priority included); ``neuronfleet.cli.build_parser`` must accept it and see the chart's values.
    """
    container = _operator_container(render(VALUES[values]))
    argv_file = tmp_path / "argv"
    shim = tmp_path / "bin" / "neuronfleet"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nfor a in "$@"; do printf \'%s\\n\' "$a"; done > {argv_file}\n')
    shim.chmod(0o755)
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    command = container.get("command", ["neuronfleet"]) + container["args"]
    result = subprocess.run(
        command, env={"PATH": f"{shim.parent}:/usr/bin:/bin", **env}, capture_output=True, text=True, timeout=10
    )
    assert result.returncode == 0, result.stderr
    argv = argv_file.read_text().splitlines()

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    parsed = resolve_defaults(build_parser().parse_args(argv))
    assert parsed.peering == "neuronfleet"
    assert 0 <= parsed.priority < 2**31
    assert parsed.artifact_store == env["NEURONFLEET_ARTIFACT_STORE"]
    assert parsed.liveness == "http://0.0.0.0:8080/healthz"
    # The DaemonSet allowance the placement planner gets, from the chart's value or its default.
    assert daemonset_headroom(parsed) == (Headroom(1500, 2048) if values == "ci" else DAEMONSET_HEADROOM)
    if values == "ci":
        assert parsed.namespace == ["search", "chat"]
        assert parsed.neuron_scheduler == "my-scheduler"
        assert parsed.prometheus_url == env["NEURONFLEET_PROMETHEUS_URL"]
        assert parsed.model_server_image == env["NEURONFLEET_MODEL_SERVER_IMAGE"]
        assert parsed.interval == 5 and parsed.verbose
        assert workload_service_accounts(parsed) == ("neuronfleet-compile", "neuronfleet-serving")
        assert device_group_id(parsed) == 994
        policy = prometheus_url_policy(parsed)
        assert policy.refusal("http://prometheus-operated.monitoring.svc:9090/") is None
        assert policy.refusal("https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-ci/api") is None
        assert policy.refusal("http://prometheus-operated.monitoring.svc.evil.io:9090/") is not None
        credentials = prometheus_credentials(parsed)
        assert credentials.bearer_token_file == Path("/etc/neuronfleet/prometheus-auth/token")
        assert credentials.ca_file == Path("/etc/neuronfleet/prometheus-auth/ca.crt")
        assert parsed.prometheus_refuse_query_overrides is True
    else:
        # No chart value: the operator's own default, as before the value existed.
        assert parsed.model_server_image == DEFAULT_IMAGE
        assert workload_service_accounts(parsed) == (None, None)
        assert device_group_id(parsed) is None
        assert prometheus_url_policy(parsed).allowed is None  # any spec URL, as before the allow-list
        assert prometheus_credentials(parsed).auth() is None
        assert parsed.prometheus_refuse_query_overrides is False  # any query, as before the value
        assert "NEURONFLEET_PROMETHEUS_REFUSE_QUERY_OVERRIDES" not in env


def test_every_variable_the_chart_can_set_is_one_its_operator_reads() -> None:
    """``neuronfleet run`` refuses a NEURONFLEET_* variable it does not read (an image older than the
    chart): each one the templates name is known, and renders with some values (no dead name)."""
    templates = "".join(path.read_text() for path in (CHART / "templates").iterdir())
    named = set(re.findall(r"name: (NEURONFLEET_[A-Z0-9_]+)", templates))
    assert named <= KNOWN_VARIABLES, named - KNOWN_VARIABLES
    variants = [
        render(),
        render([CI_VALUES]),
        render(
            sets=[
                "operator.prometheusUrl=http://prometheus:9090,operator.prometheusAuth.existingSecret=auth",
                "operator.prometheusAuth.usernameKey=user,operator.prometheusAuth.passwordKey=password",
            ]
        ),
        render(
            sets=[
                "operator.prometheusUrl=https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1",
                "operator.prometheusAuth.sigv4Region=us-east-1",
            ]
        ),
    ]
    rendered = set()
    for docs in variants:
        env = {e["name"]: e.get("value", "") for e in _operator_container(docs)["env"]}
        check_variables(env)  # raises naming any the operator would refuse
        rendered |= {name for name in env if name.startswith("NEURONFLEET_")}
    assert rendered == named


def test_a_large_device_group_id_reaches_the_operator_whole() -> None:
    # A values file's number is a float to Helm: printed as is, 1000000 would be "1e+06".
    for args in (("--set-json", "workloads.deviceGroupId=1000000"), ("--set", "workloads.deviceGroupId=1000000")):
        result = helm("template", "nf", str(CHART), "--values", str(MINIMAL_VALUES), *args)
        assert result.returncode == 0, result.stderr
        docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
        env = {e["name"]: e.get("value") for e in _operator_container(docs)["env"]}
        assert env["NEURONFLEET_DEVICE_GROUP_ID"] == "1000000"


def test_notes_say_an_operator_scaled_to_zero_reconciles_nothing() -> None:
    """replicaCount 0 is allowed (it pauses the operator without uninstalling it); the notes said
    "0 replica(s) ... one acts, the others stand by" as if one acted."""
    paused = _notes("replicaCount=0")
    assert "Operator scaled to 0 (replicaCount=0): nothing is reconciled." in paused
    assert "one acts" not in paused
    assert "nothing is reconciled" not in _notes()


def test_notes_name_the_model_server_image_the_release_gives_every_deployment() -> None:
    image = "registry.example/neuronserve:1.2-neuron"
    notes = _notes(f"operator.modelServerImage={image}")
    assert f"Its pods run {image} (operator.modelServerImage)" in notes
    assert "set operator.modelServerImage" not in notes
    assert "set operator.modelServerImage (once for all)" in _notes()


def test_the_workload_service_accounts_are_created_only_when_asked_in_each_namespace_listed() -> None:
    """The compile and serving accounts the operator's pods name, in the namespaces where
    InferenceDeployments run, with IRSA's role annotation; none by default (only the operator's)."""
    assert [a["metadata"]["name"] for a in by_kind(render(), "ServiceAccount")] == ["nf-neuronfleet"]
    role = "eks.amazonaws.com/role-arn"
    docs = render(
        sets=[
            "workloads.serviceAccounts.create=true",
            "workloads.serviceAccounts.namespaces={search,ads}",
            "workloads.compileServiceAccount=nf-compile,workloads.servingServiceAccount=nf-serving",
            f"workloads.serviceAccounts.compileAnnotations.{role.replace('.', chr(92) + '.')}="
            "arn:aws:iam::111122223333:role/neuronfleet-compile",
        ]
    )
    accounts = {
        (a["metadata"]["namespace"], a["metadata"]["name"]): a
        for a in by_kind(docs, "ServiceAccount")
        if a["metadata"]["name"] != "nf-neuronfleet"
    }
    assert set(accounts) == {
        (namespace, name) for namespace in ("search", "ads") for name in ("nf-compile", "nf-serving")
    }
    for (_, name), account in accounts.items():
        kubernetes_validate.validate(account, KUBERNETES_VERSION, strict=True)
        assert account["automountServiceAccountToken"] is False
        annotations = account["metadata"].get("annotations") or {}
        if name == "nf-compile":
            assert annotations == {role: "arn:aws:iam::111122223333:role/neuronfleet-compile"}
            assert account["metadata"]["labels"]["app.kubernetes.io/component"] == "compile"
        else:
            assert annotations == {}
            assert account["metadata"]["labels"]["app.kubernetes.io/component"] == "serving"
    # An account of the operator's name outside the release's namespace is another object: made
    # (the operator watching only that namespace: see the test below).
    other = render(
        sets=[
            "workloads.serviceAccounts.create=true,workloads.serviceAccounts.namespaces={search}",
            "workloads.compileServiceAccount=nf-neuronfleet,operator.watchNamespaces={search}",
        ]
    )
    assert sorted((a["metadata"]["namespace"], a["metadata"]["name"]) for a in by_kind(other, "ServiceAccount")) == [
        ("neuronfleet-system", "nf-neuronfleet"),
        ("search", "nf-neuronfleet"),
    ]
    # The operator names the same accounts on the pods it makes.
    env = {e["name"]: e.get("value") for e in _operator_container(docs).get("env") or []}
    assert env["NEURONFLEET_COMPILE_SERVICE_ACCOUNT"] == "nf-compile"
    assert env["NEURONFLEET_SERVING_SERVICE_ACCOUNT"] == "nf-serving"


def _downward_env(deployment: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The container's variables as the kubelet sets them in a pod of ``deployment``: the downward
    API's ``fieldRef`` read from the pod (its namespace is the Deployment's, where helm puts it)."""
    pod = {
        "metadata": {"name": "nf-neuronfleet-5d9c7-abcde", "namespace": deployment["metadata"]["namespace"]},
        "spec": deployment["spec"]["template"]["spec"],
    }
    env = {}
    for variable in container["env"]:
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        elif "fieldRef" in variable.get("valueFrom", {}):
            section, field = variable["valueFrom"]["fieldRef"]["fieldPath"].split(".")
            env[variable["name"]] = pod[section][field]
    return env


@pytest.mark.parametrize(
    ("namespace", "sets", "account"),
    [
        ("neuronfleet-system", [], "nf-neuronfleet"),
        ("ml-platform", ["serviceAccount.name=inference-operator"], "inference-operator"),
        ("ops", ["serviceAccount.create=false,serviceAccount.name=existing-operator"], "existing-operator"),
    ],
)
def test_the_operator_learns_its_own_account_and_namespace_from_its_pod(
    namespace: str, sets: list[str], account: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The downward API hands the pod's account and namespace to ``neuronfleet run``, which then
    refuses workloads that would run as that account there."""
    docs = render(sets=sets, namespace=namespace)
    (deployment,) = by_kind(docs, "Deployment")
    container = _operator_container(docs)
    fields = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in container["env"]
        if e["name"].startswith("NEURONFLEET_OPERATOR_")
    }
    assert fields == {
        "NEURONFLEET_OPERATOR_SERVICE_ACCOUNT": "spec.serviceAccountName",
        "NEURONFLEET_OPERATOR_NAMESPACE": "metadata.namespace",
    }
    for name in [name for name in os.environ if name.startswith("NEURONFLEET_")]:
        monkeypatch.delenv(name)
    for name, value in _downward_env(deployment, container).items():
        monkeypatch.setenv(name, value)
    args = container["args"]  # after the peering's shell wrapper: what it hands `neuronfleet`
    parsed = resolve_defaults(build_parser().parse_args(args[args.index("run") :]))
    assert operator_account(parsed) == OperatorAccount(namespace, account)


def test_a_default_workload_account_named_like_the_operators_fails_while_its_namespace_is_watched() -> None:
    """The operator would refuse to start with it (``neuronfleet run``): the chart says so before
    anything is applied, unless the operator watches only other namespaces, where that name is
    another account."""
    for workload, pods in (("compile", "compile Jobs"), ("serving", "serving pods")):
        for watched in ([], ["operator.watchNamespaces={search,neuronfleet-system}"]):
            sets = [f"workloads.{workload}ServiceAccount=nf-neuronfleet", *watched]
            args = ["--values", str(MINIMAL_VALUES), *(a for item in sets for a in ("--set", item))]
            result = helm("template", "nf", str(CHART), "--namespace", "neuronfleet-system", *args)
            assert result.returncode != 0
            assert (
                f"workloads.{workload}ServiceAccount is nf-neuronfleet, the operator's own ServiceAccount in the "
                f"release's namespace neuronfleet-system, which the operator watches: the {pods} of "
                "InferenceDeployments there that name no account would get the operator's IAM role"
            ) in result.stderr
        docs = render(sets=[f"workloads.{workload}ServiceAccount=nf-neuronfleet", "operator.watchNamespaces={search}"])
        env = {e["name"]: e.get("value") for e in _operator_container(docs)["env"]}
        assert env[f"NEURONFLEET_{workload.upper()}_SERVICE_ACCOUNT"] == "nf-neuronfleet"


def test_a_disruption_budget_keeps_a_peer_of_the_operator_through_a_drain() -> None:
    """replicaCount > 1: evictions take one replica at a time; at 1 (or disabled) no budget."""
    docs = render()
    (deployment,) = by_kind(docs, "Deployment")
    assert deployment["spec"]["replicas"] > 1
    (budget,) = by_kind(docs, "PodDisruptionBudget")
    assert budget["metadata"]["namespace"] == "neuronfleet-system"
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"] == {"matchLabels": deployment["spec"]["selector"]["matchLabels"]}
    kubernetes_validate.validate(budget, KUBERNETES_VERSION, strict=True)
    assert not by_kind(render(sets=["replicaCount=1"]), "PodDisruptionBudget")
    assert not by_kind(render(sets=["podDisruptionBudget.enabled=false"]), "PodDisruptionBudget")
    result = helm("template", "nf", str(CHART), "--values", str(MINIMAL_VALUES), "--set", "podDisruptionBudget=1")
    assert result.returncode != 0
    assert "podDisruptionBudget" in result.stderr


def test_an_ipv6_cluster_gets_the_operators_endpoints_on_ipv6() -> None:
    def args(*sets: str) -> list[str]:
        return [
            a
            for a in _operator_container(render(sets=list(sets)))["args"]
            if a.startswith(("--liveness", "--metrics-a"))
        ]

    assert args() == ["--liveness=http://0.0.0.0:8080/healthz"]
    assert args("ipFamily=IPv6") == ["--liveness=http://[::]:8080/healthz", "--metrics-address=::"]
    parsed = build_parser().parse_args(["run", *args("ipFamily=IPv6")])
    assert (parsed.liveness, parsed.metrics_address) == ("http://[::]:8080/healthz", "::")
    refused = helm("template", "nf", str(CHART), "--values", str(MINIMAL_VALUES), "--set", "ipFamily=ipv6")
    assert refused.returncode != 0 and "ipFamily" in refused.stderr
