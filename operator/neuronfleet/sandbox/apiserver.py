"""The HTTP front of the emulated Kubernetes API: routing, verbs, discovery, OpenAPI, watch streams.

Written on aiohttp.web rather than as a ``kmock.KubernetesEmulator`` subclass. Measured against
KMock 0.8 (see shared TESTING.md), a subclass would have had to replace its request parsing
(``/api/v1/namespaces`` answers 500), its state changes (done inside ``_handle`` with private,
name-mangled helpers, plain dict merging, no resourceVersion), its watch bus (no history, so no
resume and no 410), its list/create/delete responses and its discovery: every part but the
HTTP server. Owning the core keeps each Kubernetes rule in one place (``store.Store``) and avoids
the per-request DSL filter walk, which matters for the one-hour churn benchmark.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web
from multidict import CIMultiDict

from neuronfleet.api.validation import ManifestLoader, go_json
from neuronfleet.sandbox import errors, protobuf
from neuronfleet.sandbox.disruption import check_eviction, mark_evicted
from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.managedfields import Manager
from neuronfleet.sandbox.openapi import document_hash, group_version_document, gv_path, swagger_document
from neuronfleet.sandbox.patching import json_patch, merge_patch, strategic_merge_patch
from neuronfleet.sandbox.protobuf import ProtobufUnsupported
from neuronfleet.sandbox.resources import REVIEWS, ResourceType, json_path_value, set_json_path
from neuronfleet.sandbox.selectors import (
    FieldRequirement,
    FieldSelector,
    parse_field_selector,
    parse_label_selector,
)
from neuronfleet.sandbox.store import Obj, Store, Watcher
from neuronfleet.sandbox.tables import to_table

log = logging.getLogger(__name__)

KUBERNETES_VERSION = {
    "major": "1",
    "minor": "34",
    "gitVersion": "v1.34.0-neuronfleet-sandbox",
    "platform": "linux/amd64",
}
BOOKMARK_INTERVAL_S = 60.0
#: How long ``stop`` lets requests still being served finish before it cancels them (aiohttp's
#: default, 60 s, held a Ctrl-C of ``sandbox up``). Open watches are ended first, at once.
SHUTDOWN_GRACE_S = 5.0
_TRUE = {"true", "1", "True", "yes"}
#: Queued to a watch stream to end it (``ApiServer.stop``): never an event the store sends.
_END_OF_STREAM: tuple[str, Obj] = ("", {})


@dataclass
class RequestRecord:
    """One API request, as an audit log would record it (the RBAC test reads these)."""

    method: str
    path: str
    verb: str = ""
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    code: int = 0
    user_agent: str = ""


@dataclass
class Target:
    rt: ResourceType
    version: str
    namespace: str | None
    name: str | None
    subresource: str | None


def _json(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def _warning_headers(warnings: list[str] | None) -> CIMultiDict[str] | None:
    """``Warning: 299 - "<text>"`` headers (RFC 7234), one per warning, as kube-apiserver sends them."""
    if not warnings:
        return None
    headers: CIMultiDict[str] = CIMultiDict()
    for text in dict.fromkeys(warnings):
        headers.add("Warning", "299 - " + json.dumps(text))
    return headers


def _status_success(details: dict[str, Any] | None = None, code: int = 201) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": code,
        **({"details": details} if details else {}),
    }


class ApiServer:
    """aiohttp application serving ``store`` as the Kubernetes REST API."""

    def __init__(self, store: Store, *, request_log_size: int = 100_000) -> None:
        self.store = store
        self.clock = store.clock
        self.request_log: deque[RequestRecord] = deque(maxlen=request_log_size)
        self.app = web.Application(client_max_size=16 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.port = 0
        #: Container log lines per pod uid, served by ``pods/log`` (the kubelet and tests append).
        self.pod_logs: dict[str, list[str]] = {}
        #: Requests RBAC would deny, as (API group, resource, verb): answered 403 in kube-apiserver's
        #: words. The sandbox authorizes everything else (it has no RBAC); tests use this to run the
        #: operator as a role without a permission (an older chart's) would.
        self.denied: set[tuple[str, str, str]] = set()
        #: The open watch streams' subscriptions: ``stop`` ends them (see there).
        self._streams: set[Watcher] = set()

    @property
    def open_watches(self) -> int:
        """Watch streams being served now."""
        return len(self._streams)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        # handler_cancellation: a client dropping a watch ends its handler (and its subscription).
        self._runner = web.AppRunner(
            self.app, handler_cancellation=True, access_log=None, shutdown_timeout=SHUTDOWN_GRACE_S
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self.url = f"http://{host}:{self.port}"
        return self.url

    async def stop(self) -> None:
        """End every open watch stream (the client reads its end, as when kube-apiserver's watch
        timeout ends one), then stop serving.

        A watch never ends by itself (``kubectl get -w``, an operator's watches): aiohttp's cleanup
        would wait for each open handler up to its shutdown timeout (60 s, and once more for the
        site), so a Ctrl-C of ``sandbox up`` hung for minutes while a watch was open.
        """
        for watcher in self._streams:
            watcher.queue.put_nowait(_END_OF_STREAM)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ---- entry -----------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        record = RequestRecord(
            method=request.method, path=request.path, user_agent=request.headers.get("User-Agent", "")
        )
        self.request_log.append(record)
        try:
            response = await self._dispatch(request, record)
        except ApiError as exc:
            response = _json(exc.status_body(), exc.code)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("sandbox apiserver: internal error on %s %s", request.method, request.path_qs)
            response = _json(ApiError(500, "InternalError", f"Internal error occurred: {exc!r}").status_body(), 500)
        record.code = response.status
        return response

    async def _dispatch(self, request: web.Request, record: RequestRecord) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if not parts:
            return _json({"paths": sorted(self._root_paths())})
        head = parts[0]
        if head == "version":
            return _json(KUBERNETES_VERSION)
        if head in ("healthz", "livez", "readyz") and len(parts) == 1:
            return web.Response(text="ok")
        if head == "openapi":
            return self._openapi(parts[1:], request.headers.get("Accept", ""))
        if head == "api":
            if len(parts) == 1:
                return _json(
                    {
                        "kind": "APIVersions",
                        "versions": ["v1"],
                        "serverAddressByClientCIDRs": [
                            {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.port}"}
                        ],
                    }
                )
            group, version, rest = "", parts[1], parts[2:]
        elif head == "apis":
            if len(parts) == 1:
                return _json(self._group_list())
            if len(parts) == 2:
                return _json(self._group(parts[1]))
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.resource_not_found(request.path)
        record.group, record.version = group, version
        if not rest:
            return _json(self._resource_list(group, version, request.path))
        target = self._parse_target(group, version, rest, request.path)
        record.resource = target.rt.plural
        record.namespace = target.namespace or ""
        record.name = target.name or ""
        record.subresource = target.subresource or ""
        return await self._serve(request, target, record)

    def _parse_target(self, group: str, version: str, rest: list[str], path: str) -> Target:
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
            namespace, rest = rest[1], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        subresource = "/".join(rest[2:]) or None
        rt = self.store.find(group, version, plural)
        if rt is None:
            raise errors.resource_not_found(path)
        if namespace is not None and not rt.namespaced:
            raise errors.resource_not_found(path)
        if (
            subresource is not None
            and subresource not in rt.subresources
            and not (rt.key == ("", "namespaces") and subresource == "finalize")
        ):
            raise errors.resource_not_found(path)
        return Target(rt, version, namespace, name, subresource)

    # ---- verbs -----------------------------------------------------------------------------------

    async def _serve(self, request: web.Request, target: Target, record: RequestRecord) -> web.StreamResponse:
        record.verb = self._verb(request, target)
        self._authorize(target, record.verb)
        verb = record.verb
        if verb == "watch":
            return await self._watch(request, target)
        if verb == "list":
            return self._list(request, target)
        if verb == "get":
            return self._log(request, target) if target.subresource == "log" else self._get(request, target)
        if verb == "create":
            return await self._create(request, target)
        if verb == "update":
            return await self._replace(request, target)
        if verb == "patch":
            return await self._patch(request, target)
        if verb == "delete":
            return await self._delete(request, target)
        return await self._delete_collection(request, target)

    @staticmethod
    def _verb(request: web.Request, target: Target) -> str:
        """The verb RBAC checks for the request (what an audit log records)."""
        method = request.method
        if method == "GET" and request.query.get("watch", "") in _TRUE:
            return "watch"
        if method == "GET":
            return "list" if target.name is None else "get"
        if method == "POST" and (target.name is None or target.subresource in ("binding", "eviction")):
            return "create"
        if method == "PUT" and target.name is not None:
            return "update"
        if method == "PATCH" and target.name is not None:
            return "patch"
        if method == "DELETE":
            return "delete" if target.name is not None else "deletecollection"
        raise errors.method_not_allowed()

    def _authorize(self, target: Target, verb: str) -> None:
        """RBAC's refusal of a request :attr:`denied` names (the authorizer's reason, as kubectl shows it)."""
        if (target.rt.group, target.rt.plural, verb) not in self.denied:
            return
        where = f' in the namespace "{target.namespace}"' if target.namespace else " at the cluster scope"
        raise errors.forbidden(
            f'{target.rt.plural} is forbidden: User "system:anonymous" cannot {verb} resource "{target.rt.plural}" '
            f'in API group "{target.rt.group}"{where}'
        )

    def _versioned(self, target: Target, obj: Obj) -> Obj:
        api_version = target.rt.api_version(target.version)
        if obj.get("apiVersion") == api_version:
            return obj
        return {**obj, "apiVersion": api_version}

    def _wants_table(self, request: web.Request) -> bool:
        return "as=Table" in request.headers.get("Accept", "")

    def _selectors(self, request: web.Request, target: Target) -> tuple[Any, FieldSelector]:
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(request.query.get("fieldSelector"), target.rt.field_labels)
        if target.name is not None:
            fields = FieldSelector((*fields.requirements, FieldRequirement("metadata.name", target.name, False)))
        return labels, fields

    def _list(self, request: web.Request, target: Target) -> web.Response:
        labels, fields = self._selectors(request, target)
        items, rv = self.store.list(target.rt, target.namespace, labels, fields)
        items, list_meta = self._paginate(request, items)
        items = [self._versioned(target, obj) for obj in items]
        if self._wants_table(request):
            table = to_table(target.rt, items, self.clock, request.query.get("includeObject", ""), str(rv))
            table["metadata"].update(list_meta)
            return _json(table)
        return _json(
            {
                "kind": target.rt.list_kind,
                "apiVersion": target.rt.api_version(target.version),
                "metadata": {"resourceVersion": str(rv), **list_meta},
                "items": items,
            }
        )

    def _paginate(self, request: web.Request, items: list[Obj]) -> tuple[list[Obj], dict[str, Any]]:
        """``limit``/``continue``: pages in (namespace, name) order; a token resumes after its key.

        Pages come from the current state, not a snapshot at the first page's resourceVersion.
        """
        query = request.query
        token = query.get("continue", "")
        if token:
            try:
                after = tuple(json.loads(base64.urlsafe_b64decode(token.encode()).decode()))
            except (ValueError, TypeError):
                raise errors.bad_request(f"continue key is not valid: {token!r}") from None
            items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > after]
        try:
            limit = int(query.get("limit", "0") or 0)
        except ValueError:
            raise errors.bad_request(f"limit must be an integer, got {query.get('limit')!r}") from None
        if limit <= 0 or len(items) <= limit:
            return items, {}
        page, rest = items[:limit], items[limit:]
        last = page[-1]["metadata"]
        next_token = base64.urlsafe_b64encode(json.dumps([last.get("namespace", ""), last["name"]]).encode()).decode()
        return page, {"continue": next_token, "remainingItemCount": len(rest)}

    def _get(self, request: web.Request, target: Target) -> web.Response:
        assert target.name is not None
        obj = self.store.get(target.rt, target.namespace, target.name)
        if target.subresource == "scale":
            return _json(self._scale_of(target.rt, obj))
        obj = self._versioned(target, obj)
        if self._wants_table(request):
            return _json(
                to_table(
                    target.rt,
                    [obj],
                    self.clock,
                    request.query.get("includeObject", ""),
                    obj["metadata"]["resourceVersion"],
                )
            )
        return _json(obj)

    async def _watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        labels, fields = self._selectors(request, target)
        query = request.query
        rv_text = query.get("resourceVersion", "")
        since: int | None
        if rv_text in ("", "0"):
            since = None
        else:
            try:
                since = int(rv_text)
            except ValueError:
                raise errors.bad_request(f"invalid resource version {rv_text!r}") from None
        try:
            timeout = float(query["timeoutSeconds"]) if "timeoutSeconds" in query else None
        except ValueError:
            raise errors.bad_request("timeoutSeconds must be a number") from None
        bookmarks = query.get("allowWatchBookmarks", "") in _TRUE
        initial_end = query.get("sendInitialEvents", "") in _TRUE
        if initial_end:
            since = None
        table = self._wants_table(request)
        include_object = query.get("includeObject", "")
        watcher = Watcher(target.rt, target.namespace, labels, fields)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        try:
            replay = self.store.watch(watcher, since)
        except ApiError as exc:
            # A watch learns about an expired resourceVersion from an ERROR event, as from kube-apiserver.
            # The client may hang up as soon as it has read it: that ends the watch, it is no fault.
            with contextlib.suppress(ConnectionError):
                await response.prepare(request)
                await response.write(json.dumps({"type": "ERROR", "object": exc.status_body()}).encode() + b"\n")
                await response.write_eof()
            return response
        self._streams.add(watcher)
        try:
            await response.prepare(request)

            async def send(type_: str, obj: Obj) -> None:
                if type_ != "BOOKMARK":
                    obj = self._versioned(target, obj)
                    if table:
                        obj = to_table(target.rt, [obj], self.clock, include_object, obj["metadata"]["resourceVersion"])
                await response.write(json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n")

            def bookmark(annotations: dict[str, str] | None = None) -> Obj:
                meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
                if annotations:
                    meta["annotations"] = annotations
                return {"kind": target.rt.kind, "apiVersion": target.rt.api_version(target.version), "metadata": meta}

            for type_, obj in replay:
                await send(type_, obj)
            if initial_end and bookmarks:
                await send("BOOKMARK", bookmark({"k8s.io/initial-events-end": "true"}))
            deadline = self.clock.monotonic() + timeout if timeout is not None else None
            next_bookmark = self.clock.monotonic() + BOOKMARK_INTERVAL_S
            while True:
                now = self.clock.monotonic()
                if deadline is not None and now >= deadline:
                    break
                wait = (deadline - now) if deadline is not None else None
                if bookmarks:
                    wait = min(wait, next_bookmark - now) if wait is not None else next_bookmark - now
                try:
                    # A floor: under looptime a sub-resolution remainder would time out at once, forever.
                    async with asyncio.timeout(None if wait is None else max(wait, 0.05)):
                        item = await watcher.queue.get()
                except TimeoutError:
                    if bookmarks and self.clock.monotonic() >= next_bookmark:
                        await send("BOOKMARK", bookmark())
                        next_bookmark = self.clock.monotonic() + BOOKMARK_INTERVAL_S
                    continue
                if item is _END_OF_STREAM:
                    break
                await send(*item)
            with contextlib.suppress(ConnectionError):
                await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._streams.discard(watcher)
            self.store.unwatch(watcher)
        return response

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            raise errors.bad_request("the request body is empty")
        content_type = request.headers.get("Content-Type", "application/json")
        if "protobuf" in content_type:
            try:
                return protobuf.decode(raw)
            except ProtobufUnsupported as exc:
                raise errors.unsupported_media_type(
                    f"the sandbox API server decodes protobuf bodies only for Namespace, ConfigMap, Secret and access "
                    f"reviews, not {exc}: send JSON (e.g. `kubectl apply -f` instead of a typed `kubectl create`)"
                ) from None
        if "cbor" in content_type:
            raise errors.unsupported_media_type(
                f"the sandbox API server accepts JSON, YAML and protobuf, not {content_type}"
            )
        try:
            if "yaml" in content_type:
                # Read as kube-apiserver's sigs.k8s.io/yaml reads it (1e3 is a number).
                return yaml.load(raw, Loader=ManifestLoader)
            return go_json(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from None

    def _strict(self, request: web.Request) -> bool:
        return self._field_validation(request) == "Strict"

    def _field_validation(self, request: web.Request) -> str:
        value = request.query.get("fieldValidation", "") or "Warn"
        if value not in ("Ignore", "Warn", "Strict"):
            raise errors.bad_request(
                f'fieldValidation: Unsupported value: "{value}": supported values: "Ignore", "Strict", "Warn"'
            )
        return value

    def _warnings(self, request: web.Request) -> list[str] | None:
        """Where the store puts what the client should be warned about (None: fieldValidation=Ignore)."""
        return None if self._field_validation(request) == "Ignore" else []

    def _manager(self, request: web.Request, target: Target, *, apply: bool = False) -> Manager:
        """The field manager of a write: ``?fieldManager=``, else the User-Agent's product, as
        kube-apiserver derives it."""
        name = request.query.get("fieldManager", "")
        if not name:
            if apply:
                raise errors.bad_request("PATCH " + request.path + ": fieldManager is required for apply patch")
            name = request.headers.get("User-Agent", "").split("/", 1)[0].strip() or "unknown"
        if len(name) > 128:
            raise errors.bad_request(f"fieldManager: Too long: may not be longer than 128 characters: {name[:20]}...")
        subresource = target.subresource if target.subresource in ("status", "scale") else None
        return Manager(name[:128], target.rt.api_version(target.version), subresource)

    def _dry_run(self, request: web.Request, options: dict[str, Any] | None = None) -> bool:
        """``?dryRun=All``, or DeleteOptions' ``dryRun: [All]`` (kubectl sends a DELETE's there)."""
        values = list(request.query.getall("dryRun", []))
        sent = (options or {}).get("dryRun")
        if sent is not None:
            values += sent if isinstance(sent, list) else [sent]
        if any(v != "All" for v in values):
            raise errors.bad_request(f'dryRun: Unsupported value: {values!r}: supported values: "All"')
        return bool(values)

    async def _create(self, request: web.Request, target: Target) -> web.Response:
        body = await self._body(request)
        if target.rt.key in REVIEWS:
            return self._review(body)
        if target.subresource == "binding":
            return self._bind(target, body, dry_run=self._dry_run(request))
        if target.subresource == "eviction":
            options = (body or {}).get("deleteOptions") or {} if isinstance(body, dict) else {}
            # As the eviction registry: a dry-run if the request or its deleteOptions say so.
            return self._evict(target, options, dry_run=self._dry_run(request, options))
        warnings = self._warnings(request)
        obj = self.store.create(
            target.rt,
            target.namespace,
            body,
            strict=self._strict(request),
            dry_run=self._dry_run(request),
            manager=self._manager(request, target),
            warnings=warnings,
        )
        return _json(self._versioned(target, obj), 201, headers=_warning_headers(warnings))

    def _review(self, body: Any) -> web.Response:
        """Access reviews: the sandbox has no authorizer, every request is allowed (requests are
        logged in ``request_log`` for RBAC checks instead)."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        return _json(
            {**body, "status": {"allowed": True, "reason": "the neuronfleet sandbox authorizes every request"}}, 201
        )

    def _log(self, request: web.Request, target: Target) -> web.Response:
        assert target.name is not None
        pod = self.store.get(target.rt, target.namespace, target.name)
        lines = self.pod_logs.get(pod["metadata"]["uid"], [])
        tail = request.query.get("tailLines")
        if tail is not None and tail.isdigit():
            lines = lines[-int(tail) :] if int(tail) else []
        return web.Response(text="".join(f"{line}\n" for line in lines), content_type="text/plain")

    def _bind(self, target: Target, body: Any, *, dry_run: bool) -> web.Response:
        assert target.name is not None
        node_name = ((body or {}).get("target") or {}).get("name") if isinstance(body, dict) else None
        if not node_name:
            raise errors.invalid("Binding", "", target.name, [("target.name", "Required value")])
        annotations = ((body.get("metadata") or {}).get("annotations")) or None
        self.store.bind_pod(target.namespace or "", target.name, node_name, annotations, dry_run=dry_run)
        return _json(_status_success(), 201)

    def _evict(self, target: Target, options: dict[str, Any], *, dry_run: bool) -> web.Response:
        assert target.name is not None
        pod = self.store.get(target.rt, target.namespace, target.name)
        check_eviction(self.store, pod)
        if not dry_run:
            mark_evicted(self.store, pod)
        self.store.delete_outcome(
            target.rt,
            target.namespace,
            target.name,
            grace_period=options.get("gracePeriodSeconds"),
            dry_run=dry_run,
        )
        return _json(_status_success(), 201)

    async def _replace(self, request: web.Request, target: Target) -> web.Response:
        assert target.name is not None
        body = await self._body(request)
        if target.subresource == "scale":
            return _json(self._write_scale(target, body, self._manager(request, target), self._dry_run(request)))
        warnings = self._warnings(request)
        obj = self.store.replace(
            target.rt,
            target.namespace,
            target.name,
            body,
            subresource=target.subresource,
            strict=self._strict(request),
            dry_run=self._dry_run(request),
            manager=self._manager(request, target),
            warnings=warnings,
        )
        return _json(self._versioned(target, obj), headers=_warning_headers(warnings))

    async def _patch(self, request: web.Request, target: Target) -> web.Response:
        assert target.name is not None
        patch = await self._body(request)
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        rt = target.rt
        warnings = self._warnings(request)
        force = request.query.get("force", "")
        if force and content_type != "application/apply-patch+yaml":
            raise errors.bad_request("force: Invalid value: true: may not be specified for non-apply patch")
        if content_type == "application/apply-patch+yaml" and target.subresource != "scale":
            obj, created = self.store.apply(
                rt,
                target.namespace,
                target.name,
                patch,
                self._manager(request, target, apply=True),
                force=force in _TRUE,
                strict=self._strict(request),
                dry_run=self._dry_run(request),
                warnings=warnings,
            )
            return _json(self._versioned(target, obj), 201 if created else 200, headers=_warning_headers(warnings))
        current = self.store.try_get(rt, target.namespace, target.name)
        if current is None:
            raise errors.not_found(rt.plural, rt.group, target.name)
        base: Obj = self._scale_of(rt, current) if target.subresource == "scale" else current
        if content_type == "application/merge-patch+json":
            patched = merge_patch(base, patch)
        elif content_type == "application/json-patch+json":
            patched = json_patch(base, patch)
        elif content_type == "application/strategic-merge-patch+json":
            if rt.custom:
                raise errors.unsupported_media_type(
                    "the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
                )
            patched = strategic_merge_patch(base, patch)
        elif content_type == "application/apply-patch+yaml":
            patched = merge_patch(base, patch)  # the scale subresource: replicas only
        else:
            raise errors.unsupported_media_type(
                f"the body of the request was in an unknown format - accepted media types include: "
                f"application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, "
                f"application/strategic-merge-patch+json (got {content_type!r})"
            )
        if target.subresource == "scale":
            return _json(self._write_scale(target, patched, self._manager(request, target), self._dry_run(request)))
        obj = self.store.commit_patched(
            rt,
            current,
            patched,
            subresource=target.subresource,
            strict=self._strict(request),
            dry_run=self._dry_run(request),
            manager=self._manager(request, target),
            warnings=warnings,
        )
        return _json(self._versioned(target, obj), headers=_warning_headers(warnings))

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        options: dict[str, Any] = {}
        raw = await request.read()
        if raw and "protobuf" in request.headers.get("Content-Type", ""):
            try:
                options.update(protobuf.decode_delete_options(raw))
            except ProtobufUnsupported as exc:
                raise errors.bad_request(f"invalid DeleteOptions body: {exc}") from None
        elif raw:
            try:
                parsed = go_json(raw)
            except ValueError as exc:
                raise errors.bad_request(f"invalid DeleteOptions body: {exc}") from None
            if not isinstance(parsed, dict):
                raise errors.bad_request("DeleteOptions must be a JSON object")
            options.update(parsed)
        query = request.query
        if "gracePeriodSeconds" in query:
            try:
                options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
            except ValueError:
                raise errors.bad_request("gracePeriodSeconds must be an integer") from None
        if "propagationPolicy" in query:
            options["propagationPolicy"] = query["propagationPolicy"]
        if options.get("orphanDependents") is True and "propagationPolicy" not in options:
            options["propagationPolicy"] = "Orphan"
        return options

    async def _delete(self, request: web.Request, target: Target) -> web.Response:
        assert target.name is not None
        options = await self._delete_options(request)
        dry_run = self._dry_run(request, options)
        obj, stays = self.store.delete_outcome(
            target.rt,
            target.namespace,
            target.name,
            grace_period=options.get("gracePeriodSeconds"),
            propagation=options.get("propagationPolicy"),
            preconditions=options.get("preconditions"),
            dry_run=dry_run,
        )
        if not dry_run:
            stays = self.store.try_get(target.rt, target.namespace, target.name) is not None
        return _json(self._versioned(target, obj), 202 if stays else 200)

    async def _delete_collection(self, request: web.Request, target: Target) -> web.Response:
        options = await self._delete_options(request)
        dry_run = self._dry_run(request, options)
        labels, fields = self._selectors(request, target)
        items, _ = self.store.list(target.rt, target.namespace, labels, fields)
        deleted = []
        for obj in items:
            meta = obj["metadata"]
            with contextlib.suppress(ApiError):
                outcome, _ = self.store.delete_outcome(
                    target.rt,
                    meta.get("namespace"),
                    meta["name"],
                    grace_period=options.get("gracePeriodSeconds"),
                    propagation=options.get("propagationPolicy"),
                    dry_run=dry_run,
                )
                deleted.append(outcome)
        return _json(
            {
                "kind": target.rt.list_kind,
                "apiVersion": target.rt.api_version(target.version),
                "metadata": {"resourceVersion": str(self.store.rv)},
                "items": deleted,
            }
        )

    # ---- scale subresource ---------------------------------------------------------------------------

    def _scale_of(self, rt: ResourceType, obj: Obj) -> Obj:
        if rt.scale is None:
            raise errors.resource_not_found(f"{rt.plural}/scale")
        meta = obj["metadata"]
        status: dict[str, Any] = {"replicas": int(json_path_value(obj, rt.scale.status_replicas_path) or 0)}
        if rt.scale.label_selector_path:
            selector = json_path_value(obj, rt.scale.label_selector_path)
            if selector:
                status["selector"] = selector
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta
            },
            "spec": {"replicas": int(json_path_value(obj, rt.scale.spec_replicas_path) or 0)},
            "status": status,
        }

    def _write_scale(self, target: Target, scale: Any, manager: Manager | None = None, dry_run: bool = False) -> Obj:
        assert target.name is not None and target.rt.scale is not None
        rt, scale_spec = target.rt, target.rt.scale
        if not isinstance(scale, dict) or not isinstance((scale.get("spec") or {}).get("replicas"), int):
            raise errors.invalid(
                "Scale", "autoscaling", target.name, [("spec.replicas", "Required value: must be an integer")]
            )
        replicas = scale["spec"]["replicas"]
        if replicas < 0:
            raise errors.invalid(
                "Scale",
                "autoscaling",
                target.name,
                [("spec.replicas", f"Invalid value: {replicas}: must be greater than or equal to 0")],
            )
        current = self.store.get(rt, target.namespace, target.name)
        given_rv = (scale.get("metadata") or {}).get("resourceVersion")
        if given_rv and str(given_rv) != current["metadata"]["resourceVersion"]:
            raise errors.conflict(rt.plural, rt.group, target.name)
        updated = self.store.update(
            rt,
            target.namespace,
            target.name,
            lambda o: set_json_path(o, scale_spec.spec_replicas_path, replicas),
            manager=manager,
            dry_run=dry_run,
        )
        return self._scale_of(rt, updated)

    # ---- discovery -------------------------------------------------------------------------------

    def _group_versions(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for rt in self.store.resources.values():
            versions = groups.setdefault(rt.group, [])
            for version in rt.versions:
                if version not in versions:
                    versions.append(version)
        return groups

    def _root_paths(self) -> list[str]:
        paths = ["/api", "/api/v1", "/apis", "/version", "/openapi/v2", "/openapi/v3", "/healthz", "/livez", "/readyz"]
        for group, versions in self._group_versions().items():
            if group:
                paths.append(f"/apis/{group}")
                paths.extend(f"/apis/{group}/{v}" for v in versions)
        return paths

    def _group_doc(self, group: str, versions: list[str]) -> dict[str, Any]:
        listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": listed, "preferredVersion": listed[0]}

    def _group_list(self) -> dict[str, Any]:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [self._group_doc(g, vs) for g, vs in sorted(self._group_versions().items()) if g],
        }

    def _group(self, group: str) -> dict[str, Any]:
        versions = self._group_versions().get(group)
        if not versions or not group:
            raise errors.resource_not_found(f"/apis/{group}")
        return {"kind": "APIGroup", "apiVersion": "v1", **self._group_doc(group, versions)}

    def _resource_list(self, group: str, version: str, path: str) -> dict[str, Any]:
        served = [rt for rt in self.store.resources.values() if rt.group == group and version in rt.versions]
        if not served:
            raise errors.resource_not_found(path)
        resources: list[dict[str, Any]] = []
        for rt in sorted(served, key=lambda r: r.plural):
            entry: dict[str, Any] = {
                "name": rt.plural,
                "singularName": rt.singular,
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": list(rt.verbs),
            }
            if rt.short_names:
                entry["shortNames"] = list(rt.short_names)
            if rt.categories:
                entry["categories"] = list(rt.categories)
            resources.append(entry)
            for sub in rt.subresources:
                sub_entry: dict[str, Any] = {
                    "name": f"{rt.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": ["get", "patch", "update"],
                }
                if sub == "scale":
                    sub_entry.update(group="autoscaling", version="v1", kind="Scale")
                elif sub == "binding":
                    sub_entry.update(kind="Binding", verbs=["create"])
                elif sub == "eviction":
                    sub_entry.update(group="policy", version="v1", kind="Eviction", verbs=["create"])
                resources.append(sub_entry)
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    def _openapi(self, parts: list[str], accept: str = "") -> web.Response:
        if parts == ["v2"]:
            document = swagger_document([rt for rt in self.store.resources.values() if rt.key not in REVIEWS])
            if "protobuf" in accept:
                return web.Response(
                    body=protobuf.encode_openapi_v2(document),
                    headers={"Content-Type": protobuf.OPENAPI_V2_MEDIA_TYPE},
                )
            return _json(document)
        if parts == ["v3"]:
            index = {}
            for group, versions in self._group_versions().items():
                for version in versions:
                    doc = self._openapi_document(group, version)
                    path = gv_path(group, version)
                    index[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={document_hash(doc)}"}
            return _json({"paths": index})
        if len(parts) >= 3 and parts[0] == "v3":
            rest = parts[1:]
            if rest[0] == "api" and len(rest) == 2:
                return _json(self._openapi_document("", rest[1]))
            if rest[0] == "apis" and len(rest) == 3:
                return _json(self._openapi_document(rest[1], rest[2]))
        raise errors.resource_not_found("/openapi/" + "/".join(parts))

    def _openapi_document(self, group: str, version: str) -> dict[str, Any]:
        served = [rt for rt in self.store.resources.values() if rt.group == group and version in rt.versions]
        if not served:
            raise errors.resource_not_found(f"/openapi/v3/{gv_path(group, version)}")
        return group_version_document(group, version, served)
