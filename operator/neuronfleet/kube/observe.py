"""Read what the cluster says about one InferenceDeployment, in the planners' terms.

:func:`observe_cluster` makes the reads of one reconcile (the deployment's pods, the nodes, its
compile Jobs) and returns them parsed: the fleet's pods as ``PodView`` (the compile Job's pods
left out: they carry the deployment label but are the Job's, and as role-less pods the fleet plan
would drain and delete a running compile; so are pods another object controls), node zones folded
in, pod start-up timelines, and the state of the compile Job for the current request. It decides
nothing. An error answer to a read of the fleet (its pods, the nodes) is raised, naming the read: the
fleet cannot be planned without it. One to the compile Jobs' reads is returned beside the fleet
(:attr:`ClusterObservation.jobs_unread`): it is the compile pipeline's, reported and retried, and the
fleet is still reconciled meanwhile.

Other deployments' pods on the fleet's nodes (``neighbours``: several models share the Inf2 nodes,
and a node goes only once no pod is left on it) are counted from an index of neuronfleet's pods by
node (:data:`PodsOnNodes`): Kopf's, kept by the pod watch the operator runs anyway, in every
namespace it watches (:mod:`neuronfleet.handlers`). Reading it sends no request: a reconcile never
waits for, nor resends, a list of every model's pods. Without it (a reconciler outside Kopf) the
plan counts the deployment's own pods only.

A running compile Job's message says why its pod has not started: unschedulable, its image not
pulled, or no pod at all :data:`NO_POD_SECONDS` after the Job was made (the API server refusing the
pod: a ResourceQuota, a LimitRange, an admission webhook). A Job whose status counts a pod made and
that lists none is between two attempts unless its Events or its account say the next is refused (see
:func:`_waiting_details`). Without it the Compiled condition reads
"compile Job running" for the Job's whole ``timeoutSeconds``, then DeadlineExceeded without a cause.
Such a Job's Events are then read (only then: a healthy fleet costs no read): its FailedCreate, the
Job controller's record of each refused create, in the API server's words, which planning names
(``planning.admission.compile_refusal``), unless its SuccessfulCreate says it made a pod since (one
its status does not count: see :func:`_read_failed_create`). When there is none, or the operator may
not list Events (403: an older chart) or the read fails, the Job's ServiceAccount is read instead,
since a missing account is the refusal a person most often causes (a typo, or a namespace not yet
set up); a read that fails too leaves the cause unknown, and the message as it was. Each answer is kept a minute,
per Job (:class:`JobEventReads`) and per namespace and account (:class:`AccountReads`), one of each
per operator, held by the reconciler: a fleet of deployments stuck so reads about once a minute per
Job, not once per deployment per reconcile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Hashable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, Literal, TypeVar

from kubernetes_asyncio.client.exceptions import ApiException

from neuronfleet.kube.builders import describe_controller, held_by_previous, parse_pod
from neuronfleet.kube.client import UNANSWERED, KubeApi, Obj
from neuronfleet.kube.coldstart import pod_timelines
from neuronfleet.kube.jobs import (
    ANNOTATION_JOB_SPEC,
    ANNOTATION_REPUBLISHES,
    LABEL_COMPILE_REQUEST,
    compile_job_name,
    compile_job_selector,
    job_image,
    job_made_a_pod,
    job_phase,
)
from neuronfleet.planning.admission import DEFAULT_ACCOUNT
from neuronfleet.planning.catalog import LABEL_ZONE
from neuronfleet.planning.coldstart import PodTimeline
from neuronfleet.planning.compile import CompileRequest, JobPhase, adopts_legacy_job
from neuronfleet.planning.fleet import PodView
from neuronfleet.planning.labels import (
    LABEL_DEPLOYMENT,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    deployment_selector,
    label_value,
)

logger = logging.getLogger(__name__)

_READ_FAILED: tuple[type[Exception], ...] = (ApiException, *UNANSWERED)


@dataclass(frozen=True)
class CompileJobs:
    """The compile Job of the current request and the deployment's running compile Jobs."""

    name: str
    phase: JobPhase
    message: str
    running: tuple[str, ...]
    #: The job spec key the current request's Job was made with (None: no Job, or made before keys).
    job_spec: str | None = None
    #: The current request's Job was made to compile a dangling request record again.
    republishes: bool = False
    #: The ServiceAccount the current request's running Job names, read because the Job has made no
    #: pod, and found missing; None when it exists, was not read, or could not be.
    missing_service_account: str | None = None
    #: The message of the newest FailedCreate Event of the current request's running Job, read because
    #: the Job has made no pod (``Error creating: <the API server's refusal>``); None when there is
    #: none, one older than the Job's last pod or current run (for a Job whose status counts a pod
    #: made: one not newer than a SuccessfulCreate), or it could not be read (then
    #: ``missing_service_account`` is read instead).
    failed_create: str | None = None
    #: Each Job being deleted (held by another controller's finalizer) with the live pods it controls
    #: (matched by its uid): what the plan deletes until none is left.
    held_pods: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: The current request's Job's uid (None: no Job).
    uid: str | None = None
    #: The Job observed (``name``) is the legacy request's, made by the operator before with the
    #: image that compiles the current request (see :func:`observe_compile_jobs`).
    inherited: bool = False
    #: Phase ``taken``: who controls the Job of the request's name (not this deployment).
    taken_by: str | None = None
    #: ... and it is the previous InferenceDeployment of this name, deleted, its Job awaiting the
    #: garbage collector (:func:`~neuronfleet.kube.builders.held_by_previous`).
    taken_by_previous: bool = False


