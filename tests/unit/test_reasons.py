"""Every reason the operator gives (conditions and Events) is documented in docs/troubleshooting.md."""

from __future__ import annotations

import re
from pathlib import Path

from neuronfleet.planning.reasons import Reason

DOC = Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md"


def test_the_troubleshooting_guide_lists_every_reason() -> None:
    documented = set(re.findall(r"`([A-Z][A-Za-z]+)`", DOC.read_text()))
    missing = sorted(reason.value for reason in Reason if reason.value not in documented)
    assert not missing, f"docs/troubleshooting.md does not explain: {missing}"


def test_reasons_are_camel_case_words() -> None:
    for reason in Reason:
        assert re.fullmatch(r"[A-Z][A-Za-z]+", reason.value), reason
