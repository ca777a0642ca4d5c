"""The fleet plan: observed pods + desired counts -> the actions that close the gap (pure).

Call :func:`plan_fleet` with

- ``deployment``: the InferenceDeployment's name (pod names derive from it);
- ``target`` (:class:`FleetTarget`): the pod-template hash, the current artifact revision (``None``
  before the first compile: then no serving pod is created), desired active, warm and
  placeholder counts, and why serving pods are held (``hold_creations``, None: they are not);
- ``pods``: every pod of the deployment as a :class:`PodView` (the Kubernetes adapter builds them
  from pod objects: labels, phase, readiness, timestamps, node presence, in-flight requests);
- ``now`` and a :class:`FleetPolicy` (drain grace, rollout surge and progress deadline, optional
  ordering functions).

Helpers: :func:`policy_for_spec` (drain grace and wait, surge and progress deadline from the spec),
:func:`rollout_past_deadline` (the rule RolloutStalled reports), :func:`describe_action`
(the Event recording an action), :func:`summarize_unplanned` (the summary of a fleet no plan can be
made for: a spec that fits no instance type) and :func:`apply_actions` (the actions applied to a
list of views, for tests).

It returns a :class:`FleetPlan`: actions to apply **in list order** (promotions come before the
demotions they make safe; the creations come last, since the apply stops at the first one the API
server refuses (a quota, an admission policy), and none of the other actions waits on them: a pod
created now serves only once loaded, which a later plan sees) and a :class:`FleetSummary` of the
observed fleet for the status.

Rules (DESIGN.md, fleet model):

- *Current* serving pods match the target's artifact revision and template hash, and the manifest
  sha256 the artifact records (``PodView.artifact_sha256``, when one is recorded). The ``active``
  set is the best ``target.active`` of them, ranked ready active, ready warm, unready active (an
  unready warm pod is never promoted: it joins the Service once loaded); among unready pods the
  furthest along is kept first (running and loading, then bound and pulling, then unbound), then
  the oldest (a ReplicaSet deletes the newest first), so a scale-down never deletes a loading pod
  to keep one still waiting for a node, nor the pods closest to ready to keep newer ones. Scale-up promotes
  ready warm pods first (a label change). The warm set is the pool (``target.warm``) plus the
  loading pods that will complete the active set; a surplus ready active pod joins the pool
  rather than being deleted, sparing a cold start. Missing pods are created: as ``active`` up to
  the active deficit not already covered by loading warm pods or kept old actives, then as
  ``warm`` (refilling the pool).
- Surplus serving pods: ready active ones become ``draining`` (out of the Service; the
  ``drain-started-at`` annotation is written in the same patch); unready or warm ones are deleted.
  A draining pod is deleted ``min_drain_seconds`` (spec.runtime.drainDelaySeconds) after its drain
  started (so that Service endpoints, and load balancers that follow them, have dropped it before it
  gets SIGTERM) when it reports no in-flight work or its
  in-flight work is not observed (``PodView.in_flight`` None, as the operator observes pods): the
  model server finishes the requests it accepted after SIGTERM, within the pod's grace period, so
  keeping the pod longer only keeps its node. A pod that reports work in flight is kept until it
  has none, or until the drain grace period has passed.
- New revision (warm-then-swap): pods of the new revision are created as ``warm`` while the old
  actives serve; once ready they are promoted and old actives are demoted only as far as the
  count of ready active pods stays at ``min(ready active before this step, target.active)``, and
  ready old actives also fill the active slots no current pod fills (a lost pod's).
  ``FleetPolicy.max_surge`` (>0) limits how many new-revision pods load at once. The old warm pool
  goes as a Deployment with maxUnavailable 0 replaces its pods: a loaded (ready) outdated warm pod
  stays until a ready current pod takes its place in the pool (``target.warm`` less the ready
  current pods of the warm set are kept, best first by the promotion order), so no loaded standby
  is deleted before it is replaced while the new pods load. Each kept one has its own clock: the
  first plan that keeps it stamps it (a relabel to the same role writing the ``kept-since``
  annotation, ``PodView.kept_since``), and it goes once kept for ``progress_deadline_seconds``,
  since a new pod that never loads (unschedulable because the old pod holds the only spare node,
  crash-looping, its creation refused) would keep it for ever. Its own clock rather than the
  rollout's progress: a new pod's readiness flapping would restart that one. A pod current again
  (a rollback) has its stamp removed; any other relabel (a promotion) removes it too, and so does a
  hold of creations (nothing could replace the pod meanwhile: it gets the whole deadline after). An
  unschedulable pod alone releases none: a node autoscaler usually adds a node for it, and that
  wait is what the standby covers. A kept one is
  promoted into the active set as a ready current warm pod would be: into the slots the ready
  current and kept old actives leave, before the unready current actives (which join the pool),
  never beyond ``target.active``. Outdated warm pods still loading are deleted at once (they are
  no standby yet). The serving pods (draining ones aside) so stay within ``target.active +
  target.warm`` plus the current pods loading (which ``max_surge`` paces).
- The rollout's clock (RolloutStalled, :func:`rollout_past_deadline`): a rollout is in progress
  while serving pods (active or warm) of another revision or template than the target's remain.
  When it began is recorded (``rollout``: a :class:`RolloutRecord`, which the operator keeps in
  ``status.rollout`` and passes back) as a Deployment's Progressing condition keeps its time: the
  record read back is kept while the rollout goes on to the same target, made anew at ``now`` when
  the target differs (or none was read: see :func:`plan_fleet`), and dropped once no rollout is in
  progress; the summary returns the record to write. Counting from the record, not from the
  current pods' creation, a rollout whose new pods are never created (refused, held) still has a
  start, and a rollback to pods made long ago starts when the spec went back. It has progressed
  when a current pod became ready after that start.
- Failed or succeeded pods and pods whose node is gone are deleted (the latter with grace 0: no
  kubelet is left to confirm) and replaced. Pods being deleted count for nothing but keep their
  names.
- Names are deterministic: the lowest free slot of a revision (:mod:`.labels`). Together with
  counting every observed pod (pending ones included) this makes the plan idempotent: applying
  it and planning again on the result yields no actions, and a create repeated after a crash
  answers 409 instead of making a duplicate. Names held by pods the deployment does not control
  (a re-created deployment's predecessor awaiting garbage collection) are skipped.
- Problems are summarised for the status: unschedulable pods (the scheduler's message), pods
  stuck in ErrImagePull / ImagePullBackOff / CrashLoopBackOff, and pods no scheduler has acted
  on within ``FleetPolicy.scheduling_timeout_seconds`` (e.g. a ``schedulerName`` nobody runs).
- Placeholders (low-priority pods holding spare Inf2 capacity) are kept at ``target.placeholders``
  for the current template; they do not depend on the artifact, so they may be created while
  the model still compiles. A surplus goes in :func:`neuronfleet.planning.promotion.release_order`:
  unbound ones first, then those on nodes no serving pod stays on, the emptiest node first, so
  the placeholders kept sit beside serving pods and a node left empty can be consolidated.
- Which pods a shrink keeps (active set, pool, placeholders) is chosen by the orders of
  :mod:`.promotion` counting every pod of the deployment on each node (active, warm, placeholder;
  draining ones are leaving) and the pods of other deployments there (``neighbours``: several
  models share the Inf2 nodes), so what is drained or deleted empties whole nodes: a warm pod, a
  placeholder or another model's pod left alone keeps a node billed as surely as a serving pod.
  Where the plan deletes
  some of those pods, a node counts only the ones that stay: the pool counts those it keeps as it
  picks them, and a scale-down's active set counts the warm pods the pool will keep; both count
  only the placeholders that will stay (of the kept template, up to ``target.placeholders``).
- Held creations: while ``target.hold_creations`` says why (the served artifact is known gone from
  the store, so a new pod could not load it and would crash-loop), no serving pod is created; every
  other rule applies as usual (pods already loaded keep serving and are promoted, demoted, drained;
  broken pods are deleted; placeholders, which load no model, are kept and made). With
  ``target.hold_placeholders`` no placeholder is made either (a CPU limit below the request refuses
  them as it does the serving pods; no artifact can be compiled, so none would be used), and with
  no ``target.artifact`` (nothing serves) the placeholders there are deleted too. The pods that
  would have been created are counted in the summary with that reason, each where it belongs:
  ``held_active`` (the active deficit), ``held_rollout`` (new-revision pods that would replace the
  outdated actives still serving),
  ``held_warm`` (the pool's own deficit, never more than ``target.warm``) and ``held_placeholders``.
  A held rollout keeps the old standby it cannot replace by the same rule as any rollout (but the
  deadline releases none: nothing could replace it), and more: its outdated warm pods still
  loading stay too (after the loaded ones, within the same room), as does an outdated active not
  ready for a moment, within the active deficit, and, with ``hold_placeholders``, placeholders of
  either template (those on a node first, up to ``target.placeholders``); once the hold ends the
  rollout replaces them as usual.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cached_property
from typing import Literal, Protocol, TypedDict

from neuronfleet.api.v1alpha1 import InferenceDeploymentSpec
from neuronfleet.planning.labels import (
    ArtifactRevision,
    FleetRevision,
    Role,
    placeholder_pod_name,
    serving_pod_name,
)
from neuronfleet.planning.promotion import NO_NEIGHBOURS, PodInfo, drain_order, promotion_order, release_order
from neuronfleet.planning.reasons import STUCK_WAITING_REASONS, Event, Reason
from neuronfleet.planning.times import rfc3339

PodPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]


@dataclass(frozen=True)
class PodView:
    """What the plan needs to know about one observed pod."""

    name: str
    role: Role
    revision: str | None = None
    template: str | None = None
    phase: PodPhase = "Pending"
    ready: bool = False
    deleting: bool = False
    #: When a deleted pod's grace period ends (its deletionTimestamp, which the API server sets to
    #: the deletion plus the grace period): the kubelet kills it then. None: not deleted, or unknown.
    grace_ends_at: datetime | None = None
    created_at: datetime | None = None
    ready_at: datetime | None = None
    node: str | None = None
    #: Zone of the pod's node (topology.kubernetes.io/zone), when known.
    zone: str | None = None
    #: The pod is bound to a node that no longer exists.
    node_lost: bool = False
    #: Requests the runtime is executing or queueing, when known (None: unknown).
    in_flight: int | None = None
    drain_started_at: datetime | None = None
    #: When a plan first kept this outdated warm pod as the rollout's standby (the
    #: ``kept-since`` annotation); meaningless on a current pod, which the plan clears.
    kept_since: datetime | None = None
    #: spec.schedulerName (None: the default scheduler).
    scheduler_name: str | None = None
    #: The scheduler's message when the pod is unschedulable.
    unschedulable_message: str | None = None
    #: A container waiting reason (ErrImagePull, CrashLoopBackOff...) and its message.
    waiting_reason: str | None = None
    waiting_message: str | None = None
    #: The manifest sha256 the pod's server is pinned to (None: a pod made before pinning).
    artifact_sha256: str | None = None
    #: The exit code of the container's last run, when it has exited (restarted or not).
    last_exit_code: int | None = None

    @property
    def broken(self) -> bool:
        """The pod will never serve again and must be replaced."""
        return self.phase in ("Failed", "Succeeded") or self.node_lost

    @cached_property
    def info(self) -> PodInfo:
        """The pod as the promotion and drain orders see it (made once: a plan orders a pod
        several times, and the simulator keeps a pod's view across plans while it is unchanged)."""
        ready_since = self.ready_at.timestamp() if self.ready_at is not None and self.ready else None
        return PodInfo(self.name, self.node, self.zone, ready_since, float(self.in_flight or 0), self.revision)


class OrderFunction(Protocol):
    """``order(candidates, active, now, beside)`` returns the candidates in preference order.

    ``active`` is every live active pod of the deployment (for zone and node counts); ``beside``
    every pod of the deployment on a node that is not leaving (warm pods, placeholders; those
    among the candidates or ``active`` count once), for node counts only; ``neighbours`` the other
    deployments' pods per node name, for node counts too. Promotion: the first is promoted first.
    Drain: the first is demoted first. The defaults are the rules of
    :mod:`neuronfleet.planning.promotion`, shared with the simulator.
    """

    def __call__(
        self,
        pods: Sequence[PodView],
        active: Sequence[PodView],
        now: datetime,
        beside: Sequence[PodView] = (),
        *,
        neighbours: Mapping[str, int] = NO_NEIGHBOURS,
    ) -> list[PodView]: ...


def _timestamp(moment: datetime | None) -> float:
    return moment.timestamp() if moment is not None else float("inf")


def _beside(beside: Sequence[PodView], *counted: Sequence[PodView]) -> list[PodInfo]:
    """The pods of ``beside`` not already among ``counted``, as descriptors."""
    names = {pod.name for group in counted for pod in group}
    return [pod.info for pod in beside if pod.name not in names]


def zone_aware_promotion_order(
    pods: Sequence[PodView],
    active: Sequence[PodView],
    now: datetime,
    beside: Sequence[PodView] = (),
    *,
    neighbours: Mapping[str, int] = NO_NEIGHBOURS,
) -> list[PodView]:
    """:func:`neuronfleet.planning.promotion.promotion_order` over pod views (the one promotion rule).

    Favours the zone with the fewest active pods, nodes already serving, then nodes holding the
    most of the deployment's pods, then warm pods over others (surplus actives the pool may keep).
    Candidates passed in are always of one revision, so its revision rule is moot.
    """
    if len(pods) <= 1:
        return list(pods)  # nothing to rank: the orders return their candidates
    by_name = {pod.name: pod for pod in pods}
    infos = [p.info for p in pods]
    demoted = {p.name for p in pods if p.role != "warm"}
    ordered = promotion_order(
        infos, [p.info for p in active], None, _beside(beside, pods, active), demoted, neighbours=neighbours
    )
    return [by_name[p.name] for p in ordered]


def zone_aware_pool_order(
    pods: Sequence[PodView],
    active: Sequence[PodView],
    now: datetime,
    beside: Sequence[PodView] = (),
    *,
    neighbours: Mapping[str, int] = NO_NEIGHBOURS,
) -> list[PodView]:
    """:func:`neuronfleet.planning.promotion.promotion_order` ranking what a shrinking pool keeps.

    As :func:`zone_aware_promotion_order`, but the candidates not kept are deleted: ``beside`` are
    the pods that stay (placeholders, kept old standby), and a node counts them, its active pods and
    the candidates kept so far, so the pool keeps no pod alone on a node it could have emptied.
    """
    if len(pods) <= 1:
        return list(pods)  # nothing to rank: the orders return their candidates
    by_name = {pod.name: pod for pod in pods}
    infos = [p.info for p in pods]
    demoted = {p.name for p in pods if p.role != "warm"}
    ordered = promotion_order(
        infos,
        [p.info for p in active],
        None,
        _beside(beside, pods, active),
        demoted,
        keeping=True,
        neighbours=neighbours,
    )
    return [by_name[p.name] for p in ordered]


def zone_aware_drain_order(
    pods: Sequence[PodView],
    active: Sequence[PodView],
    now: datetime,
    beside: Sequence[PodView] = (),
    *,
    neighbours: Mapping[str, int] = NO_NEIGHBOURS,
) -> list[PodView]:
    """:func:`neuronfleet.planning.promotion.drain_order` over pod views (the one drain rule).

    Favours the most crowded zone, the emptiest nodes (a node is billed whole: every pod of the
    deployment on it counts) and the least in-flight work; zone counts come from every active
    pod, only candidates are returned.
    """
    if len(pods) <= 1:
        return list(pods)  # nothing to rank: the orders return their candidates
    by_name = {pod.name: pod for pod in pods}
    others = [a.info for a in active if a.name not in by_name]
    ordered = drain_order([p.info for p in pods], None, others, _beside(beside, pods, active), neighbours)
    return [by_name[p.name] for p in ordered]


@dataclass(frozen=True)
class RolloutRecord:
    """When the rollout to one target began, carried from one plan to the next (``status.rollout``)."""

    #: The target's :attr:`FleetRevision.key` (its artifact revision, pinned manifest and template:
    #: what makes a pod current), so that a record of a rollout to another target is not resumed.
    target: str
    started_at: datetime
    #: When a pod of the target last became ready since the start (None: none has yet). Kept, not
    #: read again from the pods each time: the newest ready pod failing one readiness check, or
    #: lost with its node, must not erase the progress it made.
    progressed_at: datetime | None = None


@dataclass(frozen=True)
class FleetTarget:
    """The fleet the plan steers towards."""

    template: str
    artifact: ArtifactRevision | None
    active: int
    warm: int = 0
    placeholders: int = 0
    #: Why no serving pod may be created now (None: they may), e.g. the served artifact is gone from
    #: the store until it is republished. Said in the summary with the count of pods held.
    hold_creations: str | None = None
    #: The hold covers node placeholders too (they carry the replicas' resources, so the API server
    #: would refuse them as well); False: placeholders, which load no model, are still made.
    hold_placeholders: bool = False

    @property
    def revision(self) -> FleetRevision | None:
        return FleetRevision(self.artifact, self.template) if self.artifact is not None else None

    @property
    def placeholders_held(self) -> bool:
        """No placeholder may be created now: a hold is on and covers them."""
        return self.hold_creations is not None and self.hold_placeholders


@dataclass(frozen=True)
class FleetPolicy:
    """How the plan drains and rolls out."""

    #: A draining pod that reports work in flight is deleted after this long even so (the runtime's
    #: terminationGracePeriodSeconds gives it the same again after SIGTERM).
    drain_grace_seconds: float = 60.0
    #: A draining pod with nothing in flight, or whose in-flight work is not observed, waits this
    #: long, so that Service endpoints (and load balancers that follow them) have dropped it before
    #: it gets SIGTERM: spec.runtime.drainDelaySeconds (:func:`policy_for_spec`).
    min_drain_seconds: float = 5.0
    #: New-revision pods loading at once during a rollout; 0: as many as needed at once.
    max_surge: int = 0
    #: A rollout that has not progressed for this long is stalled (spec.rollout.progressDeadlineSeconds):
    #: the status reports RolloutStalled and the old standby is no longer kept for new pods.
    progress_deadline_seconds: float = 1800.0
    promotion_order: OrderFunction = zone_aware_promotion_order
    #: Which loaded pods the warm pool keeps (the rest are deleted or drained), first kept first;
    #: ``beside`` are the pods that stay whatever it keeps.
    pool_order: OrderFunction = zone_aware_pool_order
    drain_order: OrderFunction = zone_aware_drain_order
    #: A pod neither bound nor reported unschedulable after this long has no scheduler acting on
    #: it (e.g. a schedulerName nobody runs): reported as stuck.
    scheduling_timeout_seconds: float = 120.0


def policy_for_spec(spec: InferenceDeploymentSpec, base: FleetPolicy | None = None) -> FleetPolicy:
    """``base`` with the spec's drain grace (runtime.terminationGracePeriodSeconds), drain wait
    (runtime.drainDelaySeconds: how long endpoint removal takes to reach what routes to the pods, a
    load balancer's deregistration included), rollout surge and progress deadline."""
    return replace(
        base or FleetPolicy(),
        drain_grace_seconds=float(spec.runtime.termination_grace_period_seconds),
        min_drain_seconds=float(spec.runtime.drain_delay_seconds),
        max_surge=spec.rollout.max_surge,
        progress_deadline_seconds=float(spec.rollout.progress_deadline_seconds),
    )


# ------------------------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class CreatePod:
    """Create a serving pod of ``revision`` with this deterministic name and role."""

    name: str
    role: Literal["warm", "active"]
    revision: FleetRevision
    slot: int
    kind: Literal["create-pod"] = "create-pod"


@dataclass(frozen=True)
class Relabel:
    """Change a pod's role label (promote warm->active, demote active->draining or ->warm).

    When ``role`` is draining, ``drain_started_at`` goes into the drain annotation in the same
    patch. ``kept_since`` stamps a warm pod kept as a rollout's old standby (``kept-since``
    annotation); every other relabel clears that annotation.
    """

    name: str
    role: Role
    previous_role: Role
    reason: str
    drain_started_at: datetime | None = None
    kept_since: datetime | None = None
    kind: Literal["relabel"] = "relabel"


@dataclass(frozen=True)
class DeletePod:
    """Delete a serving pod. ``grace_period_seconds`` 0 for pods on vanished nodes."""

    name: str
    reason: str
    grace_period_seconds: int | None = None
    kind: Literal["delete-pod"] = "delete-pod"


@dataclass(frozen=True)
class CreatePlaceholder:
    """Create a node placeholder pod for ``template``."""

    name: str
    template: str
    slot: int
    kind: Literal["create-placeholder"] = "create-placeholder"


@dataclass(frozen=True)
class DeletePlaceholder:
    """Delete a node placeholder pod."""

    name: str
    reason: str
    grace_period_seconds: int | None = None
    kind: Literal["delete-placeholder"] = "delete-placeholder"


Action = CreatePod | Relabel | DeletePod | CreatePlaceholder | DeletePlaceholder


# ------------------------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class PodProblem:
    """A pod that does not progress, with the cluster's own words."""

    name: str
    reason: str
    message: str


@dataclass(frozen=True)
class FleetSummary:
    """The observed fleet, counted for the status (before the plan's actions)."""

    desired_active: int
    desired_warm: int
    desired_placeholders: int
    active: int
    ready_active: int
    #: Ready warm pods of the current revision.
    warm_ready: int
    warm: int
    #: Draining pods: not deleted yet, and deleted ones within their grace period (still finishing
    #: the requests their server accepted; see :func:`_terminating_draining`).
    draining: int
    placeholders: int
    #: Ready active pods of the current revision.
    current_ready_active: int
    #: Serving pods (warm, active) of older revisions or templates.
    outdated: int
    revision_known: bool
    unschedulable: tuple[PodProblem, ...] = ()
    stuck: tuple[PodProblem, ...] = ()
    replaced: tuple[PodProblem, ...] = ()
    #: Serving pods not bound to a node yet (placeholders excluded).
    unbound: int = 0
    #: Placeholders bound to a node (only those hold capacity).
    placeholders_bound: int = 0
    #: ... of them, those the plan keeps (None: as many; a surplus or replaced one is deleted).
    placeholders_kept_bound: int | None = None
    #: During a rollout: its target and when it began (the record to write back; None: no rollout
    #: is in progress).
    rollout: RolloutRecord | None = None
    #: During a rollout: when it last progressed (a pod of the current revision became ready after
    #: the rollout began), or its start when none has yet.
    rollout_progressed_at: datetime | None = None
    #: Serving pods the plan would have created as active / warm but holds, and why
    #: (:attr:`FleetTarget.hold_creations`).
    held_active: int = 0
    held_warm: int = 0
    #: New-revision pods that would replace the outdated active pods still serving (a rollout held).
    held_rollout: int = 0
    held_placeholders: int = 0
    hold_reason: str | None = None
    #: Warm pods of the old revision or template kept until new ones are loaded (in any rollout),
    #: placeholders of the old template kept while new ones are held.
    kept_outdated_warm: int = 0
    kept_outdated_placeholders: int = 0
    #: Active pods among :attr:`outdated`: none, every active is current (old standby may remain).
    outdated_active: int = 0
    #: Ready current pods the plan leaves in the warm pool (a ready warm pod it promotes is no
    #: standby after it); None: :attr:`warm_ready`.
    standby_ready: int | None = None

    @property
    def spare_nodes(self) -> int:
        """Placeholders on a node that stay: those the warm pool counts."""
        return self.placeholders_bound if self.placeholders_kept_bound is None else self.placeholders_kept_bound

    @property
    def held(self) -> int:
        """Every pod the plan holds."""
        return self.held_active + self.held_rollout + self.held_warm + self.held_placeholders

    @property
    def rolling_out(self) -> bool:
        return self.revision_known and self.outdated > 0

    @property
    def rolling_out_actives(self) -> bool:
        """Some active pod is outdated (old standby alone does not count: the actives are swapped)."""
        return self.revision_known and self.outdated_active > 0

    @property
    def rollout_started_at(self) -> datetime | None:
        """When the rollout in progress began (None: none is)."""
        return self.rollout.started_at if self.rollout is not None else None

    @property
    def pool_ready(self) -> int:
        """Ready current warm pods after the plan (see :attr:`standby_ready`)."""
        return self.warm_ready if self.standby_ready is None else self.standby_ready

    def rollout_stalled(self, now: datetime, deadline_seconds: float) -> bool:
        """A rollout that has not progressed for longer than ``deadline_seconds``
        (spec.rollout.progressDeadlineSeconds): see :func:`rollout_past_deadline`."""
        return self.rolling_out and rollout_past_deadline(
            self.rollout_started_at, self.rollout_progressed_at, now, deadline_seconds
        )

    @property
    def converged(self) -> bool:
        """Exactly the desired current pods are active and ready, the pool is full, nothing old."""
        return (
            self.revision_known
            and self.current_ready_active == self.desired_active == self.active
            and self.warm_ready >= self.desired_warm
            and self.outdated == 0
        )


def rollout_past_deadline(
    started_at: datetime | None, progressed_at: datetime | None, now: datetime, deadline_seconds: float
) -> bool:
    """The one stall rule: no pod of the new revision became ready within ``deadline_seconds`` of
    the last that did since the rollout began, or of its start (:class:`RolloutRecord`) when none
    has: a rollout whose new pods are never created is stalled too. A slow rollout (a small
    maxSurge over a large fleet) that keeps progressing is not stalled. RolloutStalled reports it;
    the old standby a rollout keeps has its own clock (``PodView.kept_since``), not this one."""
    since = progressed_at or started_at
    return since is not None and (now - since).total_seconds() > deadline_seconds


@dataclass(frozen=True)
class FleetPlan:
    """Actions to apply in order, and the observed fleet's summary."""

    actions: tuple[Action, ...]
    summary: FleetSummary


# -------------------------------------------------------------------------------------------- plan


def _free_slots(used_names: set[str], name_of: Callable[[int], str], count: int) -> list[tuple[int, str]]:
    slots: list[tuple[int, str]] = []
    slot = 0
    while len(slots) < count:
        name = name_of(slot)
        if name not in used_names:
            slots.append((slot, name))
        slot += 1
    return slots


def _progress(pod: PodView) -> int:
    """How far an unready pod is on its way to ready: running (loading) 2, on a node 1, waiting 0."""
    if pod.phase == "Running":
        return 2
    return 1 if pod.node is not None else 0


#: An unready pod whose creation time is unknown ranks as the newest (it has proven nothing).
_UNKNOWN_CREATION = datetime.max.replace(tzinfo=UTC)


def _loading_rank(pod: PodView) -> tuple[int, datetime]:
    """Unready pods, the one to keep first at the front: the furthest along (:func:`_progress`),
    then the oldest. Among pods equally far along the older one is the likelier to turn ready
    first, and a ReplicaSet deletes the newest first: the simulator's fleet does so too
    (``sim.fleet`` ``_deletion_rank``). Before, the drain order's name tie-break decided, and a
    scale-down during a scale-up deleted the pods closest to ready (review r17 finding 1)."""
    return (-_progress(pod), pod.created_at or _UNKNOWN_CREATION)


def _keepable_placeholders(placeholders: Sequence[PodView], target: FleetTarget) -> list[PodView]:
    """The ``placeholders`` that ``target`` may keep: those of its template. While the new
    template's placeholders are held, the old ones keep the spare nodes meanwhile, whatever their
    template; without an artifact nothing serves (nor will until the hold ends): none is kept."""
    holding = target.placeholders_held
    if holding and target.artifact is None:
        return []
    return [pod for pod in placeholders if holding or pod.template == target.template]


def _placeholders_kept(
    keepable: Sequence[PodView], target: FleetTarget, serving: Sequence[PodInfo], neighbours: Mapping[str, int]
) -> list[PodView]:
    """The ``target.placeholders`` of ``keepable`` that stay beside the ``serving`` pods that do.
    Deleted first: unbound ones (they hold nothing), then the earlier template's, then those on the
    nodes that can empty (no serving pod that stays, the fewest pods): the last ones stay."""
    by_name = {pod.name: pod for pod in keepable}

    def release_first(info: PodInfo) -> int:
        outdated_template = by_name[info.name].template != target.template
        return (0 if info.node is None else 2) + (0 if outdated_template else 1)

    released = release_order([pod.info for pod in keepable], release_first, serving, neighbours)
    return [by_name[info.name] for info in released[max(0, len(released) - target.placeholders) :]]


def _is_current(pod: PodView, revision: FleetRevision | None) -> bool:
    """The pod runs the target's artifact and template; pinned to the recorded manifest when one is
    recorded (a manifest republished under the same revision id rolls the pods to it, and the
    pods made before pinning are replaced once)."""
    if revision is None or pod.revision != revision.artifact.id or pod.template != revision.template:
        return False
    return not revision.artifact.sha256 or pod.artifact_sha256 == revision.artifact.sha256


def _problem_of(pod: PodView, now: datetime, policy: FleetPolicy) -> PodProblem | None:
    if pod.waiting_reason in STUCK_WAITING_REASONS:
        return PodProblem(pod.name, pod.waiting_reason or "", pod.waiting_message or "")
    if pod.node is not None or pod.unschedulable_message:
        return None  # bound, or the scheduler has said why not
    waited = (now - pod.created_at).total_seconds() if pod.created_at is not None else 0.0
    if waited >= policy.scheduling_timeout_seconds:
        scheduler = pod.scheduler_name or "default-scheduler"
        # Since when, not for how long: the message goes to the Scheduled and Degraded conditions,
        # and the seconds waited rewrote the status at every reconcile while nothing changed.
        since = f" since {rfc3339(pod.created_at)}" if pod.created_at is not None else ""
        return PodProblem(
            pod.name,
            "NotScheduled",
            f"no scheduler has acted on the pod{since}: is scheduler {scheduler!r} running?",
        )
    return None


def describe_action(action: Action) -> Event | None:
    """The Event recording ``action`` (one per action applied), or None for a relabel that keeps the
    role (the kept standby's stamp or its removal, a drain start recorded again): it changes no
    pod's part in the fleet, and posted as ``Demoted`` or ``Draining`` it would say one did. The
    status counts the kept standby, and its release is a ``DeletedPod`` that says why."""
    if isinstance(action, CreatePod):
        return Event(
            "Normal",
            Reason.CREATED_POD,
            f"created {action.role} pod {action.name} (revision {action.revision.artifact.id})",
        )
    if isinstance(action, CreatePlaceholder):
        return Event("Normal", Reason.CREATED_PLACEHOLDER, f"created node placeholder {action.name}")
    if isinstance(action, Relabel):
        if action.role == action.previous_role:
            return None
        reason = {"active": Reason.PROMOTED, "warm": Reason.DEMOTED}.get(action.role, Reason.DRAINING)
        return Event("Normal", reason, f"{action.name}: {action.previous_role} -> {action.role} ({action.reason})")
    if isinstance(action, DeletePlaceholder):
        return Event("Normal", Reason.DELETED_PLACEHOLDER, f"deleted node placeholder {action.name}: {action.reason}")
    return Event("Normal", Reason.DELETED_POD, f"deleted pod {action.name}: {action.reason}")


def plan_fleet(
    deployment: str,
    target: FleetTarget,
    pods: Iterable[PodView],
    now: datetime,
    policy: FleetPolicy | None = None,
    taken_names: Iterable[str] = (),
    rollout: RolloutRecord | None = None,
    neighbours: Mapping[str, int] = NO_NEIGHBOURS,
) -> FleetPlan:
    """The actions that move the observed ``pods`` towards ``target`` (see the module docstring).

    ``neighbours``: how many pods of other deployments (other models sharing the Inf2 nodes) are
    on each node, by node name: the orders count them in their node, so what a shrink removes
    empties a node counting those too.

    ``taken_names`` are names in use by pods that are not the fleet's: new pods skip them.
    ``rollout``: the record of the rollout in progress as the last plan returned it
    (:attr:`FleetSummary.rollout`, read back from the status); None when there was none, or none
    was recorded (an operator from before the record, upgraded mid-rollout): then the rollout is
    taken to begin now.
    """
    policy = policy or FleetPolicy()
    revision = target.revision
    observed = list(pods)
    used_names = {pod.name for pod in observed} | set(taken_names)
    live = [pod for pod in observed if not pod.deleting]
    promotions: list[Action] = []
    # The kept standby's stamps, clears and releases. Every list goes before the creations, which
    # the apply stops at when the API server refuses one (a quota the old pods fill): behind a
    # creation refused at every reconcile, the clock that ends the kept standby would never start
    # nor end, a replaced old standby or an unserving pod would hold its quota for ever, and a
    # scale-down would never demote, drain nor delete (a Hypothesis example: scaled to 0 active, the
    # surplus new active never joined the pool and the old warm pod it replaced was never let go).
    standby_marks: list[Action] = []
    creations: list[Action] = []
    demotions: list[Action] = []
    deletions: list[Action] = []
    replaced: list[PodProblem] = []
    held_active = held_warm = held_rollout = held_placeholders = 0

    # Broken pods: delete and do not count, so that the rest of the plan replaces them.
    healthy: list[PodView] = []
    for pod in live:
        if not pod.broken:
            healthy.append(pod)
            continue
        why = f"node {pod.node} is gone" if pod.node_lost else f"pod phase {pod.phase}"
        grace = 0 if pod.node_lost else None
        replaced.append(PodProblem(pod.name, "NodeLost" if pod.node_lost else pod.phase, why))
        if pod.role == "placeholder":
            deletions.append(DeletePlaceholder(pod.name, why, grace))
        else:
            deletions.append(DeletePod(pod.name, f"replacing: {why}", grace))

    serving = [pod for pod in healthy if pod.role != "placeholder"]
    current = [pod for pod in serving if _is_current(pod, revision) and pod.role in ("active", "warm")]
    outdated = [pod for pod in serving if not _is_current(pod, revision)]
    draining = [pod for pod in serving if pod.role == "draining"]
    # A node is freed only once no pod is left on it: the orders count every pod on a node in its
    # node (warm pods and placeholders too, and other deployments' pods: ``neighbours``), except the
    # draining ones, which are on their way out.
    on_nodes = [pod for pod in healthy if pod.node is not None and pod.role != "draining"]

    # The orders count zones over the pods that stay active, never over one this plan drains or
    # deletes (an outdated one in a rollout, a loading one pushed out of the active set): counted,
    # it tilts the zones, and the pods kept all end up in the zone it leaves. Nodes count those
    # pods too (``on_nodes``): until it is gone, a pod keeps its node as any other does.
    def ranked(pods_in: list[PodView], role: Role, *, ready: bool, staying: Sequence[PodView]) -> list[PodView]:
        picked = [pod for pod in pods_in if pod.ready == ready and pod.role == role]
        if role == "warm":
            ordered = policy.promotion_order(picked, staying, now, on_nodes, neighbours=neighbours)
        else:
            ordered = list(reversed(policy.drain_order(picked, staying, now, on_nodes, neighbours=neighbours)))
        # Unready pods: the furthest along first, then the oldest (a stable sort keeps the zone order
        # among equals: the pods one reconcile created share their creation time).
        return ordered if ready else sorted(ordered, key=_loading_rank)

    # The active set: the best current pods, ranked ready active (evened among themselves), ready
    # warm (into the zones those leave short), unready active. An unready warm pod is never
    # promoted: it joins the Service only once it is loaded.
    #
    # A scale-down (more ready actives than wanted) chooses the actives that stay counting on each
    # node only the current warm pods the pool keeps, not those this plan deletes: with the active
    # set full the pool holds ``target.warm`` loaded pods, its warm ones estimated in the pool order
    # beside every ready active. Counted, two warm pods the pool deleted made their node look the
    # fuller, and the active beside a placeholder that stays was drained: two nodes where one would
    # do. (Surplus actives may take the pool's places in the end: an estimate, never a churn, since
    # once applied no choice is left to make.)
    #
    # Likewise the placeholders: only those that stay count (the pool picks beside them, the active
    # set counts them on their nodes), estimated as the placeholders' own pass below picks them, beside
    # the ready current pods. Counted, a placeholder this plan deletes (of an earlier template, or
    # beyond ``target.placeholders``) kept the active beside it over a warm pod on a fuller node, and
    # its node stayed billed for that pod alone.
    keepable_on_nodes = _keepable_placeholders([pod for pod in on_nodes if pod.role == "placeholder"], target)
    beside_ranked = [pod.info for pod in current if pod.ready] if len(keepable_on_nodes) > 1 else []
    placeholders_staying = _placeholders_kept(keepable_on_nodes, target, beside_ranked, neighbours)
    ready_actives = [pod for pod in current if pod.ready and pod.role == "active"]
    active_beside = on_nodes
    if len(ready_actives) > target.active:
        ready_warm = [pod for pod in current if pod.ready and pod.role == "warm"]
        pool_kept = policy.pool_order(ready_warm, ready_actives, now, placeholders_staying, neighbours=neighbours)
        pool_kept = pool_kept[: target.warm]
        # A current warm pod or a placeholder counts only if kept: the pool or the placeholders' own
        # pass deletes the others.
        choices = {pod.name for pod in current if pod.role == "warm"}
        choices.update(pod.name for pod in on_nodes if pod.role == "placeholder")
        kept_names = {pod.name for pod in (*pool_kept, *placeholders_staying)}
        active_beside = [pod for pod in on_nodes if pod.name not in choices or pod.name in kept_names]
    if len(ready_actives) > target.active:
        active_set = list(reversed(policy.drain_order(ready_actives, (), now, active_beside, neighbours=neighbours)))
        active_set = active_set[: target.active]
    else:
        # None is cut, and their order decides nothing: the orders below count them (zones, nodes),
        # and a ready active pod needs no action. Ranking them was most of a steady fleet's plan.
        active_set = list(ready_actives)
    active_set += ranked(current, "warm", ready=True, staying=active_set)[: target.active - len(active_set)]
    active_set += ranked(current, "active", ready=False, staying=active_set)[: target.active - len(active_set)]

    # Outdated serving pods: keep ready old actives as long as the ready active count needs them,
    # and in the slots no current pod fills (a lost pod's, mid-rollout): they already serve, so
    # draining one to promote old standby in its place would spend the standby for nothing.
    ready_active_before = sum(1 for pod in serving if pod.role == "active" and pod.ready)
    must_stay_ready = min(ready_active_before, target.active)
    ready_current_active = sum(1 for pod in active_set if pod.ready)
    keep_old = max(0, must_stay_ready - ready_current_active, target.active - len(active_set))
    old_ready_active = [pod for pod in outdated if pod.role == "active" and pod.ready]
    old_actives_kept = list(
        reversed(policy.drain_order(old_ready_active, active_set, now, on_nodes, neighbours=neighbours))
    )[:keep_old]

    # The rollout's clock starts when the plan first sees a rollout to this target, not when its
    # oldest current pod was made: none may ever be made (creations refused or held), and a
    # rollback's current pods may have been made and ready long before the spec went back.
    rollout_record: RolloutRecord | None = None
    rollout_progressed_at: datetime | None = None
    if revision is not None and any(pod.role in ("active", "warm") for pod in outdated):
        if rollout is not None and rollout.target == revision.key and rollout.started_at <= now:
            rollout_record = rollout
            if rollout.progressed_at is not None and rollout.progressed_at > now:
                # Written by a clock ahead of this one: the progress was made, so it counts as made now
                # (as a kept-since or drain-started-at stamp in the future is), not as none at all.
                rollout_record = replace(rollout, progressed_at=now)
            elif rollout.progressed_at is not None and rollout.progressed_at < rollout.started_at:
                rollout_record = replace(rollout, progressed_at=None)  # before the rollout began: not believed
        else:
            # A new target, or no record read back: an operator upgraded mid-rollout from one that
            # kept none starts the clock here (a stall is reported up to one deadline late, once,
            # rather than at once for a rollback, as the pods' times would). A start in the future
            # (a skewed clock, a hand-written value) would delay the report by as much.
            rollout_record = RolloutRecord(revision.key, now)
        # Readiness gained before the start (a rollback's pods, ready long ago) is no progress; the
        # progress recorded stays when the pod that made it is unready or gone now.
        progress = [
            *(pod.ready_at for pod in current if pod.ready and pod.ready_at is not None),
            *((rollout_record.progressed_at,) if rollout_record.progressed_at is not None else ()),
        ]
        latest = max((t for t in progress if rollout_record.started_at < t <= now), default=None)
        if latest is not None and latest != rollout_record.progressed_at:
            rollout_record = replace(rollout_record, progressed_at=latest)
        rollout_progressed_at = latest or rollout_record.started_at
    # A rollout keeps the old revision's loaded standby as a Deployment with maxUnavailable 0
    # keeps its pods: a ready old warm pod goes only once a ready new pod takes its place in the
    # pool (new pods load for minutes on Neuron; meanwhile a burst or a lost pod would find nothing
    # to promote). Kept, it serves as standby does: a loaded one is promoted into the active set as
    # a current warm pod would be, before its unready actives (which join the pool), never beyond
    # the target. While creations are held nothing replaces the pool at all, so its loading pods
    # stay too (after the loaded ones).
    held = target.hold_creations is not None
    old_warm_promoted: list[PodView] = []
    old_warm_kept: list[PodView] = []
    expired: list[PodView] = []
    stamps: list[Action] = []
    if revision is not None or held:
        old_warm = [pod for pod in outdated if pod.role == "warm"]
        staying_now = [*active_set, *old_actives_kept]
        old_warm_ready = policy.promotion_order(
            [pod for pod in old_warm if pod.ready], staying_now, now, on_nodes, neighbours=neighbours
        )
        old_warm_promoted = old_warm_ready[: max(0, target.active - ready_current_active - len(old_actives_kept))]
        old_actives_kept += old_warm_promoted
        unready_in_set = [pod for pod in active_set if not pod.ready]
        # A promoted pod takes an unready one's place, and so does an old active kept beside it: a
        # promotion never leaves the actives beyond the target.
        crowded = len(active_set) + len(old_actives_kept) - target.active if old_warm_promoted else 0
        push = min(len(unready_in_set), max(len(old_warm_promoted), crowded))
        pushed_out = unready_in_set[len(unready_in_set) - push :]
        active_set = [pod for pod in active_set if pod not in pushed_out]
        if held:
            # An old active not ready for a moment (a container restarting, a probe failing) is
            # kept too, within the deficit: deleted, nothing could replace it until the hold ends.
            old_actives_kept += sorted(
                (pod for pod in outdated if pod.role == "active" and not pod.ready), key=_loading_rank
            )[: max(0, target.active - len(active_set) - len(old_actives_kept))]
        # The pool's room: what the ready current pods of the warm set leave of it (the loading ones
        # are no standby yet). Each kept pod has its own clock (``kept_since``, stamped by the plan
        # that first keeps it) and goes once it has been kept for the progress deadline: a new pod
        # that never loads (the old one holding the only spare node, a crash loop, a refused
        # creation) would keep it for ever. The pod's own clock, not the rollout's progress: a new
        # pod's readiness flapping would restart that one. An unschedulable pod is no sign alone: a
        # node autoscaler adds nodes for unschedulable pods, and that wait is what the standby covers.
        # While creations are held nothing could replace it: no clock runs, and a stamp from before
        # the hold is removed, so that the pod gets the whole deadline once new pods can be made.
        # By name, a pod's identity: views compared field by field made this quadratic in the fleet.
        in_active_set = {pod.name for pod in active_set}
        rest = [pod for pod in current if pod.name not in in_active_set]
        room = max(
            0, target.warm - min(sum(1 for pod in rest if pod.ready), target.active + target.warm - len(active_set))
        )
        standby = old_warm_ready[len(old_warm_promoted) :]
        if not held:
            expired = [
                pod
                for pod in standby
                if pod.kept_since is not None
                and (now - pod.kept_since).total_seconds() >= policy.progress_deadline_seconds
            ]
            standby = [pod for pod in standby if pod not in expired]
        loading_old = sorted((pod for pod in old_warm if not pod.ready), key=_loading_rank) if held else []
        old_warm_kept = (standby + loading_old)[:room]
        for pod in old_warm_kept:
            # A stamp in the future (a skewed clock, a hand-written value) would keep the pod past
            # the deadline by as much: it is written again as now.
            if not held and (pod.kept_since is None or pod.kept_since > now):
                why = "kept as standby until new pods are loaded or the progress deadline"
                if pod.kept_since is not None:
                    why += f" (its stamp {pod.kept_since.isoformat()} was in the future)"
                stamps.append(Relabel(pod.name, "warm", "warm", why, kept_since=now))
            elif held and pod.kept_since is not None:
                stamps.append(Relabel(pod.name, "warm", "warm", "new pods are held: the standby's deadline waits"))
    in_active_set = {pod.name for pod in active_set}
    rest = [pod for pod in current if pod.name not in in_active_set]
    warm_capacity = target.active + target.warm - len(active_set)
    promoted_why = "new pods are held" if held else "new pods are loading"
    for pod in old_warm_promoted:
        promotions.append(Relabel(pod.name, "active", "warm", f"promoted: {promoted_why}, the fleet needs it active"))
    if revision is not None:
        for pod in outdated:
            if pod.role == "draining" or pod in old_actives_kept or pod in old_warm_kept:
                continue
            if pod.role == "active" and pod.ready:
                demotions.append(
                    Relabel(pod.name, "draining", "active", "new revision: replaced", drain_started_at=now)
                )
            elif pod in expired:
                deadline = policy.progress_deadline_seconds
                why = f"new revision: old standby kept for the progress deadline ({deadline:g}s)"
                standby_marks.append(DeletePod(pod.name, why))
            else:
                deletions.append(DeletePod(pod.name, f"new revision: outdated {pod.role} pod"))

    # The warm set: the pool, plus the loading pods that will fill the active set when ready.
    staying = [*active_set, *old_actives_kept]
    # Unready pods of both roles are ranked together by how far along they are (a stable sort keeps
    # warm before active among equals), so an active pushed out while loading is never cut for a
    # warm pod still waiting for a node.
    unready_rest = sorted(
        ranked(rest, "warm", ready=False, staying=staying) + ranked(rest, "active", ready=False, staying=staying),
        key=_progress,
        reverse=True,
    )
    # The loaded pods, warm ones and surplus ready actives alike, are kept in the promotion order
    # (what the pool is for): those beside active pods and on the fullest nodes first, so the
    # pods deleted or drained are on the nodes that can empty. A warm pod alone on its node goes
    # before a surplus active beside one that stays, which joins the pool in its place. A node
    # counts only the pods that stay whatever the pool keeps (the placeholders that stay, as estimated
    # above; the old standby kept) and those it keeps, each as it is picked: the loaded
    # pods it cuts are deleted, and the loading ones go once it cuts any.
    stay_beside = [*placeholders_staying, *old_warm_kept]
    loaded = [pod for pod in rest if pod.ready and pod.role in ("warm", "active")]
    warm_set = (
        (policy.pool_order(loaded, staying, now, stay_beside, neighbours=neighbours) + unready_rest)[:warm_capacity]
        if warm_capacity > 0
        else []
    )
    surplus = [pod for pod in rest if pod not in warm_set]

    for pod in active_set:
        if pod.role != "active":
            promotions.append(Relabel(pod.name, "active", pod.role, "promoted: the fleet needs it active"))
    for pod in warm_set:
        if pod.role != "warm":
            demotions.append(Relabel(pod.name, "warm", pod.role, "demoted into the warm pool"))
        elif pod.kept_since is not None:
            # Current again (a rollback): a stale stamp would release it at once in the next rollout.
            standby_marks.append(Relabel(pod.name, "warm", "warm", "current again: no longer old standby"))
    standby_marks += stamps
    for pod in policy.drain_order(surplus, staying, now, on_nodes, neighbours=neighbours):
        if pod.role == "active" and pod.ready:
            demotions.append(Relabel(pod.name, "draining", "active", "scale-down: draining", drain_started_at=now))
        else:
            deletions.append(DeletePod(pod.name, f"scale-down: surplus {pod.role} pod"))

    # Draining pods: delete once drained or once the grace period has passed.
    for pod in draining:
        if pod.drain_started_at is None or pod.drain_started_at > now:
            # In the future (a skewed clock, a hand-written value), it would delay the deletion by as much.
            why = (
                "drain start was not recorded"
                if pod.drain_started_at is None
                else f"drain start {pod.drain_started_at.isoformat()} was in the future"
            )
            demotions.append(Relabel(pod.name, "draining", "draining", why, drain_started_at=now))
            continue
        elapsed = (now - pod.drain_started_at).total_seconds()
        if pod.in_flight == 0 and elapsed >= policy.min_drain_seconds:
            deletions.append(DeletePod(pod.name, "drained: no requests in flight"))
        elif pod.in_flight is None and elapsed >= policy.min_drain_seconds:
            # Waiting for a count nobody reports would keep the node for the whole grace period
            # and then give the pod that period again after SIGTERM.
            deletions.append(
                DeletePod(pod.name, "out of the Service: the model server finishes its accepted requests on SIGTERM")
            )
        elif elapsed >= policy.drain_grace_seconds:
            deletions.append(DeletePod(pod.name, f"drain grace period of {policy.drain_grace_seconds:g}s passed"))

    # Creations: the missing current pods, active up to the deficit, then warm.
    if revision is not None:
        needed = max(0, target.active + target.warm - len(active_set) - len(warm_set))
        missing = needed
        rolling_out = any(pod.role in ("active", "warm") for pod in outdated)
        if rolling_out and policy.max_surge > 0:
            # The surge bounds the pods loading at once: it paces creations, not what is held.
            loading = sum(1 for pod in active_set + warm_set if not pod.ready)
            missing = min(missing, max(0, policy.max_surge - loading))
        # Warm pods beyond the pool are already on their way into the active set.
        incoming = max(0, len(warm_set) - target.warm)
        active_deficit = target.active - len(active_set) - len(old_actives_kept) - incoming
        if target.hold_creations is not None:
            # Counted, not created: a new pod could not load the artifact (it would crash-loop), or
            # the API server would refuse it. The pods held beyond the active deficit first replace
            # the outdated actives (promoted once ready, as in a rollout), and only the rest is the
            # pool's: a rollout's replacements are not standby. All of them are counted: none
            # loads, so the surge that paces a rollout's creations bounds none of them.
            held_active = min(needed, max(0, active_deficit))
            rollout_need = max(0, target.active - len(active_set) - incoming - held_active)
            held_rollout = min(needed - held_active, rollout_need)
            held_warm = needed - held_active - held_rollout
        else:
            for index, (slot, name) in enumerate(
                _free_slots(used_names, lambda s: serving_pod_name(deployment, revision, s), max(0, missing))
            ):
                role: Literal["warm", "active"] = "active" if index < active_deficit else "warm"
                creations.append(CreatePod(name, role, revision, slot))

    # Placeholders.
    placeholders = [pod for pod in healthy if pod.role == "placeholder"]
    holding = target.placeholders_held
    holding_none = holding and target.artifact is None
    keepable = _keepable_placeholders(placeholders, target)
    # The serving pods count only where there are placeholders to rank (none beside most fleets).
    serving_kept = (
        [pod.info for pod in (*active_set, *old_actives_kept, *warm_set, *old_warm_kept)] if len(keepable) > 1 else []
    )
    kept_placeholders = _placeholders_kept(keepable, target, serving_kept, neighbours)
    for pod in placeholders:
        if pod not in kept_placeholders:
            if holding_none:
                reason = f"held: {target.hold_creations}"
            elif pod.template != target.template:
                reason = "placement changed"
            elif len(kept_placeholders) == target.placeholders and any(
                p.template != target.template for p in kept_placeholders
            ):
                reason = (
                    "not on a node: placeholders of the earlier placement on nodes are kept while new ones are held"
                )
            else:
                reason = "surplus placeholder"
            deletions.append(DeletePlaceholder(pod.name, reason))
    placeholders_missing = max(0, target.placeholders - len(kept_placeholders))
    if holding:
        held_placeholders = max(
            0, target.placeholders - sum(pod.template == target.template for pod in kept_placeholders)
        )
        placeholders_missing = 0
    for slot, name in _free_slots(
        used_names, lambda s: placeholder_pod_name(deployment, target.template, s), placeholders_missing
    ):
        creations.append(CreatePlaceholder(name, target.template, slot))

    summary = FleetSummary(
        desired_active=target.active,
        desired_warm=target.warm,
        desired_placeholders=target.placeholders,
        active=sum(1 for pod in serving if pod.role == "active"),
        ready_active=ready_active_before,
        warm_ready=sum(1 for pod in current if pod.role == "warm" and pod.ready),
        warm=sum(1 for pod in serving if pod.role == "warm"),
        draining=len(draining) + _terminating_draining(observed, now),
        placeholders=len(placeholders),
        current_ready_active=sum(1 for pod in current if pod.role == "active" and pod.ready),
        outdated=sum(1 for pod in outdated if pod.role != "draining"),
        revision_known=revision is not None,
        replaced=tuple(replaced),
        **_pod_problems(healthy, serving, placeholders, now, policy),
        rollout=rollout_record,
        rollout_progressed_at=rollout_progressed_at,
        held_active=held_active,
        held_warm=held_warm,
        held_rollout=held_rollout,
        held_placeholders=held_placeholders,
        hold_reason=target.hold_creations if held_active or held_warm or held_rollout or held_placeholders else None,
        placeholders_kept_bound=sum(1 for pod in kept_placeholders if pod.node is not None),
        kept_outdated_warm=len(old_warm_kept) if revision is not None else 0,
        kept_outdated_placeholders=sum(pod.template != target.template for pod in kept_placeholders),
        outdated_active=sum(1 for pod in outdated if pod.role == "active"),
        standby_ready=sum(1 for pod in warm_set if pod.ready),
    )
    return FleetPlan(tuple(promotions + standby_marks + demotions + deletions + creations), summary)


def summarize_unplanned(
    pods: Iterable[PodView],
    now: datetime,
    *,
    desired_active: int,
    desired_warm: int,
    desired_placeholders: int,
    revision_known: bool,
    policy: FleetPolicy | None = None,
    rollout: RolloutRecord | None = None,
) -> FleetSummary:
    """The observed fleet when no plan can be made for the spec (it fits no instance type, its
    requests cannot be read): nothing is changed, so every pod is counted as it is, as the last
    valid spec's. None is of the current spec (there is no template for it): no rollout is counted,
    and the ``rollout`` record read back is kept as it is (a spec fixed back to the same target
    goes on with the rollout's clock; another target starts a new one).
    """
    policy = policy or FleetPolicy()
    observed = list(pods)
    healthy = [pod for pod in observed if not pod.deleting and not pod.broken]
    serving = [pod for pod in healthy if pod.role != "placeholder"]
    placeholders = [pod for pod in healthy if pod.role == "placeholder"]
    active = [pod for pod in serving if pod.role == "active"]
    return FleetSummary(
        desired_active=desired_active,
        desired_warm=desired_warm,
        desired_placeholders=desired_placeholders,
        active=len(active),
        ready_active=sum(1 for pod in active if pod.ready),
        warm_ready=sum(1 for pod in serving if pod.role == "warm" and pod.ready),
        warm=sum(1 for pod in serving if pod.role == "warm"),
        draining=sum(1 for pod in serving if pod.role == "draining") + _terminating_draining(observed, now),
        placeholders=len(placeholders),
        current_ready_active=0,
        outdated=0,
        revision_known=revision_known,
        **_pod_problems(healthy, serving, placeholders, now, policy),
        rollout=rollout,
    )


def _terminating_draining(pods: Sequence[PodView], now: datetime) -> int:
    """Draining pods deleted and still within their grace period: their server finishes the
    requests it accepted after SIGTERM, so they still drain, though the plan counts them for
    nothing else (nothing waits for them: the kubelet ends them). One past its grace period is
    stuck (its node gone, its kubelet not answering), or one whose end is unknown: not counted, so
    that it cannot stay in the count for ever. Broken ones (node lost, server exited) finish nothing.
    """
    return sum(
        1
        for pod in pods
        if pod.deleting
        and pod.role == "draining"
        and not pod.broken
        and pod.grace_ends_at is not None
        and now < pod.grace_ends_at
    )


class _PodProblems(TypedDict):
    unschedulable: tuple[PodProblem, ...]
    stuck: tuple[PodProblem, ...]
    unbound: int
    placeholders_bound: int


def _pod_problems(
    healthy: Sequence[PodView],
    serving: Sequence[PodView],
    placeholders: Sequence[PodView],
    now: datetime,
    policy: FleetPolicy,
) -> _PodProblems:
    """What a summary says of the pods that are not where they should be, planned or not."""
    return _PodProblems(
        unschedulable=tuple(
            PodProblem(pod.name, "Unschedulable", pod.unschedulable_message)
            for pod in healthy
            if pod.unschedulable_message and pod.node is None
        ),
        stuck=tuple(problem for pod in healthy if (problem := _problem_of(pod, now, policy)) is not None),
        unbound=sum(1 for pod in serving if pod.node is None),
        placeholders_bound=sum(1 for pod in placeholders if pod.node is not None),
    )


# ------------------------------------------------------------------------------------ simulated apply


def apply_actions(
    pods: Sequence[PodView],
    actions: Iterable[Action],
    now: datetime,
    *,
    remove_deleted: bool = True,
) -> list[PodView]:
    """What the observed pods look like right after ``actions`` (no scheduling, no readiness change).

    Used by the property tests (the simulator calls :func:`plan_fleet` and plays the actions on its
    own pods, with their cold starts and drains: :mod:`neuronfleet.sim.fleet`). A create of an
    existing name changes nothing (the API server answers 409); deletions remove the pod, or only
    mark it ``deleting`` when ``remove_deleted`` is false (a pod with a grace period still shows
    until it ends).
    """
    by_name = {pod.name: pod for pod in pods}
    for action in actions:
        if isinstance(action, CreatePod):
            by_name.setdefault(
                action.name,
                PodView(
                    name=action.name,
                    role=action.role,
                    revision=action.revision.artifact.id,
                    template=action.revision.template,
                    created_at=now,
                    artifact_sha256=action.revision.artifact.sha256 or None,
                ),
            )
        elif isinstance(action, CreatePlaceholder):
            by_name.setdefault(
                action.name, PodView(name=action.name, role="placeholder", template=action.template, created_at=now)
            )
        elif isinstance(action, Relabel):
            if action.name in by_name:
                pod = by_name[action.name]
                drain = action.drain_started_at if action.role == "draining" else pod.drain_started_at
                kept = action.kept_since if action.role == "warm" else None
                by_name[action.name] = replace(pod, role=action.role, drain_started_at=drain, kept_since=kept)
        elif action.name in by_name:
            if remove_deleted:
                del by_name[action.name]
            else:
                by_name[action.name] = replace(by_name[action.name], deleting=True)
    return list(by_name.values())
