"""The chart's alert expressions, evaluated by a real Prometheus over series it scraped.

promtool's unit tests (test_alert_rules.py) feed series with the labels the chart's PodMonitors
should give; here a real Prometheus scrapes the operator's and the model server's own registries,
with the target labels the Prometheus Operator adds (``namespace`` of the scraped pod, ``pod``,
``job`` = ``<namespace>/<PodMonitor name>``) and the rendered PodMonitors' ``honorLabels``, loads the
rendered rule groups (they must evaluate without error), and answers each alert's expression: the
alerts find the InferenceDeployment and the model-server deployment that are in trouble, by their
own namespace, and neither the one only a paused operator replica still reports nor a new one still
compiling.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import by_kind, render
from fixtures_prometheus import PrometheusServer
from prometheus_client import start_http_server
from test_alert_rules import ALERTS_ON, RULE_FILE, alerts, write_rule_file

from neuronfleet.metrics.operator_metrics import OperatorMetrics
from neuronserve.metrics import BusyTracker, ServerMetrics

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(120)]

RELEASE_NAMESPACE = "neuronfleet-system"


def status(desired: int, ready: int, degraded: str, metrics: str, compiled: bool = True) -> dict[str, Any]:
    available = "ReplicasReady" if ready >= desired else "ReplicasNotReady" if compiled else "AwaitingArtifact"
    return {
        "desiredReplicas": desired,
        "replicas": desired if compiled else 0,
        "readyReplicas": ready,
        "conditions": [
            {"type": "Available", "status": "True" if ready >= desired else "False", "reason": available},
            {"type": "Degraded", "status": "False" if degraded == "AsExpected" else "True", "reason": degraded},
            {"type": "ScalingActive", "status": "True" if metrics == "MetricsRead" else "False", "reason": metrics},
        ],
    }


def serve(registry: Any) -> str:
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    return f"127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def traffic() -> Iterator[Callable[[Callable[[], None]], None]]:
    """Runs a feed (one more reconcile, one more batch of requests) over and over until the test
    ends, so that counters grow between scrapes as in a running cluster."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(feed: Callable[[], None]) -> None:
        def loop() -> None:
            while not stop.is_set():
                feed()
                stop.wait(0.1)  # the feed's pace, not a wait for an effect

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        threads.append(thread)

    yield start
    stop.set()
    for thread in threads:
        thread.join(timeout=5)


