"""Dynamic batching with a bounded queue in front of one device.

Requests wait in a FIFO bounded by ``max_queue`` (a full queue refuses at once: the caller answers
429). One worker task forms a batch from the head of the queue, up to ``max_rows`` rows or until
``max_delay`` has passed since its first request arrived (as Triton's max_queue_delay: a request
that already waited that long behind busy cores closes its batch at once, with whatever is
queued, instead of waiting the delay again while the device idles), then runs it and resolves
each request's future with its rows. A model ``Runner`` runs in executor threads so the event
loop stays free, up to ``runner.parallel`` batches at once, read as each batch is handed over (a
``ModelRunner``: one per copy of the model in rotation, i.e. per NeuronCore of a Neuron artifact not
taken out for failing, one for a CPU artifact; a runner that does not say: one); a ``TimedDevice``
(the emulated NeuronCores) runs up to one batch per core at once on its own timeline, and no thread.

Lookahead (model runner): while every copy executes a batch, a *full* next batch is formed and
handed to the executor at once, so a copy starts it the moment its current one ends, without waiting
for the event loop to be scheduled (on a busy machine that wait is milliseconds per batch). Only
full batches go ahead: a batch still filling waits as before, so no request is served later than
without lookahead. The requests of a batch waiting ahead still count as queued (depth and bound),
as do those of the batch being formed: they are accepted and not executing, so the queue's bound
holds them too, a drain waits for them, and ``neuronserve_queue_depth`` shows them.
A request whose future is cancelled (its client hung up: the server cancels the handler, which
cancels the future it awaits) leaves the queue, the batch being formed or the batch waiting ahead
at once, so it holds no queue slot and a drain does not wait for it; a batch drops its cancelled
requests when it starts executing (a batch waiting ahead, in the executor thread) and is not run
when none is left. One cancelled while its batch executes is run, and its rows dropped.
A batch the device fails on is split in halves, and each half run again, until every failing
request is alone: its future gets the error and the others their rows. One request the model
cannot run (say an id past an embedding table a TorchScript artifact declares no range for) costs
about 2 log2(n) more runs of a batch of n, not n. A request gets an error only from a run that held
it alone: the one request left of a failed batch whose others were cancelled meanwhile runs again
alone, as the error may have been theirs.
``neuronserve_batch_size`` records the rows of every batch the device starts, whether it then
succeeds or fails (a split batch's runs each count).
Written by hand because the policy (row budget, bucket padding, drain on SIGTERM, busy tracking)
is the server's core and small; no maintained asyncio batching library covers it.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import inspect
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard, cast

import numpy as np
import numpy.typing as npt

from neuronserve.metrics import BusyTracker, ServerMetrics
from neuronserve.protocol import InferRequest

log = logging.getLogger("neuronserve.batcher")


class Runner(Protocol):
    """Runs batches in the caller's thread; may say in ``parallel`` how many it runs at once now
    (else one). One whose ``run`` takes ``busy`` (a ``ModelRunner``) tells it when each of its
    copies starts and stops executing the batch; another's whole run is counted busy."""

    def run(self, requests: Sequence[Sequence[npt.NDArray[Any]]]) -> tuple[list[npt.NDArray[np.float32]], Any]: ...

    def cost(self, rows: int, sequence: int) -> float | None: ...


class Reservation(Protocol):
    start: float
    end: float


class TimedDevice(Protocol):
    """A device that books each batch on one of ``cores`` and reports its busy interval itself."""

    cores: int

    def cost(self, rows: int, sequence: int) -> float | None: ...

    def reserve(self, rows: int, sequence: int, ready_at: float) -> Any: ...

    async def execute(
        self, requests: Sequence[Sequence[npt.NDArray[Any]]], reservation: Any
    ) -> list[npt.NDArray[np.float32]]: ...


# A shorter batch must promise this much more throughput than the whole one to be chosen (bucket
# costs are the minimum of >= 0.3 s of warm-up runs each, steady to a few percent).
PREFIX_MARGIN = 1.03


class QueueFull(Exception):
    """The bounded queue is full: answer 429."""


class ShuttingDown(Exception):
    """The server is draining and will not run this request: answer 503."""


#: Absolute paths in an error message (the model's source files, the server's own): not for clients.
_PATH = re.compile(r"(?<![\w.])/(?:[\w.@+-]+/)+[\w.@+-]*")
#: A message line that names its own exception type, as a TorchScript traceback's last line does.
_NAMED = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b:")


