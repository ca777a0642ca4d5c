"""`neuronserve serve` refuses settings it cannot serve with, in one parser line, before loading anything."""

from __future__ import annotations

import pytest

from neuronserve.cli import build_parser


@pytest.mark.parametrize(
    ("flag", "value", "complaint"),
    [
        ("--max-body-bytes", "0", "expected at least 1, got 0"),  # every request would get 413
        ("--max-body-bytes", "-5", "expected at least 1, got -5"),
        ("--max-queue", "-1", "expected at least 0, got -1"),
        ("--port", "70000", "expected 0-65535, got 70000"),
        ("--torch-threads", "0", "expected at least 1, got 0"),
        ("--port", "http", "expected a whole number, got 'http'"),
    ],
)
def test_a_setting_it_cannot_serve_with_is_refused(
    flag: str, value: str, complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", flag, value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: {complaint}" in err, err


def test_the_defaults_and_bounds_are_accepted() -> None:
    args = build_parser().parse_args(["serve", "--max-body-bytes", "1", "--max-queue", "0", "--port", "0"])
    assert (args.max_body_bytes, args.max_queue, args.port) == (1, 0, 0)
