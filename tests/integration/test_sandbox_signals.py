"""How ``neuronfleet sandbox up`` ends, as a user ends it (review r1), and what it leaves behind.

- SIGINT, SIGTERM and SIGHUP (the terminal closed) stop it cleanly: exit 0, ``sandbox.env`` removed,
  and it says so at once;
- with its terminal closed (a pty hung up: every write to it fails with EIO) SIGHUP still stops
  it cleanly: the messages that can no longer be shown must not cut the stop short;
- killed outright (SIGKILL), its child processes (a serving pod's server, Prometheus) die with it
  instead of running on as orphans.

The sandbox runs as the CLI runs it, in its own session (as from a terminal of its own).
"""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from closed_terminal import caught, read_until, traceback_catcher
from fixtures_prometheus import prometheus_binary

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(180)]

BIN = Path(sys.executable).parent
#: The tests that read processes from /proc (and the death signal they check is Linux's).
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; PR_SET_PDEATHSIG is Linux's")
BANNER_END = "Ctrl-C to stop."


def _until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)  # polling /proc and the sandbox's output: no event to wait on from here


def _children(pid: int) -> dict[int, str]:
    """The live processes whose parent is ``pid``: their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found[int(entry.name)] = cmdline
    return found


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its new parent to reap it is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class Sandbox:
    """``neuronfleet sandbox up`` in a session of its own, its output in a file."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.kubeconfig = tmp_path / "kubeconfig"
        self.out = tmp_path / "up.out"
        argv = [str(BIN / "neuronfleet"), "sandbox", "up", "--kubeconfig", str(self.kubeconfig)]
        argv += ["--no-s3", "--examples-dir", str(tmp_path / "no-examples"), *args]
        env = {**os.environ, "HOME": str(tmp_path), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        with self.out.open("w") as out:
            self.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path, start_new_session=True
            )
        _until(lambda: BANNER_END in self.output() or self.process.poll() is not None, 60, "sandbox up's banner")
        assert self.process.poll() is None, self.output()
        self.url = self.output().split("sandbox API server: ", 1)[1].split()[0]

    def output(self) -> str:
        return self.out.read_text()

    def api(self, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            headers={"Content-Type": "application/json"},
            method="POST" if data else "GET",
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


@pytest.fixture
def sandboxes() -> Iterator[list[Sandbox]]:
    started: list[Sandbox] = []
    yield started
    for sandbox in started:
        sandbox.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_stops_the_sandbox_cleanly(sig: signal.Signals, tmp_path: Path, sandboxes: list[Sandbox]) -> None:
    sandbox = Sandbox(tmp_path, "--serving", "simulated", "--prometheus", "off")
    sandboxes.append(sandbox)
    assert (tmp_path / "sandbox.env").exists()
    os.killpg(sandbox.process.pid, sig)  # to the session's process group, as a terminal sends it
    code = sandbox.process.wait(timeout=60)
    assert code == 0, sandbox.output()
    assert f"stopping the sandbox ({sig.name};" in sandbox.output()
    assert not (tmp_path / "sandbox.env").exists()


def test_a_closed_terminal_stops_the_sandbox_cleanly(tmp_path: Path) -> None:
    """Review r7: the stop message, printed to the hung-up terminal, raised EIO before the stop began."""
    kubeconfig = tmp_path / "kubeconfig"
    argv = [str(BIN / "neuronfleet"), "sandbox", "up", "--kubeconfig", str(kubeconfig), "--no-s3"]
    argv += ["--examples-dir", str(tmp_path / "no-examples"), "--serving", "simulated", "--prometheus", "off"]
    env = {**os.environ, "HOME": str(tmp_path), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env, written = traceback_catcher(tmp_path / "catcher", env)
    master, terminal = pty.openpty()
    process = subprocess.Popen(
        argv, stdin=terminal, stdout=terminal, stderr=terminal, env=env, cwd=tmp_path, start_new_session=True
    )
    os.close(terminal)
    try:
        read_until(master, BANNER_END, 60)
        assert (tmp_path / "sandbox.env").exists() and (tmp_path / "sandbox.lock").exists()
        os.close(master)  # the terminal window closes: writes to it now fail with EIO
        master = -1
        os.killpg(process.pid, signal.SIGHUP)  # what the kernel sends its session as it hangs up
        assert process.wait(timeout=60) == 0, caught(written)
        assert not (tmp_path / "sandbox.env").exists()
        assert not (tmp_path / "sandbox.lock").exists()
    finally:
        if master >= 0:
            os.close(master)
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


def _serving_pod(sandbox: Sandbox, tmp_path: Path, script: str) -> None:
    """A serving pod whose container (any ``neuronserve serve`` runs as a process) runs ``script``."""
    fake = tmp_path / "bin" / "neuronserve"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    node = sandbox.api("/api/v1/nodes")["items"][0]["metadata"]["name"]
    container = {"name": "server", "image": "neuronserve", "command": [str(fake), "serve"]}
    pod = {
        "metadata": {"name": "server", "namespace": "default"},
        "spec": {"nodeName": node, "containers": [container]},
    }
    sandbox.api("/api/v1/namespaces/default/pods", {"apiVersion": "v1", "kind": "Pod", **pod})


@linux_only
def test_children_die_with_a_killed_sandbox(tmp_path: Path, sandboxes: list[Sandbox]) -> None:
    prometheus = prometheus_binary() is not None
    sandbox = Sandbox(
        tmp_path,
        "--serving",
        "emulated-device",
        "--compile-jobs",
        "simulated",
        "--prometheus",
        "on" if prometheus else "off",
    )
    sandboxes.append(sandbox)
    _serving_pod(sandbox, tmp_path, "exec sleep 600")
    pid = sandbox.process.pid
    children = _until(
        lambda: (
            (found := _children(pid))
            and any(cmd.startswith("sleep 600") for cmd in found.values())
            and (not prometheus or any("prometheus" in cmd for cmd in found.values()))
            and found
        ),
        60,
        "the pod's server (and Prometheus) to run",
    )
    try:
        os.kill(pid, signal.SIGKILL)
        sandbox.process.wait(timeout=30)
        _until(
            lambda: not any(_alive(child) for child in children), 30, f"the killed sandbox's children {children} to end"
        )
        assert not [child for child in children if _alive(child)], "children outlived the killed sandbox"
    finally:
        for child in children:
            if _alive(child):
                os.kill(child, signal.SIGKILL)


@linux_only
def test_a_second_signal_forces_the_exit(tmp_path: Path, sandboxes: list[Sandbox]) -> None:
    sandbox = Sandbox(tmp_path, "--serving", "emulated-device", "--compile-jobs", "simulated", "--prometheus", "off")
    sandboxes.append(sandbox)
    # A server that ignores SIGTERM holds the clean stop for its grace period (5 s, then SIGKILL).
    _serving_pod(sandbox, tmp_path, "trap '' TERM INT\nexec sleep 600")
    pid = sandbox.process.pid
    children = _until(
        lambda: (found := _children(pid)) and any(cmd.startswith("sleep 600") for cmd in found.values()) and found,
        60,
        "the pod's server to run",
    )
    try:
        os.killpg(pid, signal.SIGINT)
        # Removed as the clean stop begins, before the servers are stopped.
        _until(lambda: not (tmp_path / "sandbox.env").exists(), 30, "the clean stop to begin")
        os.killpg(pid, signal.SIGINT)
        code = sandbox.process.wait(timeout=30)
        assert code == 128 + signal.SIGINT, sandbox.output()
        assert "SIGINT again: exiting now, 1 child process killed" in sandbox.output()
        assert not any(_alive(child) for child in children)
    finally:
        for child in children:
            if _alive(child):
                os.kill(child, signal.SIGKILL)
