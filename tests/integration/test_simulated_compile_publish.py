"""The sandbox's simulated compile (``sandbox.simulated_compile``) on the compile Job's own command line.

What it publishes must be what the operator's store lookup accepts (the request record, and a manifest
at the recorded URI with the recorded sha256), what ``neuronserve serve`` on the emulated device loads
(a valid manifest; the tokenizer verified), and say that nothing was compiled. A source with nothing
in it fails the Job, as a compile would. Directory stores here; the S3 path runs in
``tests/e2e/test_sandbox_simulated_compile.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from operator_harness import example

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.kube.jobs import build_compile_job, compile_args
from neuronfleet.planning.compile import DanglingRecord, StoredArtifact, compile_request
from neuronfleet.sandbox.simulated_compile import SIMULATED_COMPILER, SimulatedCompileRunner, publish_simulated_compile
from neuronserve.manifest import Manifest
from neuronserve.store import fetch_manifest


def _deployment(source: Path, store: Path) -> InferenceDeployment:
    doc = example("bert-embeddings")
    doc["spec"]["model"]["source"] = str(source)
    doc["spec"]["compile"]["artifactStore"] = str(store)
    doc["metadata"]["uid"] = "d1"
    return InferenceDeployment.model_validate(doc)


def test_a_simulated_compile_publishes_what_the_operator_and_the_emulated_server_accept(tmp_path: Path) -> None:
    source, store = tmp_path / "model", tmp_path / "store"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"hidden_size": 384, "vocab_size": 30522}))
    (source / "tokenizer.json").write_text('{"version": "1.0"}')
    (source / "model.safetensors").write_bytes(b"weights")
    dep = _deployment(source, store)
    reader = ArtifactStore()
    request = compile_request(dep.spec, str(store), reader.fingerprint(dep.spec.model.source))
    assert reader.lookup(request) is None

    result = publish_simulated_compile(compile_args(dep, request), None)
    assert result.exit_code == 0, result
    assert any("nothing is compiled" in line for line in result.logs)
    found = reader.lookup(request)
    assert isinstance(found, StoredArtifact), found  # recorded, and stored as recorded
    assert found.backend == "cpu"
    manifest, directory = fetch_manifest(found.uri, tmp_path / "scratch", ("tokenizer.json",), found.manifest_sha256)
    assert manifest.compiler == SIMULATED_COMPILER and "simulated" in manifest.output_description
    assert manifest.name == dep.served_model_name
    assert sorted((b.batch, b.sequence) for b in manifest.buckets) == [(b, s) for b in (1, 4, 8, 16) for s in (64, 128)]
    assert manifest.outputs[0].shape == [-1, 384]
    assert [(t.name, t.max_value) for t in manifest.inputs] == [("input_ids", 30521), ("attention_mask", 1)]
    assert [t.shape for t in manifest.inputs] == [[-1, -1], [-1, -1]]  # batch and sequence as a request sends them
    assert (directory / "tokenizer.json").read_text() == '{"version": "1.0"}'
    # No model: the model files the manifest lists are stored empty (the artifact is whole as listed).
    stored = sorted(p.name for p in Path(found.uri).iterdir())
    assert stored == sorted(["manifest.json", "tokenizer.json", *(b.file_name for b in manifest.buckets)])
    assert all((Path(found.uri) / b.file_name).stat().st_size == 0 for b in manifest.buckets)

    # Asked again (a retry): the same artifact, found stored.
    again = publish_simulated_compile(compile_args(dep, request), None)
    assert again.exit_code == 0 and json.loads(again.message)["uri"] == found.uri
    assert reader.lookup(request) == found
    assert Manifest.from_json_bytes((Path(found.uri) / "manifest.json").read_bytes()) == manifest


@pytest.mark.parametrize("damage", ["tokenizer-deleted", "bucket-file-resized"])
def test_a_simulated_compile_restores_a_stand_in_whose_files_were_damaged(tmp_path: Path, damage: str) -> None:
    # Only a missing bucket file was written again: with the tokenizer deleted (or a bucket file
    # rewritten at another size) every recompile said "already stored" and exited 0, and the
    # operator's lookup stayed a dangling record for good.
    source, store = tmp_path / "model", tmp_path / "store"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"hidden_size": 384, "vocab_size": 30522}))
    (source / "tokenizer.json").write_text('{"version": "1.0"}')
    dep = _deployment(source, store)
    reader = ArtifactStore(verified_ttl_seconds=0)
    request = compile_request(dep.spec, str(store), reader.fingerprint(dep.spec.model.source))
    assert publish_simulated_compile(compile_args(dep, request), None).exit_code == 0
    found = reader.lookup(request)
    assert isinstance(found, StoredArtifact)
    if damage == "tokenizer-deleted":
        (Path(found.uri) / "tokenizer.json").unlink()
    else:
        (Path(found.uri) / "model-b1-s64.pt").write_bytes(b"not empty")
    assert isinstance(reader.lookup(request), DanglingRecord)
    again = publish_simulated_compile(compile_args(dep, request), None)
    assert again.exit_code == 0, again
    assert reader.lookup(request) == found  # the same stand-in, whole again
    assert any("written again" in line for line in again.logs), again.logs


def test_a_simulated_compile_of_an_empty_source_fails_as_a_compile_would(tmp_path: Path) -> None:
    source, store = tmp_path / "model", tmp_path / "store"
    source.mkdir()
    dep = _deployment(source, store)
    request = compile_request(dep.spec, str(store), None)
    result = publish_simulated_compile(compile_args(dep, request), None)
    assert result.exit_code == 1
    assert result.message == f"simulated compile failed: cannot read the model source {source}: nothing there"
    assert not store.exists()


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ("[1, 2]", "config.json is not a JSON object: list"),
        ('{"hidden_size": null}', "config.json's hidden_size is not a whole number: None"),
        ('{"vocab_size": [1]}', "config.json's vocab_size is not a whole number: [1]"),
        ('{"hidden_size": true}', "config.json's hidden_size is not a whole number: True"),
    ],
)
def test_a_malformed_config_fails_the_simulated_compile_with_its_reason(tmp_path: Path, config: str, why: str) -> None:
    # A list or a null escaped as AttributeError / TypeError: the kubelet's catch-all exited 128
    # and the Job's log lines were lost.
    source, store = tmp_path / "model", tmp_path / "store"
    source.mkdir()
    (source / "config.json").write_text(config)
    dep = _deployment(source, store)
    result = publish_simulated_compile(compile_args(dep, compile_request(dep.spec, str(store), None)), None)
    assert (result.exit_code, result.message) == (1, f"simulated compile failed: {why}")
    assert result.logs[-1] == f"simulated compile failed: {why}"


def test_compiler_flags_in_extra_args_reach_both_compile_parsers(tmp_path: Path) -> None:
    """spec.compile.extraArgs are neuronx-cc flags, starting with '--' (the shipped llama2 example's
    --enable-fast-loading-neuron-binaries): the Job's ``--extra-arg <flag>`` failed the sandbox's
    simulated compile (its parser took the flag for an option of its own), so that example never
    compiled there. Both parsers, the simulated one and neuronserve's own, take what the Job passes."""
    from neuronserve.cli import _join_extra_args, build_parser

    source, store = tmp_path / "model", tmp_path / "store"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"hidden_size": 384, "vocab_size": 30522}))
    (source / "model.safetensors").write_bytes(b"weights")
    dep = _deployment(source, store)
    flags = ["--enable-fast-loading-neuron-binaries", "--model-type=transformer", "-O1"]
    dep.spec.compile.extra_args = flags
    request = compile_request(dep.spec, str(store), ArtifactStore().fingerprint(str(source)))
    container = build_compile_job(dep, request)["spec"]["template"]["spec"]["containers"][0]
    argv = [*container["command"], *container["args"]]
    result = publish_simulated_compile(argv, None)
    assert result.exit_code == 0, result.message
    parsed = build_parser().parse_args(_join_extra_args(argv[1:]))
    assert parsed.extra_arg == flags


async def test_the_runner_takes_compile_pods_only(tmp_path: Path) -> None:
    runner = SimulatedCompileRunner(None, run_s=0.0)
    other = {"metadata": {"uid": "u"}, "spec": {"containers": [{"command": ["sh", "-c", "exit 0"]}]}}
    assert await runner(other) is None  # left to the kubelet's simulation
    source, store = tmp_path / "model", tmp_path / "store"
    source.mkdir()
    (source / "model.pt").write_bytes(b"torchscript")
    dep = _deployment(source, store)
    request = compile_request(dep.spec, str(store), None)
    job = build_compile_job(dep, request)
    pod = {"metadata": {"uid": "c"}, "spec": job["spec"]["template"]["spec"]}
    result = await runner(pod)
    assert result is not None and result.exit_code == 0, result
    assert ArtifactStore().lookup(request) is not None
