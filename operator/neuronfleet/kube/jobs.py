"""The compile Job of a revision (pure builder) and how to read its outcome.

The Job runs ``neuronserve compile`` with the spec's buckets and compiler flags and records the
result under the request key (see ``neuronfleet.planning.compile``). Tracing with torch-neuronx
runs on any x86 host, so the Job asks for no Neuron device; it runs on amd64 nodes only (the Neuron
images are built for no other architecture), prefers ordinary nodes and tolerates the Neuron taint,
so that a cluster of only Inf2 nodes can compile too. Beside the fleet's pods it preempts nothing
(its PriorityClass: ``builders.COMPILE_PRIORITY``), and a pod of it lost to a disruption (preempted
by a serving pod, evicted) is run again without counting against the Job's backoffLimit.

The compile loads untrusted input (a model source may be pickled weights, which run code when
loaded), so its pod is hardened at least as the serving pods are: no Kubernetes API token, no
service links, a read-only root filesystem. It writes only to its ``/tmp`` (an emptyDir, sized),
the artifact store (S3) and its termination log: neuronserve's compile code puts its downloads and
traced buckets in ``tempfile`` directories, and the variables below send what else its libraries
write to ``/tmp``. Checked by tracing the file writes of a CPU compile (torch, transformers, boto3);
what torch-neuronx and neuronx-cc write on a Neuron compile was not (they cannot run here):
torch_neuronx.trace compiles in a temporary directory, and the working directory is ``/tmp``.
"""

from __future__ import annotations

import json
from typing import Any

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.kube.builders import BuilderConfig, _container_security, _metadata, _pod_security, common_labels
from neuronfleet.planning.catalog import (
    INF2_INSTANCE_TYPES,
    LABEL_ARCH,
    LABEL_INSTANCE_FAMILY,
    LABEL_INSTANCE_TYPE,
    NEURON_TAINT_KEY,
)
from neuronfleet.planning.compile import (
    ANNOTATION_COMPILE_RETRY,
    CompileRequest,
    DanglingRecord,
    JobPhase,
    job_spec_key,
)
from neuronfleet.planning.labels import LABEL_DEPLOYMENT, short_hash

LABEL_COMPILE_REQUEST = "serving.neuronfleet.dev/compile-request"
#: The job spec key (planning.compile.job_spec_key) the Job was made with.
ANNOTATION_JOB_SPEC = "serving.neuronfleet.dev/compile-job-spec"
#: On a Job that compiles a dangling request record again: the artifact URI it republishes. Should
#: such a Job succeed and the record still dangle, the operator reports it rather than loop.
ANNOTATION_REPUBLISHES = "serving.neuronfleet.dev/compile-republishes"
COMPILE_CONTAINER = "compile"
#: Finished Jobs stay a day: a failed one is the record of why a revision did not roll out.
FINISHED_JOB_TTL_SECONDS = 86400
#: The compile's writable directory (an emptyDir): its temporary files, home and working directory.
COMPILE_TMP = "/tmp"
#: Where the compile's libraries write, all in COMPILE_TMP. HOME holds ~/.cache (transformers' and
#: torch's caches; compile.py sets no HF_HOME of its own). NEURON_COMPILE_CACHE_URL moves torch-neuronx's
#: persistent compile cache off its default /var/tmp/neuron-compile-cache, on the read-only root, should
#: it be used.
COMPILE_ENV = (
    ("HF_HUB_OFFLINE", "1"),
    ("TMPDIR", COMPILE_TMP),
    ("HOME", COMPILE_TMP),
    ("NEURON_COMPILE_CACHE_URL", f"{COMPILE_TMP}/neuron-compile-cache"),
)
#: The compile's disk unless spec.compile.ephemeralStorage says: requested, enough for a BERT-class
#: model's source, working files and artifact; the limit, where the kubelet evicts it, lets a model
#: of a few billion parameters through.
DEFAULT_COMPILE_DISK_REQUEST = "8Gi"
DEFAULT_COMPILE_DISK_LIMIT = "64Gi"


def compile_service_account(dep: InferenceDeployment, config: BuilderConfig) -> str | None:
    """The compile Job's ServiceAccount: the spec's, else the operator's (None: the namespace's default)."""
    return dep.spec.compile.service_account_name or config.compile_service_account


def _job_settings(dep: InferenceDeployment, config: BuilderConfig) -> dict[str, str]:
    """What the Job runs with beyond what planning.compile.job_spec_key hashes, where it is set."""
    settings = {}
    service_account = compile_service_account(dep, config)
    if service_account:
        settings["serviceAccountName"] = service_account
    if dep.spec.compile.cpu_limit:
        settings["cpuLimit"] = dep.spec.compile.cpu_limit
    if dep.spec.compile.ephemeral_storage:
        settings["ephemeralStorage"] = dep.spec.compile.ephemeral_storage
    return settings


