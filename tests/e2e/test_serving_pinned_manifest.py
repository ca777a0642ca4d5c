"""A serving pod loads the artifact its deployment's status records, or nothing (real processes).

The artifact's manifest is replaced at the recorded URI behind the operator's back (an overwritten
prefix). A pod started after that (here: the replacement of a deleted pod) runs ``neuronserve
serve`` pinned to the recorded sha256 (``$NEURONSERVE_MANIFEST_SHA256``), finds the other manifest
and refuses to start: it crash-loops instead of silently serving other bytes next to the pods that
loaded the recorded ones. The
operator reads the pod's exit (code 4, its termination message quoted in Degraded), looks the
record up again at once, reports the artifact as replaced (Compiled: ArtifactGone), holds new pods
and starts a republishing compile Job. Once the record names the manifest now stored (what that Job
writes when it finds the key stored), status.artifact.sha256 follows and the pods roll to it.

Servers run the emulated NeuronCore device over the artifact's manifest (no weights are read), in
real time: not under looptime.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from operator_harness import NEURON_SCHEDULER, REPO, OperatorHarness, example, inf2_node_groups, ready

from neuronfleet.api.v1alpha1 import GROUP, InferenceDeployment
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.kube.jobs import ANNOTATION_REPUBLISHES
from neuronfleet.planning.compile import compile_request
from neuronfleet.sandbox import ColdStartProfile, SandboxCluster
from neuronfleet.sandbox.serving import ServingOptions
from neuronserve.emulated import PROFILES, synthetic_manifest
from neuronserve.manifest import MANIFEST_NAME, RequestRecord, manifest_sha256, revision

pytestmark = [pytest.mark.looptime(False), pytest.mark.slow, pytest.mark.timeout(300)]

NAMESPACE, NAME = "serving", "minilm-embeddings"  # examples/bert-embeddings.yaml
QUICK = ColdStartProfile(image_pull_s=0.3, container_start_s=0.1, readiness_s=0.5, shutdown_s=0.2, jitter=0.0)
PIN = f"{GROUP}/manifest-sha256"


def record_servable_artifact(harness: OperatorHarness, manifest: dict[str, Any]) -> tuple[Path, str]:
    """What a compile Job leaves for the deployment's request: a manifest the emulated device serves
    (its contract only: no model file is read), its listed files (empty, as listed) and the request
    record naming its sha256."""
    spec = InferenceDeployment.model_validate(manifest).spec
    request = compile_request(spec, str(harness.store_dir), ArtifactStore().fingerprint(spec.model.source))
    synthetic = synthetic_manifest(PROFILES["bert-base"], NAME).model_copy(update={"created_at": "recorded"})
    data = synthetic.to_json_bytes()
    cache_key = manifest_sha256(f"{request.key}/pinned".encode())
    artifact = harness.store_dir / cache_key
    artifact.mkdir(parents=True)
    (artifact / MANIFEST_NAME).write_bytes(data)
    # The files it lists, empty as listed: the operator checks that each is stored (a record whose
    # files are gone is dangling); the emulated device reads none of them.
    for entry in synthetic.files:
        (artifact / synthetic.stored_path(entry.path)).write_bytes(b"")
    write_record(Path(request.record_uri), artifact, manifest_sha256(data))
    return artifact, manifest_sha256(data)


def write_record(path: Path, artifact: Path, sha256: str) -> None:
    record = RequestRecord(
        cache_key=artifact.name,
        artifact_uri=str(artifact),
        manifest_sha256=sha256,
        backend="neuron",
        revision=revision(artifact.name),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(record.to_json_bytes())


async def until(harness: OperatorHarness, predicate: Any, timeout: float, what: str) -> Any:
    """``harness.wait``, failing with the pods, their logs and the status (what a reader needs)."""
    try:
        return await harness.wait(predicate, timeout=timeout, what=what)
    except TimeoutError as exc:
        cluster = harness.cluster
        pods = [
            f"{p['metadata']['name']} role={p['metadata'].get('labels', {}).get(f'{GROUP}/role')} "
            f"phase={(p.get('status') or {}).get('phase')} ready={ready(p)} "
            f"containers={json.dumps((p.get('status') or {}).get('containerStatuses'))[:600]} "
            f"log={(cluster.kubelet.logs.get(p['metadata']['uid'], []) if cluster.kubelet else [])[-6:]}"
            for p in cluster.list("pods", NAMESPACE)
        ]
        status = (cluster.get("inferencedeployments", NAME, NAMESPACE, group=GROUP) or {}).get("status")
        raise AssertionError(f"{exc}\npods: {pods}\nstatus: {json.dumps(status)[:3000]}") from None


def last_exit(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    terminated: dict[str, Any] = (statuses[0].get("lastState") or {}).get("terminated") or {}
    return terminated


async def test_a_pod_refuses_a_manifest_replaced_at_the_recorded_uri_and_the_operator_republishes(
    tmp_path: Path,
) -> None:
    async with SandboxCluster(
        node_groups=inf2_node_groups(),
        crd_dir=REPO / "crds",
        cold_start=QUICK,
        provisioning_delay_s=1.0,
        neuron_scheduler_name=NEURON_SCHEDULER,
        serving=ServingOptions(probe_period_s=0.5),
        workdir=tmp_path / "sandbox",
    ) as cluster:
        harness = OperatorHarness(cluster, tmp_path, interval=1.0)
        try:
            await harness.start()
            fixed = {"mode": "Manual", "replicas": 1, "minReplicas": 1, "maxReplicas": 1}
            manifest = harness.localize(
                example("bert-embeddings", scaling=fixed, warmPool={"mode": "Off"}), namespace=NAMESPACE
            )
            artifact, recorded = record_servable_artifact(harness, manifest)
            await harness.apply(manifest)

            def active_ready() -> list[dict[str, Any]]:
                return [p for p in harness.pods(NAMESPACE, NAME, "active") if ready(p)]

            await until(harness, lambda: len(active_ready()) == 1, 90, "one ready active pod")
            first = active_ready()[0]
            assert first["metadata"]["annotations"][PIN] == recorded
            env = {v["name"]: v.get("value") for v in first["spec"]["containers"][0]["env"]}
            assert env["NEURONSERVE_MANIFEST_SHA256"] == recorded
            assert harness.deployment(NAMESPACE, NAME)["status"]["artifact"]["sha256"] == recorded

            # Someone overwrites the artifact's prefix: another (valid) manifest at the recorded URI.
            replacement = synthetic_manifest(PROFILES["bert-base"], NAME)
            replacement_bytes = replacement.model_copy(update={"created_at": "overwritten"}).to_json_bytes()
            (artifact / MANIFEST_NAME).write_bytes(replacement_bytes)
            replaced = manifest_sha256(replacement_bytes)
            # The serving pod is deleted (a node drained, say): its replacement must not load the new bytes.
            cluster.delete("pods", first["metadata"]["name"], NAMESPACE)

            def refusing() -> list[dict[str, Any]]:
                return [
                    p
                    for p in harness.pods(NAMESPACE, NAME)
                    if p["metadata"]["name"] != first["metadata"]["name"] and last_exit(p).get("exitCode") == 4
                ]

            await until(harness, lambda: refusing(), 60, "the replacement pod refusing the replaced manifest")
            pod = refusing()[0]
            assert not ready(pod)
            message = last_exit(pod)["message"]  # FallbackToLogsOnError: the server's own last line
            assert f"the manifest at {artifact} has sha256 {replaced}, not the pinned {recorded}" in message, message

            # The operator: the artifact is replaced (looked up again at once, not after the store's
            # ten minutes of trust), new pods are held, a compile Job republishes; Degraded quotes the pod.
            def compiled_gone() -> bool:
                return bool(harness.condition(NAMESPACE, NAME, "Compiled").get("reason") == "ArtifactGone")

            await until(harness, compiled_gone, 30, "Compiled: ArtifactGone")
            compiled = harness.condition(NAMESPACE, NAME, "Compiled")
            assert (
                f"holds another manifest (sha256 {replaced[:12]}, the record says {recorded[:12]})"
                in (compiled["message"])
            ), compiled
            await until(
                harness,
                lambda: "last exit (code 4)" in harness.condition(NAMESPACE, NAME, "Degraded").get("message", ""),
                30,
                "Degraded quoting the pod's refusal",
            )
            degraded = harness.condition(NAMESPACE, NAME, "Degraded")["message"]
            assert recorded in degraded and replaced in degraded and str(artifact) in degraded, degraded
            assert harness.condition(NAMESPACE, NAME, "Available")["status"] == "False"
            republishing = await until(
                harness,
                lambda: [
                    j
                    for j in cluster.list("jobs", NAMESPACE, group="batch")
                    if ANNOTATION_REPUBLISHES in (j["metadata"].get("annotations") or {})
                ],
                30,
                "a compile Job republishing the artifact",
            )
            assert len(republishing) == 1
            assert [pin(p) for p in serving_pods(harness)] == [recorded], "a pod made while held"

            # The compile Job finds the key stored and records the manifest there (its sha256).
            spec = InferenceDeployment.model_validate(manifest).spec
            request = compile_request(spec, str(harness.store_dir), ArtifactStore().fingerprint(spec.model.source))
            write_record(Path(request.record_uri), artifact, replaced)

            def served_as_recorded() -> bool:
                status = harness.deployment(NAMESPACE, NAME).get("status") or {}
                pods = active_ready()
                return (
                    (status.get("artifact") or {}).get("sha256") == replaced
                    and len(pods) == 1
                    and pin(pods[0]) == replaced
                    and harness.condition(NAMESPACE, NAME, "Available").get("status") == "True"
                )

            await until(harness, served_as_recorded, 90, "the pods rolled to the manifest now recorded")
            await until(
                harness,
                lambda: [pin(p) for p in serving_pods(harness)] == [replaced],
                60,
                "the refusing pod gone, replaced by one pinned to the recorded manifest",
            )
        finally:
            await harness.close()


def pin(pod: dict[str, Any]) -> str | None:
    value = (pod["metadata"].get("annotations") or {}).get(PIN)
    return str(value) if value is not None else None


def serving_pods(harness: OperatorHarness) -> list[dict[str, Any]]:
    """The deployment's serving pods (not its compile Job's pod, nor placeholders)."""
    roles = ("active", "warm", "draining")
    return [p for p in harness.pods(NAMESPACE, NAME) if p["metadata"]["labels"].get(f"{GROUP}/role") in roles]
