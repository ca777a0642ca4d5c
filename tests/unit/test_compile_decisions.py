"""The compile pipeline's decisions (pure): use, start, wait, report, or not compile at all."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from neuronfleet.api.v1alpha1 import InferenceDeployment, InferenceDeploymentSpec
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.kube.builders import BuilderConfig
from neuronfleet.kube.jobs import build_compile_job
from neuronfleet.planning.compile import (
    CompileFailure,
    CompileObservation,
    DanglingRecord,
    StoredArtifact,
    compile_request,
    decide_compile,
    decide_unservable,
    job_spec_key,
)
from neuronfleet.sandbox.artifacts import record_uncompiled_artifact

SPEC = InferenceDeploymentSpec.model_validate({"model": {"source": "s3://models-bucket/bert/"}})
OLD = StoredArtifact(cache_key="a" * 64, uri="s3://store/aaaa", manifest_sha256="b" * 64, backend="cpu")
NEW = StoredArtifact(cache_key="c" * 64, uri="s3://store/cccc", manifest_sha256="d" * 64, backend="cpu")


def _observe(stored: StoredArtifact | None, phase: str, message: str = "") -> CompileObservation:
    return CompileObservation(compile_request(SPEC, "s3://store"), stored, phase, message)  # type: ignore[arg-type]


def test_request_key_follows_what_changes_the_artifact_only() -> None:
    base = compile_request(SPEC, "s3://store", "fp1")
    assert compile_request(SPEC, "s3://store", "fp1").key == base.key
    assert compile_request(SPEC, "s3://store", "fp2").key != base.key  # the files changed
    flags = SPEC.model_copy(update={"compile": SPEC.compile.model_copy(update={"opt_level": 3})})
    assert compile_request(flags, "s3://store", "fp1").key != base.key
    resources = SPEC.model_copy(update={"compile": SPEC.compile.model_copy(update={"memory": "64Gi"})})
    assert compile_request(resources, "s3://store", "fp1").key == base.key  # Job size, same artifact
    # Another store has no record of it yet: its compile is another request (and another Job).
    assert compile_request(SPEC, "s3://other-store", "fp1").key != base.key
    assert compile_request(SPEC, "s3://store/", "fp1").key == base.key
    # Buckets are sets: their order and repeats ask for the same compile.
    shuffled = SPEC.model_copy(update={"model": SPEC.model.model_copy(update={"batch_buckets": [16, 8, 4, 1, 4]})})
    assert compile_request(shuffled, "s3://store", "fp1").key == base.key


def test_stored_artifact_is_used_without_a_job() -> None:
    decision = decide_compile(_observe(NEW, "absent"), OLD)
    assert (decision.create_job, decision.serve, decision.compiled_status) == (False, NEW, "True")


def test_absent_starts_a_job_and_keeps_serving_the_old_revision() -> None:
    decision = decide_compile(_observe(None, "absent"), OLD)
    assert (decision.create_job, decision.serve, decision.reason) == (True, OLD, "Compiling")
    running = decide_compile(_observe(None, "running"), OLD)
    assert (running.create_job, running.serve) == (False, OLD)


def test_failed_job_is_reported_never_retried_and_never_rolled_out() -> None:
    decision = decide_compile(_observe(None, "failed", "BackoffLimitExceeded: exit 1"), OLD)
    assert (decision.create_job, decision.serve, decision.compiled_status) == (False, OLD, "False")
    assert decision.reason == "CompileFailed" and "BackoffLimitExceeded" in decision.message


def test_succeeded_job_without_record_is_a_failure_not_a_loop() -> None:
    decision = decide_compile(_observe(None, "succeeded"), None)
    assert (decision.create_job, decision.reason, decision.compiled_status) == (False, "ArtifactMissing", "False")
    assert not decision.replace_job


def test_a_job_that_succeeded_without_its_record_is_replaced_when_a_retry_or_spec_change_asks() -> None:
    # It was kept (its outcome reused) for the day Kubernetes keeps a finished Job: the compile-retry
    # annotation and a changed spec.compile were ignored, and the message did not say how to retry.
    before = job_spec_key(SPEC)
    observed = replace(_observe(None, "succeeded"), job_spec=before, wanted_job_spec=before, job_name="bert-compile-x")
    same = decide_compile(observed, OLD)
    assert (same.replace_job, same.create_job, same.reason, same.serve) == (False, False, "ArtifactMissing", OLD)
    assert same.message == (
        f"compile Job bert-compile-x succeeded but {observed.request.record_uri} is missing: check that the Job "
        "and the operator use the same artifact store and that it keeps what the Job writes; to compile it "
        "again set the serving.neuronfleet.dev/compile-retry annotation to a new value (or change spec.compile)"
    )
    more = SPEC.model_copy(update={"compile": SPEC.compile.model_copy(update={"memory": "9Gi"})})
    for wanted in (job_spec_key(SPEC, "1"), job_spec_key(more)):
        decision = decide_compile(replace(observed, wanted_job_spec=wanted), OLD)
        assert (decision.replace_job, decision.create_job, decision.reason) == (True, False, "Compiling")
        assert decision.serve == OLD and decision.compiled_status == "False"
        assert "bert-compile-x succeeded without writing" in decision.message
    # Nothing served yet: Unknown, as while any compile runs.
    first = decide_compile(replace(observed, wanted_job_spec=job_spec_key(SPEC, "1")), None)
    assert (first.replace_job, first.compiled_status) == (True, "Unknown")


def test_unservable_spec_is_not_compiled() -> None:
    decision = decide_unservable(["spec.placement.instanceTypes: no allowed instance type holds it"], OLD)
    assert (decision.create_job, decision.serve, decision.reason) == (False, OLD, "NoInstanceTypeFits")
    # Not a wait (it was Unknown Pending, which the guide calls transient): False until the spec changes.
    assert decision.compiled_status == "False"
    assert decision.message == (
        "not compiled: the spec fits no allowed instance type (spec.placement.instanceTypes; see Degraded)"
    )


def test_a_failed_job_is_replaced_when_the_spec_asks_to_run_it_differently() -> None:
    # More memory after an OOM, a longer deadline, or the compile-retry annotation: the Job's name is
    # the request's (unchanged), so the failed one stays unless it is replaced.
    before = job_spec_key(SPEC)
    more = SPEC.model_copy(update={"compile": SPEC.compile.model_copy(update={"memory": "64Gi"})})
    assert job_spec_key(more) != before and job_spec_key(SPEC, "retry-1") != before
    failed = replace(_observe(None, "failed", "BackoffLimitExceeded"), job_spec=before, job_name="bert-compile-x")
    decision = decide_compile(replace(failed, wanted_job_spec=job_spec_key(more)), OLD)
    assert (decision.replace_job, decision.create_job, decision.reason) == (True, False, "Compiling")
    same = decide_compile(replace(failed, wanted_job_spec=before), OLD)
    assert (same.replace_job, same.reason, same.failure) == (
        False,
        "CompileFailed",
        CompileFailure(f"{failed.request.key}/{before}", "BackoffLimitExceeded"),
    )


def test_a_failure_is_remembered_after_kubernetes_deletes_the_job() -> None:
    # ttlSecondsAfterFinished removes the failed Job after a day: it was created again, daily.
    wanted = job_spec_key(SPEC)
    absent = replace(_observe(None, "absent"), wanted_job_spec=wanted)
    failure = CompileFailure(absent.attempt, "BackoffLimitExceeded: OOMKilled")
    decision = decide_compile(replace(absent, failed_before=failure), OLD)
    assert (decision.create_job, decision.reason, decision.failure) == (False, "CompileFailed", failure)
    assert "serving.neuronfleet.dev/compile-retry" in decision.message
    # Another attempt (a changed spec.compile, a retry) runs.
    other = CompileFailure(f"{absent.request.key}/0000000000", "old")
    assert decide_compile(replace(absent, failed_before=other), OLD).create_job


def test_a_running_job_whose_pod_waits_says_why() -> None:
    decision = decide_compile(_observe(None, "running", "not scheduled: 0/3 nodes are available"), OLD)
    assert decision.message.endswith("; its pod is waiting: not scheduled: 0/3 nodes are available")


GONE = DanglingRecord(NEW, None)
REPLACED = DanglingRecord(NEW, "e" * 64)


def test_a_record_whose_artifact_is_gone_is_compiled_again_and_said_so() -> None:
    # The operator served a record whose artifact an S3 lifecycle rule had expired: new pods
    # crash-looped, nothing said why, nothing compiled it again.
    decision = decide_compile(replace(_observe(None, "absent"), dangling=GONE), NEW)
    assert (decision.create_job, decision.republish, decision.reason) == (True, GONE, "ArtifactGone")
    assert decision.compiled_status == "False" and decision.serve == NEW  # its running pods loaded it
    assert decision.message.startswith(
        "the artifact s3://store/cccc recorded for this request is gone (manifest missing); compiling it again"
    )
    other = decide_compile(replace(_observe(None, "absent"), dangling=REPLACED), OLD)
    assert (other.create_job, other.serve, other.reason) == (True, OLD, "ArtifactGone")
    assert "holds another manifest (sha256 eeeeeeeeeeee, the record says dddddddddddd)" in other.message
    running = decide_compile(replace(_observe(None, "running"), dangling=GONE), NEW)
    assert (running.create_job, running.reason) == (False, "ArtifactGone")
    assert "manifest missing" in running.message and "compile Job running" in running.message


def test_the_finished_job_that_wrote_a_dangling_record_is_replaced_to_compile_it_again() -> None:
    # Finished Jobs are kept a day: its name is the request's, so no new Job starts while it is there.
    observed = replace(_observe(None, "succeeded"), dangling=GONE, job_name="bert-compile-x")
    decision = decide_compile(observed, NEW)
    assert (decision.replace_job, decision.create_job, decision.republish) == (True, False, GONE)
    assert decision.reason == "ArtifactGone" and "replacing the finished compile Job bert-compile-x" in decision.message


def test_a_republish_that_leaves_the_record_dangling_is_reported_not_compiled_in_a_loop() -> None:
    spec = job_spec_key(SPEC)
    observed = replace(
        _observe(None, "succeeded"), dangling=GONE, job_republishes=True, job_spec=spec, wanted_job_spec=spec
    )
    decision = decide_compile(observed, NEW)
    assert (decision.replace_job, decision.create_job, decision.reason) == (False, False, "ArtifactMissing")
    assert "manifest missing" in decision.message and "compile-retry" in decision.message
    # The compile-retry annotation (another job spec key) asks for it once more.
    retried = decide_compile(replace(observed, wanted_job_spec=job_spec_key(SPEC, "1")), NEW)
    assert (retried.replace_job, retried.reason) == (True, "ArtifactGone")


def test_a_failed_republish_says_why_it_ran() -> None:
    decision = decide_compile(replace(_observe(None, "failed", "BackoffLimitExceeded"), dangling=GONE), NEW)
    assert decision.reason == "CompileFailed" and decision.failure is not None
    assert "BackoffLimitExceeded (compiling it again because the artifact s3://store/cccc" in decision.message


def test_the_served_artifact_is_known_gone_only_when_the_dangling_record_names_it() -> None:
    # Its running pods keep serving; no new pod may be made of it (it could not load it).
    for phase, message in (("absent", ""), ("running", ""), ("succeeded", ""), ("failed", "BackoffLimitExceeded")):
        observed = replace(_observe(None, phase, message), dangling=GONE)
        assert decide_compile(observed, NEW).serve_gone, phase
        # The previous spec's artifact (another URI) serves: nothing is known of it.
        assert not decide_compile(observed, OLD).serve_gone, phase
    stuck = replace(_observe(None, "succeeded"), dangling=GONE, job_republishes=True)
    assert decide_compile(stuck, NEW).serve_gone  # republished and gone again: still gone
    assert not decide_compile(_observe(NEW, "absent"), NEW).serve_gone  # stored as recorded again
    assert not decide_compile(replace(_observe(None, "absent"), dangling=GONE), None).serve_gone  # nothing served


def test_a_job_being_deleted_is_neither_deleted_again_nor_made_again_until_it_is_gone() -> None:
    # A failed Job the spec asks to run differently is deleted; another controller's finalizer keeps it,
    # Terminating. Read as failed it was deleted again every reconcile (and a create of its name, still
    # taken, would only meet a 409). While it is removed nothing is done; once gone, the new Job starts.
    before = job_spec_key(SPEC)
    more = SPEC.model_copy(update={"compile": SPEC.compile.model_copy(update={"memory": "64Gi"})})
    removing = replace(
        _observe(None, "removing", "being deleted since 2026-12-04T07:00:00Z, held by the finalizer(s) example.com/a"),
        job_spec=before,
        job_name="bert-compile-x",
        wanted_job_spec=job_spec_key(more),
    )
    decision = decide_compile(removing, OLD)
    assert (decision.replace_job, decision.create_job, decision.serve, decision.reason) == (
        False,
        False,
        OLD,
        "Compiling",
    )
    assert "once the Job of that name is gone" in decision.message and "example.com/a" in decision.message
    assert decide_compile(replace(removing, job_phase="absent"), OLD).create_job
    # A failure remembered for this attempt stays remembered while its Job is removed (by its TTL).
    failure = CompileFailure(removing.attempt, "BackoffLimitExceeded: OOMKilled")
    kept = decide_compile(replace(removing, failed_before=failure), OLD)
    assert (kept.create_job, kept.reason, kept.failure) == (False, "CompileFailed", failure)


def test_the_operators_model_server_image_is_in_the_request_key(tmp_path: Path) -> None:
    """A spec naming no compile image is compiled with the operator's model-server image: switching it
    from the CPU build to the Neuron build is another request (a new Job, with the new image), not the
    CPU build's record found again and its ``backend: cpu`` artifact served on Inf2."""
    cpu_build, neuron_build = "registry.example/neuronserve:0.1.0", "registry.example/neuronserve:0.1.0-neuron"
    source = tmp_path / "model.pt"
    source.write_bytes(b"weights")
    dep = InferenceDeployment.model_validate(
        {
            "apiVersion": "serving.neuronfleet.dev/v1alpha1",
            "kind": "InferenceDeployment",
            "metadata": {"name": "emb", "namespace": "ns", "uid": "u1"},
            "spec": {"model": {"source": str(source), "format": "torchscript"}},
        }
    )
    store_dir = tmp_path / "store"
    store = ArtifactStore()
    fingerprint = store.fingerprint(str(source))
    # Installed with the CPU build: its compile stored and recorded an artifact.
    record_uncompiled_artifact(dep.spec, store_dir, "cpu build", image=cpu_build)
    assert store.lookup(compile_request(dep.spec, str(store_dir), fingerprint, cpu_build)) is not None

    # The platform team switches operator.modelServerImage to the Neuron build.
    request = compile_request(dep.spec, str(store_dir), fingerprint, neuron_build)
    found = store.lookup(request)
    assert found is None
    decision = decide_compile(CompileObservation(request, found), None)
    assert decision.create_job
    job = build_compile_job(dep, request, BuilderConfig(model_server_image=neuron_build))
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == neuron_build

    # A spec's own compile image wins over the operator's, in the key as in the Job.
    named = dep.spec.model_copy(update={"compile": dep.spec.compile.model_copy(update={"image": "reg/own:1"})})
    assert compile_request(named, "s3://store", "fp", cpu_build).key == compile_request(named, "s3://store", "fp").key


