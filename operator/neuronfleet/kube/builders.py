"""Pure builders of the Kubernetes objects an InferenceDeployment owns, and their read-back.

Every function here takes typed inputs and returns plain dicts (the wire form a Kubernetes
client sends); nothing talks to a cluster. The Kubernetes adapter and the Kopf handlers call:

- :func:`pod_template_hash` -> the ``template`` of a :class:`~neuronfleet.planning.fleet.FleetTarget`;
- :func:`build_pod` / :func:`build_placeholder_pod` (or :func:`object_for_action`) for
  ``CreatePod`` / ``CreatePlaceholder`` actions, :func:`relabel_patch` for ``Relabel``;
- :func:`build_service`, :func:`build_pdb` once per deployment, :func:`build_priority_classes`
  once per cluster (the Helm chart may ship them instead: pods naming a missing PriorityClass are
  rejected at admission);
- :func:`parse_pod` to turn an observed pod object back into a ``PodView``.

Design notes (the *why* of the pod):

- Resources: ``aws.amazon.com/neuroncore`` (single NeuronCores), not ``aws.amazon.com/neuron``
  (whole chips of 2 cores). Core granularity lets 1-core models pack two per chip and lets
  like-sized multi-core replicas share a node exactly as placement computed; the Neuron docs
  advise against mixing both resources on one node, and Karpenter models both, so one kind is
  used throughout (the placeholders request the same). Extended resources need requests equal
  to limits. CPU and memory are the replica's share of the instance (placement); memory limit
  equals the request (memory is not compressible; a bounded pod gets OOM-killed alone instead of
  the node under pressure), CPU has no limit unless the spec sets one (throttling a batching server
  only adds latency; a quota on ``limits.cpu`` or a LimitRange's default limit needs one).
  Ephemeral storage has a request and a limit (:func:`serving_disk`), and the emptyDirs a
  sizeLimit: a namespace quota on it refuses pods that name none, and the artifact cache holds a
  whole compiled model. Placeholders request what a replica does, so the one that preempts one
  fits in what it held.
- Scheduling: required node affinity on ``node.kubernetes.io/instance-type`` = the chosen type,
  plus ``spec.placement.nodeSelector`` labels and zones in the same term; the
  ``aws.amazon.com/neuron:NoSchedule`` toleration (Exists) plus the spec's; a zone topology
  spread (ScheduleAnyway, so a one-zone node group still schedules) over the serving pods;
  ``schedulerName`` from the spec, else the operator's default (the Neuron scheduler extension:
  needed for contiguous allocation of more than one core).
- PriorityClass per role *at creation*: ``priorityClassName`` is immutable, so a warm pod
  promoted to active keeps the warm class. :func:`build_priority_classes` therefore gives warm
  and active the same value (a promoted pod must not be preempted for a newer active pod); the
  separate names serve quotas and visibility. Placeholders get -1: preempted by anything, yet at
  or above cluster-autoscaler's -10 cut-off so they still make it provision nodes. Compile Jobs'
  pods get 0 and never preempt: a compile that evicted a placeholder took the capacity kept for a
  serving replica.
- ServiceAccounts: serving pods and compile Jobs run as accounts of their own (spec, else the
  operator's defaults, else the namespace's ``default``), so that the role that writes the artifact
  store (compile) is not the one every serving pod holds, nor every other pod of the namespace
  running as ``default``. Placeholders run the spec's image, so they run as the serving pods'
  account (not ``default``, which may be the operator's own), with no token: under IRSA or EKS Pod
  Identity they may get the serving pods' role, which that image has in the serving pods anyway;
  a missing serving account refuses them as it does the serving pods.
- Pod Security "restricted": runAsNonRoot with a fixed non-root uid, no privilege escalation,
  all capabilities dropped, RuntimeDefault seccomp; also a read-only root filesystem with
  emptyDirs for /tmp and the artifact cache, and no service-account token (the server never
  calls the API). The Neuron device plugin passes /dev/neuron* into the container; a non-root
  uid relies on the device nodes being accessible: 0666 on the EKS Neuron AMI; where a udev rule
  makes them ``GROUP="neuron", MODE="0660"`` (AWS's Neuron security guidance), the operator's
  device group (``BuilderConfig.device_group_id``) is a supplemental group of serving pods and
  compile Jobs (placeholders only sleep), or containerd's ``device_ownership_from_security_context``
  hands the devices to the pod's uid.
- Probes: the runtime serves KServe v2 ``/v2/health/live`` (process up) and ``/v2/health/ready``
  (artifact loaded and warmed). The startup probe waits on *ready* with a long budget, so a
  model that loads for minutes is never killed by liveness; readiness gates the Service.
- Names are deterministic (see :mod:`neuronfleet.planning.labels`): a create repeated after an
  operator crash answers 409 instead of creating a duplicate; ``generateName`` could not give
  that guarantee.

The compile Job is built in :mod:`neuronfleet.kube.jobs`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from neuronfleet.api.v1alpha1 import (
    API_VERSION,
    DEFAULT_IMAGE,
    HBM_GIB_PER_NEURONCORE,
    KIND,
    SHUTDOWN_MARGIN_SECONDS,
    InferenceDeployment,
)
from neuronfleet.planning.catalog import (
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
    NEURON_TAINT_KEY,
    RESOURCE_NEURONCORE,
)
from neuronfleet.planning.fleet import (
    CreatePlaceholder,
    CreatePod,
    PodPhase,
    PodView,
    Relabel,
)
from neuronfleet.planning.labels import (
    ANNOTATION_ARTIFACT_URI,
    ANNOTATION_DRAIN_STARTED,
    ANNOTATION_KEPT_SINCE,
    ANNOTATION_MANIFEST_SHA256,
    APP_NAME,
    LABEL_APP_COMPONENT,
    LABEL_APP_INSTANCE,
    LABEL_APP_NAME,
    LABEL_DEPLOYMENT,
    LABEL_MANAGED_BY,
    LABEL_REVISION,
    LABEL_ROLE,
    LABEL_TEMPLATE_HASH,
    MANAGED_BY,
    ROLES,
    ArtifactRevision,
    FleetRevision,
    Role,
    active_selector,
    deployment_selector,
    label_value,
    service_name,
    short_hash,
)
from neuronfleet.planning.placement import DAEMONSET_HEADROOM, Candidate, Headroom
from neuronfleet.planning.status import find_condition, rfc3339
from neuronserve.manifest import MANIFEST_PIN_ENV

CONTAINER_NAME = "neuronserve"
PORT_NAME = "http"
READY_PATH = "/v2/health/ready"
LIVE_PATH = "/v2/health/live"
ARTIFACT_CACHE_DIR = "/var/cache/neuronserve"
#: sizeLimit of a replica's /tmp: the server itself writes nothing there; Python's and the Neuron
#: runtime's scratch files do.
SERVING_TMP_SIZE = "1Gi"
#: The disk a replica (and its placeholder) requests unless spec.runtime.ephemeralStorage says:
#: a BERT-class artifact (a few hundred MiB per bucket), /tmp and the logs.
DEFAULT_SERVING_DISK_REQUEST = "2Gi"


@dataclass(frozen=True)
class PriorityClassNames:
    """PriorityClass names per role (the cluster must have them: see build_priority_classes)."""

    active: str = "neuronfleet-active"
    warm: str = "neuronfleet-warm"
    placeholder: str = "neuronfleet-placeholder"
    #: The compile Jobs' pods (they have no fleet role).
    compile: str = "neuronfleet-compile"

    def for_role(self, role: Role) -> str:
        if role == "placeholder":
            return self.placeholder
        return self.warm if role == "warm" else self.active


@dataclass(frozen=True)
class BuilderConfig:
    """Operator-wide settings the builders use (from the operator's configuration), and the
    placement planner: the pods' CPU and memory requests are the shares it computes."""

    #: Scheduler of the Neuron scheduler extension when the spec names none (None: default scheduler).
    default_scheduler_name: str | None = None
    #: Host CPU and memory left on every node for its DaemonSets (neuronfleet run
    #: --daemonset-headroom-cpu/--daemonset-headroom-memory), for the placement planner
    #: (plan_for_spec and check_fits take it as ``headroom``).
    daemonset_headroom: Headroom = DAEMONSET_HEADROOM
    priority_classes: PriorityClassNames = field(default_factory=PriorityClassNames)
    #: Value of the active and warm classes; placeholders get PLACEHOLDER_PRIORITY.
    serving_priority: int = 1000
    #: How long the startup probe waits for the model to load and warm up.
    startup_budget_seconds: int = 1800
    #: The uid the images create (runtime/Dockerfile, operator/Dockerfile).
    run_as_user: int = 10001
    #: The model server's image (serving, placeholder and compile pods) where a spec names none.
    model_server_image: str = DEFAULT_IMAGE
    #: ServiceAccount of the compile Jobs where a spec names none (spec.compile.serviceAccountName);
    #: None: the namespace's default account.
    compile_service_account: str | None = None
    #: ServiceAccount of the serving pods where a spec names none (spec.runtime.serviceAccountName);
    #: None: the namespace's default account. Placeholders never take one.
    serving_service_account: str | None = None
    #: Group owning the Neuron devices on the nodes (/dev/neuron*, by a udev rule GROUP="neuron",
    #: MODE="0660"): serving pods and compile Jobs get it as a supplemental group, without which the
    #: non-root uid cannot open the devices. None: the devices are world-accessible (the EKS Neuron
    #: AMI's 0666) or the runtime hands them to the pod's user (containerd's
    #: device_ownership_from_security_context).
    device_group_id: int | None = None


#: Below cluster-autoscaler's -10 cut-off placeholders would stop triggering scale-up.
PLACEHOLDER_PRIORITY = -1
#: The compile pods': an ordinary pod's (a cluster without a globalDefault class gives 0), above the
#: placeholders but with preemptionPolicy Never, so a compile never takes the spare Inf2 capacity a
#: placeholder holds; a serving pod preempts it (the Job retries it: see kube.jobs).
COMPILE_PRIORITY = 0


# ------------------------------------------------------------------------------------ shared parts


def _namespace(dep: InferenceDeployment) -> str:
    return dep.metadata.namespace or "default"


def owner_reference(dep: InferenceDeployment) -> dict[str, Any]:
    """The controller reference that ties a child to its InferenceDeployment (GC, adoption)."""
    if not dep.metadata.uid:
        raise ValueError(f"InferenceDeployment {dep.name!r} has no metadata.uid: read it back from the API first")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": dep.name,
        "uid": dep.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def foreign_controller(live: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> str | None:
    """Who controls ``live``, when it is not the owner ``wanted`` names (None: absent or ours).

    A Service or PodDisruptionBudget of the same name made by someone else (Helm, another
    controller, a person) is not this deployment's to patch: merging our labels and selector into
    it would break what it serves, and its owner would patch it back.
    """
    if live is None:
        return None
    ours = {ref.get("uid") for ref in wanted.get("metadata", {}).get("ownerReferences", [])}
    controller = _controller(live)
    if controller is not None and controller.get("uid") in ours:
        return None
    return describe_controller(live)


def _controller(live: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = live.get("metadata", {}).get("ownerReferences") or []
    return next((ref for ref in refs if ref.get("controller")), None)


def describe_controller(live: Mapping[str, Any]) -> str:
    """Who controls ``live``, in the words of a status message."""
    controller = _controller(live)
    if controller is None:
        return "no controller (made by hand, or by a tool that sets no owner)"
    return f"{controller.get('kind', '?')} {controller.get('name', '?')}"


def held_by_previous(live: Mapping[str, Any] | None, deployment: str, uid: str | None) -> bool:
    """Whether ``live`` is controlled by an InferenceDeployment named ``deployment`` with another uid
    than ``uid``: the object of that name deleted before this one was created, whose children the
    garbage collector has not removed yet.

    A background deletion (kubectl's default) removes the owner first and its dependents after, from
    the collector's queue: an object deleted and created again at once finds them, seconds or more.
    They go without anyone's help, so they are waited for, not reported as a conflict to resolve.
    """
    controller = _controller(live) if live is not None else None
    if controller is None:
        return False
    return (
        controller.get("kind") == KIND
        and str(controller.get("apiVersion", "")).split("/")[0] == API_VERSION.split("/")[0]
        and controller.get("name") == deployment
        and controller.get("uid") != uid
    )


def _metadata(
    dep: InferenceDeployment,
    name: str,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": _namespace(dep),
        "labels": labels,
        "ownerReferences": [owner_reference(dep)],
    }
    if annotations:
        metadata["annotations"] = annotations
    return metadata


def common_labels(dep: InferenceDeployment, component: str) -> dict[str, str]:
    return {
        LABEL_APP_NAME: APP_NAME,
        LABEL_APP_INSTANCE: label_value(dep.name),
        LABEL_APP_COMPONENT: component,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_DEPLOYMENT: label_value(dep.name),
    }


def pod_labels(dep: InferenceDeployment, role: Role, template: str, artifact: str | None) -> dict[str, str]:
    """Labels of a fleet pod: deployment, role, template hash and (serving pods) revision."""
    labels = common_labels(dep, "placeholder" if role == "placeholder" else "server")
    labels[LABEL_ROLE] = role
    labels[LABEL_TEMPLATE_HASH] = template
    if artifact is not None:
        labels[LABEL_REVISION] = artifact
    return labels


def _node_affinity(dep: InferenceDeployment, instance_type: str) -> dict[str, Any]:
    placement = dep.spec.placement
    expressions: list[dict[str, Any]] = [
        {"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": [instance_type]},
    ]
    if placement.zones:
        expressions.append({"key": LABEL_ZONE, "operator": "In", "values": sorted(placement.zones)})
    for key, value in sorted(placement.node_selector.items()):
        expressions.append({"key": key, "operator": "In", "values": [value]})
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}
        }
    }


