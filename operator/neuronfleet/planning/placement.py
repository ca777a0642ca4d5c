"""Placement: which Inf2 instance type runs the replicas, and how many fit on a node (pure).

Inputs are a replica's needs (:class:`ReplicaNeeds`: NeuronCores, HBM, optional host CPU and
memory requests) and the allowed instance types; the output (:class:`PlacementPlan`) scores every
allowed type and picks the one with the lowest cost for the desired replica count.

How a node is shared (figures from :mod:`neuronfleet.planning.catalog`):

- NeuronCores: any count from 1 to a node's cores. Inf2 chips form a ring, and the Neuron
  scheduler extension allocates any number of contiguous cores on it: on Inf1/Inf2 it puts no
  restriction on the count, where Trn1's torus takes 1, 4, 8 or 16 devices (Neuron docs,
  ``deploy/infrastructure/scheduler.html`` and ``containers/tutorials/k8s-neuron-scheduler.html``:
  3 devices get 0,1,2, never 0,2,4). So like-sized replicas pack as ``node_cores // cores``: a
  12-core replica (tensor parallelism over a whole inf2.24xlarge) goes 1 per inf2.24xlarge and 2
  per inf2.48xlarge; 24 cores take a whole inf2.48xlarge. A replica of more than one core and
  fewer than its node's needs the extension: :func:`scheduler_warning` says so when the pods name
  no scheduler.
- HBM: each NeuronCore-v2 addresses 16 GiB (half its chip's 32 GiB). A replica whose ``hbmGiB``
  exceeds what its cores address does not fit anywhere; otherwise ``node_hbm // hbm``.
- Host CPU and memory: what is left of the node's *allocatable* (kubelet and system reservations
  already removed, per Karpenter's table) after the allowance for the node's DaemonSets
  (:class:`Headroom`: the operator's ``--daemonset-headroom-cpu`` / ``--daemonset-headroom-memory``,
  chart ``operator.daemonSetHeadroom``; :data:`DAEMONSET_HEADROOM` when not given). Without an
  explicit request a replica gets the share of that matching its share of the NeuronCores (8 of
  12 cores -> 8/12 of the CPU and memory), so a neighbour on the remaining cores still gets its
  own share. With a request, ``usable // request`` limits packing. The allowance is passed in, as
  every input here: DaemonSets that request more than it leave the node's last replica Pending.

Cost: ``nodes = ceil(pods / replicas_per_node)``, ``$/h = nodes x on-demand price``, where the pods
are every replica-sized pod the fleet runs on the type: active replicas, warm pods and node
placeholders (a placeholder requests what a replica does). The operator and ``neuronfleet plan``
pass that sum as ``replicas``, and the replicas that serve as ``serving``: $ per million inferences
divides the cost by their throughput alone, since warm pods and placeholders answer no request.
0 pods take no node and cost nothing; the type is then still chosen as for one replica (where a
first replica would go, and the type the fleet stays on). The chosen type minimises $/h for the
pod count (equivalently $ per pod-hour). Costs within
:data:`COST_TIE_TOLERANCE` are a tie, broken by more nodes (a warm replica on another node
survives the loss of an active one's node, and replicas can spread across zones), then more
spare replica slots, then catalog order. With
``current_type`` set, the plan keeps that type while it costs at most ``keep_current_within``
more than the best, so a fleet does not move between types on every scale step; and, with
``may_move`` false, whatever the saving. A move is a new pod template, so a rollout of every pod
on nodes that do not exist yet: made in the middle of a scale-up it would replace the warm pods
the scale-up was to promote and give up the spare nodes the placeholders held. So the operator
moves a fleet only once its size has held (:func:`may_move_type`, :data:`TYPE_MOVE_SETTLE_SECONDS`).

A single instance type serves the whole fleet: pods carry one required instance-type affinity.
Mixed fleets (e.g. one 48xlarge plus one 24xlarge for four 8-core replicas) are cheaper at some
counts but not considered.

:func:`check_fits` returns the problems (field path first) when no allowed type holds a replica;
the operator's status uses it, and :mod:`neuronfleet.planning.fit` (``neuronfleet validate``,
``simulate --policy``) starts with it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from fractions import Fraction
from typing import Literal

# HBM_GIB_PER_NEURONCORE (16: half of its chip's 32 GiB) is the API's figure, re-exported for planning.
from neuronfleet.api.v1alpha1 import HBM_GIB_PER_NEURONCORE as HBM_GIB_PER_NEURONCORE
from neuronfleet.api.v1alpha1 import MAX_NEURONCORES_PER_REPLICA, QUANTITY_PATTERN, InferenceDeploymentSpec
from neuronfleet.planning.catalog import INF2_INSTANCE_TYPES, InstanceType

#: Costs closer than this fraction are a tie (2 x 24xlarge and 1 x 48xlarge differ by $0.00001/h).
COST_TIE_TOLERANCE = 0.001


@dataclass(frozen=True)
class Headroom:
    """Host resources left for DaemonSets on every node (not given to replicas).

    An operator setting (``neuronfleet run --daemonset-headroom-cpu/--daemonset-headroom-memory``,
    chart ``operator.daemonSetHeadroom``): the DaemonSets a cluster runs on its Inf2 nodes are its
    own (CloudWatch or Datadog agents, log shippers, security scanners), so the sum of their
    requests is measured per cluster (docs/install-eks.md says how).
    """

    cpu_millis: int
    memory_mib: int


#: The allowance when none is configured. DaemonSets of an EKS Inf2 node: aws-node (VPC CNI),
#: kube-proxy, the Neuron device plugin, neuron-monitor, the EBS CSI node plugin, a log shipper.
#: Their requests add up to roughly 0.5 CPU and 0.5 GiB; a round margin rather than a measured
#: figure, hence a setting.
DAEMONSET_HEADROOM = Headroom(cpu_millis=500, memory_mib=512)
#: DAEMONSET_HEADROOM as the quantities the operator's flags and the chart take.
DAEMONSET_HEADROOM_CPU = "500m"
DAEMONSET_HEADROOM_MEMORY = "512Mi"

LimitingFactor = Literal["neuroncores", "hbm", "cpu", "memory"]


class QuantityError(ValueError):
    """A Kubernetes quantity string that cannot be read."""


_QUANTITY = re.compile(QUANTITY_PATTERN)
_BINARY_SI = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(quantity: str) -> tuple[Fraction, str]:
    """A Kubernetes quantity's exact value and its suffix ("" for none, "e" for an exponent).

    Raises QuantityError for what the API server would refuse, and for negative values.
    """
    match = _QUANTITY.match(quantity)
    if not match:
        raise QuantityError(f"{quantity!r} is not a Kubernetes quantity")
    number, suffix = Fraction(match[1]), match[2] or ""
    if suffix in _BINARY_SI:
        return number * _BINARY_SI[suffix], suffix
    if suffix in _DECIMAL_SI:
        return number * Fraction(10) ** _DECIMAL_SI[suffix], suffix
    if suffix:
        return number * Fraction(10) ** int(suffix[1:]), "e"
    return number, ""


# Hand-written rather than kubernetes.utils.parse_quantity: planning may not import the
# Kubernetes client, and two units (millicores, MiB) are all placement needs.
def parse_cpu_millis(quantity: str) -> int:
    """CPU quantity ("2", "500m", "1.5", "1e3") in millicores, rounded up."""
    try:
        cores, suffix = parse_quantity(quantity)
    except QuantityError:
        cores, suffix = Fraction(0), "invalid"
    # "2Gi" CPUs is a quantity Kubernetes takes, and always a mistake.
    if suffix == "invalid" or suffix in _BINARY_SI:
        raise QuantityError(f"{quantity!r} is not a CPU quantity (e.g. 2, 1.5 or 500m)")
    return math.ceil(cores * 1000)


def parse_memory_mib(quantity: str) -> int:
    """Memory quantity ("4Gi", "512Mi", "2G", "1e9", bytes) in MiB, rounded up."""
    try:
        size, _ = parse_quantity(quantity)
    except QuantityError:
        raise QuantityError(f"{quantity!r} is not a memory quantity (e.g. 4Gi, 512Mi or 2G)") from None
    return math.ceil(size / 2**20)


def headroom_from_quantities(cpu: str, memory: str) -> Headroom:
    """The DaemonSet allowance from Kubernetes quantities ("500m", "512Mi"). Raises QuantityError."""
    return Headroom(cpu_millis=parse_cpu_millis(cpu), memory_mib=parse_memory_mib(memory))


@dataclass(frozen=True)
class ReplicaNeeds:
    """What one replica needs from a node."""

    neuron_cores: int
    hbm_gib: float | None = None
    cpu_millis: int | None = None
    memory_mib: int | None = None

    @property
    def effective_hbm_gib(self) -> float:
        """HBM the replica occupies: its own need, or all its cores address."""
        return self.hbm_gib if self.hbm_gib is not None else self.neuron_cores * HBM_GIB_PER_NEURONCORE

    def describe(self) -> str:
        parts = [f"{self.neuron_cores} NeuronCore{'s' if self.neuron_cores != 1 else ''}"]
        if self.hbm_gib is not None:
            parts.append(f"{self.hbm_gib:g} GiB HBM")
        if self.cpu_millis is not None:
            parts.append(f"{self.cpu_millis}m CPU")
        if self.memory_mib is not None:
            parts.append(f"{self.memory_mib}Mi memory")
        return " + ".join(parts)


def needs_from_spec(spec: InferenceDeploymentSpec) -> ReplicaNeeds:
    """A replica's needs as the spec states them. Raises QuantityError on unreadable quantities."""
    runtime = spec.runtime
    return ReplicaNeeds(
        neuron_cores=spec.model.neuron_cores_per_replica,
        hbm_gib=spec.model.hbm_gib,
        cpu_millis=parse_cpu_millis(runtime.cpu) if runtime.cpu else None,
        memory_mib=parse_memory_mib(runtime.memory) if runtime.memory else None,
    )