@dataclass(frozen=True)
class ClusterObservation:
    """What the API server says about one deployment's fleet and compile Jobs."""

    pods: tuple[PodView, ...]
    #: Pods with the fleet's labels that another object controls: left out, but their names are taken.
    foreign_pod_names: frozenset[str]
    timelines: tuple[PodTimeline, ...]
    jobs: CompileJobs | None
    #: The error answer to the compile Jobs' reads (``jobs`` is None then): theirs alone, not the fleet's.
    jobs_unread: ApiException | None = None
    #: Pods of other deployments on the nodes of the fleet's pods, per node name (none: no other).
    neighbours: Mapping[str, int] = field(default_factory=dict)


def _naming(exc: ApiException, read: str) -> ApiException:
    """``exc`` with the read it answered in its reason ("429 Too Many Requests" alone does not say
    which of a reconcile's reads failed); a new exception, as a failed node list may be shared by
    several reconciles (:meth:`~neuronfleet.kube.client.KubeClient.list_nodes`). Still an
    ApiException: its status is kept, and so is the error kind the operator's metrics count."""
    named = ApiException(status=exc.status, reason=f"{exc.reason} (reading {read})")
    named.body, named.headers = exc.body, exc.headers
    return named


#: neuronfleet's pods that hold each node, by node name: whose each is, (namespace, deployment label).
#: The operator's is Kopf's index of the pods it watches (each pod's entry made by :func:`node_held`,
#: kept up to date by the watch: see :mod:`neuronfleet.handlers`); any such mapping in tests.
PodsOnNodes = Mapping[str, Collection[tuple[str, str]]]


def node_held(pod: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """The node ``pod`` holds, with whose the pod is: ``{node name: (namespace, deployment label)}``.

    Empty for a pod that holds none a shrink should count: not on a node, being deleted or ended,
    draining (leaving, as the plan counts its own), a compile Job's (it ends on its own), or not
    made by neuronfleet (its managed-by label). Empty, not None: Kopf keeps an index entry a
    function returns None for, and drops the pod's entries on an empty mapping.
    """
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    if (
        not node
        or labels.get(LABEL_MANAGED_BY) != MANAGED_BY
        or metadata.get("deletionTimestamp")
        or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        or labels.get(LABEL_ROLE) == "draining"
        or LABEL_COMPILE_REQUEST in labels
    ):
        return {}
    return {str(node): (str(metadata.get("namespace") or ""), str(labels.get(LABEL_DEPLOYMENT) or ""))}


def neighbours(on_nodes: PodsOnNodes, namespace: str, deployment: str, nodes: Collection[str]) -> dict[str, int]:
    """On each of ``nodes``, the pods of deployments other than ``namespace/deployment``."""
    own = (namespace, label_value(deployment))
    counts = {node: sum(holder != own for holder in on_nodes.get(node, ())) for node in nodes}
    return {node: count for node, count in counts.items() if count > 0}


async def _failure_details(kube: KubeApi, namespace: str, job_name: str, message: str) -> str:
    """Kubernetes' reason for a failed Job, with the compile pod's termination message or log tail."""
    pods = await kube.list_pods(namespace, {"job-name": job_name})
    for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True):
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (status.get("state") or {}).get("terminated") or {}
            # With FallbackToLogsOnError the message is the log's tail; OOMKilled is only in the reason.
            if terminated.get("reason") == "OOMKilled":
                return (
                    f"{message}; the compile ran out of memory (OOMKilled, exit code "
                    f"{terminated.get('exitCode', 137)}): raise spec.compile.memory"
                )
            if terminated.get("message"):
                return f"{message}; {terminated['message'].strip()[-800:]}"
        tail = await kube.pod_log_tail(namespace, pod["metadata"]["name"])
        if tail:
            return f"{message}; log tail: {tail.strip()[-800:]}"
    return message


