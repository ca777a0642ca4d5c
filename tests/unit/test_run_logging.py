"""`neuronfleet run`'s log: Kopf's per-object lines name their object; the operator's own lines are as before."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import kopf
import pytest
from handler_calls import kopf_body

from neuronfleet.run_command import configure_logging


@pytest.fixture
def root_logging() -> Iterator[None]:
    """The root and asyncio loggers as they were: the test installs the operator's handler."""
    root, aio = logging.getLogger(), logging.getLogger("asyncio")
    saved = (root.handlers[:], root.level, aio.handlers[:], aio.propagate)
    yield
    root.handlers[:], aio.handlers[:] = saved[0], saved[2]
    root.setLevel(saved[1])
    aio.propagate = saved[3]


@pytest.mark.usefixtures("root_logging")
def test_a_handler_line_names_its_object_and_other_lines_are_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    # As in a fresh process: without pytest's capture handlers (restored after), which the command
    # would leave in place.
    logging.getLogger().handlers[:] = []
    configure_logging(verbose=False)
    body = {
        "apiVersion": "serving.neuronfleet.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"namespace": "search", "name": "minilm-embeddings", "uid": "u-1"},
    }
    # Kopf logs a handler's outcome through this adapter (logger kopf.objects), with the object attached.
    objects = kopf.ObjectLogger(body=kopf_body(body), settings=kopf.OperatorSettings())
    objects.info("Handler 'deployment_changed' succeeded.")
    logging.getLogger("neuronfleet.run_command").info("leader: this replica reconciles")
    logging.getLogger("neuronfleet.run_command").debug("not at the default level")
    logging.getLogger("asyncio").error("Task exception was never retrieved")
    lines = capsys.readouterr().err.splitlines()
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
    assert len(lines) == 3, lines
    assert re.fullmatch(
        rf"{stamp} kopf\.objects \[search/minilm-embeddings\] Handler 'deployment_changed' succeeded\.", lines[0]
    ), lines[0]
    assert re.fullmatch(rf"{stamp} neuronfleet\.run_command leader: this replica reconciles", lines[1]), lines[1]
    assert re.fullmatch(rf"{stamp} asyncio Task exception was never retrieved", lines[2]), lines[2]
