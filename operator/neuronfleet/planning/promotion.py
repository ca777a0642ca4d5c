"""Which warm pod to promote first, which active pod to drain first, and which placeholder to
delete first (pure).

The functions take plain :class:`PodInfo` descriptors and return them in order; the caller takes
as many as it needs from the front. The order is built one pod at a time, each pick counted before
the next (a promoted pod joins its zone and node, a drained one leaves them): a move of several
pods keeps the zones even and empties whole nodes, where one sort on the counts before any move
would take all of them from the zone that was the most crowded, and one pod from each of several
equally full nodes, freeing none. Ties always end on the pod name (then the rest of the
descriptor), so the order never depends on the input order and a restarted operator picks the
same pods.

A node is billed whole, and a node autoscaler (Karpenter's ``WhenEmpty`` consolidation) removes it
only once no pod is left on it: a warm pod or a placeholder keeps it as surely as a serving pod.
So the node counts below are over every pod of the deployment on the node (``beside`` passes the
warm pods and placeholders that are not candidates; draining pods are leaving and are not passed),
where the zone counts are over active pods only (the spread that matters is the serving one).
Other deployments' pods on the same nodes keep them too (several models share the Inf2 nodes): the
caller passes them as ``neighbours``, a count per node name (the pods of other deployments that
stay there), which every node count below adds, and which a placeholder's release takes as pods that
stay. Counted only among the deployment's own pods, a scale-down drained the pod beside another
model (its node billed anyway) and kept the one alone on its node, so no node was freed.

Promote (warm -> active), first to last:

1. Pods of the target revision: promoting an old-revision pod would put stale code in the Service
   during a rollout.
2. Pods in the zone with the fewest active pods: keeps the zone spread that
   ``topologySpreadConstraints`` asked for, so one zone outage takes the least capacity.
3. Pods on nodes already running active pods of this deployment, then on nodes holding the most
   pods of it: packs serving pods onto fewer nodes, so the nodes left with only warm pods or
   nothing are the ones scale-down frees. The plan keeps the warm pool's pods in this order too
   (a scale-down's surplus ready actives among them, after the warm pods on nodes alike), so a
   shrinking pool deletes the pods on the emptiest nodes. There (``keeping``) the candidates not
   kept are deleted, so a node counts only the pods that stay on it (active ones, ``beside``) and
   the candidates kept so far, each as it is picked, and among nodes holding as many the one with
   the most candidates comes first: counted all at once, three warm pods on one node made it the
   fullest, and the pool kept one of them alone there rather than the one beside a placeholder.
4. Pods ready the longest: they have passed readiness the longest and any lazy warm-up is done;
   a pod that just turned ready is the likeliest to still be flaky.

Drain (active -> draining), first to last:

1. Pods not of the target revision (a rollout retires them first anyway).
2. Pods in the zone with the most active pods: restores the spread.
3. Pods on nodes holding the fewest pods (active, warm or placeholder of this deployment, and
   those of other deployments): emptying a node is what saves money; draining an active pod beside
   a warm pod, a placeholder or another model's pod that stays saves nothing.
4. Pods with the least in-flight work: they finish draining soonest and put the fewest requests
   at risk of the grace period.
5. Pods ready the shortest (as a ReplicaSet deletes the newest first): the longest-running ones
   have proven healthy.

Release (placeholders, deleted first to last; the plan keeps the last ones):

1. The caller's priority (placeholders not on a node hold nothing and go first, then those of an
   earlier template).
2. Pods on nodes with no serving pod that stays, nor any pod of another deployment: a placeholder
   beside one holds a spare slot on a node that is billed anyway.
3. Pods on nodes holding the fewest pods (the deployment's serving pods that stay and placeholders
   not yet released, other deployments' pods): empties whole nodes.
4. The highest name first (the lowest names stay, as they did before node counts).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any


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


#: No other deployment's pod on any node (one model alone: the simulator's fleet).
NO_NEIGHBOURS: Mapping[str, int] = MappingProxyType({})

#: A node's pods counted under (zone, node): a node sits in one zone.
_NodeKey = tuple[str | None, str]


def _identity(pod: PodInfo) -> tuple[str, str, str, float, str]:
    """The last tie-break: the name, then (two descriptors of one name) the rest of the descriptor,
    so only equal descriptors tie and the input order never shows."""
    return (pod.name, pod.zone or "", pod.node or "", pod.in_flight, pod.revision or "")


def _greedy(
    pods: Sequence[PodInfo],
    revision_rank: Callable[[PodInfo], int],
    zone_rank: Callable[[str | None], int],
    node_and_pod_rank: Callable[[PodInfo], tuple[Any, ...]],
    pick: Callable[[PodInfo], None],
) -> list[PodInfo]:
    """``pods`` one at a time by the smallest ``(revision, zone, node and pod)`` rank, ``pick``
    recounting after each.

    A pick changes the zone rank of its zone and the node rank of the pods on its node only, so
    the pods wait in one heap per (revision rank, zone), keyed by their node and pod rank; each
    pick compares the few heaps' fronts under their zones' current rank, and re-files only the
    pods on the picked node (their older entries are skipped when they come to the front).
    About n log n: a sort per pick would be n^2 log n, about a second per reconcile at 1,000.
    """
    heaps: dict[tuple[int, str | None], list[tuple[tuple[Any, ...], int]]] = {}
    on_node: dict[_NodeKey, list[int]] = {}
    for index, pod in enumerate(pods):
        heaps.setdefault((revision_rank(pod), pod.zone), []).append((node_and_pod_rank(pod), index))
        if pod.node is not None:
            on_node.setdefault((pod.zone, pod.node), []).append(index)
    for heap in heaps.values():
        heapq.heapify(heap)
    filed = {index: rank for heap in heaps.values() for rank, index in heap}
    taken = [False] * len(pods)
    ordered: list[PodInfo] = []
    while len(ordered) < len(pods):
        best: tuple[tuple[Any, ...], tuple[int, str | None]] | None = None
        for group, heap in heaps.items():
            # Entries of pods taken or re-filed since are dropped as they reach the front.
            while heap and (taken[heap[0][1]] or filed[heap[0][1]] != heap[0][0]):
                heapq.heappop(heap)
            if heap:
                rank = (group[0], zone_rank(group[1]), *heap[0][0])
                if best is None or rank < best[0]:
                    best = (rank, group)
        assert best is not None
        _, index = heapq.heappop(heaps[best[1]])
        pod = pods[index]
        taken[index] = True
        ordered.append(pod)
        pick(pod)
        if pod.node is not None:
            for other in on_node[pod.zone, pod.node]:
                if not taken[other]:
                    filed[other] = node_and_pod_rank(pods[other])
                    group = (revision_rank(pods[other]), pods[other].zone)
                    heapq.heappush(heaps[group], (filed[other], other))
    return ordered


def _on_nodes(*groups: Sequence[PodInfo]) -> Counter[_NodeKey]:
    """Pods per node over ``groups`` (pods not on a node are on none)."""
    return Counter[_NodeKey]((p.zone, p.node) for group in groups for p in group if p.node is not None)


def _with_neighbours(
    counts: Counter[_NodeKey], neighbours: Mapping[str, int], *groups: Sequence[PodInfo]
) -> Counter[_NodeKey]:
    """``counts`` plus, on each node of a pod in ``groups``, the other deployments' pods there.

    Added under the (zone, node) keys the counts use, once per node: only the nodes of these pods
    are ever looked up.
    """
    if not neighbours:
        return counts
    for key in {(p.zone, p.node) for group in groups for p in group if p.node is not None}:
        counts[key] += neighbours.get(key[1], 0)
    return counts


def promotion_order(
    warm: Sequence[PodInfo],
    active: Sequence[PodInfo],
    target_revision: str | None,
    beside: Sequence[PodInfo] = (),
    demoted: Collection[str] = (),
    *,
    keeping: bool = False,
    neighbours: Mapping[str, int] = NO_NEIGHBOURS,
) -> list[PodInfo]:
    """Warm pods, the one to promote first at the front (see the module docstring).

    ``beside`` are the deployment's other pods on nodes that are neither candidates nor active
    (placeholders, warm pods not offered): counted in their node's pods, never in a zone.
    ``demoted`` names candidates that are not warm yet (a scale-down's surplus actives, when the
    plan ranks its pool): on nodes alike they come after the warm ones, which stay unrelabelled.
    ``keeping``: the order says which candidates a shrinking pool keeps, the rest being deleted
    (``beside`` then holds only pods that stay): see the module docstring. ``neighbours``: other
    deployments' pods per node name, counted in their node's pods.
    """
    if len(warm) <= 1:
        return list(warm)  # nothing to rank
    zones = Counter(p.zone for p in active)
    nodes = _on_nodes(active)
    # Promoting a pod keeps it on its node, and the others stay warm: these counts never change.
    # Keeping, the candidates not kept are deleted: a node holds the pods that stay on it and those
    # kept so far, each counted as it is picked. Counted all at once, a node full of candidates
    # looked the fullest and kept one of them alone on it, which freed nothing.
    held = _on_nodes(active, beside) if keeping else _on_nodes(warm, active, beside)
    held = _with_neighbours(held, neighbours, warm)
    # Kept among nodes holding as many, the one with the most candidates first: it fills before
    # another node is kept for one pod (a node picked is ahead of any other from then on anyway).
    # A promotion's counts hold the candidates already.
    room = _on_nodes(warm) if keeping else Counter[_NodeKey]()
    never = float("inf")

    def node_and_pod(pod: PodInfo) -> tuple[int, int, int, bool, float, str, str, str, float, str]:
        return (
            0 if pod.node is not None and nodes[pod.zone, pod.node] > 0 else 1,
            -held[pod.zone, pod.node] if pod.node is not None else 0,
            -room[pod.zone, pod.node] if pod.node is not None else 0,
            pod.name in demoted,
            pod.ready_since if pod.ready_since is not None else never,
            *_identity(pod),
        )

    def promoted(pod: PodInfo) -> None:
        zones[pod.zone] += 1
        if pod.node is not None:
            nodes[pod.zone, pod.node] += 1
            if keeping:
                held[pod.zone, pod.node] += 1

    def revision(pod: PodInfo) -> int:
        return 0 if pod.revision == target_revision else 1

    return _greedy(warm, revision, zones.__getitem__, node_and_pod, promoted)


def drain_order(
    active: Sequence[PodInfo],
    target_revision: str | None,
    others: Sequence[PodInfo] = (),
    beside: Sequence[PodInfo] = (),
    neighbours: Mapping[str, int] = NO_NEIGHBOURS,
) -> list[PodInfo]:
    """Active pods, the one to drain first at the front (see the module docstring).

    ``others`` are active pods that stay whatever happens (not candidates): they count in their
    zone and node but are never returned. ``beside`` are the deployment's pods on nodes that are
    not active (warm pods, placeholders): they count in their node only, as do ``neighbours``
    (other deployments' pods per node name).
    """
    if len(active) <= 1:
        return list(active)  # nothing to rank
    zones = Counter(p.zone for p in (*active, *others))
    nodes = _with_neighbours(_on_nodes(active, others, beside), neighbours, active)

    def node_and_pod(pod: PodInfo) -> tuple[int, float, float, str, str, str, float, str]:
        return (
            nodes[pod.zone, pod.node] if pod.node is not None else 0,
            pod.in_flight,
            -(pod.ready_since if pod.ready_since is not None else float("inf")),
            *_identity(pod),
        )

    def drained(pod: PodInfo) -> None:
        zones[pod.zone] -= 1
        if pod.node is not None:
            nodes[pod.zone, pod.node] -= 1

    def revision(pod: PodInfo) -> int:
        return 0 if pod.revision != target_revision else 1

    def crowded_first(zone: str | None) -> int:
        return -zones[zone]

    return _greedy(active, revision, crowded_first, node_and_pod, drained)


def release_order(
    placeholders: Sequence[PodInfo],
    priority: Callable[[PodInfo], int],
    serving: Sequence[PodInfo] = (),
    neighbours: Mapping[str, int] = NO_NEIGHBOURS,
) -> list[PodInfo]:
    """Placeholders, the one to delete first at the front (see the module docstring).

    ``priority``: the smallest goes first, before any node count. ``serving``: the serving pods
    of the deployment that stay (never returned). ``neighbours``: other deployments' pods per node
    name, which stay as those do.
    """
    if len(placeholders) <= 1:
        return list(placeholders)  # nothing to rank
    beside = _with_neighbours(_on_nodes(serving), neighbours, placeholders)
    nodes = _with_neighbours(_on_nodes(placeholders, serving), neighbours, placeholders)
    # The highest identity goes first: its rank in the sorted identities, negated.
    position = {id(p): -i for i, p in enumerate(sorted(placeholders, key=_identity))}

    def node_and_pod(pod: PodInfo) -> tuple[int, int, int]:
        if pod.node is None:
            return (0, 0, position[id(pod)])
        key = (pod.zone, pod.node)
        return (1 if beside[key] > 0 else 0, nodes[key], position[id(pod)])

    def released(pod: PodInfo) -> None:
        if pod.node is not None:
            nodes[pod.zone, pod.node] -= 1

    return _greedy(placeholders, priority, lambda zone: 0, node_and_pod, released)