@dataclass(frozen=True)
class Candidate:
    """One instance type scored for a pod count."""

    instance_type: InstanceType
    #: Replica-sized pods placed: active replicas, warm pods and node placeholders.
    replicas: int
    replicas_per_node: int
    limited_by: LimitingFactor | None
    #: Requests of each replica on this type (explicit, or its share of the node).
    cpu_millis_per_replica: int
    memory_mib_per_replica: int
    #: Why the type does not hold one replica; empty when it fits.
    problems: tuple[str, ...] = ()
    throughput_rps_per_replica: float | None = None
    #: Of ``replicas``, those that serve requests (None: all of them).
    serving: int | None = None

    @property
    def name(self) -> str:
        return self.instance_type.name

    @property
    def fits(self) -> bool:
        return self.replicas_per_node >= 1

    @property
    def nodes(self) -> int:
        if not self.fits:
            return 0
        return math.ceil(self.replicas / self.replicas_per_node)

    @property
    def spare_slots(self) -> int:
        """Replica slots on the planned nodes beyond the replica count."""
        return self.nodes * self.replicas_per_node - self.replicas

    @property
    def usd_per_hour(self) -> float:
        return self.nodes * self.instance_type.usd_per_hour

    @property
    def usd_per_replica_hour(self) -> float:
        return self.usd_per_hour / self.replicas if self.replicas else 0.0

    @property
    def serving_replicas(self) -> int:
        return self.replicas if self.serving is None else self.serving

    @property
    def usd_per_million_inferences(self) -> float | None:
        """Cost of a million inferences when every serving replica runs at the given throughput.

        The cost is that of every pod's nodes; the inferences are the serving replicas' only.
        """
        if not self.fits or not self.throughput_rps_per_replica or not self.serving_replicas:
            return None
        inferences_per_hour = self.serving_replicas * self.throughput_rps_per_replica * 3600
        return self.usd_per_hour / inferences_per_hour * 1e6


