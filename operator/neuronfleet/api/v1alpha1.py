"""InferenceDeployment v1alpha1: spec and status as pydantic models.

Every field carries a description (it becomes ``kubectl explain`` text) and, where a user can
rely on one, a default. Cross-field rules are CEL expressions attached to the model that owns
the fields; the generated CRD carries them as ``x-kubernetes-validations``, and
``neuronfleet validate`` evaluates the same expressions offline.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel

from neuronfleet.api.default_queries import FORMER_DEFAULTS, ONE_DEPLOYMENT, current_default, default_queries

GROUP = "serving.neuronfleet.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "InferenceDeployment"
PLURAL = "inferencedeployments"
SINGULAR = "inferencedeployment"
SHORT_NAMES = ["infdep", "idep"]
CATEGORIES = ["all", "neuronfleet"]

DEFAULT_IMAGE = "ghcr.io/neuronfleet/neuronserve:0.1.0"
INSTANCE_TYPE_NAMES = ("inf2.xlarge", "inf2.8xlarge", "inf2.24xlarge", "inf2.48xlarge")
InstanceTypeName = Literal["inf2.xlarge", "inf2.8xlarge", "inf2.24xlarge", "inf2.48xlarge"]

#: spec.runtime.drainDelaySeconds' default, the drain delay the operator passed before it was a field.
DEFAULT_DRAIN_DELAY_SECONDS = 5
#: The model server is given the pod's grace period less this, so that it exits before the kubelet's
#: SIGKILL (kube.builders passes it; the drain delay's rule counts with it).
SHUTDOWN_MARGIN_SECONDS = 5

#: HBM one NeuronCore-v2 addresses: an Inferentia2 chip has 32 GiB of HBM and 2 NeuronCores
#: (Neuron docs ``inferentia2.html``, see shared FACTS.md); planning.catalog holds the per-chip figures.
HBM_GIB_PER_NEURONCORE = 16
#: Most NeuronCores one replica can request: a pod runs on one node, and inf2.48xlarge, the largest
#: Inf2 type, has 24 (12 chips). planning.catalog's table must agree (a test checks it).
MAX_NEURONCORES_PER_REPLICA = 24

#: Kubernetes quantity strings that are not negative, e.g. "2", "500m", "4Gi", "1e9": apimachinery's
#: grammar (a number, then a binary SI suffix, a decimal SI suffix or a decimal exponent). Group 1
#: is the number, group 2 the suffix; planning reads quantities with this same pattern.
QUANTITY_MAX_LENGTH = 32
#: An S3 bucket and what may follow it: not '//' (the key would start with '/', which the operator
#: and the compile Job once read differently; both now strip it, for objects stored with one).
_S3_URI = r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/([^/].*)?)?"
#: What spec.model.source accepts (the CRD's rule), and what is said of anything else.
MODEL_SOURCE_PATTERN = rf"^({_S3_URI}|/.+|file:///.+)$"
MODEL_SOURCE_MESSAGE = (
    "source must be s3://bucket/prefix, an absolute path or a file:// URI on the compile host (other schemes, "
    "such as https://, are not read; nor '//' after the bucket)"
)
#: What spec.compile.artifactStore accepts (the CRD's rule), and what is said of anything else.
ARTIFACT_STORE_PATTERN = rf"^({_S3_URI}|/.+)$"
ARTIFACT_STORE_MESSAGE = (
    "artifactStore must be s3://bucket/prefix or an absolute directory path (not '//' after the bucket)"
)
#: What the operator itself reads: also '//' after the bucket, which objects stored before the CRD
#: refused it may hold (read at the keys without the leading '/', as the compile Job reads them).
_STORED_S3_URI = r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?"
STORED_MODEL_SOURCE_PATTERN = rf"^({_STORED_S3_URI}|/.+|file:///.+)$"
STORED_ARTIFACT_STORE_PATTERN = rf"^({_STORED_S3_URI}|/.+)$"
QUANTITY_PATTERN = r"^\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][-+]?[0-9]{1,2})?$"
#: apimachinery's dns1123LabelFmt and dns1123SubdomainFmt, as its messages quote them; the sandbox API
#: server checks object names with the same formats.
DNS1123_LABEL_FORMAT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FORMAT = DNS1123_LABEL_FORMAT + r"(\." + DNS1123_LABEL_FORMAT + ")*"
DNS1123_LABEL_MAX_LENGTH = 63
DNS1123_SUBDOMAIN_MAX_LENGTH = 253
#: A ServiceAccount's name: a DNS-1123 subdomain, as the API server checks a pod's serviceAccountName.
SERVICE_ACCOUNT_NAME_PATTERN = f"^{DNS1123_SUBDOMAIN_FORMAT}$"
SERVICE_ACCOUNT_NAME_MAX_LENGTH = DNS1123_SUBDOMAIN_MAX_LENGTH


#: Kubernetes' label rules (apimachinery util/validation), which the API server applies to a pod's node
#: affinity (the nodeSelector entries and zones become matchExpressions) and tolerations: a value the CRD
#: took there made every pod create fail. Written without backslashes, which a CEL string would read as
#: escapes. IsValidLabelValue: at most 63 characters, empty or alphanumeric at both ends, '-', '_', '.'
#: between.
LABEL_VALUE_PATTERN = "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_VALUE_MAX_LENGTH = DNS1123_LABEL_MAX_LENGTH
#: IsQualifiedName (a label key, a toleration key): an optional prefix, a DNS-1123 subdomain, and '/',
#: then a name of at most 63 characters, alphanumeric at both ends with '-', '_', '.' between.
QUALIFIED_NAME_PATTERN = (
    "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
#: ... whose prefix is at most 253 characters (IsDNS1123Subdomain's bound).
QUALIFIED_PREFIX_PATTERN = "^([^/]{1,253}/)?[^/]*$"
QUALIFIED_NAME_MAX_LENGTH = DNS1123_SUBDOMAIN_MAX_LENGTH + 1 + DNS1123_LABEL_MAX_LENGTH


def qualified_name_rule(value: str) -> str:
    """CEL: ``value`` (a string expression) is a Kubernetes qualified name."""
    return f"{value}.matches('{QUALIFIED_NAME_PATTERN}') && {value}.matches('{QUALIFIED_PREFIX_PATTERN}')"


QUALIFIED_NAME_WORDS = (
    "an optional DNS subdomain prefix (lowercase, at most 253 characters) and '/', then a name of at most "
    "63 characters: letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
)
LABEL_VALUE_WORDS = (
    "empty, or at most 63 characters: letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
)
#: An image reference has no whitespace (the kubelet cannot pull one with it: InvalidImageName; the API
#: server refuses only leading and trailing whitespace), nor any character outside printable ASCII.
IMAGE_PATTERN = "^[!-~]+$"
#: Longer than any registry, repository, tag and digest together (a repository name is at most 255
#: characters); bounding it keeps the API server's cost estimate of the rule above small.
IMAGE_MAX_LENGTH = 1024
#: What a TorchScript input may be named (a Python identifier: forward()'s argument), and what is said of others.
INPUT_NAME_PATTERN = "^[A-Za-z_][A-Za-z0-9_]*$"
INPUT_NAME_MESSAGE = (
    "an input name must be a Python identifier (letters, digits and '_', not starting with a digit), as "
    "forward() names its arguments: the compile Job passes the inputs as name:dtype,... on its command line"
)
IMAGE_MESSAGE = "image must be an image reference (e.g. ghcr.io/acme/neuronserve:0.2.0), without whitespace"


def cel(rule: str, message: str, field_path: str | None = None) -> dict[str, str]:
    """One ``x-kubernetes-validations`` entry."""
    entry = {"rule": rule, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    return entry


def rules(*entries: dict[str, str]) -> dict[str, Any]:
    """The ``json_schema_extra`` that attaches CEL rules to a model's schema."""
    return {"x-kubernetes-validations": list(entries)}


def cpu_limit_rule(request: str, guard: str = "") -> str:
    """CEL: ``cpuLimit`` at least the CPU request ``request``, where both are written alike (both plain
    numbers, or both whole millicores), the forms standard CEL can compare: its quantity() library is
    not in every Kubernetes the chart supports (1.28). The operator checks every other form, and a
    limit below a computed request (planning.admission)."""
    plain, millis = "'^[0-9]+([.][0-9]*)?$'", "'^[1-9][0-9]*m$'"
    limit = "self.cpuLimit"
    return (
        f"!has(self.cpuLimit){guard} || ("
        f"{request}.matches({plain}) && {limit}.matches({plain}) ? double({limit}) >= double({request}) : "
        f"{request}.matches({millis}) && {limit}.matches({millis}) ? "
        f"size({limit}) > size({request}) || (size({limit}) == size({request}) && {limit} >= {request}) : true)"
    )


#: The message of :func:`cpu_limit_rule`.
CPU_LIMIT_MESSAGE = "cpuLimit must be at least cpu: the API server refuses a pod whose CPU limit is below its request"


