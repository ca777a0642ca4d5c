"""The upgrade that put the compile image in the request key (a reviewer's finding: a new
operator.modelServerImage never compiled again) compiles nothing by itself: a deployment's artifact
recorded under the key of the operator before (no image in it) is taken over while the status says
nothing else of its image, and a later image change still compiles. Nor does it disturb that
operator's compiles of the current spec (a reviewer's repros): one running at the upgrade is watched
to its end and its artifact taken, and one it saw fail is not run again."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.kube.builders import BuilderConfig
from neuronfleet.kube.jobs import build_compile_job, compile_job_name, wanted_job_spec
from neuronfleet.planning import reconcile_plan
from neuronfleet.planning.compile import (
    CompileDecision,
    CompileObservation,
    CompileRequest,
    StoredArtifact,
    compile_request,
    compile_running,
    decide_compile,
    legacy_request,
)
from neuronfleet.planning.observation import DeploymentMemory, StatusMemory
from neuronfleet.planning.reconcile_plan import ReconcilePlan, StartCompileJob, plan_reconcile
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


def _upgraded(tmp_path: Path) -> tuple[InferenceDeployment, Path, CompileRequest]:
    """A deployment naming no compile image, its store, and the request key the operator before
    gave it (compiled with the CPU build)."""
    source, store = tmp_path / "model.pt", tmp_path / "store"
    source.write_bytes(b"weights")
    dep = _deployment(source)
    legacy = legacy_request(dep.spec, str(store), ArtifactStore().fingerprint(str(source)), CPU_BUILD)
    assert legacy is not None
    return dep, store, legacy


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


def _status_section(artifact: StoredArtifact, image: str | None = None) -> dict[str, str]:
    section = {
        "uri": artifact.uri,
        "sha256": artifact.manifest_sha256,
        "revision": artifact.revision,
        "cacheKey": artifact.cache_key,
        "backend": artifact.backend,
    }
    if image is not None:
        section["compileImage"] = image
    return section


def _status(artifact: StoredArtifact, image: str | None = None) -> StatusMemory:
    return StatusMemory.from_status({"artifact": _status_section(artifact, image)})


async def _observe(dep: InferenceDeployment, store: Path, image: str, durable: StatusMemory) -> Any:
    settings = OperatorSettings(artifact_store=str(store), builder=BuilderConfig(model_server_image=image))
    reconciler = Reconciler(Untouchable(), ArtifactStore(), settings)
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
    dep, store, legacy = _upgraded(tmp_path)
    _record(legacy, store)
    other = StoredArtifact("f" * 64, str(store / ("f" * 64)), "0" * 64, "cpu")
    assert (await _observe(dep, store, CPU_BUILD, _status(other))).stored is None
    # Nor without a served artifact (a new deployment), nor for a spec naming its image (its key is kept).
    assert (await _observe(dep, store, CPU_BUILD, StatusMemory())).stored is None
    assert legacy_request(_deployment(tmp_path / "model.pt", image=CPU_BUILD).spec, str(store), "fp", CPU_BUILD) is None


# ---- compiles under way or failed at the upgrade (a reviewer's repros) -------------------------


class _JobsKube:
    """A KubeApi holding the deployment's compile Jobs (each with a pod, running), no fleet pod and
    no node: all an observation of the compile pipeline reads."""

    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self.jobs = jobs

    async def list_jobs(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return self.jobs

    async def list_pods(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        if "job-name" in labels:
            return [{"metadata": {"name": f"{labels['job-name']}-abcde"}, "status": {}}]
        return []

    async def list_nodes(self, fresh: bool = False) -> list[dict[str, Any]]:
        return []

    async def list_events(self, namespace: str, fields: Any) -> list[dict[str, Any]]:
        return []

    async def pod_log_tail(self, namespace: str, name: str, lines: int = 20) -> str:
        return "neuronx-cc: out of memory"


def _old_job(dep: InferenceDeployment, request: CompileRequest, phase: str) -> dict[str, Any]:
    """The compile Job the operator before made for ``request`` (its builder is unchanged), in ``phase``."""
    job = build_compile_job(dep, request, BuilderConfig(model_server_image=CPU_BUILD))
    job["metadata"]["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = {
        "running": [],
        "succeeded": [{"type": "Complete", "status": "True"}],
        "failed": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "OOM"}],
    }[phase]
    job["status"] = {"active": 1 if phase == "running" else 0, "conditions": conditions}
    return job


async def _round(
    dep: InferenceDeployment,
    store: Path,
    durable: StatusMemory,
    jobs: list[dict[str, Any]],
    image: str = CPU_BUILD,
    takeover: bool = True,
) -> tuple[CompileDecision, tuple[Any, ...], CompileObservation]:
    """One reconcile's observation (the store, the Jobs) and its compile plan, by the new operator
    running ``image``: its first round of the object (``takeover``), or a later one."""
    settings = OperatorSettings(artifact_store=str(store), builder=BuilderConfig(model_server_image=image))
    reconciler = Reconciler(_JobsKube(jobs), ArtifactStore(), settings)  # type: ignore[arg-type]
    observation = await reconciler.observe(dep, DeploymentMemory(), durable)
    assert observation.compile_error is None and observation.compile is not None
    decision, actions, _ = reconcile_plan._compile(dep, observation, durable, [], takeover=takeover)
    return decision, actions, observation.compile


async def _plan(
    dep: InferenceDeployment, store: Path, durable: StatusMemory, jobs: list[dict[str, Any]], image: str = CPU_BUILD
) -> ReconcilePlan:
    """One reconcile's whole plan (its status too), by a new operator running ``image`` (its first
    round of the object: the model-server image is a setting, changed by restarting the operator)."""
    settings = OperatorSettings(artifact_store=str(store), builder=BuilderConfig(model_server_image=image))
    reconciler = Reconciler(_JobsKube(jobs), ArtifactStore(), settings)  # type: ignore[arg-type]
    observation = await reconciler.observe(dep, DeploymentMemory(), durable)
    return plan_reconcile(dep, observation, DeploymentMemory(), durable, settings.fleet, lambda _: "template")


def _compiled(plan: ReconcilePlan) -> dict[str, Any]:
    return next(c for c in plan.status["conditions"] if c["type"] == "Compiled")


async def test_a_compile_running_at_the_upgrade_is_watched_to_its_end_and_its_artifact_taken(tmp_path: Path) -> None:
    dep, store, legacy = _upgraded(tmp_path)
    old_name = compile_job_name(dep.name, legacy)
    # A new deployment's first compile (an hour for a large model), started by the operator before:
    # running at the upgrade, no artifact in the status yet.
    decision, actions, observed = await _round(dep, store, StatusMemory(), [_old_job(dep, legacy, "running")])
    assert actions == (), "a running compile of this very spec was deleted or started again at the upgrade"
    assert (decision.reason, observed.job_name, compile_running(observed)) == ("Compiling", old_name, True)

    # It succeeds, its record written under its key: taken, nothing compiled again, the image said.
    artifact = _record(legacy, store)
    plan = await _plan(dep, store, StatusMemory(), [_old_job(dep, legacy, "succeeded")])
    assert plan.compile_actions == ()
    assert plan.compile_succeeded == artifact
    assert plan.status["artifact"]["uri"] == artifact.uri
    assert plan.status["artifact"]["compileImage"] == CPU_BUILD


async def test_a_compile_finished_before_the_old_operator_wrote_the_status_is_taken(tmp_path: Path) -> None:
    dep, store, legacy = _upgraded(tmp_path)
    artifact = _record(legacy, store)
    # The old operator's Job wrote its record; the operator stopped before writing status.artifact.
    decision, actions, _ = await _round(dep, store, StatusMemory(), [_old_job(dep, legacy, "succeeded")])
    assert (actions, decision.reason, decision.serve) == ((), "ArtifactReady", artifact)


async def test_the_old_operators_job_is_taken_only_when_it_ran_the_image_that_compiles_now(tmp_path: Path) -> None:
    dep, store, legacy = _upgraded(tmp_path)
    artifact = _record(legacy, store)
    other = StoredArtifact("f" * 64, str(store / ("f" * 64)), "0" * 64, "cpu")
    succeeded = _old_job(dep, legacy, "succeeded")  # run with the CPU build
    # The Job of the legacy key ran another image than the one compiling now: no Job of this
    # request, whatever the status says; its record is not taken, and this request's Job is started.
    for status in (StatusMemory(), _status(other, CPU_BUILD)):
        decision, actions, observed = await _round(dep, store, status, [succeeded], NEURON_BUILD)
        assert observed.stored is None and decision.create_job
        assert observed.job_name == compile_job_name(dep.name, observed.request)
    # It ran the image compiling now: this request's compile, whatever the status says (it names an
    # image once its artifact is taken, while the Job may still run a moment).
    decision, actions, observed = await _round(dep, store, _status(other, NEURON_BUILD), [succeeded])
    assert (actions, decision.serve, observed.job_name) == ((), artifact, compile_job_name(dep.name, legacy))
    # Nor another spec's Job of the operator before (another source): superseded, as any.
    spec = dep.spec.model_copy(update={"model": dep.spec.model.model_copy(update={"source": str(tmp_path / "old.pt")})})
    older = legacy_request(spec, str(store), None, CPU_BUILD)
    assert older is not None
    _, actions, _ = await _round(dep, store, StatusMemory(), [_old_job(dep, older, "running")])
    names = {(type(a).__name__, a.name) for a in actions}
    assert names == {
        ("StartCompileJob", compile_job_name(dep.name, observed.request)),
        ("DeleteCompileJob", compile_job_name(dep.name, older)),
    }


async def test_a_compile_failed_before_the_upgrade_is_not_run_again(tmp_path: Path) -> None:
    source, store = tmp_path / "model.pt", tmp_path / "store"
    source.write_bytes(b"weights")
    dep = _deployment(source)
    config = BuilderConfig(model_server_image=CPU_BUILD)
    legacy = legacy_request(dep.spec, str(store), ArtifactStore().fingerprint(str(source)), CPU_BUILD)
    assert legacy is not None
    # The operator before remembered the failure (its key / the job spec key); Kubernetes deleted
    # the failed Job a day later; no artifact served yet.
    attempt = f"{legacy.key}/{wanted_job_spec(dep, config)}"
    failed = {"compileFailure": {"attempt": attempt, "message": "neuronx-cc OOM"}}
    decision, actions, observed = await _round(dep, store, StatusMemory.from_status(failed), [])
    assert (actions, decision.reason) == ((), "CompileFailed")
    assert "neuronx-cc OOM" in decision.message
    # Remembered as this request's attempt from then on.
    assert decision.failure is not None and decision.failure.attempt == observed.attempt
    # Still the case with its Job kept (failed): not replaced, its failure said.
    decision, actions, _ = await _round(dep, store, StatusMemory.from_status(failed), [_old_job(dep, legacy, "failed")])
    assert (actions, decision.reason) == ((), "CompileFailed")
    # A status naming an image is this operator's: a failure under the legacy key is another request's.
    named = {**failed, "artifact": _status_section(StoredArtifact("f" * 64, "/x", "0" * 64, "cpu"), NEURON_BUILD)}
    decision, _, _ = await _round(dep, store, StatusMemory.from_status(named), [])
    assert decision.create_job


async def test_the_old_operators_job_succeeded_without_its_record_names_the_record_it_was_to_write(
    tmp_path: Path,
) -> None:
    dep, store, legacy = _upgraded(tmp_path)
    decision, actions, observed = await _round(dep, store, StatusMemory(), [_old_job(dep, legacy, "succeeded")])
    assert (actions, decision.reason) == ((), "ArtifactMissing")
    assert legacy.record_uri in decision.message and observed.request.record_uri not in decision.message


# ---- the image changed after the upgrade (a reviewer's repros) ---------------------------------


async def test_an_old_image_job_is_not_taken_for_the_new_images_compile(tmp_path: Path) -> None:
    dep, store, legacy = _upgraded(tmp_path)
    old_name = compile_job_name(dep.name, legacy)
    # The operator before started a compile with the CPU build; after the upgrade the operator's
    # image is changed to the Neuron build while it runs (the status names no image: nothing served).
    decision, actions, observed = await _round(
        dep, store, StatusMemory(), [_old_job(dep, legacy, "running")], NEURON_BUILD
    )
    assert decision.create_job
    assert observed.request.image == NEURON_BUILD and observed.job_name != old_name
    names = {(type(a).__name__, a.name) for a in actions}
    assert names == {("StartCompileJob", observed.job_name), ("DeleteCompileJob", old_name)}
    # Its Event does not say that the spec or the source changed, when only the image did.
    [why] = [a.why for a in actions if type(a).__name__ == "DeleteCompileJob"]
    assert "compile image" in why
    # Had the CPU build's compile ended first, its artifact (under the legacy key) is not the Neuron
    # build's either: not served as compiled by it, and the Neuron build compiles.
    _record(legacy, store)
    plan = await _plan(dep, store, StatusMemory(), [_old_job(dep, legacy, "succeeded")], NEURON_BUILD)
    assert "artifact" not in plan.status and _compiled(plan)["reason"] == "Compiling"
    (action,) = plan.compile_actions
    assert isinstance(action, StartCompileJob) and action.name == observed.job_name


async def test_an_old_images_failed_job_does_not_block_the_new_image(tmp_path: Path) -> None:
    dep, store, legacy = _upgraded(tmp_path)
    failed_job = _old_job(dep, legacy, "failed")
    # The upgrade keeps the image (as the guide says): the CPU build's failure is this request's.
    plan = await _plan(dep, store, StatusMemory(), [failed_job], CPU_BUILD)
    assert _compiled(plan)["reason"] == "CompileFailed" and plan.compile_actions == ()
    durable = StatusMemory.from_status({"compileFailure": plan.status["compileFailure"]})
    # Then the image is changed to the Neuron build ("a later change compiles again"): the failed
    # CPU-build Job (kept a day) is not its Job, nor its failure.
    plan = await _plan(dep, store, durable, [failed_job], NEURON_BUILD)
    assert [type(a).__name__ for a in plan.compile_actions] == ["StartCompileJob"]
    assert _compiled(plan)["reason"] == "Compiling" and plan.status.get("compileFailure") is None
    # Nor once Kubernetes deleted that Job, with what the status remembered before the change.
    plan = await _plan(dep, store, durable, [], NEURON_BUILD)
    assert [type(a).__name__ for a in plan.compile_actions] == ["StartCompileJob"]


async def test_a_failure_remembered_under_the_legacy_key_is_inherited_at_the_takeover_only(tmp_path: Path) -> None:
    source, store = tmp_path / "model.pt", tmp_path / "store"
    source.write_bytes(b"weights")
    dep = _deployment(source)
    config = BuilderConfig(model_server_image=CPU_BUILD)
    legacy = legacy_request(dep.spec, str(store), ArtifactStore().fingerprint(str(source)), CPU_BUILD)
    assert legacy is not None
    failed = StatusMemory.from_status(
        {"compileFailure": {"attempt": f"{legacy.key}/{wanted_job_spec(dep, config)}", "message": "OOM"}}
    )
    # The operator's first round of the object (the upgrade, the image kept): the failure is taken,
    # under this request's attempt, so that a later image change finds none of its own.
    decision, actions, observed = await _round(dep, store, failed, [], takeover=True)
    assert (actions, decision.reason) == ((), "CompileFailed")
    assert decision.failure is not None and decision.failure.attempt == observed.attempt
    # A later round still finding it under the legacy key did not write it so: it is no failure of
    # this request's.
    decision, actions, _ = await _round(dep, store, failed, [], takeover=False)
    assert decision.create_job and [type(a).__name__ for a in actions] == ["StartCompileJob"]


async def test_the_legacy_job_still_running_after_its_artifact_is_taken_is_not_superseded(tmp_path: Path) -> None:
    dep, store, legacy = _upgraded(tmp_path)
    artifact = _record(legacy, store)
    # The Job writes its record last: running a moment more while its artifact is taken.
    job = _old_job(dep, legacy, "running")
    plan = await _plan(dep, store, StatusMemory(), [job])
    assert plan.compile_actions == () and plan.status["artifact"]["compileImage"] == CPU_BUILD
    # The next round: the status names the image now; the Job (still running) is this request's.
    durable = StatusMemory.from_status({"artifact": plan.status["artifact"], "conditions": plan.status["conditions"]})
    plan = await _plan(dep, store, durable, [job])
    assert plan.compile_actions == (), "the legacy Job of this very compile was deleted as superseded"
    assert plan.status["artifact"]["uri"] == artifact.uri and _compiled(plan)["reason"] == "ArtifactReady"


def test_an_image_and_fingerprint_are_read_back_only_with_the_artifact_they_compiled(tmp_path: Path) -> None:
    """status.artifact cut short (no record's key or URI: edited by hand, or written by a tool that
    knows only some fields) serves nothing, and its compileImage is not read as the image of an
    artifact this operator wrote: a takeover then still inherits the operator before's failure
    (:func:`~neuronfleet.planning.compile.inherits_legacy_failure`), and no fingerprint is looked up."""
    served = StoredArtifact("key", str(tmp_path / "key"), "sha", "cpu")
    whole = {**_status_section(served, CPU_BUILD), "sourceFingerprint": "fp"}
    read = StatusMemory.from_status({"artifact": whole})
    assert (read.artifact, read.artifact_image, read.artifact_fingerprint) == (served, CPU_BUILD, "fp")
    for missing in ("cacheKey", "uri"):
        cut = {field: value for field, value in whole.items() if field != missing}
        read = StatusMemory.from_status({"artifact": cut})
        assert (read.artifact, read.artifact_image, read.artifact_fingerprint) == (None, None, None), missing
