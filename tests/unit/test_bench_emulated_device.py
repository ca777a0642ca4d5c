"""The emulated-device benchmark's pure parts: the published figure it compares with, the ratio's
verdict against issue 12's band, the per-run figures and the diagnosis of what limited a run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# bench/ is a folder of scripts, not a package: its modules import each other by file name.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_emulated_device import (
    CASES,
    Run,
    limited_by,
    published_throughput,
    spread,
    summarize,
    verdict,
)

from neuronserve.emulated import BERT_BASE, BatchFigure, DeviceProfile


def test_the_published_figure_is_the_profiles_own_not_cores_times_batch_over_latency() -> None:
    assert [published_throughput(BERT_BASE, c.bucket) for c in CASES] == [2940, 2670, 2700, 1998]
    other = DeviceProfile("x", "", "", cores=1, sequence=8, hidden=4, batches=(BatchFigure(2, 1.0, 1234),))
    assert published_throughput(other, 2) == 1234
    with pytest.raises(ValueError, match="no throughput for batch 4"):
        published_throughput(other, 4)


def test_every_case_keeps_its_batches_at_its_bucket() -> None:
    # Requests of a full bucket are batched alone; smaller ones run alone, or two would share a batch.
    for case in CASES:
        assert case.rows == case.bucket
        assert case.batching == (case.bucket == max(c.bucket for c in CASES))
        assert ("--no-batching" in case.server_args()) != case.batching


@pytest.mark.parametrize(
    ("ratio", "expected"),
    [(0.9, "met"), (1.0, "met"), (1.1, "met"), (0.8999, "below"), (1.1001, "above"), (0.0, "below")],
)
def test_the_verdict_is_issue_12s_band_with_its_ends(ratio: float, expected: str) -> None:
    assert verdict(ratio) == expected


def _run(**changes: float) -> Run:
    # Two cores busy all of 2 s, 5,880 rows: the bucket-16 profile exactly.
    fields: dict[str, float] = dict(
        rows=5880, wall_s=2.0, busy_s=4.0, batches=368, batch_rows=5888, client_cpu_s=0.1, server_cpu_s=0.3,
        machine_busy_share=0.3, steal_share=0.0,
    )  # fmt: skip
    fields.update(changes)
    return Run(**fields)  # type: ignore[arg-type]


def test_a_run_is_summarised_as_wall_rate_ratio_utilisation_and_cpu_per_wall_second() -> None:
    summary = summarize(_run(), published=2940, cores=2)
    assert summary["wall_inf_per_s"] == 2940.0
    assert summary["vs_profile"] == 1.0
    assert summary["device_utilisation"] == 1.0
    assert summary["rows_per_batch"] == 16.0
    assert (summary["client_cpu_share"], summary["server_cpu_share"]) == (0.05, 0.15)
    slow = summarize(_run(rows=2940, busy_s=2.0, batches=0, batch_rows=0), published=2940, cores=2)
    assert (slow["vs_profile"], slow["device_utilisation"], slow["rows_per_batch"]) == (0.5, 0.5, 0.0)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, "device"),
        ({"rows": 7000}, "device"),  # above the band: still the device's pace (the verdict says above)
        ({"rows": 2000, "client_cpu_s": 1.9, "server_cpu_s": 1.9}, "client CPU"),
        ({"rows": 2000, "server_cpu_s": 1.8}, "server CPU"),
        ({"rows": 2000, "machine_busy_share": 0.9, "steal_share": 0.06}, "machine CPU"),
        ({"rows": 2000}, "device idle (no CPU limit)"),
    ],
)
def test_a_miss_is_put_on_the_first_part_out_of_cpu(changes: dict[str, float], expected: str) -> None:
    assert limited_by(summarize(_run(**changes), published=2940, cores=2)) == expected


def test_the_spread_is_the_median_and_the_ends() -> None:
    assert spread([0.97, 1.01, 0.99, 0.92, 1.0]) == {"median": 0.99, "min": 0.92, "max": 1.01}