#: How long a running compile Job may have no pod before its message says the API server may be
#: refusing it. The Job controller creates the pod within seconds of the Job; a create the API
#: server refuses (403 exceeded quota, a LimitRange's maximum, a webhook's denial) it retries with
#: back-off, and says why only in a FailedCreate Event (read then). A minute leaves a slow controller
#: time without calling it refused.
NO_POD_SECONDS = 60.0

#: A Job condition whose reason names a failed pod create is reported as is. Kubernetes' Job status
#: has no such condition today (FailedCreate is an Event's reason, as a ReplicaSet's ReplicaFailure
#: condition has it), so this is read in case a version or a controller sets one.
_FAILED_CREATE = "FailedCreate"


def _stamp(stamp: object) -> datetime | None:
    if not isinstance(stamp, str):
        return None
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def _created(obj: Obj) -> datetime | None:
    return _stamp(obj["metadata"].get("creationTimestamp"))


def _job_started(job: Obj) -> datetime | None:
    """When the Job's current run began, as Kubernetes says: its ``status.startTime`` (set by the Job
    controller on its first sync, and reset when the Job is resumed from suspension, e.g. by a queue
    controller such as Kueue), or its creation when it has none yet."""
    created = _created(job)
    started = _stamp((job.get("status") or {}).get("startTime"))
    if created is None or started is None:
        return started or created
    return max(created, started)


def _no_pod_details(job: Obj, now: datetime | None) -> str:
    """Why a running compile Job has no pod: a FailedCreate-like condition's message if its status
    has one, else, once it is :data:`NO_POD_SECONDS` old on ``now``, that the API server may be
    refusing the pod (aged from its start: :func:`_job_started`). Empty while it is younger, suspended,
    or its age is unknown. A Job whose status shows it has made a pod
    (:func:`~neuronfleet.kube.jobs.job_made_a_pod`) gets the text too, but only its Events can tell a
    refused retry from a Job between two attempts (see :func:`_waiting_details`)."""
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        reason = str(condition.get("reason") or "")
        if condition.get("status") == "True" and _FAILED_CREATE.lower() in reason.lower():
            return f"{reason}: {str(condition.get('message') or '').strip()[:300]}".rstrip(": ")
    if (job.get("spec") or {}).get("suspend"):
        return ""  # no pod by design
    started = _job_started(job)
    if now is None or started is None:
        return ""
    age = (now - started).total_seconds()
    if age < NO_POD_SECONDS:
        return ""
    name, namespace = job["metadata"]["name"], job["metadata"].get("namespace") or ""
    describe = f"kubectl describe job {name}" + (f" -n {namespace}" if namespace else "")
    if job_made_a_pod(job):
        # Its age is the first pod's, not how long it has had none: that is not known here.
        return (
            "no pod created since its last one: the API server may be refusing it (a ResourceQuota, LimitRange "
            f"or admission policy); see the FailedCreate events of {describe}"
        )
    # Whole minutes: the message is in the Compiled condition, and one that changed with every
    # reconcile would rewrite the status every interval for as long as the Job is stuck.
    return (
        f"no pod created for {int(age // 60)} min: the API server may be refusing it (a ResourceQuota, "
        f"LimitRange or admission policy); see the FailedCreate events of {describe}"
    )


#: How long an answer about a ServiceAccount or a Job's FailedCreate Events (found, missing, or not
#: readable: 403) is used before it is read again. A compile Job stuck on a refused pod is reconciled
#: every interval (10 s) per deployment; a fix (the account created, the LimitRange or the quota
#: changed) is then noticed within a minute (the Job controller's own retry of the pod is what starts
#: the compile, not this read).
ACCOUNT_ANSWER_SECONDS = 60.0
EVENT_ANSWER_SECONDS = 60.0

