"""The batcher's policy with a scripted device: bucket-cost-aware batch choice, FIFO order, drain,
and the sliding-window busy ratio."""

from __future__ import annotations

import asyncio
import threading
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from loop_turns import until

from neuronserve.batcher import Batcher, QueueFull, ShuttingDown, batch_executing
from neuronserve.emulated import BERT_BASE, EmulatedDevice, synthetic_manifest
from neuronserve.metrics import BusyTracker, ServerMetrics
from neuronserve.protocol import InferRequest

BUCKETS = (1, 8, 16)


class ScriptedRunner:
    """Echoes each row's first id; costs per batch bucket are given, as warm-up would measure them."""

    def __init__(self, seconds: dict[int, float]) -> None:
        self.seconds = seconds
        self.runs: list[list[int]] = []

    def cost(self, rows: int, sequence: int) -> float | None:
        fitting = [b for b in BUCKETS if b >= rows]
        return self.seconds[fitting[0]] if fitting else None

    def run(self, requests: Sequence[Sequence[npt.NDArray[Any]]]) -> tuple[list[npt.NDArray[np.float32]], Any]:
        self.runs.append([int(arrays[0][0, 0]) for arrays in requests])
        return [arrays[0][:, :1].astype(np.float32) for arrays in requests], None


def _request(value: int) -> InferRequest:
    return InferRequest(None, [np.full((1, 4), value, dtype=np.int64), np.ones((1, 4), dtype=np.int64)])


async def _run(runner: ScriptedRunner, count: int) -> list[float]:
    batcher = Batcher(
        runner, ServerMetrics(BusyTracker()), max_rows=16, max_delay=0.0, max_queue=64, batch_sizes=BUCKETS
    )
    futures = [batcher.submit(_request(i)) for i in range(count)]
    batcher.start()
    results = await asyncio.gather(*futures)
    assert await batcher.drain(5.0)
    return [float(r[0, 0]) for r in results]


async def test_nine_rows_run_as_eight_then_one_when_padding_to_sixteen_costs_more() -> None:
    runner = ScriptedRunner({1: 0.010, 8: 0.050, 16: 0.200})
    assert await _run(runner, 9) == list(range(9))
    assert runner.runs == [list(range(8)), [8]]


async def test_nine_rows_pad_to_sixteen_when_that_is_cheaper_per_row() -> None:
    runner = ScriptedRunner({1: 0.010, 8: 0.080, 16: 0.085})
    assert await _run(runner, 9) == list(range(9))
    assert runner.runs == [list(range(9))]


async def test_a_cheap_looking_small_bucket_does_not_switch_batching_off() -> None:
    # A noisy warm-up could time the 1-row bucket far too fast; a full 8-row batch still runs whole.
    runner = ScriptedRunner({1: 0.001, 8: 0.050, 16: 0.200})
    assert await _run(runner, 8) == list(range(8))
    assert runner.runs == [list(range(8))]


async def test_drain_answers_queued_work_and_refuses_new_work() -> None:
    runner = ScriptedRunner({1: 0.01, 8: 0.02, 16: 0.03})
    batcher = Batcher(runner, ServerMetrics(BusyTracker()), max_rows=16, max_delay=0.0, max_queue=64)
    futures = [batcher.submit(_request(i)) for i in range(3)]
    batcher.start()
    assert await batcher.drain(5.0)
    assert [float(f.result()[0, 0]) for f in futures] == [0.0, 1.0, 2.0]
    with pytest.raises(ShuttingDown, match="shutting down"):
        batcher.submit(_request(9))


