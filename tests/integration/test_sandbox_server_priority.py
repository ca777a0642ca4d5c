"""A starting server runs niced until it is Ready, then at the sandbox's own priority.

The server here is a real process speaking the readiness protocol the kubelet probes (a few lines
of ``http.server`` that answer ``/v2/health/ready`` with 503 until a file appears in the pod's
scratch directory), so the test controls when it becomes ready and reads the niceness the kernel
reports for it before and after.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from fake_servers import DRAINING_SERVER

from neuronfleet.sandbox import serving
from neuronfleet.sandbox.serving import ServerProcesses, ServingOptions

SERVER = textwrap.dedent(
    """\
    import http.server, pathlib, sys
    port = int(sys.argv[sys.argv.index("--port") + 1])
    flag = pathlib.Path(sys.argv[sys.argv.index("--cache-dir") + 1]) / "ready"

    class Ready(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if flag.exists() else 503)
            self.end_headers()

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", port), Ready).serve_forever()
    """
)


def pod(binary: Path) -> dict[str, object]:
    return {
        "metadata": {"uid": "0123456789abcdef", "name": "server-0", "namespace": "priority"},
        "spec": {"containers": [{"name": "server", "command": [str(binary)], "args": ["serve"]}]},
    }


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    script = tmp_path / "fake-neuronserve"
    script.write_text(f"#!{sys.executable}\n{SERVER}")
    script.chmod(0o755)
    return script


@pytest.fixture
async def new_processes(tmp_path: Path) -> AsyncIterator[Callable[[], ServerProcesses]]:
    """Makes the kubelet's server processes (with a starting niceness of 7); stops them all after."""
    made: list[ServerProcesses] = []

    def make() -> ServerProcesses:
        made.append(
            ServerProcesses(
                ServingOptions(device_args=(), starting_niceness=7, ready_timeout_s=30.0),
                {"PATH": os.environ.get("PATH", "")},
                tmp_path / f"work-{len(made)}",
            )
        )
        return made[-1]

    yield make
    for processes in made:
        await processes.stop_all()


async def _starting(processes: ServerProcesses, binary: Path) -> tuple[str, Path]:
    server = await processes.start(pod(binary), lambda line: None)
    # Listening and answering "not ready": the probe says False, not None (gone).
    for _ in range(200):
        if await processes.probe(server.uid) is False:
            break
        assert await processes.wait_exit(server.uid, 0.05) is None, "the server exited"
    else:
        raise AssertionError("the server never answered its readiness probe")
    return server.uid, server.scratch


async def test_a_starting_server_is_niced_until_ready(
    new_processes: Callable[[], ServerProcesses], binary: Path
) -> None:
    if not serving.may_restore_priority():
        pytest.skip("this user may not lower a process' niceness again (the sandbox then nices no server)")
    processes = new_processes()
    own = os.getpriority(os.PRIO_PROCESS, 0)
    uid, scratch = await _starting(processes, binary)
    assert processes.niceness(uid) == own + 7

    (scratch / "ready").touch()
    assert await processes.wait_ready(uid)
    assert processes.niceness(uid) == own


async def test_without_the_privilege_to_restore_it_no_server_is_niced(
    new_processes: Callable[[], ServerProcesses], binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serving, "may_restore_priority", lambda: False)
    processes = new_processes()
    uid, _ = await _starting(processes, binary)
    assert processes.niceness(uid) == os.getpriority(os.PRIO_PROCESS, 0)


async def test_a_sandbox_shutting_down_skips_the_servers_drain_delay(
    new_processes: Callable[[], ServerProcesses], tmp_path: Path
) -> None:
    script = tmp_path / "draining-neuronserve"
    script.write_text(f"#!{sys.executable}\n{DRAINING_SERVER}")
    script.chmod(0o755)
    processes = new_processes()
    server = await processes.start(pod(script), lambda line: None)
    for _ in range(200):
        if await processes.probe(server.uid):
            break
        assert await processes.wait_exit(server.uid, 0.05) is None, "the server exited"
    # A pod deletion gives the drain its grace; a sandbox shutting down sends the second signal
    # at once: the server exits by itself (0) instead of being killed when the grace ends (-9).
    await processes.stop_all(grace_s=30.0)
    assert server.process.returncode == 0


async def test_a_probe_of_a_server_gone_or_never_started_says_none(
    new_processes: Callable[[], ServerProcesses], binary: Path
) -> None:
    # None (gone), not False (not ready yet): the kubelet stops waiting at once instead of probing a
    # closed port until its ready timeout.
    processes = new_processes()
    assert await processes.probe("no-such-pod") is None
    uid, _ = await _starting(processes, binary)
    server = processes.processes[uid]
    server.process.kill()
    assert await processes.wait_exit(uid, 30.0) is not None
    assert await processes.probe(uid) is None
    assert not await processes.wait_ready(uid)


@pytest.mark.parametrize(("headroom", "may"), [(0, True), (-1, False)])
def test_without_root_the_nice_rlimit_must_reach_this_process_niceness(
    headroom: int, may: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # RLIMIT_NICE's soft limit s lets a process lower its niceness down to 20 - s: exactly its own is enough.
    import resource

    own = os.getpriority(os.PRIO_PROCESS, 0)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (20 - own + headroom, resource.RLIM_INFINITY))
    assert serving.may_restore_priority() is may
