"""Pods the API server must refuse at admission: named, with the field and the fix (pure).

Two settings make the API server refuse every pod of a deployment, in words that name neither the
field that caused it nor what to do:

- a ServiceAccount that does not exist in the namespace (the ServiceAccount admission plugin:
  ``error looking up service account <ns>/<name>: serviceaccount "<name>" not found``). A serving
  pod is refused at the operator's own create, whose answer :func:`refusal_for` reads; a compile
  Job's pods are refused to the Job controller, which says so only in a FailedCreate Event: the
  operator reads the account once the Job has had no pod for a while (``kube.observe``), and
  :func:`missing_account_message` says what to do;
- a CPU limit below the CPU request (pod validation: the limit must be at least the request). The
  serving pods' request may be computed (the replica's share of its node), so
  :func:`serving_cpu_limit_problem` compares the limit with the request of the chosen placement
  before any pod is made; :func:`compile_cpu_limit_problem` does it for the compile Job (the CRD's
  CEL rules refuse what they can compare on their own: see ``api.v1alpha1``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from neuronfleet.api.v1alpha1 import CompileSpec, RuntimeSpec
from neuronfleet.planning.placement import Candidate, QuantityError, parse_quantity
from neuronfleet.planning.reasons import Reason
from neuronfleet.planning.status import Refusal

#: The account a pod that names none runs as. The ServiceAccount controller keeps it in every
#: namespace (it creates it again when deleted), so the operator never reads it.
DEFAULT_ACCOUNT = "default"

Workload = Literal["compile", "serving"]

#: The spec field and the operator's flag (chart value) that name each workload's account.
_SETTINGS: dict[Workload, tuple[str, str, str]] = {
    "compile": ("spec.compile.serviceAccountName", "--compile-service-account", "workloads.compileServiceAccount"),
    "serving": ("spec.runtime.serviceAccountName", "--serving-service-account", "workloads.servingServiceAccount"),
}

#: The ServiceAccount admission plugin's refusal (k8s plugin/pkg/admission/serviceaccount): the
#: namespace and the name it looked up. Matched in the answer's body, where quotes are escaped.
_ACCOUNT_NOT_FOUND = re.compile(
    r"error looking up service account ([a-z0-9][-a-z0-9.]*)/([a-z0-9][-a-z0-9.]*): "
    r"serviceaccount [^:]{0,300}? not found"
)
#: The Priority admission plugin's refusal: the class a pod names does not exist.
_PRIORITY_CLASS_NOT_FOUND = re.compile(r"no PriorityClass with name (\S+) was found")


@dataclass(frozen=True)
class WorkloadAccount:
    """The ServiceAccount a workload's pods run as, and which setting names it."""

    workload: Workload
    name: str
    #: Where the name comes from, as a person would look for it (what follows "it is").
    origin: str


def workload_account(workload: Workload, spec_value: str | None, operator_value: str | None) -> WorkloadAccount:
    """The account of the compile Job or the serving pods: the spec's, else the operator's default,
    else the namespace's ``default`` (the same order as ``kube.jobs`` and ``kube.builders``)."""
    field, flag, value = _SETTINGS[workload]
    if spec_value:
        return WorkloadAccount(workload, spec_value, f"named by {field}")
    if operator_value:
        return WorkloadAccount(
            workload, operator_value, f"named by the operator's {flag} (chart: {value}), as {field} is unset"
        )
    return WorkloadAccount(
        workload,
        DEFAULT_ACCOUNT,
        f"the namespace's default, as neither {field} nor the operator's {flag} (chart: {value}) names one",
    )


def _named_by(account: WorkloadAccount, name: str) -> str:
    """Which setting names ``name`` (the account the API server looked up)."""
    if name == account.name:
        return account.origin
    if name == DEFAULT_ACCOUNT:
        return "the namespace's default, which pods that name no account run as"
    # Not the account the current settings name: a Job made under earlier ones.
    return (
        f"named by the {account.workload} pod's spec, made under earlier settings "
        f"(now {account.name}, {account.origin})"
    )