class ApiModel(BaseModel):
    """Base of every API object: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The object as it is written to the Kubernetes API (camelCase, no nulls)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class StatusModel(ApiModel):
    """Base of the status sections: unknown fields are ignored, not refused. The status one operator
    writes is read by another: after a rollback (``helm rollback`` keeps the CRDs), an older one meets
    the fields a newer one added (coldStart.<phase>.lastSampleTime), and refused, a whole section
    (the carried cold-start figures) was dropped. The spec still refuses them: there one is a typo."""

    model_config = ConfigDict(extra="ignore")


# --------------------------------------------------------------------------------------------- model


class TensorSpec(ApiModel):
    """One input tensor of the model's signature: token ids or a mask, [batch, sequence]."""

    model_config = ConfigDict(
        json_schema_extra=rules(
            cel(
                "self.shape == [-1, -1]",
                "shape must be [-1, -1]: the runtime serves [batch, sequence] tensors whose sizes "
                "batchBuckets and sequenceBuckets fix",
                ".shape",
            ),
        )
    )

    # The compile Job passes the inputs as one --inputs name:dtype,... argument: a ',' or ':' in a name
    # split it into other inputs. A Python identifier is what forward() can name an argument anyway.
    name: str = Field(
        min_length=1,
        max_length=128,
        description="Input name as the model's forward() takes it: a Python identifier (letters, digits and "
        "'_', not starting with a digit), e.g. input_ids.",
        json_schema_extra=rules(cel(f"self.matches('{INPUT_NAME_PATTERN}')", INPUT_NAME_MESSAGE)),
    )
    # The runtime's wire types (KServe v2 INT64, INT32): a float input would be refused on every request.
    dtype: Literal["int64", "int32"] = Field(default="int64", description="Element type of the tensor.")
    shape: list[int] = Field(
        default_factory=lambda: [-1, -1],
        min_length=1,
        max_length=8,
        description="[-1, -1]: batch, then sequence, both varying per request and padded to the compiled "
        "buckets (batchBuckets, sequenceBuckets). The only shape the runtime serves.",
    )


def _default_inputs() -> list[TensorSpec]:
    return [TensorSpec(name="input_ids"), TensorSpec(name="attention_mask")]


class ModelSpec(ApiModel):
    """The model to serve: where it comes from, its input signature and its compiled shapes."""

    model_config = ConfigDict(
        json_schema_extra=rules(
            cel(
                "self.format == 'torchscript' || (self.inputs.map(i, i.name) == ['input_ids', 'attention_mask'] "
                "&& self.inputs.all(i, i.dtype == 'int64'))",
                "inputs are for torchscript sources: a huggingface source is compiled and served with "
                "input_ids and attention_mask (int64) from its tokenizer; leave inputs out",
                ".inputs",
            ),
            cel(
                f"!has(self.hbmGiB) || self.hbmGiB <= double(self.neuronCoresPerReplica * {HBM_GIB_PER_NEURONCORE})",
                f"hbmGiB exceeds what neuronCoresPerReplica cores address: each NeuronCore-v2 has "
                f"{HBM_GIB_PER_NEURONCORE} GiB of its chip's 32 GiB HBM; request more cores (at most "
                f"{MAX_NEURONCORES_PER_REPLICA}, {MAX_NEURONCORES_PER_REPLICA * HBM_GIB_PER_NEURONCORE} GiB)",
                ".hbmGiB",
            ),
        )
    )

    name: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$",
        description="Name the model is served under (KServe v2 /v2/models/{name}). "
        "Defaults to the InferenceDeployment's name.",
    )
    # A CEL rule with a message, not a schema pattern: the API server answers a pattern with the bare
    # regular expression ("should match '^(s3://...'"), where the rule's message says what is accepted.
    source: str = Field(
        min_length=1,
        max_length=1024,
        description="Where the uncompiled model is: s3://bucket/prefix, or an absolute path / "
        "file:// URI on the compile host (a TorchScript file or a Hugging Face-style directory).",
        json_schema_extra=rules(cel(f"self.matches('{MODEL_SOURCE_PATTERN}')", MODEL_SOURCE_MESSAGE)),
    )

    @field_validator("source")
    @classmethod
    def _source_form(cls, value: str) -> str:
        # The operator's own check of an object written around the CRD (the rule above is the API server's);
        # it takes a '//' after the bucket, which objects stored before the rule refused it may hold.
        if not re.match(STORED_MODEL_SOURCE_PATTERN, value):
            raise ValueError(MODEL_SOURCE_MESSAGE)
        return value

    format: Literal["huggingface", "torchscript"] = Field(
        default="huggingface", description="How the source is stored."
    )
    inputs: list[TensorSpec] = Field(
        default_factory=_default_inputs,
        min_length=1,
        max_length=16,
        description="The input signature of a torchscript source. Defaults to a BERT-style encoder "
        "(input_ids, attention_mask), which is what a huggingface source always takes.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    batch_buckets: list[Annotated[int, Field(ge=1, le=1024)]] = Field(
        default_factory=lambda: [1, 4, 8, 16],
        min_length=1,
        max_length=16,
        description="Batch sizes compiled ahead of time. Neuron graphs have fixed shapes: the server "
        "pads each batch to the nearest bucket.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    sequence_buckets: list[Annotated[int, Field(ge=1, le=32768)]] = Field(
        default_factory=lambda: [128],
        min_length=1,
        max_length=16,
        description="Sequence lengths compiled ahead of time; longer requests are refused with 400.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    neuron_cores_per_replica: int = Field(
        default=2,
        ge=1,
        le=MAX_NEURONCORES_PER_REPLICA,
        description=f"NeuronCores each replica requests (aws.amazon.com/neuroncore), 1 to "
        f"{MAX_NEURONCORES_PER_REPLICA}: a replica runs on one node, and inf2.48xlarge, the largest Inf2 "
        "type, has 24 (12 Inferentia2 chips of 2 NeuronCores and 32 GiB HBM each). Any count in that "
        "range is schedulable, not only powers of two: Inf2 chips form a ring, on which the Neuron "
        "scheduler extension allocates any number of contiguous cores (it is needed when a replica "
        "takes more than one core but not a whole node). 12 is a whole inf2.24xlarge and 24 a whole "
        "inf2.48xlarge; a count that does not divide a node's cores leaves the rest idle. The model "
        "server is data-parallel over its cores: it loads one copy of the compiled model (every bucket) "
        "on each NeuronCore and runs as many batches at once, so more cores give a replica more "
        f"throughput, not room for a bigger model: one copy must fit one core's {HBM_GIB_PER_NEURONCORE} "
        "GiB share of HBM. Tensor parallelism (one model sharded over cores, as transformers-neuronx or "
        "NxD do) is not supported. (Not yet verified on Inf2 hardware.) Where deployments of other "
        "sizes share nodes, prefer a power of two or a whole node: Karpenter does not see the "
        "extension's choices, and a fragmented ring can leave a pod pending on a node it counts as "
        "having room (neuronfleet validate warns).",
    )
    hbm_gib: float | None = Field(
        alias="hbmGiB",
        default=None,
        gt=0,
        le=MAX_NEURONCORES_PER_REPLICA * HBM_GIB_PER_NEURONCORE,
        description=f"Device memory (HBM) the compiled model needs per replica, in GiB; at most "
        f"{HBM_GIB_PER_NEURONCORE} per requested NeuronCore (each has half of its chip's 32 GiB), so "
        f"{MAX_NEURONCORES_PER_REPLICA * HBM_GIB_PER_NEURONCORE} with {MAX_NEURONCORES_PER_REPLICA} cores. "
        "The model server loads one copy of the model per NeuronCore, so this is the cores times one "
        "copy's need. Used to check placement; unset means it fits the requested cores.",
    )


# ------------------------------------------------------------------------------------------- compile