def failure_summary(exc: BaseException) -> str:
    """``Type: last line`` of an exception's message, for a client: no traceback, no file paths.

    A model's failure message can be a whole TorchScript traceback naming the files of the code it
    was compiled from; its last line says what went wrong ("RuntimeError: index out of range in self").
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    last = _PATH.sub("<path>", lines[-1])[:300] if lines else ""
    if _NAMED.match(last):
        return last
    name = type(exc).__name__
    return f"{name}: {last}" if last else name


@dataclass(eq=False)  # identity: a job is removed from the queue by itself, never by an equal one
class Job:
    request: InferRequest
    future: asyncio.Future[npt.NDArray[np.float32]]
    enqueued: float = field(default_factory=time.monotonic)


def _live(jobs: Sequence[Job]) -> list[Job]:
    """The jobs still wanted (a cancelled or already answered one is not run)."""
    return [job for job in jobs if not job.future.done()]


class Batcher:
    def __init__(
        self,
        runner: Runner | TimedDevice,
        metrics: ServerMetrics,
        *,
        max_rows: int,
        max_delay: float,
        max_queue: int,
        batching: bool = True,
        batch_sizes: Sequence[int] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.runner = runner
        self._clock = clock  # when requests arrive (a test moves it; the emulated device reads time.monotonic)
        self.metrics = metrics
        self.max_rows = max_rows
        self.max_delay = max_delay
        self.max_queue = max_queue
        self.batching = batching
        # The compiled batch sizes: a batch may be cut back to one of them (see _most_efficient_prefix).
        self.batch_sizes = frozenset(batch_sizes)
        self.peak_queue_depth = 0
        self.batches_run = 0
        self._queue: collections.deque[Job] = collections.deque()
        self._arrived = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing = False
        self._worker: asyncio.Task[None] | None = None
        # Whether the runner says when its copies execute (a ``ModelRunner``), or its whole run counts.
        self._reports_busy = not _is_timed(runner) and "busy" in inspect.signature(cast(Runner, runner).run).parameters
        # A thread per batch executing: the lookahead batch waits in the executor's queue until
        # one of them is free, so it starts the moment any of the running batches ends. (A model
        # runner whose copies leave rotation keeps its threads: the batches handed over are fewer.)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.parallel, thread_name_prefix="neuronserve-exec"
        )
        # Plus one full batch waiting in the executor behind a model runner's current ones.
        self.lookahead = 0 if _is_timed(runner) else 1
        self._running: dict[asyncio.Task[None], list[Job]] = {}
        self._ahead: list[Job] = []  # the lookahead batch's requests, not yet executing
        # The batch the worker is forming: taken from the queue, not yet handed to a device slot.
        self._forming: list[Job] = []
        metrics.queue_depth.set_function(lambda: self.queue_depth)

    @property
    def parallel(self) -> int:
        """Batches executing at once now: one per copy of a model runner's model in rotation (a copy
        taken out lowers it), one per core on a timed device."""
        return self.runner.cores if _is_timed(self.runner) else _model_parallel(self.runner)

    @property
    def queue_depth(self) -> int:
        """Requests accepted and not executing yet: the queue, the batch being formed and a lookahead batch."""
        return len(self._queue) + len(self._forming) + len(self._ahead)

    @property
    def full(self) -> bool:
        """Whether a new request would be refused now (QueueFull)."""
        return self.queue_depth >= self.max_queue

    def start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(self._work(), name="neuronserve-batcher")

    def check_room(self) -> None:
        """Raise QueueFull if a new request would be refused now (the server asks before it reads a body)."""
        if self.full:
            raise QueueFull(f"the queue is full ({self.max_queue} requests waiting)")

    def submit(self, request: InferRequest, first: bool = False) -> asyncio.Future[npt.NDArray[np.float32]]:
        """Queue a request (``first``: at the head of the queue); its future resolves to its output rows."""
        if self._closing:
            raise ShuttingDown("the server is shutting down")
        self.check_room()
        future: asyncio.Future[npt.NDArray[np.float32]] = asyncio.get_running_loop().create_future()
        job = Job(request, future, self._clock())
        future.add_done_callback(lambda done: self._abandoned(job) if done.cancelled() else None)
        if first:
            self._queue.appendleft(job)
        else:
            self._queue.append(job)
        self.peak_queue_depth = max(self.peak_queue_depth, self.queue_depth)
        self._idle.clear()
        self._arrived.set()
        return future

    def _abandoned(self, job: Job) -> None:
        """A cancelled request gives its place back at once: out of the queue, the batch being
        formed or the batch waiting ahead (wherever it is; executing, it is in none)."""
        for holder in (self._queue, self._forming, self._ahead):
            with contextlib.suppress(ValueError):
                holder.remove(job)
                break
        self._arrived.set()  # the worker re-reads what it is forming (it may be empty now)
        self._check_idle()

    async def drain(self, grace_seconds: float) -> bool:
        """Refuse new work, finish what is queued and executing; True if all of it finished in time.

        Whatever is still queued at the deadline is answered with ShuttingDown (503), never dropped.
        """
        self._closing = True
        self._arrived.set()
        try:
            await asyncio.wait_for(self._idle.wait(), grace_seconds)
            finished = True
        except TimeoutError:
            finished = False
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        # Past the deadline, what never reached the device (queued, or in the batch the cancelled
        # worker was forming) is refused; after a drain that finished, both are empty.
        for job in (*self._forming, *self._queue):
            if not job.future.done():
                job.future.set_exception(ShuttingDown("the server shut down before this request ran"))
        self._forming = []
        self._queue.clear()
        # A batch still executing past the grace period gets a definite answer too.
        for task, jobs in list(self._running.items()):
            task.cancel()
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(ShuttingDown("the server shut down while this request ran"))
        self._executor.shutdown(wait=False, cancel_futures=True)
        return finished

    def _has_full_batch(self) -> bool:
        rows = 0
        for job in self._queue:
            if not job.future.done():
                rows += job.request.rows
                if rows >= self.max_rows:
                    return True
        return False

    async def _wait_for_slot(self) -> None:
        """Until fewer batches are handed over than execute at once, plus the lookahead one."""
        while len(self._running) >= self.parallel + self.lookahead:
            self._arrived.clear()
            await self._arrived.wait()

    async def _wait_for_full_batch_or_device(self) -> None:
        """With every device slot busy: wait until a full batch is queued or a batch finishes."""
        while len(self._running) >= self.parallel and not self._has_full_batch() and not self._closing:
            self._arrived.clear()
            await self._arrived.wait()

    def _check_idle(self) -> None:
        if not self._queue and not self._forming and not self._running:
            self._idle.set()

    async def _next_batch(self) -> tuple[list[Job], float]:
        """The next batch, and when it was complete: the last arrival if it filled up, else now."""
        loop = asyncio.get_running_loop()
        while True:
            first = await self._first_job()
            # The same list as ``_forming``: a request cancelled while the batch fills leaves both.
            batch = self._forming = [first]
            if not self.batching:
                return batch, first.enqueued
            waited = self._clock() - first.enqueued
            full = await self._fill(batch, loop.time() + max(0.0, self.max_delay - waited))
            if batch:  # else every request of it was cancelled while it filled: start again
                break
        batch = self._forming = self._most_efficient_prefix(batch)
        ready_at = max(job.enqueued for job in batch) if full else self._clock()
        return batch, ready_at

    async def _first_job(self) -> Job:
        while True:
            while not self._queue:
                self._check_idle()
                self._arrived.clear()
                await self._arrived.wait()
            first = self._queue.popleft()
            if not first.future.done():
                return first

    async def _fill(self, batch: list[Job], deadline: float) -> bool:
        """Add queued requests to ``batch`` until it is full (True) or ``deadline`` passes (False)."""
        loop = asyncio.get_running_loop()
        while batch:
            rows = sum(job.request.rows for job in batch)
            if rows >= self.max_rows:
                return True
            if self._queue:
                head = self._queue[0]
                if head.future.done():
                    self._queue.popleft()
                    continue
                if rows + head.request.rows > self.max_rows:
                    return True
                batch.append(self._queue.popleft())
                continue
            remaining = deadline - loop.time()
            if remaining <= 0 or self._closing:
                return False
            self._arrived.clear()
            try:
                async with asyncio.timeout(remaining):  # not wait_for: no task per wait (one per batch)
                    await self._arrived.wait()
            except TimeoutError:
                return False
        return False

    def _most_efficient_prefix(self, batch: list[Job]) -> list[Job]:
        """Keep the leading requests that give clearly more rows per second of device time; requeue the rest.

        Padding 9 rows to a 16-row bucket can cost more than running 8 now and 1 with the next
        batch; the bucket costs measured at warm-up decide. Only prefixes that fill a bucket exactly
        and keep at least half of the rows are candidates, and one must beat the whole batch by
        PREFIX_MARGIN: warm-up timings are noisy, and a bad one must not switch batching off.
        Order is kept (a prefix), so no request is overtaken more than once.
        """
        total_rows = sum(job.request.rows for job in batch)
        seq = max(job.request.sequence for job in batch)
        full_cost = self.runner.cost(total_rows, seq)
        if len(batch) == 1 or full_cost is None or full_cost <= 0:
            return batch
        best, best_rate = len(batch), total_rows / full_cost
        rows = prefix_seq = 0
        for index, job in enumerate(batch[:-1], start=1):
            rows += job.request.rows
            prefix_seq = max(prefix_seq, job.request.sequence)
            if 2 * rows < total_rows or rows not in self.batch_sizes:
                continue
            cost = self.runner.cost(rows, prefix_seq)
            if cost and rows / cost > best_rate * PREFIX_MARGIN:
                best, best_rate = index, rows / cost
        for job in reversed(batch[best:]):
            self._queue.appendleft(job)
        return batch[:best]

    async def _execute(self, batch: list[Job], ready_at: float) -> tuple[list[Job], list[npt.NDArray[np.float32]]]:
        """Run one batch on the device, its cancelled requests left out; the requests run and
        their outputs. Records the batch's size and busy interval."""
        runner = self.runner
        if _is_timed(runner):
            arrays = [list(job.request.arrays) for job in batch]
            self.metrics.batch_size.observe(sum(job.request.rows for job in batch))
            rows = sum(a[0].shape[0] for a in arrays)
            sequence = max(a[0].shape[1] for a in arrays)
            reservation = runner.reserve(rows, sequence, ready_at)
            self.metrics.busy.started(reservation.start)
            # Its booked time on the nominal timeline (the loop's timer may wake a little early or
            # late); a batch cut short (a failure, or cancelled by the drain) only the time it ran.
            end = reservation.end
            try:
                return batch, await runner.execute(arrays, reservation)
            except BaseException as exc:
                end = max(reservation.start, min(reservation.end, time.monotonic()))
                if isinstance(exc, Exception):
                    raise BatchFailed(batch, exc) from exc
                raise
            finally:
                self.metrics.busy.finished(reservation.start, end)
        model = cast(Runner, runner)
        # The busy clock runs while the batch holds a copy of the model (the runner says when: a
        # ``ModelRunner`` takes ``busy``), not from when the batch is handed over: a lookahead batch
        # waits in the executor behind the ones executing, and a batch waits in the runner for a
        # free copy (more batches than copies in rotation: a copy left), and counting either read
        # up to twice the device's busy share. The tracker is read on the loop thread (by /metrics),
        # so the thread hands each start and end over to the loop, in order, and before the run's
        # result: a batch's time is counted by the time its requests are answered. (Cancelled by the
        # drain while the run goes on, its clock runs on until the run ends, as the device does.)
        loop = asyncio.get_running_loop()
        busy = _LoopClock(loop, self.metrics.busy)
        return await loop.run_in_executor(
            self._executor,
            _timed_run,
            model,
            batch,
            self.metrics.batch_size.observe,
            busy,
            self._reports_busy,
        )

    async def _run(self, batch: list[Job], ready_at: float, splitting: bool = False) -> None:
        batch = _live(batch)  # a copy: the batch a task runs is never changed under it
        if not batch:
            return
        self.batches_run += 1
        try:
            ran, outputs = await self._execute(batch, ready_at)
        except Exception as exc:
            # Any other error (say the device refusing the reservation) is the whole batch's.
            failure = exc if isinstance(exc, BatchFailed) else BatchFailed(batch, exc)
            if len(failure.ran) == 1:
                # It ran alone: the error is this request's own.
                if not failure.ran[0].future.done():
                    failure.ran[0].future.set_exception(failure.error)
                return
            survivors = _live(batch)
            if len(survivors) > 1:
                # Isolate the request(s) that break the batch instead of failing all of them: by
                # halves, so one bad request costs O(log n) more runs, not one run per request.
                if not splitting:
                    log.warning(
                        "batch of %d requests failed (%s); splitting it to find the failing ones",
                        len(failure.ran),
                        failure_summary(failure.error),
                    )
                half = len(survivors) // 2
                parts = [survivors[:half], survivors[half:]]
            else:
                # The others of the batch were cancelled while it ran: the error may have been
                # theirs, so the one left runs alone before it is blamed (and counted against the device).
                parts = [survivors]
            for part in parts:
                await self._run(part, time.monotonic(), splitting=True)
            return
        for job, rows in zip(ran, outputs, strict=True):
            if not job.future.done():
                job.future.set_result(rows)

    async def _run_in_slot(self, batch: list[Job], ready_at: float) -> None:
        try:
            await self._run(batch, ready_at)
        finally:
            self._running.pop(asyncio.current_task(), None)  # type: ignore[arg-type]
            self._ahead = []  # whichever batch ended, a lookahead batch is executing or done
            self._arrived.set()  # a slot is free, and a lookahead wait (device busy) may go on
            self._check_idle()

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            # The batches executing at once are read at each hand-over: a model runner's copy
            # leaving rotation lowers them (and so the one waiting ahead waits behind fewer).
            await self._wait_for_slot()
            await self._wait_for_full_batch_or_device()
            batch, ready_at = await self._next_batch()
            ahead = len(self._running) >= self.parallel
            task = loop.create_task(self._run_in_slot(batch, ready_at))
            self._running[task] = batch
            self._forming = []
            if ahead:
                self._ahead = list(batch)  # a copy: a cancelled request leaves it, not the batch the task runs


