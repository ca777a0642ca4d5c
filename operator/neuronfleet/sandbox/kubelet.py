"""The simulated kubelet of every sandbox node: pod start-up, readiness, termination and faults.

A bound pod goes through what a real kubelet writes: PodScheduled (set at binding), Initialized,
containers Waiting/ContainerCreating while the image is pulled (once per node and image: later
pods on that node find it cached), Running with ``state.running.startedAt`` and phase Running, then
ContainersReady and Ready once the readiness phase (model load and warm-up) ends. As in Kubernetes,
only pods with a readiness or startup probe wait for that phase; a pod without probes is Ready as
soon as its containers run. Init containers are not simulated. Phase durations
are seeded and configurable per instance type and image (``ColdStartProfile``).

Readiness hook: ``Kubelet.readiness_hook`` (an async callable taking the pod) replaces the
simulated readiness phase when set: the pod turns Ready when it returns ``True``, fails when it
returns ``False`` or raises, and falls back to the simulated delay when it returns ``None``. Later
``set_ready()`` flips readiness (e.g. when a real process behind the pod dies).

Deletion honours ``terminationGracePeriodSeconds``: a terminating pod is removed after
``min(grace, profile.shutdown_s)``, at once when the grace is 0; a second DELETE that shortens the
grace ends the stop at the pod's new deletionTimestamp (a real server gets its SIGKILL then).

A deleted pod's terminal phase is written before it leaves, as kubelets do since Kubernetes 1.27:
Succeeded when its containers exited 0 (a server drains and exits 0 on SIGTERM), else Failed (a
run-to-completion container ended by SIGTERM: 143; by SIGKILL at the grace's end: 137; one that never
ran: ContainerStatusUnknown). A finalizer (a Job's tracking one) keeps the ended pod until it is
removed. What the pod GC does for a pod deleted before it was scheduled, which no kubelet will
stop, is done here too: it is marked Failed at once.

Faults: ``crash_container()`` (exit, then restart after the crash-loop back-off), ``fail_pod()``
(phase Failed), ``fail_node()`` (Ready Unknown, unreachable taint, then its pods are failed and
force-deleted: in a cluster the taint manager evicts them and the pod GC then marks them Failed
with a DisruptionTarget condition and force-deletes them; here that is one step) and
``recover_node()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from neuronfleet.sandbox.conditions import disruption_target, set_condition
from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.events import EventRecorder
from neuronfleet.sandbox.nodes import pod_has_ended
from neuronfleet.sandbox.serving import LOCALHOST, PORT_ANNOTATION, ServerProcesses, grace_seconds, is_serving_pod
from neuronfleet.sandbox.store import Store, WatchEvent

log = logging.getLogger(__name__)
Obj = dict[str, Any]
ReadinessHook = Callable[[Obj], Awaitable[bool | None]]


@dataclass(frozen=True)
class ColdStartProfile:
    """Durations (seconds) of a pod's start-up phases; each is jittered by ``±jitter`` (a fraction)."""

    image_pull_s: float = 30.0
    container_start_s: float = 2.0
    readiness_s: float = 45.0
    shutdown_s: float = 2.0
    #: How long a run-to-completion container (restartPolicy Never/OnFailure, e.g. a Job's) runs
    #: before exiting 0, when no ``container_runner`` decides its outcome.
    run_s: float = 60.0
    jitter: float = 0.1


@dataclass(frozen=True)
class ContainerResult:
    """How a run-to-completion pod's containers ended."""

    exit_code: int
    message: str = ""
    logs: tuple[str, ...] = ()


#: Decides a run-to-completion pod's outcome (e.g. by running its command); None: simulate it.
ContainerRunner = Callable[[Obj], Awaitable[ContainerResult | None]]


def fallback_termination_message(container: Obj, logs: list[str] | tuple[str, ...], exit_code: int) -> str:
    """The termination message Kubernetes takes from the log under ``terminationMessagePolicy:
    FallbackToLogsOnError`` when a container fails with no message file: the log's last 80 lines,
    at most 2048 bytes. Empty when the container succeeded or its policy is the default (File)."""
    if exit_code == 0 or container.get("terminationMessagePolicy") != "FallbackToLogsOnError":
        return ""
    return "\n".join(logs[-80:])[-2048:]


