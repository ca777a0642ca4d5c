"""Label and annotation keys the operator puts on its pods, the pod roles, and revisions.

Everything the operator needs to rebuild its view of a fleet after a restart is written on the
pods themselves, so the reconcile stays stateless:

- ``serving.neuronfleet.dev/deployment``: the owning InferenceDeployment's name.
- ``serving.neuronfleet.dev/role``: ``warm`` (model loaded, not in the Service), ``active``
  (serving: the Service selects ``role=active``), ``draining`` (out of the Service, finishing
  in-flight work) or ``placeholder`` (a low-priority pod holding spare Inf2 capacity).
- ``serving.neuronfleet.dev/revision``: the artifact revision the pod serves (10 hex digits of the
  compile cache key, as ``status.artifact.revision``).
- ``serving.neuronfleet.dev/template-hash``: a digest of the pod template apart from the artifact
  (image, resources, placement...). A pod is *current* only when both match the target.
- annotation ``serving.neuronfleet.dev/drain-started-at``: RFC 3339 time the pod became draining,
  written in the same patch as the role change.
- annotation ``serving.neuronfleet.dev/kept-since``: RFC 3339 time a rollout first kept the pod
  (an outdated warm pod) as its old standby; the progress deadline counts from it. Any other
  relabel removes it.

Pod names are deterministic (:func:`serving_pod_name`, :func:`placeholder_pod_name`): the name of
the n-th pod of a revision is always the same, so an operator that crashes after a create and
plans again asks for the same name and gets a harmless 409 instead of creating a duplicate.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Literal, get_args

from neuronfleet.api.v1alpha1 import GROUP

Role = Literal["warm", "active", "draining", "placeholder"]
ROLES: tuple[Role, ...] = get_args(Role)
#: Roles of pods that run the model server (everything but placeholders).
SERVING_ROLES: tuple[Role, ...] = ("warm", "active", "draining")

LABEL_DEPLOYMENT = f"{GROUP}/deployment"
LABEL_ROLE = f"{GROUP}/role"
LABEL_REVISION = f"{GROUP}/revision"
LABEL_TEMPLATE_HASH = f"{GROUP}/template-hash"

LABEL_APP_NAME = "app.kubernetes.io/name"
LABEL_APP_INSTANCE = "app.kubernetes.io/instance"
LABEL_APP_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "neuronfleet"
APP_NAME = "neuronserve"

ANNOTATION_DRAIN_STARTED = f"{GROUP}/drain-started-at"
ANNOTATION_KEPT_SINCE = f"{GROUP}/kept-since"
ANNOTATION_ARTIFACT_URI = f"{GROUP}/artifact-uri"
#: The manifest sha256 a serving pod is pinned to (64 hex digits: longer than a label value may be).
ANNOTATION_MANIFEST_SHA256 = f"{GROUP}/manifest-sha256"
ANNOTATION_PLACEMENT_REASON = f"{GROUP}/placement"

#: Kubernetes object names used as hostnames must fit a DNS label.
MAX_NAME_LENGTH = 63


@dataclass(frozen=True)
class ArtifactRevision:
    """A compiled artifact the fleet serves: its revision id, where it is stored, and the sha256 of
    its manifest as recorded (empty when unknown: then pods are not pinned to one)."""

    id: str
    uri: str
    sha256: str = ""


@dataclass(frozen=True)
class FleetRevision:
    """What makes a serving pod current: the artifact revision and the pod-template hash."""

    artifact: ArtifactRevision
    template: str

    @cached_property
    def key(self) -> str:
        """8 hex digits naming this (artifact, template) pair in pod names (hashed once: a plan
        names every free slot it considers with it).

        A manifest republished under the same revision id (another sha256) is another pair: its
        pods get other names than the ones they replace.
        """
        pinned = f"/{self.artifact.sha256}" if self.artifact.sha256 else ""
        return short_hash(f"{self.artifact.id}/{self.template}{pinned}", 8)


def short_hash(text: str, length: int) -> str:
    """The first ``length`` hex digits of the SHA-256 of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _bounded(prefix: str, suffix: str) -> str:
    """``prefix-suffix`` cut to a DNS label; a cut prefix gets a hash so names stay unique."""
    name = f"{prefix}-{suffix}"
    if len(name) <= MAX_NAME_LENGTH:
        return name
    keep = MAX_NAME_LENGTH - len(suffix) - 7  # room for "-", 5 hash digits and "-"
    return f"{prefix[:keep].rstrip('-.')}-{short_hash(prefix, 5)}-{suffix}"


def serving_pod_name(deployment: str, revision: FleetRevision, slot: int) -> str:
    """Deterministic name of the ``slot``-th serving pod of ``revision``."""
    return _bounded(deployment, f"{revision.key}-{slot}")


def placeholder_pod_name(deployment: str, template: str, slot: int) -> str:
    """Deterministic name of the ``slot``-th node placeholder for a pod template."""
    return _bounded(deployment, f"ph-{template[:6]}-{slot}")


def label_value(name: str) -> str:
    """A deployment name as a label value (at most 63 characters; a cut name gets a hash)."""
    if len(name) <= MAX_NAME_LENGTH:
        return name
    return f"{name[: MAX_NAME_LENGTH - 6].rstrip('-.')}-{short_hash(name, 5)}"


def service_name(deployment: str) -> str:
    """The Service's name: the deployment's, cut to a DNS label (Service names are limited to 63)."""
    return label_value(deployment)


def deployment_selector(deployment: str) -> dict[str, str]:
    """Labels selecting every pod of a deployment (serving pods and placeholders)."""
    return {LABEL_DEPLOYMENT: label_value(deployment)}


def active_selector(deployment: str) -> dict[str, str]:
    """Labels selecting the pods that serve traffic: the Service's and the PDB's selector."""
    return {LABEL_DEPLOYMENT: label_value(deployment), LABEL_ROLE: "active"}


def selector_string(labels: Mapping[str, str]) -> str:
    """A label selector as a string (``k=v,k2=v2``), e.g. for ``status.selector``."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