def compile_disk_limit(dep: InferenceDeployment) -> str:
    """The compile's ephemeral-storage limit, and the sizeLimit of its /tmp, where all of it is written."""
    return dep.spec.compile.ephemeral_storage or DEFAULT_COMPILE_DISK_LIMIT


def compile_resources(dep: InferenceDeployment) -> dict[str, Any]:
    """The compile container's requests and limits.

    Memory is not compressible: bounded, a compile that outgrows its request is OOM-killed alone and
    named so (more memory is the fix) instead of pressing the node's other pods to eviction. CPU has
    no limit unless the spec sets one: neuronx-cc may use an idle node's spare cores.
    """
    flags = dep.spec.compile
    disk_request = flags.ephemeral_storage or DEFAULT_COMPILE_DISK_REQUEST
    disk_limit = compile_disk_limit(dep)
    limits = {"memory": flags.memory, "ephemeral-storage": disk_limit}
    if flags.cpu_limit:
        limits["cpu"] = flags.cpu_limit
    return {
        "requests": {"cpu": flags.cpu, "memory": flags.memory, "ephemeral-storage": disk_request},
        "limits": limits,
    }


def wanted_job_spec(dep: InferenceDeployment, config: BuilderConfig | None = None) -> str:
    """The job spec key of the deployment's spec, the operator's settings and its compile-retry annotation.

    A failed Job whose key differs is replaced, and a remembered failure is run again: a compile
    refused by S3 runs again once it has an account with the right role, an evicted one once it
    has more disk. The settings job_spec_key does not hash (the ServiceAccount, the CPU limit, the
    disk) join the retry annotation in what it hashes, only when set: the key of a Job made without
    them stays what it was.
    """
    retry = (dep.metadata.annotations or {}).get(ANNOTATION_COMPILE_RETRY)
    settings = _job_settings(dep, config or BuilderConfig())
    if settings:
        retry = json.dumps({"retry": retry, **settings}, sort_keys=True, separators=(",", ":"))
    return job_spec_key(dep.spec, retry)


def compile_job_name(deployment: str, request: CompileRequest) -> str:
    suffix = f"compile-{request.key[:10]}"
    name = f"{deployment}-{suffix}"
    if len(name) <= 63:
        return name
    return f"{deployment[: 63 - len(suffix) - 7].rstrip('-')}-{short_hash(deployment, 5)}-{suffix}"


def compile_args(dep: InferenceDeployment, request: CompileRequest) -> list[str]:
    """The `neuronserve compile` command line for a request (the same one the tests run)."""
    model, flags = dep.spec.model, dep.spec.compile
    args = [
        "neuronserve",
        "compile",
        "--source",
        model.source,
        "--format",
        model.format,
        "--store",
        request.store_root,
        "--name",
        dep.served_model_name,
        "--batch-buckets",
        ",".join(str(b) for b in sorted(model.batch_buckets)),
        "--sequence-buckets",
        ",".join(str(s) for s in sorted(model.sequence_buckets)),
        "--inputs",
        ",".join(f"{t.name}:{t.dtype}" for t in model.inputs),
        "--target",
        flags.target_family,
        "--auto-cast",
        flags.auto_cast,
        "--auto-cast-type",
        flags.auto_cast_type,
        "--opt-level",
        str(flags.opt_level),
        "--request-key",
        request.key,
        "--result-file",
        "/dev/termination-log",
    ]
    # Joined with '=': compiler flags start with dashes, which a parser reading `--extra-arg <flag>`
    # takes for options of its own (the sandbox's simulated compile refused the Job so); both
    # neuronserve's parser and the simulated one read the joined form.
    args += [f"--extra-arg={extra}" for extra in flags.extra_args]
    return args


def _compile_node_affinity() -> dict[str, Any]:
    """Only amd64 nodes, ordinary ones preferred to Inf2 ones.

    The Neuron images are amd64 only: on a Graviton node (which Karpenter may pick for a pod that
    names no architecture) the compile fails with ``exec format error`` until its backoffLimit is
    spent. Inf2 nodes are told apart by their instance family where Karpenter launched them, and by
    their instance type where a managed node group did (it sets no ``karpenter.k8s.aws/*`` label).
    """
    not_inf2 = [
        {"key": LABEL_INSTANCE_FAMILY, "operator": "NotIn", "values": ["inf2"]},
        {"key": LABEL_INSTANCE_TYPE, "operator": "NotIn", "values": sorted(INF2_INSTANCE_TYPES)},
    ]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": LABEL_ARCH, "operator": "In", "values": ["amd64"]}]}
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": {"matchExpressions": not_inf2}}
            ],
        }
    }