def test_alert_expressions_find_the_deployments_in_trouble_in_scraped_series(
    prometheus_bin: str, tmp_path: Path, traffic: Callable[[Callable[[], None]], None]
) -> None:
    docs = render(sets=[*ALERTS_ON, "monitoring.runtimePodMonitor.enabled=true"])
    (rule,) = by_kind(docs, "PrometheusRule")
    monitors = {m["metadata"]["name"].rsplit("-", 1)[1]: m for m in by_kind(docs, "PodMonitor")}

    # The operator pair: the leader reconciles ml/bert (failing, Degraded, 1 of 3 ready, no metrics),
    # ml/gpt (healthy) and ml/llama (new, its first compile running: no pod, no metrics yet); the
    # paused replica last saw gpt starting and keeps saying so (an operator now drops its series on
    # a pause; one of an earlier version, during an upgrade, did not).
    leader, paused = OperatorMetrics(), OperatorMetrics()
    paused.record_reconcile("ml", "gpt", 0.01, status(2, 0, "ImagePullBackOff", "MetricsUnavailable"))

    def reconcile() -> None:
        leader.record_reconcile(
            "ml", "bert", 0.01, status(3, 1, "CompileFailed", "MetricsUnavailable"), error_kind="ApiException"
        )
        leader.record_reconcile("ml", "gpt", 0.01, status(2, 2, "AsExpected", "MetricsRead"))
        leader.record_reconcile("ml", "llama", 0.01, status(1, 0, "AsExpected", "MetricsUnavailable", compiled=False))

    # Two model-server deployments: bert refuses and fails requests, answers slowly and has a
    # NeuronCore out of rotation; gpt is fine.
    bert, gpt = ServerMetrics(BusyTracker()), ServerMetrics(BusyTracker())
    bert.device_cores_out.set(1)

    def requests() -> None:
        for _ in range(6):
            bert.outcome("ok")
            bert.latency.observe(0.5)
            gpt.outcome("ok")
            gpt.latency.observe(0.02)
        bert.outcome("rejected")
        bert.outcome("error")

    traffic(reconcile)
    traffic(requests)

    def scrape(monitor: dict[str, Any], address: str, labels: dict[str, str]) -> dict[str, Any]:
        """A scrape job as the Prometheus Operator writes one for a PodMonitor's pod."""
        endpoint = monitor["spec"]["podMetricsEndpoints"][0]
        return {
            "job_name": f"{monitor['metadata']['namespace']}/{monitor['metadata']['name']}/{address}",
            "honor_labels": bool(endpoint.get("honorLabels", False)),
            "scrape_interval": "1s",
            "scrape_timeout": "900ms",
            "static_configs": [
                {
                    "targets": [address],
                    "labels": {"job": f"{monitor['metadata']['namespace']}/{monitor['metadata']['name']}", **labels},
                }
            ],
        }

    operator_labels = {"namespace": RELEASE_NAMESPACE, "container": "operator", "endpoint": "metrics"}
    server_labels = {"role": "active", "container": "neuronserve", "endpoint": "http"}
    jobs = [
        scrape(monitors["operator"], serve(leader.registry), {**operator_labels, "pod": "nf-neuronfleet-a"}),
        scrape(monitors["operator"], serve(paused.registry), {**operator_labels, "pod": "nf-neuronfleet-b"}),
        # The runtime PodMonitor's relabeling: the pod's namespace, its deployment label, its name.
        scrape(
            monitors["runtime"],
            serve(bert.registry),
            {**server_labels, "namespace": "ml", "deployment": "bert", "pod": "bert-1"},
        ),
        scrape(
            monitors["runtime"],
            serve(gpt.registry),
            {**server_labels, "namespace": "ml", "deployment": "gpt", "pod": "gpt-1"},
        ),
    ]

    workdir = tmp_path / "prometheus"
    server = PrometheusServer(prometheus_bin, workdir)
    rules = write_rule_file(rule, workdir / RULE_FILE)
    server.config_file.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules)],
                "scrape_configs": jobs,
            }
        )
    )
    server.start()
    try:
        expected = {
            "NeuronfleetOperatorDown": set(),
            "NeuronfleetReconcileErrors": {(("name", "bert"), ("namespace", "ml"))},
            "NeuronfleetReplicasBelowDesired": {(("name", "bert"), ("namespace", "ml"))},
            "NeuronfleetDeploymentDegraded": {(("name", "bert"), ("namespace", "ml"), ("reason", "CompileFailed"))},
            "NeuronfleetScalingMetricsUnavailable": {(("name", "bert"), ("namespace", "ml"))},
            "NeuronserveRequestsRejected": {(("deployment", "bert"), ("namespace", "ml"))},
            "NeuronserveRequestErrors": {(("deployment", "bert"), ("namespace", "ml"))},
            "NeuronserveCoresOut": {(("deployment", "bert"), ("namespace", "ml"), ("pod", "bert-1"))},
            "NeuronserveLatencySLOFastBurn": {(("deployment", "bert"), ("namespace", "ml"))},
            "NeuronserveLatencySLOSlowBurn": {(("deployment", "bert"), ("namespace", "ml"))},
        }
        expressions = {name: r["expr"] for name, r in alerts(rule).items()}
        assert set(expressions) == set(expected)

        def answers() -> dict[str, set[tuple[tuple[str, str], ...]]]:
            return {
                name: {tuple(sorted(item["metric"].items())) for item in server.query(expr)}
                for name, expr in expressions.items()
            }

        deadline = time.monotonic() + 60
        while (got := answers()) != expected:
            assert time.monotonic() < deadline, f"alert expressions answered {got}, not {expected}"
            time.sleep(0.2)  # a poll's pace, not a wait for an effect
        # Prometheus evaluated every loaded rule without an error (a many-to-many match, say).
        deadline = time.monotonic() + 30
        loaded = server_rules(server)
        while not all(evaluated(r) for r in loaded):
            assert time.monotonic() < deadline, "Prometheus did not evaluate every rule"
            time.sleep(0.2)  # a poll's pace, not a wait for an effect
            loaded = server_rules(server)
        assert {r["name"]: (r["health"], r.get("lastError", "")) for r in loaded} == {
            name: ("ok", "") for name in expected
        }
    finally:
        server.stop()


def server_rules(server: PrometheusServer) -> list[dict[str, Any]]:
    return [r for group in server.api("rules")["groups"] for r in group["rules"]]


def evaluated(rule: dict[str, Any]) -> bool:
    """Whether Prometheus evaluated the rule yet (never: Go's zero time)."""
    return not str(rule.get("lastEvaluation", "0001")).startswith("0001")
