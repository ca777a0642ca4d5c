"""The simulated fleet: pods in their roles, Inf2 nodes, cold starts and node provisioning.

It plays what the operator does with a policy's targets (active replicas, warm pods, node
placeholders) by calling the operator's own fleet plan, not a copy of it (DESIGN.md: no rule is
written twice): each reconcile builds the operator's pod views from the simulated pods (Running once
the node has the image, i.e. loading; Pending while pulling or unbound), calls
:func:`neuronfleet.planning.fleet.plan_fleet` and plays its actions on them (a create adds a pod, a
promotion makes a pod active, serving after ``promote_seconds`` when loaded, a demotion into the
pool makes it warm, a drain takes it out of service at once and deletes it after
``drain_seconds``, a delete frees its slot at once), again while the plan has actions left. So
scale-up promotes ready warm pods first, a scale-down keeps the unready pods furthest along and
moves surplus ones (loaded or loading) into the warm pool while it has room, and the pool and the
placeholders shrink, as the operator does.

Only who picks the ready active pods a scale-down drains differs by policy
(:mod:`neuronfleet.sim.scaledown`, plugged in as the plan's drain order): ours in
:func:`neuronfleet.planning.promotion.drain_order` (fewest pods on a node first: it empties nodes);
HPA, KEDA, Knative KPA and a static fleet in a ReplicaSet's rank (pods on the nodes holding the most
of the Deployment's pods first: it spreads deletions, so at two or more replicas per node it leaves
nodes partly full and billed); Ray Serve whole nodes at a time, fewest replicas first. At one
replica per node the ReplicaSet's order takes the pods the operator's order takes. A deleted
starting pod's node keeps being billed: a node Karpenter is launching cannot be recalled (it comes
up, then empty consolidation removes it after ``empty_node_seconds``), and a ready node whose pod
was pulling loses the pull. This is why a controller whose scale-down window (HPA's 300 s) is
shorter than a cold start (~450 s) pays for launches that never serve: the real controllers do the
same. The simulator models one revision: no rollout.

The simulated cluster:

- a new pod binds to a free slot on a ready node, preempting a placeholder if needed; without one
  it waits for a node Karpenter-style provisioning starts for it. Its cold start is scheduling +
  image pull (only while the node has no image yet) + runtime init + artifact load + warm-up;
- node placeholders are low-priority pods running the server image (so their node pulls the image
  ahead); they only hold a slot;
- a node with nothing on it for ``empty_node_seconds`` is removed (consolidation); nodes are billed
  per second from launch to removal, at least :data:`MIN_BILLED_SECONDS` (EC2's minimum).

Speed: what the fleet holds changes only at events, so :meth:`Fleet.counts` and
:meth:`Fleet.next_event` are cached until the next change, a decision repeating the current
targets on an unchanged fleet is a no-op (the reconcile is idempotent between events), and each
pod's view for the plan is kept until what it shows changes.

All durations come from the profile's distributions on one seeded generator: same seed, same run.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import numpy as np

from neuronfleet.planning.fleet import (
    Action,
    CreatePlaceholder,
    CreatePod,
    FleetPlan,
    FleetPolicy,
    FleetTarget,
    OrderFunction,
    PodView,
    Relabel,
    plan_fleet,
)
from neuronfleet.planning.labels import ArtifactRevision
from neuronfleet.planning.promotion import NO_NEIGHBOURS
from neuronfleet.planning.rounding import ceil_whole
from neuronfleet.sim.profiles import Profile
from neuronfleet.sim.scaledown import ORDERS, Order, ReadyPod, ScaleDownBy

Role = Literal["active", "warm", "placeholder"]
INF = float("inf")
#: EC2 bills Linux on-demand instances per second with a 60 s minimum.
MIN_BILLED_SECONDS = 60.0
#: What the operator's plan is given for the one simulated deployment: one revision, one template
#: (the simulator models no rollout).
DEPLOYMENT = "sim"
TEMPLATE = "sim"
ARTIFACT = ArtifactRevision("sim", "s3://sim/artifact", "")
#: Simulated second 0 as the plan's clock.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
#: The epoch as a POSIX timestamp: the deleters date pods in seconds from it.
_EPOCH_S = EPOCH.timestamp()
#: Every field of a :class:`PodView` at the default its ``__init__`` gives, which
#: :meth:`Fleet._new_view` starts from.
_VIEW_DEFAULTS: dict[str, Any] = dict(vars(PodView(name="", role="active")))
#: Plans applied per reconcile at most: one usually leaves nothing to do; a second settles what
#: the first made possible (a pod it bound).
PLAN_PASSES = 3


@functools.lru_cache(maxsize=4096)
def _moment(seconds: float) -> datetime:
    """Simulated ``seconds`` as the plan's clock (kept for the last few thousand: the pods made at
    one reconcile share their creation time, and each view of a pod shows it again)."""
    return EPOCH + timedelta(seconds=seconds)


def _deleter_order(order: Order, known: dict[str, tuple[PodView, ReadyPod]]) -> OrderFunction:
    """A deleter's order (:mod:`neuronfleet.sim.scaledown`) as the plan's drain order: who takes
    the ready serving pods a scale-down drains when the policy's pods belong to a ReplicaSet or
    Ray Serve rather than to the operator. Unready candidates (the plan ranks them too, then sorts
    them by progress) are dated by their creation. ``known``: each pod's view and the deleters'
    record of it, made again only for a new view (a plan ranks most pods several times, and a
    Knative run plans a million pods' scale-downs)."""

    def drain(
        pods: Sequence[PodView],
        active: Sequence[PodView],
        now: datetime,
        beside: Sequence[PodView] = (),
        *,
        neighbours: Mapping[str, int] = NO_NEIGHBOURS,
    ) -> list[PodView]:
        if len(pods) <= 1:
            return list(pods)
        by_name = {p.name: p for p in pods}
        every = {p.name: p for group in (pods, active, beside) for p in group}
        on_node = Counter(p.node for p in every.values() if p.node is not None and p.role != "placeholder")
        ready = []
        for p in pods:
            seen = known.get(p.name)
            if seen is None or seen[0] is not p:
                at = (p.ready_at or p.created_at or EPOCH).timestamp() - _EPOCH_S
                seen = known[p.name] = (p, ReadyPod(p.name, p.node or "", at))
            ready.append(seen[1])
        return [by_name[r.name] for r in order(ready, on_node)]

    return drain


@dataclass(slots=True)
class Node:
    name: str
    launched_at: float
    ready_at: float
    slots: int
    pods: set[str] = field(default_factory=set)
    image_at: float | None = None
    empty_since: float | None = None


@dataclass(slots=True)
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
        #: Each pod's view and the deleters' record of it (see :func:`_deleter_order`).
        self._ready_pods: dict[str, tuple[PodView, ReadyPod]] = {}
        # The operator's own plan; only the deleter of ready pods differs for other controllers.
        policy = FleetPolicy(min_drain_seconds=profile.drain_seconds, drain_grace_seconds=profile.drain_seconds)
        if scale_down != "operator":
            policy = FleetPolicy(
                min_drain_seconds=profile.drain_seconds,
                drain_grace_seconds=profile.drain_seconds,
                drain_order=_deleter_order(ORDERS[scale_down], self._ready_pods),
            )
        self._policy = policy
        self.empty_node_seconds = empty_node_seconds
        self.pods: dict[str, Pod] = {}
        self.nodes: dict[str, Node] = {}
        #: Pods draining: when they are gone, their names and their nodes.
        self.draining: list[tuple[float, str, str]] = []
        self._names = itertools.count()
        self.node_seconds = 0.0
        self.pod_seconds = 0.0
        self._accounted_at = 0.0
        #: Observed cold starts (seconds): pod bound-to-ready, and node launch-to-ready.
        self.pod_cold_starts: list[float] = []
        self.node_cold_starts: list[float] = []
        self.targets = (0, 0, 0)
        #: Each cold-start phase's duration, drawn from ``rng``.
        self._draw = {
            p: profile.cold_start.dist(p).sampler(rng) for p in ("node", "scheduling", "pull", "init", "load", "warmup")
        }
        #: Bumped on every change; keys the caches below.
        self.version = 0
        self._reconciled = -1
        #: The last :meth:`_survey`: (version, at, soonest change after it, counts at it).
        self._surveyed: tuple[int, float, float, FleetCounts] | None = None
        self._advanced_at = 0.0
        self._model_pods = (-1, 0)
        self._views: dict[str, tuple[tuple[object, ...], PodView]] = {}

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
            ready_at = now + self._draw["node"]()
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
                # Roles do not change with time: the survey as of the last accounting counts them
                # (the one the engine's last counts read, kept for this version).
                counts, _ = self._survey(self._accounted_at)
                self._model_pods = (self.version, counts.active + counts.warm + len(self.draining))
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
        return self._survey(now)[0]

    def next_event(self, now: float) -> float:
        """The next whole second at which the fleet changes by itself (a pod or node turning ready,
        a promotion, drain or removal ending). Changes take effect on whole seconds, as endpoint
        updates do, which merges the many events of a large scale-up."""
        _, soonest = self._survey(now)
        return soonest if soonest == INF else float(ceil_whole(soonest))

    def _survey(self, now: float) -> tuple[FleetCounts, float]:
        """The counts at ``now`` and the soonest change after it (a pod or node turning ready, a
        promotion, drain or removal ending), in one pass over the pods (both are asked at every
        version of the fleet, and a Knative run has millions of versions); kept for this version from
        ``now`` up to that change, when no event lies between (:meth:`counts`, :meth:`next_event` and
        :meth:`advance` share it)."""
        cached = self._surveyed
        if cached is not None and cached[0] == self.version and cached[1] <= now < cached[2]:
            return cached[3], cached[2]
        serving = active = warm_ready = warm = placeholders = starting = 0
        soonest = INF
        for pod in self.pods.values():
            ready_at = pod.ready_at
            if ready_at is None:
                ready = False
            elif ready_at <= now:
                ready = True
            else:
                ready = False
                if ready_at < soonest:
                    soonest = ready_at
            serving_at = pod.serving_at
            if serving_at is not None and now < serving_at < soonest:
                soonest = serving_at
            role = pod.role
            if role == "active":
                active += 1
                if not ready:
                    starting += 1
                elif serving_at is None or serving_at <= now:
                    serving += 1
            elif role == "warm":
                warm += 1
                if ready:
                    warm_ready += 1
            else:
                placeholders += 1
        for node in self.nodes.values():
            if now < node.ready_at < soonest:
                soonest = node.ready_at
            if node.empty_since is not None:
                soonest = min(soonest, max(now, node.empty_since + self.empty_node_seconds))
        for t, _, _ in self.draining:
            soonest = min(soonest, t)
        counts = FleetCounts(serving, active, warm_ready, warm, placeholders, len(self.nodes), starting)
        self._surveyed = (self.version, now, soonest, counts)
        return counts, soonest

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
        _, soonest = self._survey(self._advanced_at)
        previous, self._advanced_at = self._advanced_at, now
        if soonest > now and previous <= now:
            return  # nothing happened since the last advance
        self.version += 1
        for until, name, node_name in [d for d in self.draining if d[0] <= now]:
            self.draining.remove((until, name, node_name))
            self._free_slot(name, node_name, until)
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

    def _free_slot(self, pod_name: str, node_name: str, now: float) -> None:
        node = self.nodes.get(node_name)
        if node is not None and pod_name in node.pods:
            node.pods.discard(pod_name)
            if not node.pods:
                node.empty_since = now

    def _delete(self, pod: Pod, now: float, drain: bool = False) -> None:
        del self.pods[pod.name]
        self._views.pop(pod.name, None)
        self._ready_pods.pop(pod.name, None)
        if drain and pod.node is not None:
            self.draining.append((now + self.profile.drain_seconds, pod.name, pod.node))
        elif pod.node is not None:
            self._free_slot(pod.name, pod.node, now)

    def reconcile(self, now: float) -> None:
        self.version += 1
        self._reconcile(now)
        self._reconciled = self.version

    def _reconcile(self, now: float) -> None:
        """The operator's fleet plan (:func:`neuronfleet.planning.fleet.plan_fleet`) on the
        simulated pods, its actions played on them; repeated while it has any left (the operator
        reconciles again on every change), at most :data:`PLAN_PASSES` times."""
        for _ in range(PLAN_PASSES):
            if self._settled(now):
                break
            plan = self.plan(now)
            acted = False
            for action in plan.actions:
                acted |= self._apply(action, now)
            self.version += 1  # the survey the next pass's settled check reads is of the pods as they are now
            self._schedule(now)
            if not acted:
                return
        # Pods wait for nodes whatever the plan did: the ones that turned ready take them now.
        self._schedule(now)

    def plan(self, now: float) -> FleetPlan:
        """The operator's fleet plan for the simulated pods as they are at ``now``."""
        return plan_fleet(
            DEPLOYMENT,
            FleetTarget(TEMPLATE, ARTIFACT, *self.targets),
            [self._view(p, now) for p in self.pods.values()],
            _moment(now),
            self._policy,
            # A draining pod keeps its name until it is gone: a new pod must not take it.
            taken_names=[name for _, name, _ in self.draining],
        )

    def _settled(self, now: float) -> bool:
        """True only where the plan would have nothing to do: a shortcut for speed (the plan ranks
        every pod, and the fleet reconciles at every event), not a rule of its own. Each role is
        at its count, so the plan keeps every pod in its role, unless a ready warm pod could take
        the place of an unready active one (the plan swaps them). All pods are current and none is
        broken or visibly draining here, the cases where the plan would act on pods at their count.
        The counts are the survey's (:meth:`_survey`), which the next decision reads as they are.
        ``tests/unit/test_sim_fleet_parity.py`` checks it against the plan."""
        counts, _ = self._survey(now)
        if (counts.active, counts.warm, counts.placeholders) != self.targets:
            return False
        return not (counts.starting_active and counts.warm_ready)

    def _view(self, pod: Pod, now: float) -> PodView:
        """The pod as the operator observes it: Running once its node has the image (loading),
        Pending while bound and pulling or unbound. Kept until what it shows changes: a plan
        views every pod, and the fleet is planned at every change of the targets."""
        node = self.nodes.get(pod.node) if pod.node is not None else None
        running = node is not None and node.image_at is not None and node.image_at <= now
        ready = pod.ready(now) if pod.role != "placeholder" else pod.node is not None
        key = (pod.role, pod.node, node is not None, running, ready, pod.created_at, pod.ready_at)
        cached = self._views.get(pod.name)
        if cached is not None and cached[0] == key:
            return cached[1]
        view = self._new_view(pod, node, running, ready)
        self._views[pod.name] = (key, view)
        return view

    @staticmethod
    def _new_view(pod: Pod, node: Node | None, running: bool, ready: bool) -> PodView:
        """The view of ``pod``, as ``PodView(...)`` makes it. Not made by its ``__init__``: a frozen
        dataclass sets each of its 24 fields through ``object.__setattr__`` (~5 µs a view), and a
        Knative run of the 14-day trace makes millions of views (its limit cycle launches ~945,000
        pods). Its fields are filled as ``__init__`` fills them (it has no ``__post_init__``), in a
        fifth of the time; ``tests/unit/test_sim_fleet.py`` checks the two are equal."""
        view = object.__new__(PodView)
        view.__dict__.update(
            _VIEW_DEFAULTS,
            name=pod.name,
            role=pod.role,
            revision=None if pod.role == "placeholder" else ARTIFACT.id,
            template=TEMPLATE,
            phase="Running" if running or (pod.role == "placeholder" and node is not None) else "Pending",
            ready=ready,
            created_at=_moment(pod.created_at),
            ready_at=_moment(pod.ready_at) if ready and pod.ready_at is not None else None,
            node=pod.node,
        )
        return view

    def _apply(self, action: Action, now: float) -> bool:
        """Play one action of the plan on the simulated pods; False when it changes nothing."""
        if isinstance(action, CreatePod):
            self.pods[action.name] = Pod(action.name, action.role, now)
            return True
        if isinstance(action, CreatePlaceholder):
            self.pods[action.name] = Pod(action.name, "placeholder", now)
            return True
        pod = self.pods.get(action.name)
        if pod is None:
            return False
        if isinstance(action, Relabel):
            if action.role == action.previous_role:
                return False  # an annotation (a standby's stamp): nothing the simulator models
            if action.role == "draining":
                self._delete(pod, now, drain=True)
            elif action.role == "active":
                pod.role = "active"
                if pod.ready(now):
                    pod.serving_at = now + self.profile.promote_seconds
            elif action.role == "warm":
                pod.role = "warm"
                pod.serving_at = None
            return True
        self._delete(pod, now)
        return True

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
                node.image_at = now + self._draw["pull"]()
            pod.ready_at = now
            return
        start = now + self._draw["scheduling"]()
        if node.image_at is None:
            node.image_at = start + self._draw["pull"]()
        draw = self._draw
        ready = max(start, node.image_at) + (draw["init"]() + draw["load"]() + draw["warmup"]())
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
        # Only placeholders on nodes can be preempted (none beside the baselines' fleets).
        preemptible = any(p.role == "placeholder" and p.node is not None for p in self.pods.values())
        for node in self.nodes.values():
            if node.ready_at > now:
                continue
            free.extend([node] * (node.slots - len(node.pods)))
            if preemptible:
                held.extend(
                    (node, name)
                    for name in sorted(node.pods)
                    if name in self.pods and self.pods[name].role == "placeholder"
                )
        free.reverse()
        held.reverse()
        bound = 0
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
            bound += 1
        # Provision nodes for what is still pending, counting slots on nodes already launching.
        still = sum(1 for p in self.pods.values() if p.node is None)
        launching = sum(n.slots - len(n.pods) for n in self.nodes.values() if n.ready_at > now)
        slots = self.profile.replicas_per_node
        launches = max(0, -(-(still - launching) // slots))
        for _ in range(launches):
            self._new_node(now)
        if bound or launches:
            self.version += 1  # what the survey knew is gone