class CompileSpec(ApiModel):
    """How the model is compiled ahead of time for Neuron (torch-neuronx / neuronx-cc)."""

    model_config = ConfigDict(json_schema_extra=rules(cel(cpu_limit_rule("self.cpu"), CPU_LIMIT_MESSAGE)))

    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=IMAGE_MAX_LENGTH,
        json_schema_extra=rules(cel(f"self.matches('{IMAGE_PATTERN}')", IMAGE_MESSAGE)),
        description="Image that runs `neuronserve compile`. Default: the operator's model-server image "
        "(neuronfleet run --model-server-image; the chart's operator.modelServerImage), which platform "
        "teams set once for every deployment.",
    )
    target_family: Literal["inf2"] = Field(
        default="inf2", description="neuronx-cc --target: the chip family compiled for."
    )
    auto_cast: Literal["none", "matmult", "all"] = Field(
        default="matmult", description="neuronx-cc --auto-cast: which operations are cast."
    )
    auto_cast_type: Literal["bf16", "fp16", "tf32", "fp8_e4m3"] = Field(
        default="bf16", description="neuronx-cc --auto-cast-type."
    )
    opt_level: int = Field(default=2, ge=1, le=3, description="neuronx-cc -O level.")
    extra_args: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="Further neuronx-cc flags, e.g. --enable-fast-loading-neuron-binaries.",
    )
    # A CEL rule with a message rather than a pattern, as spec.model.source.
    artifact_store: str | None = Field(
        default=None,
        max_length=1024,
        description="Where compiled artifacts are kept (s3://bucket/prefix or a directory). "
        "Defaults to the operator's configured store.",
        json_schema_extra=rules(cel(f"self.matches('{ARTIFACT_STORE_PATTERN}')", ARTIFACT_STORE_MESSAGE)),
    )

    @field_validator("artifact_store")
    @classmethod
    def _store_form(cls, value: str | None) -> str | None:
        # As the source: a value stored before the CRD refused '//' after the bucket is still read.
        if value is not None and not re.match(STORED_ARTIFACT_STORE_PATTERN, value):
            raise ValueError(ARTIFACT_STORE_MESSAGE)
        return value

    timeout_seconds: int = Field(default=3600, ge=60, le=86400, description="Deadline of one compile Job.")
    backoff_limit: int = Field(default=2, ge=0, le=10, description="Retries of a failed compile Job.")
    cpu: str = Field(
        default="2",
        pattern=QUANTITY_PATTERN,
        max_length=QUANTITY_MAX_LENGTH,
        description="CPU request of the compile Job (neuronx-cc is CPU-bound; large LLMs want 16+).",
    )
    memory: str = Field(
        default="8Gi",
        pattern=QUANTITY_PATTERN,
        max_length=QUANTITY_MAX_LENGTH,
        description="Memory request and limit of the compile Job (BERT-class models need a few GiB, 7B LLMs "
        "64Gi+); a compile that needs more is OOM-killed and reported so.",
    )
    cpu_limit: str | None = Field(
        default=None,
        pattern=QUANTITY_PATTERN,
        max_length=QUANTITY_MAX_LENGTH,
        description="CPU limit of the compile Job, at least compile.cpu (the API server refuses a request above "
        "its limit; no Job is started then: Compiled False, CPULimitBelowRequest). Unset: none, so that "
        "neuronx-cc may use an idle node's spare cores. Set it where a "
        "ResourceQuota caps limits.cpu (it refuses pods without a limit: Compiled False, PodCreationRefused) or a "
        "LimitRange would give the pod a default limit below compile.cpu (the pod would be invalid: Compiled "
        "False, LimitRangeRefused).",
    )
    ephemeral_storage: str | None = Field(
        default=None,
        pattern=QUANTITY_PATTERN,
        max_length=QUANTITY_MAX_LENGTH,
        description="Local disk (ephemeral-storage) the compile Job requests and is limited to: the downloaded "
        "model source, the compiler's working files and the compiled artifact before its upload, all in its "
        "/tmp. Unset: a request of 8Gi and a limit of 64Gi. BERT-class models need a few GiB; a 7B LLM 100Gi "
        "(its source and every bucket's compiled graph, weights included). A compile that outgrows the limit "
        "is evicted and reported as failed; one that outgrows the request may be evicted when its node runs "
        "short of disk.",
    )
    service_account_name: str | None = Field(
        default=None,
        pattern=SERVICE_ACCOUNT_NAME_PATTERN,
        max_length=SERVICE_ACCOUNT_NAME_MAX_LENGTH,
        description="ServiceAccount the compile Job runs as, in this namespace. Give it (IRSA or EKS Pod "
        "Identity) the role that writes the artifact store: s3:PutObject and s3:DeleteObject on the store "
        "prefix, and reading the model source; the serving pods' account should only read the store. Default: "
        "the operator's (neuronfleet run --compile-service-account; the chart's "
        "workloads.compileServiceAccount), else the namespace's default ServiceAccount. It must exist: a Job "
        "naming a missing account creates no pod (Compiled False, ServiceAccountMissing). In the operator's own "
        "namespace it must not be the operator's account, whose IAM role the Job would get (InvalidSpec). "
        "Changing it runs a failed compile again.",
    )


# ------------------------------------------------------------------------------------------- runtime


