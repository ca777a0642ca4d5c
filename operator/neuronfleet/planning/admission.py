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
  CEL rules refuse what they can compare on their own: see ``api.v1alpha1``);
- a LimitRange of the namespace: its default CPU limit, given to a container that sets none, below
  the pod's CPU request (pod validation then refuses the pod, 422), or its ``min`` / ``max`` (the
  LimitRanger admission plugin, 403). :func:`refusal_for` names them from the refused create's
  answer alone (``Reason.LIMIT_RANGE_REFUSED``): the answer says what was wrong, the spec says which
  field sets it.

One setting the API server admits is refused by the operator itself: a workload account that is the
operator's own (:func:`own_account_problem`). In the operator's namespace, compile Jobs or serving
pods running as it would get its IAM role (IRSA or EKS Pod Identity bind the role to the namespace and
the account) and run as the account its cluster-wide roles are bound to; such a spec is invalid. What
it already runs as that account (:func:`own_account_cleanup`): placeholders, warm pods and compile Jobs
are deleted, pods taking traffic kept and named (:func:`own_account_message`).

The compile Job's pod is refused to the Job controller, not to the operator: :func:`compile_refusal`
names it from the Job's FailedCreate Event (``Error creating: <the API server's refusal>``) with the
same recognition, and the spec.compile fields; a refusal it does not know (a ResourceQuota, an
admission webhook) is ``Reason.POD_CREATION_REFUSED``, quoting the API server, for either workload.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from neuronfleet.api.v1alpha1 import CompileSpec, InferenceDeployment, RuntimeSpec
from neuronfleet.planning.placement import Candidate, QuantityError, parse_quantity
from neuronfleet.planning.reasons import Reason, Refusal

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
#: A CPU request above the container's CPU limit, in pod validation's words (kubernetes
#: pkg/apis/core/validation, ValidateResourceRequirements: ``must be less than or equal to %s limit of
#: %s``; older versions without `` of <limit>``, e.g. in kubernetes/kubernetes#112835, on 1.24:
#: ``spec.containers[0].resources.requests: Invalid value: "700m": must be less than or equal to cpu
#: limit``). The operator never sends a CPU limit below the request (CPULimitBelowRequest), so with
#: spec.runtime.cpuLimit unset the limit is a LimitRange's default, which the LimitRanger's mutating
#: admission gives a container that sets none, before validation.
_REQUEST_ABOVE_CPU_LIMIT = re.compile(
    r'spec\.containers\[\d+\]\.resources\.requests: Invalid value: "([^"]+)": '
    r"must be less than or equal to cpu limit(?: of ([0-9][0-9.]*[a-zA-Z]*))?"
)
#: The LimitRanger admission plugin's refusals (kubernetes plugin/pkg/admission/limitranger,
#: minConstraint / maxConstraint: ``minimum %s usage per %s is %s, but request is %s``, ``maximum %s
#: usage per %s is %s, but limit is %s``, ``maximum %s usage per %s is %s.  No limit is specified``;
#: older versions capitalise it or end it with a period). Several are listed in brackets.
_LIMIT_RANGER_BOUND = re.compile(
    r"(?i:(minimum|maximum)) ([a-z0-9./-]+) usage per (Container|Pod) is ([0-9][0-9.]*[a-zA-Z]*)"
    r"(?:, but (request|limit) is ([0-9][0-9.]*[a-zA-Z]*)|\.  No (request|limit) is specified)"
)
#: ... and its ratio (limitRequestRatioConstraint: ``%s max limit to request ratio per %s is %s, but
#: provided ratio is %f``, or ``but no request|limit is specified or request|limit is 0``).
_LIMIT_RANGER_RATIO = re.compile(
    r"([a-z0-9./-]+) max limit to request ratio per (Container|Pod) is ([0-9][0-9.]*[a-zA-Z]*), but "
    r"(?:provided ratio is ([0-9.]+)|no (request|limit) is specified)"
)
#: The ResourceQuota admission plugin's refusal of a pod that sets no value for a resource a quota
#: caps (k8s.io/apiserver admission/plugin/resourcequota: ``failed quota: %s: must specify %s``).
_QUOTA_MUST_SPECIFY = re.compile(r"failed quota: ([a-z0-9][-a-z0-9.]*): must specify ([^\n\]]+)")
#: ... and of one that would take the namespace over a quota (``exceeded quota: %s, requested: %s,
#: used: %s, limited: %s``).
_QUOTA_EXCEEDED = re.compile(r"exceeded quota: ([a-z0-9][-a-z0-9.]*), requested: (\S+?), used: ")
#: A quota's resource names, as those messages list them (``limits.cpu``, ``requests.memory``, ``cpu``).
_QUOTA_RESOURCE = re.compile(r"(?:(requests|limits)\.)?(cpu|memory|ephemeral-storage)\b")
#: The spec fields that set a pod's request and limit of each resource, per workload: CPU has a limit
#: of its own; memory and disk are request and limit alike (see ``kube.builders`` and ``kube.jobs``).
_FIELDS: dict[Workload, dict[str, tuple[str, str]]] = {
    "serving": {
        "cpu": ("spec.runtime.cpu", "spec.runtime.cpuLimit"),
        "memory": ("spec.runtime.memory", "spec.runtime.memory"),
        "ephemeral-storage": ("spec.runtime.ephemeralStorage", "spec.runtime.ephemeralStorage"),
    },
    "compile": {
        "cpu": ("spec.compile.cpu", "spec.compile.cpuLimit"),
        "memory": ("spec.compile.memory", "spec.compile.memory"),
        "ephemeral-storage": ("spec.compile.ephemeralStorage", "spec.compile.ephemeralStorage"),
    },
}
#: What a refusal leaves undone, per workload.
_NOT_MADE: dict[Workload, str] = {
    "serving": "no serving pod or placeholder is created",
    "compile": "the compile Job makes no pod (the Job controller keeps trying)",
}
#: The Job controller's FailedCreate Event (kubernetes pkg/controller/controller_utils.go,
#: RealPodControl.createPods: ``r.Recorder.Eventf(object, v1.EventTypeWarning, FailedCreatePodReason,
#: "Error creating: %v", err)``, FailedCreatePodReason = "FailedCreate"): the API server's error
#: after this prefix. client-go's EventAggregator prefixes a message it stands for many similar ones.
_FAILED_CREATE_PREFIX = "Error creating: "
_COMBINED_PREFIX = "(combined from similar events): "


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