def test_the_busy_ratio_is_averaged_over_the_cores_and_its_help_says_so() -> None:
    # A 2-core device with one core executing back to back and the other idle reads 0.5, not 1:
    # the HELP must not read as "the share of the time the device was executing a batch".
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    now = [0.0]
    tracker = BusyTracker(window_seconds=2.0, clock=lambda: now[0], capacity=2)
    metrics = ServerMetrics(tracker)
    for step in range(10):
        tracker.finished(step * 0.2, (step + 1) * 0.2)
    now[0] = 2.0
    [family] = [
        f
        for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())
        if f.name == "neuronserve_device_busy_ratio"
    ]
    assert family.samples[0].value == pytest.approx(0.5)
    assert "averaged over the device's cores" in family.documentation
    assert "neuronserve_device_cores" in family.documentation


def test_busy_ratio_covers_the_sliding_window() -> None:
    now = [100.0]
    tracker = BusyTracker(window_seconds=10.0, clock=lambda: now[0])
    now[0] = 110.0
    tracker.finished(101.0, 103.0)
    tracker.finished(105.0, 106.0)
    assert tracker.ratio() == 0.3
    tracker.started(108.0)
    now[0] = 112.0
    # window [102, 112]: 1 s of the first interval, 1 s of the second, 4 s of the running batch
    assert tracker.ratio() == 0.6
    tracker.finished(108.0, 112.0)
    now[0] = 130.0
    assert tracker.ratio() == 0.0


class BlockedRunner(ScriptedRunner):
    """A device whose runs wait until ``release`` is set (a stuck batch past the grace period, or a
    batch the test acts on while it executes)."""

    def __init__(self) -> None:
        super().__init__({1: 0.01, 8: 0.02, 16: 0.03})
        self.release = threading.Event()

    def run(self, requests: Sequence[Sequence[npt.NDArray[Any]]]) -> tuple[list[npt.NDArray[np.float32]], Any]:
        self.release.wait(timeout=30)
        return super().run(requests)


async def test_past_the_grace_period_every_request_still_gets_an_answer() -> None:
    runner = BlockedRunner()
    batcher = Batcher(runner, ServerMetrics(BusyTracker()), max_rows=1, max_delay=0.0, max_queue=64)
    batcher.start()
    # One request reaches the stuck device, the other waits behind it (max_rows=1).
    running = batcher.submit(_request(0))
    queued = batcher.submit(_request(1))
    try:
        assert not await batcher.drain(0.05)
        # The server's exit reads this to leave at once rather than join the stuck thread.
        assert batch_executing()
    finally:
        runner.release.set()
    for future in (running, queued):
        with pytest.raises(ShuttingDown):
            future.result()
    # Once the batch ends, an exit finalizes Python as usual (its atexit handlers run).
    for _ in range(3000):
        if not batch_executing():
            break
        await asyncio.sleep(0.01)
    assert not batch_executing()


class GatedDevice:
    """A timed device with two cores whose batches end only when the test opens their gates."""

    cores = 2

    def __init__(self) -> None:
        self.gates: list[asyncio.Event] = []
        self.batches: list[list[int]] = []

    def cost(self, rows: int, sequence: int) -> float | None:
        return None

    def reserve(self, rows: int, sequence: int, ready_at: float) -> Any:
        return types.SimpleNamespace(start=ready_at, end=ready_at)

    async def execute(
        self, requests: Sequence[Sequence[npt.NDArray[Any]]], reservation: Any
    ) -> list[npt.NDArray[np.float32]]:
        gate = asyncio.Event()
        self.gates.append(gate)
        self.batches.append([int(arrays[0][0, 0]) for arrays in requests])
        await gate.wait()
        return [arrays[0][:, :1].astype(np.float32) for arrays in requests]


