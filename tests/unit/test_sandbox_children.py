"""A forced exit waits for the children it killed to be gone (``neuronfleet.sandbox.children``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from neuronfleet.sandbox.children import wait_exited

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
