"""Ending ``sandbox up`` and the demo from outside: SIGINT (Ctrl-C), SIGTERM (``kill``), SIGHUP.

The first signal starts a clean stop at once and says so (servers drained, Prometheus stopped,
watches ended, files removed). A second one, when that stop hangs or the user will not wait,
kills the child processes and exits. SIGHUP is a stop like the others: it is what a closed
terminal sends, and left to its default action it killed the sandbox without its clean-up.

Each handler acts first (the stop begun, the children killed) and says so after, and what it
says is best effort: once the terminal is hung up, every write to it fails (EIO), and a message
no one can read must not keep the stop from starting.

Kopf, when started in this process (the demo runs the operator in-process), installs its own
SIGINT and SIGTERM handlers on the loop whenever it runs in the main thread, with no setting to
keep it from doing so; they stop only the operator. :func:`reclaim` installs this module's
handlers again after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from typing import TextIO

from neuronfleet.sandbox.children import kill_children

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _say(text: str) -> None:
    say_quietly(text, sys.stderr)


def say_quietly(text: str, stream: TextIO | None = None) -> None:
    """``print(text)`` to ``stream`` (default stdout), or nothing when it cannot be written.

    For the messages of a stop: after a hang-up the terminal raises EIO (OSError) on every write,
    and the stop they report must go on (see the module docstring).
    """
    with contextlib.suppress(OSError):
        print(text, file=stream if stream is not None else sys.stdout, flush=True)


class StopOnSignals:
    """SIGINT/SIGTERM/SIGHUP in the running loop: the first calls ``stop(signal)``, the next forces
    the exit (children killed, exit status 128 + the signal's number).

    ``what``: what is stopped, for the messages ("the sandbox", "the demo"). ``say`` prints them
    (default: stderr, at once).
    """

    def __init__(
        self, stop: Callable[[signal.Signals], object], what: str, say: Callable[[str], object] = _say
    ) -> None:
        self.stop = stop
        self.what = what
        self.say = say
        #: The first signal received, once one was.
        self.received: signal.Signals | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self) -> StopOnSignals:
        """Handle the signals in the running loop (from its main thread: elsewhere, nothing)."""
        global _installed
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            # NotImplementedError: no signals in this loop (Windows); RuntimeError/ValueError: not
            # the main thread, where Python handles signals. The default actions then stay.
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._received, sig)
        self._loop = loop
        _installed = self
        return self

    def uninstall(self) -> None:
        global _installed
        if self._loop is not None and not self._loop.is_closed():
            for sig in STOP_SIGNALS:
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    self._loop.remove_signal_handler(sig)
        self._loop = None
        if _installed is self:
            _installed = None

    def _received(self, sig: signal.Signals) -> None:
        if self.received is None:
            self.received = sig
            self.stop(sig)  # first: the message below may fail (a hung-up terminal)
            with contextlib.suppress(OSError):
                self.say(f"stopping {self.what} ({sig.name}; a second Ctrl-C or signal forces the exit)...")
            return
        killed = kill_children()
        with contextlib.suppress(OSError):  # a hung-up terminal: the exit below is what matters
            self.say(f"{sig.name} again: exiting now, {killed} child process{'es' if killed != 1 else ''} killed")
        os._exit(128 + sig.value)  # the clean stop is what hangs: nothing of it is waited for


_installed: StopOnSignals | None = None


def reclaim() -> None:
    """Install the handlers of the :class:`StopOnSignals` installed last again, in the running loop
    (after Kopf took the signals over, see the module docstring). Nothing if there is none."""
    stopper = _installed
    if stopper is not None and stopper._loop is asyncio.get_running_loop():
        stopper.install()


__all__ = ["STOP_SIGNALS", "StopOnSignals", "reclaim", "say_quietly"]
