"""The closed set of reasons the operator gives, in conditions and in Events (pure).

One enum, so a condition's ``reason``, an Event's ``reason`` and the table in
docs/troubleshooting.md cannot drift apart: a test checks that the document lists every member.
Members are CamelCase words, as Kubernetes reasons are; the value is what goes on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal


class Reason(StrEnum):
    """Every reason the operator writes (conditions) or posts (Events)."""

    # Ready and Available (Ready also carries the Compiled reasons that block the spec, NoInstanceTypeFits
    # and InvalidSpec)
    REPLICAS_READY = "ReplicasReady"
    SCALED_TO_ZERO = "ScaledToZero"
    AWAITING_ARTIFACT = "AwaitingArtifact"
    ROLLING_OUT = "RollingOut"
    REPLICAS_NOT_READY = "ReplicasNotReady"
    # Compiled (with NoInstanceTypeFits: a spec no instance type holds is not compiled)
    COMPILING = "Compiling"
    ARTIFACT_READY = "ArtifactReady"
    COMPILE_FAILED = "CompileFailed"
    ARTIFACT_MISSING = "ArtifactMissing"
    ARTIFACT_GONE = "ArtifactGone"
    SOURCE_UNREADABLE = "SourceUnreadable"
    STORE_UNAVAILABLE = "StoreUnavailable"
    # Compiled and Degraded (the compile Job's account is missing, or its CPU limit is below its
    # request); Scheduled and Degraded (the serving pods' account is missing, or their CPU limit is)
    SERVICE_ACCOUNT_MISSING = "ServiceAccountMissing"
    CPU_LIMIT_BELOW_REQUEST = "CPULimitBelowRequest"
    # Scheduled and Degraded (a LimitRange of the namespace refuses the serving pods); Compiled and
    # Degraded (it refuses the compile Job's pod, as its FailedCreate Event says)
    LIMIT_RANGE_REFUSED = "LimitRangeRefused"
    # Scheduled
    ALL_PODS_SCHEDULED = "AllPodsScheduled"
    NO_PODS_WANTED = "NoPodsWanted"
    PODS_NOT_CREATED = "PodsNotCreated"
    SCHEDULING = "Scheduling"
    UNSCHEDULABLE = "Unschedulable"
    NOT_SCHEDULED = "NotScheduled"
    NO_INSTANCE_TYPE_FITS = "NoInstanceTypeFits"
    # ScalingActive
    MANUAL_SCALING = "ManualScaling"
    METRICS_READ = "MetricsRead"
    METRICS_UNAVAILABLE = "MetricsUnavailable"
    PROMETHEUS_URL_NOT_ALLOWED = "PrometheusUrlNotAllowed"
    PROMETHEUS_QUERY_NOT_ALLOWED = "PrometheusQueryNotAllowed"
    # WarmPoolReady
    NO_WARM_POOL = "NoWarmPool"
    WARM_POOL_FULL = "WarmPoolFull"
    WARM_POOL_FILLING = "WarmPoolFilling"
    # Degraded (with NoInstanceTypeFits, CompileFailed, ArtifactMissing, ArtifactGone, SourceUnreadable,
    # NotScheduled)
    AS_EXPECTED = "AsExpected"
    ERR_IMAGE_PULL = "ErrImagePull"
    IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
    INVALID_IMAGE_NAME = "InvalidImageName"
    CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
    CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
    ROLLOUT_STALLED = "RolloutStalled"
    PRIORITY_CLASS_MISSING = "PriorityClassMissing"
    # ... and Compiled, for the compile Job's pod
    POD_CREATION_REFUSED = "PodCreationRefused"
    CORRUPT_ANNOTATION = "CorruptAnnotation"
    INVALID_SPEC = "InvalidSpec"
    RECONCILE_ERROR = "ReconcileError"
    # Events about what the operator did
    CREATED_POD = "CreatedPod"
    PROMOTED = "Promoted"
    DEMOTED = "Demoted"
    DRAINING = "Draining"
    DELETED_POD = "DeletedPod"
    CREATED_PLACEHOLDER = "CreatedPlaceholder"
    DELETED_PLACEHOLDER = "DeletedPlaceholder"
    COMPILE_STARTED = "CompileStarted"
    COMPILE_SUCCEEDED = "CompileSucceeded"
    COMPILE_SUPERSEDED = "CompileSuperseded"
    SCALED = "Scaled"
    REPLICAS_IGNORED = "ReplicasIgnored"
    RECONCILE_FAILED = "ReconcileFailed"
    RECOVERED = "Recovered"
    METRICS_RECOVERED = "MetricsRecovered"
    METRICS_QUERY_REFUSED = "MetricsQueryRefused"


#: Container waiting reasons that mean a pod will not start by itself (each is a Degraded reason).
STUCK_WAITING_REASONS: frozenset[Reason] = frozenset(
    {
        Reason.ERR_IMAGE_PULL,
        Reason.IMAGE_PULL_BACK_OFF,
        Reason.INVALID_IMAGE_NAME,
        Reason.CREATE_CONTAINER_CONFIG_ERROR,
        Reason.CRASH_LOOP_BACK_OFF,
    }
)


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event the operator posts about an InferenceDeployment."""

    type: Literal["Normal", "Warning"]
    reason: Reason
    message: str


@dataclass(frozen=True)
class Refusal:
    """The API server refused to create a pod (admission), or would (the plan makes none): why, with
    the setting to change where it is known (:mod:`neuronfleet.planning.admission`). Here, not with
    the status, so that the compile decision can carry one (the status module builds on it)."""

    reason: Literal[
        Reason.PRIORITY_CLASS_MISSING,
        Reason.POD_CREATION_REFUSED,
        Reason.SERVICE_ACCOUNT_MISSING,
        Reason.CPU_LIMIT_BELOW_REQUEST,
        Reason.LIMIT_RANGE_REFUSED,
    ]
    message: str
