"""Serving pods that serve: the sandbox kubelet's container runtime for ``neuronserve serve`` pods.

With ``SandboxCluster(serving=ServingOptions(...))`` a serving pod's container (command
``neuronserve``, first argument ``serve``) runs as a real local process instead of a simulated
one: its own command line, with

- ``--host 127.0.0.1 --port <a free port>``: every pod gets its own port on this machine (the
  pod's ``containerPort`` is a pod-network port; here the pod IP is 127.0.0.1 and the port is
  published in the ``sandbox.neuronfleet.dev/port`` annotation and in the Service's endpoints);
- ``--cache-dir``: a per-pod scratch directory (the pod's emptyDir), removed when the pod goes;
- the options' ``device_args`` appended (default: the emulated NeuronCore device, so a 2-core
  machine can host a fleet; ``()`` runs the real CPU backend);
- the pod's literal ``env`` values and its ``POD_NAME``/``POD_NAMESPACE`` field references, on
  top of :meth:`SandboxCluster.process_env` (PATH, the sandbox's S3).

A server that is starting (importing its framework, loading its model) runs at
``ServingOptions.starting_niceness`` until it is Ready, then at the sandbox's own priority. On a
cluster a new pod starts on its own node (a warm-pool refill after a promotion, a scale-up); here
it shares this machine's cores with the servers already serving, and its second or two of start-up CPU would
otherwise stall them (the demo measured every request of two seconds missing its 50 ms SLO right
after a scale-up). Lowering a process' niceness again needs privilege (root, ``CAP_SYS_NICE`` or
a high enough ``RLIMIT_NICE``); without it no server is started niced, so that all serve alike.

The kubelet (see ``kubelet.Kubelet.server_processes``) marks the pod Ready when the server's
``/v2/health/ready`` answers 200, probes it every ``probe_period_s`` afterwards (Ready flips after
``failure_threshold`` failed probes), restarts it with the crash-loop back-off when the process
exits, and on deletion sends SIGTERM and waits up to the pod's grace period before SIGKILL (the
server drains in between). Process output becomes the pod's log (``kubectl logs``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from neuronfleet.sandbox.children import die_with_parent

log = logging.getLogger(__name__)
Obj = dict[str, Any]

#: Where the sandbox publishes a served pod's port on this machine.
PORT_ANNOTATION = "sandbox.neuronfleet.dev/port"
LOCALHOST = "127.0.0.1"
#: What a served pod's process log keeps (lines); older lines are dropped.
MAX_LOG_LINES = 2000


@dataclass(frozen=True)
class ServingOptions:
    """How the sandbox runs serving pods' ``neuronserve serve`` (see the module docstring)."""

    #: Appended to the pod's ``neuronserve serve`` arguments: which device the server runs on.
    device_args: tuple[str, ...] = ("--device", "emulated-neuroncore", "--profile", "bert-base")
    #: Further arguments (e.g. ``("--torch-threads", "1")`` for the CPU backend).
    extra_args: tuple[str, ...] = ()
    #: How long a server may take to report ready before the kubelet counts it as failed.
    ready_timeout_s: float = 300.0
    probe_period_s: float = 1.0
    failure_threshold: int = 2
    #: Niceness of a server until it is Ready (see the module docstring); 0 starts it as it serves.
    starting_niceness: int = 10
    #: Variables added to every server's environment (after the cluster's).
    env: Mapping[str, str] = field(default_factory=dict)


def is_serving_pod(pod: Obj) -> bool:
    """A pod whose first container runs ``neuronserve serve`` (what the operator's replicas run)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        return False
    argv = [str(a) for a in (containers[0].get("command") or []) + (containers[0].get("args") or [])]
    return len(argv) >= 2 and Path(argv[0]).name == "neuronserve" and argv[1] == "serve"


def free_port(host: str = LOCALHOST) -> int:
    """A port nothing listens on at the moment (the kernel's pick; a later bind may still lose it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def may_restore_priority() -> bool:
    """Whether this process may set a child's niceness back to its own after raising it (Linux:
    privileged, or ``RLIMIT_NICE`` reaching this process' niceness)."""
    if os.geteuid() == 0:
        return True
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    except (ImportError, AttributeError, OSError):
        return False
    return soft == resource.RLIM_INFINITY or 20 - soft <= os.getpriority(os.PRIO_PROCESS, 0)


def _set_niceness(pid: int, niceness: int) -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, pid, niceness)
    except ProcessLookupError:
        pass  # it exited meanwhile: the kubelet sees that on its own
    except OSError as error:
        log.warning("sandbox: could not set process %d to niceness %d: %s", pid, niceness, error)