async def test_a_drain_waits_for_the_batch_being_formed() -> None:
    # One core runs a full batch; the worker has taken a late request off the queue and waits for a
    # fuller batch on the other core. The full batch ending must not make the server look idle.
    device = GatedDevice()
    batcher = Batcher(device, ServerMetrics(BusyTracker()), max_rows=8, max_delay=30.0, max_queue=64)
    batcher.start()
    full = [batcher.submit(_request(i)) for i in range(8)]
    await until(lambda: len(device.gates) == 1)
    late = batcher.submit(_request(8))
    await until(lambda: not batcher._queue)
    device.gates[0].set()
    await asyncio.gather(*full)

    assert batcher.queue_depth == 1  # accepted, not executing: still the server's work

    draining = asyncio.create_task(batcher.drain(5.0))
    await until(lambda: len(device.gates) == 2)  # the drain closes the forming batch and runs it
    for _ in range(50):  # loop turns, not time: a drain that thought the server idle is over by now
        await asyncio.sleep(0)
    assert not draining.done() and not late.done()
    device.gates[1].set()
    assert await draining
    assert float(late.result()[0, 0]) == 8.0
    assert device.batches == [list(range(8)), [8]]


async def test_the_batch_being_formed_counts_against_the_queue_bound_and_in_the_depth() -> None:
    device = GatedDevice()
    metrics = ServerMetrics(BusyTracker())
    batcher = Batcher(device, metrics, max_rows=8, max_delay=30.0, max_queue=2)
    batcher.start()
    waiting = [batcher.submit(_request(i)) for i in range(2)]
    await until(lambda: not batcher._queue)  # the worker holds both, waiting for a fuller batch
    assert batcher.queue_depth == 2
    assert metrics.registry.get_sample_value("neuronserve_queue_depth") == 2
    with pytest.raises(QueueFull):
        batcher.submit(_request(2))

    draining = asyncio.create_task(batcher.drain(5.0))
    await until(lambda: len(device.gates) == 1)
    device.gates[0].set()
    assert await draining
    assert [float(f.result()[0, 0]) for f in waiting] == [0.0, 1.0]


class FailingRunner(ScriptedRunner):
    """Fails any batch holding a negative id, as a model fails on a value it cannot handle."""

    def run(self, requests: Sequence[Sequence[npt.NDArray[Any]]]) -> tuple[list[npt.NDArray[np.float32]], Any]:
        result = super().run(requests)
        bad = [int(arrays[0][0, 0]) for arrays in requests if int(arrays[0][0, 0]) < 0]
        if bad:
            raise RuntimeError(f'The following operation failed\n  File "/src/model.py", line 3\nIndexError: {bad}')
        return result


async def test_a_request_that_fails_the_batch_is_found_by_halving_and_the_others_are_answered() -> None:
    runner = FailingRunner({1: 0.01, 8: 0.02, 16: 0.03})
    batcher = Batcher(runner, ServerMetrics(BusyTracker()), max_rows=16, max_delay=0.0, max_queue=64)
    values = [*range(11), -1, *range(12, 16)]
    futures = [batcher.submit(_request(v)) for v in values]
    batcher.start()
    await asyncio.wait(futures)
    assert await batcher.drain(5.0)

    for value, future in zip(values, futures, strict=True):
        if value < 0:
            with pytest.raises(RuntimeError, match=r"IndexError: \[-1\]"):
                future.result()
        else:
            assert float(future.result()[0, 0]) == value
    # The batch of 16, then two halves per level down to the failing request alone: 1 + 2 * log2(16)
    # runs (one run per request after the batch would be 17).
    assert len(runner.runs) == 9, runner.runs
    assert runner.runs[0] == values
    assert [-1] in runner.runs


def test_a_failure_is_summed_up_for_clients_without_traceback_or_paths() -> None:
    from neuronserve.batcher import failure_summary

    torchscript = RuntimeError(
        "The following operation failed in the TorchScript interpreter.\n"
        "Traceback of TorchScript, original code (most recent call last):\n"
        '  File "/home/me/models/encoder.py", line 18, in forward\n'
        "RuntimeError: index out of range in self\n"
    )
    assert failure_summary(torchscript) == "RuntimeError: index out of range in self"
    assert failure_summary(ValueError("no file /opt/app/weights/model.pt here")) == "ValueError: no file <path> here"
    assert failure_summary(MemoryError()) == "MemoryError"


