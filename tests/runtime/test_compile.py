"""``neuronserve compile``: the real MiniLM into moto S3, the cache, other sources and bad input."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import sys
import types
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import numpy.typing as npt
import pytest
import torch
from tiny_model import save_slow, save_tiny

import neuronserve
from neuronserve import cli
from neuronserve import compile as ncompile
from neuronserve.backend import LoadError, ModelRunner
from neuronserve.manifest import Bucket, Manifest
from neuronserve.store import fetch_artifact
from runtime_support import BUCKET, STORE, Compiled, Fetched, S3Server, compile_argv


def _objects(prefix: str) -> dict[str, tuple[str, object]]:
    client = boto3.client("s3")
    listing = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return {o["Key"]: (o["ETag"], o["LastModified"]) for o in listing.get("Contents", [])}


def test_compile_stores_a_cpu_artifact_with_a_complete_manifest(compiled: Compiled, s3_env: S3Server) -> None:
    key = compiled.result["cacheKey"]
    assert compiled.uri == f"{STORE}/{key}"
    assert compiled.result["backend"] == "cpu"
    assert "NOT a Neuron compile" in compiled.stderr

    client = boto3.client("s3")
    prefix = f"compiled/{key}/"
    manifest_bytes = client.get_object(Bucket=BUCKET, Key=prefix + "manifest.json")["Body"].read()
    assert hashlib.sha256(manifest_bytes).hexdigest() == compiled.result["sha256"]
    manifest = Manifest.from_json_bytes(manifest_bytes)
    # The files lie in the folder of the writer whose manifest was stored, and nothing else is there.
    folder = manifest.files_prefix
    assert folder.startswith("w-")
    names = sorted(k[len(prefix) :] for k in _objects(prefix))
    assert names == [
        "manifest.json",
        *(
            f"{folder}/{name}"
            for name in (
                "model-b1-s128.pt",
                "model-b1-s32.pt",
                "model-b4-s128.pt",
                "model-b4-s32.pt",
                "tokenizer.json",
            )
        ),
    ]
    assert manifest.backend == "cpu"
    assert manifest.cache_key == key
    # The compiler, neuronserve's compile code (package and compile code versions) and, for this
    # Hugging Face source, transformers: a change to any of them is a new cache key.
    code = f"neuronserve=={neuronserve.__version__}/compile-{ncompile.COMPILE_CODE_VERSION}"
    transformers = importlib.metadata.version("transformers")
    assert manifest.compiler == f"torch.jit=={torch.__version__},{code},transformers=={transformers}"
    assert [(b.batch, b.sequence) for b in manifest.buckets] == [(1, 32), (1, 128), (4, 32), (4, 128)]
    assert [(s.name, s.dtype, s.max_value) for s in manifest.inputs] == [
        ("input_ids", "int64", 30521),
        ("attention_mask", "int64", 1),
    ]
    assert manifest.outputs[0].shape == [-1, 384]
    for entry in manifest.files:
        body = client.get_object(Bucket=BUCKET, Key=f"{prefix}{folder}/{entry.path}")["Body"].read()
        assert hashlib.sha256(body).hexdigest() == entry.sha256
        assert len(body) == entry.size


def test_compiling_again_hits_the_cache_and_traces_nothing(
    compiled: Compiled, s3_env: S3Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _objects("compiled/")

    def no_tracing(*args: object, **kwargs: object) -> None:
        raise AssertionError("traced although the artifact is cached")

    monkeypatch.setattr(torch.jit, "trace", no_tracing)
    assert cli.main([*compile_argv(STORE), "--request-key", "0123abcd"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert result["cached"] is True
    assert result["uri"] == compiled.uri
    assert result["sha256"] == compiled.result["sha256"]
    assert "cache hit" in err and "nothing traced" in err
    after = _objects("compiled/")
    record_key = "compiled/requests/0123abcd.json"
    assert after.pop(record_key)
    assert after == before

    record = json.loads(boto3.client("s3").get_object(Bucket=BUCKET, Key=record_key)["Body"].read())
    assert record == {
        "artifact_uri": compiled.uri,
        "backend": "cpu",
        "cache_key": compiled.result["cacheKey"],
        "manifest_sha256": compiled.result["sha256"],
        "revision": compiled.result["cacheKey"][:10],
    }


def test_other_buckets_make_another_artifact_in_a_directory_store(tmp_path: Path, compiled: Compiled) -> None:
    argv = compile_argv(str(tmp_path / "store"))
    argv[argv.index("--batch-buckets") + 1] = "2"
    argv[argv.index("--sequence-buckets") + 1] = "16"
    assert cli.main([*argv, "--result-file", str(tmp_path / "r.json")]) == 0
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["cached"] is False
    assert result["cacheKey"] != compiled.result["cacheKey"]
    manifest, _, directory = fetch_artifact(result["uri"], tmp_path / "unused")
    assert directory == tmp_path / "store" / result["cacheKey"]
    assert [(b.batch, b.sequence) for b in manifest.buckets] == [(2, 16)]


class TinyEncoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(100, 8)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.unsqueeze(-1).float()
        pooled: torch.Tensor = (self.embed(input_ids) * mask).sum(1)
        return pooled


def _compiled_tiny(tmp_path: Path, batch_buckets: str, sequence_buckets: str) -> tuple[Manifest, Path, TinyEncoder]:
    """The tiny TorchScript encoder compiled by the CLI into a directory store with these buckets,
    fetched back: its manifest, its directory and the module it was saved from."""
    source, module = _tiny_source(tmp_path)
    result_file = tmp_path / "r.json"
    argv = ["compile", "--source", str(source), "--store", str(tmp_path / "store"), "--name", "tiny"]
    buckets = ["--batch-buckets", batch_buckets, "--sequence-buckets", sequence_buckets]
    assert cli.main([*argv, *buckets, "--result-file", str(result_file)]) == 0
    manifest, _, directory = fetch_artifact(json.loads(result_file.read_text())["uri"], tmp_path / "unused")
    return manifest, directory, module


def test_a_torchscript_source_compiles_and_runs_like_the_module(tmp_path: Path) -> None:
    manifest, directory, module = _compiled_tiny(tmp_path, batch_buckets="1,2", sequence_buckets="8")
    assert manifest.outputs[0].shape == [-1, 8]

    ids = np.array([[1, 2, 3], [4, 5, 0]], dtype=np.int64)
    mask = np.array([[1, 1, 1], [1, 1, 0]], dtype=np.int64)
    (rows,), bucket = ModelRunner(manifest, directory).run([[ids, mask]])
    with torch.no_grad():
        expected = module(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    assert (bucket.batch, bucket.sequence) == (2, 8)
    np.testing.assert_allclose(rows, expected, atol=1e-5)


def test_requests_of_different_lengths_share_the_bucket_of_the_longest(tmp_path: Path) -> None:
    # A batch of a 2-token and a 6-token request needs the 8-token bucket: each is padded to it and
    # gets the rows the module gives it alone.
    manifest, directory, module = _compiled_tiny(tmp_path, batch_buckets="2", sequence_buckets="4,8")
    short, long = np.array([[7, 8]], dtype=np.int64), np.array([[1, 2, 3, 4, 5, 6]], dtype=np.int64)
    (short_rows, long_rows), bucket = ModelRunner(manifest, directory).run(
        [[short, np.ones_like(short)], [long, np.ones_like(long)]]
    )
    assert (bucket.batch, bucket.sequence) == (2, 8)
    with torch.no_grad():
        for ids, rows in ((short, short_rows), (long, long_rows)):
            expected = module(torch.from_numpy(ids), torch.from_numpy(np.ones_like(ids))).numpy()
            np.testing.assert_allclose(rows, expected, atol=1e-5)


@pytest.mark.parametrize(
    ("repeats", "min_seconds", "max_repeats", "timed"),
    [
        (3, 0.0, 20, 3),  # enough time spent in the repeats alone
        (3, 0.04, 20, 4),  # 0.010 + 0.011 + 0.012 < 0.04 <= that + 0.010
        (3, 1.0, 6, 6),  # the time never reached: max_repeats runs, not one more
        (0, 1.0, 6, 0),  # no timing: the first run's time is the cost
    ],
)
def test_warm_times_each_bucket_until_min_seconds_or_max_repeats_and_keeps_the_fastest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, repeats: int, min_seconds: float, max_repeats: int, timed: int
) -> None:
    manifest, directory, _ = _compiled_tiny(tmp_path, batch_buckets="1,2", sequence_buckets="8")
    runner = ModelRunner(manifest, directory)
    runs: dict[tuple[int, int], int] = {}

    def timed_run(bucket: Bucket, arrays: Sequence[npt.NDArray[np.int64]], execute: Callable[..., Any]) -> float:
        if execute != runner.execute:
            return 0.5  # a copy's first run
        key = (bucket.batch, bucket.sequence)
        runs[key] = runs.get(key, 0) + 1
        return 0.010 + 0.001 * ((runs[key] - 1) % 3)

    monkeypatch.setattr(ModelRunner, "_timed_warm_run", staticmethod(timed_run))
    first = runner.warm(repeats=repeats, min_seconds=min_seconds, max_repeats=max_repeats)
    assert set(first.values()) == {0.5}  # one copy on CPU
    assert {(b.batch, b.sequence): runs.get((b.batch, b.sequence), 0) for b in manifest.buckets} == {
        (1, 8): timed,
        (2, 8): timed,
    }
    assert set(runner.bucket_seconds.values()) == {0.010 if timed else 0.5}


def test_a_missing_source_fails_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["compile", "--source", str(tmp_path / "nope"), "--store", str(tmp_path / "store")])
    err = capsys.readouterr().err
    assert code == 1
    assert "does not exist" in err and "Traceback" not in err


_TORCHSCRIPT_ARGS = ["--format", "torchscript", "--batch-buckets", "1", "--sequence-buckets", "4"]


def test_a_torchscript_directory_without_a_torchscript_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--format torchscript`` (what the operator's Job passes for spec.model.format: torchscript) with
    a directory source takes its one .pt/.pth/.ts file; without one it ended in a bare StopIteration."""
    source = tmp_path / "src"
    source.mkdir()
    save_tiny(source / "model.torchscript")
    code = cli.main(["compile", "--source", str(source), "--store", str(tmp_path / "store"), *_TORCHSCRIPT_ARGS])
    err = capsys.readouterr().err
    assert code == 1 and "compile failed" in err and "Traceback" not in err
    assert "no TorchScript file" in err


