"""The demo's report from a finished run's figures: every request figure says how it was obtained."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from neuronfleet.demo.report import DemoResult, ScaleEvent, print_summary, write_report


def _result(load: str) -> DemoResult:
    facts = {
        "minutes": 5.5,
        "trace_start_minute": 34.0,
        "lead_in_minutes": 0.0,
        "slo_ms": 50.0,
        "trace_requests": 2000,
        "copies": 45,
        "offset_window_s": 30.0,
        "device": "emulated-neuroncore",
        "time_scale": 8.0,
        "scrape_interval_s": 1.0,
        "spec_changes": {"scaling": {"intervalSeconds": 5}},
        "rate_factor": 10.0,
        "peak_replicas_at_full_throughput": 9.0,
        "per_replica_req_per_s": 1000.0,
        "profile": "bert-base/1nc",
    }
    outcomes = {"ok": 980, "rejected": 20, "unavailable": 0, "error": 0, "refused": 0, "lost": 0, "not_sent": 0}
    return DemoResult(
        facts=facts,
        compile="compiled for real",
        requests=1000,
        served=980,
        rejected=20,
        slo_attainment=0.97,
        p50_ms=12.0,
        p99_ms=60.0,
        replica_hours=0.2,
        warm_pod_hours=0.1,
        node_hours={"inf2.xlarge": 0.2},
        usd=0.15,
        scale_events=2,
        scale_ups=1,
        scale_downs=1,
        events=[ScaleEvent(20.0, "desired active replicas 2 -> 3: load 2.6")],
        peak_active=3,
        min_active=2,
        peak_nodes=3,
        cold_start={},
        conditions=[{"type": "ScalingActive", "status": "True", "reason": "MetricsRead", "message": "ok"}],
        timeline={
            **{key: [2.0, 3.0] for key in ("active", "ready", "warm", "desired")},
            "t": [0.0, 5.0],
            "demand": [100.0, 110.0],
            "p99_ms": [math.nan, 40.0],
        },
        load=load,
        lost=0,
        outcomes=outcomes if load == "real" else {},
        metrics_source="prometheus" if load == "real" else "simulated queue",
        client={
            "client_cpu_s": 3.0,
            "loop_lag_p99_ms": 1.2,
            "loop_lag_max_ms": 4.0,
            "send_lateness_p99_ms": 2.0,
            "machine_steal_share": 0.081,
            "machine_busy_share": 0.6,
            "quiet_requests": 800,
            "quiet_within_slo": 796,
        },
    )


def test_a_real_run_says_its_figures_were_measured_at_the_client(tmp_path: Path) -> None:
    write_report(_result("real"), tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["load"] == "real" and summary["figures_from"] == "measured at the client"
    assert summary["lost"] == 0 and summary["rejected"] == 20 and summary["outcomes"]["ok"] == 980
    assert summary["within_slo_fraction"] == summary["slo_attainment"] == 0.97
    assert summary["timeline"]["p99_ms"] == [None, 40.0], "JSON has no NaN: a second without answers is null"
    report = (tmp_path / "report.md").read_text()
    assert "# neuronfleet sandbox demo (real load)" in report
    for figure in ("requests", "rejected with 429", "lost (sent, never answered)", "within the 50 ms SLO"):
        line = next(row for row in report.splitlines() if row.startswith(f"| {figure} |"))
        assert line.endswith("| measured at the client |"), line
    assert "No model server runs" not in report and "emulated NeuronCore device" in report
    assert (tmp_path / "timeline.png").stat().st_size > 0


def test_a_simulated_run_says_so(tmp_path: Path) -> None:
    write_report(_result("simulated"), tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["load"] == "simulated" and summary["figures_from"] == "simulated"
    report = (tmp_path / "report.md").read_text()
    line = next(row for row in report.splitlines() if row.startswith("| within the 50 ms SLO |"))
    assert line.endswith("| simulated |")
    assert "No model server runs in the" in report and "lost (sent" not in report


def test_a_real_run_tells_the_hosts_stolen_cpu_from_the_fleets_misses(tmp_path: Path) -> None:
    result = _result("real")
    write_report(result, tmp_path)
    report = (tmp_path / "report.md").read_text()
    steal_row = next(row for row in report.splitlines() if row.startswith("| CPU time taken by the hypervisor"))
    assert "8.1% of the machine" in steal_row
    quiet_row = next(row for row in report.splitlines() if row.startswith("| within the SLO, quiet seconds only |"))
    assert "99.50% of the 800 requests (80%)" in quiet_row, quiet_row
    printed = io.StringIO()
    print_summary(result, Console(file=printed, width=300), tmp_path)
    assert "the hypervisor took 8.1% of this machine's CPU time" in printed.getvalue()

    # A client without the machine's figures (or a simulated run) adds no such rows.
    result.client = {k: v for k, v in result.client.items() if not k.startswith(("machine", "quiet"))}
    write_report(result, tmp_path)
    assert "hypervisor" not in (tmp_path / "report.md").read_text()


def test_a_real_run_on_a_busy_machine_says_the_latencies_include_its_delays(tmp_path: Path) -> None:
    def printed(load: str, lag_ms: float) -> str:
        result = _result(load)
        result.client = {**result.client, "loop_lag_p99_ms": lag_ms}
        text = io.StringIO()
        print_summary(result, Console(file=text, width=300), tmp_path)
        return text.getvalue()

    assert "the machine was busy: the client's own event loop lagged 40 ms at p99" in printed("real", 40.0)
    assert "the machine was busy" not in printed("real", 1.2)  # an idle machine's lag
    # A simulated run has no client whose loop could lag: its figures carry no such delay.
    assert "the machine was busy" not in printed("simulated", 40.0)


def test_a_real_run_shows_the_routers_re_sends_next_to_the_lost_requests(tmp_path: Path) -> None:
    # A re-send (no connection to an endpoint: nothing was sent, the next one took it) is the one the
    # router makes; the report says how many, beside the requests lost, so neither hides (review r6).
    result = _result("real")
    result.lost, result.resent = 3, 7
    write_report(result, tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["lost"] == 3 and summary["resent"] == 7
    rows = (tmp_path / "report.md").read_text().splitlines()
    lost = next(i for i, row in enumerate(rows) if row.startswith("| lost (sent, never answered) |"))
    assert rows[lost + 1].startswith("| re-sent by the router (no connection to the endpoint: nothing sent) | 7 |")
    printed = io.StringIO()
    print_summary(result, Console(file=printed, width=300), tmp_path)
    lines = printed.getvalue().splitlines()
    lost = next(i for i, line in enumerate(lines) if "lost: sent, never answered" in line)
    assert "re-sent by the router" in lines[lost + 1] and "7" in lines[lost + 1]


@pytest.mark.parametrize(("load", "demand"), [("real", "sent by the client"), ("simulated", "simulated")])
def test_the_timeline_legend_names_every_line_and_where_the_demand_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load: str, demand: str
) -> None:
    import matplotlib.figure

    legends: list[list[str]] = []
    monkeypatch.setattr(
        matplotlib.figure.Figure,
        "savefig",
        lambda figure, path, **_: legends.extend(
            [text.get_text() for text in ax.get_legend().get_texts()] for ax in figure.axes if ax.get_legend()
        ),
    )
    write_report(_result(load), tmp_path)
    assert legends == [
        [
            f"demand (req/s, {demand})",
            "p99 ms (client)",
            "SLO (50 ms)",
            "active pods",
            "ready active",
            "warm pods",
            "desired",
        ]
    ]
