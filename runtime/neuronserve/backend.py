"""Runs a verified artifact: loaded modules per bucket, padding, one execution per batch.

``ModelRunner.run`` is blocking and meant for worker threads: torch releases the GIL while it
computes, so the event loop keeps serving HTTP meanwhile. A Neuron artifact needs torch-neuronx at
load time (it registers the Neuron ops TorchScript refers to); a CPU artifact needs only torch.

Data parallelism over the replica's NeuronCores: a model traced by ``torch_neuronx.trace`` runs on
one NeuronCore, so a Neuron artifact is loaded once per NeuronCore visible to the process (every
bucket on every core; the Neuron device plugin says which cores in ``NEURON_RT_VISIBLE_CORES``),
and up to that many batches execute at once, each on a free copy (``ModelRunner.parallel``). Each
copy is placed on its core with ``torch_neuronx.experimental.neuron_cores_context`` when the
installed torch-neuronx has it; else the runtime's default placement puts each load on the least
used core, and the copies of a bucket are loaded one after another so that they land on different
cores. A CPU artifact is loaded once and runs one batch at a time: CPU torch already spreads one
batch over every CPU thread. Not yet run on Inf2 hardware (no accelerator where this was written):
the placement calls follow the torch-neuronx documentation and are tested against a stand-in.

One failed NeuronCore of several: a batch that fails on a copy runs again on the other copies in
rotation in turn (each at most once, the longest free first) until one runs it. If one does, the
input was sound and the failures were the copies': each copy that failed it gets a strike, and the
client gets its answer. ``COPY_OUT_AFTER`` strikes in a row (a success on the copy ends the run)
take the copy out of rotation (logged; the server exports ``copies_out``): its batches go to the
others, and ``parallel`` (the batches that execute at once) counts the copies left. A core's fault
may pass (a transient NRT error), so a copy out is re-tested: once ``RETEST_FIRST_SECONDS`` (60)
have passed on the runner's clock, the next batch handed out runs on it first, one such batch at a
time. If it runs it, the copy is back in rotation (its strikes reset, logged); if it fails, the
batch runs again on the copies in rotation as any failed batch does (the client sees no failure),
and the copy stays out with its cool-off doubled (at most ``RETEST_MAX_SECONDS``, 30 minutes). A
copy taken out again within 15 minutes of its return is flapping (its re-test passed, the batches
after failed): its cool-off doubles as after a failed re-test, so it stays out longer each round
rather than coming back every minute, and the chart's NeuronserveCoresOut (out 15 min) fires once a
run outlasts it (the 16 or 30 minute ones); a copy
that served 15 minutes or more before it failed again starts from 60 s. A re-test batch that then
fails on every copy in rotation too says nothing of the copy: it stays out, due again. Before re-
tests a copy stayed out until the process restarted, so a passing fault cost the replica a core for
the pod's life. A batch that fails on every copy in rotation is the input's or the whole device's:
it fails alone as on one copy (its last error raised, no copy blamed), and the server's device check
(``neuronserve.health``) decides. The last copy in rotation is never taken out: when it fails too,
every request fails and the device is failed (not ready, then not live) as with a single copy.
Without the retry, with copies handed out in turn, one failed core failed every other request and
each success between ended the run of failures the device check waits for: the replica stayed ready;
with a retry on one other copy only, two failed cores of four still failed the batches that went
from one to the other. A bad input costs a run on each copy in rotation per failing run (and one on
a copy out whose re-test it is); a CPU artifact (one copy) runs nothing twice.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt
import torch

from neuronserve.manifest import Bucket, Manifest

log = logging.getLogger("neuronserve.backend")

#: Failures in a row of a copy, each on a batch another copy then ran, after which it leaves rotation.
COPY_OUT_AFTER = 3
#: Seconds out of rotation before a copy's first re-test; each failed re-test doubles them ...
RETEST_FIRST_SECONDS = 60.0
#: ... up to this (a core that stays failed costs one batch's retry per this long). Longer than the
#: chart's NeuronserveCoresOut ``for`` (15 min): a flapping core's out-runs, doubling, must outlast
#: it for the alert to fire (with a 15 min cap no run did, though the core was out 84 % of the time).
RETEST_MAX_SECONDS = 1800.0
#: A copy taken out again within this long of a re-test putting it back is flapping (see above).
FLAPPING_WITHIN_SECONDS = 900.0


class BusyClock(Protocol):
    """Told when a copy starts executing a batch and when it stops (``BusyTracker``'s interface)."""

    def started(self, at: float) -> None: ...

    def finished(self, start: float, end: float) -> None: ...


class LoadError(Exception):
    """The artifact cannot be loaded or warmed on this host; the message says why."""


def visible_neuron_cores(environ: Mapping[str, str] | None = None) -> int:
    """How many NeuronCores the Neuron runtime gives this process, from its environment.

    ``NEURON_RT_VISIBLE_CORES`` (set by the Neuron device plugin for a container's
    ``aws.amazon.com/neuroncore`` request) lists core indices and ranges: "0-1", "4,5", "2-3,6";
    else ``NEURON_RT_NUM_CORES`` is a count. With neither (or a count of 0, the runtime's "all
    cores", which only the runtime itself can count) one copy is loaded, as before.
    """
    environ = os.environ if environ is None else environ
    visible = environ.get("NEURON_RT_VISIBLE_CORES", "").strip()
    if visible:
        cores: set[int] = set()
        for part in visible.split(","):
            first, dash, last = part.strip().partition("-")
            try:
                start, end = int(first), int(last if dash else first)
            except ValueError:
                start = end = -1
            if start < 0 or end < start:
                raise LoadError(f"NEURON_RT_VISIBLE_CORES={visible!r} is not a list of core indices or ranges")
            cores.update(range(start, end + 1))
        return len(cores)
    number = environ.get("NEURON_RT_NUM_CORES", "").strip()
    if number:
        try:
            count = int(number)
        except ValueError:
            count = -1
        if count < 0:
            raise LoadError(f"NEURON_RT_NUM_CORES={number!r} is not a count of NeuronCores")
        return max(count, 1)
    return 1


def _last_line(error: Exception) -> str:
    """An error's last line, for a log line (a TorchScript error ends with the runtime's message)."""
    text = str(error).strip()
    return text.splitlines()[-1][:300] if text else type(error).__name__


def _cores_source() -> str:
    """Which setting the copy count came from, for the load log."""
    for name in ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES"):
        if os.environ.get(name, "").strip():
            return f"{name}={os.environ[name].strip()}"
    return "neither NEURON_RT_VISIBLE_CORES nor NEURON_RT_NUM_CORES is set"


def _placement(torch_neuronx: Any) -> Callable[[int], contextlib.AbstractContextManager[Any]] | None:
    """A context that places the loads inside it on one core (relative to the visible ones), or
    None when this torch-neuronx has no placement API (it is experimental, and may go)."""
    experimental = getattr(torch_neuronx, "experimental", None)
    if experimental is None:
        try:
            experimental = importlib.import_module("torch_neuronx.experimental")
        except ImportError:
            return None
    context = getattr(experimental, "neuron_cores_context", None)
    if context is None:
        return None
    return lambda core: cast("contextlib.AbstractContextManager[Any]", context(start_nc=core, nc_count=1))


class ModelRunner:
    """The loaded buckets of one artifact. ``clock`` (monotonic seconds) times the cool-offs of
    copies out of rotation before their re-tests."""

    def __init__(self, manifest: Manifest, directory: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.manifest = manifest
        self._clock = clock
        place: Callable[[int], contextlib.AbstractContextManager[Any]] | None = None
        copies = 1
        if manifest.backend == "neuron":
            try:
                torch_neuronx = importlib.import_module("torch_neuronx")
            except ImportError as exc:
                raise LoadError(
                    "this artifact was compiled for Neuron (backend: neuron) but torch_neuronx cannot be "
                    "imported here; serve it on an Inf2 host with the Neuron runtime"
                ) from exc
            copies = visible_neuron_cores()
            place = _placement(torch_neuronx)
            log.info(
                "loading the model on %d NeuronCores (%s): a copy of each of its %d buckets per core, %s",
                copies,
                _cores_source(),
                len(manifest.buckets),
                "each placed on its core with torch_neuronx.experimental.neuron_cores_context"
                if place is not None
                else "in the Neuron runtime's default placement (each load on the least used core: "
                "this torch_neuronx has no experimental.neuron_cores_context)",
            )
        # copy -> bucket -> module. Bucket by bucket, its copies one after another: under the
        # default placement (least used core first) a bucket's copies then land on distinct cores.
        self._copies: list[dict[Bucket, Any]] = [{} for _ in range(copies)]
        for bucket in manifest.buckets:
            for core, modules in enumerate(self._copies):
                with place(core) if place is not None else contextlib.nullcontext():
                    modules[bucket] = self._load(directory, bucket)
        self._dtypes = [getattr(torch, sig.dtype) for sig in manifest.inputs]
        self._pads = [sig.pad_value for sig in manifest.inputs]
        self.bucket_seconds: dict[Bucket, float] = {}
        # The copies in rotation not executing now, in the order they were freed (handed out in
        # turn). One execution per copy at a time (a NeuronCore, or the CPU threads, runs one
        # batch), whichever thread calls; a caller waits on ``_changed`` for a free copy.
        self._free: list[int] = list(range(copies))
        self._changed = threading.Condition()
        self._strikes = [0] * copies  # failures in a row on batches another copy ran
        self._out: set[int] = set()  # taken out of rotation
        self._held: set[int] = set()  # executing a batch now (a copy just taken out may still be)
        # Of each copy out: its cool-off now, and when (self._clock) it may run a re-test batch.
        self._cool_off = [RETEST_FIRST_SECONDS] * copies
        self._retest_at = [0.0] * copies
        self._back_at: list[float | None] = [None] * copies  # when a re-test last put each back
        self._retesting: set[int] = set()  # copies out whose re-test batch has no outcome yet

    @staticmethod
    def _load(directory: Path, bucket: Bucket) -> Any:
        try:
            with warnings.catch_warnings():
                # torch marks TorchScript deprecated, but it is the format torch-neuronx emits.
                warnings.simplefilter("ignore", DeprecationWarning)
                module = torch.jit.load(str(directory / bucket.file_name), map_location="cpu")  # type: ignore[no-untyped-call]
        except (RuntimeError, ValueError, OSError) as exc:
            raise LoadError(f"cannot load {bucket.file_name}: {exc}") from exc
        return module.eval()

    def warm(self, repeats: int = 3, min_seconds: float = 0.3, max_repeats: int = 20) -> dict[str, float]:
        """Run every bucket on every copy (the first run allocates and, on Neuron, loads the NEFF
        on that copy's core), then time it.

        Returns the first runs' seconds per bucket file (summed over the copies); the fastest later
        run becomes the bucket's cost, which the batcher uses to pick the most efficient batch. Each
        bucket is timed ``repeats`` times, and more (up to ``max_repeats``) until ``min_seconds``
        were spent on it: the minimum of enough runs is what the batcher can trust to within a few
        percent. Warm-up runs one batch at a time, so a timed run has its core to itself.
        """
        timings = {}
        for bucket in self.manifest.buckets:
            arrays = [np.full((bucket.batch, bucket.sequence), 1 if p == 0 else p, dtype=np.int64) for p in self._pads]
            first = 0.0
            for modules in self._copies:
                first += self._timed_warm_run(bucket, arrays, functools.partial(self._execute_on, modules))
            runs: list[float] = []
            while len(runs) < repeats or (repeats and sum(runs) < min_seconds and len(runs) < max_repeats):
                runs.append(self._timed_warm_run(bucket, arrays, self.execute))
            timings[bucket.file_name] = first
            self.bucket_seconds[bucket] = min(runs) if runs else first / len(self._copies)
        return timings

    @staticmethod
    def _timed_warm_run(
        bucket: Bucket,
        arrays: list[npt.NDArray[np.int64]],
        execute: Callable[[Bucket, Sequence[npt.NDArray[Any]]], npt.NDArray[np.float32]],
    ) -> float:
        start = time.perf_counter()
        try:
            execute(bucket, arrays)
        except RuntimeError as exc:
            raise LoadError(f"warming bucket (batch {bucket.batch}, sequence {bucket.sequence}) failed: {exc}") from exc
        return time.perf_counter() - start

    def cost(self, rows: int, sequence: int) -> float | None:
        """Measured seconds of the bucket that would run (rows, sequence); None if unknown or none fits."""
        bucket = self.manifest.bucket_for(rows, sequence)
        return self.bucket_seconds.get(bucket) if bucket is not None else None

    @property
    def parallel(self) -> int:
        """Batches that can execute at once now: one per copy of the model in rotation."""
        with self._changed:
            return len(self._copies) - len(self._out)

    @property
    def copies_out(self) -> list[int]:
        """The copies (NeuronCores, relative to the visible ones) taken out of rotation."""
        with self._changed:
            return sorted(self._out)

    def execute(
        self, bucket: Bucket, arrays: Sequence[npt.NDArray[Any]], busy: BusyClock | None = None
    ) -> npt.NDArray[np.float32]:
        """Run one bucket on inputs already padded to its exact shape, on a free copy of the model;
        if it fails there, on each other copy in rotation in turn until one runs it (see the
        module's docstring). ``busy`` is told when each copy starts and stops running it: the time
        spent waiting for a free copy is not the device's."""
        failed: dict[int, Exception] = {}  # the copies that failed this batch, and how
        while True:
            with self._copy(besides=frozenset(failed), busy=busy) as index:
                if index is None:
                    # Every copy in rotation failed it (a CPU artifact has one): the input's or the
                    # device's, so no copy is blamed; the last failure is raised. A copy out that
                    # failed it as its re-test proved nothing either way: the next batch re-tests it.
                    self._retest_unsettled(failed)
                    raise list(failed.values())[-1]
                try:
                    result = self._execute_on(self._copies[index], bucket, arrays)
                except Exception as exc:
                    failed[index] = exc
                    continue
                self._struck(index, None)
            # A later copy ran it: the input was sound, and each copy that failed it is struck (a
            # copy out that failed its re-test stays out, its cool-off doubled).
            for copy, error in failed.items():
                self._struck(copy, error)
            return result

    def _struck(self, index: int, error: Exception | None) -> None:
        """Count a failure of copy ``index`` on a batch another copy ran (or, None, end its run on a
        success); take it out of rotation at COPY_OUT_AFTER, unless it is the last one in. A copy
        out on its re-test batch: a success puts it back in rotation, a failure doubles its cool-off."""
        with self._changed:
            retest = index in self._retesting
            self._retesting.discard(index)
            if error is None:
                self._strikes[index] = 0
                if not retest:
                    return
                self._out.discard(index)  # the caller's block gives it back to the free copies
                self._back_at[index] = self._clock()
                self._changed.notify_all()  # a retry waiting for a copy besides those failed has one more
                left = len(self._copies) - len(self._out)
            elif retest:
                self._cool_off[index] = min(2 * self._cool_off[index], RETEST_MAX_SECONDS)
                self._retest_at[index] = self._clock() + self._cool_off[index]
                cool_off = self._cool_off[index]
            else:
                self._strikes[index] += 1
                if self._strikes[index] < COPY_OUT_AFTER or index in self._out:
                    return
                if len(self._copies) - len(self._out) <= 1:
                    return
                self._out.add(index)
                now = self._clock()
                back_at = self._back_at[index]
                flapping = back_at is not None and now - back_at < FLAPPING_WITHIN_SECONDS
                self._cool_off[index] = (
                    min(2 * self._cool_off[index], RETEST_MAX_SECONDS) if flapping else RETEST_FIRST_SECONDS
                )
                self._retest_at[index] = now + self._cool_off[index]
                cool_off = self._cool_off[index]
                with contextlib.suppress(ValueError):
                    self._free.remove(index)
                self._changed.notify_all()  # a retry waiting for a copy besides the last other one stops waiting
                left = len(self._copies) - len(self._out)
        if error is None:
            log.warning(
                "NeuronCore copy %d ran its re-test batch: back in rotation; serving on %d of %d copies",
                index,
                left,
                len(self._copies),
            )
        elif retest:
            log.warning(
                "NeuronCore copy %d failed its re-test batch, which another copy then ran (%s): stays out of "
                "rotation, next re-test in %g s",
                index,
                _last_line(error),
                cool_off,
            )
        else:
            log.error(
                "NeuronCore copy %d failed %d batches in a row that another copy then ran (%s): out of rotation, "
                "re-tested with one batch in %g s; serving on %d of %d copies",
                index,
                COPY_OUT_AFTER,
                _last_line(error),
                cool_off,
                left,
                len(self._copies),
            )

    def _retest_unsettled(self, failed: Mapping[int, Exception]) -> None:
        """The re-tests among the copies that failed a batch no copy ran end without an outcome:
        each such copy stays out, due again at once, its cool-off as it was."""
        with self._changed:
            self._retesting.difference_update(failed)

    def _execute_on(
        self, modules: dict[Bucket, Any], bucket: Bucket, arrays: Sequence[npt.NDArray[Any]]
    ) -> npt.NDArray[np.float32]:
        tensors = [torch.from_numpy(np.ascontiguousarray(a)).to(dt) for a, dt in zip(arrays, self._dtypes, strict=True)]
        with torch.inference_mode():
            out = modules[bucket](*tensors)
        result: npt.NDArray[np.float32] = out.float().numpy()
        return result

    @contextlib.contextmanager
    def _copy(self, besides: frozenset[int] = frozenset(), busy: BusyClock | None = None) -> Iterator[int | None]:
        """A free copy in rotation (not one of ``besides``), held until the block ends (waits for
        one if all are executing); the longest free first, so that copies are handed out in turn.
        Without ``besides`` (a new batch), a copy out due its re-test comes first. None if no copy
        in rotation is left besides those (never without ``besides``: the last copy is never out).
        ``busy`` is told when the copy is taken and when it is given back."""
        with self._changed:
            while True:
                # A new batch (not a retry) runs first on a copy out that is due its re-test.
                index = None if besides else self._due_retest()
                if index is not None:
                    break
                if choices := [i for i in self._free if i not in besides]:
                    index = choices[0]
                    self._free.remove(index)
                    break
                if not set(range(len(self._copies))) - self._out - besides:
                    break
                self._changed.wait()
            if index is not None:
                self._held.add(index)
        if index is None:
            yield None
            return
        start = time.monotonic()
        if busy is not None:
            busy.started(start)
        try:
            yield index
        finally:
            # Its end before the copy is free: the next batch on it starts no earlier.
            if busy is not None:
                busy.finished(start, time.monotonic())
            with self._changed:
                self._held.discard(index)
                if index not in self._out:
                    self._free.append(index)
                self._changed.notify_all()

    def _due_retest(self) -> int | None:
        """A copy out whose cool-off has passed, now marked as on its re-test (call with
        ``_changed`` held); None if none is. Not one still executing a batch (taken out while it
        was), nor one whose re-test has no outcome yet: one re-test batch per copy at a time."""
        if not self._out:
            return None
        now = self._clock()
        for index in sorted(self._out):
            if index not in self._held and index not in self._retesting and self._retest_at[index] <= now:
                self._retesting.add(index)
                return index
        return None

    def run(
        self, requests: Sequence[Sequence[npt.NDArray[Any]]], busy: BusyClock | None = None
    ) -> tuple[list[npt.NDArray[np.float32]], Bucket]:
        """Pad several requests (each: one [rows, seq] array per input) into one bucket and run it.

        Returns each request's output rows, in order, and the bucket used. ``busy`` is told when
        each copy that runs it starts and stops (see ``execute``).
        """
        rows = sum(arrays[0].shape[0] for arrays in requests)
        seq = max(arrays[0].shape[1] for arrays in requests)
        bucket = self.manifest.bucket_for(rows, seq)
        if bucket is None:
            raise ValueError(f"no compiled bucket holds batch {rows} x sequence {seq}")
        padded = []
        for index, pad in enumerate(self._pads):
            batch = np.full((bucket.batch, bucket.sequence), pad, dtype=np.int64)
            row = 0
            for arrays in requests:
                a = arrays[index]
                batch[row : row + a.shape[0], : a.shape[1]] = a
                row += a.shape[0]
            padded.append(batch)
        out = self.execute(bucket, padded, busy)
        results = []
        row = 0
        for arrays in requests:
            n = arrays[0].shape[0]
            results.append(out[row : row + n])
            row += n
        return results, bucket