def test_a_torchscript_directory_with_two_torchscript_files_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two candidates: it compiled whichever the directory listed first, without a word of which."""
    source = tmp_path / "src"
    source.mkdir()
    save_tiny(source / "model.pt")
    save_slow(source / "model-old.pt")
    store = tmp_path / "store"
    code = cli.main(["compile", "--source", str(source), "--store", str(store), *_TORCHSCRIPT_ARGS])
    err = capsys.readouterr().err
    assert code == 1 and "compile failed" in err
    assert "model-old.pt" in err and "model.pt" in err
    assert not store.exists() or not any(store.rglob("manifest.json"))


def test_bad_bucket_lists_are_refused_by_the_parser(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["compile", "--source", "/x", "--store", str(tmp_path), "--batch-buckets", "1,zero"])
    assert exc.value.code == 2
    assert "comma-separated integers" in capsys.readouterr().err


def test_fetched_artifact_matches_the_manifest(fetched: Fetched) -> None:
    assert sorted(p.name for p in fetched.directory.iterdir()) == sorted(f.path for f in fetched.manifest.files)


def _tiny_source(tmp_path: Path) -> tuple[Path, TinyEncoder]:
    torch.manual_seed(0)
    module = TinyEncoder().eval()
    source = tmp_path / "tiny.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(module), str(source))
    return source, module


def test_a_source_in_s3_is_downloaded_and_compiled(tmp_path: Path, s3_env: S3Server) -> None:
    source, _ = _tiny_source(tmp_path)
    boto3.client("s3").upload_file(str(source), BUCKET, "sources/tiny/tiny.pt")
    result_file = tmp_path / "r.json"
    argv = ["compile", "--source", f"s3://{BUCKET}/sources/tiny", "--store", str(tmp_path / "store")]
    assert cli.main([*argv, "--batch-buckets", "1", "--sequence-buckets", "4", "--result-file", str(result_file)]) == 0
    manifest, _, _ = fetch_artifact(json.loads(result_file.read_text())["uri"], tmp_path / "unused")
    assert manifest.source == f"s3://{BUCKET}/sources/tiny"
    assert [(b.batch, b.sequence) for b in manifest.buckets] == [(1, 4)]


def test_with_torch_neuronx_importable_the_neuron_compiler_gets_the_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # torch-neuronx is not installable here; this stand-in records what neuronserve hands it.
    calls: list[list[str]] = []

    def trace(module: torch.nn.Module, example: tuple[torch.Tensor, ...], compiler_args: list[str]) -> Any:
        calls.append(compiler_args)
        return torch.jit.trace(module, example)  # type: ignore[no-untyped-call]  # unannotated in torch

    monkeypatch.setitem(sys.modules, "torch_neuronx", types.SimpleNamespace(trace=trace))
    source, _ = _tiny_source(tmp_path)
    result_file = tmp_path / "r.json"
    argv = ["compile", "--source", str(source), "--store", str(tmp_path / "store"), "--batch-buckets", "1,2"]
    argv += [
        "--sequence-buckets",
        "4",
        "--auto-cast",
        "all",
        "-O",
        "3",
        "--extra-arg",
        "--enable-fast-loading-neuron-binaries",
    ]
    assert cli.main([*argv, "--result-file", str(result_file)]) == 0
    err = capsys.readouterr().err
    assert "compiling for Neuron" in err and "NOT a Neuron compile" not in err
    flags = ["--target", "inf2", "--auto-cast", "all", "--auto-cast-type", "bf16", "-O3"]
    assert calls == [[*flags, "--enable-fast-loading-neuron-binaries"]] * 2
    manifest, _, directory = fetch_artifact(json.loads(result_file.read_text())["uri"], tmp_path / "unused")
    assert manifest.backend == "neuron"
    assert manifest.compiler.startswith("neuronx-cc==")

    # Serving it needs the real Neuron runtime: without it the server refuses with the reason.
    monkeypatch.delitem(sys.modules, "torch_neuronx")
    with pytest.raises(LoadError, match="compiled for Neuron"):
        ModelRunner(manifest, directory)


class PerTokenScores(torch.nn.Module):
    """One score per token: the output's width is the sequence length, so it follows the bucket."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return (input_ids * attention_mask).float()