class EnvVar(ApiModel):
    """An environment variable for the model-server container."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Variable name.")
    value: str = Field(default="", description="Variable value.")


class RuntimeSpec(ApiModel):
    """The model server (neuronserve) each replica runs."""

    model_config = ConfigDict(
        json_schema_extra=rules(
            cel(
                "self.maxQueue >= 1",
                "maxQueue must be at least 1: the queue is bounded, overload is answered with 429",
            ),
            cel(cpu_limit_rule("self.cpu", " || !has(self.cpu)"), CPU_LIMIT_MESSAGE),
            # The server caps the delay at a third of its grace period (the pod's less 5 s): a longer
            # one would be cut short without a word. Up to 5 s (the former fixed value, the default)
            # passes at any grace period, so that no stored object becomes invalid.
            cel(
                f"self.drainDelaySeconds <= {DEFAULT_DRAIN_DELAY_SECONDS} || "
                f"3 * self.drainDelaySeconds <= self.terminationGracePeriodSeconds - {SHUTDOWN_MARGIN_SECONDS}",
                f"drainDelaySeconds above {DEFAULT_DRAIN_DELAY_SECONDS} needs terminationGracePeriodSeconds of at "
                f"least 3 times it plus {SHUTDOWN_MARGIN_SECONDS}: the model server takes at most a third of its "
                f"grace period (the pod's less {SHUTDOWN_MARGIN_SECONDS} s) for the drain delay, the rest being "
                "for the requests it accepted",
                ".drainDelaySeconds",
            ),
        )
    )

    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=IMAGE_MAX_LENGTH,
        json_schema_extra=rules(cel(f"self.matches('{IMAGE_PATTERN}')", IMAGE_MESSAGE)),
        description="Image of the model server (a Neuron build on Inf2). Default: the operator's model-server "
        "image (neuronfleet run --model-server-image; the chart's operator.modelServerImage).",
    )
    port: int = Field(
        default=8080,
        ge=1024,
        le=65535,
        description="HTTP port of the model server (KServe v2 REST and /metrics), named http. The Service the "
        "operator makes gets it as its port when it is made, and keeps that port: changing this replaces the "
        "pods, warm first, and the Service's targetPort (the name http) follows them while its clients keep "
        "the port they use. To move the Service's port too, delete the Service once the pods have moved: the "
        "operator makes it again with this port.",
    )
    max_batch_delay_ms: float = Field(
        default=5.0,
        ge=0,
        le=1000,
        description="How long the dynamic batcher waits to fill a batch, counted from the arrival of its "
        "first request (as Triton's max_queue_delay): a request that already waited this long for a busy "
        "NeuronCore runs as soon as one is free, with whatever requests are queued.",
    )
    max_queue: int = Field(
        default=256,
        le=100000,
        description="Bound of the request queue per replica; requests beyond it get 429 with Retry-After.",
    )
    cpu: str | None = Field(
        default=None,
        pattern=QUANTITY_PATTERN,
        max_length=QUANTITY_MAX_LENGTH,
        description="CPU request per replica (quantity). Defaults to the replica's share of the instance.",
    )
    memory: str | None = Field(
        default=None,
        pattern=QUANTITY_PATTERN,
        max_length=QUANTITY_MAX_LENGTH,
        description="Memory request per replica (quantity). Defaults to the replica's share of the instance.",
    )
    cpu_limit: str | None = Field(
        default=None,
        pattern=QUANTITY_PATTERN,
        max_length=QUANTITY_MAX_LENGTH,
        description="CPU limit per replica and node placeholder, at least the CPU request (runtime.cpu, else "
        "the replica's share of the node: neuronfleet plan shows it); the API server refuses a request above "
        "its limit, so no pod is created then (Degraded, CPULimitBelowRequest). Unset: none (throttling a "
        "batching server only adds latency). Set it where a ResourceQuota "
        "caps limits.cpu (it refuses pods without a limit) or a LimitRange would give the pods a default limit "
        "below their request (they would be refused: Degraded, LimitRangeRefused).",
    )
    ephemeral_storage: str | None = Field(
        default=None,
        pattern=QUANTITY_PATTERN,
        max_length=QUANTITY_MAX_LENGTH,
        description="Local disk (ephemeral-storage) each replica and node placeholder requests and is limited "
        "to: the replica's artifact cache (the compiled artifact, downloaded at start and kept), its /tmp and "
        "its logs. At least the artifact's size (aws s3 ls --recursive --summarize on status.artifact.uri) plus "
        "1Gi. Unset: a request of 2Gi (a BERT-class artifact) and a limit as large as the model "
        "can be: the device memory it needs (hbmGiB, else 16Gi per NeuronCore) plus 1Gi. A replica whose disk "
        "outgrows the limit is evicted; one that outgrows the request may be evicted when its node runs short "
        "of disk. Changing it replaces the pods, warm first.",
    )
    # The CRD's minimum, 15, leaves the accepted work 6.7 s, not the 0.67 s that 5 (the former
    # minimum) gave: the server gets the value less 5 s, a third of that at most for the drain delay.
    # The model still reads values from 5: an object stored under the former minimum keeps being
    # served (refused here, it would be InvalidSpec, its scaling stopped, after an upgrade).
    termination_grace_period_seconds: int = Field(
        default=60,
        ge=5,
        le=3600,
        json_schema_extra={"minimum": 15},
        description="Seconds a replica gets from SIGTERM (its pod deleted: a drained pod after a scale-down "
        "or a rollout, a deletion, an eviction) to the kubelet's SIGKILL. The model server is given this "
        "less 5 s, its margin to hand over the last answers and exit before the kill. Of that, it keeps "
        "serving new requests for drainDelaySeconds (a third at most), while the pod's removal from the "
        "Service endpoints reaches kube-proxy and load balancers; then it refuses new requests (503) and "
        "finishes the ones it accepted in the rest: with the default delay, this less 10 s from 20 up, two "
        "thirds of this less 5 s below (6.7 s at the minimum, 15). Raise it for requests that take longer, "
        "and with drainDelaySeconds (at least 3 times it plus 5).",
    )
    drain_delay_seconds: int = Field(
        default=DEFAULT_DRAIN_DELAY_SECONDS,
        ge=0,
        le=300,
        description="Seconds a replica keeps serving new requests once it leaves the Service: the time its "
        "removal from the Service's endpoints takes to reach whatever sends it requests. The operator waits "
        "this long between taking a pod it scales down or replaces out of the Service and deleting it, and the "
        "model server, on SIGTERM (that deletion, an eviction by a node drain or Karpenter), reports not ready "
        "at once but serves new requests this long more before it refuses them (503) and, once the requests "
        "it accepted are answered, exits (an idle one at once; new connections are then refused). The "
        "default, 5 s, covers kube-proxy. Behind a load balancer that sends to the pods' IPs (the AWS Load "
        "Balancer Controller with target-type ip, for an ALB or an NLB) it is not enough: the load balancer "
        "keeps sending new requests until the controller has deregistered the pod's IP from the target group "
        "and the load balancer has taken the change, tens of seconds: set it above that lag (what AWS's EKS "
        "best-practices guide asks of a preStop sleep), e.g. 30 to 60, and raise terminationGracePeriodSeconds "
        "to at least 3 times it plus 5 (the server takes at most a third of its grace period for the delay; a "
        "value of 5 or less is cut to that third below a grace period of 20). "
        "Changing it replaces the pods, warm first.",
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=64,
        description="Extra environment variables.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    service_account_name: str | None = Field(
        default=None,
        pattern=SERVICE_ACCOUNT_NAME_PATTERN,
        max_length=SERVICE_ACCOUNT_NAME_MAX_LENGTH,
        description="ServiceAccount the serving pods run as, in this namespace. Give it (IRSA or EKS Pod "
        "Identity) a read-only role on the artifact store (s3:GetObject, and s3:ListBucket limited to the store "
        "prefix): a serving pod never writes there. Default: the operator's (neuronfleet run "
        "--serving-service-account; the chart's workloads.servingServiceAccount), else the namespace's default "
        "ServiceAccount. Node placeholders run as it too (they run the image, sleeping). The pods mount no "
        "Kubernetes API token either way (IRSA and Pod Identity inject their own AWS token). It must exist: the "
        "API server refuses pods naming a missing account (Degraded, ServiceAccountMissing). In the operator's "
        "own namespace it must not be the operator's account, whose IAM role the pods would get (InvalidSpec). "
        "Changing it replaces the pods, warm first.",
    )


# ----------------------------------------------------------------------------------------- placement


#: Bounds of the placement lists and map: far above any real use, they keep the API server's estimated
#: cost of the CEL rules over every item within its budget (an unbounded list is estimated at what a
#: request could hold, and a CRD over budget is refused).
MAX_NODE_SELECTOR_LABELS = 64
MAX_ZONES = 64
MAX_TOLERATIONS = 64


class Toleration(ApiModel):
    """A pod toleration (core/v1 Toleration)."""

    # The API server's own checks of a pod's tolerations (core/v1 validation), so that a spec the
    # pods could never be created from is refused when it is applied, not at every pod create.
    model_config = ConfigDict(
        json_schema_extra=rules(
            cel(
                "(has(self.key) && self.key != '') || self.operator == 'Exists'",
                "operator must be Exists when key is empty (a toleration of every taint)",
                ".operator",
            ),
            cel(
                "self.operator != 'Exists' || !has(self.value) || self.value == ''",
                "value must be empty when operator is Exists",
                ".value",
            ),
            cel(
                "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                "effect must be NoExecute when tolerationSeconds is set",
                ".tolerationSeconds",
            ),
            # ValidateTolerations: a key is a label key (IsQualifiedName), an Equal value a label value.
            cel(
                f"!has(self.key) || self.key == '' || ({qualified_name_rule('self.key')})",
                f"key must be a taint key, which is a label key: {QUALIFIED_NAME_WORDS}",
                ".key",
            ),
            cel(
                f"!has(self.value) || self.operator == 'Exists' || self.value.matches('{LABEL_VALUE_PATTERN}')",
                f"value must be a taint value, which is a label value: {LABEL_VALUE_WORDS}",
                ".value",
            ),
        )
    )

    key: str | None = Field(
        default=None, max_length=QUALIFIED_NAME_MAX_LENGTH, description="Taint key the toleration applies to."
    )
    operator: Literal["Exists", "Equal"] = Field(default="Equal", description="Exists or Equal.")
    value: str | None = Field(
        default=None, max_length=LABEL_VALUE_MAX_LENGTH, description="Taint value for operator Equal."
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; empty matches all effects."
    )
    toleration_seconds: int | None = Field(default=None, description="For NoExecute: how long the pod stays bound.")


class PlacementSpec(ApiModel):
    """Where replicas may run: Inf2 instance types, node groups, zones and the scheduler."""

    instance_types: list[InstanceTypeName] = Field(
        default_factory=lambda: list(INSTANCE_TYPE_NAMES),  # type: ignore[arg-type]
        min_length=1,
        description="Inf2 instance types the replicas may use. The operator picks the one whose nodes cost "
        "least for the pods it keeps, all replica-sized: active replicas, warm pods and node placeholders "
        "(status.placement says why), and keeps it while a move would save little.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    # The entries join the operator's own instance type (and zones) in one node affinity term, which the
    # API server checks as label keys and values: a key the operator sets too could never match both.
    node_selector: dict[str, Annotated[str, Field(max_length=LABEL_VALUE_MAX_LENGTH)]] = Field(
        default_factory=dict,
        max_length=MAX_NODE_SELECTOR_LABELS,
        description="Extra node labels replicas require, e.g. a node group: karpenter.sh/nodepool: inf2. Not the "
        "instance type (node.kubernetes.io/instance-type, beta.kubernetes.io/instance-type): the operator "
        "picks it among instanceTypes; nor the zone (topology.kubernetes.io/zone, "
        "failure-domain.beta.kubernetes.io/zone): use zones.",
        json_schema_extra=rules(
            cel(
                "!('node.kubernetes.io/instance-type' in self) && !('beta.kubernetes.io/instance-type' in self)",
                "nodeSelector must not name the instance type: the operator picks it among "
                "spec.placement.instanceTypes and requires its node.kubernetes.io/instance-type beside these "
                "labels, so a pick other than this one could never be scheduled; list the types you allow "
                "in spec.placement.instanceTypes",
            ),
            cel(
                "!('topology.kubernetes.io/zone' in self) && !('failure-domain.beta.kubernetes.io/zone' in self)",
                "nodeSelector must not name the zone: list the zones replicas may use in spec.placement.zones "
                "(the operator spreads the replicas over them)",
            ),
            cel(
                f"self.all(k, {qualified_name_rule('k')})",
                f"nodeSelector keys must be label keys: {QUALIFIED_NAME_WORDS}",
            ),
            cel(
                f"self.all(k, self[k].matches('{LABEL_VALUE_PATTERN}'))",
                f"nodeSelector values must be label values: {LABEL_VALUE_WORDS}",
            ),
        ),
    )
    zones: list[Annotated[str, Field(max_length=LABEL_VALUE_MAX_LENGTH)]] = Field(
        default_factory=list,
        max_length=MAX_ZONES,
        description="Availability zones replicas may use (topology.kubernetes.io/zone), one per item; empty means any.",
        json_schema_extra={
            "x-kubernetes-list-type": "set",
            **rules(
                cel(
                    f"self.all(z, z != '' && z.matches('{LABEL_VALUE_PATTERN}'))",
                    "zones must be zone names as nodes carry them in topology.kubernetes.io/zone (e.g. us-east-1a), "
                    "one a list item: at most 63 letters, digits, '-', '_' and '.', starting and ending with a "
                    "letter or digit",
                ),
            ),
        },
    )
    zone_spread_max_skew: int = Field(
        default=1,
        ge=1,
        le=100,
        description="maxSkew of the zone topology spread constraint (ScheduleAnyway) across zones.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=MAX_TOLERATIONS,
        description="Tolerations added to the pods, beyond aws.amazon.com/neuron which is always tolerated.",
    )
    scheduler_name: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="Scheduler of the Neuron scheduler extension (the Neuron Helm chart names it "
        "my-scheduler); needed for contiguous allocation of more than one core. Unset: the operator's "
        "configured default.",
    )


# ------------------------------------------------------------------------------------------- scaling


class ScalingPolicy(ApiModel):
    """One rate limit on scaling, as in HPA behavior: at most `value` pods or percent per period."""

    type: Literal["Pods", "Percent"] = Field(
        description="Pods: an absolute count; Percent: of the replicas at the period's start, a scale-up "
        "limit rounded up and a scale-down floor rounded down, as HPA (10% of 8 replicas lets one go)."
    )
    value: int = Field(ge=1, le=10000, description="How many pods (or percent) may be added or removed per period.")
    period_seconds: int = Field(
        ge=1,
        le=1800,
        description="Window the limit applies over: it counts from the replicas at the window's start "
        "(the current count less what was added within it, plus what was removed, as HPA).",
    )


StabilizationWindowSeconds = Annotated[
    int,
    Field(
        ge=0,
        le=3600,
        description="Recommendations within this window are considered: scale-up takes their minimum, "
        "scale-down their maximum, so a short dip or spike does not flap the fleet.",
    ),
]
ScalingPolicies = Annotated[
    list[ScalingPolicy],
    Field(min_length=1, max_length=10, description="Rate limits; `selectPolicy` chooses among them."),
]


class ScalingRules(ApiModel):
    """Behavior in one direction (as HPA's HPAScalingRules); a field left out takes its direction's default."""

    stabilization_window_seconds: StabilizationWindowSeconds
    select_policy: Literal["Max", "Min", "Disabled"] = Field(
        default="Max",
        description="Which policy wins when several apply; Disabled turns scaling in this direction off "
        "(panic mode included).",
    )
    policies: ScalingPolicies


class ScaleUpRules(ScalingRules):
    """Scale-up behavior; HPA v2's defaults: no stabilization, at most max(4 pods, 100%) per 15 s."""

    stabilization_window_seconds: StabilizationWindowSeconds = 0
    policies: ScalingPolicies = Field(
        default_factory=lambda: [
            ScalingPolicy(type="Pods", value=4, period_seconds=15),
            ScalingPolicy(type="Percent", value=100, period_seconds=15),
        ]
    )


class ScaleDownRules(ScalingRules):
    """Scale-down behavior; HPA v2's defaults: 300 s stabilization, at most 100% per 15 s."""

    stabilization_window_seconds: StabilizationWindowSeconds = 300
    policies: ScalingPolicies = Field(
        default_factory=lambda: [ScalingPolicy(type="Percent", value=100, period_seconds=15)]
    )


class ScalingBehavior(ApiModel):
    """Scale-up and scale-down behavior; the defaults are Kubernetes HPA v2's."""

    scale_up: ScaleUpRules = Field(
        default_factory=ScaleUpRules,
        description="Scale-up rules. Default: no stabilization; at most max(4 pods, 100%) per 15 s.",
    )
    scale_down: ScaleDownRules = Field(
        default_factory=ScaleDownRules,
        description="Scale-down rules. Default: 300 s stabilization; at most 100% per 15 s.",
    )


#: The default queries (the same building blocks give the operator's fleet-wide form of them).
_DEFAULT_QUERIES = default_queries(ONE_DEPLOYMENT)


class MetricQueries(ApiModel):
    """PromQL the autoscaler reads. `$namespace` and `$name` are replaced by the resource's. A query
    equal to an earlier release's default (which the API server stored when the object was made) is
    read as today's default."""

    prometheus_url: str | None = Field(
        default=None,
        pattern=r"^https?://.+",
        description=(
            "Prometheus to query; defaults to the operator's configured URL. It is asked without the "
            "operator's Prometheus credentials, and only if the operator's allow-list "
            "(--prometheus-allowed-url) includes it: otherwise ScalingActive says PrometheusUrlNotAllowed "
            "and the autoscaler holds."
        ),
    )
    queue_depth: str = Field(
        default=_DEFAULT_QUERIES["queue_depth"],
        description="Total requests waiting in the ready replicas' queues. Empty: turned off (not "
        "missing: the fleet still scales down; the busy ratio alone then keeps a saturated fleet out of the "
        "service-rate measurement, and bursts shorter than the arrival rate's window go unseen).",
    )
    in_flight: str = Field(
        default=_DEFAULT_QUERIES["in_flight"],
        description="Total requests the ready replicas are executing (accepted and not answered, less those "
        "queued). Empty: turned off (not missing; until the service rate is measured there is then no "
        "queued-plus-in-flight signal).",
    )
    arrival_rate: str = Field(
        default=_DEFAULT_QUERIES["arrival_rate"],
        description="Requests per second arriving at the deployment: the autoscaler's primary signal once "
        "a replica's service rate is measured (then a snapshot without it lets the fleet grow, never "
        "shrink). rate() needs two samples in its window, so the window must cover at least about 4 "
        "scrape intervals: [1m] fits a 15 s scrape (the chart's PodMonitor); use [2m] for 30 s, [4m] for 60 s. "
        "Empty: turned off (not missing): no service rate is measured or used (one learned before is kept "
        "unused), and the fleet is sized as before a measurement, on queued plus in-flight requests and the "
        "busy ratio (arrivalPeak is then not used either).",
    )
    arrival_peak: str = Field(
        default=_DEFAULT_QUERIES["arrival_peak"],
        description="Requests per second in the busiest second of the last minute, summed over the "
        "replicas (each replica reports its own; at a low rate, the busiest stretch of as many seconds "
        "as hold 400 requests). Empty: the autoscaler sizes for the 1-minute rate only.",
    )
    utilization: str = Field(
        default=_DEFAULT_QUERIES["utilization"],
        description="Device-busy ratio (0..1) averaged over the ready active replicas (one still loading "
        "reports 0 and would dilute it). To use neuron-monitor instead: avg(neuroncore_utilization_ratio{...}); "
        "the default queries need a `pod` label on the series (the chart's PodMonitor adds it). An override "
        "must answer one number (aggregate it: avg(...)): an answer of several series (one per pod) or above "
        "1.5 (a sum of ratios) is refused, the signal is missing and the status names this field; one between "
        "1 and 1.5 (a rate of busy-time counters overshoots) reads as 1. Empty: "
        "turned off (not missing): no service rate is measured, and the fleet is sized on queued plus "
        "in-flight requests.",
    )
    reporting: str = Field(
        default=_DEFAULT_QUERIES["reporting"],
        description="How many ready active pods the samples come from. Fewer than the pods the operator "
        "counts ready means some pods' scrapes failed and every sum reads low: the autoscaler then may "
        "grow the fleet but not shrink it, and says so. Empty: no such check.",
    )
    sample_time: str = Field(
        default=_DEFAULT_QUERIES["sample_time"],
        description="When the newest sample of the replicas was scraped (Unix seconds): an instant query "
        "answers samples up to 5 minutes old (Prometheus' lookback, e.g. after its restart) stamped with "
        "the query's time, so staleAfterSeconds is measured from this. An answer of several series reads as "
        "the newest of them. Empty: from the query's time.",
    )
    stale_after_seconds: int = Field(
        default=60,
        ge=5,
        le=3600,
        description="Samples older than this (see sampleTime) count as missing: the autoscaler then holds, "
        "never scales down.",
    )
    timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        le=60,
        description="Deadline of one metrics read: all its queries, from when the first starts (a read also "
        "waits at most this long for one of the operator's Prometheus query threads). After a failure the "
        "operator backs off that Prometheus URL (15 s, doubling to 120 s) and reports metrics unavailable "
        "without asking.",
    )

    @field_validator(*FORMER_DEFAULTS, mode="after")
    @classmethod
    def _earlier_default_reads_as_todays(cls, query: str, info: ValidationInfo) -> str:
        # The stored text of an earlier default is no choice of the user's: read it with today's fix.
        return current_default(info.field_name or "", query)