class HeldRunner(ScriptedRunner):
    """Echoes like ScriptedRunner; each run starts (``started``) and then waits until ``release``."""

    def __init__(self) -> None:
        super().__init__({1: 0.01, 8: 0.02, 16: 0.03})
        self.started = threading.Event()
        self.release = threading.Event()

    def run(self, requests: Sequence[Sequence[npt.NDArray[Any]]]) -> tuple[list[npt.NDArray[np.float32]], Any]:
        self.started.set()
        self.release.wait(timeout=30)
        return super().run(requests)


async def test_the_batch_delay_counts_from_the_first_requests_arrival_not_from_when_it_is_taken() -> None:
    # As Triton's max_queue_delay: a request that already waited the whole delay behind a busy
    # device runs as soon as the device is free, not after waiting the delay again.
    now = [0.0]
    runner = HeldRunner()
    batcher = Batcher(
        runner, ServerMetrics(BusyTracker()), max_rows=16, max_delay=60.0, max_queue=64, clock=lambda: now[0]
    )
    batcher.start()
    full = InferRequest(None, [np.zeros((16, 4), dtype=np.int64), np.ones((16, 4), dtype=np.int64)])
    busy = batcher.submit(full)  # a full batch: it runs at once, and holds the device
    try:
        assert await asyncio.to_thread(runner.started.wait, 10)
        waiting = batcher.submit(_request(1))
        now[0] = 61.0  # it has waited longer than the delay for the device
    finally:
        runner.release.set()
    assert float((await asyncio.wait_for(waiting, 10))[0, 0]) == 1.0
    await busy
    assert runner.runs == [[0], [1]]
    assert await batcher.drain(5.0)


class GatedFailingRunner(BlockedRunner, FailingRunner):
    """A FailingRunner whose runs wait for ``release`` (the test acts while a batch executes)."""


async def _until_seconds(condition: Callable[[], bool], limit_seconds: float = 10.0) -> None:
    """Wait for ``condition``, which an executor thread makes true, checking every 10 ms."""
    deadline = asyncio.get_running_loop().time() + limit_seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


async def test_the_one_request_left_of_a_failed_batch_runs_alone_before_it_gets_an_error() -> None:
    # A bad request and a good one run as one batch; the bad one's client hangs up while it runs.
    # The good one must not get the bad one's error: it runs again, alone, and gets its rows.
    runner = GatedFailingRunner()
    batcher = Batcher(runner, ServerMetrics(BusyTracker()), max_rows=16, max_delay=0.0, max_queue=64)
    bad, good = batcher.submit(_request(-1)), batcher.submit(_request(2))
    batcher.start()
    await _until_seconds(lambda: batcher.batches_run == 1)
    bad.cancel()
    runner.release.set()
    assert float((await good)[0, 0]) == 2.0
    assert await batcher.drain(5.0)
    assert runner.runs == [[-1, 2], [2]]


async def test_a_request_that_fails_alone_gets_its_error_once_without_running_again() -> None:
    runner = FailingRunner({1: 0.01, 8: 0.02, 16: 0.03})
    batcher = Batcher(runner, ServerMetrics(BusyTracker()), max_rows=16, max_delay=0.0, max_queue=64)
    alone = batcher.submit(_request(-1))
    batcher.start()
    with pytest.raises(RuntimeError, match=r"IndexError: \[-1\]"):
        await alone
    assert await batcher.drain(5.0)
    assert runner.runs == [[-1]]


class FailingDevice(GatedDevice):
    """A timed device (GatedDevice) that fails any batch holding a negative id, its gates open."""

    async def execute(
        self, requests: Sequence[Sequence[npt.NDArray[Any]]], reservation: Any
    ) -> list[npt.NDArray[np.float32]]:
        self.batches.append([int(arrays[0][0, 0]) for arrays in requests])
        if any(int(arrays[0][0, 0]) < 0 for arrays in requests):
            raise RuntimeError("index out of range in self")
        return [arrays[0][:, :1].astype(np.float32) for arrays in requests]


