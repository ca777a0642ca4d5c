"""One reconcile's whole decision: (deployment, observation, memories) -> actions, status, Events (pure).

:func:`plan_reconcile` is what the operator decides each round and the only place it decides;
the adapters only read (:class:`~neuronfleet.planning.observation.Observation`) and write what it
returns. It reads no clock (``observation.now`` is the time) and no status other than the durable
memory (:class:`~neuronfleet.planning.observation.StatusMemory`). In order:

1. compile: use the stored artifact, start a Job, supersede Jobs of older requests, or report why
   there is none (:mod:`.compile`); an unservable spec is not compiled;
2. targets: the autoscaler at its interval and the warm pool (:func:`decide_targets`, the path the
   simulator's ``Ours`` policy must match: tests/unit/test_operator_sim_parity.py);
3. placement of the active and warm pods and the node placeholders (sticky to the remembered
   instance type; its nodes and $/h are what those pods take) and the fleet plan (:mod:`.fleet`), which
   creates no serving pod while the served artifact is known gone from the store (a new pod could
   not load it) until it is republished, nor any pod (placeholders included) while
   spec.runtime.cpuLimit is below the CPU request the placement gives each replica (the API server
   would refuse it: :mod:`.admission`; a compile Job is held likewise for spec.compile.cpuLimit);
   node placeholders are held (not made, those there deleted, not priced) while no artifact serves
   and none can be compiled, and no compile Job runs on
   (:func:`~neuronfleet.planning.compile.nothing_to_serve`);
4. status (:mod:`.status`), and the Events that the status change makes (:func:`status_events`).

After applying, :func:`status_after_apply` folds what the apply met (pods refused at admission,
API errors) into the status; the in-process memory keeps them until an apply succeeds, so a
refusal repeated every round changes nothing and writes nothing.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from neuronfleet.api.v1alpha1 import InferenceDeployment, InferenceDeploymentSpec, WarmPoolStatus
from neuronfleet.planning import coldstart, last_valid, scaling, warmpool
from neuronfleet.planning.admission import compile_cpu_limit_problem, serving_cpu_limit_problem
from neuronfleet.planning.compile import (
    CompileDecision,
    CompileObservation,
    CompileRequest,
    DanglingRecord,
    StoredArtifact,
    compile_succeeded,
    decide_compile,
    decide_unservable,
    inherits_legacy_failure,
    nothing_to_serve,
)
from neuronfleet.planning.fleet import (
    Action,
    FleetPlan,
    FleetPolicy,
    FleetSummary,
    FleetTarget,
    PodView,
    describe_action,
    plan_fleet,
    policy_for_spec,
    summarize_unplanned,
)
from neuronfleet.planning.labels import ArtifactRevision
from neuronfleet.planning.observation import DeploymentMemory, Observation, StatusMemory, scaling_due
from neuronfleet.planning.placement import (
    DAEMONSET_HEADROOM,
    Candidate,
    Headroom,
    QuantityError,
    check_fits,
    may_move_type,
    plan_for_spec,
    scheduler_warning,
)
from neuronfleet.planning.prometheus_queries import refused_fields, refused_queries
from neuronfleet.planning.reasons import Event, Reason, Refusal
from neuronfleet.planning.signals import MetricSnapshot
from neuronfleet.planning.status import (
    ConditionValue,
    LastScale,
    RefusedSpec,
    StatusInputs,
    autoscaler_status,
    build_status,
    checkpoint_from_status,
    find_condition,
    ignored_replicas_note,
    not_compiled_note,
    rfc3339,
)


@dataclass(frozen=True)
class StartCompileJob:
    """Create the compile Job for ``request``."""

    request: CompileRequest
    name: str
    #: The dangling record it compiles again (the Job is marked so; None: a first compile).
    republish: DanglingRecord | None = None


@dataclass(frozen=True)
class DeleteCompileJob:
    """Delete a compile Job of an older request (the spec, the source or the compile image changed
    while it ran), a failed one the spec asks to run differently, or a finished one whose record
    dangles (to compile it again)."""

    name: str
    #: Why, for its Event. The request key holds the compile image too (the operator's model-server
    #: image, a setting): a new one supersedes the Job of the old, the spec and source unchanged.
    why: str = "the spec, the model source or the compile image changed"


@dataclass(frozen=True)
class DeleteHeldJobPods:
    """Delete the live pods of a compile Job being deleted that another controller's finalizer holds:
    nothing else ends its compile until that finalizer goes. Planned on every reconcile while any is
    left, so a failed call or an operator stop is made good on the next one (no Event: the Job's
    deletion posted its one)."""

    job: str
    pods: tuple[str, ...]


CompileAction = StartCompileJob | DeleteCompileJob | DeleteHeldJobPods


@dataclass(frozen=True)
class Targets:
    """Desired active replicas and standby for this round, and how the autoscaler stands."""

    scale: scaling.ScalingDecision
    warm: warmpool.WarmPoolDecision
    metrics_available: bool
    #: The ScalingActive message (stable between decisions: no status write for nothing).
    message: str
    #: The ScalingActive reason while metrics are not available.
    problem_reason: Reason = Reason.METRICS_UNAVAILABLE
    #: status.warmPool.reason: ``warm``'s, or the one said before while only its figures moved.
    warm_reason: str = ""


@dataclass(frozen=True)
class ReconcilePlan:
    """What to do this round and the status it leads to (before the apply's outcome)."""

    compile_actions: tuple[CompileAction, ...]
    #: The placement the fleet's pods are built for (None: no pod is created or changed).
    candidate: Candidate | None
    actions: tuple[Action, ...]
    inputs: StatusInputs
    status: dict[str, Any]
    memory: DeploymentMemory
    scale_reason: str
    #: Errors of the observation (not of the apply), reported in every status of this round.
    observe_errors: tuple[str, ...] = field(default=())
    #: The artifact this spec's compile Job was seen to store this round, news to the status
    #: (:func:`~neuronfleet.planning.compile.compile_succeeded`): CompileSucceeded says it.
    compile_succeeded: StoredArtifact | None = None


#: A decision that changes nothing but the figures in its message rewrites the ScalingActive
#: message with the next checkpoint, or after this long, so the status is not written on every one.
MESSAGE_REFRESH_SECONDS = 300.0

_FIGURES = re.compile(r"\d+(?:\.\d+)?")


def _same_decision(
    memory: DeploymentMemory, scale: scaling.ScalingDecision, available: bool, message: str, now: float
) -> bool:
    """Whether a decision repeats the last (the same desired count and recommendation, the same
    notes on what limited it) in all but the signals' values, and the message was written less than
    :data:`MESSAGE_REFRESH_SECONDS` ago. The message lists every signal's value, which jitters with
    the traffic, and a signal (the trend while the line's slope hovers around 0) comes and goes:
    rewritten each decision, it made a steady fleet write its status ~60 times an hour (each write a
    watch event for every client of the object)."""
    last, written = memory.last_decision, memory.scaling_message_at
    return (
        last is not None
        and written is not None
        and 0 <= now - written < MESSAGE_REFRESH_SECONDS  # (a clock stepped back renews it)
        # A new checkpoint writes the status anyway: the message's figures are renewed with it.
        and scale.new_state.checkpoint is memory.scaling_state.checkpoint
        and (last.desired, last.recommendation, last.signals_off)
        == (scale.desired, scale.recommendation, scale.signals_off)
        and available == memory.metrics_available
        and _outcome(message) == _outcome(memory.scaling_message)
    )


def _outcome(message: str) -> str:
    """A scaling message without the signals' list (before ``->``) and figures; a message without a
    list (holding: metrics missing, a refused query, no signal) whole, figures aside: two holds
    for different reasons are different decisions (a refused query then a timeout read as the same,
    and ScalingActive kept the first for up to MESSAGE_REFRESH_SECONDS)."""
    return _FIGURES.sub("#", message.partition(" -> ")[2] or message)


def decide_targets(
    spec: InferenceDeploymentSpec,
    memory: DeploymentMemory,
    snapshot: MetricSnapshot | None,
    metrics_problem: str,
    current: int,
    ready: int,
    now: float,
    durable: StatusMemory | None = None,
    rate_key: str | None = None,
    metrics_problem_reason: Reason = Reason.METRICS_UNAVAILABLE,
) -> tuple[Targets, DeploymentMemory]:
    """The autoscaler's decision at the spec's interval (held in between), then the warm pool,
    whose demand history takes one sample per decision (none at the rounds in between).

    ``snapshot`` is only looked at when :func:`~neuronfleet.planning.observation.scaling_due`;
    in Auto mode the decision and its message are held until the next interval (bounded at once by
    a ``minReplicas`` / ``maxReplicas`` changed meanwhile). Metrics count as available when the
    snapshot left the autoscaler a signal to decide on (not when every signal was missing or stale).
    ``durable`` (what the status holds; the operator's, not the simulator's) starts a memory that has
    never decided, i.e. an operator that takes the object over (a restart, a new leader): the
    autoscaler resumes from the checkpoint, or without one holds the ``current`` fleet through its
    scale-down window (:func:`~neuronfleet.planning.scaling.take_over`), and the warm pool holds the
    pool the status wants until it has a history, or until the end of the hold the status says its
    predecessor was in (:func:`~neuronfleet.planning.warmpool.take_over`).
    ``rate_key``: what the replicas' service rate depends on
    (:func:`~neuronfleet.planning.scaling.service_rate_key`), so a rate learned on another artifact
    revision or placement is forgotten, not resumed. ``metrics_problem_reason``: the ScalingActive
    reason of ``metrics_problem`` when there is no snapshot (PrometheusUrlNotAllowed: the spec's URL
    was refused, not requested).
    """
    if durable is not None and memory.last_scaling_at is None:
        scaling_state, warm_state = take_over(durable, now, current, spec.scaling.target_utilization)
        memory = replace(memory, scaling_state=scaling_state, warm_state=warm_state)
    # The decision re-served this round, None when the autoscaler decides.
    # Manual decides every round (a replicas edit applies at once); Auto re-serves a decision made
    # in Auto mode only (a mode change is due at once: see scaling_due).
    held = memory.last_decision if spec.scaling.mode == "Auto" and not scaling_due(spec.scaling, memory, now) else None
    if held is not None:
        scale, available, message = held, memory.metrics_available, memory.scaling_message
        problem_reason = memory.metrics_problem_reason
        low, high = spec.scaling.min_replicas, spec.scaling.max_replicas
        if not low <= scale.desired <= high:
            # The bounds changed since the decision (a spec edit between intervals): the held
            # count obeys them at once, as the next decision would.
            note = f"; bounded to [{low}, {high}]"
            demand = None if scale.demand is None else max(low, min(high, scale.demand))
            scale = replace(
                scale, desired=max(low, min(high, scale.desired)), reason=scale.reason + note, demand=demand
            )
            message += note
            memory = replace(memory, last_decision=scale, scaling_message=message)
    else:
        scale = scaling.decide(spec.scaling, memory.scaling_state, snapshot, current, ready, now, rate_key)
        # Read, and usable: a snapshot whose every signal is missing or stale leaves the autoscaler
        # holding (no recommendation), which ScalingActive must not call "metrics read".
        available = snapshot is not None and scale.recommendation is not None
        if snapshot is None:
            message = f"{metrics_problem}; {scale.reason}"
        else:
            # The signals read leave the autoscaler deciding, but a refused query costs its own (a
            # typo in one override): the reader's notes name the field and Prometheus' error. Dropped
            # here, ScalingActive said only "no scale-down: utilization missing", for good.
            refused = refused_queries(metrics_problem)
            message = f"{scale.reason}; {refused}" if refused else scale.reason
        problem_reason = metrics_problem_reason if snapshot is None else Reason.METRICS_UNAVAILABLE
        message_at: float | None = now
        if _same_decision(memory, scale, available, message, now):
            message, message_at = memory.scaling_message, memory.scaling_message_at
        memory = replace(
            memory,
            scaling_state=scale.new_state,
            # Moved as the decision moved the autoscaler's times (a wall clock stepped back): once,
            # here, not at the held rounds that re-serve this decision.
            warm_state=warmpool.shifted(memory.warm_state, scale.clock_shift),
            last_scaling_at=now,
            last_decision=scale,
            last_decision_mode=spec.scaling.mode,
            scaling_message=message,
            scaling_message_at=message_at,
            metrics_available=available,
            metrics_problem_reason=problem_reason,
        )
    warm = warmpool.plan(
        spec.warm_pool,
        memory.warm_state,
        scale.demand,
        now,
        memory.cold_start,
        active=scale.desired,
        max_active=spec.scaling.max_replicas,
        # One demand sample per decision, as the simulator takes: a reconcile runs on every pod
        # event, and the rounds between decisions re-serve the last one (its demand included).
        sample=held is None,
        # Manual, or every signal turned off, measures no demand: no outage to hold the history through.
        unmeasured=scaling.unmeasured(spec.scaling, scale),
        parked=warmpool.parked(spec.scaling, scale.desired),
    )
    memory = replace(memory, warm_state=warm.new_state)
    warm_reason, memory = _warm_said(memory, warm, now)
    return Targets(scale, warm, available, message, problem_reason, warm_reason), memory


def take_over(
    durable: StatusMemory, now: float, current: int, target_utilization: float
) -> tuple[scaling.ScalingState, warmpool.WarmPoolState]:
    """The autoscaler's and the warm pool's states of an operator that takes a deployment over at
    ``now`` with ``current`` active replicas, from what its predecessor's status holds (``durable``):
    the checkpoint as the status wrote it (rounded: :func:`autoscaler_status`), the pool last
    wanted. The one path a restart takes, the operator's and the simulator's
    (:meth:`neuronfleet.sim.policies.Ours.restart`) alike."""
    return (
        scaling.take_over(checkpoint_from_status(durable.autoscaler), now, current, target_utilization),
        warmpool.take_over(now, durable.warm_pods, durable.warm_placeholders, durable.warm_held_since),
    )


def warm_pool_status(pods: int, placeholders: int, held_since: float | None, reason: str) -> WarmPoolStatus:
    """The ``warmPool`` status section: the pool wanted and since when a pool found is held (whole
    seconds, as Kubernetes writes times), which a successor resumes from (:func:`take_over`)."""
    return WarmPoolStatus(
        desired_pods=pods,
        desired_placeholders=placeholders,
        reason=reason,
        held_since=rfc3339(datetime.fromtimestamp(held_since, UTC)) if held_since is not None else None,
    )


def _warm_said(memory: DeploymentMemory, warm: warmpool.WarmPoolDecision, now: float) -> tuple[str, DeploymentMemory]:
    """``warm``'s reason, or the one last said when the pool is the same (its pods, placeholders and
    hold) and the reason differs from it in figures alone. The reason counts the history's samples
    and span, the headroom and the increases, which move at nearly every decision of a steady fleet:
    rewritten each time, status.warmPool.reason wrote the status ~150 times an hour per deployment.
    Its figures are renewed with ScalingActive's message (rewritten this round: the status is
    written anyway), and at least every other :data:`MESSAGE_REFRESH_SECONDS` (on a timer of its
    own, the two renewals drifted apart and doubled the writes)."""
    last, written = memory.warm_said, memory.warm_said_at
    if (
        last is not None
        and written is not None
        and memory.scaling_message_at != now
        and 0 <= now - written < 2 * MESSAGE_REFRESH_SECONDS  # (a clock stepped back renews it)
        and (last.pods, last.node_placeholders, last.held_since) == (warm.pods, warm.node_placeholders, warm.held_since)
        and _FIGURES.sub("#", last.reason) == _FIGURES.sub("#", warm.reason)
    ):
        return last.reason, memory
    return warm.reason, replace(memory, warm_said=warm, warm_said_at=now)


def _compile(
    dep: InferenceDeployment,
    observation: Observation,
    durable: StatusMemory,
    spec_problems: list[str],
    takeover: bool = False,
) -> tuple[CompileDecision, tuple[CompileAction, ...], tuple[str, ...]]:
    """The compile decision and its actions; ``takeover``: the operator's first reconcile of the
    object (see :func:`~neuronfleet.planning.compile.inherits_legacy_failure`)."""
    observed = observation.compile
    # Whatever else is decided: a held Job's compile is ended (its Job is already deleted).
    held: tuple[CompileAction, ...] = (
        tuple(DeleteHeldJobPods(job, pods) for job, pods in observed.held_job_pods if pods) if observed else ()
    )
    if spec_problems:
        return decide_unservable(spec_problems, durable.artifact), held, ()
    if observation.compile_error is not None or observed is None:
        detail = observation.compile_error or "the compile pipeline was not read"
        # The failure remembered is kept: a round that read nothing of the store or the Jobs knows
        # nothing new of it, and once written as null the failed compile ran again the next round.
        decision = CompileDecision(
            False, durable.artifact, "Unknown", Reason.STORE_UNAVAILABLE, detail, failure=durable.compile_failure
        )
        return decision, held, (f"compile pipeline: {detail}",)
    legacy_failure = inherits_legacy_failure(takeover, durable.artifact_image)
    decision = decide_compile(
        replace(observed, failed_before=durable.compile_failure, legacy_failure=legacy_failure), durable.artifact
    )
    if decision.create_job and (problem := compile_cpu_limit_problem(dep.spec.compile)) is not None:
        # The Job's pod would be refused at every try: no Job until the spec is fixed.
        decision = CompileDecision(False, decision.serve, "False", Reason.CPU_LIMIT_BELOW_REQUEST, problem)
    actions: list[CompileAction] = []
    if decision.create_job:
        actions.append(StartCompileJob(observed.request, observed.job_name, decision.republish))
    if decision.replace_job:
        # Created again on a later round, once the API server has removed it.
        if decision.republish is not None:
            actions.append(DeleteCompileJob(observed.job_name, decision.republish.describe()))
        else:
            # A failed Job (or one that succeeded without its record) the spec (resources,
            # deadline) or the compile-retry annotation asks to run again differently, or one whose
            # pod the API server refuses (its ServiceAccount missing, a LimitRange, a quota) and
            # that is now asked to run differently: its name is the request's, so it must go first.
            why = {
                "failed": "it failed, and spec.compile or the compile-retry annotation asks for another run",
                "succeeded": (
                    "it succeeded without writing its request record, and spec.compile or the"
                    " compile-retry annotation asks for another run"
                ),
            }.get(
                observed.job_phase,
                "the API server refuses its pod, and spec.compile or the operator's settings changed since",
            )
            actions.append(DeleteCompileJob(observed.job_name, why))
    if observed.source_problem is None:
        # A newer spec (or source) supersedes compiles of older requests that are still running. Not
        # on a round whose source listing failed: its request key lacks the fingerprint, so it
        # differs from the running Job's although nothing changed, and a compile can take hours.
        actions += [DeleteCompileJob(name) for name in observed.running_jobs if name != observed.job_name]
    errors: tuple[str, ...] = ()
    if observed.job_phase == "taken" and not observed.job_taken_by_previous:
        # Nothing removes it by itself (a previous object's Job is waited for, said in Compiled only).
        errors = (f"compile Job {observed.job_name}: {observed.taken_note()}",)
    return decision, (*actions, *held), errors


def _with_served_request(
    decision: CompileDecision, observed: CompileObservation | None, durable: StatusMemory
) -> CompileDecision:
    """The image and source fingerprint of the served artifact's request: the current request's when
    it is that request's artifact, else what the status said of it (the previous artifact, served on)."""
    if decision.serve is None:
        return decision
    if observed is not None and decision.serve == observed.stored:
        request = observed.request
        return replace(decision, serve_image=request.image, serve_fingerprint=request.source_fingerprint)
    if decision.serve == durable.artifact:
        return replace(decision, serve_image=durable.artifact_image, serve_fingerprint=durable.artifact_fingerprint)
    return decision


def _held_because(serve: StoredArtifact, dangling: DanglingRecord | None) -> str:
    """Why no serving pod of ``serve`` is created: its artifact is not in the store as recorded."""
    if dangling is not None and dangling.file_problems and dangling.found_sha256 == serve.manifest_sha256:
        return (
            f"files of the artifact of revision {serve.revision} are gone from the store; no new pod could "
            "load it until it is republished (see Compiled)"
        )
    if dangling is not None and dangling.found_sha256 is not None:
        # Replaced, not deleted: a new pod (pinned to the recorded manifest) would refuse it.
        return (
            f"the artifact of revision {serve.revision} was replaced in the store (another manifest); no new "
            "pod would serve it as recorded until it is republished (see Compiled)"
        )
    return (
        f"the artifact of revision {serve.revision} is gone from the store; no new pod could load it "
        "until it is republished (see Compiled)"
    )


def plan_reconcile(
    dep: InferenceDeployment,
    observation: Observation,
    memory: DeploymentMemory,
    durable: StatusMemory,
    fleet_policy: FleetPolicy,
    template_of: Callable[[Candidate], str],
    headroom: Headroom = DAEMONSET_HEADROOM,
    default_scheduler_name: str | None = None,
    refused: RefusedSpec | None = None,
) -> ReconcilePlan:
    """The whole decision of one reconcile (see the module docstring).

    ``template_of`` hashes the pod template built for a placement (the builders live outside
    planning; the hash is a pure function of the spec and the placement). ``headroom`` is the
    operator's allowance for a node's DaemonSets, ``default_scheduler_name`` the scheduler its pods
    name when the spec names none (the operator's ``--neuron-scheduler``).

    ``refused``: the object's current spec, which the operator refused (InvalidSpec); ``dep`` is then
    the last valid one, whose fleet is kept whole (a lost pod replaced, as a Deployment keeps its old
    ReplicaSet at scale) while the status says the current generation is refused.
    """
    spec, now = dep.spec, observation.now
    spec_problems = check_fits(spec, headroom)
    # A memory that has never decided is an operator taking the object over (as decide_targets reads it).
    takeover = memory.last_scaling_at is None
    decision, compile_actions, observe_errors = _compile(dep, observation, durable, spec_problems, takeover)
    decision = _with_served_request(decision, observation.compile, durable)

    # The pods a predecessor measured may be gone: what they measured is in the status, carried over.
    cold_state = coldstart.take_over(durable.cold_start, now.timestamp()) if takeover else memory.cold_start_state
    cold_state = coldstart.observe(cold_state, observation.timelines, now=now.timestamp())
    memory = replace(
        memory,
        cold_start_state=cold_state,
        cold_start=coldstart.for_warm_pool(cold_state, durable.instance_type),
        record_reread_job=observation.record_reread_job or memory.record_reread_job,
    )
    active_now = [pod for pod in observation.pods if pod.role == "active" and not pod.deleting]
    ready_now = sum(1 for pod in active_now if pod.ready)
    # The autoscaler's "current" is the current scale, as HPA's: the last desired count (durable
    # memory), not the pods active at this instant; a pod being replaced must not pull it down.
    current = durable.desired_replicas if durable.desired_replicas is not None else len(active_now)
    targets, memory = decide_targets(
        spec,
        memory,
        observation.metrics,
        observation.metrics_problem,
        current,
        ready_now,
        now.timestamp(),
        durable,
        # The sticky type, which the pods run on (the plan below may only keep it or move it).
        scaling.service_rate_key(spec, decision.serve.revision if decision.serve else None, durable.instance_type),
        observation.metrics_problem_reason,
    )
    scale, warm = targets.scale, targets.warm

    # A spec whose requests cannot be read has no placement; spec_problems says why, as Degraded.
    placement = None
    last_scale_at = None
    if durable.last_scale is not None:
        with contextlib.suppress(ValueError):
            last_scale_at = datetime.fromisoformat(durable.last_scale.time)
    resizing = durable.desired_replicas is not None and durable.desired_replicas != scale.desired
    # No artifact, and none coming until something changes: placeholders would keep spare nodes
    # (paid for) for pods that cannot exist. Held, and not priced in status.placement.
    no_artifact = nothing_to_serve(decision, None if spec_problems else observation.compile)
    with contextlib.suppress(QuantityError):
        # Every replica-sized pod the fleet keeps takes a slot on the nodes it pays for: placeholders
        # too (they hold spare nodes). Only the active replicas serve.
        placement = plan_for_spec(
            spec,
            scale.desired + warm.pods + (0 if no_artifact else warm.node_placeholders),
            serving=scale.desired,
            current_type=durable.instance_type,
            headroom=headroom,
            may_move=may_move_type(last_scale_at, now, resizing=resizing),
            standby_varies=spec.warm_pool.mode == "Auto",
        )
    fleet: FleetPlan | None = None
    foreseen: tuple[Refusal, ...] = ()
    if placement is not None and placement.chosen is not None and not spec_problems:
        serve = decision.serve
        cpu_problem = serving_cpu_limit_problem(spec.runtime, placement.chosen)
        if cpu_problem is not None:
            foreseen = (Refusal(Reason.CPU_LIMIT_BELOW_REQUEST, cpu_problem),)
        target = FleetTarget(
            template=template_of(placement.chosen),
            artifact=ArtifactRevision(serve.revision, serve.uri, serve.manifest_sha256) if serve else None,
            active=scale.desired,
            warm=warm.pods,
            placeholders=warm.node_placeholders,
            # Pods the API server would refuse: the ones running (of an earlier spec) keep serving.
            # Said first, as it holds every pod, even of an artifact republished meanwhile.
            hold_creations=(
                "spec.runtime.cpuLimit is below the pods' CPU request (see Degraded)"
                if cpu_problem is not None
                # Its running pods keep serving, but a new one could not load it and would crash-loop.
                else _held_because(serve, observation.compile.dangling if observation.compile else None)
                if serve is not None and decision.serve_gone
                else f"no artifact to serve: {not_compiled_note(decision)}"
                if no_artifact
                else None
            ),
            # A placeholder has the replicas' resources: the API server would refuse it too. Held,
            # not dropped, so the status counts it as wanted and held, as the pool says it wants it.
            hold_placeholders=cpu_problem is not None or no_artifact,
        )
        fleet = plan_fleet(
            dep.name,
            target,
            observation.pods,
            now,
            policy_for_spec(spec, fleet_policy),
            taken_names=observation.foreign_pod_names,
            rollout=durable.rollout,
            neighbours=observation.neighbours,
        )
    summary = (
        fleet.summary
        if fleet is not None
        # No plan for this spec: nothing is changed, the pods of the last valid spec are counted as they are.
        else summarize_unplanned(
            observation.pods,
            now,
            desired_active=scale.desired,
            desired_warm=warm.pods,
            desired_placeholders=warm.node_placeholders,
            revision_known=decision.serve is not None,
            policy=policy_for_spec(spec, fleet_policy),
            rollout=durable.rollout,
        )
    )

    previous_desired = durable.desired_replicas or 0
    last_scale = durable.last_scale
    if previous_desired != scale.desired:
        initial = "initial size: " if durable.desired_replicas is None else ""
        last_scale = LastScale(rfc3339(now), f"{initial}{scale.reason}")
    measured_type = placement.chosen.name if placement and placement.chosen else durable.instance_type
    inputs = StatusInputs(
        # A refused spec's: the operator has read it, and the conditions say it is refused.
        generation=refused.generation if refused is not None else dep.metadata.generation,
        fleet=summary,
        placement=placement,
        compile=decision,
        kept_placement=durable.placement,
        scaling_mode=spec.scaling.mode,
        metrics_available=targets.metrics_available or spec.scaling.mode == "Manual",
        scaling_message=targets.message,
        metrics_problem_reason=targets.problem_reason,
        spec_replicas=spec.scaling.replicas,
        errors=observe_errors + memory.apply_errors,
        refusals=memory.refusals,
        waits=memory.apply_waits,
        foreseen_refusals=foreseen,
        corrupt_annotations=observation.corrupt_annotations,
        rollout_stalled=summary.rollout_stalled(now, spec.rollout.progress_deadline_seconds),
        spec_problems=tuple(spec_problems),
        scheduler_warning=(
            scheduler_warning(placement, spec.placement.scheduler_name or default_scheduler_name)
            if placement is not None
            else None
        ),
        warm_pool=warm_pool_status(
            warm.pods, warm.node_placeholders, warm.held_since, targets.warm_reason or warm.reason
        ),
        cold_start=coldstart.status(cold_state, measured_type),
        autoscaler=autoscaler_status(memory.scaling_state.checkpoint),
        last_scale=last_scale,
        refused=refused,
        last_valid=last_valid.record(dep),
    )
    return ReconcilePlan(
        compile_actions=compile_actions,
        candidate=placement.chosen if placement is not None and fleet is not None else None,
        actions=fleet.actions if fleet is not None else (),
        inputs=inputs,
        status=build_status(dep.name, inputs, durable.conditions, now),
        memory=memory,
        scale_reason=scale.reason,
        observe_errors=observe_errors,
        compile_succeeded=compile_succeeded(
            None if spec_problems else observation.compile,
            decision,
            durable.artifact,
            durable.condition("Compiled").get("reason"),
        ),
    )


def refused_fleet(pods: tuple[PodView, ...], now: datetime, durable: StatusMemory) -> FleetSummary:
    """The fleet of an object whose spec is refused while its last valid spec is unknown (an operator
    restarted since, and the status's ``lastValidSpec`` absent or unusable): its pods counted as that
    spec's, against the counts it wanted as the status last said them (nothing can be planned or made
    without a spec)."""
    return summarize_unplanned(
        pods,
        now,
        desired_active=durable.desired_replicas or 0,
        desired_warm=durable.warm_pods or 0,
        desired_placeholders=durable.warm_placeholders or 0,
        revision_known=durable.artifact is not None,
        rollout=durable.rollout,
    )


def status_after_apply(
    plan: ReconcilePlan,
    dep: InferenceDeployment,
    durable: StatusMemory,
    refusals: tuple[Refusal, ...],
    apply_errors: tuple[str, ...],
    observation: Observation,
    waits: tuple[str, ...] = (),
) -> tuple[dict[str, Any], DeploymentMemory]:
    """The status and memory once the apply's outcome is known (unchanged when it is as remembered)."""
    memory = replace(plan.memory, refusals=refusals, apply_errors=apply_errors, apply_waits=waits)
    if (refusals, apply_errors, waits) == (plan.memory.refusals, plan.memory.apply_errors, plan.memory.apply_waits):
        return plan.status, memory
    inputs = inputs_after_apply(plan, refusals, apply_errors, waits)
    return build_status(dep.name, inputs, durable.conditions, observation.now), memory


def inputs_after_apply(
    plan: ReconcilePlan, refusals: tuple[Refusal, ...], apply_errors: tuple[str, ...], waits: tuple[str, ...] = ()
) -> StatusInputs:
    """The status inputs once the apply's outcome is known (see :func:`status_after_apply`)."""
    return replace(plan.inputs, refusals=refusals, errors=plan.observe_errors + apply_errors, waits=waits)


def kept_announced(memory: DeploymentMemory, durable: StatusMemory) -> tuple[str, str] | None:
    """The kept fleet's Degraded (status, reason) already announced: the memory's under a refused
    spec; on the first reconcile of one, the Degraded of before, unless that was a refusal too."""
    if memory.kept_degraded is not None:
        return memory.kept_degraded
    before = durable.condition("Degraded")
    if not before or before.get("reason") == Reason.INVALID_SPEC:
        return None
    return str(before.get("status")), str(before.get("reason"))


def kept_as_announced(value: ConditionValue | None) -> tuple[str, str] | None:
    """What :attr:`DeploymentMemory.kept_degraded` keeps of the kept fleet's Degraded ``value``."""
    return None if value is None else (str(value.status), str(value.reason))


#: What starts the message of a Warning announced again on a takeover (:func:`found_warnings`).
FOUND_ON_TAKEOVER = "found on takeover (already in the status; its Event may have been lost with the operator before)"


def kept_fleet_events(
    before: tuple[str, str] | None, after: ConditionValue | None, *, found: bool = False
) -> list[Event]:
    """A Warning when the kept fleet's own Degraded (:func:`~neuronfleet.planning.status.kept_degraded`)
    turns True or changes reason under a refused spec: Degraded's reason stays InvalidSpec then, so
    :func:`status_events` alone said nothing of a kept fleet getting worse (a replacement refused).
    ``found`` (:func:`kept_found_on_takeover`): the status already named it; said as found on takeover."""
    if after is None or after.status != "True":
        return []
    if before is not None and before == ("True", str(after.reason)):
        return []
    message = f"the fleet kept while the spec is refused: {after.message}"
    return [Event("Warning", after.reason, f"{FOUND_ON_TAKEOVER}: {message}" if found else message)]


def kept_found_on_takeover(memory: DeploymentMemory, durable: StatusMemory, kept: ConditionValue | None) -> bool:
    """Whether the kept fleet's trouble ``kept`` is one the status found on a takeover already names: a
    refused spec's Degraded (InvalidSpec) whose message holds it, and a memory that has announced
    nothing of the kept fleet (a restart, a new leader, which keep the fleet from status.lastValidSpec).
    Its Warning is then posted again as :func:`found_warnings` posts the InvalidSpec one: once per
    takeover, said as found, not as news.

    The message is compared with its figures left out: the API server's words for a refusal quote the
    pod's name and the quota's use (``pods "bert-…-2" is forbidden: … used: pods=2``), which change
    while the trouble stays (the pod the status named finished terminating while no operator ran; the
    new one's ordinal is another), and an exact match then said a trouble the status names as news."""
    if memory.kept_degraded is not None or kept is None or kept.status != "True":
        return False
    before = durable.condition("Degraded")
    found = _FIGURES.sub("#", str(before.get("message") or ""))
    return before.get("reason") == Reason.INVALID_SPEC and _FIGURES.sub("#", kept.message) in found


def found_warnings(found: StatusMemory, status: Mapping[str, Any]) -> list[Event]:
    """The Warnings of the conditions that ``found`` (the status an operator found when it took the
    object over) already shows in a warning state and ``status`` (its first write) keeps so, each
    again, its message starting with :data:`FOUND_ON_TAKEOVER`.

    An operator killed (SIGKILL, OOM, its node lost) between a status write and the Events of that
    change leaves a status nobody announced, and the next one reads it as already so: a degradation
    users alerting on Warning Events never hear of. Repeating them once per takeover is the price
    (Kubernetes aggregates repeats). Normal Events are not repeated: a lost one costs less than one
    more at every restart. A condition whose change :func:`status_events` announces anyway (another
    reason, a refused query not named before) is left to it, and one the takeover clears gets its
    Recovered / MetricsRecovered only.
    """
    events: list[Event] = []
    before, after = found.condition("Degraded"), find_condition({"status": status}, "Degraded")
    if before.get("status") == "True" and after.get("status") == "True" and before.get("reason") == after.get("reason"):
        events.append(_found("Degraded", after))
    before, after = found.condition("ScalingActive"), find_condition({"status": status}, "ScalingActive")
    if after.get("reason") in _HOLDING and before.get("reason") == after.get("reason"):
        events.append(_found("ScalingActive", after))
    refused = refused_fields(str(after.get("message") or ""))
    if (
        after.get("reason") == Reason.METRICS_READ
        and refused
        and refused <= refused_fields(str(before.get("message") or ""))
    ):
        message = f"{refused_queries(str(after.get('message') or ''))}; the autoscaler decides without that signal"
        events.append(Event("Warning", Reason.METRICS_QUERY_REFUSED, f"{FOUND_ON_TAKEOVER}: {message}"))
    return events


def _found(kind: str, condition: Mapping[str, Any]) -> Event:
    """The Warning of ``condition`` (of ``kind``) announced again on a takeover."""
    message = str(condition.get("message") or "")
    return Event("Warning", Reason(str(condition.get("reason"))), f"{FOUND_ON_TAKEOVER}: {message or kind}")


#: ScalingActive's reasons of an autoscaler that holds for want of metrics: each posts a Warning.
_HOLDING = (Reason.METRICS_UNAVAILABLE, Reason.PROMETHEUS_URL_NOT_ALLOWED, Reason.PROMETHEUS_QUERY_NOT_ALLOWED)


def status_events(
    durable: StatusMemory,
    status: Mapping[str, Any],
    scale_reason: str,
    compiled: StoredArtifact | None = None,
    takeover: bool = False,
) -> list[Event]:
    """Events of a status change: Scaled when the desired replicas change; a Warning when Degraded
    turns True or changes reason, Recovered when it turns False again; a Warning when ScalingActive
    turns MetricsUnavailable (the autoscaler holds: Prometheus is unavailable, or refuses every
    query), PrometheusUrlNotAllowed (the spec's prometheusUrl is outside the operator's allow-list) or
    PrometheusQueryNotAllowed (a query override the operator refuses to run with its credentials),
    MetricsRecovered when it returns from one of those to MetricsRead; CompileSucceeded for
    ``compiled``, the artifact a compile Job was seen to store (:attr:`ReconcilePlan.compile_succeeded`);
    a Warning MetricsQueryRefused when ScalingActive (MetricsRead) names a refused query it did not
    name before;
    ReplicasIgnored when spec.scaling.replicas is set or changed in Auto mode. Nothing when nothing
    changed, except on a ``takeover`` (the operator's first reconcile of the object): the Warnings
    the status already showed, again (:func:`found_warnings`)."""
    events: list[Event] = []
    before_desired, after_desired = durable.desired_replicas or 0, int(status.get("desiredReplicas") or 0)
    if before_desired != after_desired:
        # No count before: the deployment's first size, not a change from a fleet of 0.
        message = (
            f"initial size: {after_desired} desired active replicas ({scale_reason})"
            if durable.desired_replicas is None
            else f"desired active replicas {before_desired} -> {after_desired}: {scale_reason}"
        )
        events.append(Event("Normal", Reason.SCALED, message))
    before, after = durable.condition("Degraded"), find_condition({"status": status}, "Degraded")
    if after.get("status") == "True" and (
        before.get("status") != "True" or before.get("reason") != after.get("reason")
    ):
        events.append(Event("Warning", Reason(str(after.get("reason"))), str(after.get("message") or "")))
    elif before.get("status") == "True" and after.get("status") == "False":
        events.append(Event("Normal", Reason.RECOVERED, f"no longer degraded (was {before.get('reason')})"))
    # A compile (a first one, a new spec's, a republish) ended with its artifact stored: CompileStarted
    # is followed. Decided by the plan from the Job seen succeeded, once per compile.
    if compiled is not None:
        events.append(
            Event(
                "Normal",
                Reason.COMPILE_SUCCEEDED,
                f"compiled: revision {compiled.revision} ({compiled.backend} backend) at {compiled.uri}",
            )
        )
    # Manual scaling is ScalingActive=False too, by choice: no warning for it.
    before, after = durable.condition("ScalingActive"), find_condition({"status": status}, "ScalingActive")
    if after.get("reason") in _HOLDING and before.get("reason") != after.get("reason"):
        events.append(Event("Warning", Reason(str(after.get("reason"))), str(after.get("message") or "")))
    elif after.get("reason") == Reason.METRICS_READ and before.get("reason") in _HOLDING:
        # Else the Warning stays the last word on scaling in `kubectl describe` after it resumed.
        events.append(
            Event(
                "Normal",
                Reason.METRICS_RECOVERED,
                f"metrics read again (was {before.get('reason')}); the autoscaler decides again: "
                f"{after.get('message') or ''}",
            )
        )
    # A query Prometheus refuses while the others are read (the autoscaler decides without its
    # signal; without the busy ratio it never scales down): warned of once, when ScalingActive names
    # a field refused that it did not name before, as the holding reasons are once per change (a
    # refusal every decision posted nothing new each 15 s). Compared by field, not by the reader's
    # words: a busy ratio read above 1.5 names its value, and a refusal already warned of as
    # MetricsUnavailable (when it cost every signal) stands first in that message, not last.
    after_message = str(after.get("message") or "")
    refused = refused_queries(after_message)
    if after.get("reason") == Reason.METRICS_READ and refused_fields(after_message) - refused_fields(
        str(before.get("message") or "")
    ):
        events.append(
            Event(
                "Warning",
                Reason.METRICS_QUERY_REFUSED,
                f"{refused}; the autoscaler decides without that signal: {after.get('message') or ''}",
            )
        )
    # spec.scaling.replicas set or changed in Auto mode (`kubectl scale`): accepted (a CEL rule refusing
    # it would force an SRE switching Manual -> Auto in an incident to edit replicas too) but ignored:
    # said once. Not on the switch itself, which the person making it knows of. Compared as the value
    # the status holds (status.ignoredReplicas), not as read from the ScalingActive message's words.
    ignored = status.get("ignoredReplicas")
    if (
        isinstance(ignored, int)
        and before.get("reason") != Reason.MANUAL_SCALING
        and durable.ignored_replicas != ignored
    ):
        events.append(
            Event(
                "Normal",
                Reason.REPLICAS_IGNORED,
                f"{ignored_replicas_note(ignored)}: the autoscaler sets the active replicas ({after_desired} now) "
                "between spec.scaling.minReplicas and maxReplicas; to set them by hand (kubectl scale), "
                "set spec.scaling.mode to Manual",
            )
        )
    return [*events, *found_warnings(durable, status)] if takeover else events


def action_events(actions: tuple[Action, ...]) -> list[Event]:
    """One Event per fleet action applied that changes a pod's part (see :func:`describe_action`)."""
    return [event for action in actions if (event := describe_action(action)) is not None]


def _holds_recovery(durable: StatusMemory, first: Mapping[str, Any], takeover: bool) -> bool:
    """Whether a takeover's first write ``first`` turns Degraded False: its Recovered waits for the
    apply. An operator taking the object over does not remember what the last apply met (pods refused
    at admission, API errors), so its first write says Degraded False even while that trouble stands;
    posted before the apply, which meets it again, Recovered was followed by the Warning at every
    restart, and alerting that resolves on Recovered flapped (review r16, finding 1)."""
    return (
        takeover
        and durable.condition("Degraded").get("status") == "True"
        and find_condition({"status": first}, "Degraded").get("status") == "False"
    )


def first_write_status(durable: StatusMemory, status: Mapping[str, Any], takeover: bool = False) -> Mapping[str, Any]:
    """The status a reconcile's first write sends, planned as ``status``: on a takeover whose plan
    turns Degraded False (:func:`_holds_recovery`), Degraded stays the one found (True, its reason and
    message) until the status after the apply is written. Written False first, an outcome that then
    went unwritten (the operator stopped in the apply, the write failed or met a second conflict)
    left Degraded False with its Recovered unsaid, and the next operator, reading False, never said
    it (review r18, finding 1); kept True, the next one takes the object over as this one did."""
    if not _holds_recovery(durable, status, takeover):
        return status
    found = dict(durable.condition("Degraded"))
    conditions = [found if c.get("type") == "Degraded" else c for c in status.get("conditions") or []]
    return {**status, "conditions": conditions}


def first_write_events(
    durable: StatusMemory,
    first: Mapping[str, Any],
    scale_reason: str,
    compiled: StoredArtifact | None = None,
    takeover: bool = False,
) -> list[Event]:
    """The Events of a reconcile's first status write ``first``, posted as soon as it lands (before
    the apply: an operator killed in it would leave them unsaid), but a takeover's Recovered, which
    :func:`after_apply_events` posts once the status after the apply confirms it (see
    :func:`_holds_recovery`)."""
    events = status_events(durable, first, scale_reason, compiled, takeover)
    if _holds_recovery(durable, first, takeover):
        events = [event for event in events if event.reason != Reason.RECOVERED]
    return events


def after_apply_events(
    durable: StatusMemory,
    first: Mapping[str, Any],
    final: Mapping[str, Any],
    scale_reason: str,
    takeover: bool = False,
) -> list[Event]:
    """The Events of what the apply's outcome changed from the first write (``final`` against
    ``first``); Degraded against the status found (``durable``) when the first write's Recovered was
    held back: Recovered if ``final`` confirms it, a Warning if the apply met another trouble, and
    the one found, announced again as on any takeover (:func:`found_warnings`), if it stands."""
    if not _holds_recovery(durable, first, takeover):
        return status_events(StatusMemory.from_status(first), final, scale_reason)
    # The first write's Degraded is not taken as said: compared from the one found instead.
    found = durable.condition("Degraded")
    base = {**first, "conditions": [c for c in first.get("conditions") or [] if c.get("type") != "Degraded"] + [found]}
    events = status_events(StatusMemory.from_status(base), final, scale_reason)
    return events + [event for event in found_warnings(durable, final) if event.reason == found.get("reason")]