class HiddenStates(torch.nn.Module):
    """A [batch, sequence, hidden] output: not one vector per row."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(100, 4)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden: torch.Tensor = self.embed(input_ids) * attention_mask.unsqueeze(-1).float()
        return hidden


@pytest.mark.parametrize(
    ("module", "sequences", "message"),
    [
        (PerTokenScores(), "4,8", "output width changes with the bucket: 4 before, 8 at (batch 1, sequence 8)"),
        (HiddenStates(), "4", "output has shape [1, 4, 4]"),
    ],
    ids=["width-follows-the-sequence", "three-dimensional"],
)
def test_an_output_that_is_not_one_fixed_width_vector_per_row_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], module: torch.nn.Module, sequences: str, message: str
) -> None:
    # Served, a request's rows would change with the requests batched beside it, and the metadata
    # would state a shape the answers do not have.
    source = tmp_path / "model.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(module.eval()), str(source))
    argv = ["compile", "--source", str(source), "--store", str(tmp_path / "store"), "--name", "bad"]
    code = cli.main([*argv, "--batch-buckets", "1", "--sequence-buckets", sequences])
    err = capsys.readouterr().err
    assert code == 1
    assert message in err and "Traceback" not in err
    assert not list((tmp_path / "store").glob("*/manifest.json"))