def build_compile_job(
    dep: InferenceDeployment,
    request: CompileRequest,
    config: BuilderConfig | None = None,
    republish: DanglingRecord | None = None,
) -> dict[str, Any]:
    """The Job for ``request``; ``republish``: the dangling record it compiles again (marked so)."""
    config = config or BuilderConfig()
    labels = common_labels(dep, "compile")
    labels[LABEL_COMPILE_REQUEST] = request.key
    annotations = {ANNOTATION_JOB_SPEC: wanted_job_spec(dep, config)}
    if republish is not None:
        annotations[ANNOTATION_REPUBLISHES] = republish.artifact.uri
    metadata = _metadata(dep, compile_job_name(dep.name, request), labels, annotations)
    service_account = compile_service_account(dep, config)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": dep.spec.compile.backoff_limit,
            "activeDeadlineSeconds": dep.spec.compile.timeout_seconds,
            "ttlSecondsAfterFinished": FINISHED_JOB_TTL_SECONDS,
            # A pod failed by a disruption (preempted by a serving pod, evicted by a node drain or a
            # consolidation) is replaced without counting against backoffLimit: that is for compiles
            # that fail by themselves, and a long compile lost to its node is no such failure. The
            # kubelet's eviction of a pod over its own disk limit or /tmp sizeLimit sets no
            # DisruptionTarget (kubelet eviction_manager.go: only node-pressure evictions do): it
            # still counts. (The API server accepts a pod failure policy only with restartPolicy Never.)
            "podFailurePolicy": {
                "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
            },
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "restartPolicy": "Never",
                    # Never preempts (a placeholder's spare Inf2 capacity is the serving pods'); see
                    # builders.COMPILE_PRIORITY.
                    "priorityClassName": config.priority_classes.compile,
                    **({"serviceAccountName": service_account} if service_account else {}),
                    # The compile never calls the Kubernetes API: a model that runs code when
                    # loaded gets no token to call it with, nor the namespace's Services' addresses.
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": _pod_security(config, neuron_devices=True),
                    # Tracing needs no Neuron device: prefer ordinary nodes, but a cluster of only
                    # Inf2 nodes (tainted) must still be able to compile.
                    "tolerations": [{"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
                    "affinity": _compile_node_affinity(),
                    "containers": [
                        {
                            "name": COMPILE_CONTAINER,
                            # The request's: the image in its key (the spec's, else the operator's).
                            "image": request.image,
                            "command": compile_args(dep, request)[:1],
                            "args": compile_args(dep, request)[1:],
                            "workingDir": COMPILE_TMP,
                            "env": [{"name": name, "value": value} for name, value in COMPILE_ENV],
                            "resources": compile_resources(dep),
                            "securityContext": _container_security(),
                            "volumeMounts": [{"name": "tmp", "mountPath": COMPILE_TMP}],
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                        }
                    ],
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": compile_disk_limit(dep)}}],
                },
            },
        },
    }


def job_phase(job: dict[str, Any] | None) -> tuple[JobPhase, str]:
    """The Job's phase from its conditions, with the reason Kubernetes gives for a failure.

    A Job with a deletionTimestamp is ``removing`` whatever its conditions: it stays while a finalizer
    (another controller's) holds it, and read as running it was deleted again on every reconcile.
    """
    if job is None:
        return "absent", ""
    meta = job.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        finalizers = ", ".join(str(f) for f in meta.get("finalizers") or [])
        held = f", held by the finalizer(s) {finalizers}" if finalizers else ""
        return "removing", f"being deleted since {meta['deletionTimestamp']}{held}"
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "succeeded", ""
        if condition.get("type") == "Failed":
            reason = condition.get("reason") or "Failed"
            return "failed", f"{reason}: {condition.get('message') or 'the compile Job failed'}"
    return "running", ""


#: The Job status counters of its pods (batch/v1 JobStatus): running (``active``), ready, ended
#: (``failed``, ``succeeded``, counted once the controller has removed the pod's finalizer) or being
#: deleted (``terminating``, set with the JobPodReplacementPolicy feature, on by default since 1.29).
_POD_COUNTERS = ("active", "ready", "failed", "succeeded", "terminating")


def job_made_a_pod(job: dict[str, Any]) -> bool:
    """Whether the Job's own status says it has made a pod (one running, ended or being deleted, or
    one ended not yet counted: ``uncountedTerminatedPods``). Its counters are kept after the pod is
    gone: a Job between two attempts (a failed or lost pod deleted, the next one not yet made after
    the back-off) lists no pod but has made one.

    Not every pod is counted: one ended by a disruption that the compile Job's pod failure policy
    ignores (preempted, its node gone) is counted nowhere once it is gone.
    """
    status = job.get("status") or {}
    if any(int(status.get(counter) or 0) > 0 for counter in _POD_COUNTERS):
        return True
    uncounted = status.get("uncountedTerminatedPods") or {}
    return bool(uncounted.get("failed") or uncounted.get("succeeded"))


def job_image(job: dict[str, Any]) -> str | None:
    """The image the compile Job's pods run (its compile container's); None when it names none."""
    pod_spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in pod_spec.get("containers") or []:
        if container.get("name") == COMPILE_CONTAINER:
            image = container.get("image")
            return image if isinstance(image, str) else None
    return None


def compile_job_selector(deployment: str) -> dict[str, str]:
    return {LABEL_DEPLOYMENT: deployment, "app.kubernetes.io/component": "compile"}
