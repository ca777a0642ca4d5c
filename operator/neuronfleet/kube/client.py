"""The operator's Kubernetes API adapter: the few reads and writes a reconcile needs.

A thin layer over kubernetes_asyncio that speaks plain dicts (the builders in ``kube.builders``
produce dicts, the planners read dicts), treats the idempotent outcomes of a retried reconcile as
success (409 on create: the object is there already; 404 on delete: it is gone already), and
diffs before it patches so that an unchanged fleet costs reads only. A spec field the API server
drops from a patch (one it does not know, on an older Kubernetes) is left out of later diffs, so it
does not cost a write every reconcile.

It is created once at operator start-up and passed to the handlers through Kopf's ``memo``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol, cast

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from neuronfleet.api.v1alpha1 import GROUP, PLURAL, VERSION
from neuronfleet.planning.labels import selector_string

logger = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
#: Seconds one API call may take, answer read included. kubernetes_asyncio sets no timeout of its
#: own: a connection gone silent (a control-plane failover) would hold the reconcile, and the
#: object's lock, forever. A timed-out call fails the reconcile, which is retried.
REQUEST_TIMEOUT_SECONDS = 30.0
#: What a call that got no answer raises (the API server silent, refusing connections, hanging up),
#: besides ApiException for an answer that is an error. Either may come from any call: a caller
#: that goes on after one failed call catches all three.
UNANSWERED: tuple[type[Exception], ...] = (TimeoutError, ConnectionError)
#: Connections the operator's client keeps beside one per reconcile running at once: for the Events
#: a reconcile posts together once it has left its slot, the shared node list and the peering
#: checks. The pool was kubernetes_asyncio's default of 100 whatever --max-concurrent-reconciles
#: said, and a call's :data:`REQUEST_TIMEOUT_SECONDS` includes waiting for a pooled connection: with
#: more reconciles than connections, the extra ones spent their budget queued and timed out.
CONNECTIONS_BESIDE_RECONCILES = 100


def connection_pool_size(max_concurrent_reconciles: int) -> int:
    """The connections the operator's client may open to the API server at once."""
    return max_concurrent_reconciles + CONNECTIONS_BESIDE_RECONCILES


Obj = dict[str, Any]
#: Who posts the operator's Events: the "From" of ``kubectl describe``.
EVENT_COMPONENT = "neuronfleet"
#: An Event's message is cut to this (the API server refuses longer notes of events.k8s.io).
EVENT_MESSAGE_MAX = 1000


@dataclass(frozen=True)
class JobDeletion:
    """What a Job's DELETE came to (see :meth:`KubeClient.delete_job`)."""

    outcome: Literal["deleted", "held", "gone"]
    #: The finalizers that keep a ``held`` Job.
    finalizers: tuple[str, ...] = ()
    #: The ``held`` Job's uid (what its pods' controller reference names).
    uid: str = ""


