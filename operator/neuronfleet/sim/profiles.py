"""Model profiles: what one replica serves, how fast, on which Inf2 node, and how long it takes to start.

Two built-in profiles (figures from shared FACTS.md, "Performance references"):

- ``bert-base``: bert-base-uncased, sequence 128, one replica per inf2.xlarge (1 chip, 2
  NeuronCores), one inference per request. Neuron performance page: batch 1: 1,998 inf/s at 1.00 ms;
  batch 4: ~2,700 inf/s, 2.95 ms; batch 8: ~2,670 inf/s, 5.97 ms; batch 16: 2,940 inf/s, 10.9 ms.
- ``llama-2-7b``: Llama-2-7B, one replica per inf2.48xlarge with TP=24 (transformers-neuronx,
  Neuron SDK 2.18): batch 8: 726 tok/s, time to first token 77 ms, 12.1 ms per output token. There
  are no official figures for smaller Inf2 sizes, so none is offered. Assumptions, stated in the
  profile: a replica runs 8 requests at once (continuous batching at the batch-8 figures); a
  request's prefill is 77 ms plus 0.05 ms per context token (about 20k prompt tokens/s, under 10%
  of the instance's BF16 peak; the published TTFT does not give its prompt length); its slot is
  busy for prefill + generated tokens x 12.1 ms. Latency is time to first token (queueing for a
  slot plus prefill): whole-response latency is mostly the response length, which no policy changes.

Cold-start phases (both, overridable): node provisioning log-normal, median 120 s (an assumption:
no published Inf2 launch-to-Ready figure; Karpenter nodes take minutes); image pull 240-360 s
(Neuron images of 15-20 GB without lazy pulling, AWS SOCI blog) paid once per node; runtime init,
artifact load and warm-up of seconds (BERT) to a minute or two (7B weights).

A profile file (YAML or JSON) has the fields of :class:`Profile`; ``neuronfleet simulate
--dump-profile NAME`` prints a built-in one to start from (e.g. to put in figures measured by the
runtime benchmark).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from neuronfleet.api.v1alpha1 import RuntimeSpec
from neuronfleet.api.validation import not_utf8_message, yaml_error_message
from neuronfleet.planning.catalog import INF2_INSTANCE_TYPES, InstanceType
from neuronfleet.planning.placement import ReplicaNeeds, plan_placement
from neuronfleet.sim.distributions import Distribution, DistributionError, parse

#: The CRD's runtime defaults (an InferenceDeployment that sets no ``runtime``): a profile that
#: names no queue bound or batch delay is simulated with them, as the operator would serve it.
CRD_RUNTIME = RuntimeSpec()


class ProfileError(ValueError):
    """A profile that cannot be used."""


#: Characters a profile name may not hold: path separators, and those Windows or macOS refuse in a
#: file name (the name is the PNGs' file name; outputs are copied to other machines).
_UNFIT_IN_FILE_NAMES = '/\\<>:"|?*'
#: The longest name in bytes (UTF-8): "<name>-latency-cdf.png" must fit a file name's 255 bytes.
MAX_NAME_BYTES = 255 - len("-latency-cdf.png")


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a profile's output files (``<name>-timeline.png`` in ``--out``), or
    None. A name with ``/`` or ``..`` wrote them outside ``--out`` (``../x``) or into a subfolder, and
    ``sub/../bert-base`` passed the duplicate-name check yet overwrote bert-base's plots."""
    unfit = sorted({c for c in name if c in _UNFIT_IN_FILE_NAMES or ord(c) < 32 or ord(c) == 127})
    if unfit:
        return f"holds {', '.join(repr(c) for c in unfit)}, unfit for a file name"
    if ".." in name:
        return "holds '..', a path's step up"
    if not name.strip():
        return "is empty"
    if len(name.encode()) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes (its plots' file names would pass 255)"
    return None


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BatchPoint(_Model):
    """Throughput and latency of one compiled batch size on one replica."""

    batch: int = Field(ge=1)
    throughput_per_s: float = Field(gt=0, description="Inferences per second at this batch size.")
    latency_ms: float = Field(gt=0, description="Time to run one batch.")


class LlmServing(_Model):
    """Token-level serving figures of an LLM replica."""

    slots: int = Field(ge=1, description="Requests a replica decodes at once (its batch).")
    ttft_ms: float = Field(ge=0, description="Prefill time of a request apart from its prompt length.")
    prefill_ms_per_token: float = Field(ge=0, description="Extra prefill time per context token.")
    decode_ms_per_token: float = Field(gt=0, description="Time per generated token at full batch.")
    default_context_tokens: float = Field(default=1024, ge=0, description="When the trace has none.")
    default_generated_tokens: float = Field(default=128, ge=0, description="When the trace has none.")


class ColdStartPhases(_Model):
    """Distributions of the cold-start phases, in seconds (see :mod:`neuronfleet.sim.distributions`)."""

    node: Any = Field(description="Node provisioning (launch to Ready with the device plugin up).")
    scheduling: Any = Field(default=2.0, description="Pod created to bound on a ready node.")
    pull: Any = Field(description="Image pull, paid once per node.")
    init: Any = Field(default={"uniform": [3, 8]}, description="Neuron runtime init.")
    load: Any = Field(description="Artifact load onto the NeuronCores.")
    warmup: Any = Field(description="Warm-up of every bucket before readiness.")

    def dist(self, phase: str) -> Distribution:
        try:
            return parse(getattr(self, phase), f"coldStart.{phase}")
        except DistributionError as error:
            raise ProfileError(str(error)) from None


@cache
def _replicas_per_node_by_cores(instance_type: str) -> dict[int, int]:
    """Replicas the operator packs on a node of ``instance_type``, by NeuronCores per replica (a
    replica's NeuronCores alone decide here: the profile's replicas have no CPU or memory needs)."""
    packed: dict[int, int] = {}
    for cores in range(1, INF2_INSTANCE_TYPES[instance_type].neuroncores + 1):
        chosen = plan_placement(ReplicaNeeds(cores), [instance_type], 1).chosen
        if chosen is not None:
            packed[cores] = chosen.replicas_per_node
    return packed


class Profile(_Model):
    """One model served on one Inf2 instance type."""

    name: str
    description: str = ""
    instance_type: str
    replicas_per_node: int = Field(
        default=1,
        ge=1,
        description="Replicas one node of instance_type holds, each on its share of the NeuronCores "
        "(at least one): a count the operator packs on that type (whole NeuronCores per replica; on "
        "inf2.24xlarge 1, 2, 3, 4, 6 or 12).",
    )
    kind: Literal["batch", "llm"]
    batches: list[BatchPoint] | None = None
    llm: LlmServing | None = None
    slo_ms: float = Field(gt=0, description="Latency target each request is measured against.")
    max_queue: int = Field(default=CRD_RUNTIME.max_queue, ge=1, description="Queue bound per replica; beyond it: 429.")
    max_batch_delay_ms: float = Field(default=CRD_RUNTIME.max_batch_delay_ms, ge=0)
    drain_seconds: float = Field(default=10.0, ge=0, description="A draining pod's node is kept this long.")
    promote_seconds: float = Field(default=2.0, ge=0, description="Warm to serving (label + endpoints).")
    cold_start: ColdStartPhases
    assumptions: list[str] = Field(default_factory=list)
    sources: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _fit_for_file_names(cls, name: str) -> str:
        problem = name_problem(name)
        if problem:
            raise ValueError(
                f"{name!r} {problem}; the name is its outputs' (simulate.json's key, <name>-timeline.png "
                "and <name>-latency-cdf.png in --out): use letters, digits, '-', '_' or '.'"
            )
        return name

    @model_validator(mode="after")
    def _consistent(self) -> Profile:
        if self.instance_type not in INF2_INSTANCE_TYPES:
            raise ValueError(f"instance_type {self.instance_type!r} is not one of {list(INF2_INSTANCE_TYPES)}")
        cores = self.instance.neuroncores
        if self.replicas_per_node > cores:
            # A replica holds at least one NeuronCore: more per node would bill several nodes' replicas as one.
            raise ValueError(
                f"replicas_per_node {self.replicas_per_node} is more than {self.instance_type}'s {cores} NeuronCores "
                f"hold (a replica holds at least one): at most {cores}, or a larger instance_type"
            )
        packed = _replicas_per_node_by_cores(self.instance_type)
        counts = sorted(set(packed.values()))
        if self.replicas_per_node not in counts:
            # The simulator bills a node per replicas_per_node replicas; the operator places replicas of
            # whole NeuronCores, so a count it never packs would cost a fleet that cannot run.
            per_node = self.replicas_per_node
            share = cores // per_node
            below = max(n for n in counts if n < per_node)
            above = min(n for n in counts if n > per_node)
            raise ValueError(
                f"replicas_per_node {per_node} cannot be packed on {self.instance_type}: a replica holds whole "
                f"NeuronCores ({share} of its {cores} here), of which the operator packs {packed[share]} a node; "
                f"the operator packs {below} or {above} replicas a node of {self.instance_type} "
                f"(any of {', '.join(map(str, counts))})"
            )
        if self.kind == "batch" and not self.batches:
            raise ValueError("a batch profile needs `batches`")
        if self.kind == "llm" and self.llm is None:
            raise ValueError("an llm profile needs `llm`")
        for phase in ("node", "scheduling", "pull", "init", "load", "warmup"):
            parse(getattr(self.cold_start, phase), f"cold_start.{phase}")
        return self

    @property
    def instance(self) -> InstanceType:
        return INF2_INSTANCE_TYPES[self.instance_type]

    @property
    def usd_per_replica_hour(self) -> float:
        return self.instance.usd_per_hour / self.replicas_per_node

    @property
    def chips_per_replica(self) -> float:
        return self.instance.chips / self.replicas_per_node

    def efficient_batches(self) -> list[BatchPoint]:
        """Batch sizes a batcher would use: each one faster than every smaller one."""
        chosen: list[BatchPoint] = []
        for point in sorted(self.batches or [], key=lambda p: p.batch):
            if not chosen or point.throughput_per_s > chosen[-1].throughput_per_s:
                chosen.append(point)
        return chosen


BERT_BASE: dict[str, Any] = {
    "name": "bert-base",
    "description": "bert-base-uncased, seq 128, one replica per inf2.xlarge, one inference per request",
    "instance_type": "inf2.xlarge",
    "replicas_per_node": 1,
    "kind": "batch",
    "batches": [
        {"batch": 1, "throughput_per_s": 1998, "latency_ms": 1.00},
        {"batch": 4, "throughput_per_s": 2700, "latency_ms": 2.95},
        {"batch": 8, "throughput_per_s": 2670, "latency_ms": 5.97},
        {"batch": 16, "throughput_per_s": 2940, "latency_ms": 10.9},
    ],
    "slo_ms": 50.0,
    "max_queue": CRD_RUNTIME.max_queue,
    "max_batch_delay_ms": CRD_RUNTIME.max_batch_delay_ms,
    "drain_seconds": 5.0,
    "cold_start": {
        "node": {"lognormal": {"median": 120, "sigma": 0.3}},
        "scheduling": 2.0,
        "pull": {"uniform": [240, 360]},
        "init": {"uniform": [3, 8]},
        "load": {"uniform": [5, 15]},
        "warmup": {"uniform": [5, 10]},
    },
    "assumptions": [
        "node provisioning median 120 s (no published Inf2 launch-to-Ready figure)",
        "load and warm-up of a BERT artifact: 10-25 s",
        "SLO 50 ms per request",
    ],
    "sources": ["AWS Neuron performance page: bert-base-uncased seq 128 on inf2.xlarge (shared FACTS.md)"],
}

LLAMA_2_7B: dict[str, Any] = {
    "name": "llama-2-7b",
    "description": "Llama-2-7B, TP=24, one replica per inf2.48xlarge, latency = time to first token",
    "instance_type": "inf2.48xlarge",
    "replicas_per_node": 1,
    "kind": "llm",
    "llm": {
        "slots": 8,
        "ttft_ms": 77.0,
        "prefill_ms_per_token": 0.05,
        "decode_ms_per_token": 12.1,
        "default_context_tokens": 1024,
        "default_generated_tokens": 128,
    },
    "slo_ms": 1000.0,
    "max_queue": CRD_RUNTIME.max_queue,
    "max_batch_delay_ms": 0.0,  # continuous batching (the slots model): no batch to wait to fill
    "drain_seconds": 30.0,
    "cold_start": {
        "node": {"lognormal": {"median": 120, "sigma": 0.3}},
        "scheduling": 2.0,
        "pull": {"uniform": [240, 360]},
        "init": {"uniform": [3, 8]},
        "load": {"uniform": [60, 120]},
        "warmup": {"uniform": [20, 40]},
    },
    "assumptions": [
        "8 requests decoded at once at the published batch-8 figures (12.1 ms/token)",
        "prefill = 77 ms + 0.05 ms per context token (published TTFT lacks its prompt length)",
        "only inf2.48xlarge: no official figures for smaller Inf2 sizes",
        "node provisioning median 120 s; weights load 60-120 s; warm-up 20-40 s",
        "SLO 1 s time to first token",
    ],
    "sources": ["transformers-neuronx Llama-2-7B on inf2.48xlarge, Neuron SDK 2.18 (shared FACTS.md)"],
}

BUILTIN: dict[str, dict[str, Any]] = {"bert-base": BERT_BASE, "llama-2-7b": LLAMA_2_7B}


def _validated(data: Any, where: str) -> Profile:
    try:
        return Profile.model_validate(data)
    except ValidationError as error:
        # A validator's own ValueError is already a sentence: pydantic's "Value error, " adds nothing.
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg'].removeprefix('Value error, ')}"
            for e in error.errors()
        )
        raise ProfileError(f"{where}: {problems}") from None
    except DistributionError as error:
        raise ProfileError(f"{where}: {error}") from None


def load_profile(name_or_path: str) -> Profile:
    """A built-in profile by name, or a YAML/JSON profile file."""
    if name_or_path in BUILTIN:
        return _validated(BUILTIN[name_or_path], name_or_path)
    path = Path(name_or_path)
    if not path.exists():
        raise ProfileError(f"{name_or_path}: neither a built-in profile ({', '.join(BUILTIN)}) nor a file")
    try:
        # UTF-8 whatever the locale, as trace and policy files are read: a gzipped or Latin-1 copy is an error.
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except UnicodeDecodeError as error:
        raise ProfileError(f"{path}: cannot read: {not_utf8_message(error)}") from None
    except (OSError, json.JSONDecodeError) as error:
        raise ProfileError(f"{path}: cannot read: {error}") from None
    except yaml.YAMLError as error:
        raise ProfileError(f"{path}: cannot read: {yaml_error_message(error)}") from None
    return _validated(data, str(path))


def dump_profile(name: str) -> str:
    """A built-in profile as YAML, to copy and edit."""
    if name not in BUILTIN:
        raise ProfileError(f"unknown built-in profile {name!r}; known: {', '.join(BUILTIN)}")
    return yaml.safe_dump(BUILTIN[name], sort_keys=False)
