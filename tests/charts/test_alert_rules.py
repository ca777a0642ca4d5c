"""The chart's alerting rules and dashboard queries, checked with Prometheus' own promtool.

- the PrometheusRule the chart renders (``monitoring.alerts.enabled``) is written out as a rule file
  and checked with ``promtool check rules``;
- ``promtool test rules`` runs tests/charts/alert_rule_tests.yaml against that file: each alert
  fires on its condition and not just below it nor before its ``for:``;
- every ``neuronfleet_*`` / ``neuronserve_*`` series the dashboard's panels and the alerts name is
  one the operator's and the model server's prometheus-client registries export.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from chart_support import MINIMAL_VALUES, REPO, by_kind, helm, render, tool
from prometheus_client import CollectorRegistry, generate_latest

from neuronfleet.metrics.operator_metrics import OperatorMetrics
from neuronserve.backend import RETEST_FIRST_SECONDS, RETEST_MAX_SECONDS
from neuronserve.metrics import LATENCY_BUCKETS, BusyTracker, ServerMetrics

HERE = Path(__file__).resolve().parent
UNIT_TESTS = HERE / "alert_rule_tests.yaml"
#: The rule file alert_rule_tests.yaml names.
RULE_FILE = "neuronfleet-alerts.rules.yaml"
ALERTS_ON = ("monitoring.alerts.enabled=true", "monitoring.operatorPodMonitor.enabled=true")
TROUBLESHOOTING = REPO / "docs" / "troubleshooting.md"


def prometheus_rule(sets: tuple[str, ...] = ()) -> dict[str, Any]:
    (rule,) = by_kind(render(sets=[*ALERTS_ON, *sets]), "PrometheusRule")
    return rule


def alerts(rule: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}


def write_rule_file(rule: dict[str, Any], path: Path, annotations: bool = True) -> Path:
    """The PrometheusRule's groups as a Prometheus rule file (what the Prometheus Operator loads)."""
    groups = rule["spec"]["groups"]
    if not annotations:
        groups = [
            {**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]} for g in groups
        ]
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("promtool"), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_the_rendered_rules_pass_promtool_check(tmp_path: Path) -> None:
    result = promtool("check", "rules", str(write_rule_file(prometheus_rule(), tmp_path / RULE_FILE)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 10 rules found" in result.stdout


def test_each_alert_fires_on_its_condition_and_not_below_it_nor_before_its_for(tmp_path: Path) -> None:
    # Annotations are left out: promtool compares them whole, and the unit tests are about when an
    # alert fires and with which labels (promtool check rules parses the annotations' templates).
    write_rule_file(prometheus_rule(), tmp_path / RULE_FILE, annotations=False)
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    result = promtool("test", "rules", UNIT_TESTS.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_unit_tests_where_it_fires_and_where_it_does_not() -> None:
    fires: set[str] = set()
    silent: set[str] = set()
    for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for case in test["alert_rule_test"]:
            (fires if case.get("exp_alerts") else silent).add(case["alertname"])
    rendered = set(alerts(prometheus_rule()))
    assert rendered - fires == set(), "alerts no unit test makes fire"
    assert rendered - silent == set(), "alerts no unit test holds back"


def test_every_alert_has_a_severity_a_summary_and_a_troubleshooting_entry() -> None:
    headings = set(re.findall(r"^### (\S+)$", TROUBLESHOOTING.read_text(), flags=re.MULTILINE))
    for name, rule in alerts(prometheus_rule()).items():
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        assert rule["annotations"]["summary"], name
        assert f'docs/troubleshooting.md, "{name}"' in rule["annotations"]["description"], name
        assert name in headings, f"docs/troubleshooting.md has no '### {name}'"


def test_thresholds_and_durations_come_from_the_values(tmp_path: Path) -> None:
    rule = prometheus_rule(
        (
            "monitoring.alerts.requestsRejected.ratio=0.2",
            "monitoring.alerts.requestsRejected.for=30m",
            "monitoring.alerts.latencySLO.latencySeconds=0.25",
            "monitoring.alerts.latencySLO.objective=0.999",
            "monitoring.alerts.replicasBelowDesired.severity=critical",
            "monitoring.alerts.labels.release=kube-prometheus-stack",
        )
    )
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    rules = alerts(rule)
    assert rules["NeuronserveRequestsRejected"]["expr"].endswith("> 0.2")
    assert rules["NeuronserveRequestsRejected"]["for"] == "30m"
    assert rules["NeuronfleetReplicasBelowDesired"]["labels"]["severity"] == "critical"
    fast = rules["NeuronserveLatencySLOFastBurn"]["expr"]
    assert "le=~`0\\.25(\\.0)?`" in fast and "14.4 * (1 - 0.999)" in fast
    result = promtool("check", "rules", str(write_rule_file(rule, tmp_path / RULE_FILE)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "NeuronserveLatencySLOFastBurn" not in alerts(
        prometheus_rule(("monitoring.alerts.latencySLO.enabled=false",))
    )


#: The alerts read from the operator replica that reconciles a deployment: an operator hand-over
#: leaves them without series for a while (keep_firing_for).
PER_DEPLOYMENT_OPERATOR_ALERTS = {
    "NeuronfleetReplicasBelowDesired",
    "NeuronfleetDeploymentDegraded",
    "NeuronfleetScalingMetricsUnavailable",
}


def test_keep_firing_for_is_on_the_alerts_a_hand_over_interrupts_and_can_be_left_out() -> None:
    def keep_firing_for(*sets: str) -> dict[str, str]:
        return {
            name: r["keep_firing_for"] for name, r in alerts(prometheus_rule(sets)).items() if "keep_firing_for" in r
        }

    assert keep_firing_for() == dict.fromkeys(PER_DEPLOYMENT_OPERATOR_ALERTS, "5m")
    assert keep_firing_for("monitoring.alerts.keepFiringFor=15m") == dict.fromkeys(
        PER_DEPLOYMENT_OPERATOR_ALERTS, "15m"
    )
    # For a Prometheus before 2.42, or a Prometheus Operator before v0.66.
    assert keep_firing_for("monitoring.alerts.keepFiringFor=") == {}


def template_failure(*sets: str) -> str:
    """helm template's error for the alerts turned on with these settings (it must refuse them)."""
    args = ["template", "nf", str(REPO / "charts" / "neuronfleet"), "--values", str(MINIMAL_VALUES)]
    result = helm(*args, *(arg for item in (*ALERTS_ON, *sets) for arg in ("--set", item)))
    assert result.returncode != 0, f"{sets} rendered"
    return result.stderr


def test_a_burn_rate_alert_that_could_never_fire_is_refused() -> None:
    # 14.4 x (1 - 0.93) = 1.008: no share of slow requests exceeds it.
    fast = template_failure("monitoring.alerts.latencySLO.objective=0.93")
    assert "fastBurn.rate 14.4 x (1 - objective 0.93) = 1.008, 1 or more" in fast
    assert (
        "NeuronserveLatencySLOFastBurn would never fire; keep fastBurn.rate below 1 / (1 - objective) = 14.29" in fast
    )
    # Exactly 1 (computed in decimal: not 0.9999...) is refused too.
    assert "= 1, 1 or more" in template_failure(
        "monitoring.alerts.latencySLO.objective=0.9", "monitoring.alerts.latencySLO.fastBurn.rate=10"
    )
    slow = template_failure(
        "monitoring.alerts.latencySLO.objective=0.85",
        "monitoring.alerts.latencySLO.fastBurn.rate=6",
        "monitoring.alerts.latencySLO.slowBurn.rate=7",
    )
    assert "slowBurn.rate 7 x (1 - objective 0.85) = 1.05" in slow and "NeuronserveLatencySLOSlowBurn" in slow
    # A low objective works with burn rates to match, and without the SLO alerts nothing is checked.
    rules = alerts(
        prometheus_rule(
            (
                "monitoring.alerts.latencySLO.objective=0.9",
                "monitoring.alerts.latencySLO.fastBurn.rate=9",
                "monitoring.alerts.latencySLO.slowBurn.rate=5",
            )
        )
    )
    assert "> 9 * (1 - 0.9)" in rules["NeuronserveLatencySLOFastBurn"]["expr"]
    assert prometheus_rule(("monitoring.alerts.latencySLO.objective=0.5", "monitoring.alerts.latencySLO.enabled=false"))


def exposed_latency_bounds() -> list[str]:
    """The `le` values of the model server's latency histogram as its /metrics text writes them."""
    text = generate_latest(ServerMetrics(BusyTracker()).registry).decode()
    return re.findall(r'^neuronserve_request_latency_seconds_bucket\{le="([^"]+)"\}', text, flags=re.MULTILINE)


def test_the_latency_threshold_must_be_a_bound_of_the_servers_histogram() -> None:
    schema = json.loads((REPO / "charts" / "neuronfleet" / "values.schema.json").read_text())
    latency = schema["properties"]["monitoring"]["properties"]["alerts"]["properties"]["latencySLO"]["properties"]
    numbers, strings = (choice["enum"] for choice in latency["latencySeconds"]["anyOf"])
    assert numbers == list(LATENCY_BUCKETS)
    # How --set passes a fraction.
    assert strings == [f"{bound:g}" for bound in LATENCY_BUCKETS]
    exposed = exposed_latency_bounds()
    assert len(exposed) == len(LATENCY_BUCKETS) + 1  # and +Inf
    # The rendered `le` matcher selects exactly the bucket asked for, as the server writes it
    # (1 second is "1.0" there).
    for asked in ("0.025", "0.1", "1", "2.5", "30"):
        expr = alerts(prometheus_rule((f"monitoring.alerts.latencySLO.latencySeconds={asked}",)))[
            "NeuronserveLatencySLOFastBurn"
        ]["expr"]
        (pattern,) = set(re.findall(r"le=~`([^`]*)`", expr))
        assert [le for le in exposed if re.fullmatch(pattern, le)] == [
            le for le in exposed if le != "+Inf" and float(le) == float(asked)
        ], asked
    result = helm(
        "template", "nf", str(REPO / "charts" / "neuronfleet"), "--values", str(MINIMAL_VALUES),
        *(arg for item in (*ALERTS_ON, "monitoring.alerts.latencySLO.latencySeconds=0.2") for arg in ("--set", item)),
    )  # fmt: skip
    assert result.returncode != 0 and "latencySeconds" in result.stderr


def test_the_default_install_has_no_prometheus_rule() -> None:
    assert by_kind(render(), "PrometheusRule") == []


def test_alerts_need_the_operators_metrics_scraped() -> None:
    def failure(*sets: str) -> str:
        args = ["template", "nf", str(REPO / "charts" / "neuronfleet"), "--values", str(MINIMAL_VALUES)]
        result = helm(*args, *(arg for item in sets for arg in ("--set", item)))
        assert result.returncode != 0, f"{sets} rendered"
        return result.stderr

    assert "enable it, or set monitoring.alerts.operatorJob" in failure("monitoring.alerts.enabled=true")
    assert "set operator.metricsPort" in failure(*ALERTS_ON, "operator.metricsPort=0")
    rule = by_kind(
        render(sets=["monitoring.alerts.enabled=true", "monitoring.alerts.operatorJob=neuronfleet"]), "PrometheusRule"
    )
    assert 'up{job="neuronfleet"}' in alerts(rule[0])["NeuronfleetOperatorDown"]["expr"]


def test_the_operator_podmonitor_keeps_the_deployments_namespace_label() -> None:
    # Without honorLabels Prometheus renames the series' `namespace` (the InferenceDeployment's) to
    # `exported_namespace` and sets the operator pod's: every alert would group by the wrong one.
    docs = render(sets=["monitoring.operatorPodMonitor.enabled=true"])
    (monitor,) = [m for m in by_kind(docs, "PodMonitor") if m["metadata"]["name"].endswith("-operator")]
    assert monitor["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True
    rules = alerts(prometheus_rule())
    assert f'job="neuronfleet-system/{monitor["metadata"]["name"]}"' in rules["NeuronfleetOperatorDown"]["expr"]


# --- the series the queries name ---------------------------------------------------------------

#: The sample names of a metric family of each type, as the text exposition writes them.
SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
    "info": ("_info",),
    "stateset": ("",),
    "enum": ("",),
    "unknown": ("",),
}
#: A metric name of the project's (a label name inside one, e.g. label_serving_neuronfleet_dev_x, has
#: no word boundary before it).
SERIES = re.compile(r"\b(?:neuronfleet|neuronserve)_[A-Za-z0-9_:]*")
#: PromQL strings (label values, regexes): their text is no series name.
STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')


def exported(registry: CollectorRegistry) -> set[str]:
    """Every sample name the registry's collectors can expose (labelled families with no child yet
    expose none, so their type says which)."""
    names: set[str] = set()
    for family in registry.collect():
        names |= {sample.name for sample in family.samples}
        names |= {family.name + suffix for suffix in SUFFIXES[family.type]}
    return names


def exported_series() -> set[str]:
    return exported(OperatorMetrics().registry) | exported(ServerMetrics(BusyTracker()).registry)


def named_series(query: str) -> set[str]:
    return set(SERIES.findall(STRINGS.sub('""', query)))


def dashboard_queries() -> dict[str, str]:
    """Each query of the rendered dashboard, keyed by where it is (panel title, or variable)."""
    (config_map,) = [cm for cm in by_kind(render(), "ConfigMap") if cm["metadata"]["name"].endswith("-dashboard")]
    dashboard = json.loads(config_map["data"]["neuronfleet-fleet.json"])
    queries: dict[str, str] = {}

    def panels(items: list[dict[str, Any]]) -> None:
        for panel in items:
            for i, target in enumerate(panel.get("targets") or []):
                if target.get("expr"):
                    queries[f"panel {panel.get('title')!r} target {i}"] = target["expr"]
            panels(panel.get("panels") or [])

    panels(dashboard["panels"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            queries[f"variable ${variable['name']}"] = query if isinstance(query, str) else query.get("query", "")
    return queries


def test_exported_series_are_collected_from_the_real_registries() -> None:
    names = exported_series()
    assert {"neuronfleet_reconciles_total", "neuronfleet_replicas", "neuronfleet_degraded"} <= names
    assert {"neuronserve_request_latency_seconds_bucket", "neuronserve_device_busy_seconds_total"} <= names
    assert "neuronfleet_reconciles" not in names and "neuronserve_requests" not in names
    assert named_series('rate(neuronserve_requests_total{namespace=~"neuronfleet_x"}[5m])') == {
        "neuronserve_requests_total"
    }


def test_dashboard_and_alert_queries_name_only_exported_series() -> None:
    known = exported_series()
    queries = dashboard_queries()
    queries |= {f"alert {name}": rule["expr"] for name, rule in alerts(prometheus_rule()).items()}
    named = {where: named_series(query) for where, query in queries.items()}
    unknown = {where: sorted(names - known) for where, names in named.items() if names - known}
    assert unknown == {}, "queries naming series nothing exports"
    # The check reads something: the dashboard's panels and both alert groups name series.
    assert sum(bool(names) for where, names in named.items() if where.startswith("panel")) >= 8
    read = set().union(*named.values())
    assert any(n.startswith("neuronfleet_") for n in read) and any(n.startswith("neuronserve_") for n in read)


def test_the_rules_render_as_a_rule_file_without_the_prometheus_operator(tmp_path: Path) -> None:
    # docs/install-eks.md: `helm template --show-only templates/prometheusrule.yaml | yq '.spec'`,
    # with no PodMonitor and the collector's job named, is a rule file for AMP's ruler or a Prometheus.
    result = helm(
        "template",
        "neuronfleet",
        str(REPO / "charts" / "neuronfleet"),
        "--namespace",
        "neuronfleet-system",
        "--values",
        str(MINIMAL_VALUES),
        "--set",
        "monitoring.alerts.enabled=true,monitoring.alerts.operatorJob=neuronfleet-operator",
        "--show-only",
        "templates/prometheusrule.yaml",
    )
    assert result.returncode == 0, result.stderr
    rule_file = tmp_path / "neuronfleet-rules.yaml"
    rule_file.write_text(yaml.safe_dump(yaml.safe_load(result.stdout)["spec"], sort_keys=False))
    checked = promtool("check", "rules", str(rule_file))
    assert checked.returncode == 0 and "SUCCESS: 10 rules found" in checked.stdout, checked.stdout + checked.stderr
    assert 'job="neuronfleet-operator"' in rule_file.read_text()


def test_hand_over_gap_bridges_the_alerts_a_hand_over_interrupts_and_can_be_left_out() -> None:
    def bridged(*sets: str) -> set[str]:
        return {name for name, r in alerts(prometheus_rule(sets)).items() if r["expr"].startswith("last_over_time((")}

    assert bridged() == PER_DEPLOYMENT_OPERATOR_ALERTS
    assert all(
        r["expr"].endswith(")[7m:])")
        for name, r in alerts(prometheus_rule(("monitoring.alerts.handOverGap=7m",))).items()
        if name in PER_DEPLOYMENT_OPERATOR_ALERTS
    )
    assert bridged("monitoring.alerts.handOverGap=") == set()


def flapping_core_minutes(serves_minutes: int, hours: int) -> list[int]:
    """neuronserve_device_cores_out a minute apart for a core that passes each re-test, serves
    ``serves_minutes`` and fails again: out-runs as long as the model server's cool-offs (doubling from
    RETEST_FIRST_SECONDS while it flaps, at most RETEST_MAX_SECONDS)."""
    samples: list[int] = []
    cool_off = RETEST_FIRST_SECONDS
    while len(samples) < hours * 60:
        samples += [1] * round(cool_off / 60) + [0] * serves_minutes
        cool_off = min(2 * cool_off, RETEST_MAX_SECONDS)
    return samples[: hours * 60]


def test_a_flapping_core_fires_cores_out_once_its_out_runs_outlast_the_for(tmp_path: Path) -> None:
    """A core back on each re-test that fails again 2 minutes later was out ~84 % of the time, and with
    the cool-off capped at the alert's 15 minutes no out-run outlasted its ``for``: it never fired."""
    samples = flapping_core_minutes(serves_minutes=2, hours=3)
    runs = [len(run) for run in "".join(map(str, samples)).split("0") if run]
    longest_start = "".join(map(str, samples)).index("1" * max(runs))
    write_rule_file(prometheus_rule(), tmp_path / RULE_FILE, annotations=False)
    series = 'neuronserve_device_cores_out{namespace="ml", deployment="bert", pod="bert-1"}'
    tests = {
        "rule_files": [RULE_FILE],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": series, "values": " ".join(map(str, samples))}],
                "alert_rule_test": [
                    {
                        "eval_time": f"{longest_start + max(runs) - 1}m",
                        "alertname": "NeuronserveCoresOut",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "warning",
                                    "namespace": "ml",
                                    "deployment": "bert",
                                    "pod": "bert-1",
                                }
                            }
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "flapping.yaml").write_text(yaml.safe_dump(tests))
    result = promtool("test", "rules", "flapping.yaml", cwd=tmp_path)
    assert result.returncode == 0, f"out-runs {runs} (minutes): {result.stdout + result.stderr}"