def spec_accounts(
    dep: InferenceDeployment, compile_default: str | None, serving_default: str | None
) -> tuple[WorkloadAccount, WorkloadAccount]:
    """The accounts ``dep``'s compile Job and serving pods run as (:func:`workload_account`), with the
    operator's default accounts for a spec that names none."""
    return (
        workload_account("compile", dep.spec.compile.service_account_name, compile_default),
        workload_account("serving", dep.spec.runtime.service_account_name, serving_default),
    )


@dataclass(frozen=True)
class OperatorAccount:
    """The ServiceAccount the operator runs as and its namespace (in a pod, from the downward API)."""

    namespace: str
    name: str


def own_account_problem(
    namespace: str, accounts: tuple[WorkloadAccount, ...], operator: OperatorAccount | None
) -> str | None:
    """Why a spec in ``namespace`` whose workloads run as ``accounts`` (:func:`workload_account`) is
    refused: one of them is the operator's own account. None when none is, or the operator's account
    is unknown (outside a pod: the sandbox, a laptop)."""
    if operator is None or namespace != operator.namespace:
        return None
    problems = [_own_account_problem(account, operator) for account in accounts if account.name == operator.name]
    if not problems:
        return None
    return "; ".join(problems)


def own_default_problem(workload: Workload, name: str | None, operator: OperatorAccount) -> str | None:
    """Why the operator's default account for ``workload`` (its flag) is refused at start: it is the
    operator's own, which every spec of the operator's namespace naming none would run as. None when
    it is another."""
    if name != operator.name:
        return None
    field, flag, value = _SETTINGS[workload]
    pods = "compile Jobs" if workload == "compile" else "serving pods"
    return (
        f"{flag} is {name}, the operator's own ServiceAccount (in its namespace {operator.namespace}): the {pods} "
        f"of specs there that leave {field} unset would get the operator's IAM role (IRSA or EKS Pod Identity) and "
        f"run as the account its cluster-wide RBAC roles are bound to; name an account of the {pods}' own "
        f"(chart: {value}, created by workloads.serviceAccounts: docs/install-eks.md)"
    )


