"""The last valid spec kept in the object's status (``status.lastValidSpec``), so that the fleet of a
refused spec outlives the operator process that parsed it (pure).

While an InferenceDeployment's current spec is refused (InvalidSpec), the operator keeps the fleet of
the last spec it accepted whole, as a Deployment keeps its old ReplicaSet through a bad template edit.
The process's memory (:attr:`~neuronfleet.planning.observation.DeploymentMemory.last_valid`) holds
that spec while the operator runs; the status holds it across restarts and leader changes:

- :func:`record`: the section the status says of a spec reconciled as valid. It is part of the status
  the plan builds, so the ordinary status write patches it only when it changed (a new generation):
  the reconciles of one spec write nothing more for it.
- :func:`kept_from_status`: that section made an InferenceDeployment again, checked as a body's spec
  is, or why it cannot be used. The operator that wrote it may have accepted what this
  one refuses (an upgrade since, a status edited by hand, the operator's own account named by a
  default that changed): its pods are then not built, as with no section at all. The API server
  checks a body's spec against the CRD's schema and CEL rules before the operator sees it, but not
  the status's copy (stored as an open object), so that copy is checked against them here
  (:func:`~neuronfleet.api.validation.validate_manifest`, as ``neuronfleet validate`` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neuronfleet.api.v1alpha1 import InferenceDeployment, LastValidSpecStatus
from neuronfleet.api.validation import validate_manifest
from neuronfleet.planning.admission import OperatorAccount, own_account_problem, spec_accounts

#: Problems a refused spec's message names at most (the body's as the stored one's).
SPEC_PROBLEMS = 5


def record(dep: InferenceDeployment) -> LastValidSpecStatus:
    """What ``status.lastValidSpec`` says of ``dep``, a spec the operator accepted: its generation,
    and its spec as parsed (defaults filled in), which parses again to the same spec."""
    return LastValidSpecStatus(generation=dep.metadata.generation, spec=dep.spec.to_wire())


def kept_from_status(
    stored: LastValidSpecStatus | None,
    body: Mapping[str, Any],
    compile_default: str | None,
    serving_default: str | None,
    operator: OperatorAccount | None,
) -> InferenceDeployment | str:
    """The last valid spec ``stored`` in the status of the object ``body`` (whose own spec is refused),
    as the InferenceDeployment whose fleet is kept; or why it cannot be used (a sentence).

    Validated as the API server and the operator validate a body's spec: the body's apiVersion, kind
    and metadata (the generation the stored one's) and the stored spec against the CRD's schema, the
    typed model and the CRD's CEL rules (:func:`~neuronfleet.api.validation.validate_manifest`: the API
    server applied those to the body's spec but not to the status); then refused, as a body's spec
    is, when its workloads would run as the operator's own account (``operator``;
    ``compile_default``/``serving_default``: the operator's default accounts for the specs that name
    none).
    """
    if stored is None:
        return "the status keeps no last valid spec (status.lastValidSpec is absent or unreadable)"
    generation = f"generation {stored.generation}" if stored.generation is not None else "the last valid spec"
    metadata = dict(body.get("metadata") or {})
    metadata["generation"] = stored.generation
    source = {k: v for k, v in body.items() if k not in ("status", "spec", "metadata")}
    dep, problems = validate_manifest({**source, "metadata": metadata, "spec": dict(stored.spec)})
    if dep is None or problems:
        listed = "; ".join(map(str, problems[:SPEC_PROBLEMS]))
        return f"status.lastValidSpec ({generation}) is not a valid spec: {listed}"
    namespace = dep.metadata.namespace or "default"
    accounts = spec_accounts(dep, compile_default, serving_default)
    if problem := own_account_problem(namespace, accounts, operator):
        return f"status.lastValidSpec ({generation}) is refused now: {problem}"
    return dep
