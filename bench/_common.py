"""Shared by the benchmarks: write one result file per benchmark in the project's JSON shape.

Shape (see DESIGN.md, "Benchmark results"):
{"benchmark", "commit", "machine", "params", "figures", "cases"}
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
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


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, all threads) of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # stat(5) fields 14, 15


def start_emulated_server(
    time_scale: float, model_name: str = "m", extra_args: Sequence[str] = ()
) -> tuple[subprocess.Popen[str], int]:
    """A ``neuronserve serve`` on the emulated NeuronCore device (bert-base profile), and its port
    (read from its "listening on" line; it is live then, ready a moment later). ``extra_args`` go
    last on its command line (``--no-batching``, ``--max-queue``, ...)."""
    argv = [str(Path(sys.executable).with_name("neuronserve")), "serve", "--device", "emulated-neuroncore"]
    argv += ["--profile", "bert-base", "--model-name", model_name, "--emulated-time-scale", f"{time_scale:g}"]
    argv += ["--max-batch-delay-ms", "4", "--host", "127.0.0.1", "--port", "0"]
    argv += ["--drain-delay-seconds", "0"]  # stopped by the benchmark alone: no endpoints to update
    argv += extra_args
    server = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    assert server.stderr is not None
    for line in server.stderr:
        if match := re.search(r"listening on http://[^:]+:(\d+)", line):
            return server, int(match.group(1))
    server.wait()
    raise RuntimeError(f"the server exited ({server.returncode}) without saying where it listens")


def wait_server_ready(port: int, timeout_s: float = 60.0) -> None:
    """Until the server on 127.0.0.1:``port`` answers ``/v2/health/ready`` with 200."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass  # 503 while loading (HTTPError is an OSError), or not listening yet
        if time.monotonic() > deadline:
            raise TimeoutError(f"the server on port {port} was not ready within {timeout_s:.0f} s")
        time.sleep(0.1)


def unlabelled_metrics(port: int, names: Sequence[str]) -> dict[str, float]:
    """The named samples without labels (counters, a histogram's ``_count`` and ``_sum``) of the
    server on 127.0.0.1:``port``'s /metrics; a name it does not export is left out."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    families = text_string_to_metric_families(text)
    return {s.name: s.value for f in families for s in f.samples if s.name in names and not s.labels}
