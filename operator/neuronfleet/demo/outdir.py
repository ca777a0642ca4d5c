"""The demo's ``--out``: taken only when it is new, empty, or an earlier demo's; refused otherwise.

Each run replaces what the demo writes there (the artifact store, the kubeconfig, the report...),
so a directory holding anyone else's files under those names must never be taken: ``--out .`` in a
project deleted its ``./artifacts/`` and overwrote its ``./kubeconfig`` and ``./report.md`` (review
r11). An earlier demo's directory is recognised by a marker file, :data:`MARKER_NAME`, that the
demo writes first, right after it locks the directory: a demo stopped or killed before its report
(which is written last) still leaves a directory the next one takes, so ``make demo`` runs run
after run. A ``summary.json`` could not serve: a stopped demo leaves none, and its name is common.

Directories written before the marker existed are recognised too, strictly: every entry is one the
demo writes, and their ``summary.json`` is a demo's.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from neuronfleet.demo.options import DemoError
from neuronfleet.sandbox.dirlock import LOCK_FILE_NAME

MARKER_NAME = ".neuronfleet-demo"
MARKER_TEXT = (
    "This directory holds the output of `neuronfleet demo`: the next demo given it as --out replaces\n"
    "the files it writes here (see `neuronfleet demo --help`, --out). Other files are left alone.\n"
)
#: Every entry the demo may write in ``--out`` (its help and the README list them).
DEMO_ENTRIES = frozenset(
    {
        MARKER_NAME,
        LOCK_FILE_NAME,
        "kubeconfig",
        "operator.log",
        "artifacts",
        "report.md",
        "summary.json",
        "timeline.png",
        # --load simulated --skip-compile: the stand-in model source.
        "model-placeholder",
        # --load real: the sandbox's pod and Prometheus work files, the client's input, result and log.
        "sandbox",
        "arrivals.npy",
        "request.json",
        "client.json",
        "client.log",
    }
)
#: Keys every demo's summary.json has had (``DemoResult``): how a pre-marker directory is recognised.
_SUMMARY_KEYS = frozenset({"facts", "compile", "timeline", "attribution"})
_ADVICE = "pass --out a new or empty directory"


def check_out_dir(out: Path) -> None:
    """Return if the demo may write in ``out``; DemoError (one line, naming it) if not. Writes nothing.

    ``out`` may be missing, empty, hold only a lock file left by a crashed sandbox (the kernel
    dropped its lock with its process; :mod:`neuronfleet.sandbox.dirlock`), or be an earlier demo's.
    A demo running there passes this check and is refused by the lock, naming its pid.
    """
    try:
        mode = out.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise DemoError(f"--out {out}: {exc.strerror or exc}: {_ADVICE}") from None
    if not stat.S_ISDIR(mode):
        raise DemoError(f"--out {out} is not a directory: {_ADVICE}")
    try:
        entries = set(os.listdir(out))
    except OSError as exc:
        raise DemoError(f"--out {out}: {exc.strerror or exc}: {_ADVICE}") from None
    if MARKER_NAME in entries and (out / MARKER_NAME).is_file():
        return
    if LOCK_FILE_NAME in entries and _is_lock_file(out / LOCK_FILE_NAME):
        entries.discard(LOCK_FILE_NAME)
    if not entries or (entries <= DEMO_ENTRIES and _is_demo_summary(out / "summary.json")):
        return
    raise DemoError(
        f"--out {out}/ holds files that are not an earlier demo's (it has no {MARKER_NAME}), which the demo "
        f"would replace: {_ADVICE}"
    )


def mark_out_dir(out: Path) -> None:
    """Claim ``out`` for the demo (call it holding ``out``'s lock, before writing anything else)."""
    (out / MARKER_NAME).write_text(MARKER_TEXT)


def _is_lock_file(path: Path) -> bool:
    """A sandbox's lock file: a regular file holding nothing or its holder's pid (as dirlock writes it)."""
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > 32:
            return False
        text = path.read_bytes().decode().strip()
    except (OSError, UnicodeDecodeError):
        return False
    return text == "" or text.isdigit()


def _is_demo_summary(path: Path) -> bool:
    try:
        if not path.is_file() or path.stat().st_size > 64 * 1024 * 1024:
            return False
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(data, dict) and data.keys() >= _SUMMARY_KEYS


__all__ = ["DEMO_ENTRIES", "MARKER_NAME", "check_out_dir", "mark_out_dir"]
