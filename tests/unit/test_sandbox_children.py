"""The sandbox's child processes (``neuronfleet.sandbox.children``): a forced exit waits for the children
it killed to be gone; a piped helper stops when its stdin closes, or is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from neuronfleet.sandbox.children import start_piped_helper, stop_piped_helper, wait_exited

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"), reason="pidfds are Linux's"
)


@linux_only
def test_the_wait_ends_when_a_killed_child_has_exited_and_not_before() -> None:
    # SIGKILL is delivered, not obeyed, when kill() returns: on a loaded machine the sandbox said
    # "1 child process killed" and exited while the server still ran (CI saw it). The forced exit
    # now waits for each to exit, woken by the exit itself, for a bounded time.
    child = subprocess.Popen(["sleep", "600"])
    try:
        assert not wait_exited([child.pid], 0.2), "a child still running was taken as exited"
        assert child.poll() is None
        os.kill(child.pid, signal.SIGKILL)
        assert wait_exited([child.pid], 30.0)
        # Exited, not yet reaped (the wait leaves that to the child's owner): poll() reaps it at once.
        assert child.poll() == -signal.SIGKILL, "the wait ended before the child had exited"
    finally:
        child.kill()
        child.wait()
    assert wait_exited([child.pid], 0.0), "a child reaped already is gone, not waited for"


SCRIPT = """
import os, subprocess, sys
from neuronfleet.sandbox.children import kill_children

sleeper = subprocess.Popen(["sleep", "600"])
# The grandchild outlives this script: it must hold none of the pipes the test reads to their end.
quiet = "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL"
parent = subprocess.Popen(
    [sys.executable, "-c", f"import subprocess, sys; g = subprocess.Popen(['sleep', '600'], {quiet}); "
     "print(g.pid, flush=True); sys.stdin.read()"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
)
grandchild = int(parent.stdout.readline())
ended = subprocess.Popen(["true"])
os.waitid(os.P_PID, ended.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie child
print(kill_children(), sleeper.wait(), parent.wait(), grandchild, flush=True)
"""


@linux_only
def test_a_forced_exit_kills_this_process_children_only() -> None:
    # Run in a process of its own: here it would kill the test run's own children too. Its two live
    # children go; a child that already exited is not counted; a grandchild is not this process'.
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True)
    killed, sleeper, parent, grandchild = (int(field) for field in done.stdout.split())
    try:
        assert (killed, sleeper, parent) == (2, -signal.SIGKILL, -signal.SIGKILL)
        os.kill(grandchild, 0)  # still running (raises if it is gone)
    finally:
        os.kill(grandchild, signal.SIGKILL)


async def test_a_helper_that_exits_when_its_stdin_closes_stops_with_its_own_code() -> None:
    helper = await start_piped_helper([sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(3)"])
    assert await stop_piped_helper(helper, 30.0) == 3


async def test_a_helper_that_ignores_its_stdin_is_killed_at_the_timeout() -> None:
    # It says it runs only once it has started ignoring its stdin, so the stop meets it then.
    argv = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"]
    helper = await start_piped_helper(argv)
    assert helper.stdout is not None and await helper.stdout.readline() == b"up\n"
    assert await stop_piped_helper(helper, 0.5) == -signal.SIGKILL
