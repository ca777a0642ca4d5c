"""A replica uses every NeuronCore it is given: one copy of the model per visible core, and as
many batches executing at once as there are copies (a CPU artifact: one copy, one batch).

torch-neuronx cannot be installed here, so nothing in this file ran on a NeuronCore. A stand-in
``torch_neuronx`` module records what neuronserve asks of it: its placement context
(``experimental.neuron_cores_context``, as the Neuron docs give it) notes the core each
``torch.jit.load`` happens under, and each loaded copy notes the core it executes on. The artifact
is a CPU TorchScript file stored with ``backend: neuron`` in its manifest, as ``neuronserve compile``
writes it when torch_neuronx traces (here, the stand-in's trace is torch.jit.trace).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import logging
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch
from manual_clock import ManualClock
from tiny_model import save_tiny

from neuronserve import backend, cli
from neuronserve.backend import LoadError, ModelRunner
from neuronserve.batcher import Batcher
from neuronserve.manifest import Manifest
from neuronserve.metrics import BusyTracker, ServerMetrics
from neuronserve.protocol import InferRequest
from neuronserve.server import ServeConfig
from neuronserve.store import fetch_artifact
from runtime_support import LiveServer, http_json, scrape_metrics, wait_for

#: Long enough for a loaded machine; a runner that serializes its executions fails here instead.
BARRIER_SECONDS = 10.0


@dataclass
class NeuronStandIn:
    """What the stand-in torch_neuronx saw: the core of each load and of each execution."""

    explicit: bool
    placing: int | None = None  # the start_nc of the placement context open now
    loads: list[tuple[str, int | None]] = field(default_factory=list)  # (bucket file, core)
    executions: list[int | None] = field(default_factory=list)
    barrier: threading.Barrier | None = None  # when set, each execution waits for the others

    def module(self) -> types.ModuleType:
        module = types.ModuleType("torch_neuronx")
        # A module built here has no attributes declared (attr-defined), and torch leaves torch.jit.trace
        # unannotated (no-untyped-call).
        module.trace = lambda model, example, compiler_args: torch.jit.trace(model, example)  # type: ignore[attr-defined, no-untyped-call]
        if self.explicit:
            experimental = types.ModuleType("torch_neuronx.experimental")
            experimental.neuron_cores_context = self.neuron_cores_context  # type: ignore[attr-defined]
            module.experimental = experimental  # type: ignore[attr-defined]
        return module

    @contextlib.contextmanager
    def neuron_cores_context(self, start_nc: int = -1, nc_count: int = -1) -> Iterator[None]:
        assert nc_count == 1, "one copy per core: each load goes to exactly one core"
        self.placing = start_nc
        try:
            yield
        finally:
            self.placing = None


class PlacedCopy:
    """A loaded module that remembers the core it was loaded under (as a Neuron model would)."""

    def __init__(self, module: Any, core: int | None, stand_in: NeuronStandIn) -> None:
        self.module = module
        self.core = core
        self.stand_in = stand_in

    def eval(self) -> PlacedCopy:
        self.module = self.module.eval()
        return self

    def __call__(self, *tensors: torch.Tensor) -> torch.Tensor:
        self.stand_in.executions.append(self.core)
        if self.stand_in.barrier is not None:
            self.stand_in.barrier.wait()
        result: torch.Tensor = self.module(*tensors)
        return result


@pytest.fixture(scope="module")
def neuron_artifact(tmp_path_factory: pytest.TempPathFactory) -> tuple[Manifest, Path]:
    """The tiny model compiled by ``neuronserve compile`` with the stand-in torch_neuronx (backend: neuron)."""
    tmp = tmp_path_factory.mktemp("neuron")
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "torch_neuronx", NeuronStandIn(explicit=False).module())
        argv = ["compile", "--source", str(save_tiny(tmp / "tiny.pt")), "--store", str(tmp / "store")]
        argv += ["--name", "tiny", "--batch-buckets", "1,2", "--sequence-buckets", "4"]
        assert cli.main([*argv, "--result-file", str(tmp / "r.json")]) == 0
    manifest, _, directory = fetch_artifact(json.loads((tmp / "r.json").read_text())["uri"], tmp / "fetched")
    assert manifest.backend == "neuron"
    return manifest, directory


@pytest.fixture(scope="module")
def cpu_artifact(tmp_path_factory: pytest.TempPathFactory) -> tuple[Manifest, Path]:
    tmp = tmp_path_factory.mktemp("cpu")
    argv = ["compile", "--source", str(save_tiny(tmp / "tiny.pt")), "--store", str(tmp / "store")]
    argv += ["--name", "tiny", "--batch-buckets", "1,2", "--sequence-buckets", "4"]
    assert cli.main([*argv, "--result-file", str(tmp / "r.json")]) == 0
    manifest, _, directory = fetch_artifact(json.loads((tmp / "r.json").read_text())["uri"], tmp / "fetched")
    assert manifest.backend == "cpu"
    return manifest, directory


def _sorted_cores(executions: Sequence[int | None]) -> list[int]:
    """The cores of ``executions``, sorted: each ran on a copy placed on a core, so none is None."""
    cores = [core for core in executions if core is not None]
    assert len(cores) == len(executions), executions
    return sorted(cores)


def _neuron_env(monkeypatch: pytest.MonkeyPatch, visible: str | None = None, num: str | None = None) -> None:
    for name, value in (("NEURON_RT_VISIBLE_CORES", visible), ("NEURON_RT_NUM_CORES", num)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)


def _stand_in(monkeypatch: pytest.MonkeyPatch, explicit: bool = True) -> NeuronStandIn:
    """Install the stand-in torch_neuronx, and a torch.jit.load that notes the core of each load."""
    stand_in = NeuronStandIn(explicit=explicit)
    monkeypatch.setitem(sys.modules, "torch_neuronx", stand_in.module())
    real_load: Callable[..., Any] = torch.jit.load  # unannotated in torch

    def load(path: str, *args: Any, **kwargs: Any) -> PlacedCopy:
        stand_in.loads.append((Path(path).name, stand_in.placing))
        return PlacedCopy(real_load(path, *args, **kwargs), stand_in.placing, stand_in)

    monkeypatch.setattr(torch.jit, "load", load)
    return stand_in


def _warmed_runner(
    neuron_artifact: tuple[Manifest, Path],
    monkeypatch: pytest.MonkeyPatch,
    visible: str,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[ModelRunner, NeuronStandIn]:
    """The artifact's runner on ``visible`` cores of the stand-in, warmed once per copy."""
    manifest, directory = neuron_artifact
    _neuron_env(monkeypatch, visible)
    stand_in = _stand_in(monkeypatch)
    runner = ModelRunner(manifest, directory, clock=clock)
    runner.warm(repeats=1, min_seconds=0.0)
    return runner, stand_in


