"""The dashboard's kube-state-metrics panel (cold starts), evaluated by promtool as Grafana sends it.

The query is taken from the rendered ConfigMap, Grafana's variables substituted as the dashboard
does (``All`` is the variable's ``allValue``), and run over kube-state-metrics series of a
namespace that holds the operator's serving pods beside its node placeholders, its compile Job's
pod and another application's pods, plus a system namespace: the panel shows each deployment's
serving pods only, and of those the ones whose Ready time ends their first start (Ready now, no
restart, within the startup budget of their container's start): kube-state-metrics' Ready time is
the Ready condition's last change, whatever its status, so a pod that went unready hours into its
life read as a cold start of hours. The labels it reads are those the install guide tells
kube-state-metrics to export.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from chart_support import REPO, by_kind, render, tool

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.kube.builders import build_pod
from neuronfleet.kube.coldstart import startup_budget
from neuronfleet.planning.labels import LABEL_DEPLOYMENT, LABEL_ROLE, SERVING_ROLES, ArtifactRevision, FleetRevision
from neuronfleet.planning.placement import plan_for_spec

GUIDE = REPO / "docs" / "install-eks.md"


def _dashboard() -> dict[str, Any]:
    (config_map,) = [cm for cm in by_kind(render(), "ConfigMap") if cm["metadata"]["name"].endswith("-dashboard")]
    return dict(json.loads(config_map["data"]["neuronfleet-fleet.json"]))


def _cold_start_query(dashboard: dict[str, Any]) -> str:
    (panel,) = [p for p in dashboard["panels"] if p["title"].lower().startswith("cold start")]
    (target,) = panel["targets"]
    return str(target["expr"])


def _as_grafana_sends_it(query: str, dashboard: dict[str, Any], selected: dict[str, str]) -> str:
    """``$name`` replaced by the value selected, or by the variable's allValue for All."""
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    for name in ("namespace", "deployment"):
        value = selected.get(name)
        query = query.replace(f"${name}", value or variables[name]["allValue"])
    return query


def _ksm_label(key: str) -> str:
    """A pod label's name in kube_pod_labels (kube-state-metrics: label_ + non-alphanumerics as _)."""
    return "label_" + re.sub(r"[^A-Za-z0-9_]", "_", key)


DEPLOYMENT, ROLE = _ksm_label(LABEL_DEPLOYMENT), _ksm_label(LABEL_ROLE)
#: (namespace, pod, labels, seconds from created to Ready); every pod created at t=1000 s.
PODS = [
    ("search", "minilm-embeddings-a1b2c3d4-0", {DEPLOYMENT: "minilm-embeddings", ROLE: "active"}, 300),
    ("search", "minilm-embeddings-a1b2c3d4-1", {DEPLOYMENT: "minilm-embeddings", ROLE: "warm"}, 500),
    ("search", "minilm-embeddings-ph-0", {DEPLOYMENT: "minilm-embeddings", ROLE: "placeholder"}, 5),
    # The compile Job's pod: the deployment label, no role.
    ("search", "minilm-embeddings-compile-xyz", {DEPLOYMENT: "minilm-embeddings"}, 5),
    ("search", "reranker-9f8e7d6c-0", {DEPLOYMENT: "reranker", ROLE: "draining"}, 120),
    ("search", "nginx-7d9", {}, 2),
    ("search", "batch-1", {DEPLOYMENT: "", ROLE: ""}, 2),  # kube-state-metrics may export an empty value
    ("kube-system", "coredns-5d8", {}, 2),
]


MINILM = {DEPLOYMENT: "minilm-embeddings", ROLE: "active"}
#: Serving pods whose Ready time ends no first start (namespace, pod, labels, Ready time, Ready now,
#: container started, restarts): created at t=1000 s like the others, none may count.
NOT_COLD_STARTS = [
    # Review r5: unready 10 h into its life; kube-state-metrics' Ready time is the change to False.
    ("search", "minilm-embeddings-a1b2c3d4-2", MINILM, 1000 + 36000, False, 1030, 0),
    # Unready for a while 10 h in and Ready again: Ready now, its Ready time the flip's end.
    ("search", "minilm-embeddings-a1b2c3d4-3", MINILM, 1000 + 36060, True, 1030, 0),
    # Its container restarted 5 h in: Ready soon after the restart, 5 h after the pod's creation.
    ("search", "minilm-embeddings-a1b2c3d4-4", MINILM, 1000 + 18060, True, 1000 + 18000, 1),
    # Still starting: the Ready condition False since the pod was created, pulling the image, then
    # loading the model (its container running: only the Ready condition says it is no start yet).
    ("search", "minilm-embeddings-a1b2c3d4-5", MINILM, 1000, False, None, 0),
    ("search", "minilm-embeddings-a1b2c3d4-6", MINILM, 1000, False, 1030, 0),
]


