"""Shared by the benchmarks: write one result file per benchmark in the project's JSON shape.

Shape (see DESIGN.md, "Benchmark results"):
{"benchmark", "commit", "machine", "params", "figures", "cases"}
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=RESULTS_DIR.parent
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cpu, {model}"


def write_result(
    benchmark: str,
    params: dict[str, Any],
    figures: dict[str, float | int | str | None],
    cases: list[dict[str, Any]] | None = None,
) -> Path:
    """Write bench/results/<benchmark>.json and return its path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "benchmark": benchmark,
        "commit": git_commit(),
        "machine": machine(),
        "params": params,
        "figures": figures,
    }
    if cases is not None:
        doc["cases"] = cases
    path = RESULTS_DIR / f"{benchmark}.json"
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return path