def _inputs(first_id: int) -> list[npt.NDArray[np.int64]]:
    return [np.array([[first_id, 2, 3]], dtype=np.int64), np.ones((1, 3), dtype=np.int64)]


@pytest.mark.parametrize(
    ("visible", "num", "cores"),
    # A count of 0 is the runtime's "all cores" (its default), which only the runtime can count: as unset.
    [
        ("0-1", None, 2),
        ("4,5", None, 2),
        ("2-5", None, 4),
        ("3", None, 1),
        (None, "2", 2),
        (None, "0", 1),
        (None, None, 1),
    ],
    ids=["range", "list", "four", "one", "num-cores", "num-cores-all", "unset"],
)
def test_the_visible_cores_are_counted_as_the_neuron_runtime_reads_them(
    monkeypatch: pytest.MonkeyPatch, visible: str | None, num: str | None, cores: int
) -> None:
    _neuron_env(monkeypatch, visible, num)
    assert backend.visible_neuron_cores() == cores


@pytest.mark.parametrize(("visible", "num"), [("0-", None), ("a,b", None), ("3-1", None), (None, "-2")])
def test_a_malformed_core_setting_is_refused_with_its_name(
    monkeypatch: pytest.MonkeyPatch, visible: str | None, num: str | None
) -> None:
    _neuron_env(monkeypatch, visible, num)
    with pytest.raises(LoadError, match="NEURON_RT_VISIBLE_CORES" if visible else "NEURON_RT_NUM_CORES"):
        backend.visible_neuron_cores()