def _own_account_problem(account: WorkloadAccount, operator: OperatorAccount) -> str:
    field, flag, value = _SETTINGS[account.workload]
    if account.workload == "compile":
        pods, they, own = "the compile Job's pod", "it", "its own"
    else:
        pods, they, own = "the serving pods", "they", "their own"
    if account.origin.startswith("the namespace's default"):
        # The operator itself runs as the namespace's default account (outside the chart, which
        # refuses that): every workload of its namespace that names no account would share it.
        fix = (
            f"set {field} (or the operator's {flag}, chart: {value}) to an account of {own}, and run the "
            "operator as an account of its own"
        )
    elif account.origin.startswith("named by the operator's"):
        fix = f"set {field}, or the operator's {flag} (chart: {value}), to an account of {own}"
    else:
        fix = f"set {field} to an account of {own} (the chart's {value} is one: docs/install-eks.md)"
    return (
        f"{pods} would run as ServiceAccount {operator.name}, the operator's own in its namespace "
        f"{operator.namespace} ({account.origin}): {they} would get the operator's IAM role (IRSA or EKS Pod "
        f"Identity) and run as the account its cluster-wide RBAC roles are bound to, so nothing of this spec is "
        f"created and its placeholders, warm pods and compile Jobs running as that account are deleted; {fix}, or "
        "create the deployment in another namespace"
    )


@dataclass(frozen=True)
class RunningAs:
    """One of a spec's pods (``role``: its role label) or compile Jobs (``role`` "compile") and the
    account it runs as (``default`` where it names none)."""

    name: str
    role: str
    account: str


@dataclass(frozen=True)
class OwnAccountCleanup:
    """What a spec refused by :func:`own_account_problem` has running as the operator's account."""

    #: Placeholders and warm pods: they serve nothing, deleted.
    pods: tuple[str, ...]
    #: Compile Jobs (their pods go with them): deleted.
    jobs: tuple[str, ...]
    #: Pods that take traffic (active, draining): kept, named in the message.
    kept: tuple[RunningAs, ...]


#: Roles of pods that take no traffic: deleting them drops nothing.
_IDLE_ROLES = frozenset({"placeholder", "warm"})


def own_account_cleanup(running: tuple[RunningAs, ...], operator: OperatorAccount) -> OwnAccountCleanup:
    """Which of a refused spec's pods and compile Jobs (all in the operator's namespace) running as the
    operator's account are deleted, and which are kept: the serving pods, since deleting them drops
    their live traffic while what they hold (the token, the role) they had since they started."""
    own = [item for item in running if item.account == operator.name]
    return OwnAccountCleanup(
        pods=tuple(item.name for item in own if item.role in _IDLE_ROLES),
        jobs=tuple(item.name for item in own if item.role == "compile"),
        kept=tuple(item for item in own if item.role != "compile" and item.role not in _IDLE_ROLES),
    )


#: Serving pods the own-account refusal names; the others are counted.
NAMED_AT_MOST = 5