#: The lowest targetUtilization and peakUtilization: a hundredfold headroom, far below any useful setting
#: (the simulator's grids start at 0.3).
MIN_UTILIZATION = 0.01


class ScalingSpec(ApiModel):
    """Replica bounds and the autoscaler: queue depth first, device utilization as a guardrail."""

    model_config = ConfigDict(
        json_schema_extra=rules(
            cel(
                "self.minReplicas <= self.maxReplicas",
                "minReplicas must not exceed maxReplicas",
                ".minReplicas",
            ),
            # Scaled to zero, no replica serves, so none reports the traffic that would scale it
            # back up (there is no activator buffering requests): the fleet would stay at zero.
            cel(
                "self.mode != 'Auto' || self.minReplicas >= 1",
                "minReplicas must be at least 1 in Auto mode: with no replica, no metric shows the "
                "traffic that would scale the fleet up again; to park a model use mode Manual with replicas 0 "
                "(an Auto warm pool then keeps no pods either)",
                ".minReplicas",
            ),
            cel(
                "!has(self.replicas) || self.replicas <= self.maxReplicas",
                "replicas must not exceed maxReplicas",
                ".replicas",
            ),
            cel(
                "self.mode != 'Auto' || self.maxReplicas >= 1",
                "Auto scaling needs maxReplicas of at least 1",
                ".maxReplicas",
            ),
        )
    )

    mode: Literal["Auto", "Manual"] = Field(
        default="Auto",
        description="Auto: the operator sets the active replicas from metrics within [minReplicas, maxReplicas]. "
        "Manual: `replicas` (or `kubectl scale`) sets them.",
    )
    replicas: int | None = Field(
        default=None,
        ge=0,
        le=1000,
        description="Active replicas in Manual mode (the scale subresource writes it). In Auto mode it is "
        "ignored: status.ignoredReplicas and the ScalingActive condition's message say so, and a ReplicasIgnored "
        "Event when it is set or changed. Unset in Manual mode: minReplicas runs (the ScalingActive message "
        "says so), but the scale subresource reads the unset field as 0, so `kubectl scale --current-replicas` "
        "and `kubectl get --raw .../scale` see 0: set it to use kubectl scale with a precondition.",
    )
    min_replicas: int = Field(
        default=1,
        ge=0,
        le=1000,
        description="Auto mode: the fewest active replicas the autoscaler keeps, at least 1. Manual mode: the "
        "active replicas while `replicas` is unset; a set `replicas` runs as it is, below this too.",
    )
    max_replicas: int = Field(default=10, ge=0, le=1000, description="Upper bound of active replicas.")
    target_queue_depth: float = Field(
        default=8.0,
        gt=0,
        le=10000,
        description="Queued requests per active replica beyond which a queue counts as a burst to add "
        "replicas for (bursts shorter than the 1-minute arrival rate show only as a queue). Until a "
        "replica's service rate is measured, queued plus in-flight requests per replica to aim for.",
    )
    # A floor, not just above 0: the autoscaler divides by the service rate times this, and a value such
    # as 5e-324 made that product 0 (ZeroDivisionError in every decision).
    target_utilization: float = Field(
        default=0.8,
        ge=MIN_UTILIZATION,
        le=1,
        description="Share of a replica's measured service rate (arrivals per busy device-second, the "
        "highest seen recently) that the arrival rate may use, 0.01 to 1: replicas = arrivals / (service rate x this). "
        "Until the service rate is measured, the device-busy ratio per replica to aim for.",
    )
    peak_utilization: float = Field(
        default=1.1,
        ge=MIN_UTILIZATION,
        le=2,
        description="Share of a replica's measured service rate that the busiest second of the last "
        "minute (metrics.arrivalPeak) may use, 0.01 to 2: replicas >= peak / (service rate x this), beside the "
        "1-minute rate's targetUtilization. Bursts shorter than a minute (clients acting together) need "
        "capacity the minute's average hides; above 1 because within a burst batches fill and a "
        "replica serves more than the rate measured at everyday batch sizes.",
    )
    latency_slo_ms: float | None = Field(
        default=None,
        gt=0,
        le=600000,
        description="Latency objective per request in milliseconds, for the record: the autoscaler "
        "does not scale on it, and neuronfleet simulate measures attainment against its --slo-ms "
        "(default: the profile's SLO), not this field.",
    )
    interval_seconds: int = Field(
        default=15,
        ge=1,
        le=600,
        description="How often the autoscaler evaluates, in Auto mode: this long after its last decision (the "
        "operator reconciles then if its periodic interval would come later; a reconcile up to a quarter second "
        "early decides), and at once when the clock reads before that decision (stepped back).",
    )
    tolerance: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="No change while |desired/current - 1| is within this (HPA's tolerance).",
    )
    panic_window_seconds: int = Field(
        default=6,
        ge=0,
        le=600,
        description="Window the panic test averages the demand over: when the demand of the autoscaler's "
        "decisions within it needs panicThreshold times the ready replicas on average, scale up at once "
        "(past the scale-up rate limits) and scale nothing down until it has been below for the scale-down "
        "stabilization window (at least 60 s). Decisions come every intervalSeconds, so a window no longer "
        "than that (the default 6 s against 15 s) is the latest decision alone; a longer one lets a burst "
        "that does not last it pass without panic. 0 disables panic mode.",
    )
    panic_threshold: float = Field(
        default=2.0,
        gt=1,
        le=100,
        description="Ratio of panic-window demand to ready replicas that enters panic mode.",
    )
    scale_down_delay_seconds: int = Field(
        default=1800,
        ge=0,
        le=3600,
        description="Replicas are released only once no recommendation within the scale-down delay needed "
        "them (as Knative's scale-down-delay; the longer of it and behavior.scaleDown's stabilization window "
        "applies). On Inf2 a released replica takes a cold start of minutes (node, image pull, load) to get "
        "back, and bursts recur: holding the highest recent demand costs less than serving bursts late. "
        "This is the delay in Fixed mode and the longest one in Learned mode.",
    )
    scale_down_delay_mode: Literal["Learned", "Fixed"] = Field(
        default="Learned",
        description="Learned: the delay is the shortest of 5, 10, 15 and 20 minutes and "
        "scaleDownDelaySeconds that, replayed over the deployment's last day of demand with its measured "
        "cold start, would have kept enough replicas serving for 99.9 % of the need (scaleDownDelaySeconds "
        "until the history is long enough), re-chosen every 5 minutes: a steady decline is followed, "
        "traffic that dips and rebounds is held; while the demand's trend falls, each recommendation the "
        "delay holds is lowered by half the decline since it was made (never below the maximum within "
        "behavior.scaleDown.stabilizationWindowSeconds). Minutes without a decision on the arrival rate (metrics "
        "missing, an operator restart) count as the last one for up to 30 minutes; a longer gap starts "
        "the history again. Fixed: always scaleDownDelaySeconds, holding the maximum recommendation "
        "within it.",
    )
    behavior: ScalingBehavior = Field(
        default_factory=ScalingBehavior,
        description="Stabilization windows and rate limits, as HPA v2 behavior.",
    )
    metrics: MetricQueries = Field(
        default_factory=MetricQueries,
        description="Where the signals come from. The operator asks each default query once for all "
        "deployments and this one takes its row of every query left at its default; a query overridden "
        'here is sent for this deployment alone, and one set to "" is not sent. A query holding an earlier '
        "release's default (stored when the object was made) is read as today's default.",
    )


