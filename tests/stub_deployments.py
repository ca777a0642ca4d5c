"""The small InferenceDeployment the reconcile's unit tests run against stub API servers, and the
empty cluster (:class:`EmptyCluster`) those stubs start from.

A TorchScript source file under the test's directory (written once: its listing's fingerprint is in
the compile request key), namespace ``ns``, name ``emb``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neuronfleet.api.v1alpha1 import InferenceDeployment


def torchscript_deployment(
    tmp_path: Path, *, uid: str = "uid-1", compile_spec: dict[str, Any] | None = None
) -> InferenceDeployment:
    """The deployment ``emb`` in ``ns`` of a local TorchScript source; ``compile_spec``: its spec.compile."""
    source = tmp_path / "model.pt"
    if not source.exists():
        source.write_bytes(b"weights")
    spec: dict[str, Any] = {"model": {"source": str(source), "format": "torchscript"}}
    if compile_spec is not None:
        spec["compile"] = compile_spec
    return InferenceDeployment.model_validate(
        {
            "apiVersion": "serving.neuronfleet.dev/v1alpha1",
            "kind": "InferenceDeployment",
            "metadata": {"name": "emb", "namespace": "ns", "uid": uid, "generation": 1},
            "spec": spec,
        }
    )


class EmptyCluster:
    """The reads of a KubeApi over a cluster with nothing in it (no pods, nodes, Jobs or Events);
    a stub API server overrides the reads its test is about."""

    async def list_pods(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return []

    async def list_nodes(self, fresh: bool = False) -> list[dict[str, Any]]:
        return []

    async def list_jobs(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return []

    async def list_events(self, namespace: str, fields: Any) -> list[dict[str, Any]]:
        return []