@dataclass(frozen=True)
class PlacementPlan:
    """Every allowed type scored for a pod count, and the chosen one with its reason."""

    needs: ReplicaNeeds
    #: Replica-sized pods placed (active, warm and placeholders); 0 takes no node.
    replicas: int
    candidates: tuple[Candidate, ...]
    chosen: Candidate | None
    reason: str
    #: Problems (field path first) when no allowed type holds a replica.
    problems: tuple[str, ...] = field(default=())

    @property
    def needs_contiguous_cores(self) -> bool:
        """Whether the chosen placement needs the Neuron scheduler extension to allocate its cores.

        The Neuron docs require the extension for pods that request more than one NeuronCore: it
        picks cores that are contiguous on the chip ring. A pod that takes every core of its node
        needs no choosing, and a 1-core pod is contiguous whatever core it gets. So: more than one
        core and fewer than the node's (which covers several multi-core replicas on one node).
        """
        if self.chosen is None:
            return False
        return 1 < self.needs.neuron_cores < self.chosen.instance_type.neuroncores


def score(
    needs: ReplicaNeeds,
    itype: InstanceType,
    replicas: int,
    throughput_rps: float | None = None,
    headroom: Headroom = DAEMONSET_HEADROOM,
    serving: int | None = None,
) -> Candidate:
    """How many replicas fit on one node of ``itype``, what limits it, and the cost of ``replicas``
    pods (``serving`` of them serve; None: all)."""
    usable_cpu = max(0, itype.allocatable_cpu_millis - headroom.cpu_millis)
    usable_memory = max(0, itype.allocatable_memory_mib - headroom.memory_mib)
    # A type with fewer cores than a replica already fails on cores: cap the share at the node.
    share = min(1.0, needs.neuron_cores / itype.neuroncores)
    cpu = needs.cpu_millis if needs.cpu_millis is not None else int(usable_cpu * share)
    memory = needs.memory_mib if needs.memory_mib is not None else int(usable_memory * share)

    def host_limit(usable: int, request: int) -> int:
        if request > 0:
            return usable // request
        # Nothing to divide by: the cores bound packing, unless the DaemonSet allowance (a setting)
        # takes the whole node, when a share would be a pod requesting no CPU or memory at all.
        return itype.neuroncores if usable > 0 else 0

    limits: list[tuple[int, LimitingFactor]] = [
        (itype.neuroncores // needs.neuron_cores, "neuroncores"),
        (int(itype.hbm_gib // needs.effective_hbm_gib), "hbm"),
        (host_limit(usable_cpu, cpu), "cpu"),
        (host_limit(usable_memory, memory), "memory"),
    ]
    per_node, limited_by = min(limits, key=lambda item: item[0])

    problems: list[str] = []
    if itype.neuroncores < needs.neuron_cores:
        problems.append(f"{itype.neuroncores} NeuronCores < {needs.neuron_cores}")
    if itype.hbm_gib < needs.effective_hbm_gib:
        problems.append(f"{itype.hbm_gib} GiB HBM < {needs.effective_hbm_gib:g} GiB")
    if cpu > usable_cpu:
        problems.append(f"{usable_cpu}m usable CPU < spec.runtime.cpu {cpu}m")
    elif usable_cpu == 0:
        problems.append(
            f"the DaemonSet allowance of {headroom.cpu_millis}m CPU leaves none of {itype.allocatable_cpu_millis}m"
        )
    if memory > usable_memory:
        problems.append(f"{usable_memory}Mi usable memory < spec.runtime.memory {memory}Mi")
    elif usable_memory == 0:
        problems.append(
            f"the DaemonSet allowance of {headroom.memory_mib}Mi memory leaves none of {itype.allocatable_memory_mib}Mi"
        )
    return Candidate(
        instance_type=itype,
        replicas=replicas,
        replicas_per_node=per_node,
        limited_by=limited_by if per_node >= 1 else None,
        cpu_millis_per_replica=cpu,
        memory_mib_per_replica=memory,
        problems=tuple(problems),
        throughput_rps_per_replica=throughput_rps,
        serving=serving,
    )


def _needs_problems(needs: ReplicaNeeds) -> list[str]:
    problems: list[str] = []
    addressable = needs.neuron_cores * HBM_GIB_PER_NEURONCORE
    if needs.hbm_gib is not None and needs.hbm_gib > addressable:
        # Advise only what the schema lets one request: more than a node's cores is no remedy.
        enough = math.ceil(needs.hbm_gib / HBM_GIB_PER_NEURONCORE)
        remedy = (
            f"request at least {enough} cores (spec.model.neuronCoresPerReplica)"
            if enough <= MAX_NEURONCORES_PER_REPLICA
            else f"no replica addresses more than {MAX_NEURONCORES_PER_REPLICA * HBM_GIB_PER_NEURONCORE} GiB "
            f"({MAX_NEURONCORES_PER_REPLICA} cores, a whole inf2.48xlarge)"
        )
        problems.append(
            f"spec.model.hbmGiB: {needs.hbm_gib:g} GiB exceeds the {addressable} GiB that "
            f"{needs.neuron_cores} NeuronCore(s) address ({HBM_GIB_PER_NEURONCORE} GiB each); {remedy}"
        )
    return problems


def plan_placement(
    needs: ReplicaNeeds,
    instance_types: Sequence[str],
    replicas: int,
    *,
    serving: int | None = None,
    throughput_rps: float | None = None,
    current_type: str | None = None,
    keep_current_within: float = 0.15,
    headroom: Headroom = DAEMONSET_HEADROOM,
    may_move: bool = True,
    standby_varies: bool = False,
) -> PlacementPlan:
    """Score each allowed type for ``replicas`` pods and choose the cheapest.

    ``replicas`` counts every replica-sized pod to place (active, warm, placeholders), ``serving``
    those of them that serve (None: all). 0 pods take no node and cost nothing on every type; the
    type is chosen as for one replica. ``instance_types`` must be catalog names (the API's enum
    guarantees it); unknown names raise KeyError. ``throughput_rps`` (per serving replica) fills in
    $ per million inferences. ``standby_varies``: the pods beyond ``serving`` come and go on
    their own (an Auto warm pool), so a fleet on ``current_type`` moves only where its serving
    replicas alone would save enough too.
    """
    # At 0 pods every type costs nothing, yet a type is still wanted: the one a first replica goes
    # on, which the status keeps as the fleet's sticky type, and whose fit and CPU share the checks
    # read. So the type is chosen as for one replica (the cheapest for it, not merely the first
    # allowed), and the counts and costs reported are those of the pods there are.
    planned = max(1, replicas)
    scored = tuple(
        score(needs, INF2_INSTANCE_TYPES[name], planned, throughput_rps, headroom, serving)
        for name in dict.fromkeys(instance_types)
    )
    candidates = scored if replicas == planned else tuple(replace(c, replicas=replicas) for c in scored)
    problems = _needs_problems(needs)
    fitting = [c for c in scored if c.fits]
    if problems or not fitting:
        if not fitting:
            details = "; ".join(f"{c.name}: {', '.join(c.problems)}" for c in candidates)
            problems.append(
                f"spec.placement.instanceTypes: no allowed instance type holds a replica of "
                f"{needs.describe()} ({details})"
            )
        return PlacementPlan(needs, replicas, candidates, None, "no allowed instance type fits", tuple(problems))

    order = [c.name for c in scored]
    best_cost = min(c.usd_per_hour for c in fitting)
    tied = [c for c in fitting if c.usd_per_hour <= best_cost * (1 + COST_TIE_TOLERANCE)]
    best = min(tied, key=lambda c: (-c.nodes, -c.spare_slots, order.index(c.name)))
    chosen = best
    current = next((c for c in fitting if c.name == current_type), None)
    saves_little = current is not None and current.usd_per_hour <= best.usd_per_hour * (1 + keep_current_within)
    if current is not None and current is not best and (saves_little or not may_move):
        chosen = current
    reason = _explain(chosen, best, fitting, tied, current, waits_to_move=not saves_little)
    standby = planned - serving if serving is not None and serving < planned else 0
    if standby_varies and chosen is best and current is not None and current is not best and standby:
        # A move replaces every pod, serving ones too, while an Auto pool's standby (warm pods,
        # placeholders) changes with its decisions: the fleet moves only where its serving replicas
        # alone would save enough too, so that standby coming and going never moves it back and forth.
        def serving_cost(candidate: Candidate) -> float:
            return replace(candidate, replicas=max(1, serving or 0)).usd_per_hour

        if serving_cost(current) <= min(serving_cost(c) for c in fitting) * (1 + keep_current_within):
            chosen = current
            reason = (
                f"{_head(current)}; kept the current type: {best.name} at "
                f"${best.usd_per_hour:.2f}/h is cheaper only with the {standby} standby pod(s) counted, which "
                "change with each warm-pool decision (a move replaces every pod)"
            )
    if replicas == 0:
        reason = f"no pod to place: 0 nodes, $0.00/h; chosen for a first replica: {reason}"
    return PlacementPlan(needs, replicas, candidates, candidates[scored.index(chosen)], reason, ())


def _head(chosen: Candidate) -> str:
    return (
        f"{chosen.name}: {chosen.replicas_per_node} replica(s) per node (limited by {chosen.limited_by}), "
        f"{chosen.nodes} node(s) for {chosen.replicas} pod(s) = ${chosen.usd_per_hour:.2f}/h "
        f"(${chosen.usd_per_replica_hour:.3f} per pod-hour)"
    )


def _explain(
    chosen: Candidate,
    best: Candidate,
    fitting: list[Candidate],
    tied: list[Candidate],
    current: Candidate | None,
    *,
    waits_to_move: bool = False,
) -> str:
    head = _head(chosen)
    if chosen is not best and chosen is current and waits_to_move:
        return (
            f"{head}; kept the current type while the fleet's size changes: {best.name} at "
            f"${best.usd_per_hour:.2f}/h is cheaper, and the fleet moves there once its size has held for "
            f"{TYPE_MOVE_SETTLE_SECONDS // 60:g} minutes (a move replaces every pod)"
        )
    if chosen is not best and chosen is current:
        return (
            f"{head}; kept the current type: the cheapest, {best.name} at ${best.usd_per_hour:.2f}/h, "
            "saves too little to move the fleet"
        )
    others = [c for c in fitting if c is not chosen]
    if not others:
        return f"{head}; the only allowed type that fits"
    if len(tied) > 1:
        names = ", ".join(c.name for c in tied if c is not chosen)
        return (
            f"{head}; ties on cost with {names}, chosen for more nodes: replicas and warm pods do not "
            "share a node's fate and can spread across zones"
        )
    runner_up = min(others, key=lambda c: c.usd_per_hour)
    return f"{head}; cheapest: next is {runner_up.name} at ${runner_up.usd_per_hour:.2f}/h"


#: A fleet moves to a cheaper instance type only once its desired size has held this long.
TYPE_MOVE_SETTLE_SECONDS = 1800


def may_move_type(last_scale_at: datetime | None, now: datetime, *, resizing: bool) -> bool:
    """Whether a fleet may move to another instance type now: not while it is being resized
    (``resizing``: this round changes its desired size), nor within :data:`TYPE_MOVE_SETTLE_SECONDS`
    of its last resize (``last_scale_at``; None: never resized)."""
    if resizing:
        return False
    return last_scale_at is None or (now - last_scale_at).total_seconds() >= TYPE_MOVE_SETTLE_SECONDS


def plan_for_spec(
    spec: InferenceDeploymentSpec,
    replicas: int,
    *,
    serving: int | None = None,
    throughput_rps: float | None = None,
    current_type: str | None = None,
    headroom: Headroom = DAEMONSET_HEADROOM,
    may_move: bool = True,
    standby_varies: bool = False,
) -> PlacementPlan:
    """:func:`plan_placement` for a spec's model, runtime requests and allowed types.

    ``replicas``: every pod to place (active, warm and placeholders), ``serving`` the active ones;
    ``headroom``: the operator's DaemonSet allowance (``BuilderConfig.daemonset_headroom``);
    ``may_move``: see :func:`may_move_type`.
    """
    return plan_placement(
        needs_from_spec(spec),
        spec.placement.instance_types,
        replicas,
        serving=serving,
        throughput_rps=throughput_rps,
        current_type=current_type,
        headroom=headroom,
        may_move=may_move,
        standby_varies=standby_varies,
    )


def check_fits(spec: InferenceDeploymentSpec, headroom: Headroom = DAEMONSET_HEADROOM) -> list[str]:
    """Problems ("field.path: message") that stop any allowed instance type holding one replica.

    ``headroom``: the operator's DaemonSet allowance, which a replica's explicit requests must fit beside.
    """
    try:
        needs = needs_from_spec(spec)
    except QuantityError as error:
        field_path = "spec.runtime.cpu" if "CPU" in str(error) else "spec.runtime.memory"
        return [f"{field_path}: {error}"]
    return list(plan_placement(needs, spec.placement.instance_types, 1, headroom=headroom).problems)


def scheduler_warning(plan: PlacementPlan, scheduler_name: str | None) -> str | None:
    """A warning when the chosen placement needs contiguous NeuronCores and no scheduler allocates them.

    ``scheduler_name`` is the scheduler the pods name: ``spec.placement.schedulerName``, else the
    operator's ``--neuron-scheduler`` (the builders' ``BuilderConfig.default_scheduler_name``); None
    or "" when neither is set. Placement cannot see the operator's setting, so the caller passes it.
    None when nothing is wrong: a scheduler is named, or the replicas need no contiguous cores
    (:attr:`PlacementPlan.needs_contiguous_cores`). A warning, not a problem: the pods are
    created either way.
    """
    if scheduler_name or not plan.needs_contiguous_cores or plan.chosen is None:
        return None
    chosen, cores = plan.chosen, plan.needs.neuron_cores
    return (
        f"replicas of {cores} NeuronCores on {chosen.name} ({chosen.instance_type.neuroncores} cores, room for "
        f"{chosen.replicas_per_node} per node) need the Neuron scheduler extension to get contiguous cores on "
        "the chip ring (the Neuron docs require it for pods taking more than one core but not a whole node), "
        "and their pods name no scheduler: set spec.placement.schedulerName, or the operator's "
        "--neuron-scheduler (chart: operator.neuronSchedulerName), to the extension's (AWS's Neuron chart "
        "names it my-scheduler)"
    )


#: What ``neuronfleet validate`` and ``plan`` add to :func:`scheduler_warning` when they were not
#: told the operator's setting: they run without it.
UNLESS_OPERATOR_SCHEDULER = (
    "; this holds unless the operator runs with a Neuron scheduler name (give it here with --neuron-scheduler)"
)


def problem_fields(problems: Sequence[str]) -> str:
    """The field paths that ``"spec.x: message"`` problems (:func:`check_fits`) name, once each."""
    paths = dict.fromkeys(p.split(":", 1)[0] for p in problems if p.startswith("spec."))
    return ", ".join(paths) or "spec.placement"
