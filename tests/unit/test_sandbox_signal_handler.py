"""StopOnSignals acts before it speaks (review r7).

After a hang-up every write to the terminal raises OSError (EIO); the handler printed "stopping ..."
first, so the stop never began, and a later signal's forced exit printed first too and never exited.
"""

from __future__ import annotations

import os
import signal
import sys

import pytest

from neuronfleet.sandbox import signals


def _closed_terminal(_text: str) -> None:
    raise OSError(5, "Input/output error")


def test_the_stop_begins_though_its_message_cannot_be_written() -> None:
    stopped: list[signal.Signals] = []
    stopper = signals.StopOnSignals(stopped.append, "the sandbox", say=_closed_terminal)
    stopper._received(signal.SIGHUP)
    assert stopped == [signal.SIGHUP]
    assert stopper.received is signal.SIGHUP


def test_the_forced_exit_happens_though_its_message_cannot_be_written(monkeypatch: pytest.MonkeyPatch) -> None:
    exits: list[int] = []
    monkeypatch.setattr(signals, "kill_children", lambda: 0)
    monkeypatch.setattr(os, "_exit", exits.append)  # the module signals calls
    stopper = signals.StopOnSignals(lambda _signal: None, "the sandbox", say=_closed_terminal)
    stopper._received(signal.SIGHUP)
    stopper._received(signal.SIGTERM)
    assert exits == [128 + signal.SIGTERM]


def test_the_default_printer_ignores_a_closed_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    tried: list[str] = []

    class Closed:
        def write(self, text: str) -> int:
            tried.append(text)
            raise OSError(5, "Input/output error")

        def flush(self) -> None:
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(sys, "stderr", Closed())
    signals._say("stopping")  # raises no OSError (the test fails with it)
    assert tried == ["stopping"], "the message was written to stderr, and its EIO swallowed"


async def test_uninstalling_before_installing_or_twice_does_nothing() -> None:
    stopper = signals.StopOnSignals(lambda _signal: None, "the sandbox")
    stopper.uninstall()  # never installed: no handler to remove (a stop that failed early calls it)
    stopper.install()
    assert signals._installed is stopper
    stopper.uninstall()
    stopper.uninstall()
    assert signals._installed is None
