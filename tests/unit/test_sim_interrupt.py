"""Ctrl-C during `neuronfleet simulate` with worker processes (--jobs above 1, the default): the run
stops at once, exits 130 with one line, and leaves no empty --out folder behind."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

#: How long the interrupted run may take to exit. The queued runs below take about a minute of
#: both CPUs' time: a run waiting for them (as it used to) misses this by far.
EXIT_BOUND_S = 10.0


def write_day_trace(path: Path) -> Path:
    # A day at 0.5 requests/s: each run of ours takes ~10 s of CPU at the default --peak-replicas.
    rng = np.random.default_rng(5)
    times = np.cumsum(rng.exponential(2.0, size=60_000))
    times = times[times < 86_400]
    path.write_text("timestamp\n" + "\n".join(f"{t:.3f}" for t in times) + "\n")
    return path


def _process_tree(pid: int) -> str:
    """``pid``'s process and its children: state, signals blocked/ignored/caught, CPU time, command."""
    rows = []
    for task in [pid, *_children(pid)]:
        try:
            status = dict(
                line.split(":\t", 1) for line in Path(f"/proc/{task}/status").read_text().splitlines() if ":\t" in line
            )
            stat = Path(f"/proc/{task}/stat").read_text().rsplit(")", 1)[1].split()
            wchan = Path(f"/proc/{task}/wchan").read_text()
            command = Path(f"/proc/{task}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:80]
        except OSError:
            rows.append(f"{task}: gone")
            continue
        cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
        keys = ("State", "SigBlk", "SigIgn", "SigCgt")
        rows.append(
            f"{task}: "
            + " ".join(f"{k}={status.get(k, '?').strip()}" for k in keys)
            + f" wchan={wchan} cpu={cpu:.1f}s {command}"
        )
    return "\n".join(rows)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                for child in (task / "children").read_text().split():
                    found += [int(child), *_children(int(child))]
    return found


@pytest.mark.slow
@pytest.mark.parametrize("to", ["group", "parent"])
def test_ctrl_c_stops_a_run_with_worker_processes_at_once(to: str, tmp_path: Path) -> None:
    """``to``: the process group (Ctrl-C in a terminal), or the parent alone (``kill -INT``)."""
    out = tmp_path / "new" / "out"
    command = [sys.executable, "-m", "neuronfleet.cli", "simulate", "--trace", str(write_day_trace(tmp_path / "t.csv"))]
    # hpa's runs first (a few seconds each: one done shows the pool at work), then ours' 7 long ones queued.
    command += ["--policies", "hpa,ours", "--jobs", "2", "--no-plots", "--out", str(out)]
    # Its own session, so that the SIGINT below reaches it and its workers (as Ctrl-C reaches a
    # terminal's foreground group) and not pytest.
    # SIGINT caught here while it starts, so that the run gets it at its default (a handler is reset
    # by exec, an ignored signal stays ignored), as a shell starts a foreground command. pytest run in
    # the background (`make test &`, a CI runner) ignores SIGINT, and its test processes with it: the
    # run then ignored the Ctrl-C below, unless a test before this one in the same worker happened to
    # install a handler (asyncio restores default_int_handler) - it failed so in two full CI runs.
    ignored = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
    finally:
        signal.signal(signal.SIGINT, ignored)
    assert process.stderr is not None
    stderr = process.stderr
    lines: queue.Queue[str] = queue.Queue()

    def forward() -> None:
        for line in stderr:
            lines.put(line)

    reader = threading.Thread(target=forward, daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while not any("run 1/" in line for line in seen):
            assert process.poll() is None, "".join(seen)
            assert time.monotonic() < deadline, "no run finished:\n" + "".join(seen)
            with contextlib.suppress(queue.Empty):
                seen.append(lines.get(timeout=1))
        if to == "group":
            os.killpg(process.pid, signal.SIGINT)
        else:
            process.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        try:
            returncode = process.wait(timeout=EXIT_BOUND_S)
        except subprocess.TimeoutExpired:
            # What the run and its workers were doing (it failed so twice in full CI runs, never alone).
            with contextlib.suppress(queue.Empty):
                while True:
                    seen.append(lines.get_nowait())
            pytest.fail(
                f"still running {EXIT_BOUND_S:g} s after Ctrl-C; its processes:\n{_process_tree(process.pid)}\n"
                f"its stderr:\n{''.join(seen)}"
            )
        waited = time.monotonic() - interrupted
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    reader.join(timeout=30)
    while not lines.empty():
        seen.append(lines.get())
    after = "".join(seen[seen.index(next(line for line in seen if "run 1/" in line)) + 1 :])
    assert returncode == 130, f"exit {returncode} after {waited:.1f} s:\n{after}"
    assert "Traceback" not in after, after
    # One line, the last: no worker's error on the way out.
    assert after.strip().splitlines()[-1] == "interrupted", after
    # The --out folder (and its parent) this run made, left empty, are gone; the temp dir stays.
    assert not out.parent.exists()
    assert tmp_path.is_dir()