class BatchFailed(Exception):
    """The device failed on a batch: the requests it was run with (``ran``) and its error."""

    def __init__(self, ran: Sequence[Job], error: Exception) -> None:
        super().__init__(str(error))
        self.ran = list(ran)
        self.error = error


#: Batches executing now in executor threads, across every batcher of the process (written there).
_executing = 0
_executing_lock = threading.Lock()


def batch_executing() -> bool:
    """Whether a model runner is executing a batch now, in an executor thread.

    Past the drain's grace period such a batch (a hung device) is abandoned: its requests have
    been answered (503). Its thread cannot be stopped, and Python would wait for it at exit (the
    executor's threads are joined) and, as a daemon thread, abort the process when finalization
    reaches a thread inside TorchScript; the server's exit checks this and leaves at once instead.
    """
    return _executing > 0


class _LoopClock:
    """A busy clock for an executor thread: hands each start and end to ``busy`` on the loop's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, busy: BusyTracker) -> None:
        self._loop = loop
        self._busy = busy

    def _call(self, fn: Callable[..., None], *args: float) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody reads it any more
            self._loop.call_soon_threadsafe(fn, *args)

    def started(self, at: float) -> None:
        self._call(self._busy.started, at)

    def finished(self, start: float, end: float) -> None:
        self._call(self._busy.finished, start, end)


def _timed_run(
    runner: Runner, batch: list[Job], observe_rows: Callable[[float], None], busy: _LoopClock, reports_busy: bool
) -> tuple[list[Job], list[npt.NDArray[np.float32]]]:
    """Run a batch's requests not cancelled by now (in the executor thread); those and their
    outputs. ``busy`` is told when the batch holds the device: by the runner for each copy it
    runs on (``reports_busy``), else for the whole run (a batch left with no request does not run
    and is not counted). Its rows are recorded (``observe_rows``) before it runs, so a batch that
    fails counts as one that succeeds; a failure is raised as ``BatchFailed``.

    A batch waiting ahead was handed over before it could run: requests cancelled since are left
    out here. ``future.done()`` is one read of state only the loop thread writes; a request
    cancelled at this very instant may still run (its rows are then dropped).
    """
    live = _live(batch)
    if not live:
        return [], []
    observe_rows(sum(job.request.rows for job in live))  # a prometheus_client histogram: thread-safe
    arrays = [list(job.request.arrays) for job in live]
    global _executing
    with _executing_lock:
        _executing += 1
    start = time.monotonic()
    if not reports_busy:
        busy.started(start)
    try:
        if reports_busy:
            outputs, _bucket = cast(Any, runner).run(arrays, busy=busy)
        else:
            outputs, _bucket = runner.run(arrays)
    except Exception as exc:
        raise BatchFailed(live, exc) from exc
    finally:
        if not reports_busy:
            busy.finished(start, time.monotonic())
        with _executing_lock:
            _executing -= 1
    return live, outputs


def _is_timed(runner: Runner | TimedDevice) -> TypeGuard[TimedDevice]:
    return hasattr(runner, "reserve")


def _model_parallel(runner: object) -> int:
    """How many batches a model runner executes at once: its ``parallel`` (a ``ModelRunner``: its
    copies of the model), else one."""
    parallel = getattr(runner, "parallel", 1)
    if not isinstance(parallel, int) or parallel < 1:
        raise ValueError(f"a runner's parallel must be a positive integer, not {parallel!r}")
    return parallel