@pytest.mark.parametrize("device", ["model runner", "timed device"])
async def test_every_batch_the_device_starts_counts_in_the_batch_size_histogram_failed_or_not(device: str) -> None:
    runner: Any = FailingRunner({1: 0.01, 8: 0.02, 16: 0.03}) if device == "model runner" else FailingDevice()
    metrics = ServerMetrics(BusyTracker())
    batcher = Batcher(runner, metrics, max_rows=16, max_delay=0.0, max_queue=64)
    good, bad = batcher.submit(_request(0)), batcher.submit(_request(-1))
    batcher.start()
    assert float((await good)[0, 0]) == 0.0
    with pytest.raises(RuntimeError):
        await bad
    assert await batcher.drain(5.0)
    runs = runner.runs if device == "model runner" else runner.batches
    assert runs == [[0, -1], [0], [-1]]  # the batch fails, then each half runs alone
    assert metrics.registry.get_sample_value("neuronserve_batch_size_count") == 3
    assert metrics.registry.get_sample_value("neuronserve_batch_size_sum") == 4


def test_busy_intervals_are_dropped_without_a_scrape() -> None:
    # Nobody reads the ratio (no Prometheus): the tracker still keeps no more than one window of
    # batches, instead of one entry per batch since start for the next scrape to walk.
    now = [0.0]
    tracker = BusyTracker(window_seconds=10.0, clock=lambda: now[0])
    for i in range(10_000):  # 100 s of 10 ms batches
        now[0] = i * 0.01 + 0.01
        tracker.started(i * 0.01)
        tracker.finished(i * 0.01, now[0])
        assert len(tracker._intervals) <= 1_001
    assert tracker.busy_seconds_total == pytest.approx(100.0)
    assert tracker.ratio() == pytest.approx(1.0)


class TimedRunner(ScriptedRunner):
    """Records when each run really starts and ends; a run waits for ``release`` (if given) and
    fails on a request whose first id is negative."""

    def __init__(self, release: threading.Event | None = None) -> None:
        super().__init__({1: 0.01, 8: 0.02, 16: 0.03})
        self.release = release
        self.spans: list[tuple[float, float]] = []
        self.entered = threading.Event()

    def run(self, requests: Sequence[Sequence[npt.NDArray[Any]]]) -> tuple[list[npt.NDArray[np.float32]], Any]:
        start = time.monotonic()
        self.entered.set()
        try:
            if self.release is not None:
                self.release.wait(timeout=30)
            if any(int(arrays[0][0, 0]) < 0 for arrays in requests):
                raise RuntimeError("the device failed")
            return super().run(requests)
        finally:
            self.spans.append((start, time.monotonic()))


async def test_a_batch_waiting_ahead_is_not_counted_busy_until_it_executes() -> None:
    # One batch executes; a full one waits in the executor behind it (lookahead). The device is
    # busy with one batch: the ratio must not count the waiting one too (it read up to 2x).
    offset = [0.0]
    tracker = BusyTracker(window_seconds=10.0, clock=lambda: time.monotonic() + offset[0], capacity=2)
    runner = TimedRunner(threading.Event())
    batcher = Batcher(runner, ServerMetrics(tracker), max_rows=1, max_delay=0.0, max_queue=64)
    batcher.start()
    first = batcher.submit(_request(0))
    await until(runner.entered.is_set)
    second = batcher.submit(_request(1))
    # Handed to the executor, waiting there behind the first.
    await until(lambda: batcher._executor._work_queue.qsize() == 1)
    # Read 5 s on: one batch running all of it over 2 cores' capacity is 0.5 (both counted: 1.0).
    offset[0] = 5.0
    assert tracker.ratio() == pytest.approx(0.5, abs=0.05)
    assert runner.release is not None
    runner.release.set()
    await asyncio.gather(first, second)
    assert await batcher.drain(5.0)
    # Within a few GIL switch intervals (the executor thread waits for the GIL to take its times).
    assert tracker.busy_seconds_total == pytest.approx(sum(end - start for start, end in runner.spans), abs=0.05)


