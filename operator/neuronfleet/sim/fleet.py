"""The simulated fleet: pods in their roles, Inf2 nodes, cold starts and node provisioning.

It plays what the operator's fleet plan and the cluster do with a policy's targets (active
replicas, warm pods, node placeholders), following DESIGN.md's fleet model:

- scale up: promote ready warm pods first (``promote_seconds``), in
  :func:`neuronfleet.planning.promotion.promotion_order`; then turn starting warm pods into
  active ones; then create pods;
- scale down: delete pods still starting first, in a ReplicaSet's order (``getPodsToDelete``:
  unscheduled before scheduled, Pending (pulling the image) before Running-but-unready, newest
  first), then take ready active pods in the order of whoever deletes the policy's pods
  (:mod:`neuronfleet.sim.scaledown`): ours in :func:`neuronfleet.planning.promotion.drain_order`
  (fewest pods on a node first: it empties nodes); HPA, KEDA, Knative KPA and a static fleet in a
  ReplicaSet's rank (pods on the nodes holding the most of the Deployment's pods first: it spreads
  deletions, so at two or more replicas per node it leaves nodes partly full and billed); Ray
  Serve whole nodes at a time, fewest replicas first. The warm pool keeps loaded pods, its ready
  warm ones and those taken alike, in the operator's pool order (the promotion order: beside
  active pods and on the fullest nodes first, warm pods before taken ones on nodes alike); the
  taken ones it does not keep are drained (out of service at once, deleted after
  ``drain_seconds``). Ours counts the deployment's other pods on each node too (warm ones as the pool keeps
  them, starting, placeholders). At one replica per node the ReplicaSet's order takes the pods the operator's
  order takes. A deleted starting pod's node keeps being billed: a node Karpenter is launching cannot be recalled (it
  comes up, then empty consolidation removes it after ``empty_node_seconds``), and a ready node
  whose pod was pulling loses the pull. This is why a controller whose scale-down window (HPA's
  300 s) is shorter than a cold start (~450 s) pays for launches that never serve: the real
  controllers do the same;
- a shrinking warm pool deletes its loading pods first, then keeps its ready ones in
  :func:`neuronfleet.planning.promotion.promotion_order` with ``keeping`` (beside active pods, then
  on the nodes holding the most pods that stay, each one kept counted as it is picked); surplus
  placeholders go in
  :func:`neuronfleet.planning.promotion.release_order` (unbound, then on nodes without serving
  pods, the emptiest first): the operator's rules, counting every pod on a node as it does;
- a new pod binds to a free slot on a ready node, preempting a placeholder if needed; without one
  it waits for a node Karpenter-style provisioning starts for it. Its cold start is scheduling +
  image pull (only while the node has no image yet) + runtime init + artifact load + warm-up;
- node placeholders are low-priority pods running the server image (so their node pulls the image
  ahead); they only hold a slot;
- a node with nothing on it for ``empty_node_seconds`` is removed (consolidation); nodes are billed
  per second from launch to removal, at least :data:`MIN_BILLED_SECONDS` (EC2's minimum).

Speed: what the fleet holds changes only at events, so :meth:`Fleet.counts` and
:meth:`Fleet.next_event` are cached until the next change, and a decision repeating the current
targets on an unchanged fleet is a no-op (the reconcile is idempotent between events).

All durations come from the profile's distributions on one seeded generator: same seed, same run.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from neuronfleet.planning.promotion import PodInfo, promotion_order, release_order
from neuronfleet.sim.profiles import Profile
from neuronfleet.sim.scaledown import ORDERS, ReadyPod, ScaleDownBy

Role = Literal["active", "warm", "placeholder"]
INF = float("inf")
#: EC2 bills Linux on-demand instances per second with a 60 s minimum.
MIN_BILLED_SECONDS = 60.0


@dataclass
class Node:
    name: str
    launched_at: float
    ready_at: float
    slots: int
    pods: set[str] = field(default_factory=set)
    image_at: float | None = None
    empty_since: float | None = None


@dataclass
class Pod:
    name: str
    role: Role
    created_at: float
    node: str | None = None
    #: When it turns ready (None until bound to a ready node).
    ready_at: float | None = None
    bound_at: float | None = None
    #: A promotion in progress ends at this time.
    serving_at: float | None = None
    draining_until: float | None = None

    def ready(self, now: float) -> bool:
        return self.ready_at is not None and self.ready_at <= now


@dataclass
class FleetCounts:
    """What the fleet holds at one instant (for metrics, plots and cost)."""

    serving: int
    active: int
    warm_ready: int
    warm: int
    placeholders: int
    nodes: int
    starting_active: int


class Fleet:
    """Pods and nodes of one simulated deployment."""

    def __init__(
        self,
        profile: Profile,
        rng: np.random.Generator,
        empty_node_seconds: float = 30.0,
        scale_down: ScaleDownBy = "operator",
    ) -> None:
        self.profile = profile
        #: Who picks the ready active pods a scale-down takes (:mod:`neuronfleet.sim.scaledown`).
        self.scale_down = scale_down
        self._scale_down_order = ORDERS[scale_down]
        self.rng = rng
        self.empty_node_seconds = empty_node_seconds
        self.pods: dict[str, Pod] = {}
        self.nodes: dict[str, Node] = {}
        self.draining: list[tuple[float, str]] = []
        self._names = itertools.count()
        self.node_seconds = 0.0
        self.pod_seconds = 0.0
        self._accounted_at = 0.0
        #: Observed cold starts (seconds): pod bound-to-ready, and node launch-to-ready.
        self.pod_cold_starts: list[float] = []
        self.node_cold_starts: list[float] = []
        self.targets = (0, 0, 0)
        self._dist = {p: profile.cold_start.dist(p) for p in ("node", "scheduling", "pull", "init", "load", "warmup")}
        #: Bumped on every change; keys the caches below.
        self.version = 0
        self._reconciled = -1
        self._counts: tuple[int, float, float, FleetCounts] | None = None
        self._next: tuple[int, float, float, float] | None = None
        self._advanced_at = 0.0
        self._model_pods = (-1, 0)

    # ------------------------------------------------------------------ setup and accounting

    def start_ready(self, active: int, now: float = 0.0) -> None:
        """Begin with ``active`` serving pods packed onto ready nodes that have the image:
        ``ceil(active / replicas_per_node)`` nodes, as the scheduler would fill them (and as the
        oracles bill them), so a fleet at several replicas per node is not billed per replica."""
        self.version += 1
        node: Node | None = None
        for _ in range(active):
            if node is None or len(node.pods) >= node.slots:
                node = self._new_node(now, ready_at=now)
                node.image_at = now
            pod = Pod(self._name("pod"), "active", now, node.name, ready_at=now, bound_at=now)
            self.pods[pod.name] = pod
            node.pods.add(pod.name)
        self.targets = (active, 0, 0)

    def _name(self, prefix: str) -> str:
        return f"{prefix}-{next(self._names)}"

    def _new_node(self, now: float, ready_at: float | None = None) -> Node:
        if ready_at is None:
            ready_at = now + self._dist["node"].sample(self.rng)
            self.node_cold_starts.append(ready_at - now)
        node = Node(self._name("node"), now, ready_at, self.profile.replicas_per_node)
        self.nodes[node.name] = node
        return node

    def account(self, now: float) -> None:
        """Add node-seconds and model-pod-seconds up to ``now``."""
        span = now - self._accounted_at
        if span > 0:
            self.node_seconds += span * len(self.nodes)
            if self._model_pods[0] != self.version:
                held = sum(1 for p in self.pods.values() if p.role != "placeholder") + len(self.draining)
                self._model_pods = (self.version, held)
            self.pod_seconds += span * self._model_pods[1]
            self._accounted_at = now

    # ------------------------------------------------------------------ views

    def serving(self, now: float) -> int:
        return sum(
            1
            for p in self.pods.values()
            if p.role == "active" and p.ready(now) and (p.serving_at is None or p.serving_at <= now)
        )

    def counts(self, now: float) -> FleetCounts:
        cached = self._counts
        if cached is not None and cached[0] == self.version and cached[1] <= now < cached[2]:
            return cached[3]
        counts = self._count(now)
        self._counts = (self.version, now, self._soonest(now), counts)
        return counts

    def _count(self, now: float) -> FleetCounts:
        serving = active = warm_ready = warm = placeholders = starting = 0
        for p in self.pods.values():
            ready = p.ready_at is not None and p.ready_at <= now
            if p.role == "active":
                active += 1
                if not ready:
                    starting += 1
                elif p.serving_at is None or p.serving_at <= now:
                    serving += 1
            elif p.role == "warm":
                warm += 1
                warm_ready += ready
            else:
                placeholders += 1
        return FleetCounts(serving, active, warm_ready, warm, placeholders, len(self.nodes), starting)

    def next_event(self, now: float) -> float:
        """The next whole second at which the fleet changes by itself (a pod or node turning ready,
        a promotion, drain or removal ending). Changes take effect on whole seconds, as endpoint
        updates do, which merges the many events of a large scale-up."""
        cached = self._next
        if cached is not None and cached[0] == self.version and cached[1] <= now < cached[2]:
            return cached[3]
        soonest = self._soonest(now)
        event = soonest if soonest == INF else float(math.ceil(soonest - 1e-9))
        self._next = (self.version, now, soonest, event)
        return event

    def _soonest(self, now: float) -> float:
        soonest = INF
        for pod in self.pods.values():
            for t in (pod.ready_at, pod.serving_at):
                if t is not None and now < t < soonest:
                    soonest = t
        for node in self.nodes.values():
            if now < node.ready_at < soonest:
                soonest = node.ready_at
            if node.empty_since is not None:
                soonest = min(soonest, max(now, node.empty_since + self.empty_node_seconds))
        for t, _ in self.draining:
            soonest = min(soonest, t)
        return soonest

    def _info(self, pod: Pod) -> PodInfo:
        return PodInfo(pod.name, pod.node, None, pod.ready_at if pod.ready_at is not None else None, 0.0, None)

    # ------------------------------------------------------------------ changes

    def set_targets(self, now: float, active: int, warm: int, placeholders: int) -> None:
        targets = (max(0, active), max(0, warm), max(0, placeholders))
        if targets == self.targets and self._reconciled == self.version:
            return
        self.targets = targets
        self.reconcile(now)

    def advance(self, now: float) -> None:
        """Apply what happened by ``now``: drains finishing, nodes turning ready, empty nodes going."""
        self.account(now)
        self.next_event(self._advanced_at)
        assert self._next is not None
        previous, self._advanced_at = self._advanced_at, now
        if self._next[2] > now and previous <= now:
            return  # nothing happened since the last advance
        self.version += 1
        for until, name in [d for d in self.draining if d[0] <= now]:
            self.draining.remove((until, name))
            self._free_slot(name, until)
        for pod in self.pods.values():
            if pod.serving_at is not None and pod.serving_at <= now:
                pod.serving_at = None
        for node in list(self.nodes.values()):
            if not node.pods and node.empty_since is None and node.ready_at <= now:
                node.empty_since = node.ready_at
            if node.empty_since is not None and now >= node.empty_since + self.empty_node_seconds:
                self.node_seconds += max(0.0, MIN_BILLED_SECONDS - (now - node.launched_at))
                del self.nodes[node.name]
        self.reconcile(now)

    def _free_slot(self, pod_name: str, now: float) -> None:
        for node in self.nodes.values():
            if pod_name in node.pods:
                node.pods.discard(pod_name)
                if not node.pods:
                    node.empty_since = now

    def _delete(self, pod: Pod, now: float, drain: bool = False) -> None:
        del self.pods[pod.name]
        if drain and pod.node is not None:
            self.draining.append((now + self.profile.drain_seconds, pod.name))
        elif pod.node is not None:
            self._free_slot(pod.name, now)

    def reconcile(self, now: float) -> None:
        self.version += 1
        self._reconcile(now)
        self._reconciled = self.version

    def _reconcile(self, now: float) -> None:
        want_active, want_warm, want_placeholders = self.targets
        pods = self.pods.values()
        active = [p for p in pods if p.role == "active"]
        warm = [p for p in pods if p.role == "warm"]

        if len(active) < want_active:
            short = want_active - len(active)
            ready_warm = [p for p in warm if p.ready(now)]
            for info in promotion_order([self._info(p) for p in ready_warm], [], None)[:short]:
                pod = self.pods[info.name]
                pod.role = "active"
                pod.serving_at = now + self.profile.promote_seconds
                short -= 1
            starting_warm = sorted(
                (p for p in warm if not p.ready(now) and p.role == "warm"),
                key=lambda p: (p.ready_at if p.ready_at is not None else INF, p.name),
            )
            for pod in starting_warm[:short]:
                pod.role = "active"
                short -= 1
            for _ in range(short):
                self._create("active", now)
        elif len(active) > want_active:
            surplus = len(active) - want_active
            # Counted before this pass deletes anything, as a ReplicaSet ranks once per sync.
            pods_on_node = Counter(p.node for p in pods if p.role != "placeholder" and p.node is not None)
            starting = sorted((p for p in active if not p.ready(now)), key=lambda p: self._deletion_rank(p, now))
            for pod in starting[:surplus]:
                self._delete(pod, now)
                surplus -= 1
            ready_active = [
                ReadyPod(p.name, p.node, p.ready_at)
                for p in active
                if p.ready_at is not None and p.ready_at <= now and p.node is not None and p.name in self.pods
            ]
            candidates = {p.name for p in ready_active}
            # As the operator's plan: the warm pods count on their node only as the pool keeps them
            # (``want_warm`` ready ones, in its order beside every ready active), not those deleted
            # in this same step.
            # Bound or not alike: an unbound placeholder counts on no node.
            placed = [self._info(p) for p in self.pods.values() if p.role == "placeholder"]
            warm_infos = [self._info(p) for p in self.pods.values() if p.role == "warm" and p.ready(now)]
            actives_ready = [self._info(p) for p in self.pods.values() if p.name in candidates]
            pool_order = promotion_order(warm_infos, actives_ready, None, placed, keeping=True)
            pool_kept = {info.name for info in pool_order[:want_warm]}
            beside = Counter(
                p.node
                for p in self.pods.values()
                if p.node is not None and p.name not in candidates and (p.role != "warm" or p.name in pool_kept)
            )
            taken = {p.name for p in self._scale_down_order(ready_active, pods_on_node, beside)[:surplus]}
            # The pool keeps loaded pods, warm ones and those taken alike, in the operator's pool order
            # (the promotion order: beside staying actives and on the fullest nodes first, warm
            # before taken on nodes alike); the taken ones it does not keep drain. A warm pod it
            # does not keep goes below, as the pool's surplus. A node counts the pods that stay
            # (actives, placeholders) and those kept, each as it is picked: loading warm pods go
            # before loaded ones below, and the loaded ones the pool cuts go.
            loaded = [p for p in self.pods.values() if p.ready(now) and (p.role == "warm" or p.name in taken)]
            staying = [p for p in self.pods.values() if p.role == "active" and p.name not in taken]
            infos = [self._info(p) for p in loaded]
            pool = promotion_order(infos, [self._info(p) for p in staying], None, placed, taken, keeping=True)
            pool = pool[:want_warm]
            kept = {info.name for info in pool}
            for name in sorted(taken):
                pod = self.pods[name]
                if name in kept:
                    pod.role = "warm"
                    pod.serving_at = None
                else:
                    self._delete(pod, now, drain=True)

        warm = [p for p in self.pods.values() if p.role == "warm"]
        if len(warm) < want_warm:
            for _ in range(want_warm - len(warm)):
                self._create("warm", now)
        elif len(warm) > want_warm:
            # As the operator's plan keeps its pool: the loading ones go first (newest first), then
            # the ready ones in reverse promotion order (the pods on the emptiest nodes first).
            loading = sorted((p for p in warm if not p.ready(now)), key=lambda p: (-(p.ready_at or 0.0), p.name))
            ready_warm = [p for p in warm if p.ready(now)]
            excess = len(warm) - want_warm
            actives = [self._info(p) for p in self.pods.values() if p.role == "active"]
            # A ready one goes only once every loading one has: the placeholders alone stay beside.
            placed = [self._info(p) for p in self.pods.values() if p.role == "placeholder"]
            kept_order = promotion_order([self._info(p) for p in ready_warm], actives, None, placed, keeping=True)
            extra = loading + [self.pods[info.name] for info in reversed(kept_order)]
            for pod in extra[:excess]:
                self._delete(pod, now)

        holders = [p for p in self.pods.values() if p.role == "placeholder"]
        if len(holders) < want_placeholders:
            for _ in range(want_placeholders - len(holders)):
                self._create("placeholder", now)
        elif len(holders) > want_placeholders:
            # The operator's release order: unbound ones first, then those on nodes without serving
            # pods, the emptiest node first.
            serving = [self._info(p) for p in self.pods.values() if p.role != "placeholder"]
            released = release_order(
                [self._info(p) for p in holders], lambda info: 0 if info.node is None else 1, serving
            )
            for info in released[: len(holders) - want_placeholders]:
                self._delete(self.pods[info.name], now)
        self._schedule(now)

    def _deletion_rank(self, pod: Pod, now: float) -> tuple[int, int, float, str]:
        """A ReplicaSet's order among unready pods: unscheduled, Pending, Running; newest first."""
        if pod.node is None:
            return (0, 0, -pod.created_at, pod.name)
        node = self.nodes.get(pod.node)
        running = node is not None and node.image_at is not None and node.image_at <= now
        return (1, int(running), -pod.created_at, pod.name)

    def _create(self, role: Role, now: float) -> None:
        pod = Pod(self._name("ph" if role == "placeholder" else "pod"), role, now)
        self.pods[pod.name] = pod

    def _bind(self, pod: Pod, node: Node, now: float) -> None:
        pod.node = node.name
        pod.bound_at = now
        node.pods.add(pod.name)
        node.empty_since = None
        if pod.role == "placeholder":
            # A placeholder runs the server image, so its node pulls it ahead of any serving pod.
            if node.image_at is None:
                node.image_at = now + self._dist["pull"].sample(self.rng)
            pod.ready_at = now
            return
        start = now + self._dist["scheduling"].sample(self.rng)
        if node.image_at is None:
            node.image_at = start + self._dist["pull"].sample(self.rng)
        ready = max(start, node.image_at) + sum(self._dist[p].sample(self.rng) for p in ("init", "load", "warmup"))
        pod.ready_at = ready
        self.pod_cold_starts.append(ready - now)

    def _schedule(self, now: float) -> None:
        pending = [p for p in self.pods.values() if p.node is None]
        if not pending:
            return
        # Serving pods before warm pods before placeholders; oldest first within a role.
        rank = {"active": 0, "warm": 1, "placeholder": 2}
        pending.sort(key=lambda p: (rank[p.role], p.created_at, p.name))
        free: list[Node] = []
        held: list[tuple[Node, str]] = []
        for node in self.nodes.values():
            if node.ready_at > now:
                continue
            free.extend([node] * (node.slots - len(node.pods)))
            held.extend(
                (node, name)
                for name in sorted(node.pods)
                if name in self.pods and self.pods[name].role == "placeholder"
            )
        free.reverse()
        held.reverse()
        for pod in pending:
            if free:
                self._bind(pod, free.pop(), now)
            elif pod.role != "placeholder" and held:
                # Preempt a placeholder: its slot goes to the serving pod, it waits for a new node.
                node, name = held.pop()
                node.pods.discard(name)
                holder = self.pods[name]
                holder.node = None
                holder.ready_at = None
                self._bind(pod, node, now)
            else:
                break
        # Provision nodes for what is still pending, counting slots on nodes already launching.
        still = sum(1 for p in self.pods.values() if p.node is None)
        launching = sum(n.slots - len(n.pods) for n in self.nodes.values() if n.ready_at > now)
        slots = self.profile.replicas_per_node
        for _ in range(max(0, -(-(still - launching) // slots))):
            self._new_node(now)
