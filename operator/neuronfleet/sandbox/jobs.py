"""A batch/v1 Job controller for the sandbox (what kube-controller-manager's job and TTL
controllers do, for the single-pod Jobs the operator runs).

Each Job that is not suspended gets one pod at a time from its template (owned by the Job,
labelled ``batch.kubernetes.io/job-name`` and ``controller-uid``). A Succeeded pod completes the Job
(``Complete`` and ``SuccessCriteriaMet`` conditions, ``succeeded``, ``completionTime``); a Failed
pod counts against ``backoffLimit`` (default 6) and is replaced until the limit is exceeded
(``Failed`` condition, reason BackoffLimitExceeded); ``activeDeadlineSeconds`` fails the Job with
DeadlineExceeded; ``ttlSecondsAfterFinished`` deletes a finished Job (and, by GC, its pods). A pod
the API server refuses (admission: a missing ServiceAccount or PriorityClass) is reported as the
real controller does, in a FailedCreate Warning Event on the Job ("Error creating: <the API
server's message>"), and tried again at the next round, the Job's status unchanged.

Not done: ``completions``/``parallelism`` above 1, indexed Jobs, pod failure policies, and the
exponential back-off (10 s, doubling, at most 6 minutes) before a failed pod's replacement, which
comes at once here. A pod deleted before it ended is replaced without being counted: kube-controller-
manager counts it failed unless a pod failure policy ignores it. The operator's compile Jobs ignore
pods with a DisruptionTarget condition, which preemption and evictions set (and both delete the pod),
so for them the outcome is the same; a pod deleted by hand is the difference.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from typing import Any

from neuronfleet.sandbox.clock import run_controller
from neuronfleet.sandbox.conditions import set_condition
from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.events import EventRecorder
from neuronfleet.sandbox.nodes import pod_has_ended, pod_is_ready
from neuronfleet.sandbox.store import Obj, Store, WatchEvent


class JobController:
    def __init__(self, store: Store, *, interval_s: float = 10.0) -> None:
        self.store = store
        self.interval_s = interval_s
        self.events = EventRecorder(store, "job-controller")
        self._jobs = store.resource("batch", "jobs")
        self._pods = store.resource("", "pods")
        self._started: dict[str, float] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._wake = asyncio.Event()
        store.listeners.append(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        if event.resource in (("batch", "jobs"), ("", "pods")):
            self._wake.set()

    async def run(self) -> None:
        await run_controller("job controller", self.sync, self._wake, self.interval_s)

    def sync(self) -> None:
        for job in list(self.store.iter(self._jobs)):
            with contextlib.suppress(ApiError):
                self._sync_job(job)

    def _pods_of(self, job: Obj) -> list[Obj]:
        uid = job["metadata"]["uid"]
        return [
            p
            for p in self.store.iter(self._pods, job["metadata"]["namespace"])
            if any(ref.get("uid") == uid for ref in p["metadata"].get("ownerReferences") or ())
        ]

    def _sync_job(self, job: Obj) -> None:
        meta, spec = job["metadata"], job.get("spec") or {}
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        status = job.get("status") or {}
        now_ts = self.store.clock.timestamp()
        now = self.store.clock.monotonic()
        if meta.get("deletionTimestamp"):
            return
        if _finished(job):
            ttl = spec.get("ttlSecondsAfterFinished")
            finished_at = self._started.setdefault(f"{uid}/finished", now)
            if ttl is not None and now - finished_at >= float(ttl):
                self.store.delete(self._jobs, namespace, name, propagation="Background")
            elif ttl is not None:
                self._wake_at(f"{uid}/ttl", float(ttl) - (now - finished_at))
            return
        if spec.get("suspend"):
            return
        pods = self._pods_of(job)
        succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        failed = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Failed")
        active = [p for p in pods if not pod_has_ended(p) and not p["metadata"].get("deletionTimestamp")]
        started = self._started.setdefault(uid, now)
        deadline = spec.get("activeDeadlineSeconds")
        if succeeded:
            self._finish(
                job, "Complete", "CompletionsReached", "Reached expected number of succeeded pods", succeeded, failed
            )
            return
        if failed > int(spec.get("backoffLimit", 6)):
            self._finish(
                job, "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit", succeeded, failed
            )
            return
        if deadline is not None and now - started >= float(deadline):
            for pod in active:
                with contextlib.suppress(ApiError):
                    self.store.delete(self._pods, namespace, pod["metadata"]["name"])
            self._finish(
                job, "Failed", "DeadlineExceeded", "Job was active longer than specified deadline", succeeded, failed
            )
            return
        if deadline is not None:
            self._wake_at(f"{uid}/deadline", float(deadline) - (now - started))
        if not active:
            try:
                self._create_pod(job)
            except ApiError as exc:
                # As kube-controller-manager: said only in an Event, and tried again next round. The
                # wording is RealPodControl.createPods' (kubernetes pkg/controller/controller_utils.go:
                # Eventf(object, Warning, FailedCreatePodReason, "Error creating: %v", err)), which the
                # operator reads (planning.admission.compile_refusal).
                self.events.record(job, "Warning", "FailedCreate", f"Error creating: {exc.message}")
                return
            active_count = 1
        else:
            active_count = len(active)
        ready = sum(1 for p in active if pod_is_ready(p))
        wanted = {**status, "active": active_count, "failed": failed, "succeeded": succeeded, "ready": ready}
        wanted.setdefault("startTime", now_ts)
        if wanted != status:
            self.store.update(
                self._jobs,
                namespace,
                name,
                lambda o: o.__setitem__("status", {**(o.get("status") or {}), **wanted}),
                subresource="status",
            )

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

    def _create_pod(self, job: Obj) -> None:
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
