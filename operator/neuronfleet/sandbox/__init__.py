"""The sandbox: a local Kubernetes API with simulated Inf2 node groups, all in one asyncio loop.

It stands in for EKS with Inf2 node groups in the integration tests and behind
``neuronfleet sandbox up``. The real Kopf operator, kubectl and the Kubernetes clients talk real
HTTP to it.

Usage (async, in the test's loop; fast under ``looptime``)::

    from neuronfleet.sandbox import ColdStartProfile, NodeGroup, SandboxCluster

    async with SandboxCluster(
        node_groups=[NodeGroup("inf2-small", "inf2.xlarge", count=2, zones=("us-east-1a", "us-east-1b"))],
        crd_dir="crds",          # registers every CRD in crds/*.yaml
        kopf_peering=False,      # True registers kopf.dev peering CRDs
        priority_classes=False,  # True creates the chart's PriorityClasses (``sandbox up`` does)
        neuron_scheduler_name="neuron-scheduler",  # None: only default-scheduler pods get bound
        cold_start=ColdStartProfile(image_pull_s=30, container_start_s=2, readiness_s=45),
        provisioning_delay_s=60, consolidation_delay_s=30,
        s3=False,                # True: cluster.s3, moto's S3 on 127.0.0.1 (sandbox.s3)
        compile_jobs="simulated",  # compile Jobs publish a stand-in artifact (sandbox.simulated_compile);
                                   # "real": they run `neuronserve compile` here
        serving=None,            # ServingOptions(): serving pods run `neuronserve serve` (sandbox.serving),
                                 # with Endpoints/EndpointSlices and cluster.routers (sandbox.router)
        prometheus=False,        # True (with serving): cluster.prometheus scrapes them (sandbox.prometheus)
    ) as cluster:
        cluster.url               # http://127.0.0.1:<port>
        cluster.kubeconfig_path   # a kubeconfig pointing at it (plain http)
        cluster.scheduler         # Scheduler: .bindings, .preemptions, .neuron_scheduler_name
        cluster.kubelet           # Kubelet: .profiles, .readiness_hook, set_ready(), fail_pod(), fail_node()
        cluster.provisioner       # Provisioner: .nodes_launched, .nodes_removed, .launches
        cluster.request_log       # [RequestRecord(method, path, verb, group, version, resource, ...)]
        cluster.store             # the object store (read with cluster.get()/cluster.list())
        await cluster.wait_for(lambda: cluster.get("pods", "p", "default"), timeout=30)

Synchronous callers (the ``kubernetes`` client, kubectl, ``kopf.testing.KopfRunner``) use
``with ThreadedSandboxCluster(node_groups=..., crd_dir=...) as c:`` and ``c.call(fn)`` to run
``fn(cluster)`` in the cluster's own loop.

Test hooks: ``cluster.create/get/list/delete`` (in-process, same semantics as the HTTP verbs),
``cluster.add_node(group)``, ``cluster.wait_for(predicate, timeout=...)`` (loop clock, woken by
every change); ``kubelet.readiness_hook`` (async ``fn(pod) -> True | False | None``),
``kubelet.set_ready()``, ``crash_container()``, ``fail_pod()``, ``fail_node()``,
``recover_node()``, ``write_log()``; ``kubelet.container_runner`` decides how run-to-completion pods
(restartPolicy Never/OnFailure, e.g. Jobs') end: ``runners.SubprocessRunner()`` runs their command
locally, unset they exit 0 after ``ColdStartProfile.run_s`` (``compile_jobs="simulated"`` sets it to
``simulated_compile.SimulatedCompileRunner``: compile Jobs publish a stand-in artifact, other pods are
simulated); ``kubelet.profiles[(instance_type, image)] =
ColdStartProfile(...)``; pods get their NeuronCore indices in the ``neuronfleet.dev/neuroncores``
annotation (``CORES_ANNOTATION``).

What the API server does (details in each module's docstring): uid, one global resourceVersion,
generation, creationTimestamp; 201/409/404/400/410/415/422/429 with Status bodies; JSON merge,
JSON and strategic merge patches (merge keys for pod/node lists: see ``patching``); server-side
apply with ``managedFields`` per manager, removal of fields a manager stops applying and 409
conflicts unless forced (``managedfields``; lists by CRD list type / strategic merge key, else
atomic); name rules per kind with kube-apiserver's messages (``names``); label and field
selectors on list and watch; watch resume from a bounded history, 410 Gone, timeoutSeconds,
bookmarks (also the sendInitialEvents end marker); limit/continue; server-side dry-run
(``dryRun=All``, or in DeleteOptions) on every write, subresources and collection DELETE included:
the would-be answer, nothing stored, no event; status and scale
subresources, pods/binding, pods/eviction (PodDisruptionBudgets), pods/log; finalizers,
graceful pod deletion, background/foreground/orphan cascading GC, namespace and CRD termination
after their contents; CRDs from files or POSTed (structural defaulting, pruning, JSON-schema and
CEL validation, fieldValidation Strict/Warn with ``Warning`` headers for dropped fields);
discovery, OpenAPI v3 (kubectl apply --validate, explain) and v2 (protobuf, kinds only: kubectl's
"no matches for kind"),
Table output with printer columns; protobuf bodies for Namespace/ConfigMap/Secret/access
reviews/DeleteOptions (kubectl's typed commands, helm);
Events from the scheduler, kubelet and provisioner; a request log. Controllers: scheduler,
kubelet, provisioner, Job (+TTL), disruption (PDB status); with ``serving``: endpoints
(Endpoints and EndpointSlices), a router process per Service (least outstanding requests).

Not done: authentication/authorization (every request is allowed; access reviews answer
allowed), field management of in-process controllers' writes (kubelet, scheduler: only API
writes record managedFields), unions and atomic maps in server-side apply, schemas in the
OpenAPI v2 document, protobuf for other kinds, list snapshots at an old resourceVersion,
controllers for apps/v1 workloads (Deployments, ReplicaSets, DaemonSets, StatefulSets are stored
only: enough for ``helm install``),
Jobs with completions or parallelism above 1, pod networking (served pods listen on 127.0.0.1,
each on its own port; Service ClusterIPs route nowhere: use the router), node leases/heartbeats,
init containers, CEL rules cel-python cannot evaluate (skipped).
"""

from neuronfleet.sandbox.apiserver import ApiServer, RequestRecord
from neuronfleet.sandbox.cluster import SandboxCluster, ThreadedSandboxCluster, kopf_peering_crds, write_kubeconfig
from neuronfleet.sandbox.kubelet import ColdStartProfile, ContainerResult, ContainerRunner, Kubelet, ReadinessHook
from neuronfleet.sandbox.nodes import NodeGroup, parse_node_groups
from neuronfleet.sandbox.provisioner import Provisioner
from neuronfleet.sandbox.scheduler import Scheduler
from neuronfleet.sandbox.scheduling import CORES_ANNOTATION

__all__ = [
    "CORES_ANNOTATION",
    "ApiServer",
    "ColdStartProfile",
    "ContainerResult",
    "ContainerRunner",
    "Kubelet",
    "NodeGroup",
    "Provisioner",
    "ReadinessHook",
    "RequestRecord",
    "SandboxCluster",
    "Scheduler",
    "ThreadedSandboxCluster",
    "kopf_peering_crds",
    "parse_node_groups",
    "write_kubeconfig",
]
