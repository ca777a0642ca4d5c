"""Which Prometheus binary the sandbox runs: the one on PATH, else Debian's /usr/bin/prometheus (a
PATH without /usr/bin), else a one-line refusal naming how to install it."""

from __future__ import annotations

import re

import pytest

from neuronfleet.sandbox.prometheus import INSTALL_HINT, PrometheusUnavailable, find_binary


@pytest.mark.parametrize(
    ("on_path", "debian", "found"),
    [
        ("/opt/prometheus/prometheus", False, "/opt/prometheus/prometheus"),
        ("/opt/prometheus/prometheus", True, "/opt/prometheus/prometheus"),
        (None, True, "/usr/bin/prometheus"),
    ],
)
def test_the_binary_on_path_comes_first_then_debians(
    on_path: str | None, debian: bool, found: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("shutil.which", lambda _name: on_path)
    monkeypatch.setattr("os.access", lambda path, _mode: debian and path == "/usr/bin/prometheus")
    assert find_binary() == found


def test_no_binary_is_refused_with_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda _name: None)
    monkeypatch.setattr("os.access", lambda _path, _mode: False)
    with pytest.raises(PrometheusUnavailable, match=re.escape(INSTALL_HINT)):
        find_binary()
