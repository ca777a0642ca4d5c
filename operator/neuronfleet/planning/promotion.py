"""Which warm pod to promote first, and which active pod to drain first (pure).

Both functions take plain :class:`PodInfo` descriptors and return them in order; the caller takes
as many as it needs from the front. Ties always end on the pod name, so the order is
deterministic and a restarted operator picks the same pods.

Promote (warm -> active), first to last:

1. Pods of the target revision: promoting an old-revision pod would put stale code in the Service
   during a rollout.
2. Pods in the zone with the fewest active pods: keeps the zone spread that
   ``topologySpreadConstraints`` asked for, so one zone outage takes the least capacity.
3. Pods on nodes already running active pods of this deployment: packs serving pods onto fewer
   nodes, so the nodes left with only warm pods or nothing are the ones scale-down frees.
4. Pods ready the longest: they have passed readiness the longest and any lazy warm-up is done;
   a pod that just turned ready is the likeliest to still be flaky.

Drain (active -> draining), first to last:

1. Pods not of the target revision (a rollout retires them first anyway).
2. Pods in the zone with the most active pods: restores the spread.
3. Pods on nodes with the fewest active pods of this deployment: emptying a node is what saves
   money (a node is billed whole); draining one of many pods on a node saves nothing.
4. Pods with the least in-flight work: they finish draining soonest and put the fewest requests
   at risk of the grace period.
5. Pods ready the shortest (as a ReplicaSet deletes the newest first): the longest-running ones
   have proven healthy.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PodInfo:
    """What the ordering needs to know about one serving pod."""

    name: str
    node: str | None
    zone: str | None
    #: When the pod became ready (seconds, any clock shared by the pods), None if not ready.
    ready_since: float | None
    in_flight: float
    revision: str | None


def _zone_counts(active: Sequence[PodInfo]) -> Counter[str | None]:
    return Counter(p.zone for p in active)


def _node_counts(active: Sequence[PodInfo]) -> Counter[str | None]:
    return Counter(p.node for p in active if p.node is not None)


def promotion_order(warm: Sequence[PodInfo], active: Sequence[PodInfo], target_revision: str | None) -> list[PodInfo]:
    """Warm pods, the one to promote first at the front (see the module docstring)."""
    zones = _zone_counts(active)
    nodes = _node_counts(active)
    never = float("inf")

    def key(pod: PodInfo) -> tuple[int, int, int, float, str]:
        return (
            0 if pod.revision == target_revision else 1,
            zones[pod.zone],
            0 if pod.node is not None and nodes[pod.node] > 0 else 1,
            pod.ready_since if pod.ready_since is not None else never,
            pod.name,
        )

    return sorted(warm, key=key)


def drain_order(active: Sequence[PodInfo], target_revision: str | None) -> list[PodInfo]:
    """Active pods, the one to drain first at the front (see the module docstring)."""
    zones = _zone_counts(active)
    nodes = _node_counts(active)

    def key(pod: PodInfo) -> tuple[int, int, int, float, float, str]:
        return (
            0 if pod.revision != target_revision else 1,
            -zones[pod.zone],
            nodes[pod.node] if pod.node is not None else 0,
            pod.in_flight,
            -(pod.ready_since if pod.ready_since is not None else float("inf")),
            pod.name,
        )

    return sorted(active, key=key)