class KubeApi(Protocol):
    """The reads and writes a reconcile makes (what :class:`KubeClient` implements; tests may fake it)."""

    async def list_pods(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]: ...
    async def list_nodes(self, fresh: bool = False) -> list[Obj]: ...
    async def list_jobs(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]: ...
    async def pod_log_tail(self, namespace: str, name: str, lines: int = 20) -> str: ...
    async def list_events(self, namespace: str, fields: Mapping[str, str]) -> list[Obj]: ...
    async def post_event(self, involved: Obj, type_: str, reason: str, message: str) -> bool: ...
    async def create(self, obj: Obj) -> bool: ...
    async def patch_pod_metadata(
        self, namespace: str, name: str, labels: Mapping[str, str | None], annotations: Mapping[str, str | None]
    ) -> bool: ...
    async def delete_pod(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> bool: ...
    async def delete_job(self, namespace: str, name: str) -> JobDeletion: ...
    async def read(self, kind: str, namespace: str, name: str) -> Obj | None: ...
    async def ensure(self, obj: Obj, current: Obj | None) -> str: ...
    async def patch_status(
        self, namespace: str, name: str, patch: Obj, resource_version: str | None = None
    ) -> str | None: ...
    async def close(self) -> None: ...


def kubeconfig_files(kubeconfig: str | os.PathLike[str] | None = None) -> list[Path] | None:
    """The kubeconfig files :func:`load_configuration` reads: ``kubeconfig``, else each file of
    ``$KUBECONFIG`` (a list separated by ``os.pathsep``, merged as kubectl merges it), else
    ``~/.kube/config``; None in a pod without ``kubeconfig`` (the service account)."""
    if kubeconfig is not None:
        return [Path(kubeconfig).expanduser()]
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    listed = [Path(part).expanduser() for part in os.environ.get("KUBECONFIG", "").split(os.pathsep) if part]
    return listed or [Path.home() / ".kube" / "config"]


async def load_configuration(kubeconfig: str | os.PathLike[str] | None = None) -> client.Configuration:
    """Where the cluster is and how to authenticate, read afresh (tokens from exec plugins expire),
    from the files :func:`kubeconfig_files` names, or the service account's."""
    configuration = client.Configuration()
    files = kubeconfig_files(kubeconfig)
    if files is None:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        # The client merges a list joined as $KUBECONFIG joins it (the files that exist).
        await config.load_kube_config(
            config_file=os.pathsep.join(str(f) for f in files), client_configuration=configuration
        )
    return configuration


class KubeClient:
    """Async access to pods, nodes, services, PDBs, jobs and InferenceDeployments."""

    #: How old a node list may be when reused (a lost node is noticed within this).
    NODE_CACHE_SECONDS = 5.0

    def __init__(self, api_client: client.ApiClient, request_timeout: float = REQUEST_TIMEOUT_SECONDS) -> None:
        self.api_client = api_client
        self.request_timeout = request_timeout
        # Typed as Any: the generated stubs omit the `_content_type` / `_preload_content` keywords
        # that the methods accept, and every result here is a raw response read as a dict.
        self.core: Any = client.CoreV1Api(api_client)
        self.policy: Any = client.PolicyV1Api(api_client)
        self.batch: Any = client.BatchV1Api(api_client)
        self.custom: Any = client.CustomObjectsApi(api_client)
        self._nodes: tuple[float, list[Obj]] | None = None
        #: The node list under way, which every reconcile needing one meanwhile waits for.
        self._nodes_call: asyncio.Task[list[Obj]] | None = None
        #: How many node lists have been sent, and which of them the one under way is (None: not
        #: sent yet), so that a ``fresh`` caller shares only a list sent after it asked.
        self._nodes_sent = 0
        self._nodes_call_sent: int | None = None
        #: Per kind, top-level spec fields the API server dropped from a patch (see :meth:`ensure`).
        self.dropped_spec_fields: dict[str, set[str]] = {}
        #: The Events' reportingInstance: this replica (its pod's name in a cluster).
        self.instance = (os.environ.get("HOSTNAME") or EVENT_COMPONENT)[:128]

    @classmethod
    async def connect(
        cls, kubeconfig: str | os.PathLike[str] | None = None, connections: int | None = None
    ) -> KubeClient:
        """In a pod: the service account. Elsewhere: ``kubeconfig`` or ``$KUBECONFIG``.

        ``connections``: the most open at once (None: kubernetes_asyncio's default, 100); see
        :func:`connection_pool_size`.
        """
        configuration = await load_configuration(kubeconfig)
        if connections is not None:
            configuration.connection_pool_maxsize = connections
        return cls(client.ApiClient(configuration))

    async def close(self) -> None:
        await self.api_client.close()

    # ------------------------------------------------------------------------------------ reading

    async def _json(self, call: Any) -> Obj:
        """Await a raw (``_preload_content=False``) call; raise ApiException on an error status,
        TimeoutError past :attr:`request_timeout` and ConnectionError when the API server cannot be
        reached (see :data:`UNANSWERED`).

        kubernetes_asyncio raises for error statuses only when it preloads the content itself.
        """
        try:
            async with asyncio.timeout(self.request_timeout):
                response = await call
                try:
                    data = await response.read()
                finally:
                    response.release()
        except TimeoutError:
            # asyncio's TimeoutError says nothing; this reaches the operator's log and a Warning Event.
            raise TimeoutError(f"the Kubernetes API did not answer within {self.request_timeout:g} s") from None
        except aiohttp.ClientError as exc:
            # aiohttp's own classes (a refused connection, a reset) are no ConnectionError.
            raise ConnectionError(f"the Kubernetes API could not be reached: {exc or type(exc).__name__}") from exc
        if not 200 <= response.status <= 299:
            error = ApiException(status=response.status, reason=response.reason or "")
            error.body = data.decode(errors="replace")
            raise error
        return cast(Obj, json.loads(data))

    async def list_pods(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
        doc = await self._json(
            self.core.list_namespaced_pod(namespace, label_selector=selector_string(labels), _preload_content=False)
        )
        return cast(list[Obj], doc.get("items", []))

    async def list_nodes(self, fresh: bool = False) -> list[Obj]:
        """The cluster's nodes, read at most once per :attr:`NODE_CACHE_SECONDS` for all deployments
        (``fresh``: read now).

        Every reconcile needs them (zones, lost nodes) and they are the same for every object: at
        a thousand deployments, one list per reconcile would be most of the operator's work.

        Reconciles that need a list while one is under way wait for that one and share its answer
        or its failure: with a lock held across the call, when the API server went silent the k-th
        waiter failed after k timeouts. A ``fresh`` caller shares only a list sent after it asked:
        one sent before may predate the pod that made it ask (a pod bound to a node that joined
        meanwhile would be judged on a lost node and force-deleted), so it waits for that one to
        end and then shares (or makes) a newer one. A failure is not kept, nor handed to a caller
        arriving once the call has ended. A waiter cancelled (its daemon stopping) leaves the call
        to the others.
        """
        now = asyncio.get_running_loop().time()  # the loop's clock: fake time in looptime tests
        if not fresh and self._nodes is not None and now - self._nodes[0] < self.NODE_CACHE_SECONDS:
            return self._nodes[1]
        asked = self._nodes_sent
        while True:
            call = self._nodes_call
            if call is None or call.done():
                # Done: an outcome its callback has yet to drop (a failure is not kept), not a call
                # under way, so a caller in the same loop step calls again.
                call = self._nodes_call = asyncio.ensure_future(self._read_nodes())
                self._nodes_call_sent = None
                call.add_done_callback(self._nodes_read)
            elif fresh and self._nodes_call_sent is not None and self._nodes_call_sent <= asked:
                await asyncio.wait({call})  # its outcome is not this caller's to share
                continue
            return await asyncio.shield(call)

    async def _read_nodes(self) -> list[Obj]:
        self._nodes_sent += 1
        self._nodes_call_sent = self._nodes_sent
        sent_at = asyncio.get_running_loop().time()
        doc = await self._json(self.core.list_node(_preload_content=False))
        nodes = cast(list[Obj], doc.get("items", []))
        self._nodes = (sent_at, nodes)
        return nodes

    def _nodes_read(self, call: asyncio.Task[list[Obj]]) -> None:
        if self._nodes_call is call:
            self._nodes_call = None
        if not call.cancelled():
            call.exception()  # retrieved: every waiter may have been cancelled

    async def list_jobs(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
        doc = await self._json(
            self.batch.list_namespaced_job(namespace, label_selector=selector_string(labels), _preload_content=False)
        )
        return cast(list[Obj], doc.get("items", []))

    async def list_events(self, namespace: str, fields: Mapping[str, str]) -> list[Obj]:
        """core/v1 Events in ``namespace`` whose fields equal ``fields`` (a field selector: the API
        server filters, so only the matching Events cross the wire)."""
        selector = ",".join(f"{key}={value}" for key, value in fields.items())
        doc = await self._json(
            self.core.list_namespaced_event(namespace, field_selector=selector, _preload_content=False)
        )
        return cast(list[Obj], doc.get("items", []))

    async def pod_log_tail(self, namespace: str, name: str, lines: int = 20) -> str:
        try:
            async with asyncio.timeout(self.request_timeout):
                response = await self.core.read_namespaced_pod_log(
                    name, namespace, tail_lines=lines, _preload_content=False
                )
                try:
                    data: bytes = await response.read()
                    return data.decode(errors="replace") if response.status == 200 else ""
                finally:
                    response.release()
        except (ApiException, TimeoutError, aiohttp.ClientError):
            return ""  # the log only adds detail to a failed Job's message

    # ------------------------------------------------------------------------------------ writing

    async def post_event(self, involved: Obj, type_: str, reason: str, message: str) -> bool:
        """Post a core/v1 Event about ``involved`` (an object as read), shown by ``kubectl describe``
        from ``neuronfleet``. False, logged, when the API server refuses it or does not answer, or
        the client fails otherwise: an Event is a note, never worth failing a reconcile over.

        Awaited, where Kopf's ``kopf.event`` queues it for a poster task that Kopf cancels at once
        when the operator stops: the Event of a write made just before a SIGTERM was lost.
        """
        meta = involved.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion", ""),
                "kind": involved.get("kind", ""),
                "name": meta.get("name", ""),
                "namespace": namespace,
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "type": type_,
            "reason": reason,
            "message": message[:EVENT_MESSAGE_MAX],
            "source": {"component": EVENT_COMPONENT},
            "reportingComponent": EVENT_COMPONENT,
            "reportingInstance": self.instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self._json(self.core.create_namespaced_event(namespace, body, _preload_content=False))
        except Exception as exc:  # any failure; CancelledError (no Exception) still stops it
            # Not only the API's answers: the client's own failures too (a closed session's
            # RuntimeError, a credentials refresh's ConfigException or OSError) came through and
            # failed a reconcile whose writes had landed, or ended an object's daemon.
            if isinstance(exc, ApiException):
                detail = f"HTTP {exc.status}: {exc.reason}"
            elif isinstance(exc, (*UNANSWERED, aiohttp.ClientError)):
                detail = type(exc).__name__
            else:
                detail = f"{type(exc).__name__}: {exc}"
            logger.warning(
                "Event %s of %s/%s not posted (%s): %s", reason, namespace, meta.get("name"), detail, message
            )
            return False
        return True

    async def create(self, obj: Obj) -> bool:
        """Create a namespaced object. False when it exists already (a retried create)."""
        kind, namespace = obj["kind"], obj["metadata"]["namespace"]
        creators: dict[str, Any] = {
            "Pod": self.core.create_namespaced_pod,
            "Service": self.core.create_namespaced_service,
            "PodDisruptionBudget": self.policy.create_namespaced_pod_disruption_budget,
            "Job": self.batch.create_namespaced_job,
        }
        try:
            await self._json(creators[kind](namespace, obj, _preload_content=False))
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def patch_pod_metadata(
        self, namespace: str, name: str, labels: Mapping[str, str | None], annotations: Mapping[str, str | None]
    ) -> bool:
        """Merge labels/annotations into a pod (None removes a key). False if the pod is gone."""
        body = {"metadata": {"labels": dict(labels), "annotations": dict(annotations)}}
        try:
            await self._json(
                self.core.patch_namespaced_pod(name, namespace, body, _content_type=MERGE_PATCH, _preload_content=False)
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def delete_pod(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> bool:
        """Delete a pod. False when it is gone already."""
        try:
            await self._json(
                self.core.delete_namespaced_pod(
                    name, namespace, grace_period_seconds=grace_period_seconds, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def delete_job(self, namespace: str, name: str) -> JobDeletion:
        """Delete a Job (its pods by the garbage collector): ``deleted``; ``held`` when the answer
        shows it stays, with a deletionTimestamp and finalizers (another controller's), with those
        finalizers' names; ``gone`` when it was gone already.

        The answer alone cannot tell the first DELETE of a held Job from a repeated one (Kubernetes
        returns the held object either way): a Job seen with a deletionTimestamp is not deleted again.
        """
        try:
            answer = await self._json(
                self.batch.delete_namespaced_job(
                    name, namespace, propagation_policy="Background", _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return JobDeletion("gone")
            raise
        meta = answer.get("metadata") or {}
        if meta.get("deletionTimestamp") and meta.get("finalizers"):
            return JobDeletion("held", tuple(str(f) for f in meta["finalizers"]), str(meta.get("uid") or ""))
        return JobDeletion("deleted")

    async def ensure(self, obj: Obj, current: Obj | None) -> str:
        """Create ``obj`` or bring the live one's spec and labels to it; says what it did.

        Diffs first: an object already as wanted costs no write.
        """
        if current is None:
            return "created" if await self.create(obj) else "unchanged"
        kind, namespace, name = obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]
        dropped = self.dropped_spec_fields.get(kind, set())
        wanted_spec = {key: value for key, value in obj.get("spec", {}).items() if key not in dropped}
        live_spec = current.get("spec", {})
        wanted_labels = obj["metadata"].get("labels", {})
        live_labels = current.get("metadata", {}).get("labels", {})
        exact = [key for key in EXACT_SPEC_FIELDS.get(kind, ()) if key in wanted_spec]
        stale = [key for key in UNSET_SPEC_FIELDS.get(kind, ()) if key not in wanted_spec and key in live_spec]
        if (
            _contains(live_spec, wanted_spec)
            and _contains(live_labels, wanted_labels)
            and all(live_spec.get(key) == wanted_spec[key] for key in exact)
            and not stale
        ):
            return "unchanged"
        spec: dict[str, Any] = dict(wanted_spec)
        spec.update(dict.fromkeys(stale))  # null: a merge patch removes them
        for key in exact:
            spec[key] = _merge_patch(live_spec.get(key), wanted_spec[key])
        body = {"metadata": {"labels": wanted_labels}, "spec": spec}
        patchers: dict[str, Any] = {
            "Service": self.core.patch_namespaced_service,
            "PodDisruptionBudget": self.policy.patch_namespaced_pod_disruption_budget,
        }
        patched = await self._json(
            patchers[kind](name, namespace, body, _content_type=MERGE_PATCH, _preload_content=False)
        )
        unknown = set(wanted_spec) - set(patched.get("spec") or {})
        if unknown:
            # Sent and not kept: the API server does not know the field (e.g. a PodDisruptionBudget's
            # unhealthyPodEvictionPolicy before Kubernetes 1.27). Compared again, it would differ forever.
            self.dropped_spec_fields.setdefault(kind, set()).update(unknown)
            logger.warning(
                "the API server dropped %s spec field(s) %s (an older Kubernetes?): no longer set or compared",
                kind,
                ", ".join(sorted(unknown)),
            )
        return "updated"

    async def read(self, kind: str, namespace: str, name: str) -> Obj | None:
        readers: dict[str, Any] = {
            "Pod": self.core.read_namespaced_pod,
            "Service": self.core.read_namespaced_service,
            "PodDisruptionBudget": self.policy.read_namespaced_pod_disruption_budget,
            "ServiceAccount": self.core.read_namespaced_service_account,
            # Read again when a status write meets 409 Conflict (the object changed since the watch).
            "InferenceDeployment": lambda name, namespace, **kwargs: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, **kwargs
            ),
        }
        try:
            return await self._json(readers[kind](name, namespace, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def patch_status(
        self, namespace: str, name: str, patch: Obj, resource_version: str | None = None
    ) -> str | None:
        """Merge-patch the status subresource (a null in ``patch`` removes that field); the
        resourceVersion the write made.

        With ``resource_version`` the API server applies it only to that version of the object and
        answers 409 Conflict otherwise: the patch replaces ``conditions`` whole, so one made from an
        older copy would drop a condition another controller added since.

        An empty ``patch`` sends no ``status`` at all: ``{"status": {}}`` would add an empty status to
        an object that has none, a write. With ``resource_version`` it then only checks the object is
        at that version (see :meth:`~neuronfleet.reconcile.Reconciler._write_status`).
        """
        body: Obj = {"status": patch} if patch else {}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        answer = await self._json(
            self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                body,
                _content_type=MERGE_PATCH,
                _preload_content=False,
            )
        )
        version = (answer.get("metadata") or {}).get("resourceVersion")
        return str(version) if version else None


#: Spec fields of a child compared exactly, not as "contains": the API server adds nothing to a
#: selector, so a key found there that the builder does not set was added by someone else (and a
#: widened selector selects no pod). The patch removes it.
EXACT_SPEC_FIELDS: dict[str, tuple[str, ...]] = {"Service": ("selector",), "PodDisruptionBudget": ("selector",)}
#: Spec fields that must not be live when the wanted object leaves them out: a PDB takes either
#: minAvailable or maxUnavailable, so one written by an older operator must lose the other.
UNSET_SPEC_FIELDS: dict[str, tuple[str, ...]] = {"PodDisruptionBudget": ("minAvailable", "maxUnavailable")}


def _merge_patch(live: Any, wanted: Any) -> Any:
    """The merge patch that makes ``live`` equal to ``wanted``: its values, and null for every key of
    a map that only ``live`` has (a merge patch of a map otherwise only adds keys)."""
    if not isinstance(wanted, dict) or not isinstance(live, dict):
        return wanted
    patch: dict[str, Any] = {key: _merge_patch(live.get(key), value) for key, value in wanted.items()}
    patch.update({key: None for key in live if key not in wanted})
    return patch


def _contains(live: Any, wanted: Any) -> bool:
    """Whether every field of ``wanted`` has its value in ``live`` (the API server adds defaults)."""
    if isinstance(wanted, dict):
        return isinstance(live, dict) and all(_contains(live.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list):
        if not isinstance(live, list) or len(live) != len(wanted):
            return False
        return all(_contains(a, b) for a, b in zip(live, wanted, strict=True))
    return bool(live == wanted)
