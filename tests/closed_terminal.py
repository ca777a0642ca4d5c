"""Running a command in a pty that the test then hangs up, as a closed terminal window does.

Once the pty's master is closed every write of the command to its terminal fails (EIO), so what
it would print on failure is lost: :func:`traceback_catcher` makes the Python it runs write an
uncaught exception's traceback to a file as well, for the test's failure message.
"""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

_SITECUSTOMIZE = """
import sys, traceback
_print = sys.excepthook
def _hook(kind, value, tb):
    with open({path!r}, "a") as out:
        out.write(" ".join(sys.argv) + "\\n" + "".join(traceback.format_exception(kind, value, tb)))
    _print(kind, value, tb)
sys.excepthook = _hook
"""


def read_until(fd: int, text: str, timeout: float) -> str:
    """What ``fd`` (a pty's master) gives until a whole line holding ``text`` is in it (select: woken
    by each write). The whole line: a terminal hung up after the text but before its newline made the
    command's ``print`` of that line fail (EIO), a failure of the test's timing, not of the command."""
    seen = b""
    deadline = time.monotonic() + timeout
    while text.encode() not in seen or b"\n" not in seen[seen.index(text.encode()) :]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"timed out waiting for {text!r}; output: {seen.decode(errors='replace')}")
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the other end closed (the process ended)
                chunk = b""
            if not chunk:
                raise AssertionError(f"ended before {text!r}; output: {seen.decode(errors='replace')}")
            seen += chunk
    return seen.decode(errors="replace")


def traceback_catcher(directory: Path, env: dict[str, str]) -> tuple[dict[str, str], Path]:
    """``env`` for a Python command whose uncaught exceptions are also written to the returned file
    (a ``sitecustomize`` in ``directory``, first on its PYTHONPATH; the venv has none of its own)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = directory / "traceback.txt"
    (directory / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(path=str(written)))
    path = os.pathsep.join(p for p in (str(directory), env.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path}, written


def caught(written: Path) -> str:
    """The tracebacks :func:`traceback_catcher`'s file holds, or a line saying there are none."""
    return written.read_text() if written.exists() else "(no uncaught exception in the command)"
