"""Which ready serving pods a scale-down takes, as the controller that deletes them chooses.

An autoscaler only sets a replica count; the pods that go are chosen by whatever owns them, and
at several replicas per node that choice decides whether a node empties (consolidation removes it,
billing stops) or stays partly full and billed. Each policy names its deleter
(:attr:`neuronfleet.sim.policies.Policy.scale_down`); :class:`neuronfleet.sim.fleet.Fleet` takes
its ready active pods in that order. Three deleters:

- ``operator`` (ours): :func:`neuronfleet.planning.promotion.drain_order`, the operator's own rule
  (fewest pods on a node first, recounted after each pick: it empties whole nodes), with the
  deployment's other pods on each node (warm pods, starting ones, placeholders) counted beside,
  as the operator counts them: one of them keeps a node billed as surely as a serving pod. The
  fleet plays it through the plan's own drain order, the operator's code itself; the two below are
  the :data:`ORDERS` it plugs into the plan in its place.
- ``replicaset`` (HPA, KEDA, Knative KPA, a static fleet: they scale a Deployment, whose
  ReplicaSet controller deletes the pods): kube-controller-manager's ``getPodsToDelete`` and
  ``getPodsRankedByRelatedPodsOnSameNode`` (kubernetes/kubernetes ``pkg/controller/replicaset/
  replica_set.go``) sorted by ``ActivePodsWithRanks.Less`` (``pkg/controller/controller_utils.go``):
  unassigned before assigned, Pending < Unknown < Running, not ready before ready (the fleet
  deletes its starting pods before it calls this), lower ``pod-deletion-cost`` (not set: equal),
  then a higher rank first, the rank being the pods of the Deployment that are not terminating on
  the pod's node, counted once per sync before it deletes any (so one sync may take several pods
  off one node); then the more recently ready first; restart counts and creation times only break
  ties the fleet never has (the pod name does, where ready times are equal). Since 1.22
  (``LogarithmicScaleDown``, GA and locked on since 1.31) ready times are compared on
  ``floor(log2(ns since ready))`` and pods in one such bucket are taken in UID order, i.e. at
  random. The simulator takes the most recently ready first throughout (the rule before 1.22;
  within a bucket, one of the random picks), so that at one replica per node, where every rank is
  1, it takes exactly the pods the operator's order takes and runs there stay comparable. A
  random pick there changes no count, only which of several equivalent empty nodes a later pod
  reuses, yet that moved KEDA's figures on the conv trace (bert-base) by up to 2.8 % in cost and
  1.5 points of attainment: that much is noise of arbitrary tie-breaks, not policy. This
  order spreads deletions over nodes: at two or more replicas per node it leaves nodes partly full
  and billed where the operator's order empties them.
- ``ray-serve``: Ray Serve's controller stops replicas itself (KubeRay then removes Ray worker pods
  left idle): ray-project/ray ``python/ray/serve/_private/deployment_scheduler.py``,
  ``DefaultDeploymentScheduler._get_replicas_to_stop``: replicas not yet running first (the fleet's
  starting pods), then running replicas node by node, nodes ordered by fewest running replicas
  (of all deployments: here the one), the head node last (no replica runs there in this model);
  nodes with as many replicas in the order they first held a running replica (a stable sort over
  an insertion-ordered dict). Within a node the copy read here (commit a1599cc) takes a set's
  order and a later version the newest replica first; the model takes the newest first (which one
  does not change what the node costs). Like the operator's order it empties whole nodes at a
  time; it picks the node by when it first ran a replica, where the operator starts on the node
  of the most recently ready pod. At one replica per node it stops the oldest.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Literal, NamedTuple

#: Who deletes a policy's pods on scale-down.
ScaleDownBy = Literal["operator", "replicaset", "ray-serve"]


class ReadyPod(NamedTuple):
    """A ready serving pod, as the deleters see it (times in simulated seconds). A named tuple: the
    fleet makes one per candidate at every scale-down (tens of thousands a simulated day)."""

    name: str
    node: str
    ready_at: float


#: ``(ready pods, the deployment's non-terminating pods per node before this pass)`` -> the ready
#: pods, the one to take first at the front.
Order = Callable[[Sequence[ReadyPod], Mapping[str, int]], list[ReadyPod]]


def replicaset_order(ready: Sequence[ReadyPod], pods_on_node: Mapping[str, int]) -> list[ReadyPod]:
    """A ReplicaSet's order among ready pods (see the module docstring)."""
    return sorted(ready, key=lambda p: (-pods_on_node.get(p.node, 0), -p.ready_at, p.name))


def ray_serve_order(ready: Sequence[ReadyPod], pods_on_node: Mapping[str, int]) -> list[ReadyPod]:
    """Ray Serve's order among running replicas (see the module docstring)."""
    running = Counter(p.node for p in ready)
    # A node enters the controller's dict with the first replica that ran there.
    first_running: dict[str, tuple[float, str]] = {}
    for pod in ready:
        first_running[pod.node] = min(first_running.get(pod.node, (math.inf, "")), (pod.ready_at, pod.name))
    return sorted(ready, key=lambda p: (running[p.node], first_running[p.node], p.node, -p.ready_at, p.name))


#: The deleters other than the operator, by :data:`ScaleDownBy`.
ORDERS: dict[ScaleDownBy, Order] = {
    "replicaset": replicaset_order,
    "ray-serve": ray_serve_order,
}
