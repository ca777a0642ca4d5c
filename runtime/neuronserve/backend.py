"""Runs a verified artifact: one loaded module per bucket, padding, one execution per batch.

``ModelRunner.run`` is blocking and meant for a worker thread: torch releases the GIL while it
computes, so the event loop keeps serving HTTP meanwhile. A Neuron artifact needs torch-neuronx at
load time (it registers the Neuron ops TorchScript refers to); a CPU artifact needs only torch.
"""

from __future__ import annotations

import importlib
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from neuronserve.manifest import Bucket, Manifest


class LoadError(Exception):
    """The artifact cannot be loaded or warmed on this host; the message says why."""


class ModelRunner:
    """The loaded buckets of one artifact."""

    def __init__(self, manifest: Manifest, directory: Path) -> None:
        self.manifest = manifest
        if manifest.backend == "neuron":
            try:
                importlib.import_module("torch_neuronx")
            except ImportError as exc:
                raise LoadError(
                    "this artifact was compiled for Neuron (backend: neuron) but torch_neuronx cannot be "
                    "imported here; serve it on an Inf2 host with the Neuron runtime"
                ) from exc
        self._modules: dict[Bucket, Any] = {}
        for bucket in manifest.buckets:
            try:
                with warnings.catch_warnings():
                    # torch marks TorchScript deprecated, but it is the format torch-neuronx emits.
                    warnings.simplefilter("ignore", DeprecationWarning)
                    module = torch.jit.load(str(directory / bucket.file_name), map_location="cpu")  # type: ignore[no-untyped-call]
            except (RuntimeError, ValueError, OSError) as exc:
                raise LoadError(f"cannot load {bucket.file_name}: {exc}") from exc
            self._modules[bucket] = module.eval()
        self._dtypes = [getattr(torch, sig.dtype) for sig in manifest.inputs]
        self._pads = [sig.pad_value for sig in manifest.inputs]
        self.bucket_seconds: dict[Bucket, float] = {}
        # One device, one execution at a time, whichever thread calls.
        self._lock = threading.Lock()

    def warm(self, repeats: int = 3, min_seconds: float = 0.3, max_repeats: int = 20) -> dict[str, float]:
        """Run every bucket (the first run allocates and, on Neuron, loads the NEFF), then time it.

        Returns the first run's seconds per bucket file; the fastest later run becomes the
        bucket's cost, which the batcher uses to pick the most efficient batch. Each bucket is
        timed ``repeats`` times, and more (up to ``max_repeats``) until ``min_seconds`` were spent
        on it: the minimum of enough runs is what the batcher can trust to within a few percent.
        """
        timings = {}
        for bucket in self.manifest.buckets:
            arrays = [np.full((bucket.batch, bucket.sequence), 1 if p == 0 else p, dtype=np.int64) for p in self._pads]
            runs: list[float] = []
            while len(runs) < 1 + repeats or (repeats and sum(runs[1:]) < min_seconds and len(runs) < 1 + max_repeats):
                start = time.perf_counter()
                try:
                    self.execute(bucket, arrays)
                except RuntimeError as exc:
                    raise LoadError(
                        f"warming bucket (batch {bucket.batch}, sequence {bucket.sequence}) failed: {exc}"
                    ) from exc
                runs.append(time.perf_counter() - start)
            timings[bucket.file_name] = runs[0]
            self.bucket_seconds[bucket] = min(runs[1:]) if repeats else runs[0]
        return timings

    def cost(self, rows: int, sequence: int) -> float | None:
        """Measured seconds of the bucket that would run (rows, sequence); None if unknown or none fits."""
        bucket = self.manifest.bucket_for(rows, sequence)
        return self.bucket_seconds.get(bucket) if bucket is not None else None

    def execute(self, bucket: Bucket, arrays: Sequence[npt.NDArray[Any]]) -> npt.NDArray[np.float32]:
        """Run one bucket on inputs already padded to its exact shape."""
        tensors = [torch.from_numpy(np.ascontiguousarray(a)).to(dt) for a, dt in zip(arrays, self._dtypes, strict=True)]
        with self._lock, torch.inference_mode():
            out = self._modules[bucket](*tensors)
        result: npt.NDArray[np.float32] = out.float().numpy()
        return result

    def run(self, requests: Sequence[Sequence[npt.NDArray[Any]]]) -> tuple[list[npt.NDArray[np.float32]], Bucket]:
        """Pad several requests (each: one [rows, seq] array per input) into one bucket and run it.

        Returns each request's output rows, in order, and the bucket used.
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
        out = self.execute(bucket, padded)
        results = []
        row = 0
        for arrays in requests:
            n = arrays[0].shape[0]
            results.append(out[row : row + n])
            row += n
        return results, bucket