def test_a_neuron_artifact_loads_one_copy_per_visible_core_each_placed_on_its_own(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    manifest, directory = neuron_artifact
    # As the Neuron device plugin sets it for a pod given cores 4 and 5 (indices relative to the
    # process are 0 and 1: what neuron_cores_context's start_nc means).
    _neuron_env(monkeypatch, "4,5")
    stand_in = _stand_in(monkeypatch)
    with caplog.at_level(logging.INFO, logger="neuronserve.backend"):
        runner = ModelRunner(manifest, directory)
    assert runner.parallel == 2
    files = sorted(bucket.file_name for bucket in manifest.buckets)
    assert sorted(stand_in.loads) == sorted((name, core) for name in files for core in (0, 1))
    assert "neuron_cores_context" in caplog.text and "2 NeuronCores" in caplog.text


def test_without_the_placement_api_the_copies_load_in_the_default_order(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    manifest, directory = neuron_artifact
    _neuron_env(monkeypatch, "0-1")
    stand_in = _stand_in(monkeypatch, explicit=False)
    with caplog.at_level(logging.INFO, logger="neuronserve.backend"):
        runner = ModelRunner(manifest, directory)
    assert runner.parallel == 2
    # Each bucket's copies one after another: the runtime puts each load on the least used core,
    # so a bucket's two copies land on the two cores.
    names = [name for name, _ in stand_in.loads]
    assert names == [name for bucket in manifest.buckets for name in [bucket.file_name] * 2]
    assert "default placement" in caplog.text


def test_two_batches_execute_at_once_each_on_its_own_copy(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest, directory = neuron_artifact
    _neuron_env(monkeypatch, "0-1")
    stand_in = _stand_in(monkeypatch)
    runner = ModelRunner(manifest, directory)
    stand_in.barrier = threading.Barrier(2, timeout=BARRIER_SECONDS)
    results: dict[int, npt.NDArray[np.float32]] = {}

    def run(first_id: int) -> None:
        (rows,), _ = runner.run([_inputs(first_id)])
        results[first_id] = rows

    threads = [threading.Thread(target=run, args=(i,)) for i in (5, 7)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BARRIER_SECONDS * 2)
    # Both reached the barrier together (a runner with one lock breaks it: BrokenBarrierError).
    assert sorted(results) == [5, 7]
    assert _sorted_cores(stand_in.executions) == [0, 1]
    assert not np.array_equal(results[5], results[7])


def test_a_cpu_artifact_keeps_one_copy_whatever_the_neuron_environment(
    cpu_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest, directory = cpu_artifact
    _neuron_env(monkeypatch, "0-1")
    runner = ModelRunner(manifest, directory)
    assert runner.parallel == 1
    assert Batcher(runner, ServerMetrics(BusyTracker()), max_rows=2, max_delay=0.0, max_queue=8).parallel == 1


async def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


def _request(first_id: int) -> InferRequest:
    return InferRequest(None, _inputs(first_id))


async def test_the_batcher_runs_a_batch_on_every_copy_at_once(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest, directory = neuron_artifact
    _neuron_env(monkeypatch, "0-1")
    stand_in = _stand_in(monkeypatch)
    runner = ModelRunner(manifest, directory)
    stand_in.barrier = threading.Barrier(2, timeout=BARRIER_SECONDS)
    batcher = Batcher(runner, ServerMetrics(BusyTracker()), max_rows=1, max_delay=0.0, max_queue=8)
    assert batcher.parallel == 2
    batcher.start()
    # Two one-row batches: each must be executing while the other is, or neither passes the barrier.
    outputs = await asyncio.gather(batcher.submit(_request(5)), batcher.submit(_request(7)))
    assert await batcher.drain(5.0)
    assert _sorted_cores(stand_in.executions) == [0, 1]
    assert all(output.shape == (1, 4) for output in outputs)


class GatedRunner:
    """Runs wait for ``gate``; counts the runs executing at once. ``parallel`` as a runner says it."""

    def __init__(self, parallel: int | None) -> None:
        if parallel is not None:
            self.parallel = parallel
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.executing = 0
        self.entered = 0
        self.most = 0

    def cost(self, rows: int, sequence: int) -> float | None:
        return None

    def run(self, requests: Sequence[Sequence[npt.NDArray[Any]]]) -> tuple[list[npt.NDArray[np.float32]], None]:
        with self.lock:
            self.executing += 1
            self.entered += 1
            self.most = max(self.most, self.executing)
        try:
            self.gate.wait(timeout=30)
            return [arrays[0][:, :1].astype(np.float32) for arrays in requests], None
        finally:
            with self.lock:
                self.executing -= 1


@pytest.mark.parametrize(("parallel", "expected"), [(None, 1), (1, 1), (2, 2), (3, 3)])
async def test_the_batcher_runs_as_many_batches_at_once_as_the_runner_has_copies_and_one_more_waits_ahead(
    parallel: int | None, expected: int
) -> None:
    runner = GatedRunner(parallel)
    batcher = Batcher(runner, ServerMetrics(BusyTracker()), max_rows=1, max_delay=0.0, max_queue=16)
    assert batcher.parallel == expected
    batcher.start()
    futures = [batcher.submit(_request(i)) for i in range(expected + 2)]
    try:
        # ``expected`` batches execute; one full batch waits in the executor behind them (the
        # lookahead); the last is still queued.
        await _until(lambda: runner.entered == expected and batcher._executor._work_queue.qsize() == 1)
        assert batcher.queue_depth == 2  # the one waiting ahead and the one queued
        assert runner.most == expected
    finally:
        runner.gate.set()
    results = await asyncio.gather(*futures)
    assert [int(r[0, 0]) for r in results] == list(range(expected + 2))
    assert await batcher.drain(5.0)
    assert runner.most == expected


# One failed NeuronCore of a multi-core replica (a reviewer's repro, on the real ModelRunner): its
# copy raised the Neuron runtime's error on every batch handed to it, every other request got 500
# (counted model_error: each succeeded request reset the run of failures the device check waits
# for) and the replica stayed ready and live.
NC_ERROR = "nrt_execute status=1006 (NRT_EXEC_HW_ERR_NC_UE): uncorrectable NeuronCore error"


class BrokenCores:
    """Makes the stand-in's copies on ``cores`` raise the Neuron runtime's error on every run."""

    def __init__(self, stand_in: NeuronStandIn, cores: set[int]) -> None:
        self.cores = cores
        self.stand_in = stand_in

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_call = PlacedCopy.__call__

        def call(copy: PlacedCopy, *tensors: torch.Tensor) -> torch.Tensor:
            if copy.core in self.cores:
                self.stand_in.executions.append(copy.core)
                raise RuntimeError(NC_ERROR)
            return real_call(copy, *tensors)

        monkeypatch.setattr(PlacedCopy, "__call__", call)


def _infer_body(first_id: int) -> bytes:
    return json.dumps(
        {
            "inputs": [
                {"name": "input_ids", "shape": [1, 3], "datatype": "INT64", "data": [first_id, 2, 3]},
                {"name": "attention_mask", "shape": [1, 3], "datatype": "INT64", "data": [1, 1, 1]},
            ]
        }
    ).encode()


def _runner_with_broken_cores(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch, cores: set[int]
) -> tuple[ModelRunner, NeuronStandIn]:
    runner, stand_in = _warmed_runner(neuron_artifact, monkeypatch, "0-1")
    BrokenCores(stand_in, cores).install(monkeypatch)
    stand_in.executions.clear()
    return runner, stand_in


def test_one_failed_core_of_two_is_taken_out_of_rotation_and_its_requests_go_to_the_other(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    runner, stand_in = _runner_with_broken_cores(neuron_artifact, monkeypatch, {1})
    config = ServeConfig(max_batch_delay_ms=0, device_suspect_after=3, device_restart_seconds=0.5)
    manifest = neuron_artifact[0]
    with caplog.at_level(logging.WARNING, logger="neuronserve.backend"), LiveServer(manifest, runner, config) as server:
        codes = [
            http_json(server.url, "POST", f"/v2/models/{manifest.name}/infer", _infer_body(3 + i))[0] for i in range(40)
        ]
        ready_status, _, ready = http_json(server.url, "GET", "/v2/health/ready")
        live_status = http_json(server.url, "GET", "/v2/health/live")[0]
        metrics = scrape_metrics(server.url)
    # The batches core 1 failed ran again on core 0: no client saw its failure.
    assert codes == [200] * 40
    assert metrics["neuronserve_requests_total{outcome=ok}"] == 40
    assert metrics["neuronserve_requests_total{outcome=model_error}"] == 0
    # Out of rotation after COPY_OUT_AFTER failures in a row that core 0 ran: no batch goes to it since.
    assert stand_in.executions.count(1) == backend.COPY_OUT_AFTER
    assert runner.copies_out == [1]
    assert metrics["neuronserve_device_cores_out"] == 1
    # The busy ratio's capacity is the copy left: one busy core of one reads 1.0, not 0.5.
    assert metrics["neuronserve_device_cores"] == 1
    assert ready_status == 200 and ready["cores_out"] == 1 and live_status == 200
    assert "NeuronCore copy 1 failed" in caplog.text and "out of rotation" in caplog.text
    assert "serving on 1 of 2 copies" in caplog.text


def test_a_bad_input_on_two_sound_cores_stays_a_model_error_and_takes_no_core_out(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, _ = _runner_with_broken_cores(neuron_artifact, monkeypatch, set())
    config = ServeConfig(max_batch_delay_ms=0, device_suspect_after=100, device_restart_seconds=0.5)
    manifest = neuron_artifact[0]
    infer = f"/v2/models/{manifest.name}/infer"
    with LiveServer(manifest, runner, config) as server:
        # Bad requests (an id past the embedding table) in a row, between good ones: each fails on
        # one copy and then on the other, which must count against neither.
        ids = [3, 500, 500, 500, 500, 3] * 2
        codes = [http_json(server.url, "POST", infer, _infer_body(first))[0] for first in ids]
        metrics = scrape_metrics(server.url)
    assert codes == [200 if first == 3 else 500 for first in ids]
    assert metrics["neuronserve_requests_total{outcome=model_error}"] == 8
    assert runner.copies_out == []
    assert metrics["neuronserve_device_cores_out"] == 0


def test_when_every_core_has_failed_the_device_fails_as_with_one(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, _ = _runner_with_broken_cores(neuron_artifact, monkeypatch, {0, 1})
    config = ServeConfig(max_batch_delay_ms=0, device_suspect_after=3, device_restart_seconds=0.5)
    manifest = neuron_artifact[0]
    with LiveServer(manifest, runner, config) as server:
        codes = [
            http_json(server.url, "POST", f"/v2/models/{manifest.name}/infer", _infer_body(3))[0] for _ in range(3)
        ]
        assert codes == [500] * 3
        wait_for(lambda: http_json(server.url, "GET", "/v2/health/ready")[0] == 503, 20, "readiness to turn false")
        assert http_json(server.url, "GET", "/v2/health/ready")[2]["phase"] == "device_failed"
        wait_for(lambda: http_json(server.url, "GET", "/v2/health/live")[0] == 503, 20, "liveness to turn false")
    # Neither core ran a batch the other did not fail: both stay in rotation (nothing to prefer).
    assert runner.copies_out == []


def test_two_failed_cores_of_four_fail_no_request_while_two_sound_ones_remain(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reviewer's repro: the retry tried one other copy, which could be the other failed one, so
    # clients got 500s while cores 2 and 3 were sound. Each failed batch must try the others in turn.
    runner, stand_in = _warmed_runner(neuron_artifact, monkeypatch, "0-3")
    BrokenCores(stand_in, {0, 1}).install(monkeypatch)
    failures = 0
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # as the batcher's executor threads
        for _ in range(50):
            for future in [pool.submit(runner.run, [_inputs(3)]) for _ in range(4)]:
                try:
                    future.result()
                except RuntimeError:
                    failures += 1
    assert failures == 0
    # Both failed copies left rotation (each struck only on batches a later copy ran); the sound stay.
    assert runner.copies_out == [0, 1]


def test_a_bad_input_on_four_cores_fails_on_each_and_takes_none_out(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, stand_in = _warmed_runner(neuron_artifact, monkeypatch, "0-3")
    stand_in.executions.clear()
    for _ in range(2 * backend.COPY_OUT_AFTER):
        with pytest.raises(RuntimeError):
            runner.run([_inputs(500)])  # an id past the embedding table: every copy fails on it
    # Tried on every copy in rotation once per run, and no copy blamed for the input.
    assert _sorted_cores(stand_in.executions) == sorted(list(range(4)) * 2 * backend.COPY_OUT_AFTER)
    assert runner.copies_out == []
    runner.run([_inputs(3)])


async def test_with_a_core_out_the_batcher_runs_and_counts_busy_on_the_copies_left(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reviewer's repro: with core 1 of 2 out, the batcher still handed two batches at once to the
    # one copy left and started each one's busy clock before it had a copy: the one waiting for the
    # copy read busy (the ratio 1.0 on one core of two, busy seconds growing 2 s a second) and its
    # requests showed in neither the queue depth nor an execution.
    runner, stand_in = _warmed_runner(neuron_artifact, monkeypatch, "0-1")
    busy = BusyTracker(window_seconds=600.0)
    batcher = Batcher(runner, ServerMetrics(busy), max_rows=1, max_delay=0.0, max_queue=64)
    assert batcher.parallel == 2
    batcher.start()
    BrokenCores(stand_in, {1}).install(monkeypatch)
    for _ in range(4 * backend.COPY_OUT_AFTER):
        await batcher.submit(_request(3))
        if runner.copies_out:
            break
    assert runner.copies_out == [1]
    assert batcher.parallel == 1  # the copy leaving lowers the batches executing at once

    # Every execution waits for the gate; count the batches that reached the runner.
    gate = threading.Event()
    entered: list[int] = []
    broken_call, real_run = PlacedCopy.__call__, ModelRunner.run

    def gated(copy: PlacedCopy, *tensors: torch.Tensor) -> torch.Tensor:
        gate.wait(30)
        return broken_call(copy, *tensors)

    @functools.wraps(real_run)
    def counted(self: ModelRunner, *args: Any, **kwargs: Any) -> Any:
        entered.append(1)
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(PlacedCopy, "__call__", gated)
    monkeypatch.setattr(ModelRunner, "run", counted)
    before, started = busy.busy_seconds_total, time.monotonic()
    futures = [batcher.submit(_request(3)) for _ in range(8)]
    try:
        # One batch executes on core 0; one full batch waits ahead of it (for the copy) and no more.
        await _until(lambda: len(entered) == 2 and len(batcher._running) == batcher.parallel + batcher.lookahead)
        assert len(batcher._running) == 2
        # The batch waiting for the copy is queued, as is every request not executing.
        assert batcher.queue_depth == 7
    finally:
        gate.set()
    await asyncio.gather(*futures)
    assert await batcher.drain(5.0)
    # One copy executes one batch at a time: its busy time cannot exceed the time that passed.
    assert busy.busy_seconds_total - before <= time.monotonic() - started


# A copy out of rotation is re-tested: after a cool-off (60 s, doubled after each failed re-test,
# at most 30 min) the next batch runs on it first. Before, it stayed out until the pod restarted,
# so a transient fault cost the replica a core for the pod's life.


def _runner_with_core_1_out(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch, visible: str = "0-1", out: int = 1
) -> tuple[ModelRunner, NeuronStandIn, BrokenCores, ManualClock]:
    """A warmed runner on ``visible`` cores whose copy 1 (copies 1 to ``out``) failed until it was
    taken out of rotation (at the clock's time now); it still fails until the test heals it
    (``broken.cores``)."""
    clock = ManualClock()
    runner, stand_in = _warmed_runner(neuron_artifact, monkeypatch, visible, clock)
    broken = BrokenCores(stand_in, set(range(1, out + 1)))
    broken.install(monkeypatch)
    for _ in range(20 * backend.COPY_OUT_AFTER):
        runner.run([_inputs(3)])
        if len(runner.copies_out) == out:
            break
    assert runner.copies_out == list(range(1, out + 1))
    stand_in.executions.clear()
    return runner, stand_in, broken, clock


def test_a_core_out_runs_one_batch_after_its_cool_off_and_is_back_in_rotation_when_it_succeeds(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    runner, stand_in, broken, clock = _runner_with_core_1_out(neuron_artifact, monkeypatch)
    broken.cores.clear()  # the fault was transient: the core answers again
    config = ServeConfig(max_batch_delay_ms=0, device_suspect_after=3, device_restart_seconds=0.5)
    manifest = neuron_artifact[0]
    infer = f"/v2/models/{manifest.name}/infer"
    with caplog.at_level(logging.INFO, logger="neuronserve.backend"), LiveServer(manifest, runner, config) as server:
        clock.now += 59
        codes = [http_json(server.url, "POST", infer, _infer_body(3 + i))[0] for i in range(4)]
        # Not before its cool-off of 60 s.
        assert stand_in.executions == [0] * 4
        assert scrape_metrics(server.url)["neuronserve_device_cores_out"] == 1
        clock.now += 1
        codes.append(http_json(server.url, "POST", infer, _infer_body(9))[0])
        # The first batch after it is the re-test, and the copy ran it: back in rotation.
        assert stand_in.executions[4:] == [1]
        metrics = scrape_metrics(server.url)
        ready = http_json(server.url, "GET", "/v2/health/ready")[2]
        codes += [http_json(server.url, "POST", infer, _infer_body(3 + i))[0] for i in range(4)]
    assert codes == [200] * 9
    assert runner.copies_out == [] and runner.parallel == 2
    assert metrics["neuronserve_device_cores_out"] == 0 and ready["cores_out"] == 0
    assert metrics["neuronserve_device_cores"] == 2
    assert _sorted_cores(stand_in.executions[5:]) == [0, 0, 1, 1]  # handed out in turn again
    assert "NeuronCore copy 1 ran its re-test batch: back in rotation; serving on 2 of 2 copies" in caplog.text
    # Its strikes were reset: failing again, it leaves after COPY_OUT_AFTER failures, not at the first.
    broken.cores.add(1)
    stand_in.executions.clear()
    for _ in range(4 * backend.COPY_OUT_AFTER):
        runner.run([_inputs(3)])
        if runner.copies_out:
            break
    assert runner.copies_out == [1]
    assert stand_in.executions.count(1) == backend.COPY_OUT_AFTER


def test_a_core_back_in_rotation_is_logged_with_the_copies_serving_while_another_is_still_out(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    runner, _, broken, clock = _runner_with_core_1_out(neuron_artifact, monkeypatch, visible="0-2", out=2)
    broken.cores.discard(1)  # copy 1's fault was transient; copy 2's is not
    clock.now += backend.RETEST_FIRST_SECONDS
    with caplog.at_level(logging.INFO, logger="neuronserve.backend"):
        for _ in range(4):  # one re-test per batch: copy 1's back, copy 2's failed (the batch ran again)
            runner.run([_inputs(3)])
    assert runner.copies_out == [2] and runner.parallel == 2
    assert "NeuronCore copy 1 ran its re-test batch: back in rotation; serving on 2 of 3 copies" in caplog.text


def test_a_core_that_fails_its_retest_stays_out_with_the_cool_off_doubled_and_no_batch_fails(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    runner, stand_in, _, clock = _runner_with_core_1_out(neuron_artifact, monkeypatch)
    (expected,), _ = runner.run([_inputs(3)])  # on copy 0, the sound one
    stand_in.executions.clear()
    with caplog.at_level(logging.INFO, logger="neuronserve.backend"):
        # Doubling from 60 s, at most 30 minutes.
        for cool_off in (60, 120, 240, 480, 960, 1800, 1800):
            clock.now += cool_off - 1
            (rows,), _ = runner.run([_inputs(3)])
            assert stand_in.executions == [0], f"copy 1 re-tested before its cool-off of {cool_off} s"
            clock.now += 1
            # The re-test fails on copy 1 and the batch runs again on copy 0: its caller sees no failure.
            (retested,), _ = runner.run([_inputs(3)])
            assert stand_in.executions == [0, 1, 0], f"copy 1 not re-tested after its cool-off of {cool_off} s"
            assert np.array_equal(rows, expected) and np.array_equal(retested, expected)
            assert runner.copies_out == [1] and runner.parallel == 1
            stand_in.executions.clear()
    assert "NeuronCore copy 1 failed its re-test batch" in caplog.text and "next re-test in 1800 s" in caplog.text


def _seconds_until_back(runner: ModelRunner, clock: ManualClock) -> int:
    """Seconds on the runner's clock, one batch a second, until no copy is out of rotation."""
    for waited in range(1, 4000):
        clock.now += 1
        runner.run([_inputs(3)])
        if not runner.copies_out:
            return waited
    raise AssertionError(f"a copy still out after 4000 s: {runner.copies_out}")


def _fail_core_1_until_out(runner: ModelRunner, broken: BrokenCores) -> None:
    broken.cores.add(1)
    for _ in range(20 * backend.COPY_OUT_AFTER):
        runner.run([_inputs(3)])
        if runner.copies_out:
            break
    assert runner.copies_out == [1]


def test_a_core_that_passes_its_retests_and_fails_again_stays_out_longer_each_time(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flapping core (its re-test batch passes, the batches after fail) must not come back every
    minute: taken out again within 15 minutes of its return, its cool-off doubles as after a failed
    re-test, so it spends longer out each round and NeuronserveCoresOut (out for 15 min) can fire."""
    runner, _, broken, clock = _runner_with_core_1_out(neuron_artifact, monkeypatch)
    waits = []
    for _ in range(6):
        broken.cores.clear()  # the re-test passes ...
        waits.append(_seconds_until_back(runner, clock))
        _fail_core_1_until_out(runner, broken)  # ... and the core fails again at once
    assert waits == [60, 120, 240, 480, 960, 1800]
    # A core that served 15 minutes or more before it failed again starts from the first cool-off.
    broken.cores.clear()
    _seconds_until_back(runner, clock)
    clock.now += backend.FLAPPING_WITHIN_SECONDS
    _fail_core_1_until_out(runner, broken)
    broken.cores.clear()
    assert _seconds_until_back(runner, clock) == backend.RETEST_FIRST_SECONDS


def test_a_core_out_has_one_retest_batch_in_flight_at_a_time(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, _, _, clock = _runner_with_core_1_out(neuron_artifact, monkeypatch, "0-2")
    clock.now += 60
    # Copies 0 and 2 hold every batch until the gate opens; note which copy each batch enters.
    gate = threading.Event()
    entered: list[int | None] = []
    broken_call = PlacedCopy.__call__

    def gated(copy: PlacedCopy, *tensors: torch.Tensor) -> torch.Tensor:
        entered.append(copy.core)
        if copy.core != 1:
            gate.wait(30)
        return broken_call(copy, *tensors)

    monkeypatch.setattr(PlacedCopy, "__call__", gated)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        try:
            # The first batch is copy 1's re-test: it fails there and waits on another copy.
            first = pool.submit(runner.run, [_inputs(3)])
            wait_for(lambda: len(entered) == 2, 10, "the re-test batch to fail and run again elsewhere")
            assert entered[0] == 1
            # Copy 1 is free and past its cool-off, but its re-test is still in flight: the next
            # batch goes to the copy left in rotation.
            second = pool.submit(runner.run, [_inputs(4)])
            wait_for(lambda: len(entered) >= 3, 10, "the second batch to reach a copy")
            assert entered.count(1) == 1
        finally:
            gate.set()
        first.result(10)
        second.result(10)
    assert sorted(entered[1:], key=str) == [0, 2]
    assert runner.copies_out == [1]


def test_a_retest_failed_by_a_bad_input_on_every_copy_blames_no_copy_and_the_next_batch_retests(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, stand_in, broken, clock = _runner_with_core_1_out(neuron_artifact, monkeypatch)
    broken.cores.clear()
    clock.now += 60
    with pytest.raises(RuntimeError):
        runner.run([_inputs(500)])  # an id past the embedding table: copy 0 fails it too
    assert stand_in.executions == [1, 0]
    assert runner.copies_out == [1]
    # Nothing was learned about copy 1: the next batch re-tests it, without a longer cool-off.
    runner.run([_inputs(3)])
    assert stand_in.executions == [1, 0, 1]
    assert runner.copies_out == []


def test_a_copy_taken_out_while_it_executes_a_batch_gets_no_retest_on_top_of_it(
    neuron_artifact: tuple[Manifest, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock()
    runner, stand_in = _warmed_runner(neuron_artifact, monkeypatch, "0-1", clock)
    BrokenCores(stand_in, {1}).install(monkeypatch)
    stand_in.executions.clear()
    # Copy 1's strikes, one short of out. After a batch copy 1 is the longest free (it failed the
    # batch and was given back first), so the next batch goes to it first.
    for _ in range(4 * backend.COPY_OUT_AFTER):
        if stand_in.executions.count(1) == backend.COPY_OUT_AFTER - 1:
            break
        runner.run([_inputs(3)])
    assert stand_in.executions.count(1) == backend.COPY_OUT_AFTER - 1 and runner.copies_out == []
    gates = {0: threading.Event(), 1: threading.Event()}
    entered: list[int | None] = []
    broken_call = PlacedCopy.__call__

    def gated(copy: PlacedCopy, *tensors: torch.Tensor) -> torch.Tensor:
        entered.append(copy.core)
        assert copy.core is not None
        gates[copy.core].wait(30)
        return broken_call(copy, *tensors)

    monkeypatch.setattr(PlacedCopy, "__call__", gated)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        try:
            # Batch X fails on copy 1 and waits on copy 0; batch Y then starts on copy 1 and waits there.
            gates[1].set()
            x = pool.submit(runner.run, [_inputs(3)])
            wait_for(lambda: entered == [1, 0], 10, "batch X to fail on copy 1 and reach copy 0")
            gates[1].clear()
            y = pool.submit(runner.run, [_inputs(4)])
            wait_for(lambda: entered == [1, 0, 1], 10, "batch Y to reach copy 1")
            # X runs on copy 0: copy 1's third strike takes it out while it still executes Y.
            gates[0].set()
            x.result(10)
            assert runner.copies_out == [1]
            # Past its cool-off, copy 1 is due a re-test, but it is still executing Y: batch Z
            # goes to copy 0.
            clock.now += 60
            z = pool.submit(runner.run, [_inputs(5)])
            wait_for(lambda: len(entered) >= 4, 10, "batch Z to reach a copy")
            assert entered[3] == 0
            z.result(10)
        finally:
            gates[0].set()
            gates[1].set()
        y.result(10)  # Y failed on copy 1 and ran on copy 0
    assert runner.copies_out == [1]
