"""Wall-clock throughput of the emulated NeuronCore device, per batch bucket, against its profile.

Issue 12 asked that one replica on the emulated device serve its profile's throughput "within
10 %". The test suite checks the server's own accounting (busy seconds per batch); this measures
the wall clock: ``neuronserve serve --device emulated-neuroncore --profile bert-base`` as a real
process on 127.0.0.1, driven at saturation by a closed-loop client in its own process, and the rows
it answered per wall-clock second set against the profile's published throughput for that batch
size (``DeviceProfile.batches``), as a ratio with the target 0.9-1.1.

One server per batch bucket, each kept at that bucket: 16-row requests with dynamic batching on
(every batch is one request, as in the test), and 8-, 4- and 1-row requests with ``--no-batching``
(each request runs alone, so no batch grows past its bucket). The client sends binary tensors (as
tritonclient does by default) over keep-alive connections with :mod:`neuronfleet.sandbox.http1` on
uvloop, ``--concurrency`` requests outstanding at once, so that it costs little CPU next to the
server; its CPU time is reported, and so is the server's, per wall second (1.0 = one core busy).

Beside the wall-clock rate, each run reads the server's accounting from /metrics: device busy
seconds and batches. ``device_utilisation`` = busy seconds / (cores x wall seconds): 1.0 is a
device never idle. With every batch full it is also the wall rate over cores x batch / latency,
the most the device's timing allows; the published throughputs are rounded (2,700 inf/s for batch
4 where 2 x 4 / 2.95 ms is 2,712), so ``vs_profile`` can pass 1.0 by that much. When the ratio
misses, ``limited_by`` names the first part that was out of CPU (the client, the server, or the
machine with its other tenants and the hypervisor), else the device idled for want of queued work.
The buckets are measured in interleaved rounds (the machine is shared: its load drifts within a
run); figures are medians over rounds with their min and max. The 1-minute load average is read
before, after each run and at the end; the machine's busy and stolen CPU shares per run.

    .venv/bin/python bench/bench_emulated_device.py [--rounds 5] [--seconds 3] [--concurrency 48]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from _common import process_cpu_seconds, start_emulated_server, unlabelled_metrics, wait_server_ready, write_result
from neuronserve.emulated import BERT_BASE, DeviceProfile

PROFILE = BERT_BASE
MODEL_NAME = "bert-base"
#: Issue 12: "the emulated device's throughput per pod matches its profile within 10 %".
TARGET = (0.9, 1.1)
#: A process at this share of one core or more had no CPU to spare: it may have set the pace.
SATURATED_CPU_SHARE = 0.9
#: The machine's CPU (all cores, its other tenants' included) this busy or more had none to spare.
SATURATED_MACHINE_SHARE = 0.95
BUSY = "neuronserve_device_busy_seconds_total"
BATCHES = "neuronserve_batch_size_count"
BATCH_ROWS = "neuronserve_batch_size_sum"


@dataclass(frozen=True)
class Case:
    """One server kept at one batch bucket: requests of ``rows`` rows, batched or each alone."""

    bucket: int
    rows: int
    batching: bool

    def server_args(self) -> list[str]:
        return [] if self.batching else ["--no-batching"]


CASES = (Case(16, 16, True), Case(8, 8, False), Case(4, 4, False), Case(1, 1, False))


@dataclass(frozen=True)
class Run:
    """One closed-loop run against one server: what the client, the server and the machine did."""

    rows: int
    wall_s: float
    busy_s: float
    batches: int
    batch_rows: float
    client_cpu_s: float
    server_cpu_s: float
    machine_busy_share: float
    steal_share: float


def published_throughput(profile: DeviceProfile, bucket: int) -> float:
    """The profile's published inferences per second of one replica running batches of ``bucket`` rows."""
    for point in profile.batches:
        if point.batch == bucket:
            return point.throughput_per_s
    raise ValueError(f"profile {profile.name!r} publishes no throughput for batch {bucket}")