#: What one read of a ServiceAccount found. ``unreadable``: an error answer (403: the operator's role
#: lacks `get serviceaccounts`, an older chart); ``unanswered``: a timeout, a refused connection.
AccountAnswer = Literal["missing", "found", "unreadable", "unanswered"]

_Key = TypeVar("_Key", bound=Hashable)
_Answer = TypeVar("_Answer")


@dataclass
class RecentAnswers(Generic[_Key, _Answer]):
    """The operator's recent answers to one kind of read, per key, each used for ``ttl_seconds`` on
    the reconcile's clock. Concurrent reconciles asking for the same key while it is read share that
    one read and its outcome: each read in turn under a lock, the k-th waiter of a read the API
    server left unanswered got its answer after k timeouts. A read already ended is not shared. An
    unanswered read (a timeout, a refused connection) is not kept: the next asks again. Nothing is
    held for a key with no kept answer and no read under way (a lock per key asked about during an
    outage was kept for good)."""

    ttl_seconds: float
    #: When each answer was read, and what it was.
    _answers: dict[_Key, tuple[datetime, _Answer]] = field(default_factory=dict)
    #: The reads under way.
    _reads: dict[_Key, asyncio.Task[_Answer]] = field(default_factory=dict)

    def held(self) -> int:
        """The keys it holds something for: a kept answer or a read under way."""
        return len(self._answers.keys() | self._reads.keys())

    async def _answer(
        self, key: _Key, now: datetime, read: Callable[[], Awaitable[_Answer]], kept: Callable[[_Answer], bool]
    ) -> _Answer:
        """The answer for ``key``: ``read`` now unless a fresh one is kept or a read is under way;
        kept only if ``kept`` says."""
        held = self._answers.get(key)
        if held is not None and 0 <= (now - held[0]).total_seconds() < self.ttl_seconds:
            return held[1]
        task = self._reads.get(key)
        if task is None or task.done():
            # Done: an outcome (a failure: not kept) that its callback has yet to drop, not a read
            # under way, so a caller in the same loop step reads again.
            task = self._reads[key] = asyncio.ensure_future(self._read(key, now, read, kept))
            task.add_done_callback(lambda done: self._read_done(key, done))
        # Shielded: a waiter cancelled (its daemon stopping) leaves the read to the others.
        return await asyncio.shield(task)

    async def _read(
        self, key: _Key, now: datetime, read: Callable[[], Awaitable[_Answer]], kept: Callable[[_Answer], bool]
    ) -> _Answer:
        answer = await read()
        if kept(answer):
            # Expired answers of other keys go too: a namespace or Job left behind keeps no entry.
            for other in [k for k, (at, _) in self._answers.items() if (now - at).total_seconds() >= self.ttl_seconds]:
                del self._answers[other]
            self._answers[key] = (now, answer)
        return answer

    def _read_done(self, key: _Key, task: asyncio.Task[_Answer]) -> None:
        if self._reads.get(key) is task:
            del self._reads[key]
        if not task.cancelled():
            task.exception()  # retrieved: every waiter may have been cancelled


@dataclass
class AccountReads(RecentAnswers[tuple[str, str], AccountAnswer]):
    """The operator's recent answers about ServiceAccounts, per (namespace, account): one per
    operator, held by the reconciler."""

    ttl_seconds: float = ACCOUNT_ANSWER_SECONDS

    async def answer(self, kube: KubeApi, namespace: str, name: str, now: datetime) -> AccountAnswer:
        """What a read of ``name`` in ``namespace`` finds: read now unless a fresh answer is kept."""
        return await self._answer(
            (namespace, name), now, lambda: _read_account(kube, namespace, name), lambda a: a != "unanswered"
        )


async def _read_account(kube: KubeApi, namespace: str, name: str) -> AccountAnswer:
    """One read of the ServiceAccount ``name`` in ``namespace``."""
    try:
        found = await kube.read("ServiceAccount", namespace, name)
    except _READ_FAILED as exc:
        logger.debug("%s: ServiceAccount %s not read: %s", namespace, name, exc)
        return "unreadable" if isinstance(exc, ApiException) else "unanswered"
    return "missing" if found is None else "found"


