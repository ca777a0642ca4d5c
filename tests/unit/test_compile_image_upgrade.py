"""The upgrade that put the compile image in the request key (a reviewer's finding: a new
operator.modelServerImage never compiled again) compiles nothing by itself: a deployment's artifact
recorded under the key of the operator before (no image in it) is taken over while the status says
nothing else of its image, and a later image change still compiles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.kube.builders import BuilderConfig
from neuronfleet.planning.compile import (
    CompileRequest,
    StoredArtifact,
    compile_request,
    decide_compile,
    legacy_request,
)
from neuronfleet.planning.observation import StatusMemory
from neuronfleet.reconcile import OperatorSettings, Reconciler
from neuronserve.manifest import RequestRecord, manifest_sha256, revision

CPU_BUILD = "registry.example/neuronserve:0.1.0"
NEURON_BUILD = "registry.example/neuronserve:0.1.0-neuron"


class Untouchable:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the compile observation read the cluster ({name})")


def _deployment(source: Path, **compile_spec: Any) -> InferenceDeployment:
    return InferenceDeployment.model_validate(
        {
            "apiVersion": "serving.neuronfleet.dev/v1alpha1",
            "kind": "InferenceDeployment",
            "metadata": {"name": "emb", "namespace": "ns", "uid": "u1"},
            "spec": {"model": {"source": str(source), "format": "torchscript"}, "compile": compile_spec},
        }
    )


def _record(request: CompileRequest, store: Path) -> StoredArtifact:
    """What a compile Job of the operator before left: the artifact's manifest, and the record."""
    cache_key = "e" * 64
    manifest = b'{"stand-in": "manifest"}'
    (store / cache_key).mkdir(parents=True)
    (store / cache_key / "manifest.json").write_bytes(manifest)
    record = RequestRecord(
        cache_key=cache_key,
        artifact_uri=str(store / cache_key),
        manifest_sha256=manifest_sha256(manifest),
        backend="cpu",
        revision=revision(cache_key),
    )
    path = Path(request.record_uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(record.to_json_bytes())
    return StoredArtifact(cache_key, str(store / cache_key), manifest_sha256(manifest), "cpu")


def _status(artifact: StoredArtifact, image: str | None = None) -> StatusMemory:
    section = {
        "uri": artifact.uri,
        "sha256": artifact.manifest_sha256,
        "revision": artifact.revision,
        "cacheKey": artifact.cache_key,
        "backend": artifact.backend,
    }
    if image is not None:
        section["compileImage"] = image
    return StatusMemory.from_status({"artifact": section})


async def _observe(dep: InferenceDeployment, store: Path, image: str, durable: StatusMemory) -> Any:
    settings = OperatorSettings(artifact_store=str(store), builder=BuilderConfig(model_server_image=image))
    reconciler = Reconciler(Untouchable(), ArtifactStore(), settings)  # type: ignore[arg-type]
    _, observed, error = await reconciler._observe_compile(dep, durable)
    assert error is None and observed is not None
    return observed


async def test_an_upgrade_keeping_the_image_takes_over_the_served_artifact_and_compiles_nothing(
    tmp_path: Path,
) -> None:
    source, store = tmp_path / "model.pt", tmp_path / "store"
    source.write_bytes(b"weights")
    dep = _deployment(source)
    fingerprint = ArtifactStore().fingerprint(str(source))
    legacy = legacy_request(dep.spec, str(store), fingerprint, CPU_BUILD)
    assert legacy is not None and legacy.key != compile_request(dep.spec, str(store), fingerprint, CPU_BUILD).key
    served = _record(legacy, store)

    # The first round of the new operator: the status (written before compileImage) serves it.
    observed = await _observe(dep, store, CPU_BUILD, _status(served))
    assert observed.stored == served
    decision = decide_compile(observed, served)
    assert (decision.create_job, decision.reason, decision.serve) == (False, "ArtifactReady", served)
    # Later rounds: the status now says which image compiled it (the one kept).
    assert (await _observe(dep, store, CPU_BUILD, _status(served, CPU_BUILD))).stored == served

    # Then the image changes: compiled again with the new one, the old artifact served meanwhile.
    observed = await _observe(dep, store, NEURON_BUILD, _status(served, CPU_BUILD))
    assert observed.stored is None
    decision = decide_compile(observed, served)
    assert decision.create_job and observed.request.image == NEURON_BUILD and decision.serve == served


async def test_a_legacy_record_of_another_artifact_than_the_served_one_is_not_taken(tmp_path: Path) -> None:
    source, store = tmp_path / "model.pt", tmp_path / "store"
    source.write_bytes(b"weights")
    dep = _deployment(source)
    legacy = legacy_request(dep.spec, str(store), ArtifactStore().fingerprint(str(source)), CPU_BUILD)
    assert legacy is not None
    _record(legacy, store)
    other = StoredArtifact("f" * 64, str(store / ("f" * 64)), "0" * 64, "cpu")
    assert (await _observe(dep, store, CPU_BUILD, _status(other))).stored is None
    # Nor without a served artifact (a new deployment), nor for a spec naming its image (its key is kept).
    assert (await _observe(dep, store, CPU_BUILD, StatusMemory())).stored is None
    assert legacy_request(_deployment(source, image=CPU_BUILD).spec, str(store), "fp", CPU_BUILD) is None