def _pod_series(
    uid: int,
    namespace: str,
    pod: str,
    labels: dict[str, str],
    ready_time: float,
    ready: bool,
    started: float | None,
    restarts: int,
) -> list[dict[str, str]]:
    """A pod's series as kube-state-metrics exports them (one container, ``server``)."""
    ids = f'namespace="{namespace}",pod="{pod}",uid="{uid}"'
    extra = "".join(f',{key}="{value}"' for key, value in labels.items())
    container = f'{ids},container="server"'
    series = [
        {"series": f"kube_pod_created{{{ids}}}", "values": "1000x5"},
        {"series": f"kube_pod_status_ready_time{{{ids}}}", "values": f"{ready_time:.0f}x5"},
        {"series": f"kube_pod_labels{{{ids}{extra}}}", "values": "1x5"},
        {"series": f"kube_pod_container_status_restarts_total{{{container}}}", "values": f"{restarts}x5"},
    ]
    for condition in ("true", "false", "unknown"):
        value = int(ready) if condition == "true" else int(not ready) if condition == "false" else 0
        series.append({"series": f'kube_pod_status_ready{{{ids},condition="{condition}"}}', "values": f"{value}x5"})
    if started is not None:
        series.append({"series": f"kube_pod_container_state_started{{{container}}}", "values": f"{started:.0f}x5"})
    return series


def _series() -> list[dict[str, str]]:
    series = []
    for uid, (namespace, pod, labels, ready_after) in enumerate(PODS):
        # Ready now, on its first start; the container started halfway to Ready.
        series += _pod_series(uid, namespace, pod, labels, 1000 + ready_after, True, 1000 + ready_after / 2, 0)
    for uid, record in enumerate(NOT_COLD_STARTS, start=len(PODS)):
        series += _pod_series(uid, *record)
    return series


def test_cold_starts_are_each_deployments_serving_pods(tmp_path: Path) -> None:
    assert {"warm", "active", "draining"} == set(SERVING_ROLES)
    dashboard = _dashboard()
    query = _cold_start_query(dashboard)

    def case(selected: dict[str, str], expected: dict[str, float]) -> dict[str, Any]:
        return {
            "expr": _as_grafana_sends_it(query, dashboard, selected),
            "eval_time": "2m",
            "exp_samples": [
                {"labels": f'{{namespace="search",{DEPLOYMENT}="{name}"}}', "value": value}
                for name, value in sorted(expected.items())
            ],
        }

    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": _series(),
                "promql_expr_test": [
                    # The dashboard's default: All namespaces, All deployments.
                    case({}, {"minilm-embeddings": 400, "reranker": 120}),
                    case({"namespace": "search"}, {"minilm-embeddings": 400, "reranker": 120}),
                    case({"namespace": "search", "deployment": "minilm-embeddings"}, {"minilm-embeddings": 400}),
                ],
            }
        ],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run(
        [tool("promtool"), "test", "rules", "tests.yaml"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_cold_start_panels_budget_is_the_serving_pods_startup_budget() -> None:
    # The panel leaves out a pod Ready longer after its container started than the kubelet lets a
    # first start take (the operator's cold-start measurement's rule): its bound must be the one the
    # operator's pods get from their probes.
    dep = InferenceDeployment.model_validate(yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text()))
    dep.metadata.uid = "0f6c3f5e-1111-2222-3333-444455556666"
    candidate = plan_for_spec(dep.spec, 1).chosen
    assert candidate is not None
    pod = build_pod(dep, candidate, FleetRevision(ArtifactRevision("r", "s3://a/r/"), "t"), "active", "pod-0")
    (bound,) = re.findall(r"kube_pod_container_state_started\)+\s*<=\s*(\d+)", _cold_start_query(_dashboard()))
    assert float(bound) == startup_budget(pod)


def test_the_guide_has_kube_state_metrics_export_every_pod_label_the_dashboard_reads() -> None:
    dashboard = _dashboard()
    # kube_pod_labels' label_* labels (not PromQL's label_values, label_replace, label_join).
    read = set(re.findall(r"\blabel_(?!values\b|replace\b|join\b)[a-z0-9_]+", json.dumps(dashboard)))
    (allowlist,) = set(re.findall(r"--metric-labels-allowlist=pods=\[([^\]]*)\]", GUIDE.read_text()))
    exported = {_ksm_label(key.strip()) for key in allowlist.split(",")}
    assert read == exported == {DEPLOYMENT, ROLE}
    (panel,) = [p for p in dashboard["panels"] if p["title"].lower().startswith("cold start")]
    assert f"--metric-labels-allowlist=pods=[{allowlist}]" in panel["description"]
