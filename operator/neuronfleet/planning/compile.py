"""What to compile for a spec, and the state of the compile pipeline (pure).

The operator cannot compute the artifact's cache key itself: that key hashes the *source digest*
(the sha256 of every model file) and the *compiler identity* (torch-neuronx / neuronx-cc where the
compile image has them, CPU TorchScript otherwise), and only the compile Job reads the source and
knows its compiler. So the pipeline has two keys:

- the **request key**, computed here from everything the spec says about the compile (source URI
  and its fingerprint, format, signature, buckets, compiler flags) and the image that compiles it
  (the spec's compile image, else the operator's model-server image). It names the compile Job and
  a small *request record* ``<store>/requests/<request key>.json`` that the Job writes after
  storing the artifact;
- the **cache key** (``neuronserve.manifest.cache_key``), written into that record by the Job. The
  artifact lives at ``<store>/<cache key>``, its revision label is the cache key's first 10 digits.

Per revision: if the record exists and the artifact it names is still stored as recorded (the
store checks its manifest's sha256 and that the files it lists are there), the artifact is used as
is (no Job); otherwise a Job runs ``neuronserve compile``, which itself skips the trace when an
artifact with the same cache key is stored already (so an unchanged model is never compiled twice,
even under a new request key). A record whose artifact is gone (deleted by a lifecycle rule or by
hand, in whole or some of its files) or was replaced by another manifest is a
:class:`DanglingRecord`: never served, said in the Compiled condition, and compiled again (the Job
republishes the artifact, or takes the stored one, and rewrites the record).

The *source fingerprint* (ETags / sizes of the source files, read by ``neuronfleet.artifacts``)
goes into the request key, so replacing the files under the same URI compiles a new revision.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Literal

from neuronfleet.api.v1alpha1 import DEFAULT_IMAGE, InferenceDeploymentSpec
from neuronfleet.planning.placement import problem_fields
from neuronfleet.planning.reasons import Reason, Refusal
from neuronserve.manifest import request_record_path

REQUEST_KEY_LENGTH = 16


@dataclass(frozen=True)
class CompileRequest:
    """One compile the spec asks for."""

    key: str
    store_root: str
    source: str
    source_fingerprint: str | None
    #: The image that compiles it (the spec's compile image, else the operator's model-server image):
    #: the Job runs this one, the one in the key.
    image: str = DEFAULT_IMAGE

    @property
    def record_uri(self) -> str:
        return f"{self.store_root.rstrip('/')}/{request_record_path(self.key)}"


def _request_key(spec: InferenceDeploymentSpec, store: str, source_fingerprint: str | None, image: str | None) -> str:
    model = spec.model.model_dump(
        mode="json", include={"source", "format", "inputs", "batch_buckets", "sequence_buckets"}
    )
    # Buckets are sets (the CRD says so): [4, 1] asks for the same compile as [1, 4].
    for buckets in ("batch_buckets", "sequence_buckets"):
        model[buckets] = sorted(set(model[buckets]))
    compile_flags = spec.compile.model_dump(
        mode="json", include={"target_family", "auto_cast", "auto_cast_type", "opt_level", "extra_args"}
    )
    doc = {
        "model": model,
        # The store: its request record says where the artifact is; another store has none yet.
        "store": store.rstrip("/"),
        "compile": {**compile_flags, "image": image},
        "fingerprint": source_fingerprint,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def compile_request(
    spec: InferenceDeploymentSpec,
    default_store: str,
    source_fingerprint: str | None = None,
    default_image: str = DEFAULT_IMAGE,
) -> CompileRequest:
    """The compile request of a spec, keyed by everything that changes the artifact.

    ``default_image`` is the operator's model-server image, which compiles a spec naming no compile
    image. That image is in the key, not only the spec's: a new operator model-server image (the CPU
    build replaced by the Neuron build) is another compiler, so another artifact. It takes the place
    of the spec's image, so a spec naming its image keeps the key it had before the operator's joined it.
    """
    store = spec.compile.artifact_store or default_store
    image = spec.compile.image or default_image
    key = _request_key(spec, store, source_fingerprint, image)
    return CompileRequest(key[:REQUEST_KEY_LENGTH], store, spec.model.source, source_fingerprint, image)


def legacy_request(
    spec: InferenceDeploymentSpec,
    default_store: str,
    source_fingerprint: str | None = None,
    default_image: str = DEFAULT_IMAGE,
) -> CompileRequest | None:
    """The key an operator from before the compile image joined the request key gave a spec naming no
    compile image (its key held no image at all); None for a spec naming one (its key is unchanged).

    Its record is what that operator's Jobs left; read only to take over the artifact a deployment
    already serves, or the one its Job of that key stored (:func:`takes_over_legacy`), so that the
    upgrade compiles nothing.
    """
    if spec.compile.image:
        return None
    store = spec.compile.artifact_store or default_store
    key = _request_key(spec, store, source_fingerprint, None)
    return CompileRequest(
        key[:REQUEST_KEY_LENGTH], store, spec.model.source, source_fingerprint, spec.compile.image or default_image
    )


def inherits_legacy_failure(takeover: bool, status_image: str | None) -> bool:
    """Whether a compile failure remembered under the legacy request's attempt (:func:`legacy_request`,
    the key of the operator before) is the current request's: only at the operator's takeover of the
    object (its first reconcile of it: the upgrade's) while the status names no compile image (written
    by an operator from before ``status.artifact.compileImage``, or nothing served yet), so an upgrade
    does not run again a compile the operator before saw fail. The guide asks for the image to be kept
    through the upgrade: it is then the image that failed. Taken, the failure is remembered under the
    current request's attempt from then on, so a later image change (which restarts the operator)
    finds no failure of its own and compiles. Once the status names an image, this operator wrote it.
    """
    return takeover and status_image is None


#: An InferenceDeployment annotation whose every new value retries a failed compile of the same spec.
ANNOTATION_COMPILE_RETRY = "serving.neuronfleet.dev/compile-retry"


def job_spec_key(spec: InferenceDeploymentSpec, retry: str | None = None) -> str:
    """What a compile Job runs with beyond its request: resources, deadline, retries, and the
    compile-retry annotation. None of it changes the artifact (so it is not in the request key),
    but a failed Job whose key differs from the spec's is replaced: more memory after an OOM, a
    longer deadline, or an explicit retry."""
    doc = {
        "job": spec.compile.model_dump(mode="json", include={"cpu", "memory", "timeout_seconds", "backoff_limit"}),
        "retry": retry,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:10]


@dataclass(frozen=True)
class CompileFailure:
    """A compile that failed, remembered in the status after its Job is gone (Kubernetes deletes
    finished Jobs after a day): it is not run again until the spec or the retry annotation changes."""

    #: ``<request key>/<job spec key>`` of the failed attempt.
    attempt: str
    message: str


@dataclass(frozen=True)
class StoredArtifact:
    """The request record a compile Job leaves behind: which artifact answers the request."""

    cache_key: str
    uri: str
    manifest_sha256: str
    backend: Literal["neuron", "cpu"]

    @property
    def revision(self) -> str:
        return self.cache_key[:10]


@dataclass(frozen=True)
class DanglingRecord:
    """A request record whose artifact is not in the store as recorded: its manifest is missing,
    another manifest (another sha256) is in its place, or files the manifest lists are missing (or
    of another size). Pods could not load it as recorded."""

    #: What the record says.
    artifact: StoredArtifact
    #: The sha256 of the manifest found at the artifact's URI; None when there is none.
    found_sha256: str | None
    #: With the recorded manifest in place: its files found missing or of another size, one each.
    file_problems: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.found_sha256 is None:
            return f"the artifact {self.artifact.uri} recorded for this request is gone (manifest missing)"
        if self.found_sha256 == self.artifact.manifest_sha256 and self.file_problems:
            return (
                f"files of the artifact {self.artifact.uri} recorded for this request are gone from the store "
                f"({'; '.join(self.file_problems)})"
            )
        return (
            f"the artifact {self.artifact.uri} recorded for this request holds another manifest (sha256 "
            f"{self.found_sha256[:12]}, the record says {self.artifact.manifest_sha256[:12]})"
        )


#: ``removing``: the Job has a deletionTimestamp (deleted, and kept by a finalizer until its
#: controller lets it go). Not running: never deleted again; its name is taken until it is gone. Its
#: pods are (:attr:`CompileObservation.held_job_pods`). ``taken``: the deployment has no Job of the
#: request's name, but another object controls one (:attr:`CompileObservation.job_taken_by`): its
#: outcome is not this request's, and the request's Job is made once it is gone.
JobPhase = Literal["absent", "running", "succeeded", "failed", "removing", "taken"]


def takes_over_legacy(
    found: StoredArtifact | DanglingRecord | None,
    served: StoredArtifact | None,
    served_image: str | None,
    image: str,
    legacy_job: JobPhase = "absent",
) -> StoredArtifact | None:
    """The artifact a legacy request record (:func:`legacy_request`) names, taken for the current
    request when the current request has no record of its own; None when it is not to be.

    The artifact the status says is served (same cache key, URI and manifest): the deployment's
    own compile of this very spec and source. And only while the status says it was compiled by the
    image that compiles now, or says nothing of it (written before ``status.artifact.compileImage``:
    the upgrade that brings the field is taken to have kept the image). So an upgrade that keeps the
    image compiles nothing, and a later image change still compiles again.

    Or the artifact the compile Job of that legacy key stored (``legacy_job``: its phase, when it is
    taken for the current request's Job, its pods running the current request's image, whatever the
    status says): a compile the operator before started for this very spec and source, running at the
    upgrade and succeeded since, or finished before that operator wrote the status. Running counts,
    as it does for a moment after the Job writes its record (which it writes last).
    """
    if not isinstance(found, StoredArtifact):
        return None
    if legacy_job in ("running", "succeeded"):
        return found
    if served is None or found != served:
        return None
    if served_image is not None and served_image != image:
        return None
    return found


def adopts_legacy_job(phase: JobPhase, image: str | None, request: CompileRequest) -> bool:
    """Whether the Job of this spec's legacy key (:func:`legacy_request`), in ``phase`` and running
    ``image``, is the current request's Job: one running, succeeded or failed (not one being
    deleted, whose place the request's own Job takes) that compiles with the request's image (the
    operator before compiled with the image it ran; a Job of another image is another compile, whose
    artifact and failure are not this request's)."""
    return phase in ("running", "succeeded", "failed") and image == request.image


@dataclass(frozen=True)
class CompileObservation:
    """What the reconcile saw of the pipeline for the current request."""

    request: CompileRequest
    #: The artifact the request record names, verified in the store; None when there is none.
    stored: StoredArtifact | None
    job_phase: JobPhase = "absent"
    #: Kubernetes' reason for a failed Job, with the compile pod's last words.
    job_message: str = ""
    #: Why the model source cannot be read (then no Job is started); None when it can (or is unknown).
    source_problem: str | None = None
    #: The compile Job for this request, and every compile Job of the deployment still running.
    job_name: str = ""
    running_jobs: tuple[str, ...] = ()
    #: The job spec key the observed Job was made with (None: no Job, or one made before keys).
    job_spec: str | None = None
    #: The job spec key the spec asks for now (:func:`job_spec_key`).
    wanted_job_spec: str = ""
    #: The failure the status remembers, if any.
    failed_before: CompileFailure | None = None
    #: The request record found, when its artifact is not stored as recorded (``stored`` is None then).
    dangling: DanglingRecord | None = None
    #: The observed Job was started to compile a dangling record again (it carries the mark).
    job_republishes: bool = False
    #: Why the API server refuses the running Job's pod, which it has not made (its FailedCreate Event,
    #: else its ServiceAccount read and found missing: :mod:`neuronfleet.planning.admission`); None
    #: when it has a pod, is between two attempts (its status counts a pod made, and no FailedCreate
    #: newer than its last SuccessfulCreate nor a missing account says the next is refused), or
    #: nothing says why not.
    pod_refused: Refusal | None = None
    #: Each compile Job being deleted that another controller's finalizer holds, with the live pods
    #: it controls (by uid): deleted on every reconcile until none is left.
    held_job_pods: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: The legacy request of this very spec and source (:func:`legacy_request`): its Job stands for
    #: this one's when it runs this request's image, and its failure at the takeover
    #: (``legacy_failure``). None for a spec naming its compile image (its key is unchanged).
    inherited: CompileRequest | None = None
    #: The observed Job (``job_name``) is the inherited request's, this request's being absent.
    job_inherited: bool = False
    #: A failure remembered under the inherited request's attempt is this request's
    #: (:func:`inherits_legacy_failure`).
    legacy_failure: bool = False
    #: Phase ``taken``: who controls the Job of the request's name.
    job_taken_by: str | None = None
    #: ... and it is the previous InferenceDeployment of this name (deleted before this one was
    #: created), whose Job the garbage collector removes by itself: waited for, not reported.
    job_taken_by_previous: bool = False

    def taken_note(self) -> str:
        """Phase ``taken``: whose the Job of the request's name is, and what becomes of it."""
        if self.job_taken_by_previous:
            return (
                f"it belongs to the previous {self.job_taken_by}, deleted: the garbage collector is removing it, "
                "and its outcome is not this object's"
            )
        return (
            f"it exists and belongs to {self.job_taken_by}, not to this InferenceDeployment: left as it is; "
            "delete or rename it"
        )

    @property
    def attempt(self) -> str:
        """This request with this Job spec: what a remembered failure is matched against."""
        return f"{self.request.key}/{self.wanted_job_spec}"

    @property
    def job_record_uri(self) -> str:
        """The request record the observed Job writes: its own request's (the inherited one's)."""
        if self.job_inherited and self.inherited is not None:
            return self.inherited.record_uri
        return self.request.record_uri

    @property
    def attempts(self) -> tuple[str, ...]:
        """The attempts a remembered failure is this request's under: :attr:`attempt`, and the
        inherited legacy request's (the operator before remembered it so) when ``legacy_failure``."""
        if self.inherited is None or not self.legacy_failure:
            return (self.attempt,)
        return (self.attempt, f"{self.inherited.key}/{self.wanted_job_spec}")


@dataclass(frozen=True)
class CompileDecision:
    """What to do about compilation, and the artifact the fleet should serve meanwhile."""

    create_job: bool
    #: The artifact to serve: the new one when stored, else the previous (still serving) one.
    serve: StoredArtifact | None
    compiled_status: Literal["True", "False", "Unknown"]
    reason: Reason
    message: str
    #: The image that compiled ``serve`` (``status.artifact.compileImage``), when known.
    serve_image: str | None = None
    #: The source fingerprint of ``serve``'s request (``status.artifact.sourceFingerprint``), when known.
    serve_fingerprint: str | None = None
    #: The failure to remember in the status (kept while the same attempt stays failed, and through a
    #: round that could not read the store, the Jobs or the source: None forgets it).
    failure: CompileFailure | None = None
    #: Delete the Job (it is created again once gone): a failed one, or one that succeeded without
    #: writing its record, that the spec asks to run differently, or a finished one whose record dangles.
    replace_job: bool = False
    #: Why the request is compiled (again): a dangling record, which the Job is marked with.
    republish: DanglingRecord | None = None
    #: ``serve`` is the artifact the dangling record names, known not to be in the store as recorded:
    #: the pods running it keep serving, but a new pod could not load it until it is republished.
    serve_gone: bool = False


#: Compiled reasons under which no artifact of the spec comes by itself: the source cannot be read,
#: the compile failed (a retry needs a spec change or the retry annotation), its Job succeeded
#: without a record, or the API server refuses the Job's pod. Not Compiling nor ArtifactGone: a
#: compile under way ends with an artifact, and the spare capacity is wanted then.
NO_ARTIFACT_REASONS: frozenset[Reason] = frozenset(
    {
        Reason.SOURCE_UNREADABLE,
        Reason.COMPILE_FAILED,
        Reason.ARTIFACT_MISSING,
        Reason.SERVICE_ACCOUNT_MISSING,
        Reason.CPU_LIMIT_BELOW_REQUEST,
        Reason.LIMIT_RANGE_REFUSED,
        Reason.POD_CREATION_REFUSED,
        Reason.PRIORITY_CLASS_MISSING,
    }
)


def compile_running(observed: CompileObservation | None) -> bool:
    """A compile Job of the deployment runs on after this round, making a pod: an artifact comes.

    A round whose source listing failed supersedes no running Job (its request key lacks the
    fingerprint, so the running Job's name differs although nothing changed), so any of them counts
    then; otherwise only the current request's, the others being deleted. Not one whose pod the API
    server refuses: it makes nothing until the refusal's cause is fixed.
    """
    if observed is None:
        return False
    kept = (
        observed.running_jobs
        if observed.source_problem is not None
        else tuple(name for name in observed.running_jobs if name == observed.job_name)
    )
    if observed.pod_refused is not None:
        kept = tuple(name for name in kept if name != observed.job_name)
    return bool(kept)


def nothing_to_serve(decision: CompileDecision, observed: CompileObservation | None = None) -> bool:
    """No artifact is served, and none can be compiled until something changes (the spec, the
    source, the retry annotation, the namespace's objects): node placeholders would hold spare
    nodes for pods that cannot exist. Never while a compile Job runs on (:func:`compile_running`),
    whatever this round read of the source: its artifact comes, and holding the placeholders for one
    failed listing deleted them, to be made again the next round."""
    return decision.serve is None and decision.reason in NO_ARTIFACT_REASONS and not compile_running(observed)


def compile_succeeded(
    observed: CompileObservation | None,
    decision: CompileDecision,
    recorded: StoredArtifact | None,
    recorded_reason: str | None,
) -> StoredArtifact | None:
    """The artifact this spec's compile Job was seen to store, when it is news: CompileSucceeded.

    From this round's observation (the request's artifact is stored and served, and its Job is
    there: succeeded, or still running, as it is for a moment after writing the record, which it
    writes last), not from the Compiled condition's last reason, which a round that could not read
    the store, the Jobs or the source in between changes. Once per compile, by what the status
    already records (``recorded``, its artifact, and ``recorded_reason``, Compiled's reason): not
    when Compiled said ArtifactReady already (said, or found stored), nor when the status records
    this very artifact, unless it is being compiled again because it was gone (ArtifactGone). So a
    spec reverted to an artifact stored already (nothing compiled) says nothing, also while
    Kubernetes still keeps (a day) the finished Job that compiled it. Not ruled out: a revert,
    while another revision compiles, to one older than the one served whose Job is still kept.
    """
    if observed is None or decision.reason != Reason.ARTIFACT_READY or decision.serve is None:
        return None
    # A Job is made only for a request not stored (or stored no longer): there, it stored this one.
    if observed.job_phase not in ("running", "succeeded") or observed.stored != decision.serve:
        return None
    if recorded_reason == Reason.ARTIFACT_READY:
        return None
    if recorded == observed.stored and recorded_reason != Reason.ARTIFACT_GONE:
        return None
    return observed.stored


def _replacing_earlier_job(
    observed: CompileObservation, previous: StoredArtifact | None, ended: str
) -> CompileDecision:
    """The decision to replace a finished Job run under an earlier spec.compile or retry."""
    return CompileDecision(
        False,
        previous,
        "Unknown" if previous is None else "False",
        Reason.COMPILING,
        f"compile Job {observed.job_name} {ended} under an earlier spec.compile (resources, deadline, "
        "retries) or before a retry was asked: replacing it",
        replace_job=True,
    )


def decide_compile(observed: CompileObservation, previous: StoredArtifact | None) -> CompileDecision:
    """Use the stored artifact, start a Job, wait for it, or report why there is none.

    A failed compile never rolls out: the previous artifact keeps serving, and the Job is not
    re-created for the same attempt (Kubernetes already retried it ``backoffLimit`` times with
    exponential back-off), also after Kubernetes deletes it: the status remembers the failure. A
    new request key starts over; so does a new job spec key (more memory after an OOM, a longer
    deadline, the compile-retry annotation): the failed Job is replaced.

    A dangling record (its artifact deleted, or another manifest in its place) is compiled again,
    with the reason in the message (reason ArtifactGone). The finished Job that wrote it is kept a
    day: it is replaced, and the new Job carries the mark of a republish. Should that one succeed and
    the record still dangle, the store does not keep what Jobs write: reported, not compiled again
    in a loop. Whatever the Job's state, while the dangling record names the artifact still served
    (the same URI), ``serve_gone`` says so: no new pod is made of it until it is stored again.

    A Job that succeeded without writing its request record (reason ArtifactMissing) is not run again
    by itself either (another would most likely end the same way); a new job spec key replaces it.
    """
    decision = _decide(observed, previous)
    dangling = observed.dangling
    if dangling is not None and decision.serve is not None and decision.serve.uri == dangling.artifact.uri:
        return replace(decision, serve_gone=True)
    return decision


def _decide(observed: CompileObservation, previous: StoredArtifact | None) -> CompileDecision:
    if observed.stored is not None:
        stored = observed.stored
        message = f"revision {stored.revision} ({stored.backend} backend) at {stored.uri}"
        if observed.source_problem is not None:
            # Found by the source's last listing (the status keeps it): the spec's artifact, served.
            # Not a broken fleet, but a change to the source would not be seen until it reads again.
            message += (
                f"; the model source {observed.request.source} cannot be read now ({observed.source_problem}): "
                "serving the artifact compiled from it as last listed"
            )
        return CompileDecision(False, stored, "True", Reason.ARTIFACT_READY, message)
    # A Job being deleted, or another object's, counts as none, but holds its name: the request's
    # Job is made once it is gone.
    absent = observed.job_phase in ("absent", "removing", "taken")
    if observed.source_problem is not None and absent:
        # A Job could not read the source either: say so now rather than after a failed Job.
        return CompileDecision(
            False,
            previous,
            "False",
            Reason.SOURCE_UNREADABLE,
            f"cannot read the model source {observed.request.source}: {observed.source_problem}; "
            "no compile Job started",
            # Kept: once the source reads again, its request is the failed one's, not run again.
            failure=observed.failed_before,
        )
    if observed.job_phase == "failed":
        if observed.job_spec is not None and observed.job_spec != observed.wanted_job_spec:
            return _replacing_earlier_job(observed, previous, "failed")
        message = observed.job_message or f"compile Job for request {observed.request.key} failed"
        if observed.dangling is not None:
            message = f"{message} (compiling it again because {observed.dangling.describe()})"
        failure = CompileFailure(observed.attempt, message)
        return CompileDecision(False, previous, "False", Reason.COMPILE_FAILED, message, failure=failure)
    failed = observed.failed_before
    if absent and failed is not None and failed.attempt in observed.attempts:
        # Kubernetes deleted the failed Job (ttlSecondsAfterFinished): running it again would fail
        # the same way, at the same cost, every day.
        return CompileDecision(
            False,
            previous,
            "False",
            Reason.COMPILE_FAILED,
            f"{failed.message} (to run it again: change spec.compile, or set the "
            f"{ANNOTATION_COMPILE_RETRY} annotation to a new value)",
            # Under this request's attempt: one remembered by the operator before (its legacy key)
            # is this request's after the takeover too, and no later image's.
            failure=replace(failed, attempt=observed.attempt),
        )
    dangling = observed.dangling
    if observed.job_phase == "succeeded" and dangling is not None:
        if observed.job_republishes and observed.job_spec == observed.wanted_job_spec:
            # The Job that was to republish it succeeded, and the record it wrote dangles again: the
            # store does not keep what Jobs write, or the operator reads another store. Another Job
            # would end the same way: report it instead of compiling in a loop.
            return CompileDecision(
                False,
                previous,
                "False",
                Reason.ARTIFACT_MISSING,
                f"compile Job {observed.job_name} succeeded, but {dangling.describe()} still: check that the "
                "store keeps what compile Jobs write (no lifecycle rule expiring it) and that the Jobs and the "
                f"operator read the same store; to compile it again set the {ANNOTATION_COMPILE_RETRY} "
                "annotation to a new value",
            )
        # The finished Job that wrote the record (kept a day) ran before its artifact went, or a retry
        # is asked: replace it; the next round starts one that republishes the artifact.
        return CompileDecision(
            False,
            previous,
            "False",
            Reason.ARTIFACT_GONE,
            f"{dangling.describe()}; compiling it again (replacing the finished compile Job {observed.job_name})",
            replace_job=True,
            republish=dangling,
        )
    if observed.job_phase == "succeeded":
        if observed.job_spec is not None and observed.job_spec != observed.wanted_job_spec:
            # Its name is the request's and Kubernetes keeps it a day: left there, it would stand for
            # this request, and neither a changed spec.compile nor the retry annotation would run again.
            return _replacing_earlier_job(observed, previous, f"succeeded without writing {observed.job_record_uri},")
        # The Job ended well but left no record: the store and the Job disagree. Not a retry loop:
        # report it, as a failure, and keep serving what was there until a retry is asked.
        return CompileDecision(
            False,
            previous,
            "False",
            Reason.ARTIFACT_MISSING,
            f"compile Job {observed.job_name} succeeded but {observed.job_record_uri} is missing: check that "
            "the Job and the operator use the same artifact store and that it keeps what the Job writes; to "
            f"compile it again set the {ANNOTATION_COMPILE_RETRY} annotation to a new value (or change spec.compile)",
        )
    if observed.job_phase == "running" and observed.pod_refused is not None:
        refused = observed.pod_refused
        if observed.job_spec is not None and observed.job_spec != observed.wanted_job_spec:
            # The fix (another account, other resources, in the spec or the operator's settings) is in
            # the job spec key: a Job that never ran is replaced at once, not left to its deadline.
            # A refusal is observed only for a Job that makes no pod now: never made, or its retry after a
            # failed or lost pod refused (one between two attempts is running, and kept as any other).
            return CompileDecision(
                False,
                previous,
                "Unknown" if previous is None else "False",
                Reason.COMPILING,
                f"compile Job {observed.job_name} made no pod ({refused.reason}), and spec.compile or the "
                "operator's settings changed since: replacing it",
                replace_job=True,
            )
        # Not a wait: nothing compiles until the refusal's cause is fixed (the Job then makes its pod).
        return CompileDecision(False, previous, "False", refused.reason, refused.message)
    waiting = "running" if observed.job_phase == "running" else "starting"
    # A running Job's message says why its pod has not started (unschedulable, image not pulled).
    stuck = ""
    if observed.job_phase == "running" and observed.job_message:
        stuck = f"; its pod is waiting: {observed.job_message}"
    elif observed.job_phase == "removing":
        waiting = f"starting once the Job of that name is gone (it is {observed.job_message or 'being deleted'})"
    elif observed.job_phase == "taken":
        waiting = f"starting once the Job {observed.job_name} is gone ({observed.taken_note()})"
    if dangling is not None:
        # False, not Unknown: the recorded artifact is known not to be there.
        return CompileDecision(
            observed.job_phase == "absent",
            previous,
            "False",
            Reason.ARTIFACT_GONE,
            f"{dangling.describe()}; compiling it again: compile Job {waiting} (request {observed.request.key}){stuck}",
            republish=dangling,
        )
    return CompileDecision(
        observed.job_phase == "absent",
        previous,
        "Unknown" if previous is None else "False",
        Reason.COMPILING,
        f"compile Job {waiting} for {observed.request.source} (request {observed.request.key}){stuck}",
    )


def decide_unservable(problems: list[str], previous: StoredArtifact | None) -> CompileDecision:
    """No compile for a spec that no allowed instance type can serve: it would be spent for nothing.

    Compiled is False (not a wait: nothing happens until the spec changes), its message names the
    fields (Degraded has the detail). The previous artifact (if any) stays recorded; a spec change
    that fixes the problems starts over.
    """
    return CompileDecision(
        False,
        previous,
        "False",
        Reason.NO_INSTANCE_TYPE_FITS,
        f"not compiled: the spec fits no allowed instance type ({problem_fields(problems)}; see Degraded)",
    )
