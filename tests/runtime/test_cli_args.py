"""`neuronserve serve` refuses settings it cannot serve with, in one parser line, before loading anything."""

from __future__ import annotations

import os
from typing import Any

import pytest

import neuronserve.server
from neuronserve.cli import EMULATED_DEVICE, build_parser, run_serve
from neuronserve.server import ServeConfig, ServeOptions

ENV_DEFAULTS = [
    "NEURONSERVE_ARTIFACT",
    "NEURONSERVE_DEVICE",
    "NEURONSERVE_EMULATED_PROFILE",
    "NEURONSERVE_EMULATED_TIME_SCALE",
    "NEURONSERVE_TORCH_THREADS",
]


@pytest.fixture(autouse=True)
def no_env_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_DEFAULTS:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("flag", "value", "complaint"),
    [
        ("--max-body-bytes", "0", "expected at least 1, got 0"),  # every request would get 413
        ("--max-body-bytes", "-5", "expected at least 1, got -5"),
        ("--max-queue", "0", "expected at least 1, got 0"),  # every request would get 429 (and the CRD says >= 1)
        ("--max-queue", "-1", "expected at least 1, got -1"),
        ("--port", "70000", "expected 0-65535, got 70000"),
        ("--torch-threads", "0", "expected at least 1, got 0"),
        ("--port", "http", "expected a whole number, got 'http'"),
        # nan and inf made the server report ready and then hang every request (or its drain).
        ("--max-batch-delay-ms", "nan", "expected a finite number, got 'nan'"),
        ("--max-batch-delay-ms", "inf", "expected a finite number, got 'inf'"),
        ("--emulated-time-scale", "inf", "expected a finite number, got 'inf'"),
        ("--emulated-time-scale", "NaN", "expected a finite number, got 'NaN'"),
        # Every batch would take no time: it failed when the server started, not in the parser.
        ("--emulated-time-scale", "0", "expected a positive number, got '0'"),
        ("--retry-after-seconds", "-1", "expected at least 0, got -1"),
        ("--drain-delay-seconds", "nan", "expected a finite number, got 'nan'"),
        ("--grace-seconds", "nan", "expected a finite number, got 'nan'"),
        ("--grace-seconds", "Infinity", "expected a finite number, got 'Infinity'"),
        ("--grace-seconds", "-1", "expected a non-negative number, got '-1'"),
        ("--max-batch-delay-ms", "soon", "expected a number, got 'soon'"),
    ],
)
def test_a_setting_it_cannot_serve_with_is_refused(
    flag: str, value: str, complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", f"{flag}={value}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: {complaint}" in err, err


def test_the_defaults_and_bounds_are_accepted() -> None:
    args = build_parser().parse_args(
        ["serve", "--max-body-bytes", "1", "--max-queue", "1", "--port", "0", "--grace-seconds", "0"]
    )
    assert (args.max_body_bytes, args.max_queue, args.port, args.grace_seconds) == (1, 1, 0, 0.0)
    args = build_parser().parse_args(["serve"])
    assert (args.device, args.profile, args.emulated_time_scale, args.artifact, args.torch_threads) == (
        "artifact",
        "bert-base",
        1.0,
        None,
        None,
    )
    assert (args.port, args.max_queue, args.max_batch_delay_ms, args.grace_seconds) == (8080, 256, 5.0, 30.0)


@pytest.mark.parametrize(
    ("variable", "value", "flag", "complaint"),
    [
        # float() of it crashed building the parser, even for `compile --help`.
        ("NEURONSERVE_EMULATED_TIME_SCALE", "abc", "--emulated-time-scale", "expected a number, got 'abc'"),
        ("NEURONSERVE_EMULATED_TIME_SCALE", "inf", "--emulated-time-scale", "expected a finite number, got 'inf'"),
        ("NEURONSERVE_EMULATED_TIME_SCALE", "-2", "--emulated-time-scale", "expected a non-negative number"),
        ("NEURONSERVE_EMULATED_TIME_SCALE", "0", "--emulated-time-scale", "expected a positive number"),
        # int() of it crashed in run_serve.
        ("NEURONSERVE_TORCH_THREADS", "abc", "--torch-threads", "expected a whole number, got 'abc'"),
        ("NEURONSERVE_TORCH_THREADS", "0", "--torch-threads", "expected at least 1, got 0"),
        # Not a choice: a KeyError in the emulator, or (the device) silently the real model on CPU.
        ("NEURONSERVE_EMULATED_PROFILE", "llama", "--profile", "expected one of bert-base"),
        ("NEURONSERVE_DEVICE", "emulated", "--device", "expected one of artifact, emulated-neuroncore"),
    ],
)
def test_a_bad_environment_default_is_refused_naming_the_variable(
    variable: str,
    value: str,
    flag: str,
    complaint: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: ${variable}={value!r}: {complaint}" in err, err
    # Help never reads the variables, and the other subcommand never uses them.
    for argv in (["serve", "--help"], ["compile", "--help"], ["--help"]):
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args(argv)
        assert exit_.value.code == 0


def test_the_flag_wins_over_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURONSERVE_TORCH_THREADS", "abc")
    monkeypatch.setenv("NEURONSERVE_DEVICE", "emulated")
    args = build_parser().parse_args(["serve", "--torch-threads", "2", "--device", "artifact"])
    assert (args.torch_threads, args.device) == (2, "artifact")


def test_good_environment_defaults_are_parsed_like_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURONSERVE_ARTIFACT", "s3://bucket/compiled/abc")
    monkeypatch.setenv("NEURONSERVE_DEVICE", "emulated-neuroncore")
    monkeypatch.setenv("NEURONSERVE_EMULATED_PROFILE", "bert-base")
    monkeypatch.setenv("NEURONSERVE_EMULATED_TIME_SCALE", "2.5")
    monkeypatch.setenv("NEURONSERVE_TORCH_THREADS", "3")
    args = build_parser().parse_args(["serve"])
    assert (args.artifact, args.device, args.profile, args.emulated_time_scale, args.torch_threads) == (
        "s3://bucket/compiled/abc",
        "emulated-neuroncore",
        "bert-base",
        2.5,
        3,
    )
    # An empty variable is an unset one.
    monkeypatch.setenv("NEURONSERVE_TORCH_THREADS", "")
    monkeypatch.setenv("NEURONSERVE_DEVICE", "")
    args = build_parser().parse_args(["serve"])
    assert (args.torch_threads, args.device) == (None, "artifact")


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            "serve",
            [
                "--port PORT 0 picks a free port, logged (default: 8080)",
                "--max-queue MAX_QUEUE queued requests beyond this get 429 (default: 256)",
                "(default: 30.0)",
                "--max-batch-delay-ms MAX_BATCH_DELAY_MS longest wait for a batch to fill, in ms, counted from its "
                "first request's arrival",
                "with whatever is queued (default: 5.0)",
            ],
        ),
        (
            "compile",
            [
                "(default: model)",
                "batch sizes (default: 1,4,8,16)",
                "sequence lengths (default: 128)",
                "source format (default: auto,",
                "neuronx-cc --auto-cast (default: matmult)",
                "neuronx-cc --auto-cast-type (default: bf16)",
                "neuronx-cc -O level (default: 2)",
            ],
        ),
    ],
)
def test_the_help_shows_the_defaults(command: str, expected: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([command, "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for line in expected:
        assert line in text, line


def test_string_defaults_still_parse_to_lists() -> None:
    args = build_parser().parse_args(["compile", "--source", "/x", "--store", "/y"])
    assert (args.batch_buckets, args.sequence_buckets) == ([1, 4, 8, 16], [128])
    assert args.inputs == [("input_ids", "int64"), ("attention_mask", "int64")]


def test_retry_after_has_a_flag() -> None:
    assert build_parser().parse_args(["serve"]).retry_after_seconds == 1
    assert build_parser().parse_args(["serve", "--retry-after-seconds", "7"]).retry_after_seconds == 7


def test_the_help_is_plain_text_and_says_what_the_body_limit_limits(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    top = capsys.readouterr().out
    assert "``" not in top and "neuronserve" in top
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    serve = " ".join(capsys.readouterr().out.split())
    assert "``" not in serve
    assert "--max-body-bytes MAX_BODY_BYTES largest infer request body accepted, in bytes" in serve


@pytest.mark.parametrize("value", ["0,4", "4,-1", ",", ""])
def test_a_bucket_list_needs_positive_integers(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["compile", "--batch-buckets", value])
    assert "argument --batch-buckets: expected positive integers" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "threads"), [(["--torch-threads", "3"], 3), ([], os.cpu_count() or 1)])
def test_the_server_gets_the_torch_threads_asked_for_else_one_per_cpu(
    flag: list[str], threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    served: list[Any] = []

    async def serve(options: Any) -> int:  # the server itself is not started: its options are the point
        served.append(options)
        return 0

    monkeypatch.setattr(neuronserve.server, "serve", serve)
    args = build_parser().parse_args(["serve", "--device", EMULATED_DEVICE, "--profile", "bert-base", *flag])
    assert run_serve(args) == 0
    assert [options.torch_threads for options in served] == [threads]


def test_the_serve_defaults_are_the_servers_own() -> None:
    # Each default is written twice, as the flag's and as the field's of the options the server
    # takes (a caller that builds them in Python, the tests): the two must say the same.
    args = build_parser().parse_args(["serve", "--artifact", "/models/bert"])
    options, config = ServeOptions(artifact=None), ServeConfig()
    assert (args.port, args.grace_seconds, args.drain_delay_seconds) == (
        options.port,
        options.grace_seconds,
        options.drain_delay_seconds,
    )
    assert (
        args.max_batch_delay_ms,
        args.max_queue,
        not args.no_batching,
        args.max_body_bytes,
        args.retry_after_seconds,
        args.max_uploads,
        args.body_timeout_seconds,
        args.device_failure_requests,
        args.device_failure_restart_seconds,
    ) == (
        config.max_batch_delay_ms,
        config.max_queue,
        config.batching,
        config.max_body_bytes,
        config.retry_after_seconds,
        config.max_uploads,
        config.body_timeout_seconds,
        config.device_suspect_after,
        config.device_restart_seconds,
    )
