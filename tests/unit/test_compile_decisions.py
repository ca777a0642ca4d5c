"""The compile pipeline's decisions (pure): use, start, wait, report, or not compile at all."""

from __future__ import annotations

from neuronfleet.api.v1alpha1 import InferenceDeploymentSpec
from neuronfleet.planning.compile import (
    CompileObservation,
    StoredArtifact,
    compile_request,
    decide_compile,
    decide_unservable,
)

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


def test_unservable_spec_is_not_compiled() -> None:
    decision = decide_unservable(["spec.placement.instanceTypes: no allowed instance type holds it"], OLD)
    assert (decision.create_job, decision.serve, decision.reason) == (False, OLD, "Pending")
    assert "no allowed instance type" in decision.message