def missing_account_message(account: WorkloadAccount, namespace: str, name: str | None = None) -> str:
    """What to say of a ServiceAccount the API server (or a read) found missing in ``namespace``."""
    name = name or account.name
    what = (
        "the compile Job makes no pod (it keeps trying, and compiles once the account exists)"
        if account.workload == "compile"
        else "no serving pod can be created"
    )
    field, _, _ = _SETTINGS[account.workload]
    if name == DEFAULT_ACCOUNT:
        # Kubernetes makes it in every namespace: its absence is the cluster's, not a setting's.
        fix = (
            "kube-controller-manager's ServiceAccount controller makes it in every namespace: check that it "
            f"runs, or set {field} to an account that exists"
        )
    else:
        fix = (
            "Create it there (the chart does with workloads.serviceAccounts.create and this namespace in "
            f"workloads.serviceAccounts.namespaces: docs/install-eks.md), or set {field} to an account that exists"
        )
    return (
        f"ServiceAccount {name} does not exist in namespace {namespace}, so {what}; it is "
        f"{_named_by(account, name)}. {fix}"
    )


def refusal_for(status: int, answer: str, serving: WorkloadAccount, shown: str = "") -> Refusal | None:
    """Why the API server refused a serving pod or placeholder (``status`` 403 or 422, ``answer``
    its body), named when the refusal is one the operator knows, else in its words (``shown``: the
    answer as the status shows it); None for another status."""
    if status not in (403, 422):
        return None
    if found := _PRIORITY_CLASS_NOT_FOUND.search(answer):
        return Refusal(
            Reason.PRIORITY_CLASS_MISSING,
            f"PriorityClass {found.group(1)} does not exist, so no pod naming it can be created: "
            "install the chart's PriorityClasses (priorityClasses.create) or create it",
        )
    if found := _ACCOUNT_NOT_FOUND.search(answer):
        namespace, name = found.group(1), found.group(2)
        return Refusal(Reason.SERVICE_ACCOUNT_MISSING, missing_account_message(serving, namespace, name))
    return Refusal(Reason.POD_CREATION_REFUSED, f"the API server refused a pod: {shown or answer[:300]}")


def _cores(quantity: str) -> Fraction | None:
    """A CPU quantity's exact value in cores (None: unreadable; the placement reports that)."""
    try:
        cores, suffix = parse_quantity(quantity)
    except QuantityError:
        return None
    return None if suffix in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei") else cores


def serving_cpu_limit_problem(runtime: RuntimeSpec, chosen: Candidate) -> str | None:
    """Why no serving pod (nor placeholder) of ``chosen`` could be created: spec.runtime.cpuLimit is
    below the CPU request each replica gets there (spec.runtime.cpu, else its share of the node).
    None when the limit is unset or at least the request."""
    limit = _cores(runtime.cpu_limit) if runtime.cpu_limit else None
    request = chosen.cpu_millis_per_replica
    if limit is None or limit >= Fraction(request, 1000):
        return None
    if runtime.cpu:
        source = f"spec.runtime.cpu {runtime.cpu}"
        fix = f"raise spec.runtime.cpuLimit to at least {runtime.cpu}, or lower spec.runtime.cpu"
    else:
        source = f"spec.runtime.cpu is unset: the replica's share of an {chosen.name} node, as neuronfleet plan shows"
        fix = (
            f"raise spec.runtime.cpuLimit to at least {request}m, or set spec.runtime.cpu to at most "
            f"{runtime.cpu_limit} (placement then packs replicas by it)"
        )
    return (
        f"spec.runtime.cpuLimit {runtime.cpu_limit} is below the CPU request of each replica, {request}m "
        f"({source}): the API server refuses a pod whose CPU limit is below its request, so no serving pod "
        f"or placeholder is created; {fix}"
    )


def compile_cpu_limit_problem(compile_spec: CompileSpec) -> str | None:
    """Why no compile Job is started: spec.compile.cpuLimit is below spec.compile.cpu. None when fine."""
    limit = _cores(compile_spec.cpu_limit) if compile_spec.cpu_limit else None
    request = _cores(compile_spec.cpu)
    if limit is None or request is None or limit >= request:
        return None
    return (
        f"spec.compile.cpuLimit {compile_spec.cpu_limit} is below spec.compile.cpu {compile_spec.cpu}: the API "
        "server refuses a pod whose CPU limit is below its request, so no compile Job is started; raise "
        "spec.compile.cpuLimit or lower spec.compile.cpu"
    )