def test_an_operator_upgrade_that_keeps_the_image_keeps_the_request_keys() -> None:
    """Request keys are stored (records, Job names): an operator release that keeps the compile image
    must compute the same ones, or every deployment is compiled again. Pinned: a spec naming its image
    keeps the key it had before the operator's image joined the key; one that takes the operator's
    image has the key of that image alone (no other operator setting or version is in it)."""
    named = SPEC.model_copy(
        update={"compile": SPEC.compile.model_copy(update={"image": "registry.example/neuronserve:1.2-neuron"})}
    )
    assert compile_request(named, "s3://store", "fp1").key == "59ab31671b30fa5f"
    assert compile_request(named, "s3://store", "fp1", "registry.example/other:9").key == "59ab31671b30fa5f"
    assert (
        compile_request(SPEC, "s3://store", "fp1", "registry.example/neuronserve:1.2-neuron").key == "59ab31671b30fa5f"
    )


def test_stand_in_artifacts_of_two_models_share_one_store(tmp_path: Path) -> None:
    """The demo's and the benchmarks' stand-in artifacts (never a compile: their manifests say so):
    a second model's record lands beside the first's, and each is found by its own request."""
    store, store_dir = ArtifactStore(), tmp_path / "store"
    requests = []
    for name in ("bert", "gpt"):
        source = tmp_path / f"{name}.pt"
        source.write_bytes(name.encode())
        spec = InferenceDeploymentSpec.model_validate({"model": {"source": str(source), "format": "torchscript"}})
        revision = record_uncompiled_artifact(spec, store_dir, "stand-in")
        requests.append((compile_request(spec, str(store_dir), store.fingerprint(str(source))), revision))
    found = [store.lookup(request) for request, _ in requests]
    assert all(isinstance(artifact, StoredArtifact) for artifact in found), found
    assert [a.revision for a in found if isinstance(a, StoredArtifact)] == [revision for _, revision in requests]
    assert len({revision for _, revision in requests}) == 2
