"""The sandbox: a local Kubernetes API with simulated Inf2 node groups, all in one asyncio loop.

It stands in for EKS with Inf2 node groups in the integration tests and behind
``neuronfleet sandbox up``. The real Kopf operator, kubectl and the Kubernetes clients talk real
HTTP to it.

Usage (async, in the test's loop; fast under ``looptime``)::

    from neuronfleet.sandbox import NodeGroup, SandboxCluster

    async with SandboxCluster(
        node_groups=[NodeGroup("inf2-small", "inf2.xlarge", count=2, zones=("us-east-1a", "us-east-1b"))],
        crd_dir="crds",          # registers every CRD in crds/*.yaml
        kopf_peering=False,      # True registers kopf.dev peering CRDs
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

Modules: ``apiserver`` (HTTP, verbs, discovery, OpenAPI v3, Table, watch), ``store`` (objects,
resourceVersion, finalizers, GC, watch history), ``selectors``, ``patching``, ``resources`` (kinds,
CRD schemas: defaulting, pruning, validation), ``tables``, ``openapi``, ``nodes`` (node groups),
``scheduling`` + ``scheduler``, ``kubelet``, ``provisioner``, ``cluster``, ``command``
(``neuronfleet sandbox up``). Time comes from the loop (``clock.Clock``): wall-clock timestamps are
a configurable epoch plus loop time, so they stay consistent under looptime.
"""

from neuronfleet.sandbox.apiserver import ApiServer, RequestRecord
from neuronfleet.sandbox.cluster import SandboxCluster, ThreadedSandboxCluster, kopf_peering_crds, write_kubeconfig
from neuronfleet.sandbox.kubelet import ColdStartProfile, Kubelet, ReadinessHook
from neuronfleet.sandbox.nodes import NodeGroup, parse_node_groups
from neuronfleet.sandbox.provisioner import Provisioner
from neuronfleet.sandbox.scheduler import Scheduler
from neuronfleet.sandbox.scheduling import CORES_ANNOTATION

__all__ = [
    "CORES_ANNOTATION",
    "ApiServer",
    "ColdStartProfile",
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