def own_account_message(problem: str, cleanup: OwnAccountCleanup) -> str:
    """The refusal's message (:func:`own_account_problem`) with the serving pods kept: the first
    :data:`NAMED_AT_MOST` by name, the rest counted (a condition message naming hundreds would be
    kilobytes long)."""
    if not cleanup.kept:
        return problem
    count = len(cleanup.kept)
    kept = sorted(cleanup.kept, key=lambda item: item.name)
    names = ", ".join(f"{item.name} ({item.role})" for item in kept[:NAMED_AT_MOST])
    if count > NAMED_AT_MOST:
        names += f" and {count - NAMED_AT_MOST} more"
    pods = "serving pod" if count == 1 else "serving pods"
    return (
        f"{problem}. {count} {pods} made before still run as that account and take traffic: {names}; the operator "
        "keeps them, since deleting them would drop their traffic: once the serving pods' account is another "
        "(spec.runtime.serviceAccountName, or the operator's --serving-service-account), the operator replaces "
        "them with pods of that account, new pods first; or delete them (kubectl delete pod) or the "
        "InferenceDeployment"
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


@dataclass(frozen=True)
class WorkloadPods:
    """Where a workload's pods are made and the CPU they ask for: what a refusal is explained with."""

    namespace: str
    #: Each pod's CPU request (serving: in millicores, spec.runtime.cpu, else its share of the node).
    cpu_request: str
    #: Where the request comes from, as a person would look for it.
    cpu_request_origin: str
    #: spec.runtime.cpuLimit or spec.compile.cpuLimit (None: the pods set no CPU limit).
    cpu_limit: str | None
    workload: Workload = "serving"

    @property
    def whose_request(self) -> str:
        """Whose CPU request a message compares with."""
        return "each replica" if self.workload == "serving" else "the compile Job's pod"


def serving_pods(namespace: str, runtime: RuntimeSpec, chosen: Candidate) -> WorkloadPods:
    """The serving pods of the placement ``chosen``, as :func:`refusal_for` explains them."""
    origin = (
        f"spec.runtime.cpu {runtime.cpu}"
        if runtime.cpu
        else f"the replica's share of an {chosen.name} node, as spec.runtime.cpu is unset"
    )
    return WorkloadPods(namespace, f"{chosen.cpu_millis_per_replica}m", origin, runtime.cpu_limit or None)


def compile_pods(namespace: str, compile_spec: CompileSpec) -> WorkloadPods:
    """The compile Job's pod (``kube.jobs``), as :func:`compile_refusal` explains its refusal."""
    return WorkloadPods(
        namespace, compile_spec.cpu, f"spec.compile.cpu {compile_spec.cpu}", compile_spec.cpu_limit or None, "compile"
    )


def _status_message(answer: str) -> str:
    """The ``message`` of a ``kind: Status`` body (quotes unescaped), else the body as it is."""
    try:
        body = json.loads(answer)
    except ValueError:
        return answer
    message = body.get("message") if isinstance(body, dict) else None
    return message if isinstance(message, str) else answer


def _limit_range_where(pods: WorkloadPods | None) -> tuple[str, str]:
    """The namespace as a message names it, and the command that shows its LimitRanges."""
    if pods is None or not pods.namespace:
        return "the namespace", "kubectl describe limitrange -n <namespace>"
    return f"namespace {pods.namespace}", f"kubectl describe limitrange -n {pods.namespace}"


def _default_cpu_limit_refusal(found: re.Match[str], pods: WorkloadPods | None) -> Refusal:
    """Pod validation refused a CPU request above the container's CPU limit: with the spec's CPU limit
    unset, the limit was a LimitRange's default."""
    request = pods.cpu_request if pods is not None else found.group(1)
    origin = f" ({pods.cpu_request_origin})" if pods is not None else ""
    default = found.group(2)
    workload: Workload = pods.workload if pods is not None else "serving"
    cpu_field, limit_field = _FIELDS[workload]["cpu"]
    whose = pods.whose_request if pods is not None else "each replica"
    if pods is not None and pods.cpu_limit:
        # The pod's own limit (a LimitRange default never replaces one): the plan's check missed it.
        return Refusal(
            Reason.CPU_LIMIT_BELOW_REQUEST,
            f"{limit_field} {pods.cpu_limit} is below the CPU request of {whose}, {request}{origin}: "
            f"the API server refuses a pod whose CPU limit is below its request, so {_NOT_MADE[workload]}; "
            f"raise {limit_field} or lower {cpu_field}",
        )
    where, describe = _limit_range_where(pods)
    of = f" of {default}" if default else ""
    lower = f", or set {cpu_field} to at most {default}" if default else f", or lower {cpu_field}"
    return Refusal(
        Reason.LIMIT_RANGE_REFUSED,
        f"a LimitRange in {where} gives a container that sets no CPU limit a default CPU limit{of}, below the "
        f"CPU request of {whose}, {request}{origin}: the API server refuses a pod whose CPU limit is below "
        f"its request, so {_NOT_MADE[workload]} ({describe}). Set {limit_field} to at "
        f"least {request} (a pod's own limit is not replaced by the default; unless the LimitRange's max CPU is "
        f"below {request}, which then refuses that limit){lower}, or raise the LimitRange's default CPU limit",
    )


def _bound_fix(bound: str, resource: str, value: str, side: str, pods: WorkloadPods | None) -> str | None:
    """What to set so that a pod's ``side`` (request or limit) of ``resource`` is within a
    LimitRange's ``bound`` (minimum or maximum) ``value``; None for a resource no spec field sets."""
    fields = _FIELDS[pods.workload if pods is not None else "serving"].get(resource)
    if fields is None:
        return None
    request_field, limit_field = fields
    cpu_limit_set = pods is not None and bool(pods.cpu_limit)
    if resource == "cpu" and bound == "maximum" and pods is not None and _below(value, pods.cpu_request):
        # A CPU limit at most the maximum would be below the request, which the API server refuses
        # too: only a smaller request (or another LimitRange) lets a pod in.
        return (
            f"set {request_field} to at most {value} (the request is {pods.cpu_request}: a {limit_field} "
            "between the request and the maximum cannot exist)"
        )
    if resource == "cpu" and side == "limit" and bound == "maximum" and not cpu_limit_set:
        # The pods set no CPU limit of their own: the LimitRange gave them its default, or none.
        return f"set {limit_field} to at most {value} (and at least the request)"
    field = limit_field if side == "limit" else request_field
    return f"set {field} to {'at most' if bound == 'maximum' else 'at least'} {value}"


def _below(quantity: str, other: str) -> bool:
    """Whether CPU ``quantity`` is known to be less than ``other``."""
    mine, theirs = _cores(quantity), _cores(other)
    return mine is not None and theirs is not None and mine < theirs


def _limit_ranger_refusal(message: str, pods: WorkloadPods | None) -> Refusal | None:
    """The LimitRanger's refusals in ``message``, named with the fields that set what they compare."""
    said: list[str] = []
    fixes: list[str] = []
    workload: Workload = pods.workload if pods is not None else "serving"
    for found in _LIMIT_RANGER_BOUND.finditer(message):
        # Per Container or per Pod: the operator's pods have one container, so the same fields set both.
        bound, resource, value, side = found.group(1).lower(), found.group(2), found.group(4), found.group(5)
        said.append(found.group(0))
        fixes.append(_bound_fix(bound, resource, value, side or found.group(7), pods) or "")
    for found in _LIMIT_RANGER_RATIO.finditer(message):
        said.append(found.group(0))
        if found.group(1) == "cpu":
            fixes.append(f"set {_FIELDS[workload]['cpu'][1]} to at most {found.group(3)} times the CPU request")
    if not said:
        return None
    where, describe = _limit_range_where(pods)
    if pods is None:
        request, whom = "", "the serving pods"
    elif workload == "serving":
        request, whom = (
            f" (each replica requests {pods.cpu_request} CPU: {pods.cpu_request_origin})",
            "the serving pods",
        )
    else:
        request, whom = f" (it requests {pods.cpu_request} CPU: {pods.cpu_request_origin})", "the compile Job's pod"
    steps = [*dict.fromkeys(fix for fix in fixes if fix), "change the LimitRange"]
    fix = steps[0] if len(steps) == 1 else f"{', '.join(steps[:-1])}, or {steps[-1]}"
    return Refusal(
        Reason.LIMIT_RANGE_REFUSED,
        f"a LimitRange in {where} refuses {whom}: {'; '.join(said)}{request}; so {_NOT_MADE[workload]} "
        f"({describe}): {fix}",
    )


def _quota_fix(message: str, pods: WorkloadPods | None) -> str:
    """What to do about a ResourceQuota's refusal in ``message`` (empty: not one): the spec fields
    that set what the quota counts, and the command that shows the quota."""
    workload: Workload = pods.workload if pods is not None else "serving"
    namespace = pods.namespace if pods is not None and pods.namespace else "<namespace>"
    if found := _QUOTA_MUST_SPECIFY.search(message):
        # The quota caps a resource the pod sets no value of: only a CPU limit is ever left unset.
        fields = [
            _FIELDS[workload][resource][1 if side == "limits" else 0]
            for side, resource in _QUOTA_RESOURCE.findall(found.group(2))
        ]
        named = " and ".join(dict.fromkeys(fields))
        if not named:
            return ""
        return (
            f" (ResourceQuota {found.group(1)} caps what the pod leaves unset: set {named}; kubectl describe "
            f"resourcequota {found.group(1)} -n {namespace})"
        )
    if found := _QUOTA_EXCEEDED.search(message):
        fields = [
            _FIELDS[workload][resource][1 if side == "limits" else 0]
            for side, resource in _QUOTA_RESOURCE.findall(found.group(2))
        ]
        lower = f"lower {' or '.join(dict.fromkeys(fields))}, or " if fields else ""
        return (
            f" (the pod would take the namespace over ResourceQuota {found.group(1)}: {lower}raise the quota or "
            f"free some of it; kubectl describe resourcequota {found.group(1)} -n {namespace})"
        )
    return ""


def _named_refusal(message: str, account: WorkloadAccount, pods: WorkloadPods | None) -> Refusal | None:
    """A refusal the operator knows by its words in ``message`` (the API server's, quotes unescaped
    or not), named with the fields of ``pods``' workload; None for any other."""
    if found := _REQUEST_ABOVE_CPU_LIMIT.search(message):
        return _default_cpu_limit_refusal(found, pods)
    if limit_range := _limit_ranger_refusal(message, pods):
        return limit_range
    if found := _PRIORITY_CLASS_NOT_FOUND.search(message):
        return Refusal(
            Reason.PRIORITY_CLASS_MISSING,
            f"PriorityClass {found.group(1)} does not exist, so no pod naming it can be created: "
            "install the chart's PriorityClasses (priorityClasses.create) or create it",
        )
    if found := _ACCOUNT_NOT_FOUND.search(message):
        namespace, name = found.group(1), found.group(2)
        return Refusal(Reason.SERVICE_ACCOUNT_MISSING, missing_account_message(account, namespace, name))
    return None


def refusal_for(
    status: int, answer: str, serving: WorkloadAccount, shown: str = "", pods: WorkloadPods | None = None
) -> Refusal | None:
    """Why the API server refused a serving pod or placeholder (``status`` 403 or 422, ``answer``
    its body), named when the refusal is one the operator knows, else in its words (``shown``: the
    answer as the status shows it); None for another status. ``pods``: the pods' namespace and CPU,
    which a LimitRange's refusal is explained with."""
    if status not in (403, 422):
        return None
    message = _status_message(answer)
    named = _named_refusal(message, serving, pods)
    if named is not None:
        return named
    return Refusal(
        Reason.POD_CREATION_REFUSED, f"the API server refused a pod: {shown or answer[:300]}{_quota_fix(message, pods)}"
    )


def failed_create_refusal(event_message: str) -> str:
    """The API server's refusal in a Job controller's FailedCreate Event message."""
    message = event_message.strip()
    message = message.removeprefix(_COMBINED_PREFIX)
    return message.removeprefix(_FAILED_CREATE_PREFIX)


def compile_refusal(event_message: str, account: WorkloadAccount, pods: WorkloadPods) -> Refusal:
    """Why the API server refuses the compile Job's pod, from the Job's newest FailedCreate Event
    (``event_message``): named as :func:`refusal_for` names a serving pod's refusal, with the
    spec.compile fields (``pods``: :func:`compile_pods`), else quoting the API server."""
    message = failed_create_refusal(event_message)
    named = _named_refusal(message, account, pods)
    if named is not None:
        return named
    return Refusal(
        Reason.POD_CREATION_REFUSED,
        f"the API server refuses the compile Job's pod, so {_NOT_MADE['compile']}: {message[:400]}"
        f"{_quota_fix(message, pods)}",
    )


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
