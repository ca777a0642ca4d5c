"""The emulated NeuronCore device: Inf2 service times from a measured profile, no computation.

``neuronserve serve --device emulated-neuroncore --profile bert-base`` runs the real server (HTTP,
dynamic batching, bounded queue, 429s, metrics, drain) in front of this device instead of a model.
Each batch occupies one emulated NeuronCore for the profile's measured latency of its batch bucket;
a replica has the profile's number of cores, so at saturation it serves the profile's throughput.
The outputs are deterministic placeholders of the right shape (every row the first unit vector):
they are NOT model outputs, and the server says so in its metadata, metrics and logs.

Timing is kept on a nominal device timeline: a batch starts when its core is free and its last
request had arrived (or, for a batch closed by the batching delay, when it was closed), and ends
one service time later. The event loop only observes the end; when it wakes late on a loaded
machine the next batch still starts at the nominal time, so the emulated capacity is the
profile's and not the host's timer jitter. A core never runs two batches at once and never starts
a batch before its requests arrived, so the capacity is never above the profile's either.

No torch or transformers here (a fleet of 10-30 such processes shares one small machine). Text
input uses the artifact's real tokenizer through the light `tokenizers` package when an artifact
with a tokenizer is given, and is refused when the artifact has none (as the real server refuses
it); without an artifact (or without the `tokenizers` package) it is tokenized by length
(whitespace words plus [CLS] and [SEP], truncated), which is all the emulated device looks at.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from neuronserve.manifest import (
    Bucket,
    CompilerFlags,
    FileEntry,
    Manifest,
    TensorSignature,
    sha256_hex,
)

DEVICE_NAME = "emulated-neuroncore"


@dataclass(frozen=True)
class BatchFigure:
    """One measured batch size: time to run one batch on one NeuronCore, and the published throughput."""

    batch: int
    latency_ms: float
    throughput_per_s: float


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    description: str
    source: str
    # Batches that run at once on one replica (the published throughput is cores x batch / latency).
    cores: int
    sequence: int
    hidden: int
    batches: tuple[BatchFigure, ...]

    def service_seconds(self, batch: int) -> float:
        """Time one core spends on a batch bucket of this size.

        A measured size gives its figure; a size between two measured ones is interpolated linearly
        (an assumption); a size beyond the largest measured one has no figure.
        """
        points = sorted(self.batches, key=lambda p: p.batch)
        for point in points:
            if point.batch == batch:
                return point.latency_ms / 1000.0
        if batch > points[-1].batch:
            raise ValueError(f"profile {self.name!r} has figures for batch sizes up to {points[-1].batch}, not {batch}")
        if batch < points[0].batch:
            return points[0].latency_ms / 1000.0
        for low, high in itertools.pairwise(points):
            if low.batch < batch < high.batch:
                share = (batch - low.batch) / (high.batch - low.batch)
                return (low.latency_ms + share * (high.latency_ms - low.latency_ms)) / 1000.0
        raise AssertionError("unreachable")

    def throughput_per_s(self, batch: int) -> float:
        """Inferences per second of a replica running only batches of this size."""
        return self.cores * batch / self.service_seconds(batch)


# Same figures as the operator's simulator profile (neuronfleet/sim/profiles.py, "bert-base"); the
# runtime keeps its own copy because it never imports the operator.
BERT_BASE = DeviceProfile(
    name="bert-base",
    description="bert-base-uncased, sequence 128, one replica per inf2.xlarge (1 Inferentia2 chip, 2 NeuronCores)",
    source=(
        "AWS Neuron performance page, bert-base-uncased seq 128 on inf2.xlarge (shared FACTS.md): "
        "batch 1: 1,998 inf/s, 1.00 ms; batch 4: ~2,700 inf/s, 2.95 ms; batch 8: ~2,670 inf/s, 5.97 ms; "
        "batch 16: 2,940 inf/s, 10.9 ms"
    ),
    cores=2,
    sequence=128,
    hidden=768,
    batches=(
        BatchFigure(1, 1.00, 1998),
        BatchFigure(4, 2.95, 2700),
        BatchFigure(8, 5.97, 2670),
        BatchFigure(16, 10.9, 2940),
    ),
)

PROFILES: dict[str, DeviceProfile] = {BERT_BASE.name: BERT_BASE}


def synthetic_manifest(profile: DeviceProfile, name: str) -> Manifest:
    """The model contract of an emulated replica started without an artifact.

    Inputs input_ids / attention_mask [batch, sequence] int64, output ``embedding`` [batch, hidden]
    float32, one bucket per measured batch size at the profile's sequence length. The listed
    files do not exist (nothing is loaded); the cache key is a digest of the profile, so every
    replica of one profile reports the same version.
    """
    profile_digest = sha256_hex(json.dumps(asdict(profile), sort_keys=True).encode())
    buckets = [Bucket(batch=p.batch, sequence=profile.sequence) for p in profile.batches]
    return Manifest(
        name=name,
        backend="neuron",
        buckets=buckets,
        inputs=[
            TensorSignature(name="input_ids", dtype="int64", shape=[-1, -1], min_value=0),
            TensorSignature(name="attention_mask", dtype="int64", shape=[-1, -1], min_value=0, max_value=1),
        ],
        outputs=[TensorSignature(name="embedding", dtype="float32", shape=[-1, profile.hidden])],
        output_description="placeholder rows from the emulated NeuronCore device: not model outputs",
        compiler=f"{DEVICE_NAME} (no compiled model)",
        torch_version="none",
        flags=CompilerFlags(),
        source_digest=profile_digest,
        source=f"emulated:{profile.name}",
        cache_key=profile_digest,
        files=[FileEntry(path=b.file_name, sha256=sha256_hex(b""), size=0) for b in buckets],
    )


def tokenize_by_length(texts: Sequence[str], max_length: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Rows of the right length without a vocabulary: [CLS] + one id per whitespace word + [SEP]."""
    lengths = [min(max_length, len(text.split()) + 2) for text in texts]
    width = max(1, *lengths)
    ids = np.zeros((len(texts), width), dtype=np.int64)
    mask = np.zeros((len(texts), width), dtype=np.int64)
    for row, length in enumerate(lengths):
        ids[row, :length] = 1
        mask[row, :length] = 1
    return ids, mask