# ----------------------------------------------------------------------------------------- warm pool


class WarmPoolSpec(ApiModel):
    """Standby capacity that hides cold starts: loaded pods outside the Service, and node placeholders."""

    model_config = ConfigDict(
        json_schema_extra=rules(
            cel(
                "self.minPods <= self.maxPods",
                "warmPool.minPods must not exceed warmPool.maxPods",
                ".minPods",
            ),
        )
    )

    mode: Literal["Off", "Fixed", "Auto"] = Field(
        default="Off",
        description="Off: no standby. Fixed: `pods` warm pods and `nodePlaceholders` placeholders. Auto: sized "
        "from measured cold starts and recent demand, within the min/max bounds; none beside a parked model "
        "(scaling.mode Manual with 0 replicas), whose status.warmPool.reason starts 'parked: Manual replicas 0'.",
    )
    pods: int = Field(default=1, ge=0, le=100, description="Fixed mode: warm pods kept loaded.")
    node_placeholders: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Fixed mode: low-priority placeholder pods that keep spare Inf2 capacity provisioned.",
    )
    min_pods: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Auto mode: fewest warm pods, but none while the model is parked (scaling.mode Manual with "
        "0 replicas).",
    )
    max_pods: int = Field(default=4, ge=0, le=100, description="Auto mode: most warm pods.")
    max_node_placeholders: int = Field(
        default=2,
        ge=0,
        le=100,
        description="Auto mode: most placeholder pods (0 keeps no spare node capacity).",
    )
    coverage: float = Field(
        default=0.95,
        ge=0.5,
        le=0.999,
        description="Auto mode: the quantile of demand increase within one cold start that standby covers.",
    )
    cold_start_target_seconds: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Auto mode: the wait a request may see when the fleet grows; standby is sized so that "
        "growth within one measured cold start beyond this target is covered.",
    )
    assumed_pod_cold_start_seconds: float = Field(
        default=300.0,
        gt=0,
        le=7200,
        description="Pod cold start (schedule, pull, load, warm-up) assumed until the operator has measured it.",
    )
    assumed_node_cold_start_seconds: float = Field(
        default=180.0,
        gt=0,
        le=7200,
        description="Node provisioning time assumed until measured.",
    )


# ------------------------------------------------------------------------------------------- rollout


class RolloutSpec(ApiModel):
    """How a new artifact revision replaces the old one."""

    strategy: Literal["WarmThenSwap"] = Field(
        default="WarmThenSwap",
        description="WarmThenSwap: start and warm pods of the new revision, move them into the Service, then "
        "drain the old ones; ready capacity never drops, and a loaded old warm pod stays standby until a new "
        "one is loaded in its place.",
    )
    max_surge: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="New-revision pods warmed at a time; 0 warms them all at once (as many as the active and "
        "warm pods wanted).",
    )
    progress_deadline_seconds: int = Field(
        default=1800,
        ge=60,
        le=86400,
        description="A rollout in which no new pod has become ready for this long (counted from the rollout's "
        "start, status.rollout.startedAt, until one has) is reported as Degraded (RolloutStalled), also when no "
        "new pod could be created at all. Each warm pod of the old revision kept as standby until new ones are "
        "loaded is released once it has been kept this long (from its serving.neuronfleet.dev/kept-since "
        "annotation).",
    )


# ---------------------------------------------------------------------------------------------- spec


class InferenceDeploymentSpec(ApiModel):
    """Desired state of an InferenceDeployment."""

    model_config = ConfigDict(
        json_schema_extra=rules(
            cel(
                "!has(self.runtime) || !has(self.scaling) || double(self.runtime.maxQueue) >= "
                "self.scaling.targetQueueDepth",
                "scaling.targetQueueDepth must not exceed runtime.maxQueue: a replica's queue never grows "
                "past maxQueue (429 beyond it), so a burst would never show as one",
                ".scaling.targetQueueDepth",
            ),
        )
    )

    model: ModelSpec = Field(description="The model to compile and serve.")
    compile: CompileSpec = Field(default_factory=CompileSpec, description="Ahead-of-time compilation.")
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec, description="The model server.")
    placement: PlacementSpec = Field(default_factory=PlacementSpec, description="Where replicas run.")
    scaling: ScalingSpec = Field(default_factory=ScalingSpec, description="Replica bounds and autoscaling.")
    warm_pool: WarmPoolSpec = Field(default_factory=WarmPoolSpec, description="Standby capacity against cold starts.")
    rollout: RolloutSpec = Field(default_factory=RolloutSpec, description="How new revisions roll out.")


# -------------------------------------------------------------------------------------------- status

ConditionType = Literal["Ready", "Available", "Compiled", "Scheduled", "ScalingActive", "WarmPoolReady", "Degraded"]