def _without_options(args: list[str], options: set[str]) -> list[str]:
    """``args`` without the given ``--option value`` pairs (and ``--option=value`` forms)."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in options:
            skip = True
            continue
        if arg.split("=", 1)[0] in options and "=" in arg:
            continue
        out.append(arg)
    return out


@dataclass
class ServerProcess:
    """One pod's server process."""

    uid: str
    port: int
    process: asyncio.subprocess.Process
    scratch: Path
    argv: list[str]
    started_at: float
    reader: asyncio.Task[None] | None = None
    #: One waiter per process (not one per probe: those would pile up until it exits).
    exited: asyncio.Future[int] | None = None

    @property
    def url(self) -> str:
        return f"http://{LOCALHOST}:{self.port}"

    @property
    def exit_code(self) -> int | None:
        return self.process.returncode


class ServerProcesses:
    """The real ``neuronserve serve`` processes of the sandbox's serving pods, by pod uid.

    ``await start(pod, log)`` starts one (``log`` receives its output lines), ``await
    wait_ready(uid)`` waits for its readiness, ``await probe(uid)`` checks it once,
    ``await terminate(uid, grace_s)`` drains and stops it, ``await stop_all()`` kills every one.
    """

    def __init__(self, options: ServingOptions, env: Mapping[str, str], workdir: Path) -> None:
        self.options = options
        self.env = {**env, **options.env}
        self.workdir = workdir
        self.processes: dict[str, ServerProcess] = {}
        self._session: aiohttp.ClientSession | None = None
        #: Every process started (pod uid, port), for tests and reports.
        self.started: list[tuple[str, int]] = []
        self._own_niceness = os.getpriority(os.PRIO_PROCESS, 0)
        self._nice_while_starting = options.starting_niceness > 0 and may_restore_priority()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0))
        return self._session

    def command_line(self, pod: Obj, port: int, scratch: Path) -> list[str]:
        container = pod["spec"]["containers"][0]
        argv = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
        binary = shutil.which(argv[0], path=self.env.get("PATH")) or argv[0]
        args = _without_options(argv[1:], {"--host", "--port", "--cache-dir"})
        return [
            binary,
            *args,
            "--host",
            LOCALHOST,
            "--port",
            str(port),
            "--cache-dir",
            str(scratch),
            *self.options.device_args,
            *self.options.extra_args,
        ]

    def pod_env(self, pod: Obj) -> dict[str, str]:
        env = {**os.environ, **self.env}
        meta = pod["metadata"]
        fields = {"metadata.name": meta.get("name", ""), "metadata.namespace": meta.get("namespace", "")}
        for variable in pod["spec"]["containers"][0].get("env") or []:
            if "value" in variable:
                env[str(variable["name"])] = str(variable["value"])
            path = ((variable.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if path in fields:
                env[str(variable["name"])] = fields[path]
        return env

    async def start(self, pod: Obj, log_line: Callable[[str], object]) -> ServerProcess:
        """Start the pod's server on a free port (an earlier process of the pod is killed first)."""
        uid = pod["metadata"]["uid"]
        await self.kill(uid)
        scratch = self.workdir / f"{pod['metadata'].get('namespace', '')}-{pod['metadata']['name']}-{uid[:8]}"
        scratch.mkdir(parents=True, exist_ok=True)
        port = free_port()
        argv = self.command_line(pod, port, scratch)
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=self.pod_env(pod),
            cwd=scratch,
            start_new_session=True,  # a Ctrl-C of the sandbox reaches it through stop_all(), with a grace
            preexec_fn=die_with_parent(),  # and a killed sandbox's servers die with it (see sandbox.children)
        )
        if self._nice_while_starting:
            # Raising a child's niceness needs no privilege; its start-up work (imports, loading)
            # begins after this, so the few instructions it ran at full priority do not matter.
            _set_niceness(process.pid, self._own_niceness + self.options.starting_niceness)
        server = ServerProcess(uid, port, process, scratch, argv, time.monotonic())
        server.exited = asyncio.ensure_future(process.wait())
        server.reader = asyncio.get_running_loop().create_task(self._pump(process, log_line))
        self.processes[uid] = server
        self.started.append((uid, port))
        return server

    async def _pump(self, process: asyncio.subprocess.Process, log_line: Callable[[str], object]) -> None:
        assert process.stdout is not None
        while line := await process.stdout.readline():
            log_line(line.decode(errors="replace").rstrip())

    def get(self, uid: str) -> ServerProcess | None:
        return self.processes.get(uid)

    def endpoint(self, uid: str) -> tuple[str, int] | None:
        server = self.processes.get(uid)
        return (LOCALHOST, server.port) if server is not None and server.exit_code is None else None

    async def probe(self, uid: str) -> bool | None:
        """One readiness probe: True when /v2/health/ready answers 200; None when the process is gone."""
        server = self.processes.get(uid)
        if server is None or server.exit_code is not None:
            return None
        try:
            async with self._http().get(f"{server.url}/v2/health/ready") as response:
                await response.read()
                return response.status == 200
        except (aiohttp.ClientError, OSError, TimeoutError):
            return False

    async def wait_ready(self, uid: str) -> bool:
        """Probe until ready (True), or until the process exits or ``ready_timeout_s`` passes (False)."""
        deadline = time.monotonic() + self.options.ready_timeout_s
        while time.monotonic() < deadline:
            ready = await self.probe(uid)
            if ready is None:
                return False
            if ready:
                self._serving(uid)
                return True
            await self.wait_exit(uid, 0.2)  # the next probe, unless the process exits first
        return False

    def _serving(self, uid: str) -> None:
        """A server that reported ready runs at the sandbox's own priority from now on."""
        server = self.processes.get(uid)
        if server is not None and self._nice_while_starting and server.exit_code is None:
            _set_niceness(server.process.pid, self._own_niceness)

    def niceness(self, uid: str) -> int | None:
        """The niceness the pod's server process runs at (None when it is gone)."""
        server = self.processes.get(uid)
        if server is None or server.exit_code is not None:
            return None
        try:
            return os.getpriority(os.PRIO_PROCESS, server.process.pid)
        except ProcessLookupError:
            return None

    async def wait_exit(self, uid: str, timeout: float | None) -> int | None:
        """The exit code once the process exits within ``timeout`` seconds, else None."""
        server = self.processes.get(uid)
        if server is None or server.exited is None:
            return None
        done, _ = await asyncio.wait({server.exited}, timeout=timeout)
        return server.exited.result() if done else None

    async def terminate(self, uid: str, grace_s: float, hurry: bool = False) -> int | None:
        """SIGTERM (the server drains), SIGKILL after ``grace_s``; returns the exit code.

        ``hurry``: also SIGINT, the server's second signal, which skips its drain delay (the time
        it keeps serving while endpoints update): for a sandbox shutting down, where no traffic
        comes any more. A different signal, so that the kernel does not merge it with the first.
        """
        server = self.processes.get(uid)
        if server is None:
            return None
        if server.exit_code is None:
            with contextlib.suppress(ProcessLookupError):
                server.process.send_signal(signal.SIGTERM)
                if hurry:
                    server.process.send_signal(signal.SIGINT)
            if await self.wait_exit(uid, max(grace_s, 0.0)) is None:
                log.warning("sandbox: server of pod %s ignored SIGTERM for %.0fs: SIGKILL", uid, grace_s)
        return await self.kill(uid)

    async def kill(self, uid: str) -> int | None:
        """SIGKILL (if still running), reap, and remove the pod's scratch directory."""
        server = self.processes.pop(uid, None)
        if server is None:
            return None
        if server.exit_code is None:
            with contextlib.suppress(ProcessLookupError):
                server.process.kill()
        code = await server.process.wait()
        if server.reader is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(server.reader, 2.0)
        shutil.rmtree(server.scratch, ignore_errors=True)
        return code

    async def stop_all(self, grace_s: float = 5.0) -> None:
        """Stop every process (SIGTERM and SIGINT, then SIGKILL after ``grace_s``)."""
        await asyncio.gather(
            *(self.terminate(uid, grace_s, hurry=True) for uid in list(self.processes)), return_exceptions=True
        )
        if self._session is not None:
            await self._session.close()
            self._session = None


def grace_seconds(pod: Obj) -> float:
    """The grace a deletion gives (``deletionGracePeriodSeconds``, else the spec's, else 30 s)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    value = meta.get("deletionGracePeriodSeconds")
    if value is None:
        value = spec.get("terminationGracePeriodSeconds", 30)
    return float(value)


__all__ = [
    "PORT_ANNOTATION",
    "ServerProcess",
    "ServerProcesses",
    "ServingOptions",
    "free_port",
    "grace_seconds",
    "is_serving_pod",
]
