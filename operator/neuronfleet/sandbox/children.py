"""The sandbox's child processes die with it, however it ends.

The sandbox runs real processes for pods (``neuronserve serve``, compile Jobs), Services' routers, S3,
Prometheus, and the demo's load generator. A clean stop (Ctrl-C, SIGTERM, SIGHUP) stops them itself; a SIGKILL, an
out-of-memory kill or a crash of the sandbox ran no code that could, and they ran on as orphans
(serving pods even have their own sessions, so a terminal's hang-up never reaches them).

On Linux each child asks the kernel for SIGKILL when its parent goes (``prctl(PR_SET_PDEATHSIG)``,
set by :func:`die_with_parent` between fork and exec). The kernel means the *thread* that forked
it, not the process: a child forked by a thread that ends before the sandbox (a worker of a pool
that is shut down, a thread started for one call) would be killed when that thread ends. So
children are forked by the event loop's thread (``asyncio.create_subprocess_exec``), which lives as
long as the sandbox, or by :func:`popen` (Prometheus, started from ``asyncio.to_thread``), which
forks on the main thread or on one thread kept for the life of the process.
Elsewhere (macOS) nothing is set: a clean stop still stops every child.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import ctypes.util
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

#: ``<linux/prctl.h>``: the signal this process gets when its parent (thread) exits.
PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    prctl: Callable[..., int] = libc.prctl
    return prctl


#: Looked up once here: between fork and exec the child should run as little Python as it can (the
#: other threads' locks are copied as they were), so it only calls this.
_PRCTL = _load_prctl()


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when this process (the forking thread,
    see the module docstring) exits; None where the kernel has no such thing."""
    prctl = _PRCTL
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        # The parent may have died between the fork and the prctl: then nothing would kill us.
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


_spawner: concurrent.futures.ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()


def _spawner_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            # One worker, never shut down before the interpreter: the thread its children's
            # death signal is bound to lives as long as the process.
            _spawner = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-spawner")
        return _spawner


def popen(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv, **kwargs)`` whose child dies with this process, from any thread."""
    kwargs["preexec_fn"] = die_with_parent()

    def fork() -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, **kwargs)

    if threading.current_thread() is threading.main_thread():
        return fork()
    return _spawner_pool().submit(fork).result()


async def start_piped_helper(argv: Sequence[str]) -> asyncio.subprocess.Process:
    """Start one of the sandbox's helper processes that it talks to over pipes (a Service's router,
    the S3 server): stdin, stdout and stderr piped; in a session of its own, so that a Ctrl-C
    reaches only the sandbox, which stops it (:func:`stop_piped_helper`); and dying with a killed
    sandbox. Call it from the event loop's thread (see the module docstring)."""
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        preexec_fn=die_with_parent(),
    )


async def stop_piped_helper(process: asyncio.subprocess.Process, timeout: float) -> int:
    """Close a helper's stdin (its signal to exit) and wait ``timeout`` seconds for it; then kill it.
    Its exit code: 0 for a clean exit, ``-9`` when it had to be killed."""
    if process.stdin is not None:
        process.stdin.close()
    try:
        return await asyncio.wait_for(process.wait(), timeout)
    except TimeoutError:
        process.kill()
        return await process.wait()


#: How long a forced exit waits for the children it killed to be gone (SIGKILL ends a process at
#: once unless it is stuck in the kernel: a hung NFS read, a device; the exit must not hang on that).
KILLED_WAIT_SECONDS = 2.0


def kill_children() -> int:
    """SIGKILL this process' children (Linux: those ``/proc`` names; elsewhere none); how many.

    For a forced exit, when the clean stop hangs: the death signal would end them a moment after
    this process, this ends them before it says it has exited. A signal is delivered, not obeyed, by
    the time ``kill`` returns: a loaded machine ran a killed server on after the sandbox had exited
    (CI saw it), so this waits, up to :data:`KILLED_WAIT_SECONDS` in all, until each has exited."""
    me = os.getpid()
    killed: list[int] = []
    try:
        entries = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return 0
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat") as stat:
                # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
                fields = stat.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == me and fields[0] != "Z":
                os.kill(int(entry), signal.SIGKILL)
                killed.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue  # it exited meanwhile
    wait_exited(killed, KILLED_WAIT_SECONDS)
    return len(killed)


def wait_exited(pids: Sequence[int], timeout: float) -> bool:
    """Wait until each of ``pids`` has exited (a zombie has: it is not reaped here, where the
    event loop's child watcher may be reaping it), ``timeout`` seconds at most in all; whether they
    all did. Woken by each process's exit (a pidfd: Linux 5.3), not by polling; where there are no
    pidfds, it does not wait and says so (False)."""
    deadline = time.monotonic() + timeout
    every = True
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue  # gone, reaped already
        except (AttributeError, OSError):
            return False  # no pidfds here
        try:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            every = every and bool(ready)
        finally:
            os.close(fd)
    return every


__all__ = ["die_with_parent", "kill_children", "popen", "start_piped_helper", "stop_piped_helper", "wait_exited"]