@dataclass
class _Core:
    index: int
    free_at: float = 0.0
    busy: bool = False


@dataclass
class Reservation:
    """One batch's slot on one emulated core, on the nominal device timeline (time.monotonic)."""

    bucket: Bucket
    start: float
    end: float
    core: _Core = field(repr=False)


class EmulatedDevice:
    """A replica's emulated NeuronCores (the batcher's runner when ``--device emulated-neuroncore``).

    ``time_scale`` multiplies every service time (2.0 = half the profile's capacity), so that a
    fleet's load can be scaled down to what one machine's HTTP stack can carry.
    """

    def __init__(self, profile: DeviceProfile, manifest: Manifest, time_scale: float = 1.0) -> None:
        if time_scale <= 0:
            raise ValueError("the emulated time scale must be positive")
        self.profile = profile
        self.manifest = manifest
        self.time_scale = time_scale
        self.cores = profile.cores
        self._cores = [_Core(i) for i in range(profile.cores)]
        width = manifest.outputs[0].shape[-1]
        # Every output row: the first unit vector (cosine similarity works, nothing is computed, and
        # its JSON is short: 0.0 and 1.0 serialize far faster than 17-digit floats).
        self._row = np.zeros(width if width > 0 else profile.hidden, dtype=np.float32)
        self._row[0] = 1.0
        # Refuse at start, not per request, a bucket the profile has no figure for.
        self.bucket_seconds = {b: profile.service_seconds(b.batch) * time_scale for b in manifest.buckets}

    def describe(self) -> dict[str, Any]:
        return {
            "device": DEVICE_NAME,
            "emulated": True,
            "profile": self.profile.name,
            "profile_description": self.profile.description,
            "profile_source": self.profile.source,
            "cores": self.cores,
            "time_scale": self.time_scale,
            "outputs": "placeholders, not model outputs",
        }

    def cost(self, rows: int, sequence: int) -> float | None:
        bucket = self.manifest.bucket_for(rows, sequence)
        return self.bucket_seconds.get(bucket) if bucket is not None else None

    def reserve(self, rows: int, sequence: int, ready_at: float) -> Reservation:
        """Book the earliest-free idle core for a batch whose requests were all there at ``ready_at``."""
        bucket = self.manifest.bucket_for(rows, sequence)
        if bucket is None:
            raise ValueError(f"no compiled bucket holds batch {rows} x sequence {sequence}")
        idle = [core for core in self._cores if not core.busy]
        if not idle:
            raise RuntimeError("every emulated core is busy (the batcher runs at most one batch per core)")
        core = min(idle, key=lambda c: c.free_at)
        start = max(core.free_at, ready_at)
        end = start + self.bucket_seconds[bucket]
        core.busy, core.free_at = True, end
        return Reservation(bucket, start, end, core)

    async def execute(
        self, requests: Sequence[Sequence[npt.NDArray[Any]]], reservation: Reservation
    ) -> list[npt.NDArray[np.float32]]:
        """Wait for the reservation's end, then hand each request its placeholder rows."""
        try:
            delay = reservation.end - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        finally:
            reservation.core.busy = False
        return [np.broadcast_to(self._row, (arrays[0].shape[0], self._row.shape[0])) for arrays in requests]
