"""``--compile-jobs simulated``: the example served from a stand-in artifact that says it is one.

Simulated compile Jobs used to exit 0 and write nothing: every deployment of such a sandbox ended
``Compiled=False ArtifactMissing`` and was never served (a reviewer's repro with ``sandbox up
--compile-jobs simulated``). Here the sandbox of ``sandbox up`` in-process (its S3 stocked with the
example's model, simulated compile Jobs, serving pods as real ``neuronserve serve`` processes on the
emulated NeuronCore device) and the real operator reading that S3: ``examples/bert-embeddings.yaml``
as it is gets Compiled=True and Ready=True, the router answers, and what the Job stored says it was
simulated. Real time (real server processes), a one-second simulated compile.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from operator_harness import NEURON_SCHEDULER, REPO, OperatorHarness, example, inf2_node_groups, ready

from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.planning.compile import CompileRequest, DanglingRecord, StoredArtifact
from neuronfleet.sandbox import ColdStartProfile, SandboxCluster
from neuronfleet.sandbox.s3 import split_s3
from neuronfleet.sandbox.serving import ServingOptions
from neuronfleet.sandbox.simulated_compile import SIMULATED_COMPILER

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(300)]

NS, NAME = "search", "minilm-embeddings"
QUICK = ColdStartProfile(
    image_pull_s=0.3, container_start_s=0.1, readiness_s=0.5, shutdown_s=0.2, run_s=1.0, jitter=0.0
)
TEXT_REQUEST = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a sandbox request"]}]}


async def test_the_example_is_served_from_a_simulated_compile_that_says_so(tmp_path: Path) -> None:
    async with SandboxCluster(
        node_groups=inf2_node_groups(),
        crd_dir=REPO / "crds",
        cold_start=QUICK,
        provisioning_delay_s=1.0,
        neuron_scheduler_name=NEURON_SCHEDULER,
        s3=True,
        compile_jobs="simulated",
        serving=ServingOptions(probe_period_s=0.5),
        workdir=tmp_path / "sandbox",
    ) as cluster:
        assert cluster.s3 is not None
        stocked = await cluster.host_examples(REPO / "examples")
        assert any(s.example == NAME and s.stocked for s in stocked), stocked
        s3 = cluster.s3.client()
        # Each sandbox's S3 starts empty, whatever this worker's earlier sandboxes compiled: a compile
        # found stored would be served with no compile Job and no CompileSucceeded.
        for bucket in s3.list_buckets()["Buckets"]:
            assert not s3.list_objects_v2(Bucket=bucket["Name"], Prefix="compiled/").get("Contents"), bucket
        harness = OperatorHarness(cluster, tmp_path, interval=1.0, store=ArtifactStore(s3_client=s3))
        harness.settings = replace(harness.settings, artifact_store="s3://neuronfleet-artifacts/compiled")
        try:
            await harness.start()
            # The example as it is (its S3 source and store), one replica to spare the machine.
            manifest = example("bert-embeddings", scaling={"mode": "Manual", "replicas": 1}, warmPool={"mode": "Off"})
            await harness.apply(manifest)

            def compiled() -> dict[str, str]:
                condition = harness.condition(NS, NAME, "Compiled")
                assert condition.get("reason") != "ArtifactMissing", condition
                return condition if condition.get("status") == "True" else {}

            await harness.wait(compiled, timeout=120, what="Compiled=True")
            await harness.wait(
                lambda: harness.condition(NS, NAME, "Ready").get("status") == "True", timeout=120, what="Ready=True"
            )
            artifact = harness.deployment(NS, NAME)["status"]["artifact"]
            # The compile is said once, with the revision it stored. The Event is posted once the
            # status write it tells of has landed, so it can reach the API server after the status.
            events = await harness.wait(
                lambda: harness.events(NS, NAME, "CompileSucceeded"), timeout=30, what="the CompileSucceeded Event"
            )
            said = [event.get("message") or event.get("note") or "" for event in events]
            assert len(said) == 1 and f"revision {artifact['revision']}" in said[0], said
            # What the Job stored says that nothing was compiled, and never that Neuron compiled it.
            bucket, prefix = split_s3(artifact["uri"])
            stored = json.loads(s3.get_object(Bucket=bucket, Key=f"{prefix}/manifest.json")["Body"].read())
            assert artifact["backend"] == "cpu" and stored["backend"] == "cpu"
            assert stored["compiler"] == SIMULATED_COMPILER
            assert stored["source"] == manifest["spec"]["model"]["source"]
            keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]}
            models = {f"{prefix}/model-b{b['batch']}-s{b['sequence']}.pt" for b in stored["buckets"]}
            assert keys == {f"{prefix}/manifest.json", f"{prefix}/tokenizer.json", *models}
            # No model: the files the manifest lists are stored empty, as it lists them.
            assert {s3.head_object(Bucket=bucket, Key=k)["ContentLength"] for k in models} == {0}

            assert stored["outputs"][0]["shape"] == [-1, 384]  # all-MiniLM-L6-v2's hidden size
            [job] = cluster.list("jobs", NS, group="batch")
            [compile_pod] = [
                p for p in cluster.list("pods", NS) if p["metadata"]["name"].startswith(job["metadata"]["name"])
            ]
            assert cluster.kubelet is not None
            log = "\n".join(cluster.kubelet.logs.get(compile_pod["metadata"]["uid"], []))
            assert "simulated compile Job (--compile-jobs simulated): nothing is compiled" in log, log

            [pod] = [p for p in harness.pods(NS, NAME, "active") if ready(p)]
            assert pod["metadata"]["labels"]["serving.neuronfleet.dev/revision"] == artifact["revision"]
            assert cluster.routers is not None
            url = await cluster.routers.wait_url(NS, NAME)
            infer = f"{url}/v2/models/all-minilm-l6-v2/infer"
            async with aiohttp.ClientSession() as session, session.post(infer, json=TEXT_REQUEST) as response:
                body = await response.json()
            assert response.status == 200, body
            assert body["parameters"]["emulated"] is True  # placeholder outputs, and said so
        finally:
            await harness.close()


async def test_a_stand_in_that_lost_its_tokenizer_is_published_again_and_served(tmp_path: Path) -> None:
    # The simulated compile writes a stand-in again with the same manifest bytes (no writer
    # folder), so the republished record names the same sha256 as the dangling one: a dangling look
    # remembered from before the Job (the operator keeps one for a minute in S3) must not outlive
    # the Job's success, or the deployment ends ArtifactMissing, which nothing retries.
    async with SandboxCluster(
        node_groups=inf2_node_groups(),
        crd_dir=REPO / "crds",
        cold_start=QUICK,
        provisioning_delay_s=1.0,
        neuron_scheduler_name=NEURON_SCHEDULER,
        s3=True,
        compile_jobs="simulated",
        serving=ServingOptions(probe_period_s=0.5),
        workdir=tmp_path / "sandbox",
    ) as cluster:
        assert cluster.s3 is not None
        await cluster.host_examples(REPO / "examples")
        s3 = cluster.s3.client()
        # A served artifact checked again every second (real time), not every 10 minutes.
        store = ArtifactStore(s3_client=s3, verified_ttl_seconds=1.0)
        harness = OperatorHarness(cluster, tmp_path, interval=1.0, store=store)
        harness.settings = replace(harness.settings, artifact_store="s3://neuronfleet-artifacts/compiled")
        try:
            await harness.start()
            manifest = example("bert-embeddings", scaling={"mode": "Manual", "replicas": 1}, warmPool={"mode": "Off"})
            await harness.apply(manifest)

            def compiled() -> bool:
                condition = harness.condition(NS, NAME, "Compiled")
                assert condition.get("reason") != "ArtifactMissing", condition
                return condition.get("status") == "True"

            await harness.wait(compiled, timeout=120, what="Compiled=True")
            artifact = harness.deployment(NS, NAME)["status"]["artifact"]
            bucket, prefix = split_s3(artifact["uri"])
            s3.delete_object(Bucket=bucket, Key=f"{prefix}/tokenizer.json")  # a person, a lifecycle rule
            await harness.wait(
                lambda: harness.condition(NS, NAME, "Compiled").get("reason") == "ArtifactGone",
                timeout=60,
                what="ArtifactGone",
            )
            await harness.wait(compiled, timeout=120, what="Compiled=True again")
            assert s3.head_object(Bucket=bucket, Key=f"{prefix}/tokenizer.json")["ContentLength"] > 0
            assert harness.deployment(NS, NAME)["status"]["artifact"]["sha256"] == artifact["sha256"]
        finally:
            await harness.close()


def test_sandbox_up_refuses_simulated_compiles_for_cpu_serving(tmp_path: Path) -> None:
    # A CPU server loads the model files a simulated compile does not write: every pod would crash-loop.
    up = [str(Path(sys.executable).parent / "neuronfleet"), "sandbox", "up", "--kubeconfig", str(tmp_path / "kc")]
    result = subprocess.run(
        [*up, "--compile-jobs", "simulated", "--serving", "cpu"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "--compile-jobs simulated writes no model files for --serving cpu to load" in result.stderr


class _FilesAlwaysMissing(ArtifactStore):
    """The operator's store, finding a file missing once ``broken`` (as if it read another store than
    the Jobs write: the documented ArtifactMissing case); counts the look-ups asked to read again."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.broken = False
        self.rechecks = 0

    def file_problems(self, uri: str, manifest_bytes: bytes) -> tuple[str, ...]:
        return ("tokenizer.json: missing",) if self.broken else super().file_problems(uri, manifest_bytes)

    def lookup(self, request: CompileRequest, recheck: bool = False) -> StoredArtifact | DanglingRecord | None:
        self.rechecks += recheck
        return super().lookup(request, recheck)