@dataclass(frozen=True)
class FailedCreateAnswer:
    """What one read of a Job's Events found: ``found`` (the newest FailedCreate's ``message``: the
    Job's last pod create was refused), ``made`` (the Job made a pod after its newest FailedCreate, or
    with none: a SuccessfulCreate), ``none``, ``unreadable`` (an error answer: 403, the operator's role
    lacks `list events`, an older chart) or ``unanswered`` (a timeout, a refused connection)."""

    state: Literal["found", "made", "none", "unreadable", "unanswered"]
    message: str = ""
    #: ``found``: a SuccessfulCreate older than the refusal was listed, so the refused create is one
    #: after a pod the Job made (its retry), not possibly one of before its first pod.
    after_pod: bool = False
    #: ``found``: when the refusal last happened.
    at: datetime | None = None


@dataclass
class JobEventReads(RecentAnswers[tuple[str, str, str], FailedCreateAnswer]):
    """The operator's recent answers about compile Jobs' FailedCreate Events, per (namespace, Job,
    uid): one per operator, held by the reconciler, so a Job is read at most once a minute whatever
    reconciles it."""

    ttl_seconds: float = EVENT_ANSWER_SECONDS

    async def answer(self, kube: KubeApi, job: Obj, now: datetime) -> FailedCreateAnswer:
        """The newest FailedCreate Event of ``job``: read now unless a fresh answer is kept."""
        meta = job["metadata"]
        key = (str(meta.get("namespace") or ""), str(meta["name"]), str(meta.get("uid") or ""))
        return await self._answer(key, now, lambda: _read_failed_create(kube, job), lambda a: a.state != "unanswered")


_NEVER = datetime.min.replace(tzinfo=UTC)


def _event_time(event: Obj) -> datetime:
    """When an Event last happened: a repeated one (``count`` > 1) has its ``lastTimestamp`` moved;
    events.k8s.io writers set ``series.lastObservedTime`` or only ``eventTime``."""
    series = event.get("series") or {}
    for stamp in (
        series.get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    ):
        if isinstance(stamp, str) and stamp:
            try:
                when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            except ValueError:
                continue
            return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    return _NEVER


#: The reason of the Job controller's Event for each pod it made (``Created pod: <name>``).
_SUCCESSFUL_CREATE = "SuccessfulCreate"


async def _read_failed_create(kube: KubeApi, job: Obj) -> FailedCreateAnswer:
    """One list of the Events of ``job``, filtered by the API server (pkg/registry/core/event:
    involvedObject.kind, .name and .uid are selectable fields): the newest FailedCreate's message
    (the Job controller's refused pod creates), unless the Job made a pod since (its SuccessfulCreate
    is as new or newer). Both kinds in one list: a Job has few Events.

    A refusal older than the Job's last pod is not why it has none now: its status counts no pod that
    a disruption ended, which its pod failure policy ignores (preempted, its node gone), so such a Job
    between two pods reads as one that never made any, and a FailedCreate of before its first pod is
    kept an hour. Events of before the Job's current run (its ``status.startTime``, reset when it is
    resumed from suspension; the Job controller stamps both) are not about it either. A
    SuccessfulCreate dropped by the event recorder's spam filter, or expired (an hour), leaves the
    refusal read as the newest."""
    meta = job["metadata"]
    namespace = str(meta.get("namespace") or "")
    fields = {"involvedObject.kind": "Job", "involvedObject.name": str(meta["name"])}
    if meta.get("uid"):
        # A Job deleted and made again under the same name (a superseded compile) has a new uid: the
        # old one's Events are not this one's.
        fields["involvedObject.uid"] = str(meta["uid"])
    try:
        events = await kube.list_events(namespace, fields)
    except _READ_FAILED as exc:
        logger.debug("%s: Events of Job %s not read: %s", namespace, meta["name"], exc)
        return FailedCreateAnswer("unreadable" if isinstance(exc, ApiException) else "unanswered")
    started = _stamp((job.get("status") or {}).get("startTime")) or _NEVER
    current = [event for event in events if _event_time(event) >= started]
    messages = [
        (_event_time(event), str(event.get("message") or ""))
        for event in current
        if event.get("reason") == _FAILED_CREATE and event.get("message")
    ]
    made = [_event_time(event) for event in current if event.get("reason") == _SUCCESSFUL_CREATE]
    if made and (not messages or max(made) >= max(messages)[0]):
        return FailedCreateAnswer("made")
    if not messages:
        return FailedCreateAnswer("none")
    newest = max(messages)
    return FailedCreateAnswer("found", newest[1], after_pod=bool(made), at=newest[0])


