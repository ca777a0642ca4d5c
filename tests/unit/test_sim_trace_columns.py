"""Which trace columns were taken (time, context and output tokens) and which ignored, said in the
report, and the profile's default token counts named where they stand in for missing ones."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from neuronfleet.sim.command import run_cli
from neuronfleet.sim.profiles import load_profile
from neuronfleet.sim.trace import Columns, load

QUICK = ["--policies", "static", "--no-sweep", "--no-plots", "--jobs", "1", "--peak-replicas", "4"]


def write(path: Path, header: str, seconds: int = 600, rate: float = 3.0) -> Path:
    rng = np.random.default_rng(6)
    times = np.sort(rng.random(int(seconds * rate)) * seconds)
    extra = header.count(",")
    rows = [",".join([f"{t:.3f}", *(str(rng.integers(10, 900)) for _ in range(extra))]) for t in times]
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def test_load_records_the_columns_taken_and_ignored(tmp_path: Path) -> None:
    trace = load(write(tmp_path / "t.csv", "time,tokens,output_len,user"))
    assert trace.columns == Columns("time", None, "output_len", ("tokens", "user"))
    assert trace.context_tokens is None and trace.generated_tokens is not None
    azure = load(write(tmp_path / "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens"))
    assert azure.columns == Columns("TIMESTAMP", "ContextTokens", "GeneratedTokens", ())


def test_an_unrecognised_token_column_is_reported_and_the_default_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A reviewer's header: `tokens` is no context size, so llama-2-7b gave every request its
    # default 1,024 context tokens, and nothing said so.
    out = tmp_path / "out"
    csv = write(tmp_path / "t.csv", "time,tokens,output_len")
    assert run_cli(["--trace", str(csv), "--profile", "llama-2-7b", *QUICK, "--out", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "columns of t.csv: time 'time', context tokens none, output tokens 'output_len'; ignored 'tokens'" in text
    default = "t.csv has no context-token column: every request takes llama-2-7b's default of 1,024 context tokens"
    assert f"note: {default}" in text
    assert "output-token column" not in text  # output_len was taken
    doc = json.loads((out / "simulate.json").read_text())
    assert doc["profiles"]["llama-2-7b"]["assumptions"][-1] == default
    assert doc["columns"]["trace"] == {
        "time": "time",
        "context": None,
        "generated": "output_len",
        "ignored": ["tokens"],
    }


def test_a_batch_profile_names_no_token_defaults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert run_cli(["--trace", str(write(tmp_path / "t.csv", "timestamp")), *QUICK, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "columns of t.csv: time 'timestamp', context tokens none, output tokens none; ignored none" in text
    assert "default of" not in text  # bert-base does not use token counts
    assumptions = json.loads((out / "simulate.json").read_text())["profiles"]["bert-base"]["assumptions"]
    assert assumptions == load_profile("bert-base").assumptions


def test_a_token_column_is_taken_over_an_identifier_that_matches_first(tmp_path: Path) -> None:
    # prompt_id (a request's prompt number, 988598) was taken as the context size, first match
    # winning, and context_tokens ignored: every request a ~1M-token prompt.
    path = tmp_path / "t.csv"
    path.write_text(
        "timestamp,request_id,prompt_id,context_tokens,generated_tokens\n0.5,0,988598,114,140\n1.5,1,897926,510,251\n"
    )
    trace = load(path)
    assert trace.columns == Columns("timestamp", "context_tokens", "generated_tokens", ("request_id", "prompt_id"))
    assert trace.context_tokens is not None and trace.context_tokens.tolist() == [114, 510]


@pytest.mark.parametrize(
    ("header", "columns"),
    [
        ("time,prompt,inputTokens", ("inputTokens", None)),  # the one saying tokens
        ("time,promptId,prompt_len", ("prompt_len", None)),  # the only one not an identifier
        ("time,input_len,output_len", ("input_len", "output_len")),  # one match each: taken as before
    ],
)
def test_the_column_that_says_tokens_or_the_only_match_is_taken(
    tmp_path: Path, header: str, columns: tuple[str | None, str | None]
) -> None:
    trace = load(write(tmp_path / "t.csv", header))
    assert trace.columns is not None
    assert (trace.columns.context, trace.columns.generated) == columns


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (
            "time,prompt_tokens,input_tokens",
            "the context-token count could be any of the columns 'prompt_tokens', 'input_tokens'; rename the one "
            "that holds it 'context_tokens' and give the others names without 'context', 'prompt', 'input' "
            "or 'request'",
        ),
        (
            "time,output,completion_len",
            "the output-token count could be any of the columns 'output', 'completion_len'; rename the one that "
            "holds it 'generated_tokens' and give the others names without 'generated', 'output', 'completion' "
            "or 'response' "
            "(or with 'tokens' in the one that holds the count)",
        ),
    ],
)
def test_a_trace_whose_token_column_is_ambiguous_is_refused_naming_the_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], header: str, message: str
) -> None:
    csv = write(tmp_path / "t.csv", header)
    assert run_cli(["--trace", str(csv), *QUICK, "--out", str(tmp_path / "o")]) == 2
    assert f"error: {csv}: {message}" in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize(
    ("header", "columns"),
    [
        # A review's vLLM-like header: the rate column, containing "token", beat output_len and
        # every request "generated" 35.2 tokens (its milliseconds per token).
        ("timestamp,prompt_len,output_len,time_per_output_token_ms", ("prompt_len", "output_len")),
        ("time,prompt_tokens,output_tokens,output_tokens_per_s", ("prompt_tokens", "output_tokens")),
        ("time,context_tokens,GeneratedTokensPerSecond,GeneratedTokens", ("context_tokens", "GeneratedTokens")),
        ("time,input_len,outputLatencyMs,inputDurationS", ("input_len", None)),  # times: no count at all
        ("time,prompt_len,prompt_text_s", ("prompt_len", None)),  # an `_s` suffix: seconds
        # A name that says it counts beats one that says something else about the prompt.
        ("time,prompt_type,prompt_len", ("prompt_len", None)),
        ("time,num_output,output_kind", (None, "num_output")),
        ("time,output_count,output_lang", (None, "output_count")),
    ],
)
def test_a_rate_or_time_is_never_a_token_count_and_a_count_is_preferred(
    tmp_path: Path, header: str, columns: tuple[str | None, str | None]
) -> None:
    trace = load(write(tmp_path / "t.csv", header))
    assert trace.columns is not None
    assert (trace.columns.context, trace.columns.generated) == columns
    taken = {trace.columns.time, *columns}
    assert set(trace.columns.ignored) == set(header.split(",")) - taken


def test_the_review_trace_reads_output_len_as_the_generated_tokens(tmp_path: Path) -> None:
    path = tmp_path / "vllm-like.csv"
    path.write_text("timestamp,prompt_len,output_len,time_per_output_token_ms\n0,100,20,35.2\n1,200,40,41.7\n")
    trace = load(path)
    assert trace.generated_tokens is not None and trace.generated_tokens.tolist() == [20.0, 40.0]
    assert trace.columns == Columns("timestamp", "prompt_len", "output_len", ("time_per_output_token_ms",))


def test_two_counts_left_after_the_rates_are_refused_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = write(tmp_path / "t.csv", "time,output_len,output_tokens_per_s,completion_count")
    assert run_cli(["--trace", str(csv), *QUICK, "--out", str(tmp_path / "o")]) == 2
    assert (
        f"error: {csv}: the output-token count could be any of the columns 'output_len', 'completion_count'; "
        "rename the one that holds it 'generated_tokens'" in " ".join(capsys.readouterr().err.split())
    )


@pytest.mark.parametrize(
    ("name", "header"),
    [
        ("azure-llm-2023-conv.csv", ("TIMESTAMP", "ContextTokens", "GeneratedTokens", ())),
        ("nasa-http-1995-jul01-14.csv", ("timestamp", None, None, ())),
    ],
)
def test_the_shared_traces_headers_read_the_same_columns(
    tmp_path: Path, name: str, header: tuple[str, str | None, str | None, tuple[str, ...]]
) -> None:
    # Their headers as in /work/shared/traces (the files are not in the repository).
    time, context, generated, _ = header
    names = [n for n in (time, context, generated) if n]
    assert load(write(tmp_path / name, ",".join(names))).columns == Columns(*header)


def test_request_and_response_token_columns_are_read(tmp_path: Path) -> None:
    # BurstGPT's header: its token columns say request and response, and were ignored (every
    # request got the profile's default sizes); its `Total tokens` is neither.
    burst = load(
        write(tmp_path / "b.csv", "Timestamp,Request tokens,Response tokens,Total tokens,Log Type", seconds=60)
    )
    assert burst.columns is not None
    assert burst.columns.context == "Request tokens" and burst.columns.generated == "Response tokens"
    assert set(burst.columns.ignored) == {"Total tokens", "Log Type"}
    # An identifier or a time that says request or response is still never a token count.
    other = load(write(tmp_path / "o.csv", "time,request_id,response_time_ms,input_tokens,output_tokens", seconds=60))
    assert other.columns is not None
    assert other.columns.context == "input_tokens" and other.columns.generated == "output_tokens"