async def test_artifact_missing_reads_the_artifact_again_once_per_succeeded_job(tmp_path: Path) -> None:
    # Once the republishing Job has succeeded and the record still dangles (ArtifactMissing), every
    # reconcile read the artifact again past the store's dangling memory (a record GET, the manifest,
    # a HEAD per file), for as long as the succeeded Job is kept (a day). Now once per Job.
    async with SandboxCluster(
        node_groups=inf2_node_groups(),
        crd_dir=REPO / "crds",
        cold_start=QUICK,
        provisioning_delay_s=1.0,
        neuron_scheduler_name=NEURON_SCHEDULER,
        s3=True,
        compile_jobs="simulated",
        workdir=tmp_path / "sandbox",
    ) as cluster:
        assert cluster.s3 is not None
        await cluster.host_examples(REPO / "examples")
        store = _FilesAlwaysMissing(s3_client=cluster.s3.client(), verified_ttl_seconds=1.0)
        harness = OperatorHarness(cluster, tmp_path, interval=1.0, store=store)
        harness.settings = replace(harness.settings, artifact_store="s3://neuronfleet-artifacts/compiled")
        try:
            await harness.start()
            await harness.apply(
                example("bert-embeddings", scaling={"mode": "Manual", "replicas": 1}, warmPool={"mode": "Off"})
            )
            await harness.wait(
                lambda: harness.condition(NS, NAME, "Compiled").get("status") == "True", timeout=120, what="Compiled"
            )
            store.broken = True
            await harness.wait(
                lambda: harness.condition(NS, NAME, "Compiled").get("reason") == "ArtifactMissing",
                timeout=120,
                what="ArtifactMissing",
            )
            assert harness.context is not None
            rechecks, started = store.rechecks, harness.context.reconciles
            await harness.wait(
                lambda: harness.context is not None and harness.context.reconciles >= started + 10,
                timeout=120,
                what="ten more reconciles",
            )
            assert harness.condition(NS, NAME, "Compiled").get("reason") == "ArtifactMissing"
            assert store.rechecks - rechecks == 0, "the artifact was read again on reconciles after the first"
        finally:
            await harness.close()