async def _missing_account(
    kube: KubeApi, namespace: str, job: Obj, now: datetime, accounts: AccountReads | None
) -> str | None:
    """The ServiceAccount the Job's pods name, when a read finds it missing (None: it exists, it is
    the namespace's ``default``, which the ServiceAccount controller keeps, or it could not be read:
    unknown, not missing). ``accounts``: the operator's recent answers (None: read now)."""
    pod_spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    name = pod_spec.get("serviceAccountName") or pod_spec.get("serviceAccount") or DEFAULT_ACCOUNT
    if name == DEFAULT_ACCOUNT:
        return None
    if accounts is not None:
        answer = await accounts.answer(kube, namespace, name, now)
    else:
        answer = await _read_account(kube, namespace, name)
    return name if answer == "missing" else None


async def _waiting_details(
    kube: KubeApi,
    namespace: str,
    job: Obj,
    now: datetime | None,
    accounts: AccountReads | None = None,
    events: JobEventReads | None = None,
) -> tuple[str, str | None, str | None]:
    """Why a running compile Job's pod has not started: unschedulable, its image not pulled, or no
    pod now (none listed, or only ended ones: see :func:`_no_pod_details`); with the latter, the
    message of the Job's newest FailedCreate Event (the API server's refusal, in the Job controller's
    words), else (none, or the Events could not be read) the Job's ServiceAccount when a read finds
    it missing; nothing when its Events say it made a pod after the last refusal (between two pods).
    For a Job that has made a pod (its status counts one, or one ended is listed) only a refusal
    ordered after its last pod, or a missing account, is a cause: else it is between two attempts.

    Empty when it runs (or nothing says why not). A Job stuck so would otherwise read "running"
    until its deadline, then "DeadlineExceeded" without the cause.
    """
    pods = await kube.list_pods(namespace, {"job-name": job["metadata"]["name"]})
    # A pod that ended is no pod now: the Job controller keeps a failed one (its logs) and makes the
    # next beside it, which the API server may refuse as it may the first.
    ended = [pod for pod in pods if (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")]
    uid = job["metadata"].get("uid")
    if any(
        (pod.get("status") or {}).get("phase") == "Succeeded" and (not uid or controlled_by(pod, uid)) for pod in ended
    ):
        # The compile succeeded (a compile Job completes with one pod): the Job controller marks the
        # Job complete next, or did after this Job was listed. No next pod is due, so none is refused.
        # Only its own pod says so: one of an earlier Job of this name may not be collected yet.
        return "", None, None
    if len(ended) == len(pods):
        details = _no_pod_details(job, now)
        if not details or now is None:
            return details, None, None
        failed = await (events or JobEventReads()).answer(kube, job, now)
        if failed.state == "made":
            return "", None, None  # between two pods, which its status does not count (see the read)
        if not ended and not job_made_a_pod(job):
            if failed.state == "found":
                return details, None, failed.message
            return details, await _missing_account(kube, namespace, job, now, accounts), None
        # Its status counts a pod made: between two attempts (its failed or lost pod gone, the next made
        # after the Job controller's back-off, up to minutes), unless the API server refuses the next: a
        # FailedCreate newer than its last SuccessfulCreate (a quota taken meanwhile, a webhook, its
        # account deleted). One with no SuccessfulCreate to order it by may be of before its first pod
        # (Events last an hour; the recorder's spam filter may drop one): not taken as the cause. An
        # ended pod still listed orders it too (its SuccessfulCreate may have expired).
        made = [when for pod in ended if (when := _created(pod)) is not None]
        if failed.state == "found" and (failed.after_pod or (failed.at and made and max(made) <= failed.at)):
            return details, None, failed.message
        # A missing ServiceAccount refuses every pod, the retry too, whatever the Events say.
        missing = await _missing_account(kube, namespace, job, now, accounts)
        return ("", None, None) if missing is None else (details, missing, None)
    for pod in pods:
        status = pod.get("status") or {}
        for container in status.get("containerStatuses") or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") and waiting["reason"] not in ("ContainerCreating", "PodInitializing"):
                return f"{waiting['reason']}: {(waiting.get('message') or '').strip()[:300]}".rstrip(": "), None, None
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                why = (condition.get("message") or condition.get("reason") or "").strip()[:300]
                return f"not scheduled: {why}", None, None
    return "", None, None


async def observe_compile_jobs(
    kube: KubeApi,
    namespace: str,
    deployment: str,
    request: CompileRequest,
    now: datetime | None = None,
    accounts: AccountReads | None = None,
    events: JobEventReads | None = None,
    inherited: CompileRequest | None = None,
    owner_uid: str | None = None,
) -> CompileJobs:
    """One list of the deployment's compile Jobs: the current request's state and the running ones.

    ``now`` (the reconcile's clock, which stamps the Jobs' creation in the sandbox) ages a running
    Job that has no pod; without it such a Job is not reported as refused. ``accounts`` and
    ``events``: the operator's recent answers about ServiceAccounts and Jobs' FailedCreate Events
    (None: such a Job's are read every time). ``inherited``: the legacy request of this very spec
    and source (:func:`~neuronfleet.planning.compile.legacy_request`) whose Job, running or finished,
    is reported as the current request's when the current request has none, so it is neither
    superseded nor made again: only one whose pods run the current request's image, the one in its key
    (the operator before compiled with the image it ran; a Job of another is another compile, whose
    artifact and failure are not this request's). One being deleted is not (the request's is made).

    ``owner_uid``: the deployment's uid. Only the Jobs it controls are its compiles (as only the pods
    it controls are its fleet): an object deleted and created again under the same name finds the old
    one's Jobs, with the labels and names of its own, until the garbage collector removes them; their
    outcome is not this object's (a failure taken so outlived the Job in status.compileFailure). A Job
    of the request's name that another controls is ``taken``, with its controller in ``taken_by``: the
    request's Job is made once it is gone. None: every Job listed counts (no uid to match).
    """
    name = compile_job_name(deployment, request)
    listed: list[Obj] = await kube.list_jobs(namespace, compile_job_selector(deployment))
    jobs = listed if owner_uid is None else [job for job in listed if controlled_by(job, owner_uid)]
    adopted = False
    if inherited is not None and not any(job["metadata"]["name"] == name for job in jobs):
        legacy_name = compile_job_name(deployment, inherited)
        for job in jobs:
            if job["metadata"]["name"] == legacy_name and adopts_legacy_job(job_phase(job)[0], job_image(job), request):
                name, adopted = legacy_name, True
    phase: JobPhase = "absent"
    message = ""
    job_spec = None
    republishes = False
    missing_account = failed_create = None
    running = []
    held: list[tuple[str, tuple[str, ...]]] = []
    current: Obj | None = None
    for job in jobs:
        job_name = job["metadata"]["name"]
        job_state, job_message = job_phase(job)
        if job_state == "running":
            running.append(job_name)
        elif job_state == "removing" and (pods := await _held_job_pods(kube, namespace, job)):
            held.append((job_name, pods))
        if job_name == name:
            phase, message, current = job_state, job_message, job
            annotations = job["metadata"].get("annotations") or {}
            job_spec = annotations.get(ANNOTATION_JOB_SPEC)
            republishes = ANNOTATION_REPUBLISHES in annotations
    taken_by, taken_by_previous = None, False
    if phase == "absent":
        taken = (job for job in listed if job["metadata"]["name"] == name and not controlled_by(job, owner_uid))
        other = next(taken, None) if owner_uid is not None else None
        if other is not None:
            # Its outcome (a failure, above all) is another object's: not read, not reported.
            phase = "taken"
            taken_by, taken_by_previous = describe_controller(other), held_by_previous(other, deployment, owner_uid)
    if phase == "failed":
        message = await _failure_details(kube, namespace, name, message)
    elif phase == "running" and current is not None:
        message, missing_account, failed_create = await _waiting_details(
            kube, namespace, current, now, accounts, events
        )
    return CompileJobs(
        name,
        phase,
        message,
        tuple(sorted(running)),
        job_spec,
        republishes,
        missing_account,
        failed_create,
        tuple(sorted(held)),
        None if current is None else current["metadata"].get("uid"),
        adopted,
        taken_by,
        taken_by_previous,
    )


async def _held_job_pods(kube: KubeApi, namespace: str, job: Obj) -> tuple[str, ...]:
    """The live pods a Job being deleted still controls: the garbage collector deletes them only once
    the Job is gone, and the Job controller manages no Job being deleted, so its compile runs on.

    Matched by the Job's uid, not its name alone: a Job of that name made again owns its own pods. A
    failed read leaves them to the next reconcile (read again then), not the rest of the compile read.
    """
    name = job["metadata"]["name"]
    try:
        pods = await kube.list_pods(namespace, {"job-name": name})
    except _READ_FAILED as exc:
        logger.warning("%s: the pods of the compile Job %s being deleted were not read: %s", namespace, name, exc)
        return ()
    uid = job["metadata"].get("uid")
    return tuple(
        sorted(
            pod["metadata"]["name"]
            for pod in pods
            if uid and not pod["metadata"].get("deletionTimestamp") and controlled_by(pod, uid)
        )
    )


def controlled_by(pod: Obj, owner_uid: str | None) -> bool:
    """Whether the pod's controller reference names the deployment with ``owner_uid``.

    The label alone is not enough: a deployment deleted and created again under the same name
    leaves pods the garbage collector has not yet removed, and a pod labelled by hand is no one's
    to drain. Both would otherwise count as this deployment's fleet.
    """
    refs = pod["metadata"].get("ownerReferences") or []
    return any(ref.get("controller") and ref.get("uid") == owner_uid for ref in refs)


async def observe_cluster(
    kube: KubeApi,
    namespace: str,
    deployment: str,
    request: CompileRequest | None,
    owner_uid: str | None,
    now: datetime,
    accounts: AccountReads | None = None,
    events: JobEventReads | None = None,
    placeholder_account: str | None = None,
    inherited: CompileRequest | None = None,
    occupancy: PodsOnNodes | None = None,
) -> ClusterObservation:
    """The fleet's pods (those ``owner_uid`` controls), their timelines and (with a ``request``) the
    compile Jobs, as of ``now`` (the reconcile's clock); ``accounts``, ``events``, ``inherited``: see
    :func:`observe_compile_jobs`; ``placeholder_account``: see :func:`parse_pod`. Other deployments'
    pods on the fleet's nodes are counted from ``occupancy`` when it is given (no request)."""
    try:
        listed = await kube.list_pods(namespace, deployment_selector(deployment))
    except ApiException as exc:
        raise _naming(exc, f"the pods of {deployment}") from exc
    labelled = [pod for pod in listed if LABEL_COMPILE_REQUEST not in (pod["metadata"].get("labels") or {})]
    pods = [pod for pod in labelled if controlled_by(pod, owner_uid)]
    foreign = frozenset(pod["metadata"]["name"] for pod in labelled if not controlled_by(pod, owner_uid))
    try:
        nodes = await kube.list_nodes()
        names = {node["metadata"]["name"] for node in nodes}
        if any((pod.get("spec") or {}).get("nodeName") not in names | {None, ""} for pod in pods):
            # A node missing from a cached list may be new, not lost: a pod is replaced only when a
            # fresh list agrees its node is gone.
            nodes = await kube.list_nodes(fresh=True)
            names = {node["metadata"]["name"] for node in nodes}
    except ApiException as exc:
        raise _naming(exc, "the nodes") from exc
    zones = {node["metadata"]["name"]: (node["metadata"].get("labels") or {}).get(LABEL_ZONE, "") for node in nodes}
    jobs, unread = None, None
    if request is not None:
        try:
            jobs = await observe_compile_jobs(
                kube, namespace, deployment, request, now, accounts, events, inherited, owner_uid
            )
        except ApiException as exc:
            unread = exc
    fleet_nodes = {node for pod in pods if (node := (pod.get("spec") or {}).get("nodeName"))}
    neighbouring = neighbours(occupancy, namespace, deployment, fleet_nodes) if occupancy is not None else {}
    return ClusterObservation(
        pods=tuple(parse_pod(pod, names, node_zones=zones, placeholder_account=placeholder_account) for pod in pods),
        foreign_pod_names=foreign,
        timelines=tuple(pod_timelines(pods, nodes)),
        jobs=jobs,
        jobs_unread=unread,
        neighbours=neighbouring,
    )
