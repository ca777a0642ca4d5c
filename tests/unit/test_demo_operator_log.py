"""The demo's operator log: Kopf's records go to ``operator.log`` at INFO or more detail, and the
root logger is left as it was found.

The console belongs to the live view, so the log goes to a file. A root logger a caller set to
DEBUG keeps its detail; one at WARNING (Python's default) or NOTSET is lowered or raised to INFO
while the demo runs, so the operator's handler and scaling messages reach the file.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuronfleet.demo.orchestration import _log_to_file


@pytest.fixture
def root_level() -> Iterator[None]:
    root = logging.getLogger()
    saved = root.level
    yield
    root.setLevel(saved)


@pytest.mark.usefixtures("root_level")
@pytest.mark.parametrize(
    ("before", "during"),
    [
        (logging.WARNING, logging.INFO),
        (logging.NOTSET, logging.INFO),
        (logging.INFO, logging.INFO),
        (logging.DEBUG, logging.DEBUG),
    ],
)
def test_the_log_takes_info_or_the_detail_asked_for_and_restores_the_root(
    tmp_path: Path, before: int, during: int
) -> None:
    root = logging.getLogger()
    root.setLevel(before)
    log = tmp_path / "operator.log"
    with _log_to_file(log):
        assert root.level == during
        logging.getLogger("kopf.objects").info("handler succeeded")
        logging.getLogger("kopf.objects").debug("a detail")
    assert root.level == before
    text = log.read_text()
    assert "kopf.objects INFO handler succeeded" in text
    assert ("a detail" in text) == (during == logging.DEBUG)
    # After the demo, records no longer go to its file.
    logging.getLogger("kopf.objects").warning("after the demo")
    assert "after the demo" not in log.read_text()