def verdict(ratio: float, target: tuple[float, float] = TARGET) -> str:
    """ "met" inside the target band (ends included), else "below" or "above" it."""
    low, high = target
    return "below" if ratio < low else "above" if ratio > high else "met"


def summarize(run: Run, published: float, cores: int) -> dict[str, float]:
    """One run's figures: the wall-clock rate and its ratio to ``published``, the device's busy share
    of the wall time, the rows per batch, and each process's CPU per wall second."""
    wall_rate = run.rows / run.wall_s
    return {
        "wall_inf_per_s": round(wall_rate, 1),
        "vs_profile": round(wall_rate / published, 4),
        "device_utilisation": round(run.busy_s / (cores * run.wall_s), 4),
        "rows_per_batch": round(run.batch_rows / run.batches, 3) if run.batches else 0.0,
        "client_cpu_share": round(run.client_cpu_s / run.wall_s, 3),
        "server_cpu_share": round(run.server_cpu_s / run.wall_s, 3),
        "machine_busy_share": round(run.machine_busy_share, 3),
        "steal_share": round(run.steal_share, 4),
    }


def limited_by(summary: dict[str, float], target: tuple[float, float] = TARGET) -> str:
    """What set the wall-clock rate of a run, from its :func:`summarize` figures.

    Within the target the device did (its emulated service times). Below it, the first part that
    had no CPU to spare: the client, the server (one event loop: one core at most), or the machine
    (all its cores busy with this run and other tenants, or taken by the hypervisor). With CPU to
    spare everywhere, the device idled for want of queued work: too few requests outstanding, or
    the server's event loop woke late.
    """
    if verdict(summary["vs_profile"], target) != "below":
        return "device"
    if summary["client_cpu_share"] >= SATURATED_CPU_SHARE:
        return "client CPU"
    if summary["server_cpu_share"] >= SATURATED_CPU_SHARE:
        return "server CPU"
    if summary["machine_busy_share"] + summary["steal_share"] >= SATURATED_MACHINE_SHARE:
        return "machine CPU"
    return "device idle (no CPU limit)"


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of a figure over the rounds."""
    return {"median": float(statistics.median(values)), "min": float(min(values)), "max": float(max(values))}


# ------------------------------------------------------------------------------------------ client


def infer_request(rows: int, sequence: int, model: str, port: int) -> bytes:
    """One KServe v2 infer request's bytes: ``rows`` rows of ids and mask as binary tensor data,
    outputs asked for as binary too (the server neither parses nor writes JSON numbers)."""
    from neuronfleet.sandbox import http1

    tensor = b"\x01\x00\x00\x00\x00\x00\x00\x00" * (rows * sequence)  # little-endian int64 ones
    size = {"binary_data_size": len(tensor)}
    inputs = [
        {"name": n, "shape": [rows, sequence], "datatype": "INT64", "parameters": size}
        for n in ("input_ids", "attention_mask")
    ]
    header = json.dumps({"inputs": inputs, "parameters": {"binary_data_output": True}}).encode()
    headers = [
        (b"Content-Type", b"application/octet-stream"),
        (b"Inference-Header-Content-Length", str(len(header)).encode()),
    ]
    target = f"/v2/models/{model}/infer".encode()
    return http1.encode_request("POST", target, f"127.0.0.1:{port}", headers, header + tensor + tensor)


async def closed_loop(port: int, request: bytes, concurrency: int, seconds: float, max_requests: int) -> dict[str, Any]:
    """``concurrency`` connections, each sending the next request as soon as its answer came, for
    ``seconds`` (or ``max_requests`` requests); the answers by status, wall and CPU seconds."""
    from neuronfleet.sandbox import http1

    connections = [await http1.ClientConnection.open("127.0.0.1", port, 10.0) for _ in range(concurrency)]
    statuses: Counter[int] = Counter()
    answers: list[http1.Response] = []  # the first 200, whose rows are checked once
    sent = 0
    cpu0, start = time.process_time(), time.perf_counter()
    end = start + seconds

    async def one_connection(connection: http1.ClientConnection) -> None:
        nonlocal sent
        while time.perf_counter() < end and sent < max_requests:
            sent += 1
            response = await connection.exchange(request, 30.0)
            statuses[response.status] += 1
            if response.status == 200 and not answers:
                answers.append(response)

    try:
        await asyncio.gather(*(one_connection(c) for c in connections))
    finally:
        for connection in connections:
            connection.close()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    rows = None
    if answers:
        length = int(answers[0].header(b"inference-header-content-length") or b"0")
        rows = json.loads(answers[0].body[:length])["outputs"][0]["shape"][0]
    statuses_out = {str(k): v for k, v in sorted(statuses.items())}
    return {"statuses": statuses_out, "rows_per_answer": rows, "wall_s": wall, "cpu_s": cpu}


def client_main(argv: list[str]) -> None:
    import uvloop

    port, rows, concurrency, seconds = int(argv[0]), int(argv[1]), int(argv[2]), float(argv[3])
    request = infer_request(rows, PROFILE.sequence, MODEL_NAME, port)
    max_requests = int(seconds * 20_000)  # a bound far above any bucket's rate: the time ends a run
    print(json.dumps(uvloop.run(closed_loop(port, request, concurrency, seconds, max_requests))))


# ------------------------------------------------------------------------------------------ runs


def run_client(port: int, rows: int, concurrency: int, seconds: float) -> dict[str, Any]:
    """The closed loop in its own process (its CPU is its own), and its JSON summary."""
    argv = [sys.executable, __file__, "--client", str(port), str(rows), str(concurrency), str(seconds)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=seconds + 60)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def measure(case: Case, server_pid: int, port: int, concurrency: int, seconds: float) -> Run:
    """One saturation run against ``case``'s server, with the server's accounting around it."""
    from neuronfleet.demo.loadgen import MachineCpu

    names = (BUSY, BATCHES, BATCH_ROWS)
    before, server_cpu0, machine = unlabelled_metrics(port, names), process_cpu_seconds(server_pid), MachineCpu()
    client = run_client(port, case.rows, concurrency, seconds)
    after, server_cpu1 = unlabelled_metrics(port, names), process_cpu_seconds(server_pid)
    steal, busy = machine.shares()
    answered = client["statuses"].get("200", 0)
    if answered != sum(client["statuses"].values()) or client["rows_per_answer"] != case.rows:
        raise RuntimeError(f"bucket {case.bucket}: not every request was answered with its rows: {client}")
    return Run(
        rows=answered * case.rows,
        wall_s=client["wall_s"],
        busy_s=after[BUSY] - before[BUSY],
        batches=round(after[BATCHES] - before[BATCHES]),
        batch_rows=after[BATCH_ROWS] - before[BATCH_ROWS],
        client_cpu_s=client["cpu_s"],
        # The server's CPU over the client's process, start-up included: an idle server spends ~0.
        server_cpu_s=server_cpu1 - server_cpu0,
        machine_busy_share=busy,
        steal_share=steal,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds over every bucket")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds of one closed-loop run")
    parser.add_argument("--concurrency", type=int, default=48, help="requests outstanding at once")
    parser.add_argument(
        "--buckets", default=",".join(str(c.bucket) for c in CASES), help="batch buckets to measure (default: all)"
    )
    args = parser.parse_args()
    wanted = {int(b) for b in args.buckets.split(",")}
    cases = [case for case in CASES if case.bucket in wanted]
    started, load_start = time.perf_counter(), os.getloadavg()
    servers = {case.bucket: start_emulated_server(1.0, MODEL_NAME, case.server_args()) for case in cases}
    runs: dict[int, list[dict[str, Any]]] = {case.bucket: [] for case in cases}
    loads: list[float] = []
    try:
        for _, port in servers.values():
            wait_server_ready(port)
        for case in cases:  # warm each server's HTTP path, and the client's imports' page cache
            run_client(servers[case.bucket][1], case.rows, args.concurrency, 1.0)
        for index in range(args.rounds):
            for case in cases:
                server, port = servers[case.bucket]
                run = measure(case, server.pid, port, args.concurrency, args.seconds)
                summary = summarize(run, published_throughput(PROFILE, case.bucket), PROFILE.cores)
                loads.append(round(os.getloadavg()[0], 2))
                record = {"round": index, **summary, "limited_by": limited_by(summary), "loadavg_1m": loads[-1]}
                record |= {"batches": run.batches, "busy_s": round(run.busy_s, 4), "wall_s": round(run.wall_s, 3)}
                record |= {"client_cpu_s": round(run.client_cpu_s, 3), "server_cpu_s": round(run.server_cpu_s, 3)}
                runs[case.bucket].append(record)
                print(f"bucket {case.bucket} round {index}: {json.dumps(record)}", flush=True)
    finally:
        for server, _ in servers.values():
            server.terminate()
            server.wait(timeout=30)

    figures: dict[str, float | int | str | None] = {}
    for case in cases:
        per_round = runs[case.bucket]
        ratio = spread([r["vs_profile"] for r in per_round])
        prefix = f"b{case.bucket}"
        figures[f"{prefix}_published_inf_per_s"] = published_throughput(PROFILE, case.bucket)
        figures[f"{prefix}_wall_inf_per_s"] = spread([r["wall_inf_per_s"] for r in per_round])["median"]
        figures[f"{prefix}_vs_profile"] = ratio["median"]
        figures[f"{prefix}_vs_profile_min"] = ratio["min"]
        figures[f"{prefix}_vs_profile_max"] = ratio["max"]
        figures[f"{prefix}_met"] = verdict(ratio["median"])
        for key in ("device_utilisation", "rows_per_batch", "client_cpu_share", "server_cpu_share", "steal_share"):
            figures[f"{prefix}_{key}"] = spread([r[key] for r in per_round])["median"]
        # The diagnoses of the median run (the run whose ratio is the median one, for an odd count
        # of rounds) and of the slowest: a shared machine's bursts show in the second.
        ordered = sorted(per_round, key=lambda r: r["vs_profile"])
        figures[f"{prefix}_limited_by"] = str(ordered[len(ordered) // 2]["limited_by"])
        figures[f"{prefix}_slowest_round_limited_by"] = str(ordered[0]["limited_by"])
    figures |= {
        "target_vs_profile_low": TARGET[0],
        "target_vs_profile_high": TARGET[1],
        "loadavg_1m_start": round(load_start[0], 2),
        "loadavg_1m_during_median": round(statistics.median(loads), 2),
        "loadavg_1m_during_max": max(loads),
        "loadavg_1m_end": round(os.getloadavg()[0], 2),
        "bench_wall_s": round(time.perf_counter() - started, 1),
    }
    params = {
        "profile": PROFILE.name,
        "profile_source": PROFILE.source,
        "cores": PROFILE.cores,
        "sequence": PROFILE.sequence,
        "cases": [asdict(case) for case in cases],
        "client": "closed loop, sandbox.http1 keep-alive connections on uvloop, binary tensors, its own process",
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "seconds_per_run": args.seconds,
        "max_batch_delay_ms": 4,
        "nproc": os.cpu_count(),
    }
    cases_out = [{"name": f"b{c.bucket}_round_{r['round']}", "figures": r} for c in cases for r in runs[c.bucket]]
    path = write_result("emulated-device", params, figures, cases_out)
    print(json.dumps(figures, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        client_main(sys.argv[2:])
        sys.exit(0)
    sys.exit(main())