def _tolerations(dep: InferenceDeployment) -> list[dict[str, Any]]:
    tolerations: list[dict[str, Any]] = [{"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    for toleration in dep.spec.placement.tolerations:
        wire = toleration.to_wire()
        if wire not in tolerations:
            tolerations.append(wire)
    return tolerations


def _scheduler_name(dep: InferenceDeployment, config: BuilderConfig) -> str | None:
    return dep.spec.placement.scheduler_name or config.default_scheduler_name


@dataclass(frozen=True)
class ServingDisk:
    """A replica's local disk: what it requests and is limited to, and its emptyDirs' sizes."""

    request: str
    limit: str
    artifact_cache: str
    tmp: str = SERVING_TMP_SIZE


def serving_disk(dep: InferenceDeployment) -> ServingDisk:
    """spec.runtime.ephemeralStorage as request and limit; unset, a request for a BERT-class artifact
    and a limit as large as the artifact can be: it is loaded whole onto the replica's NeuronCores,
    so it hardly exceeds the device memory they hold (1Gi more for /tmp and the logs)."""
    runtime, model = dep.spec.runtime, dep.spec.model
    if runtime.ephemeral_storage:
        return ServingDisk(runtime.ephemeral_storage, runtime.ephemeral_storage, runtime.ephemeral_storage)
    device_gib = math.ceil(model.hbm_gib) if model.hbm_gib else model.neuron_cores_per_replica * HBM_GIB_PER_NEURONCORE
    return ServingDisk(DEFAULT_SERVING_DISK_REQUEST, f"{device_gib + 1}Gi", f"{device_gib}Gi")


def _resources(dep: InferenceDeployment, candidate: Candidate) -> dict[str, Any]:
    cores = str(dep.spec.model.neuron_cores_per_replica)
    cpu = f"{candidate.cpu_millis_per_replica}m"
    memory = f"{candidate.memory_mib_per_replica}Mi"
    disk = serving_disk(dep)
    limits = {"memory": memory, "ephemeral-storage": disk.limit, RESOURCE_NEURONCORE: cores}
    if dep.spec.runtime.cpu_limit:
        limits["cpu"] = dep.spec.runtime.cpu_limit
    return {
        "requests": {"cpu": cpu, "memory": memory, "ephemeral-storage": disk.request, RESOURCE_NEURONCORE: cores},
        "limits": limits,
    }


def _pod_security(config: BuilderConfig, neuron_devices: bool = False) -> dict[str, Any]:
    """The pod's securityContext; ``neuron_devices``: its process may open the Neuron devices."""
    security: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": config.run_as_user,
        "runAsGroup": config.run_as_user,
        "fsGroup": config.run_as_user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if neuron_devices and config.device_group_id is not None:
        security["supplementalGroups"] = [config.device_group_id]
    return security


def _container_security() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _common_pod_spec(
    dep: InferenceDeployment, candidate: Candidate, role: Role, config: BuilderConfig
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "affinity": _node_affinity(dep, candidate.name),
        "tolerations": _tolerations(dep),
        "priorityClassName": config.priority_classes.for_role(role),
        "securityContext": _pod_security(config),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    scheduler = _scheduler_name(dep, config)
    if scheduler:
        spec["schedulerName"] = scheduler
    return spec


# --------------------------------------------------------------------------------------------- pods


def server_args(dep: InferenceDeployment, artifact_uri: str) -> list[str]:
    """Arguments of ``neuronserve`` in a replica (``neuronserve serve``'s command line).

    The manifest pin is not among them: see :func:`build_pod` (an environment variable).
    """
    runtime = dep.spec.runtime
    # The runtime gets SHUTDOWN_MARGIN_SECONDS less than the pod's grace period, so that it exits
    # before the kubelet's SIGKILL.
    grace = max(1, runtime.termination_grace_period_seconds - SHUTDOWN_MARGIN_SECONDS)
    return [
        "serve",
        "--artifact",
        artifact_uri,
        "--port",
        str(runtime.port),
        "--max-batch-delay-ms",
        f"{runtime.max_batch_delay_ms:g}",
        "--max-queue",
        str(runtime.max_queue),
        "--grace-seconds",
        str(grace),
        # After SIGTERM the runtime reports not ready at once but serves new requests this long more,
        # while the pod's removal from the endpoints reaches kube-proxy and load balancers: the pod
        # needs no preStop sleep. The runtime takes at most a third of its grace period for it (the
        # rest is for the work it accepted; the CRD refuses a longer delay above the default).
        "--drain-delay-seconds",
        str(runtime.drain_delay_seconds),
        "--cache-dir",
        ARTIFACT_CACHE_DIR,
        # The artifact may have been compiled for another deployment of the same model: the
        # compile cache's key leaves the name out, so a rename or a second deployment recompiles nothing.
        "--model-name",
        dep.served_model_name,
    ]


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": PORT_NAME},
        "periodSeconds": period,
        "timeoutSeconds": 3,
        "failureThreshold": failures,
    }


def serving_account(dep: InferenceDeployment, config: BuilderConfig) -> str | None:
    """The ServiceAccount of the spec's serving pods and placeholders (None: the namespace's default)."""
    return dep.spec.runtime.service_account_name or config.serving_service_account


def build_pod(
    dep: InferenceDeployment,
    candidate: Candidate,
    revision: FleetRevision,
    role: Literal["warm", "active"],
    name: str,
    config: BuilderConfig | None = None,
) -> dict[str, Any]:
    """The pod of one replica serving ``revision`` (see the module docstring for each choice)."""
    config = config or BuilderConfig()
    runtime = dep.spec.runtime
    startup_period = 10
    env: list[dict[str, Any]] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    env += [variable.to_wire() for variable in runtime.env]
    if revision.artifact.sha256:
        # The pin (the status' artifact.sha256): a pod never serves an artifact replaced at the same
        # URI after it was recorded, it exits naming both digests. An environment variable, not an
        # argument: a model-server image older than the pin (a user-built Neuron image, a node's cached
        # default tag) ignores it, where it would refuse an unknown argument and every new pod would
        # crash-loop. Last, so that a variable of spec.runtime.env cannot unpin it.
        env.append({"name": MANIFEST_PIN_ENV, "value": revision.artifact.sha256})
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": runtime.image or config.model_server_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["neuronserve"],
        "args": server_args(dep, revision.artifact.uri),
        "ports": [{"name": PORT_NAME, "containerPort": runtime.port, "protocol": "TCP"}],
        "env": env,
        "resources": _resources(dep, candidate),
        "startupProbe": _probe(READY_PATH, startup_period, -(-config.startup_budget_seconds // startup_period)),
        "readinessProbe": _probe(READY_PATH, 5, 2),
        "livenessProbe": _probe(LIVE_PATH, 10, 3),
        "securityContext": _container_security(),
        # The server says why it exits (a refused or unloadable artifact) on its last log line: as
        # the termination message it reaches the pod's lastState, and the status' Degraded message.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "artifact-cache", "mountPath": ARTIFACT_CACHE_DIR},
        ],
    }
    disk = serving_disk(dep)
    spec = _common_pod_spec(dep, candidate, role, config)
    spec["securityContext"] = _pod_security(config, neuron_devices=True)
    service_account = serving_account(dep, config)
    if service_account:
        spec["serviceAccountName"] = service_account
    spec.update(
        {
            "containers": [container],
            "volumes": [
                {"name": "tmp", "emptyDir": {"sizeLimit": disk.tmp}},
                {"name": "artifact-cache", "emptyDir": {"sizeLimit": disk.artifact_cache}},
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": runtime.termination_grace_period_seconds,
            "topologySpreadConstraints": [
                {
                    "maxSkew": dep.spec.placement.zone_spread_max_skew,
                    "topologyKey": LABEL_ZONE,
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {
                        "matchLabels": deployment_selector(dep.name),
                        "matchExpressions": [{"key": LABEL_ROLE, "operator": "In", "values": ["active", "warm"]}],
                    },
                }
            ],
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(
            dep,
            name,
            pod_labels(dep, role, revision.template, revision.artifact.id),
            {ANNOTATION_ARTIFACT_URI: revision.artifact.uri}
            | ({ANNOTATION_MANIFEST_SHA256: revision.artifact.sha256} if revision.artifact.sha256 else {}),
        ),
        "spec": spec,
    }


def build_placeholder_pod(
    dep: InferenceDeployment,
    candidate: Candidate,
    template: str,
    name: str,
    config: BuilderConfig | None = None,
) -> dict[str, Any]:
    """A low-priority pod holding one replica's worth of an Inf2 node (same affinity).

    It runs the model server's *image* (sleeping, not serving): the node then has the image pulled
    when a real replica replaces the placeholder, so the replica skips the pull (15-20 GB Neuron
    images take minutes to pull) and pays only load and warm-up. The simulator assumes the same.
    """
    config = config or BuilderConfig()
    container = {
        "name": "placeholder",
        "image": dep.spec.runtime.image or config.model_server_image,
        "command": ["sleep", "infinity"],
        "imagePullPolicy": "IfNotPresent",
        "resources": _resources(dep, candidate),
        "securityContext": _container_security(),
    }
    spec = _common_pod_spec(dep, candidate, "placeholder", config)
    # It runs the spec's image: as the account the serving pods would (which the operator's own-account
    # refusal checks), not as the namespace's default, which may be the operator's own. It only sleeps:
    # no API token (_common_pod_spec).
    service_account = serving_account(dep, config)
    if service_account:
        spec["serviceAccountName"] = service_account
    spec.update({"containers": [container], "restartPolicy": "Always", "terminationGracePeriodSeconds": 0})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(dep, name, pod_labels(dep, "placeholder", template, None)),
        "spec": spec,
    }


def pod_template_hash(dep: InferenceDeployment, candidate: Candidate, config: BuilderConfig | None = None) -> str:
    """10 hex digits over everything in a replica's pod except name, role and artifact.

    A change of image, resources, placement, probes or runtime flags changes it, and the fleet
    plan then replaces the pods warm-then-swap, as for a new artifact.
    """
    blank = FleetRevision(ArtifactRevision("", ""), "")
    pod = build_pod(dep, candidate, blank, "active", "template", config)
    return short_hash(json.dumps(pod["spec"], sort_keys=True), 10)


def object_for_action(
    dep: InferenceDeployment,
    candidate: Candidate,
    action: CreatePod | CreatePlaceholder,
    config: BuilderConfig | None = None,
) -> dict[str, Any]:
    """The pod to create for a fleet-plan creation action."""
    if isinstance(action, CreatePod):
        return build_pod(dep, candidate, action.revision, action.role, action.name, config)
    return build_placeholder_pod(dep, candidate, action.template, action.name, config)


def relabel_patch(action: Relabel) -> dict[str, Any]:
    """The merge patch of a Relabel: the role label, the drain annotation when draining, and the
    old-standby stamp (set when the relabel stamps it, removed by every other relabel)."""
    kept = action.kept_since if action.role == "warm" else None
    annotations: dict[str, str | None] = {ANNOTATION_KEPT_SINCE: rfc3339(kept) if kept is not None else None}
    if action.role == "draining" and action.drain_started_at is not None:
        annotations[ANNOTATION_DRAIN_STARTED] = rfc3339(action.drain_started_at)
    return {"metadata": {"labels": {LABEL_ROLE: action.role}, "annotations": annotations}}


# ------------------------------------------------------------------------------- service and budget


def build_service(dep: InferenceDeployment, current: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """ClusterIP Service over the active pods (role=active); warm and draining pods get no traffic.

    Its port is spec.runtime.port when the Service is made, and then the port of ``current`` (the
    Service as it is), kept: a new runtime.port rolls the pods warm-then-swap, and the targetPort
    (the port's name) follows them from old pods to new, while the Service's clients keep the port
    they know. Moving it with the spec refused them from the first reconcile, the old pods still serving.
    """
    ports = ((current or {}).get("spec") or {}).get("ports") or []
    kept = [entry["port"] for entry in ports if entry.get("name") == PORT_NAME and isinstance(entry.get("port"), int)]
    port = kept[0] if kept else dep.spec.runtime.port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(dep, service_name(dep.name), common_labels(dep, "service")),
        "spec": {
            "type": "ClusterIP",
            "selector": active_selector(dep.name),
            "ports": [{"name": PORT_NAME, "port": port, "targetPort": PORT_NAME, "protocol": "TCP"}],
        },
    }


def build_pdb(dep: InferenceDeployment, desired_active: int) -> dict[str, Any]:
    """PodDisruptionBudget over the active pods: voluntary evictions take one at a time.

    An integer minAvailable (the desired active replicas less one), not maxUnavailable: with
    maxUnavailable the disruption controller counts the pods expected from their controller's
    /scale, whose spec.replicas is spec.scaling.replicas, unset in Auto mode: 0 expected, so no
    eviction would ever be allowed (every node drain and consolidation blocked). With an integer
    minAvailable it counts the pods the PDB selects. Rewritten when the desired count changes.
    """
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(dep, dep.name, common_labels(dep, "disruption-budget")),
        "spec": {
            "minAvailable": max(0, desired_active - 1),
            "selector": {"matchLabels": active_selector(dep.name)},
            # Unready pods serve nothing: let evictions take them even when the budget is spent.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def build_priority_classes(config: BuilderConfig | None = None) -> list[dict[str, Any]]:
    """The four PriorityClasses the pods name (cluster-scoped; install once)."""
    config = config or BuilderConfig()
    names = config.priority_classes

    def priority_class(name: str, value: int, description: str, preempt: bool) -> dict[str, Any]:
        return {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
            "value": value,
            "globalDefault": False,
            "preemptionPolicy": "PreemptLowerPriority" if preempt else "Never",
            "description": description,
        }

    return [
        priority_class(names.active, config.serving_priority, "neuronfleet serving replicas", True),
        priority_class(
            names.warm,
            config.serving_priority,
            "neuronfleet warm replicas; same value as active because a promoted pod keeps this class",
            True,
        ),
        priority_class(
            names.placeholder,
            PLACEHOLDER_PRIORITY,
            "neuronfleet node placeholders: preempted by any pod, keep spare Inf2 capacity",
            False,
        ),
        priority_class(
            names.compile,
            COMPILE_PRIORITY,
            "neuronfleet compile Jobs: preempt nothing (not the placeholders' spare Inf2 capacity)",
            False,
        ),
    ]


# ----------------------------------------------------------------------------------------- read back


_PHASES: dict[str, PodPhase] = {
    "Pending": "Pending",
    "Running": "Running",
    "Succeeded": "Succeeded",
    "Failed": "Failed",
    "Unknown": "Unknown",
}


def _parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time, or a time without a zone read as UTC: an annotation written by hand
    (``kubectl annotate ... kept-since=2026-11-30T11:00:00``) must not become a naive datetime,
    which the plan cannot compare with its aware clock (every plan would raise)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _terminated(container_status: Mapping[str, Any]) -> Mapping[str, Any]:
    """The container's current or else last termination (exit code, termination message), or {}."""
    current = (container_status.get("state") or {}).get("terminated")
    last = (container_status.get("lastState") or {}).get("terminated")
    found = current or last or {}
    return found if isinstance(found, Mapping) else {}


#: The most of a termination message's last line that a pod problem quotes.
MAX_LAST_LINE = 600


def _last_line(message: Any) -> str:
    """The last non-blank line of a termination message (the server's fatal error comes last)."""
    if not isinstance(message, str):
        return ""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1]
    return line if len(line) <= MAX_LAST_LINE else line[: MAX_LAST_LINE - 3] + "..."


def parse_pod(
    pod: dict[str, Any],
    node_names: Collection[str] | None = None,
    in_flight: int | None = None,
    node_zones: Mapping[str, str] | None = None,
    placeholder_account: str | None = None,
) -> PodView:
    """A pod object (as read from the API) as the fleet plan sees it.

    ``node_names``: the nodes that exist (None: unknown, never report a node lost). ``in_flight``:
    the pod's in-flight requests if the caller read them from its metrics. ``node_zones``: node
    name -> ``topology.kubernetes.io/zone``, for zone-aware promotion and drain.
    ``placeholder_account``: the account placeholders run as now (:func:`serving_account`; None: the
    namespace's default); a placeholder running as another (one made before placeholders took the
    serving pods' account ran as ``default``) counts as of no template, so the plan replaces it.
    """
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    raw_role = labels.get(LABEL_ROLE)
    # A pod whose role label was edited to something unknown is treated as draining: it leaves
    # the Service and is deleted after the drain, and the plan replaces it.
    role: Role = raw_role if raw_role in ROLES else "draining"
    ready_condition = find_condition(pod, "Ready")
    ready = ready_condition.get("status") == "True"
    scheduled_condition = find_condition(pod, "PodScheduled")
    unschedulable = None
    if scheduled_condition.get("status") == "False" and scheduled_condition.get("reason") == "Unschedulable":
        unschedulable = scheduled_condition.get("message") or "no node fits"
    waiting_reason = waiting_message = None
    for container_status in status.get("containerStatuses") or []:
        waiting = (container_status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            waiting_reason, waiting_message = waiting.get("reason"), waiting.get("message") or ""
            last_words = _last_line(_terminated(container_status).get("message"))
            if last_words:
                # "back-off 40s restarting failed container" says nothing of why: the server's last
                # line (its termination message) does.
                code = _terminated(container_status).get("exitCode")
                waiting_message = f"{waiting_message}; last exit (code {code}): {last_words}"
            break
    statuses = status.get("containerStatuses") or []
    # The server's own status, by name: the kubelet sorts containerStatuses by name, so an injected
    # sidecar (istio-proxy, linkerd-proxy) may come first.
    server = [c for c in statuses if isinstance(c, Mapping) and c.get("name") == CONTAINER_NAME]
    exit_code = _terminated(server[0]).get("exitCode") if server else None
    node = spec.get("nodeName") or None
    phase = _PHASES.get(status.get("phase") or "Pending", "Unknown")
    drain_started = _parse_time(annotations.get(ANNOTATION_DRAIN_STARTED))
    template = labels.get(LABEL_TEMPLATE_HASH)
    if role == "placeholder" and (spec.get("serviceAccountName") or "default") != (placeholder_account or "default"):
        template = None
    return PodView(
        name=metadata.get("name") or "",
        role=role,
        revision=labels.get(LABEL_REVISION),
        template=template,
        phase=phase,
        ready=ready,
        deleting=bool(metadata.get("deletionTimestamp")),
        grace_ends_at=_parse_time(metadata.get("deletionTimestamp")),
        created_at=_parse_time(metadata.get("creationTimestamp")),
        ready_at=_parse_time(ready_condition.get("lastTransitionTime")) if ready else None,
        node=node,
        zone=(node_zones or {}).get(node) if node else None,
        node_lost=node is not None and node_names is not None and node not in node_names,
        in_flight=in_flight,
        drain_started_at=drain_started,
        kept_since=_parse_time(annotations.get(ANNOTATION_KEPT_SINCE)),
        scheduler_name=spec.get("schedulerName") or None,
        unschedulable_message=unschedulable,
        waiting_reason=waiting_reason,
        waiting_message=waiting_message,
        artifact_sha256=annotations.get(ANNOTATION_MANIFEST_SHA256) or None,
        last_exit_code=exit_code if isinstance(exit_code, int) else None,
    )
