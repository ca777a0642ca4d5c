"""Stopping ``neuronfleet demo`` as a user does (review r1): Ctrl-C or ``kill`` ends it, at once and cleanly.

The demo runs the operator in-process, and Kopf takes SIGINT and SIGTERM for itself when it
starts: they stopped the operator alone, and the demo ran on to its end. Here the demo (simulated
load, compile skipped: the quickest to reach its load) gets the signal once the operator runs.
Closing its terminal (a pty hung up, every write to it failing with EIO) stops it as cleanly:
the stop message, printed first, used to raise there and keep the stop from starting (review r7).
"""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from closed_terminal import caught, read_until, traceback_catcher

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(240)]

BIN = Path(sys.executable).parent


def _until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)  # polling the demo's output file: no event to wait on from here


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_stops_the_demo(sig: signal.Signals, tmp_path: Path) -> None:
    console = tmp_path / "console.txt"
    # 20 trace minutes at 10x: minutes of wall time, were the signal not heeded.
    argv = [str(BIN / "neuronfleet"), "demo", "--load", "simulated", "--skip-compile", "--no-live"]
    argv += ["--minutes", "20", "--speed", "10", "--out", str(tmp_path / "out")]
    with console.open("w") as out:
        demo = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
    try:
        # Printed once the operator (Kopf) runs and the example is applied.
        _until(lambda: "compile skipped" in console.read_text() or demo.poll() is not None, 120, "the demo's start")
        assert demo.poll() is None, console.read_text()
        os.killpg(demo.pid, sig)  # to the demo's process group, as a terminal sends Ctrl-C
        code = demo.wait(timeout=60)
        text = console.read_text()
        assert code == 128 + sig, text
        assert f"stopping the demo ({sig.name};" in text
        assert f"neuronfleet demo: stopped by {sig.name}" in text
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()


def test_a_closed_terminal_stops_the_demo(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # In a terminal: the live view runs, as for a user.
    argv = [str(BIN / "neuronfleet"), "demo", "--load", "simulated", "--skip-compile"]
    argv += ["--minutes", "20", "--speed", "10", "--out", str(out)]
    env, written = traceback_catcher(tmp_path / "catcher", dict(os.environ))
    master, terminal = pty.openpty()
    demo = subprocess.Popen(
        argv, stdin=terminal, stdout=terminal, stderr=terminal, cwd=tmp_path, env=env, start_new_session=True
    )
    os.close(terminal)
    try:
        read_until(master, "compile skipped", 120)  # the operator runs, the example is applied
        assert (out / "sandbox.lock").exists()
        os.close(master)  # the terminal window closes: writes to it now fail with EIO
        master = -1
        os.killpg(demo.pid, signal.SIGHUP)  # what the kernel sends its session as it hangs up
        assert demo.wait(timeout=60) == 128 + signal.SIGHUP, caught(written)
        assert not (out / "sandbox.lock").exists()
        assert not (out / "report.md").exists()  # stopped, not run to its end
    finally:
        if master >= 0:
            os.close(master)
        if demo.poll() is None:
            demo.kill()
            demo.wait()
