"""Pre-record a compile request's artifact in a local store, for tests, benchmarks and the demo.

What a compile Job's ``neuronserve compile --request-key`` leaves behind, without compiling: the
request record, and at the artifact's URI only a stand-in ``manifest.json`` (the words "not
compiled: <label>", not a manifest any server loads) whose sha256 the record names, so that the
operator's check that the recorded artifact is still stored passes. Only for runs that exercise
placement and the fleet, never to pretend a compile happened: callers say so.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from neuronfleet.api.v1alpha1 import DEFAULT_IMAGE, InferenceDeploymentSpec
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.planning.compile import compile_request
from neuronserve.manifest import MANIFEST_NAME, RequestRecord, manifest_sha256, revision


def record_uncompiled_artifact(
    spec: InferenceDeploymentSpec, store_dir: Path, label: str, image: str = DEFAULT_IMAGE
) -> str:
    """Write the request record for ``spec``'s compile request under ``store_dir``; returns the revision.

    ``label`` tells revisions apart (a new label, a new cache key); ``image`` is the operator's
    model-server image (part of the request key of a spec naming no compile image).
    """
    request = compile_request(spec, str(store_dir), ArtifactStore().fingerprint(spec.model.source), image)
    cache_key = hashlib.sha256(f"{request.key}/{label}".encode()).hexdigest()
    stand_in = f"not compiled: {label}".encode()
    artifact = store_dir / cache_key
    artifact.mkdir(parents=True, exist_ok=True)
    (artifact / MANIFEST_NAME).write_bytes(stand_in)
    record = RequestRecord(
        cache_key=cache_key,
        artifact_uri=str(artifact),
        manifest_sha256=manifest_sha256(stand_in),
        backend="cpu",
        revision=revision(cache_key),
    )
    path = Path(request.record_uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(record.to_json_bytes())
    return record.revision
