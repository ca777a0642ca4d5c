"""`neuronfleet demo` end to end on a short slice: the real operator scales the example under replayed load.

Runs :func:`neuronfleet.demo.orchestration.run_demo` itself (it makes its own looptime loop, so this
test is synchronous) for three simulated minutes of the busiest stretch of the trace shipped with the
package, with the compile skipped, at a speed the machine cannot reach (the pacer then never sleeps).
The trace is part of the package: if it is missing, the test fails (it does not skip).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from rich.console import Console

from neuronfleet.demo import options as demo_options
from neuronfleet.demo.options import DEFAULT_TRACE, DemoError, DemoOptions
from neuronfleet.demo.orchestration import prepare_example, prepare_load, run_demo
from neuronfleet.demo.outdir import DEMO_ENTRIES, MARKER_NAME, check_out_dir
from neuronfleet.planning.catalog import INF2_INSTANCE_TYPES
from neuronfleet.sandbox.dirlock import LOCK_FILE_NAME


def test_short_demo_scales_the_fleet_and_writes_a_consistent_report(tmp_path: Path) -> None:
    out = tmp_path / "demo-out"
    console = Console(file=(tmp_path / "console.txt").open("w"), width=140)
    options = DemoOptions(
        load="simulated",
        minutes=3.0,
        speed=1000.0,
        out=out,
        live=False,
        skip_compile=True,
        start_minute=26.0,
        lead_in_minutes=0.0,
    )
    started = time.monotonic()
    result = run_demo(options, console)
    assert 0.0 < result.replay_wall_s <= result.wall_s <= time.monotonic() - started

    for name in ("report.md", "timeline.png", "summary.json"):
        assert (out / name).stat().st_size > 0, name
    # It wrote nothing in --out but what its help lists, marked as the demo's, and released the lock.
    written = {path.name for path in out.iterdir()}
    assert written <= DEMO_ENTRIES, written - DEMO_ENTRIES
    assert MARKER_NAME in written and LOCK_FILE_NAME not in written
    summary = json.loads((out / "summary.json").read_text())
    report = (out / "report.md").read_text()
    assert "CC-BY 4.0" in report and "No model server runs" in report
    assert "skipped (--skip-compile)" in summary["compile"]

    # The operator scaled the fleet up from minReplicas (2) under the replayed load, through its Events.
    timeline = summary["timeline"]
    assert summary["min_active"] == 2
    assert summary["peak_active"] > summary["min_active"]
    assert summary["peak_active"] == max(timeline["active"])
    assert summary["scale_ups"] >= 1 and summary["scale_events"] == len(summary["events"])
    assert summary["peak_nodes"] > 2, "the provisioner launched nodes for the new pods"
    assert max(timeline["ready"]) > 2, "new pods were scheduled and became ready"

    # Figures agree with each other.
    assert summary["requests"] == pytest.approx(summary["served"] + summary["rejected"], rel=1e-9)
    assert summary["requests"] > 1000
    # Every arrival of the three minutes was replayed, none left for a later evaluation to serve
    # (arrivals a jitter moved past the end are the next minute's).
    (tmp_path / "expected").mkdir()
    load = prepare_load(options, prepare_example(options, tmp_path / "expected").deployment)
    replayed_bins = round(load.duration / load.workload.dt)
    assert summary["requests"] == pytest.approx(float(load.workload.count[:replayed_bins].sum()), rel=1e-9)
    assert 0.0 <= summary["slo_attainment"] <= 1.0
    cost = sum(hours * INF2_INSTANCE_TYPES[kind].usd_per_hour for kind, hours in summary["node_hours"].items())
    assert summary["usd"] == pytest.approx(cost)
    # Replica-hours lie between the fleet's smallest and largest size over the three minutes.
    hours = 3.0 / 60.0
    assert summary["min_active"] * hours <= summary["replica_hours"] <= summary["peak_active"] * hours
    assert math.isclose(result.replica_hours, summary["replica_hours"])
    # The operator measured cold starts of the pods it added (status.coldStart).
    assert summary["cold_start"]["pod"]["samples"] >= 1
    assert timeline["t"][-1] <= 180.0 and len(timeline["t"]) >= 30


def test_bad_trace_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "trace.csv"
    bad.write_text("when,what\n1,2\n")
    with pytest.raises(DemoError, match="no arrival-time column"):
        run_demo(
            DemoOptions(load="simulated", trace=bad, out=tmp_path / "out", live=False, skip_compile=True),
            Console(file=None),
        )
    # A demo that ended before its report (here: after writing its log and model stand-in) still
    # left a --out the next demo takes: it marked it first.
    assert (tmp_path / "out" / MARKER_NAME).is_file()
    check_out_dir(tmp_path / "out")


def test_demo_runs_again_on_its_own_out_and_on_a_crashed_sandboxs_lock_file(tmp_path: Path) -> None:
    """`make demo` run after run on the same --out; the first run on a directory that holds only the
    lock file a sandbox killed outright left (the kernel dropped its lock, not the file)."""
    out = tmp_path / "demo-out"
    out.mkdir()
    (out / LOCK_FILE_NAME).write_text("4242\n")
    options = DemoOptions(
        load="simulated", minutes=1.0, speed=1000.0, out=out, live=False, skip_compile=True, lead_in_minutes=0.0
    )
    summaries = []
    for run in range(2):
        run_demo(options, Console(file=(tmp_path / f"console-{run}.txt").open("w"), width=140))
        summaries.append(json.loads((out / "summary.json").read_text()))
        written = {path.name for path in out.iterdir()}
        assert written <= DEMO_ENTRIES and MARKER_NAME in written, written
    assert summaries[0]["requests"] == summaries[1]["requests"] > 0


def test_the_default_trace_ships_with_the_package() -> None:
    assert DEFAULT_TRACE.is_file(), f"{DEFAULT_TRACE} is package data: the demo's default must not need ../shared"
    attribution = DEFAULT_TRACE.with_suffix(".README.md").read_text()
    assert "CC-BY" in attribution and "Splitwise" in attribution


def test_a_missing_default_trace_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo_options, "DEFAULT_TRACE", tmp_path / "gone.csv")
    with pytest.raises(DemoError, match=r"default trace .* is missing"):
        run_demo(DemoOptions(load="simulated", out=tmp_path / "out", live=False, skip_compile=True), Console(file=None))


@pytest.mark.slow
@pytest.mark.prometheus
@pytest.mark.timeout(420)
def test_live_demo_serves_real_requests_loses_none_and_scales_up_from_prometheus(tmp_path: Path) -> None:
    """The live part, short: a real compile, real servers (emulated device), Prometheus, the client.

    45 s of the trace from minute 35.5 (its busiest 30 s): more than the two minReplicas pods
    carry at the target utilization, so the operator must scale up from what Prometheus reads (it
    did 12 s in, and the promoted warm pod was ready at 15 s, on a busy 2-core host).
    """
    out = tmp_path / "demo-out"
    console = Console(file=(tmp_path / "console.txt").open("w"), width=140)
    started = time.monotonic()
    result = run_demo(DemoOptions(load="real", out=out, live=False, live_start_minute=35.5, live_minutes=0.75), console)
    # The wall times reported lie within the run as this test timed it, the load's (45 s of
    # arrivals) within the whole.
    assert 30.0 <= result.replay_wall_s <= result.wall_s <= time.monotonic() - started
    summary = json.loads((out / "summary.json").read_text())
    report = (out / "report.md").read_text()
    written = {path.name for path in out.iterdir()}
    assert written <= DEMO_ENTRIES, f"not in --out's help and README: {written - DEMO_ENTRIES}"

    assert summary["load"] == "real" and summary["figures_from"] == "measured at the client"
    assert summary["metrics_source"] == "prometheus"
    assert "measured at the client" in report and "emulated NeuronCore device" in report
    assert "compiled for real on CPU" in summary["compile"]

    # Every request the client scheduled has exactly one outcome; none was lost or left unsent.
    outcomes = summary["outcomes"]
    assert sum(outcomes.values()) == summary["requests"] == result.requests
    assert summary["lost"] == outcomes["lost"] == 0, outcomes
    assert outcomes["not_sent"] == 0 and outcomes["refused"] == 0, outcomes
    # Every request was answered, or refused with 429 (and counted): no 503, no error.
    assert outcomes["ok"] + outcomes["rejected"] == summary["requests"], outcomes
    assert outcomes["ok"] > 0.9 * summary["requests"] > 5000, outcomes
    assert summary["served"] == outcomes["ok"] and summary["rejected"] == outcomes["rejected"]
    assert 0.0 < summary["slo_attainment"] <= outcomes["ok"] / summary["requests"]

    # The operator scaled up from minReplicas (2) on signals it read from Prometheus.
    assert summary["scale_ups"] >= 1, summary["events"]
    assert summary["peak_active"] > 2 and max(summary["timeline"]["ready"]) > 2
    # Replica-hours are integrated second by second over the load: between the fleet's smallest
    # and largest size over its wall time (a second of slack at each end).
    hours = (result.replay_wall_s - 2.0) / 3600.0, (result.replay_wall_s + 2.0) / 3600.0
    assert summary["min_active"] * hours[0] <= summary["replica_hours"] <= summary["peak_active"] * hours[1]
    scaling = next(c for c in summary["conditions"] if c["type"] == "ScalingActive")
    assert scaling["status"] == "True", scaling
    assert summary["client"]["client_cpu_s"] > 0 and summary["client"]["peak_outstanding"] >= 1
    # The host's share is measured: the machine was busy (this very load), and the quiet seconds'
    # requests are a subset of all of them.
    client = summary["client"]
    assert 0.0 <= client["machine_steal_share"] < 1.0 and 0.0 < client["machine_busy_share"] <= 1.0
    assert 0 <= client["quiet_within_slo"] <= client["quiet_requests"] <= summary["requests"]
    # The client's own delays, measured from each request's schedule: never negative, and a few
    # seconds at the very most on a machine this busy (not whole clock readings).
    assert 0.0 <= client["send_lateness_p99_ms"] < 10_000.0, client
    assert 0.0 <= client["loop_lag_max_ms"] < 10_000.0, client
