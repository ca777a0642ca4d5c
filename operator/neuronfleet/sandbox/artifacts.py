"""Pre-record a compile request's artifact in a local store, for tests, benchmarks and the demo.

What a compile Job's ``neuronserve compile --request-key`` leaves behind, without compiling: the
request record points at an artifact that does not exist (its manifest digest says so). Only for
runs that exercise placement and the fleet, never to pretend a compile happened: callers say so.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from neuronfleet.api.v1alpha1 import InferenceDeploymentSpec
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.planning.compile import compile_request
from neuronserve.manifest import RequestRecord, revision


def record_uncompiled_artifact(spec: InferenceDeploymentSpec, store_dir: Path, label: str) -> str:
    """Write the request record for ``spec``'s compile request under ``store_dir``; returns the revision.

    ``label`` tells revisions apart (a new label, a new cache key).
    """
    request = compile_request(spec, str(store_dir), ArtifactStore().fingerprint(spec.model.source))
    cache_key = hashlib.sha256(f"{request.key}/{label}".encode()).hexdigest()
    record = RequestRecord(
        cache_key=cache_key,
        artifact_uri=f"{store_dir}/{cache_key}",
        manifest_sha256=hashlib.sha256(f"not compiled: {label}".encode()).hexdigest(),
        backend="cpu",
        revision=revision(cache_key),
    )
    path = Path(request.record_uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(record.to_json_bytes())
    return record.revision
