"""A batch/v1 Job controller for the sandbox (what kube-controller-manager's job and TTL
controllers do, for the single-pod Jobs the operator runs).

Each Job that is not suspended gets one pod at a time from its template (owned by the Job,
labelled ``batch.kubernetes.io/job-name`` and ``controller-uid``, with the
``batch.kubernetes.io/job-tracking`` finalizer). A pod is counted once, when it has ended or is
being deleted, and its finalizer is then removed, so that a pod deleted before it ended is still
counted (the real controller stages the count in ``status.uncountedTerminatedPods`` between its
API calls; here the count and the finalizer's removal are one step of the event loop, so nothing
can fall between them). A Succeeded pod completes the Job (``Complete`` and ``SuccessCriteriaMet``
conditions, ``succeeded``, ``completionTime``); a Failed one, or one deleted before it ended,
counts against ``backoffLimit`` (default 6) and is replaced until the limit is exceeded (``Failed``
condition, reason BackoffLimitExceeded), each replacement after the controller's exponential
back-off (counted from when the last failed pod ended, read as getFinishedTime reads it: its
containers' last exit, else its Ready condition turning False, else its deletion's request; 10 s
after the first failure since the last success, doubling, at most 10 minutes:
job_controller.go's DefaultJobPodFailureBackOff and MaxJobPodFailureBackOff; the Kubernetes
documentation says "capped at six minutes", the code's constant is 10 minutes).

A pod failure policy (``podFailurePolicy``, rules tried in order, the first that matches decides)
decides what a Failed pod does: Ignore (not counted: replaced without using a retry), FailJob (the
Job fails at once, reason PodFailurePolicy) or Count; rules match ``onPodConditions`` (e.g.
DisruptionTarget, which preemption, evictions and the pod GC set) or ``onExitCodes`` (``In`` or
``NotIn``, for one container or any, exit code 0 never matching). With a pod failure policy (or
``podReplacementPolicy: Failed``) a pod being deleted counts only once it has ended and is not
replaced before: the kubelet writes a deleted pod's terminal phase, whose conditions the policy reads.
``activeDeadlineSeconds`` fails the Job with DeadlineExceeded, counted from its ``startTime``;
``ttlSecondsAfterFinished`` deletes a finished Job (and, by GC, its pods), counted from its
``completionTime`` (a failed Job's: its Failed condition's transition). Both are read from the Job,
as the real controllers read them, so the controller keeps no clock of its own per Job. The
finalizer of a pod whose Job has finished, is being deleted or is gone is removed. A pod the API
server refuses (admission: a missing ServiceAccount or PriorityClass) is reported as the real
controller does, in a FailedCreate Warning Event on the Job ("Error creating: <the API server's
message>"), and tried again at the next round, the Job's status unchanged.

Not done: ``completions``/``parallelism`` above 1, indexed Jobs (and so the FailIndex action,
which the API server accepts only for them), success policies and ``status.uncountedTerminatedPods``
(above).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
from dataclasses import dataclass
from typing import Any, Literal

from neuronfleet.sandbox.clock import parse_timestamp, run_controller
from neuronfleet.sandbox.conditions import set_condition
from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.events import EventRecorder
from neuronfleet.sandbox.nodes import pod_has_ended, pod_is_ready
from neuronfleet.sandbox.store import Obj, Store, WatchEvent

#: The finalizer that keeps a Job's pod until the Job controller has counted it.
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
#: The back-off before the first replacement of a failed pod, doubled per further failure...
POD_FAILURE_BACKOFF_S = 10.0
#: ... up to this (job_controller.go: DefaultJobPodFailureBackOff, MaxJobPodFailureBackOff).
MAX_POD_FAILURE_BACKOFF_S = 600.0

PodOutcome = Literal["succeeded", "failed", "ignored", "fail-job"]


@dataclass
class _Backoff:
    """The back-off record of one Job: failures since its last success, and when the last ended."""

    failures: int = 0
    last_failure: datetime.datetime | None = None


class JobController:
    def __init__(self, store: Store, *, interval_s: float = 10.0) -> None:
        self.store = store
        self.interval_s = interval_s
        self.events = EventRecorder(store, "job-controller")
        self._jobs = store.resource("batch", "jobs")
        self._pods = store.resource("", "pods")
        self._backoff: dict[str, _Backoff] = {}
        #: Jobs deleted since the last round, whose pods' finalizers are to be removed.
        self._gone: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._wake = asyncio.Event()
        store.listeners.append(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        if event.resource == ("batch", "jobs") and event.type == "DELETED":
            self._gone.add(event.obj["metadata"]["uid"])
        if event.resource in (("batch", "jobs"), ("", "pods")):
            self._wake.set()

    async def run(self) -> None:
        await run_controller("job controller", self.sync, self._wake, self.interval_s)

    def sync(self) -> None:
        jobs = {job["metadata"]["uid"]: job for job in self.store.iter(self._jobs)}
        for uid, job in jobs.items():
            with contextlib.suppress(ApiError):
                self._sync_job(job, list(self.store.dependents(uid, self._pods)))
        for uid in list(self._gone):
            # A Job that is gone no longer needs its pods counted: let them go.
            for pod in list(self.store.dependents(uid, self._pods)):
                self._release(pod)
            self._gone.discard(uid)
        for uid in self._backoff.keys() - jobs.keys():
            del self._backoff[uid]

    def _sync_job(self, job: Obj, pods: list[Obj]) -> None:
        meta, spec = job["metadata"], job.get("spec") or {}
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        if meta.get("deletionTimestamp") or _finished(job):
            for pod in pods:
                self._release(pod)
            if meta.get("deletionTimestamp"):
                return
            ttl = spec.get("ttlSecondsAfterFinished")
            if ttl is None:
                return
            age = self.store.clock.seconds_since(_job_finish_time(job)) or 0.0
            if age >= float(ttl):
                self.store.delete(self._jobs, namespace, name, propagation="Background")
            else:
                self._wake_at(f"{uid}/ttl", float(ttl) - age)
            return
        if spec.get("suspend"):
            return
        ended = {
            p["metadata"]["uid"]: _outcome(p, spec)
            for p in pods
            if TRACKING_FINALIZER in (p["metadata"].get("finalizers") or ()) and _has_finished(p, spec)
        }
        self._record_backoff(uid, pods, ended)
        self._settle(job, pods, ended)
        # Only once the count is written: a pod whose count was lost would be counted again.
        for pod in pods:
            if pod["metadata"]["uid"] in ended:
                self._release(pod)

    def _settle(self, job: Obj, pods: list[Obj], ended: dict[str, tuple[PodOutcome, str]]) -> None:
        """Write the Job's counts with the pods that ended since the last round, and finish it, or
        make its next pod (after the back-off), as they say."""
        meta, spec = job["metadata"], job.get("spec") or {}
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        status = job.get("status") or {}
        now_ts = self.store.clock.timestamp()
        outcomes = [outcome for outcome, _ in ended.values()]
        succeeded = int(status.get("succeeded") or 0) + outcomes.count("succeeded")
        failed = int(status.get("failed") or 0) + outcomes.count("failed") + outcomes.count("fail-job")
        active = [p for p in pods if not pod_has_ended(p) and not p["metadata"].get("deletionTimestamp")]
        terminating = [p for p in pods if not pod_has_ended(p) and p["metadata"].get("deletionTimestamp")]
        # Counted from the Job's startTime, as the real controller does: not from when this one first
        # saw the Job, which a restart would move.
        active_s = self.store.clock.seconds_since(status.get("startTime")) or 0.0
        deadline = spec.get("activeDeadlineSeconds")
        if "succeeded" in outcomes:
            self._finish(
                job, "Complete", "CompletionsReached", "Reached expected number of succeeded pods", succeeded, failed
            )
            return
        fail_job = next((message for outcome, message in ended.values() if outcome == "fail-job"), None)
        if fail_job is not None:
            self._delete_pods(active)
            self._finish(job, "Failed", "PodFailurePolicy", fail_job, succeeded, failed)
            return
        if failed > int(spec.get("backoffLimit", 6)):
            self._finish(
                job, "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit", succeeded, failed
            )
            return
        if deadline is not None and active_s >= float(deadline):
            self._delete_pods(active)
            self._finish(
                job, "Failed", "DeadlineExceeded", "Job was active longer than specified deadline", succeeded, failed
            )
            return
        if deadline is not None:
            self._wake_at(f"{uid}/deadline", float(deadline) - active_s)
        # With a pod failure policy a pod being deleted is replaced only once it has ended: its end
        # may yet fail the Job (podReplacementPolicy Failed, the default with such a policy).
        blocked = bool(terminating) and _only_replace_failed(spec)
        backoff_s = self._backoff_remaining(uid)
        if not active and not blocked and backoff_s <= 0:
            try:
                created = self._create_pod(job)
            except ApiError as exc:
                # As kube-controller-manager: said only in an Event, and tried again next round. The
                # wording is RealPodControl.createPods' (kubernetes pkg/controller/controller_utils.go:
                # Eventf(object, Warning, FailedCreatePodReason, "Error creating: %v", err)), which the
                # operator reads (planning.admission.compile_refusal).
                self.events.record(job, "Warning", "FailedCreate", f"Error creating: {exc.message}")
                if not ended:
                    return
            else:
                active = [created]
        elif not active and not blocked:
            self._wake_at(f"{uid}/backoff", backoff_s)
        ready = sum(1 for p in active if pod_is_ready(p))
        wanted = {
            **status,
            "active": len(active),
            "failed": failed,
            "succeeded": succeeded,
            "ready": ready,
            "terminating": len(terminating),
        }
        wanted.setdefault("startTime", now_ts)
        if wanted != status:
            self.store.update(
                self._jobs,
                namespace,
                name,
                lambda o: o.__setitem__("status", {**(o.get("status") or {}), **wanted}),
                subresource="status",
            )

    def _record_backoff(self, uid: str, pods: list[Obj], ended: dict[str, tuple[PodOutcome, str]]) -> None:
        """The back-off record as backoff_utils.go keeps it: failures (ignored ones too) since the
        last success, and when the last of them ended (``ended``: the pods counted this round)."""
        ended_pods = [p for p in pods if p["metadata"]["uid"] in ended]
        if not ended_pods:
            return
        record = self._backoff.setdefault(uid, _Backoff())
        finished = {p["metadata"]["uid"]: _finish_time(p) for p in ended_pods}
        succeeded = [t for uid, t in finished.items() if t is not None and ended[uid][0] == "succeeded"]
        failures = [t for uid, t in finished.items() if t is not None and ended[uid][0] != "succeeded"]
        if succeeded:
            failures = [t for t in failures if t > max(succeeded)]
            record.failures, record.last_failure = 0, None
        if failures:
            record.failures += len(failures)
            record.last_failure = max(failures)

    def _backoff_remaining(self, uid: str) -> float:
        """Seconds until the Job's next pod may be made (0 or less: now)."""
        record = self._backoff.get(uid)
        if record is None or record.failures == 0 or record.last_failure is None:
            return 0.0
        backoff = min(POD_FAILURE_BACKOFF_S * 2.0 ** (record.failures - 1), MAX_POD_FAILURE_BACKOFF_S)
        return backoff - (self.store.clock.seconds_since(record.last_failure) or 0.0)

    def _release(self, pod: Obj) -> None:
        """Remove the tracking finalizer (the pod, if being deleted, then goes)."""
        if TRACKING_FINALIZER not in (pod["metadata"].get("finalizers") or ()):
            return
        with contextlib.suppress(ApiError):
            self.store.remove_finalizer(
                self._pods, pod["metadata"]["namespace"], pod["metadata"]["name"], TRACKING_FINALIZER
            )

    def _delete_pods(self, pods: list[Obj]) -> None:
        for pod in pods:
            with contextlib.suppress(ApiError):
                self.store.delete(self._pods, pod["metadata"]["namespace"], pod["metadata"]["name"])

    def _wake_at(self, key: str, delay: float) -> None:
        """One timer per job and purpose: resyncs must not pile up timers."""
        if key not in self._timers:

            def fire() -> None:
                self._timers.pop(key, None)
                self._wake.set()

            # A floor, as in the provisioner: a zero-rounded delay livelocks under looptime.
            self._timers[key] = asyncio.get_running_loop().call_later(max(delay, 0.05), fire)

    def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def _create_pod(self, job: Obj) -> Obj:
        meta = job["metadata"]
        template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        pod_meta = template.get("metadata") or {}
        labels = {
            **(pod_meta.get("labels") or {}),
            "batch.kubernetes.io/job-name": meta["name"],
            "job-name": meta["name"],
            "controller-uid": meta["uid"],
            "batch.kubernetes.io/controller-uid": meta["uid"],
        }
        body: Any = {
            "metadata": {
                "generateName": f"{meta['name']}-",
                "labels": labels,
                "annotations": pod_meta.get("annotations") or {},
                "finalizers": [TRACKING_FINALIZER],
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": template.get("spec") or {},
        }
        pod = self.store.create(self._pods, meta["namespace"], body)
        self.events.record(job, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}")
        return pod

    def _finish(self, job: Obj, kind: str, reason: str, message: str, succeeded: int, failed: int) -> None:
        now = self.store.clock.timestamp()
        meta = job["metadata"]

        def finish(o: Obj) -> None:
            status = o.setdefault("status", {})
            status.update(active=0, succeeded=succeeded, failed=failed, ready=0)
            status.setdefault("startTime", now)
            if kind == "Complete":
                status["completionTime"] = now
                set_condition(
                    o,
                    {
                        "type": "SuccessCriteriaMet",
                        "status": "True",
                        "reason": reason,
                        "message": message,
                        "lastProbeTime": now,
                        "lastTransitionTime": now,
                    },
                )
            else:
                set_condition(
                    o,
                    {
                        "type": "FailureTarget",
                        "status": "True",
                        "reason": reason,
                        "message": message,
                        "lastProbeTime": now,
                        "lastTransitionTime": now,
                    },
                )
            set_condition(
                o,
                {
                    "type": kind,
                    "status": "True",
                    "reason": reason,
                    "message": message,
                    "lastProbeTime": now,
                    "lastTransitionTime": now,
                },
            )

        self.store.update(self._jobs, meta["namespace"], meta["name"], finish, subresource="status")
        self.events.record(
            job, "Normal" if kind == "Complete" else "Warning", "Completed" if kind == "Complete" else reason, message
        )
        self._wake.set()


def _finished(job: Obj) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def _only_replace_failed(spec: Obj) -> bool:
    """Whether a pod being deleted waits for its end to be counted and replaced (onlyReplaceFailedPods)."""
    return spec.get("podReplacementPolicy") == "Failed" or bool(spec.get("podFailurePolicy"))


def _has_finished(pod: Obj, spec: Obj) -> bool:
    """Whether the Job counts ``pod`` now: it ended, or is being deleted and its end is not awaited
    (isPodFailed: a deleted pod may never reach a terminal phase)."""
    if pod_has_ended(pod):
        return True
    return bool(pod["metadata"].get("deletionTimestamp")) and not _only_replace_failed(spec)


def _outcome(pod: Obj, spec: Obj) -> tuple[PodOutcome, str]:
    """How a finished pod counts, and for a pod that fails the Job, the message it fails it with."""
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Succeeded":
        return "succeeded", ""
    if phase != "Failed":
        return "failed", ""  # deleted before it ended, with no policy to read its end
    rules = ((spec.get("podFailurePolicy") or {}).get("rules")) or []
    for index, rule in enumerate(rules):
        cause = _rule_matches(pod, rule)
        if cause is None:
            continue
        action = rule.get("action")
        if action == "Ignore":
            return "ignored", ""
        if action == "FailJob":
            return "fail-job", f"{cause} matching FailJob rule at index {index}"
        return "failed", ""
    return "failed", ""


def _rule_matches(pod: Obj, rule: Obj) -> str | None:
    """What in ``pod`` a pod failure policy rule matches, worded as the controller's message, or None."""
    meta, status = pod["metadata"], pod.get("status") or {}
    on_exit_codes = rule.get("onExitCodes")
    if on_exit_codes:
        values = {int(v) for v in on_exit_codes.get("values") or ()}
        wanted_name = on_exit_codes.get("containerName")
        for container in [*(status.get("containerStatuses") or ()), *(status.get("initContainerStatuses") or ())]:
            code = ((container.get("state") or {}).get("terminated") or {}).get("exitCode")
            if code is None or code == 0 or (wanted_name and container.get("name") != wanted_name):
                continue
            if (code in values) == (on_exit_codes.get("operator") != "NotIn"):
                return (
                    f"Container {container.get('name')} for pod {meta['namespace']}/{meta['name']} "
                    f"failed with exit code {code}"
                )
        return None
    for wanted in rule.get("onPodConditions") or ():
        for condition in status.get("conditions") or ():
            if condition.get("type") == wanted.get("type") and condition.get("status") == wanted.get("status", "True"):
                return f"Pod {meta['namespace']}/{meta['name']} has condition {wanted.get('type')}"
    return None


def _job_finish_time(job: Obj) -> datetime.datetime | None:
    """When a finished Job finished: its completionTime, else its Complete or Failed condition's
    transition (the TTL controller's jobFinishTime)."""
    status = job.get("status") or {}
    if status.get("completionTime"):
        return parse_timestamp(status["completionTime"])
    for condition in status.get("conditions") or ():
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return parse_timestamp(condition.get("lastTransitionTime"))
    return None


def _finish_time(pod: Obj) -> datetime.datetime | None:
    """When a pod ended, as the real controller's getFinishedTime reads it: its containers' last exit
    once every one has exited; else when its Ready condition turned False; else when it was asked to
    go (its deletionTimestamp less the grace the deletion gave); else its creation. Compared as
    times, not as text: a status written by hand may carry fractions of a second or an offset."""
    status, meta = pod.get("status") or {}, pod["metadata"]
    finished = [
        parse_timestamp(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for c in status.get("containerStatuses") or ()
    ]
    exits = [t for t in finished if t is not None]
    if exits and len(exits) == len(finished):
        return max(exits)
    ready = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") == "False":
        turned = parse_timestamp(ready.get("lastTransitionTime"))
        if turned is not None:
            return turned
    grace_ends = parse_timestamp(meta.get("deletionTimestamp"))
    if grace_ends is not None:
        # deletionTimestamp is when the grace ends, not when the deletion was asked.
        return grace_ends - datetime.timedelta(seconds=int(meta.get("deletionGracePeriodSeconds") or 0))
    return parse_timestamp(meta.get("creationTimestamp"))