class Condition(StatusModel):
    """A kubebuilder-style condition (metav1.Condition)."""

    # A str, not ConditionType: conditions other controllers add to the object are kept as they are.
    type: str = Field(
        description="Ready (the current generation is served: wait on it for a rollout), Available (the "
        "desired active replicas are ready, whatever revision they run: watch it for capacity), Compiled, "
        "Scheduled, ScalingActive, WarmPoolReady or Degraded."
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(default="", description="One CamelCase word saying why (docs/troubleshooting.md lists them).")
    message: str = Field(default="", description="Human-readable details.")
    last_transition_time: str | None = Field(default=None, description="When the status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        default=None,
        description="The spec generation the condition was computed for (status.observedGeneration). Under "
        "InvalidSpec only Ready and Degraded carry the refused one; the others describe the fleet kept for the "
        "last valid spec and carry its generation, so a wait for Compiled or Available does not pass on a "
        "refused spec.",
    )


class ArtifactStatus(StatusModel):
    """The compiled artifact of the current revision."""

    uri: str | None = Field(default=None, description="Where the compiled artifact is stored.")
    sha256: str | None = Field(
        default=None,
        description="The sha256 of the artifact's manifest, which pins every file's. Serving pods are pinned to it "
        "($NEURONSERVE_MANIFEST_SHA256, neuronserve serve --manifest-sha256): a pod that finds another "
        "manifest at the URI refuses to start.",
    )
    revision: str | None = Field(default=None, description="Revision label: the first 10 hex digits of the cache key.")
    cache_key: str | None = Field(default=None, description="Hash of source, compiler, flags, buckets.")
    backend: Literal["neuron", "cpu"] | None = Field(
        default=None, description="neuron when torch-neuronx compiled it; cpu for a CPU TorchScript artifact."
    )
    compile_image: str | None = Field(
        default=None,
        description="The image whose compile request it answers: spec.compile.image, else the operator's "
        "model-server image. Another image compiles again.",
    )
    source_fingerprint: str | None = Field(
        default=None,
        description="Digest of the model source's listing (object names, sizes, ETags) its compile request "
        "was made with. While the source cannot be listed (deleted after the compile, or access denied), "
        "the artifact of that request keeps serving the unchanged spec.",
    )


class PlacementStatus(StatusModel):
    """The placement the operator chose."""

    instance_type: str | None = Field(default=None, description="Chosen Inf2 instance type.")
    replicas_per_node: int | None = Field(
        default=None, description="Replicas per node (warm pods and node placeholders are replica-sized too)."
    )
    nodes: int | None = Field(
        default=None,
        description="Nodes the desired pods take, packed replicasPerNode to a node: the active replicas, the "
        "warm pods and the node placeholders (status.warmPool's desiredPods and desiredPlaceholders). "
        "Placeholders are left out while the spec cannot compile (Compiled SourceUnreadable, CompileFailed, "
        "ArtifactMissing or a refused compile pod, with no earlier artifact serving, and no compile Job of the "
        "deployment running): they are held then, not created (WarmPoolReady says so). 0 when there are none. "
        "This deployment's own packing, as if its pods had the nodes to themselves: pods of other models "
        "sharing a node are not counted, so the sum over several deployments can exceed the nodes running.",
    )
    usd_per_hour: float | None = Field(
        default=None,
        description="On-demand cost of those nodes (us-east-1 prices; 0 for no node). Like nodes, the cost of "
        "this deployment's own packing: summed over deployments sharing nodes it counts a shared node twice.",
    )
    reason: str | None = Field(default=None, description="Why this instance type (the plan's explanation).")


class PhaseStats(StatusModel):
    """Rolling statistics of one cold-start phase, in seconds."""

    p50_seconds: float | None = Field(default=None, description="Median.")
    p90_seconds: float | None = Field(default=None, description="90th percentile.")
    samples: int = Field(default=0, ge=0, description="Pods measured.")
    last_sample_time: str | None = Field(
        default=None,
        description="When (RFC 3339) the newest pod measured became Ready. After an operator restart or a new "
        "leader, figures kept from here are dropped a day after this time, however many restarts follow "
        "(found without it, as an older operator wrote them: a day after the first takeover that found them).",
    )


class ColdStartStatus(StatusModel):
    """Measured cold starts, from pod conditions and timestamps."""

    instance_type: str | None = Field(default=None, description="Instance type measured on.")
    scheduling: PhaseStats = Field(default_factory=PhaseStats, description="Created to scheduled.")
    start: PhaseStats = Field(default_factory=PhaseStats, description="Scheduled to container started (pull).")
    load: PhaseStats = Field(default_factory=PhaseStats, description="Started to ready (load and warm-up).")
    pod: PhaseStats = Field(
        default_factory=PhaseStats,
        description="Created to ready; for a pod created before its node was Ready, node Ready to pod ready.",
    )
    node: PhaseStats = Field(
        default_factory=PhaseStats,
        description="Created to node Ready, for pods created before their node registered (one sample per pod).",
    )


class WarmPoolStatus(StatusModel):
    """How the warm pool was sized."""

    desired_pods: int | None = Field(default=None, description="Warm pods wanted.")
    desired_placeholders: int | None = Field(default=None, description="Node placeholders wanted.")
    reason: str | None = Field(default=None, description="The sizing inputs: cold start, demand growth, coverage.")
    held_since: str | None = Field(
        default=None,
        description="Auto mode, after the operator restarted or a new leader took over: since when (RFC 3339) "
        "the warm pool it found is held above what its own demand history wants. A later takeover holds it "
        "until the same end, one history length (an hour by default) after this time; absent when the "
        "history alone sizes the pool.",
    )


#: The most scale events the status keeps (the oldest beyond it summed into one): one a decision over
#: the longest policy period the API allows (1,800 s) at the default interval (15 s), a few kilobytes.
MAX_STATUS_SCALE_EVENTS = 120


class ScaleEventStatus(StatusModel):
    """One change of the desired active replicas, as the rate policies count it."""

    # Frozen: a rendered status section shares its items between reconciles.
    model_config = ApiModel.model_config | ConfigDict(frozen=True)

    time: str = Field(description="When it was decided (RFC 3339, rounded up to the second).")
    replicas: int = Field(description="Replicas added (positive) or removed (negative).")


#: The most trend readings the status keeps: one a minute over the trend's 30-minute window.
MAX_STATUS_TREND_READINGS = 30
#: The highest rate-signal reading the status takes (the autoscaler caps every signal at 1e9 replicas).
MAX_STATUS_TREND_REPLICAS = 1e9


class TrendReadingStatus(StatusModel):
    """The arrival rate's signal over one minute, in replicas at the target utilization; the autoscaler's
    trend reads it over the service rate alone (the replicas the arrivals keep busy)."""

    # Frozen: a rendered status section shares its items between reconciles.
    model_config = ApiModel.model_config | ConfigDict(frozen=True)

    time: str = Field(description="The mean time of the minute's readings (RFC 3339, to the second).")
    replicas: float = Field(
        ge=0,
        le=MAX_STATUS_TREND_REPLICAS,
        allow_inf_nan=False,
        description="The mean of the minute's readings: the arrival rate over what a replica serves at the "
        "target utilization (spec.scaling.targetUtilization when the checkpoint was taken: a changed target renews "
        "the checkpoint at the next decision; a restarted operator reads it at the spec's target then).",
    )


class AutoscalerStatus(StatusModel):
    """What the autoscaler has learned, renewed every 5 minutes while it measures traffic, and at each
    scale event and panic start or end; a restarted operator resumes from it instead of learning
    again, and stays bound by the rate policies and panic mode as the one before it was."""

    checkpoint_time: str | None = Field(default=None, description="When this was taken (RFC 3339).")
    service_rate_per_replica: float | None = Field(
        default=None,
        gt=0,
        description="Requests per second one replica was measured to serve, at the batch sizes it ran (to "
        "0.1 or 4 significant digits, whichever is finer: a restarted operator resumes from it).",
    )
    service_rate_key: str | None = Field(
        default=None,
        max_length=512,
        description="What the service rate was measured on: artifact revision, instance type, NeuronCores "
        "per replica and batching. A restarted operator does not resume a rate measured on anything else "
        "(absent: resumed as it is).",
    )
    cold_start_seconds: float | None = Field(
        default=None, ge=0, description="Measured time from a scale-up to its pods serving (smoothed)."
    )
    scale_down_delay_seconds: float | None = Field(
        default=None,
        ge=0,
        description="The scale-down delay in effect: learned in Learned mode, the spec's in Fixed mode.",
    )
    history_start_minute: int | None = Field(
        default=None, ge=0, description="Unix time / 60 of the history's first minute."
    )
    history_recommendations: str | None = Field(
        default=None,
        description="Per minute since historyStartMinute, the most replicas recommended (base64 of uint16, LE).",
    )
    history_needs: str | None = Field(
        default=None,
        description="Per minute, the replicas the arrival rate needed without headroom (base64 of uint16, LE).",
    )
    scale_events: list[ScaleEventStatus] | None = Field(
        default=None,
        max_length=MAX_STATUS_SCALE_EVENTS,
        description="The changes of the desired active replicas within the longest scale-up or scale-down "
        "policy period, oldest first: a restarted operator counts them against spec.scaling.behavior's policies "
        f"(Kubernetes' HPA forgets them when it restarts). At most {MAX_STATUS_SCALE_EVENTS}: beyond that (decisions "
        "more often than every 15 s), the oldest are summed per direction: one scale-up and one scale-down, each at "
        "the time of the newest of its changes.",
    )
    trend_readings: list[TrendReadingStatus] | None = Field(
        default=None,
        max_length=MAX_STATUS_TREND_READINGS,
        description="The arrival rate's signal over the last 30 minutes as of checkpointTime, one reading a "
        "minute (the mean of that minute's), oldest first: a restarted operator resumes the demand's trend "
        "(the trend signal and, in Learned mode, the decline credit) from them instead of waiting 15 minutes "
        f"for a half-full window. At most {MAX_STATUS_TREND_READINGS}; absent when there is none (no arrival rate "
        "read at the measured service rate within the window).",
    )
    panic_since: str | None = Field(
        default=None, description="When panic mode started (RFC 3339); absent outside panic mode."
    )
    panic_last_triggered: str | None = Field(
        default=None,
        description="When the panic condition last held, as of checkpointTime (RFC 3339): a restarted "
        "operator holds the fleet from shrinking until the panic hold after it has passed.",
    )


class CompileFailureStatus(StatusModel):
    """A compile that failed: not run again as it was, also once Kubernetes has deleted its Job."""

    attempt: str = Field(description="<request key>/<job spec key> of the failed compile.")
    message: str = Field(default="", description="Why it failed (the Job's reason, the compile's last words).")


class RolloutStatus(StatusModel):
    """The rollout in progress: which revision it rolls out and since when."""

    target: str = Field(
        description="The revision rolled out to: the 8 hex digits naming its pods (<name>-<target>-<slot>), a "
        "digest of the artifact revision, its manifest sha256 and the pod template."
    )
    started_at: str = Field(
        description="When the operator first saw pods of an earlier revision or template to replace with this "
        "target (RFC 3339). The progress deadline (spec.rollout.progressDeadlineSeconds) counts from here, or "
        "from progressedAt once a pod of the target has become ready; a rollout to another target (a rollback "
        "included) starts again."
    )
    progressed_at: str | None = Field(
        default=None,
        description="When a pod of the target last became ready since startedAt (RFC 3339); absent while none "
        "has. Kept while that pod is unready or gone again: the progress it made stays made.",
    )


class LastValidSpecStatus(StatusModel):
    """The last spec the operator accepted, kept so that a restarted operator (or a new leader) can
    keep its fleet whole while a later spec is refused (InvalidSpec)."""

    generation: int | None = Field(
        default=None, description="The generation (metadata.generation) that spec was; absent when unknown."
    )
    # Kept as an object with unknown fields preserved: the CRD does not repeat the whole spec's schema
    # here; the operator parses it again (as it parses a spec) before it builds anything from it.
    spec: dict[str, Any] = Field(
        description="That spec as the operator accepted it (with its defaults filled in). Read back only while "
        "the current spec is refused, after the operator restarted: it is parsed and checked again as a spec "
        "is, and when it no longer passes, the pods found are kept but a lost one is not replaced.",
        json_schema_extra={"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    )


class InferenceDeploymentStatus(StatusModel):
    """Observed state of an InferenceDeployment, written by the operator."""

    observed_generation: int | None = Field(
        default=None,
        description="The newest spec generation the operator has read and acted on. A generation it refuses "
        "(Degraded InvalidSpec, whose message names it) counts: Ready is then False for it, while the counts, the "
        "placement and the other conditions describe the fleet of the last valid spec, which the operator keeps "
        "serving (lost pods replaced, also after a restart, from lastValidSpec, unless that spec fits no "
        "instance type or the one lastValidSpec keeps cannot be used); those conditions carry that spec's "
        "generation.",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Available, Compiled, Scheduled, ScalingActive, WarmPoolReady, Degraded.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    replicas: int = Field(default=0, ge=0, description="Active replicas (pods in the Service).")
    ready_replicas: int = Field(default=0, ge=0, description="Active replicas that are ready.")
    updated_replicas: int = Field(
        default=0,
        ge=0,
        description="Ready active replicas of the current spec's revision (its compiled artifact and pod "
        "template); 0 while that artifact is not compiled.",
    )
    warm_replicas: int = Field(
        default=0,
        ge=0,
        description=(
            "Ready warm (standby) pods of the current revision: during a rollout an older one kept as "
            "standby is not counted (it is promoted if needed, but replaced)."
        ),
    )
    draining_replicas: int = Field(
        default=0,
        ge=0,
        description="Pods out of the Service finishing their in-flight work: draining pods not deleted yet, and "
        "deleted ones within their termination grace period (their model server finishes the requests it "
        "accepted). A deleted pod past its grace period (its node gone) is not counted.",
    )
    desired_replicas: int = Field(default=0, ge=0, description="Active replicas wanted.")
    ignored_replicas: int | None = Field(
        default=None,
        ge=0,
        description="spec.scaling.replicas as set in Auto mode, where the autoscaler ignores it (a ReplicasIgnored "
        "Event says so when it is set or changed); absent when it is unset or the mode is Manual.",
    )
    placeholders: int = Field(default=0, ge=0, description="Node placeholder pods.")
    selector: str | None = Field(
        default=None,
        description="Label selector of the active pods (for the scale subresource and HPA tooling).",
    )
    # Sections are absent (not empty) when the operator has nothing to say: no artifact yet, no
    # placement ever chosen. The live metrics are in Prometheus, not here: a status write per scrape
    # would load the API server for nothing.
    artifact: ArtifactStatus | None = Field(default=None, description="The compiled artifact being served.")
    compile_failure: CompileFailureStatus | None = Field(
        default=None,
        description="The current spec's compile failed: it runs again when spec.compile changes or the "
        "serving.neuronfleet.dev/compile-retry annotation gets a new value.",
    )
    placement: PlacementStatus | None = Field(
        default=None,
        description="The chosen placement. While the spec fits no allowed instance type, the placement the "
        'pods of the last valid spec still run on (its reason starts with "kept:"); absent when none was '
        "ever chosen.",
    )
    cold_start: ColdStartStatus | None = Field(
        default=None,
        description="Measured cold-start phases on the placement's instance type (the newest 100 pods, each less "
        "than a day old). After an operator restart or a new leader, a phase keeps the figures found here (of pods "
        "that may be gone) until as many pods, at most 10, are measured again, or a day after its lastSampleTime "
        "(restarts in a row do not extend it); the Auto warm pool sizes from them.",
    )
    warm_pool: WarmPoolStatus | None = Field(default=None, description="Warm-pool sizing.")
    autoscaler: AutoscalerStatus | None = Field(
        default=None, description="What the autoscaler has learned; absent until it has measured a service rate."
    )
    rollout: RolloutStatus | None = Field(
        default=None,
        description="The rollout in progress (pods of an earlier revision or template still serve or stand by); "
        "absent when none is. Kept as it is while the spec fits no allowed instance type.",
    )
    last_valid_spec: LastValidSpecStatus | None = Field(
        default=None,
        description="The last spec the operator accepted and its generation, written when it reconciles a valid "
        "spec. While a later spec is refused (Degraded InvalidSpec), the operator keeps that spec's fleet whole "
        "(lost pods replaced, scaled as it says), also after a restart or a leader change, which read it from "
        "here; absent until a spec is accepted.",
    )
    last_scale_time: str | None = Field(
        default=None, description="When the desired active replicas (desiredReplicas) last changed (RFC 3339)."
    )
    last_scale_reason: str | None = Field(
        default=None,
        description="Why the desired active replicas (desiredReplicas) last changed: the autoscaler's decision "
        'in Auto mode (its signals, or why it holds), spec.scaling.replicas in Manual mode; "initial size: ..." '
        "for the size a new deployment started at.",
    )


class ObjectMeta(ApiModel):
    """The part of metav1.ObjectMeta the operator reads; the rest passes through."""

    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)

    name: str | None = Field(default=None, description="Name of the resource.")
    namespace: str | None = Field(default=None, description="Namespace of the resource.")
    uid: str | None = Field(default=None, description="UID set by the API server.")
    generation: int | None = Field(default=None, description="Spec generation set by the API server.")
    labels: dict[str, str] = Field(default_factory=dict, description="Labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations.")


#: Pod names are "<deployment>-<revision>-<role letter><slot>"; a label value holds at most 63 characters.
MAX_NAME_LENGTH = 42
#: The operator names a Service after the deployment, and Service names are DNS-1035 labels.
DNS_1035_LABEL = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
NAME_RULE_MESSAGE = (
    "metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter "
    "and ending with a letter or digit): the operator names a Service after it"
)


class InferenceDeployment(ApiModel):
    """A model served on AWS Inf2: compiled ahead of time, placed, autoscaled and kept warm."""

    model_config = ConfigDict(
        json_schema_extra=rules(
            # Kubernetes lets a CRD's root rules read metadata.name (and generateName), nothing else of
            # metadata. No fieldPath: it must name a field of the CRD's schema, and metadata's is not
            # there (an API server refuses the whole CRD over a fieldPath ".metadata.name").
            cel(
                f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
                f"metadata.name must be at most {MAX_NAME_LENGTH} characters: pod names and labels derive from it",
            ),
            cel(f"self.metadata.name.matches('{DNS_1035_LABEL}')", NAME_RULE_MESSAGE),
        )
    )

    api_version: Literal["serving.neuronfleet.dev/v1alpha1"] = Field(
        default="serving.neuronfleet.dev/v1alpha1", description="serving.neuronfleet.dev/v1alpha1"
    )
    kind: Literal["InferenceDeployment"] = Field(default="InferenceDeployment", description="InferenceDeployment")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Standard object metadata.")
    spec: InferenceDeploymentSpec = Field(description="Desired state.")
    status: InferenceDeploymentStatus | None = Field(default=None, description="Observed state.")

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def served_model_name(self) -> str:
        return self.spec.model.name or self.name