class Kubelet:
    """All nodes' kubelets in one object (they share the store and the clock)."""

    def __init__(
        self,
        store: Store,
        *,
        profiles: dict[tuple[str | None, str | None], ColdStartProfile] | None = None,
        seed: int = 0,
    ) -> None:
        self.store = store
        self.clock = store.clock
        #: (instance type or None, image or None) -> profile; the most specific match wins.
        self.profiles: dict[tuple[str | None, str | None], ColdStartProfile] = {(None, None): ColdStartProfile()}
        self.profiles.update(profiles or {})
        self.seed = seed
        self.readiness_hook: ReadinessHook | None = None
        #: Runs serving pods' ``neuronserve serve`` as real local processes (None: simulate them).
        self.server_processes: ServerProcesses | None = None
        #: Called with a terminating pod before its containers get SIGTERM (the cluster takes the
        #: pod out of its Services' endpoints there, so no new request reaches a draining server).
        self.pre_stop_hooks: list[Callable[[Obj], object]] = []
        self.container_runner: ContainerRunner | None = None
        self.images: dict[str, set[str]] = {}
        #: Images no registry serves: pods using them stay Pending in ImagePullBackOff (fault tests).
        self.unpullable_images: set[str] = set()
        self.pods_started = 0
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._terminating: dict[str, asyncio.Task[None]] = {}
        #: Terminating pods' grace when their stop began, and the event a shorter one sets.
        self._grace_cuts: dict[str, tuple[float, asyncio.Event]] = {}
        self._pods = store.resource("", "pods")
        self._nodes = store.resource("", "nodes")
        self._failed_nodes: set[str] = set()
        self.events = EventRecorder(store, "kubelet")
        #: Container log lines per pod uid (``pods/log`` serves them; the cluster shares this dict
        #: with its API server). ``write_log()`` appends, e.g. a real process's output.
        self.logs: dict[str, list[str]] = {}
        store.graceful_pods = True
        store.listeners.append(self._on_event)

    # ---- event handling ------------------------------------------------------------------------------

    def _on_event(self, event: WatchEvent) -> None:
        if event.resource != ("", "pods"):
            return
        pod = event.obj
        uid = pod["metadata"]["uid"]
        if event.type == "DELETED":
            self._cancel(uid)
            self._kill_server(uid)
            return
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name and pod["metadata"].get("deletionTimestamp") and not pod_has_ended(pod):
            # Only a finalizer keeps an unscheduled pod after its deletion; the pod GC ends it.
            asyncio.get_running_loop().call_soon(self._fail_unscheduled, pod)
            return
        if not node_name or node_name in self._failed_nodes:
            return
        if pod["metadata"].get("deletionTimestamp"):
            if uid not in self._terminating:
                task = self._tasks.pop(uid, None)
                if task is not None:
                    task.cancel()
                self._terminating[uid] = asyncio.get_running_loop().create_task(self._terminate(pod))
            elif uid in self._grace_cuts:
                began_with, cut = self._grace_cuts[uid]
                if grace_seconds(pod) < began_with:
                    cut.set()
            return
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if phase == "Pending" and uid not in self._tasks:
            self._tasks[uid] = asyncio.get_running_loop().create_task(self._start(pod))

    def _fail_unscheduled(self, pod: Obj) -> None:
        """The pod GC's gcUnscheduledTerminating: a deleted pod no node took is marked Failed."""
        latest = self.store.try_get(self._pods, pod["metadata"]["namespace"], pod["metadata"]["name"])
        if latest is None or latest["metadata"].get("uid") != pod["metadata"]["uid"] or pod_has_ended(latest):
            return
        if (latest.get("spec") or {}).get("nodeName"):
            return
        self._write_status(latest, lambda o: o.setdefault("status", {}).__setitem__("phase", "Failed"))

    def _cancel(self, uid: str) -> None:
        for tasks in (self._tasks, self._terminating):
            task = tasks.pop(uid, None)
            if task is not None and task is not asyncio.current_task():
                task.cancel()

    async def stop(self) -> None:
        tasks = [*self._tasks.values(), *self._terminating.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._terminating.clear()
        if self.server_processes is not None:
            await self.server_processes.stop_all()

    def _kill_server(self, uid: str) -> None:
        """A pod that is gone at once (force deletion, lost node, failure) takes its process with it."""
        processes = self.server_processes
        if processes is not None and processes.get(uid) is not None:
            asyncio.get_running_loop().create_task(processes.kill(uid))

    # ---- profiles ------------------------------------------------------------------------------------

    def profile_for(self, pod: Obj) -> ColdStartProfile:
        node = self.store.try_get(self._nodes, None, pod["spec"]["nodeName"])
        itype = ((node or {}).get("metadata", {}).get("labels") or {}).get("node.kubernetes.io/instance-type")
        image = ((pod["spec"].get("containers") or [{}])[0]).get("image")
        for key in ((itype, image), (None, image), (itype, None), (None, None)):
            if key in self.profiles:
                return self.profiles[key]
        return ColdStartProfile()

    def _duration(self, pod: Obj, phase: str, base: float, jitter: float) -> float:
        digest = hashlib.sha256(f"{self.seed}/{pod['metadata']['uid']}/{phase}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        return max(0.0, base * (1.0 + jitter * rng.uniform(-1.0, 1.0)))

    # ---- pod lifecycle -------------------------------------------------------------------------------

    def _write_status(self, pod: Obj, mutate: Callable[[Obj], None]) -> bool:
        try:
            self.store.update(
                self._pods, pod["metadata"]["namespace"], pod["metadata"]["name"], mutate, subresource="status"
            )
        except ApiError:
            return False
        return True

    async def _start(self, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        try:
            await self._run_startup(pod)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("sandbox kubelet: pod %s start-up failed", pod["metadata"]["name"])
        finally:
            if self._tasks.get(uid) is asyncio.current_task():
                del self._tasks[uid]

    async def _run_startup(self, pod: Obj) -> None:
        profile = self.profile_for(pod)
        node_name = pod["spec"]["nodeName"]
        containers = pod["spec"].get("containers") or []
        started_at = self.clock.timestamp()

        def creating(o: Obj) -> None:
            status = o.setdefault("status", {})
            status["phase"] = "Pending"
            status["startTime"] = started_at
            status["hostIP"] = _node_ip(self.store.try_get(self._nodes, None, node_name))
            status["podIP"] = _pod_ip(o["metadata"]["uid"])
            status["podIPs"] = [{"ip": status["podIP"]}]
            for condition in (
                {"type": "PodReadyToStartContainers", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
            ):
                set_condition(o, {**condition, "lastProbeTime": None, "lastTransitionTime": started_at})
            status["containerStatuses"] = [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                    "lastState": {},
                }
                for c in containers
            ]

        if not self._write_status(pod, creating):
            return
        cached = self.images.setdefault(node_name, set())
        images = [c.get("image", "") for c in containers]
        missing = [image for image in dict.fromkeys(images) if image not in cached]
        for image in missing:
            self.events.record(pod, "Normal", "Pulling", f'Pulling image "{image}"', host=node_name)
        if missing:
            pull_s = self._duration(pod, "pull", profile.image_pull_s, profile.jitter)
            await asyncio.sleep(pull_s)
            broken = [image for image in missing if image in self.unpullable_images]
            if broken:
                self._fail_pull(pod, broken[0], node_name)
                return
            cached.update(missing)
            for image in missing:
                self.events.record(
                    pod, "Normal", "Pulled", f'Successfully pulled image "{image}" in {pull_s:.3f}s', host=node_name
                )
        for image in images:
            if image not in missing:
                self.events.record(
                    pod, "Normal", "Pulled", f'Container image "{image}" already present on machine', host=node_name
                )
        await self._start_containers(pod, profile, "start")

    def _fail_pull(self, pod: Obj, image: str, node_name: str) -> None:
        """The pull fails for good: the container waits in ImagePullBackOff, the pod stays Pending."""
        message = (
            f'Back-off pulling image "{image}": ErrImagePull: failed to pull and unpack image "{image}": not found'
        )
        self.events.record(pod, "Warning", "Failed", f'Failed to pull image "{image}": not found', host=node_name)
        self.events.record(pod, "Normal", "BackOff", f'Back-off pulling image "{image}"', host=node_name)

        def backoff(o: Obj) -> None:
            for status in o["status"].get("containerStatuses") or []:
                if status.get("image") == image:
                    status["state"] = {"waiting": {"reason": "ImagePullBackOff", "message": message}}

        self._write_status(pod, backoff)

    async def _start_containers(self, pod: Obj, profile: ColdStartProfile, phase: str) -> None:
        """Container start, Running, then readiness (hook or the simulated model load)."""
        node_name = pod["spec"]["nodeName"]
        containers = pod["spec"].get("containers") or []
        await asyncio.sleep(self._duration(pod, phase, profile.container_start_s, profile.jitter))
        running_at = self.clock.timestamp()
        for container in containers:
            self.events.record(pod, "Normal", "Created", f"Created container: {container['name']}", host=node_name)
            self.events.record(pod, "Normal", "Started", f"Started container {container['name']}", host=node_name)

        def running(o: Obj) -> None:
            o["status"]["phase"] = "Running"
            for status in o["status"].get("containerStatuses") or []:
                status["state"] = {"running": {"startedAt": running_at}}
                status["started"] = True
                status["imageID"] = f"sandbox://{status['image']}"
                status["containerID"] = f"containerd://{o['metadata']['uid'][:12]}-{status['name']}"

        if not self._write_status(pod, running):
            return
        for container in containers:
            self.write_log(
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                f"{running_at} sandbox: container {container['name']} started ({container.get('image', '')})",
            )
        if phase == "start":
            self.pods_started += 1
        if self.server_processes is not None and is_serving_pod(pod):
            await self._serve(pod, self.server_processes)
            return
        ready = None
        if self.readiness_hook is not None:
            try:
                ready = await self.readiness_hook(pod)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.fail_pod(
                    pod["metadata"]["namespace"], pod["metadata"]["name"], message=f"readiness hook failed: {exc!r}"
                )
                return
            if ready is False:
                self.fail_pod(
                    pod["metadata"]["namespace"], pod["metadata"]["name"], message="readiness hook reported failure"
                )
                return
        if ready is None and _has_probe(pod):
            # A readiness (or startup) probe passes once the model is loaded and warmed up; without
            # a probe the kubelet counts a started container as ready, as Kubernetes does.
            await asyncio.sleep(self._duration(pod, f"ready-{phase}", profile.readiness_s, profile.jitter))
        self.set_ready(pod["metadata"]["namespace"], pod["metadata"]["name"], True)
        if pod["spec"].get("restartPolicy", "Always") != "Always":
            await self._run_to_completion(pod, profile, phase)

    async def _serve(self, pod: Obj, processes: ServerProcesses) -> None:
        """Run the pod's server process: Ready when it says so, probed while it runs, restarted when it exits."""
        namespace, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]
        run_log = len(self.logs.get(uid, []))  # where this run's output starts in the pod's log

        def last_words(code: int | None) -> str:
            container = pod["spec"]["containers"][0]
            return fallback_termination_message(container, self.logs.get(uid, [])[run_log:], code or 0)

        try:
            server = await processes.start(pod, lambda line: self.write_log(namespace, name, line))
        except OSError as exc:
            self.write_log(namespace, name, f"sandbox: cannot start the server: {exc}")
            self.crash_container(namespace, name, exit_code=127, reason="StartError")
            return

        def published(o: Obj) -> None:
            o["metadata"].setdefault("annotations", {})[PORT_ANNOTATION] = str(server.port)

        def local_ip(o: Obj) -> None:
            o["status"]["podIP"] = LOCALHOST
            o["status"]["podIPs"] = [{"ip": LOCALHOST}]

        try:
            self.store.update(self._pods, namespace, name, published)
        except ApiError:
            await processes.kill(uid)
            return
        self._write_status(pod, local_ip)
        options = processes.options
        if not await processes.wait_ready(uid):
            code = await processes.kill(uid)
            message = last_words(code or 1)
            self.write_log(namespace, name, f"sandbox: the server did not become ready (exit code {code})")
            self.crash_container(namespace, name, exit_code=code or 1, message=message)
            return
        self.set_ready(namespace, name, True)
        ready, failures = True, 0
        while True:
            code = await processes.wait_exit(uid, options.probe_period_s)
            if code is not None or processes.get(uid) is None:
                await processes.kill(uid)
                message = last_words(code if code else 137)
                self.write_log(namespace, name, f"sandbox: the server exited with code {code}")
                self.crash_container(namespace, name, exit_code=code if code else 137, message=message)
                return
            probed = await processes.probe(uid)
            failures = 0 if probed else failures + 1
            if (probed and not ready) or (not probed and ready and failures >= options.failure_threshold):
                ready = bool(probed)
                self.set_ready(namespace, name, ready)

    async def _run_to_completion(self, pod: Obj, profile: ColdStartProfile, phase: str) -> None:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        result: ContainerResult | None = None
        if self.container_runner is not None:
            try:
                result = await self.container_runner(pod)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                result = ContainerResult(exit_code=128, message=f"container runner failed: {exc!r}")
        if result is None:
            await asyncio.sleep(self._duration(pod, f"run-{phase}", profile.run_s, profile.jitter))
            result = ContainerResult(exit_code=0)
        for line in result.logs:
            self.write_log(namespace, name, line)
        if result.exit_code != 0 and pod["spec"].get("restartPolicy") == "OnFailure":
            self.crash_container(namespace, name, exit_code=result.exit_code)
            return
        self._terminate_containers(namespace, name, result)

    def _terminate_containers(self, namespace: str, name: str, result: ContainerResult) -> None:
        pod = self.store.try_get(self._pods, namespace, name)
        if pod is None:
            return
        self._write_status(
            pod,
            functools.partial(
                _end_containers, now=self.clock.timestamp(), exit_code=result.exit_code, message=result.message
            ),
        )

    def crash_container(
        self, namespace: str, name: str, *, exit_code: int = 1, reason: str | None = None, message: str = ""
    ) -> bool:
        """A running pod's containers exit (e.g. the model server crashed or was OOM-killed).

        With restartPolicy Always (or OnFailure and a non-zero exit code) the kubelet restarts them
        after its crash-loop back-off (10 s doubling per restart, at most 300 s): the pod stays
        Running but not Ready meanwhile, ``restartCount`` grows and ``lastState`` records the exit
        (with ``message``, the termination message, when there is one; ``reason`` defaults to the
        runtime's: Completed for exit code 0, Error otherwise). Otherwise the pod ends: phase Failed,
        or Succeeded for exit code 0.
        """
        pod = self.store.try_get(self._pods, namespace, name)
        if (
            pod is None
            or (pod.get("status") or {}).get("phase") != "Running"
            or pod["metadata"].get("deletionTimestamp")
        ):
            return False
        policy = pod["spec"].get("restartPolicy", "Always")
        if not (policy == "Always" or (policy == "OnFailure" and exit_code != 0)):
            return self.fail_pod(namespace, name, reason=reason, exit_code=exit_code)
        uid = pod["metadata"]["uid"]
        task = self._tasks.pop(uid, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        statuses = pod["status"].get("containerStatuses") or []
        restarts = 1 + max((int(c.get("restartCount", 0)) for c in statuses), default=0)
        backoff = min(10.0 * 2 ** (restarts - 1), 300.0)
        now = self.clock.timestamp()

        def crashed(o: Obj) -> None:
            for container in o["status"].get("containerStatuses") or []:
                started = ((container.get("state") or {}).get("running") or {}).get("startedAt", now)
                terminated = {
                    "exitCode": exit_code,
                    "reason": _exit_reason(exit_code, reason),
                    "startedAt": started,
                    "finishedAt": now,
                }
                if message:
                    terminated["message"] = message
                container["lastState"] = {"terminated": terminated}
                container["state"] = {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off {int(backoff)}s restarting failed container",
                    }
                }
                container["ready"] = False
                container["started"] = False
                container["restartCount"] = restarts
            _set_readiness(o, False, now, "ContainersNotReady")

        if not self._write_status(pod, crashed):
            return False
        self.events.record(
            pod, "Warning", "BackOff", "Back-off restarting failed container", host=pod["spec"]["nodeName"]
        )
        self._tasks[uid] = asyncio.get_running_loop().create_task(self._restart(pod, backoff, restarts))
        return True

    async def _restart(self, pod: Obj, backoff: float, restarts: int) -> None:
        uid = pod["metadata"]["uid"]
        try:
            await asyncio.sleep(backoff)
            await self._start_containers(pod, self.profile_for(pod), f"restart-{restarts}")
        finally:
            if self._tasks.get(uid) is asyncio.current_task():
                del self._tasks[uid]

    def write_log(self, namespace: str, name: str, line: str) -> bool:
        """Append a line to a pod's container log; False if there is no such pod."""
        pod = self.store.try_get(self._pods, namespace, name)
        if pod is None:
            return False
        self.logs.setdefault(pod["metadata"]["uid"], []).append(line)
        return True

    def set_ready(self, namespace: str, name: str, ready: bool) -> bool:
        """Set a running pod's readiness (containers ready, ContainersReady, Ready)."""
        pod = self.store.try_get(self._pods, namespace, name)
        if pod is None or (pod.get("status") or {}).get("phase") != "Running":
            return False
        now = self.clock.timestamp()

        def apply(o: Obj) -> None:
            for status in o["status"].get("containerStatuses") or []:
                status["ready"] = ready
            _set_readiness(o, ready, now, None if ready else "ContainersNotReady")

        return self._write_status(pod, apply)

    async def _terminate(self, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        try:
            # One reading of the grace for a real server and a simulated one, as the kubelet's: the
            # deletion's, else the spec's.
            grace = grace_seconds(pod)
            was_running = (pod.get("status") or {}).get("phase") == "Running"
            for container in (pod.get("spec") or {}).get("containers") or []:
                self.events.record(
                    pod,
                    "Normal",
                    "Killing",
                    f"Stopping container {container['name']}",
                    host=pod["spec"].get("nodeName", ""),
                )
            for hook in self.pre_stop_hooks:
                hook(pod)
            processes = self.server_processes
            exit_code: int | None
            if processes is not None and processes.get(uid) is not None:
                # The real thing: SIGTERM, the server drains, SIGKILL when the grace period ends.
                exit_code = await self._stop_within_grace(pod, processes.terminate(uid, grace))
            elif grace > 0:
                stopped = await self._stop_within_grace(
                    pod, _stopped_on_sigterm(pod, min(grace, self.profile_for(pod).shutdown_s))
                )
                exit_code = stopped if was_running else None
            else:
                exit_code = EXIT_SIGKILL if was_running else None
            self._write_terminal_phase(pod, exit_code)
            with contextlib.suppress(ApiError):
                self.store.delete(self._pods, pod["metadata"]["namespace"], pod["metadata"]["name"], grace_period=0)
        finally:
            if self._terminating.get(uid) is asyncio.current_task():
                del self._terminating[uid]

    def _write_terminal_phase(self, pod: Obj, exit_code: int | None) -> None:
        """Before a deleted pod leaves, the kubelet writes its terminal phase (Kubernetes 1.27 on:
        Succeeded when every container exited 0, else Failed), which a Job's pod failure policy and
        its controller read. ``exit_code``: how the containers' stop ended; None for containers that
        never ran, which the kubelet reports as ContainerStatusUnknown (exit 137)."""
        latest = self.store.try_get(self._pods, pod["metadata"]["namespace"], pod["metadata"]["name"])
        if latest is None or latest["metadata"].get("uid") != pod["metadata"]["uid"] or pod_has_ended(latest):
            return
        self._write_status(latest, functools.partial(_end_containers, now=self.clock.timestamp(), exit_code=exit_code))

    async def _stop_within_grace(self, pod: Obj, stop: Awaitable[int | None]) -> int | None:
        """Await a container's stop; if a second DELETE shortens the grace meanwhile, end it at the
        pod's new deletionTimestamp, as the kubelet kills again with the shorter grace. Returns the
        container's exit code (128 + the signal for one a signal ended), None when unknown."""
        uid, namespace, name = pod["metadata"]["uid"], pod["metadata"]["namespace"], pod["metadata"]["name"]
        began_with, cut = grace_seconds(pod), asyncio.Event()
        self._grace_cuts[uid] = (began_with, cut)
        latest = self.store.try_get(self._pods, namespace, name)
        if latest is not None and grace_seconds(latest) < began_with:
            cut.set()  # shortened before this task ran
        stopping = asyncio.ensure_future(stop)
        left: float | None = None  # seconds to the shortened deadline, once there is one
        killed: int | None = None
        try:
            while not stopping.done():
                cut_seen = asyncio.ensure_future(cut.wait())
                await asyncio.wait({stopping, cut_seen}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                cut_seen.cancel()
                if stopping.done():
                    break
                if cut.is_set():
                    cut.clear()
                    latest = self.store.try_get(self._pods, namespace, name)
                    since = self.clock.seconds_since((latest or pod)["metadata"].get("deletionTimestamp"))
                    left = max(0.0, -since) if since is not None else 0.0
                    continue
                # The shortened grace ran out: SIGKILL a real server (its stop then returns), or end
                # the simulated one.
                processes = self.server_processes
                if processes is not None and processes.get(uid) is not None:
                    killed = await processes.kill(uid)
                    await stopping
                else:
                    stopping.cancel()
                    killed = EXIT_SIGKILL
                break
        finally:
            del self._grace_cuts[uid]
            if not stopping.done():
                stopping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stopping
        code = killed if killed is not None else stopping.result() if not stopping.cancelled() else None
        return None if code is None else _shell_exit_code(code)

    # ---- faults --------------------------------------------------------------------------------------

    def fail_pod(
        self,
        namespace: str,
        name: str,
        *,
        reason: str | None = None,
        message: str = "",
        exit_code: int = 1,
    ) -> bool:
        """Make a pod's containers exit with ``exit_code``: phase Failed (Succeeded for exit code 0),
        whatever its restartPolicy (``crash_container`` is the fault that honours it).

        The containers' terminated reason is ``reason`` or the runtime's (Completed for 0, Error
        otherwise) and their message ``message``. Only a named ``reason`` (an eviction's, a
        kubelet's refusal) is also the pod's own ``status.reason`` and ``status.message``: a
        container that just exits leaves those unset, as on a real node."""
        pod = self.store.try_get(self._pods, namespace, name)
        if pod is None:
            return False
        task = self._tasks.pop(pod["metadata"]["uid"], None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        self._kill_server(pod["metadata"]["uid"])
        now = self.clock.timestamp()

        def failed(o: Obj) -> None:
            if reason is not None:
                status = o.setdefault("status", {})
                status["reason"] = reason
                status["message"] = message
            _end_containers(o, now=now, exit_code=exit_code, message=message, reason=reason)

        return self._write_status(pod, failed)

    def fail_node(self, name: str) -> bool:
        """The node stops reporting: Ready Unknown, unreachable taints, its pods force-deleted."""
        node = self.store.try_get(self._nodes, None, name)
        if node is None:
            return False
        self._failed_nodes.add(name)
        now = self.clock.timestamp()

        def unreachable(o: Obj) -> None:
            set_condition(
                o,
                {
                    "type": "Ready",
                    "status": "Unknown",
                    "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                },
            )

        self.store.update(self._nodes, None, name, unreachable, subresource="status")

        def taint(o: Obj) -> None:
            taints = [t for t in o["spec"].get("taints") or [] if t.get("key") != "node.kubernetes.io/unreachable"]
            taints += [
                {"key": "node.kubernetes.io/unreachable", "effect": effect, "timeAdded": now}
                for effect in ("NoSchedule", "NoExecute")
            ]
            o["spec"]["taints"] = taints

        self.store.update(self._nodes, None, name, taint)
        for pod in list(self.store.iter(self._pods)):
            if (pod.get("spec") or {}).get("nodeName") == name:
                self._cancel(pod["metadata"]["uid"])
                self._kill_server(pod["metadata"]["uid"])
                if not pod_has_ended(pod):
                    self._write_status(pod, functools.partial(_lost_with_node, now=now))
                with contextlib.suppress(ApiError):
                    self.store.delete(self._pods, pod["metadata"]["namespace"], pod["metadata"]["name"], grace_period=0)
        return True

    def recover_node(self, name: str) -> bool:
        node = self.store.try_get(self._nodes, None, name)
        if node is None:
            return False
        self._failed_nodes.discard(name)
        now = self.clock.timestamp()
        self.store.update(
            self._nodes,
            None,
            name,
            lambda o: set_condition(
                o,
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                },
            ),
            subresource="status",
        )
        self.store.update(
            self._nodes,
            None,
            name,
            lambda o: o["spec"].__setitem__(
                "taints", [t for t in o["spec"].get("taints") or [] if t.get("key") != "node.kubernetes.io/unreachable"]
            ),
        )
        return True


#: A container's exit code when SIGKILL ended it (128 + 9), as the container runtime reports it.
EXIT_SIGKILL = 137
#: ... and when SIGTERM did, for a process without a handler for it (128 + 15).
EXIT_SIGTERM = 143


def _shell_exit_code(code: int) -> int:
    """An exit code as the container runtime reports it: a process ended by signal N is 128 + N
    (asyncio gives such a process's code as -N)."""
    return 128 - code if code < 0 else code


async def _stopped_on_sigterm(pod: Obj, shutdown_s: float) -> int:
    """A simulated container's stop on SIGTERM within its grace: a server (restartPolicy Always)
    drains and exits 0; a run-to-completion container (a Job's) has no SIGTERM handler and is ended
    by it, 143."""
    await asyncio.sleep(shutdown_s)
    return 0 if (pod.get("spec") or {}).get("restartPolicy", "Always") == "Always" else EXIT_SIGTERM


def _end_containers(pod: Obj, *, now: str, exit_code: int | None, message: str = "", reason: str | None = None) -> None:
    """Write a pod's terminal phase: every container terminated with ``exit_code`` (None: it never
    ran, so the kubelet knows no code: ContainerStatusUnknown, 137), Succeeded when it is 0.

    ``reason`` is the containers' terminated reason when the runtime gave one (OOMKilled, a fault's);
    otherwise Completed for 0 and Error for any other code. The readiness conditions' reason is the
    phase's, as the kubelet's status generator writes it: PodCompleted or PodFailed."""
    status = pod.setdefault("status", {})
    status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
    for container in status.get("containerStatuses") or []:
        running = (container.get("state") or {}).get("running")
        terminated: Obj
        if exit_code is None:
            terminated = {
                "exitCode": EXIT_SIGKILL,
                "reason": "ContainerStatusUnknown",
                "message": "The container could not be located when the pod was terminated",
                "startedAt": None,
                "finishedAt": now,
            }
        else:
            terminated = {
                "exitCode": exit_code,
                "reason": _exit_reason(exit_code, reason),
                "startedAt": (running or {}).get("startedAt", now),
                "finishedAt": now,
            }
            if message:
                terminated["message"] = message
        container["state"] = {"terminated": terminated}
        container["ready"] = False
        container["started"] = False
    _set_readiness(pod, False, now, "PodCompleted" if status["phase"] == "Succeeded" else "PodFailed")


def _exit_reason(exit_code: int, reason: str | None) -> str:
    """A terminated container's reason: the one given (OOMKilled, a fault's) or the container
    runtime's for its exit code."""
    return reason or ("Completed" if exit_code == 0 else "Error")


def _lost_with_node(pod: Obj, *, now: str) -> None:
    """What a pod on a lost node gets before its force deletion: the pod GC's DisruptionTarget
    condition and phase Failed (its containers' last state is unknown)."""
    set_condition(pod, disruption_target("DeletionByPodGC", "PodGC: node no longer exists", now))
    _end_containers(pod, now=now, exit_code=None)


def _set_readiness(pod: Obj, ready: bool, now: str, reason: str | None) -> None:
    """Set the pod's ContainersReady and Ready conditions together, as the kubelet does."""
    for kind in ("ContainersReady", "Ready"):
        condition: Obj = {
            "type": kind,
            "status": "True" if ready else "False",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
        if reason:
            condition["reason"] = reason
        set_condition(pod, condition)


def _has_probe(pod: Obj) -> bool:
    return any(
        c.get("readinessProbe") or c.get("startupProbe") for c in (pod.get("spec") or {}).get("containers") or []
    )


def _pod_ip(uid: str) -> str:
    digest = hashlib.sha256(uid.encode()).digest()
    return f"10.1.{digest[0]}.{digest[1] or 1}"


def _node_ip(node: Obj | None) -> str:
    for address in ((node or {}).get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address"))
    return ""