async def test_a_failed_batch_counts_busy_from_when_it_ran_not_from_when_it_was_handed_over() -> None:
    # The failing batch waits ahead while the first one computes; its busy time is its own run only.
    release = threading.Event()
    tracker = BusyTracker()
    runner = TimedRunner(release)
    batcher = Batcher(runner, ServerMetrics(tracker), max_rows=1, max_delay=0.0, max_queue=64)
    batcher.start()
    first = batcher.submit(_request(0))
    await until(runner.entered.is_set)
    failing = batcher.submit(_request(-1))
    await until(lambda: batcher._executor._work_queue.qsize() == 1)
    handed_over = time.monotonic()
    # The first batch computes until the device is seen to have been busy a while past the hand-over.
    await asyncio.get_running_loop().run_in_executor(None, lambda: release.wait(0.3))
    release.set()
    await first
    with pytest.raises(RuntimeError, match="the device failed"):
        await failing
    assert await batcher.drain(5.0)
    ran = sum(end - start for start, end in runner.spans)
    assert runner.spans[1][0] - handed_over >= 0.25  # it really waited ahead
    assert tracker.busy_seconds_total == pytest.approx(ran, abs=0.05)


async def test_an_emulated_batch_cut_short_by_the_drain_counts_only_the_time_it_ran() -> None:
    # bert-base batch 1 is 1 ms; x20,000 it is booked for 20 s. The drain gives up after 0.05 s.
    manifest = synthetic_manifest(BERT_BASE, "m")
    device = EmulatedDevice(BERT_BASE, manifest, time_scale=20_000)
    tracker = BusyTracker()
    batcher = Batcher(device, ServerMetrics(tracker), max_rows=16, max_delay=0.0, max_queue=64)
    batcher.start()
    stuck = batcher.submit(_request(1))
    await until(lambda: tracker.ratio() > 0)
    assert not await batcher.drain(0.05)
    with pytest.raises(ShuttingDown):
        await stuck
    await until(lambda: tracker.busy_seconds_total > 0)  # the cancelled batch has recorded its time
    assert tracker.busy_seconds_total < 5.0


class ReadyAtDevice(GatedDevice):
    """A GatedDevice that records the ``ready_at`` each batch is booked with."""

    def __init__(self) -> None:
        super().__init__()
        self.ready_at: list[float] = []

    def reserve(self, rows: int, sequence: int, ready_at: float) -> Any:
        self.ready_at.append(ready_at)
        return super().reserve(rows, sequence, ready_at)


async def test_a_batch_is_booked_from_when_it_was_complete() -> None:
    # Full: from its last request's arrival (a device may start it then, whatever the loop's lag);
    # closed by the delay: from the moment it closed. Each clock reading is a second later.
    readings: list[float] = []

    def clock() -> float:
        readings.append(float(len(readings)))
        return readings[-1]

    device = ReadyAtDevice()
    batcher = Batcher(device, ServerMetrics(BusyTracker()), max_rows=16, max_delay=0.0, max_queue=64, clock=clock)
    batcher.start()
    full = batcher.submit(InferRequest(None, [np.zeros((16, 4), dtype=np.int64), np.ones((16, 4), dtype=np.int64)]))
    await until(lambda: len(device.gates) == 1)
    assert device.ready_at == [0.0]  # the one reading at its arrival
    partial = batcher.submit(_request(1))
    arrived = len(readings) - 1
    await until(lambda: len(device.gates) == 2)
    assert device.ready_at[1] > arrived  # closed after its arrival, by the delay of 0
    for gate in device.gates:
        gate.set()
    await full
    await partial
    assert await batcher.drain(5.0)
