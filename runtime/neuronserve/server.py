"""``neuronserve serve``: the HTTP server (KServe v2 REST protocol + /metrics) and its lifecycle.

Lifecycle: listen at once (live, not ready) -> fetch and verify the artifact -> load -> warm every
bucket -> ready. With ``--device emulated-neuroncore`` no model is loaded: the batches run on the
emulated NeuronCore device (``neuronserve.emulated``), from an artifact's manifest or a built-in
contract, and everything the server reports says "emulated". On SIGTERM/SIGINT: not ready at
once, but new infer requests are still served for the drain delay (endpoint removal takes seconds
to reach kube-proxy and load balancers, so requests keep arriving); then new ones get 503 with
Retry-After, requests admitted before (their body still arriving, or being parsed or tokenized),
queued and executing finish, and the process exits 0, all within the grace period (what is still
queued or running at its end is answered 503, and open connections, a body still arriving
included, are closed, about a second later; a text being tokenized then
delays the exit until it is, at most about a second per megabyte). From SIGTERM on every response says
``Connection: close``, so clients reconnect to another replica. A verification or load failure exits non-zero with the
reason on stderr: 2, or ``MANIFEST_MISMATCH_EXIT_CODE`` (4) when the manifest at the artifact URI
is not the one ``--manifest-sha256`` pins (checked before anything else is read or loaded).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import logging
import re
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from neuronserve import __version__
from neuronserve.batcher import Batcher, QueueFull, Runner, ShuttingDown, TimedDevice, failure_summary
from neuronserve.codings import CODINGS, Undecodable, decode_body
from neuronserve.health import SELF_TEST_SECONDS, DeviceHealth
from neuronserve.manifest import MANIFEST_MISMATCH_EXIT_CODE, Manifest, revision
from neuronserve.metrics import BusyTracker, ServerMetrics
from neuronserve.protocol import (
    HEADER_LENGTH,
    BadRequest,
    InferRequest,
    TextRequest,
    Tokenize,
    infer_response,
    model_metadata,
    parse_request_untokenized,
)

log = logging.getLogger("neuronserve")

#: A stop came while the loader thread still ran (see :func:`loader_abandoned`).
_loader_abandoned = False


def loader_abandoned() -> bool:
    """Whether the server stopped while its loader thread (a download, a load, a warm-up) still ran.

    That thread cannot be stopped; Python's finalization, meeting it inside TorchScript (a warm-up
    of minutes on Neuron), aborts the process ("terminate called without an active exception",
    exit 134): the server's exit checks this and leaves at once instead, as for a hung batch.
    """
    return _loader_abandoned


Phase = Literal["starting", "ready", "draining"]
MIN_BODY_BYTES = 1 << 20
#: Threads that tokenize text requests, off the event loop (a megabyte of text with no blank to cut
#: it at takes about a second, during which the loop would answer nothing, health probes included).
#: A few, not one per request: they share the host's CPUs with the event loop and the model; more
#: text requests wait their turn.
TOKENIZE_THREADS = 2
#: The longest header field (name or value) and request line taken: gateways add headers past
#: aiohttp's default of 8,190 bytes (a bearer token or a JWT with many claims, tracing baggage;
#: Envoy's default limit for all of a request's headers is 60 KiB). Longer ones get aiohttp's 400.
MAX_HEADER_FIELD_BYTES = 64 * 1024


@dataclass(frozen=True)
class ServeConfig:
    max_batch_delay_ms: float = 5.0
    max_queue: int = 256
    batching: bool = True
    max_body_bytes: int | None = None
    retry_after_seconds: int = 1
    #: Infer requests whose bodies are read, decoded, parsed or tokenized at once; more get 503.
    max_uploads: int = 64
    #: A request body not whole this long after its headers is refused with 408.
    body_timeout_seconds: float = 30.0
    #: Requests failed alone in a row, no success between, after which the device is checked; and
    #: successes in a row after which a failed device counts as recovered.
    device_suspect_after: int = 5
    #: A device failed this long makes the server report not live (the kubelet restarts it).
    device_restart_seconds: float = 60.0


def body_limit(manifest: Manifest, configured: int | None) -> int:
    """Largest accepted body: the biggest valid request as JSON with generous digits, at least 1 MiB."""
    if configured is not None:
        return configured
    values = manifest.max_batch * manifest.max_sequence * len(manifest.inputs)
    return max(MIN_BODY_BYTES, values * 24 + 64 * 1024)


class ServerState:
    """What the handlers see: phase, the loaded model and its batcher (None until loaded)."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.phase: Phase = "starting"
        self.metrics = ServerMetrics(BusyTracker())
        self.manifest: Manifest | None = None
        self.batcher: Batcher | None = None
        self.tokenize: Tokenize | None = None
        self.version = ""
        # What executes the batches, as /v2/health/ready, model metadata and the metrics report it.
        self.device: dict[str, Any] = {"device": "none", "emulated": False}
        # Whether new infer requests are taken: from activate() until the drain delay ends.
        self.accepting = False
        self.inflight = 0
        # Requests admitted (``_admit``) and not yet submitted to the batcher or refused: their body
        # still arriving, or being decoded, parsed or tokenized. They are accepted work: a drain waits
        # for them (within the grace period) before it closes the batcher, whether their body was
        # whole when the drain delay ended or not (a large upload, a body sent after 100 Continue).
        self.uploads = 0
        self.uploaded_all = asyncio.Event()  # set whenever ``uploads`` is 0
        self.uploaded_all.set()
        self.answered = asyncio.Event()  # set whenever no accepted request is waiting for its answer
        self.answered.set()
        self.body_limit = MIN_BODY_BYTES
        self.health = DeviceHealth(config.device_suspect_after, config.device_restart_seconds)
        self._device_check: asyncio.Task[None] | None = None
        # (rows, sequence) of the last request that failed alone: the device check runs that shape.
        self._suspect_shape = (1, 0)
        self.metrics.inflight.set_function(lambda: self.inflight)
        self.metrics.ready.set(0)
        self._tokenizers = concurrent.futures.ThreadPoolExecutor(TOKENIZE_THREADS, "neuronserve-tokenize")

    def upload_started(self) -> None:
        self.uploads += 1
        self.uploaded_all.clear()

    def upload_ended(self) -> None:
        self.uploads -= 1
        if self.uploads == 0:
            self.uploaded_all.set()

    def close(self) -> None:
        """Let the tokenizer threads go: texts waiting for one are dropped, and the process exits
        when the one being tokenized (if any) ends. Their threads are not daemons: left running, the
        interpreter waited at exit for every text queued, seconds past the grace period."""
        self._tokenizers.shutdown(wait=False, cancel_futures=True)

    async def tokenized(self, request: TextRequest, manifest: Manifest) -> InferRequest:
        """``request`` tokenized in one of TOKENIZE_THREADS threads (BadRequest if the tokenizer refuses it)."""
        assert self.tokenize is not None  # a TextRequest is only parsed when there is a tokenizer
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._tokenizers, request.tokenized, manifest, self.tokenize)

    def activate(
        self,
        manifest: Manifest,
        runner: Runner | TimedDevice,
        tokenize: Tokenize | None,
        device: dict[str, Any] | None = None,
    ) -> None:
        """Attach a loaded, warmed model and start taking requests (call from the event loop)."""
        self.manifest = manifest
        self.device = device or {"device": manifest.backend, "emulated": False}
        self.metrics.set_device(
            self.device["device"], str(self.device.get("profile", "")), bool(self.device.get("emulated"))
        )
        self.version = revision(manifest.cache_key)
        self.tokenize = tokenize
        self.body_limit = body_limit(manifest, self.config.max_body_bytes)
        self.batcher = Batcher(
            runner,
            self.metrics,
            max_rows=manifest.max_batch,
            max_delay=self.config.max_batch_delay_ms / 1000.0,
            max_queue=self.config.max_queue,
            batching=self.config.batching,
            batch_sizes=manifest.batch_sizes,
        )
        # Asked at each read: a model runner's copy leaving rotation lowers the busy ratio's capacity.
        batcher = self.batcher
        self.metrics.busy.capacity = lambda: batcher.parallel
        self.metrics.device_cores_out.set_function(lambda: self.cores_out)
        self.batcher.start()
        self.phase = "ready"
        self.accepting = True
        self.metrics.ready.set(1)

    @property
    def cores_out(self) -> int:
        """Copies of the model (NeuronCores) its runner took out of rotation (see ``backend``)."""
        runner = self.batcher.runner if self.batcher is not None else None
        return len(getattr(runner, "copies_out", ()))

    @property
    def serving(self) -> bool:
        """Ready: loaded, warmed, not draining, and the device has not failed."""
        return self.phase == "ready" and not self.health.failed

    @property
    def reported_phase(self) -> str:
        """The phase /v2/health/ready reports: ``device_failed`` while ready but the device failed."""
        return "device_failed" if self.phase == "ready" and self.health.failed else self.phase

    def request_succeeded(self) -> None:
        if self.health.succeeded():
            log.warning("the device answered %d requests in a row again: ready", self.health.recover_after)
            self.metrics.ready.set(1 if self.serving else 0)

    def request_failed_alone(self, request: InferRequest) -> str:
        """Record a request the device failed on, alone; its outcome (``error`` once the device failed)."""
        self._suspect_shape = (request.rows, request.sequence)
        outcome = "error" if self.health.failed else "model_error"
        if self.health.failed_alone() and self._device_check is None and self.batcher is not None:
            self._device_check = asyncio.get_running_loop().create_task(self._check_device(self.batcher))
        return outcome

    async def _check_device(self, batcher: Batcher) -> None:
        """Run the known-good request until it succeeds (or the server drains); see ``health``."""
        assert self.manifest is not None
        try:
            while self.phase == "ready":
                streak = self.health.successes
                try:
                    # At the head of the queue: the verdict must not wait for the requests it decides on.
                    await batcher.submit(known_good_request(self.manifest, *self._suspect_shape), first=True)
                except (QueueFull, ShuttingDown):
                    return  # no verdict: the device is busy with requests, or the server is stopping
                except Exception as exc:
                    if self.health.self_test_failed():
                        log.error(
                            "device failure: %d requests in a row failed alone, and the warm-up input too (%s): "
                            "not ready; not live after %gs unless %d requests in a row succeed",
                            self.health.run,
                            failure_summary(exc),
                            self.health.restart_after,
                            self.health.recover_after,
                        )
                        self.metrics.ready.set(0)
                else:
                    self.request_succeeded()
                    if not self.health.failed:
                        return
                    if self.health.successes > streak:
                        # Recovering: the next of the successes in a row that end the failure, at
                        # once. A request that failed meanwhile reset the streak: wait as after a failure.
                        continue
                await asyncio.sleep(SELF_TEST_SECONDS)
        finally:
            self._device_check = None

    async def drain(
        self, grace_seconds: float, delay_seconds: float = 0.0, skip_delay: asyncio.Event | None = None
    ) -> bool:
        """Report not ready, serve new requests ``delay_seconds`` more, then refuse new requests and
        finish the accepted ones (those admitted whose body is still arriving, or being parsed or
        tokenized, first reach the batcher): all within ``grace_seconds``.

        The delay is capped at DRAIN_DELAY_SHARE of the grace period, the rest being for the work
        accepted; ``skip_delay`` set ends it early (a second signal). True if every accepted request
        was answered in time. Past the grace period what is still queued or running is answered
        503; ANSWER_SECONDS more let those answers be handed over.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_seconds
        self.phase = "draining"
        self.metrics.ready.set(0)
        delay = drain_delay(grace_seconds, delay_seconds)
        if self.batcher is not None and delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for((skip_delay or asyncio.Event()).wait(), delay)
            log.info(
                "drain delay over: new requests get 503; finishing the %d accepted (%d of them still "
                "arriving, or being parsed)",
                self.inflight + self.uploads,
                self.uploads,
            )
        self.accepting = False
        if self.batcher is None:
            return True
        # Requests admitted before now were accepted, though their body may still be arriving (a
        # large upload, or a body sent after 100 Continue) or being parsed or tokenized: they reach
        # the batcher before it closes (within the grace period), not a 503. Closing the server at
        # once instead (an idle replica) dropped their connections unanswered.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.uploaded_all.wait(), max(0.0, deadline - loop.time()))
        finished = await self.batcher.drain(max(0.0, deadline - loop.time()))
        # Handlers whose futures just resolved still have to hand over their answers.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.answered.wait(), _until(deadline, ANSWER_SECONDS))
        return finished and self.inflight == 0


#: The most of the grace period the drain delay may take: the rest is for finishing the accepted work.
DRAIN_DELAY_SHARE = 1 / 3


def known_good_request(manifest: Manifest, rows: int = 1, sequence: int = 0) -> InferRequest:
    """The warm-up input (every value 1, which the model ran at start in every bucket) as ``rows``
    rows of ``sequence`` tokens (0: the shortest bucket's).

    The server checks the device at the shape of the last request that failed alone, so the check
    runs in the same (batch, sequence) bucket: a device failing in one bucket (one NEFF) only was
    never found failed by a check of one row at the shortest sequence. Not every bucket, as warm-up
    does: that costs a run per bucket each check, and a failure in a bucket no request uses now
    says nothing about the requests that failed.
    """
    rows = max(1, min(rows, manifest.max_batch))
    sequence = min(sequence, manifest.max_sequence) or min(bucket.sequence for bucket in manifest.buckets)
    return InferRequest(None, [np.ones((rows, sequence), dtype=np.int64) for _ in manifest.inputs])


def drain_delay(grace_seconds: float, delay_seconds: float) -> float:
    """The drain delay a shutdown with ``grace_seconds`` takes: at most DRAIN_DELAY_SHARE of it."""
    return min(delay_seconds, grace_seconds * DRAIN_DELAY_SHARE)


#: After the grace period, this long again for answers already decided to reach their clients,
#: and again for open connections to close. Both fit in the pod's margin between the runtime's
#: grace period and the kubelet's SIGKILL (the operator gives the runtime 5 s less than the pod).
ANSWER_SECONDS = 1.0


def _until(deadline: float, floor: float) -> float:
    """Seconds left before ``deadline`` on the running loop's clock, and at least ``floor``."""
    return max(floor, deadline - asyncio.get_running_loop().time())


async def close_server(runner: web.AppRunner, deadline: float) -> bool:
    """Stop listening and close every connection by ``deadline`` (at least ANSWER_SECONDS from now).

    aiohttp's own shutdown waits up to the runner's ``shutdown_timeout`` for each open connection's
    handler (a client still uploading a body, say), counted from when it starts: after a drain that
    used the whole grace period it would double the time to exit, past the kubelet's SIGKILL. False
    if connections were still open at the deadline; what runs on them is cancelled as the loop ends.
    """
    try:
        await asyncio.wait_for(runner.cleanup(), _until(deadline, ANSWER_SECONDS))
    except TimeoutError:
        return False
    return True


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


@web.middleware
async def json_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Unknown routes and methods answer in the protocol's JSON error shape, and no traceback leaks.

    While draining, every answer closes its connection: a client's next request then opens a new
    one, which the Service routes to a replica that stays (keep-alive would pin it to this one).
    """
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        allow = exc.headers.get("Allow")  # a 405 says which methods the route takes (RFC 9110)
        response = _error(exc.status, exc.reason, {"Allow": allow} if allow else None)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        if request.method == "POST" and request.path.endswith("/infer"):
            request.app[STATE_KEY].metrics.outcome("error")
        response = _error(500, "internal server error")
    if request.app[STATE_KEY].phase == "draining":
        response.force_close()
    return response


STATE_KEY = web.AppKey("state", ServerState)
EMULATED_PARAMETERS = {"emulated": True, "outputs": "placeholders from the emulated device, not model outputs"}


#: Content codings of request bodies the server decodes: gzip and deflate always (zlib), br and
#: zstd when their library is installed (Brotli; backports.zstd, or compression.zstd from Python
#: 3.14). The server decodes them itself, not aiohttp (see ``app_runner``): aiohttp's parser refuses
#: a coding it has no library for before any handler runs, with a text/plain 400, where the
#: protocol's answer is a JSON 415; and it does not check that a body was a whole stream.
DECODED_CODINGS: tuple[str, ...] = CODINGS


def _check_content_encoding(request: web.Request) -> str | None:
    """The body's content coding (None: as is); a coding the server does not decode (``x-gzip``,
    ``gzip, br``, a typo, br or zstd without their library) is a 415 (RFC 9110)."""
    coding = request.headers.get("Content-Encoding", "").strip().lower()
    if not coding or coding == "identity":
        return None
    if coding not in DECODED_CODINGS:
        codings = ", ".join(DECODED_CODINGS)
        raise _Refusal(
            415,
            f"Content-Encoding {coding!r} is not supported: send the body as is, or with one of {codings}",
            "bad_request",
            headers={"Accept-Encoding": codings},
        )
    return coding


def _decode_body(raw: bytes, coding: str, limit: int) -> bytes:
    """``raw`` decoded from ``coding``; refused with 413 past ``limit`` bytes decoded, without
    decoding more than that (a small body can decode to gigabytes), and with 400 if it is not one
    whole stream of its coding (a gzip body cut before its checksum decodes to the text whole)."""
    try:
        body = decode_body(raw, coding, limit)
    except Undecodable as exc:
        # The body was read whole (its length was framed): the connection can carry the next request.
        raise _Refusal(
            400, f"unreadable request body: Can not decode content-encoding: {coding} ({exc})", "bad_request"
        ) from None
    if len(body) > limit:
        raise _body_too_large(limit)
    return body


def _body_too_large(limit: int) -> _Refusal:
    return _Refusal(413, f"request body larger than {limit} bytes (the server's --max-body-bytes)", "bad_request")


async def _read_body(request: web.Request, limit: int, timeout: float) -> bytes:
    """The body as sent, refused with 413 past ``limit`` bytes without buffering more than that,
    and with 408 if it is not whole within ``timeout`` seconds (a stalled or trickling upload)."""
    too_large = _body_too_large(limit)
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.content.iter_chunked(64 * 1024):
                size += len(chunk)
                if size > limit:
                    raise too_large
                chunks.append(chunk)
    except TimeoutError:
        # The rest of the body may still come: nothing after it on this connection can be read, so
        # the answer closes it; marked read, or aiohttp would wait up to 10 s more to discard it.
        request.content.feed_eof()
        raise _Refusal(
            408,
            f"the request body did not arrive whole within {timeout:g} s (the server's --body-timeout-seconds)",
            "aborted",
            close_connection=True,
        ) from None
    except web.RequestPayloadError as exc:
        # A body that does not arrive whole (broken chunked encoding): the client's to fix.
        # Nothing after it on this connection can be read, so the answer closes it; the body is
        # marked read, or aiohttp reads it again to discard it and logs its error as a traceback.
        request.content.feed_eof()
        reason = " ".join(re.sub(r"^\d{3}, message:", "", str(exc)).split())  # aiohttp's "400, message:\n  ..."
        raise _Refusal(400, f"unreadable request body: {reason}", "bad_request", close_connection=True) from None
    except ConnectionResetError:
        # The client went away before sending its whole request: nobody reads the answer, and the
        # server did not fail (an abort must not count as an error, nor log a traceback).
        raise _Refusal(400, "the client closed the connection before sending the whole body", "aborted") from None
    return b"".join(chunks)


def app_runner(state: ServerState, **options: Any) -> web.AppRunner:
    """The server's app, in a runner that leaves request bodies encoded (``infer`` decodes them) and
    cancels a request's handler when its client hangs up.

    aiohttp lets a handler run on by default after its connection is lost: an abandoned request
    would keep its queue slot (live clients get 429), run on the device, count as ``ok`` and
    inflate the queue depth and in-flight count the autoscaler reads. Cancelled, its future is
    cancelled too, which takes it out of the batcher's queue at once (``Batcher``).

    A client that half-closes (``shutdown(SHUT_WR)``) after a whole request is taken as one that
    hung up: the server sees the same FIN when a client closes its socket (a client-side timeout),
    and cannot tell the two apart without writing to it. Keeping the write side open on EOF
    (``eof_received`` returning True, aiohttp issue #3659) answered half-closing clients but kept
    every hung-up request queued until it ran: tests/runtime/test_disconnect.py failed with it.
    """
    logging.getLogger("aiohttp.server").addFilter(_parser_errors_as_warnings)  # once: filters are a set
    return web.AppRunner(
        create_app(state),
        auto_decompress=False,
        handler_cancellation=True,
        max_line_size=MAX_HEADER_FIELD_BYTES,
        max_field_size=MAX_HEADER_FIELD_BYTES,
        **options,
    )


def _parser_errors_as_warnings(record: logging.LogRecord) -> bool:
    """aiohttp's log of a request its parser refused, as one WARNING line instead of an ERROR with a traceback.

    aiohttp answers such a request itself, before any handler or middleware runs (a text/plain 400:
    it has no public hook for that answer's body), and logs it with ``logger.exception``. It is the
    client's mistake (a bad Content-Length or chunk size, Content-Length with Transfer-Encoding, a
    header past MAX_HEADER_FIELD_BYTES), not the server's failure. The reason is kept to its first
    line, and a header too long is not quoted: it is often a credential.
    """
    error = record.exc_info[1] if record.exc_info else None
    if isinstance(error, HttpProcessingError):
        if isinstance(error, LineTooLong):
            reason = f"a header field or the request line is longer than {error.args[1]} bytes"
        else:
            reason = (error.message.strip().splitlines() or [type(error).__name__])[0][:200].rstrip(":")
        record.msg = "refused a request that does not parse (%d) from %s: %s"
        record.args = (error.code, *(record.args or ("?",)), reason)
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.exc_info, record.exc_text = None, None
    return True


def create_app(state: ServerState) -> web.Application:
    """The routes and middleware; serve them through ``app_runner`` (bodies arrive undecoded)."""
    app = web.Application(middlewares=[json_errors])
    app[STATE_KEY] = state
    app.router.add_get("/v2/health/live", live)
    app.router.add_get("/v2/health/ready", ready)
    app.router.add_get("/v2", server_metadata)
    app.router.add_get("/v2/models/{name}", metadata)
    app.router.add_get("/v2/models/{name}/ready", model_ready)
    app.router.add_get("/v2/models/{name}/versions/{version}", metadata)
    app.router.add_get("/v2/models/{name}/versions/{version}/ready", model_ready)
    app.router.add_post("/v2/models/{name}/infer", infer, expect_handler=expect_continue)
    app.router.add_post("/v2/models/{name}/versions/{version}/infer", infer, expect_handler=expect_continue)
    app.router.add_get("/metrics", metrics)
    return app


async def live(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    if state.health.live():
        return web.json_response({"live": True})
    reason = f"the device has failed for {state.health.restart_after:g}s or more (every request fails)"
    return web.json_response({"live": False, "reason": reason}, status=503)


async def ready(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    ok = state.serving
    return web.json_response(
        {
            "ready": ok,
            "phase": state.reported_phase,
            "device": state.device["device"],
            "emulated": state.device["emulated"],
            "cores_out": state.cores_out,
        },
        status=200 if ok else 503,
    )


async def server_metadata(request: web.Request) -> web.Response:
    return web.json_response({"name": "neuronserve", "version": __version__, "extensions": ["binary_tensor_data"]})


def _model(request: web.Request) -> tuple[ServerState, Manifest]:
    state = request.app[STATE_KEY]
    name = request.match_info["name"]
    if state.manifest is None:
        raise _Refusal(503, "the model is not loaded yet", "rejected", headers=_retry_after(state))
    if name != state.manifest.name:
        raise _Refusal(404, f"unknown model {name!r}; this server serves {state.manifest.name!r}", "bad_request")
    version = request.match_info.get("version")
    if version is not None and version != state.version:
        raise _Refusal(
            404, f"unknown version {version!r} of {name!r}; this server has {state.version!r}", "bad_request"
        )
    return state, state.manifest


async def _parse(
    body: bytes, request: web.Request, state: ServerState, manifest: Manifest, coding: str | None
) -> InferRequest:
    """Decode, parse and tokenize an infer request's body, read whole (refusals as ``_Refusal``)."""
    if coding is not None:
        body = _decode_body(body, coding, state.body_limit)
    try:
        parsed = parse_request_untokenized(
            body, request.headers.get(HEADER_LENGTH), manifest, state.tokenize is not None
        )
        if isinstance(parsed, TextRequest):
            parsed = await state.tokenized(parsed, manifest)
    except BadRequest as exc:
        raise _Refusal(exc.status, str(exc), "bad_request") from None
    return parsed


def _check_room(batcher: Batcher, state: ServerState) -> None:
    """A 429 with Retry-After if the batcher's queue is full."""
    try:
        batcher.check_room()
    except QueueFull as exc:
        raise _Refusal(429, str(exc), "rejected", headers=_retry_after(state)) from None


def _retry_after(state: ServerState) -> dict[str, str]:
    """The header of a 429 or 503: when to try again (a draining replica's clients, elsewhere)."""
    return {"Retry-After": str(state.config.retry_after_seconds)}


class _Refusal(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        outcome: str,
        *,
        close_connection: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.outcome = outcome
        self.close_connection = close_connection
        self.headers = headers


async def metadata(request: web.Request) -> web.Response:
    try:
        state, manifest = _model(request)
    except _Refusal as exc:
        return _error(exc.status, str(exc))
    return web.json_response(model_metadata(manifest, state.version, state.tokenize is not None, state.device))


async def model_ready(request: web.Request) -> web.Response:
    try:
        state, _ = _model(request)
    except _Refusal as exc:
        return _error(exc.status, str(exc))
    ok = state.serving
    return web.json_response({"name": request.match_info["name"], "ready": ok}, status=200 if ok else 503)


async def infer(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    try:
        return await _infer(request, state)
    except asyncio.CancelledError:
        # The client hung up (aiohttp cancels the handler, see ``app_runner``): nobody reads an
        # answer, and the server did not fail. Every other path counts its own outcome.
        state.metrics.outcome("aborted")
        raise


def _admit(request: web.Request) -> tuple[ServerState, Manifest, Batcher, str | None]:
    """The checks an infer request passes before its body is read (refusals as ``_Refusal``):
    the model, the phase, room in the queue, the content coding, an upload place, the length."""
    state, manifest = _model(request)
    if not state.accepting or state.batcher is None:
        raise _Refusal(503, f"not accepting requests ({state.phase})", "rejected", headers=_retry_after(state))
    # A full queue refuses before the body is read, parsed or tokenized (aiohttp reads the rest
    # of it and drops it); submit checks again, as the queue may fill meanwhile.
    _check_room(state.batcher, state)
    coding = _check_content_encoding(request)
    if state.uploads >= state.config.max_uploads:
        # Each upload holds up to a body's worth of memory until it is queued: a bound, or slow
        # clients could hold any amount. 503, not 429: the server's receiving capacity is used
        # up (by other, perhaps slow, clients), not this client's share of requests.
        raise _Refusal(
            503,
            f"too many requests being received ({state.config.max_uploads}, the server's --max-uploads)",
            "rejected",
            headers=_retry_after(state),
        )
    if request.content_length is not None and request.content_length > state.body_limit:
        raise _body_too_large(state.body_limit)
    return state, manifest, state.batcher, coding


async def expect_continue(request: web.Request) -> web.StreamResponse | None:
    """``Expect: 100-continue`` on an infer route: the refusal ``infer`` would answer before reading
    the body (429 queue full, 503, 404, 413, 415) is answered instead of 100 Continue, so the client
    does not send a body only to have it dropped (aiohttp's default sends 100 Continue first)."""
    if request.headers.get("Expect", "").lower() == "100-continue" and request.version >= (1, 1):
        try:
            _admit(request)
        except _Refusal as exc:
            request.app[STATE_KEY].metrics.outcome(exc.outcome)
            refusal = _error(exc.status, str(exc), exc.headers)
            # The client may send its body anyway, or not: nothing after it on this connection
            # can be read reliably.
            refusal.force_close()
            return refusal
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the answer proper has not started (as aiohttp's own)
        return None
    if request.version >= (1, 1):
        request.app[STATE_KEY].metrics.outcome("bad_request")
        refusal = _error(417, f"unknown Expect: {request.headers.get('Expect')!r} (only 100-continue is)")
        refusal.force_close()  # its body may follow or not
        return refusal
    return None


async def _infer(request: web.Request, state: ServerState) -> web.Response:
    arrived = time.monotonic()
    try:
        state, manifest, batcher, coding = _admit(request)
        # Accepted from here: a drain waits for this request to be submitted (or refused).
        state.upload_started()
        try:
            body = await _read_body(request, state.body_limit, state.config.body_timeout_seconds)
            parsed = await _parse(body, request, state, manifest, coding)
            # Submitted before the count drops, with no await between: a drain waiting for the
            # uploads to end cannot close the batcher in between.
            future = batcher.submit(parsed)
        except QueueFull as exc:
            raise _Refusal(429, str(exc), "rejected", headers=_retry_after(state)) from None
        except ShuttingDown as exc:
            raise _Refusal(503, str(exc), "rejected", headers=_retry_after(state)) from None
        finally:
            state.upload_ended()
    except _Refusal as exc:
        state.metrics.outcome(exc.outcome)
        refusal = _error(exc.status, str(exc), exc.headers)
        if exc.close_connection:
            refusal.force_close()
        return refusal

    state.inflight += 1
    state.answered.clear()
    try:
        try:
            rows = await future
        except ShuttingDown as exc:
            state.metrics.outcome("rejected")
            return _error(503, str(exc), _retry_after(state))
        except Exception as exc:
            # The model failed on this request (alone: the batcher split the batch to find it). Its
            # message can be a TorchScript traceback with the paths of the model's source: logged
            # whole here, answered in one line.
            log.error("inference failed for request %s: %s", parsed.id or "(no id)", exc)
            state.metrics.outcome(state.request_failed_alone(parsed))
            return _error(500, f"inference failed: {failure_summary(exc)}")
        state.request_succeeded()
        payload, header_length = infer_response(
            manifest.name,
            state.version,
            parsed.id,
            manifest.outputs[0].name,
            rows,
            binary=parsed.binary_output,
            parameters=EMULATED_PARAMETERS if state.device["emulated"] else None,
        )
        if header_length is None:
            response = web.Response(body=payload, content_type="application/json")
        else:
            response = web.Response(
                body=payload, content_type="application/octet-stream", headers={HEADER_LENGTH: str(header_length)}
            )
        state.metrics.outcome("ok")
        state.metrics.latency.observe(time.monotonic() - arrived)
        return response
    finally:
        state.inflight -= 1
        if state.inflight == 0:
            state.answered.set()


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    return web.Response(body=generate_latest(state.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


# ------------------------------------------------------------------------------------------ process


@dataclass(frozen=True)
class EmulatedOptions:
    """``--device emulated-neuroncore``: which Inf2 profile, how much slower, the model name without an artifact."""

    profile: str = "bert-base"
    time_scale: float = 1.0
    model_name: str | None = None


@dataclass(frozen=True)
class ServeOptions:
    artifact: str | None
    #: None: every interface of both families (``all_interfaces_socket``).
    host: str | None = None
    port: int = 8080
    grace_seconds: float = 30.0
    #: After SIGTERM, new requests are still served this long (at most a third of the grace period).
    drain_delay_seconds: float = 5.0
    config: ServeConfig = ServeConfig()
    torch_threads: int | None = None
    cache_dir: str | None = None
    emulated: EmulatedOptions | None = None
    #: Served under this name, whatever name the artifact was compiled with: an artifact is shared
    #: by every deployment of the same model, source and buckets (the compile cache's key).
    model_name: str | None = None
    #: The sha256 the artifact's manifest must have (None: whatever manifest is at the URI). The
    #: operator passes the one its status records, so that a pod never serves an artifact that was
    #: replaced at the same URI after it was recorded.
    manifest_sha256: str | None = None


Loaded = tuple[Manifest, Runner | TimedDevice, Tokenize | None, dict[str, float], dict[str, Any] | None]


class EmulationError(Exception):
    """The emulated device cannot serve this artifact (e.g. a batch bucket the profile has no figure for)."""


def load_emulated(
    artifact: str | None, options: EmulatedOptions, scratch: Path, manifest_sha256: str | None = None
) -> Loaded:
    """The emulated device over an artifact's contract (manifest and tokenizer only) or a built-in one.

    With an artifact, text input is what ``serve --artifact`` takes on it: text through its tokenizer,
    or, an artifact without one (a TorchScript source's), no text input at all (400, and no ``text``
    in the metadata). Tokenizing by length stands in for a tokenizer only where there is none to
    honour: the built-in contract, or an artifact with a tokenizer that a sandbox-only install
    (no `tokenizers` package) cannot read, whose text is still accepted as the real server, whose
    image has the package, accepts it.
    """
    from neuronserve.emulated import PROFILES, EmulatedDevice, synthetic_manifest, tokenize_by_length
    from neuronserve.manifest import TOKENIZER_NAME
    from neuronserve.store import fetch_manifest

    profile = PROFILES[options.profile]
    tokenize: Tokenize | None = tokenize_by_length
    if artifact is None:
        manifest = synthetic_manifest(profile, options.model_name or profile.name)
    else:
        manifest, directory = fetch_manifest(artifact, scratch, (TOKENIZER_NAME,), manifest_sha256)
        if manifest.has_tokenizer():
            from neuronserve.protocol import tokenizer_from_file

            with contextlib.suppress(ImportError):
                tokenize = tokenizer_from_file(str(directory / TOKENIZER_NAME), manifest.max_sequence)
        else:
            tokenize = None
    try:
        device = EmulatedDevice(profile, manifest, options.time_scale)
    except ValueError as exc:
        raise EmulationError(f"cannot emulate {manifest.name!r} with profile {profile.name!r}: {exc}") from exc
    return manifest, device, tokenize, {}, device.describe()


def load_model(artifact: str, scratch: Path, manifest_sha256: str | None = None) -> Loaded:
    """Fetch, verify, load and warm (blocking: run it off the event loop)."""
    from neuronserve.backend import ModelRunner
    from neuronserve.manifest import TOKENIZER_NAME
    from neuronserve.protocol import tokenizer_from_file
    from neuronserve.store import fetch_artifact

    manifest, _, directory = fetch_artifact(artifact, scratch, manifest_sha256)
    runner = ModelRunner(manifest, directory)
    timings = runner.warm()
    tokenize = None
    if manifest.has_tokenizer():
        with contextlib.suppress(ImportError):
            tokenize = tokenizer_from_file(str(directory / TOKENIZER_NAME), manifest.max_sequence)
    return manifest, runner, tokenize, timings, None


async def serve(opts: ServeOptions) -> int:
    """Run the server until SIGTERM/SIGINT; the process exit code."""
    from neuronserve.store import ArtifactRejected, ManifestMismatch, StoreError

    load_errors: tuple[type[Exception], ...] = (ArtifactRejected, StoreError, EmulationError)
    if opts.emulated is None:
        from neuronserve.backend import LoadError  # torch: only when a model is really loaded

        load_errors += (LoadError,)

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    again = asyncio.Event()  # a second signal: skip what is left of the drain delay

    def on_signal() -> None:
        (again if stop.is_set() else stop).set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)

    state = ServerState(opts.config)
    runner = app_runner(state, access_log=None, handle_signals=False, shutdown_timeout=max(1.0, opts.grace_seconds))
    await runner.setup()
    where = "every interface" if opts.host is None else opts.host
    try:
        if opts.host is None:
            sock, where = all_interfaces_socket(opts.port)
            site: web.BaseSite = web.SockSite(runner, sock)
        else:
            site = web.TCPSite(runner, opts.host, opts.port)
        await site.start()
    except OSError as exc:
        print(f"neuronserve: cannot listen on {where}, port {opts.port}: {exc.strerror or exc}", file=sys.stderr)
        await runner.cleanup()
        return 3
    port = runner.addresses[0][1] if runner.addresses else opts.port
    # Tests and scripts started with --port 0 read the bound port from this line.
    what = opts.artifact or "no artifact"
    if opts.manifest_sha256 is not None:
        what += f" (manifest sha256 {opts.manifest_sha256})"
    if opts.emulated is not None:
        what += f" on the EMULATED NeuronCore device, profile {opts.emulated.profile}"
    if opts.host is None:
        log.info("listening on http://*:%s (%s; live; loading %s)", port, where, what)
    else:
        log.info("listening on http://%s:%s (live; loading %s)", _url_host(opts.host), port, what)

    # A stop while loading may leave the loader writing here as the directory goes.
    with tempfile.TemporaryDirectory(
        prefix="neuronserve-artifact-", dir=opts.cache_dir, ignore_cleanup_errors=True
    ) as scratch:
        if opts.emulated is not None:
            load = _in_daemon_thread(
                loop, load_emulated, opts.artifact, opts.emulated, Path(scratch), opts.manifest_sha256
            )
        elif opts.artifact is not None:
            load = _in_daemon_thread(loop, load_model, opts.artifact, Path(scratch), opts.manifest_sha256)
        else:
            raise ValueError("an artifact is required unless the device is emulated")
        stopper: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        pending: set[asyncio.Future[Any]] = {load, stopper}
        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if not load.done():
            # The loader thread is a daemon: the process exits now, not when a download or a
            # warm-up of minutes would have ended (through ``os._exit``: see ``loader_abandoned``).
            log.info("stopped while loading")
            global _loader_abandoned
            _loader_abandoned = True
            await runner.cleanup()
            return 0
        try:
            manifest, model_runner, tokenize, timings, device = load.result()
        except load_errors as exc:
            print(f"neuronserve: {exc}", file=sys.stderr)
            await runner.cleanup()
            return MANIFEST_MISMATCH_EXIT_CODE if isinstance(exc, ManifestMismatch) else 2
        if opts.model_name is not None and opts.model_name != manifest.name:
            manifest = manifest.model_copy(update={"name": opts.model_name})
        state.activate(manifest, model_runner, tokenize, device)
        if device is not None and device["emulated"]:
            log.info(
                "ready: model %r on the EMULATED NeuronCore device (profile %s: %s; %d cores, time scale %g; "
                "%d buckets), batching %s. Outputs are placeholders, not model outputs",
                manifest.name,
                device["profile"],
                device["profile_description"],
                device["cores"],
                device["time_scale"],
                len(manifest.buckets),
                "on" if opts.config.batching else "off",
            )
        else:
            log.info(
                "ready: model %r (%s, %d buckets, warm-up %.2fs), batching %s",
                manifest.name,
                manifest.backend,
                len(manifest.buckets),
                sum(timings.values()),
                "on" if opts.config.batching else "off",
            )
        await stopper
        delay = drain_delay(opts.grace_seconds, opts.drain_delay_seconds)
        log.info(
            "SIGTERM: not ready; serving new requests %.3gs more while endpoints update (a second signal "
            "skips that), then draining (grace %.3gs in all)",
            delay,
            opts.grace_seconds,
        )
        deadline = loop.time() + opts.grace_seconds
        finished = await state.drain(opts.grace_seconds, delay, again)
        closed = await close_server(runner, deadline)
        state.close()
        if not closed:
            log.warning("grace period ran out with connections still open: closing them")
        log.info("drained (%s); exiting", "all work finished" if finished and closed else "grace period ran out")
    return 0


def all_interfaces_socket(port: int) -> tuple[socket.socket, str]:
    """A bound socket on every interface of both families, and what it listens on (for the log).

    One IPv6 socket with IPV6_V6ONLY off takes IPv4 connections too (as Go's and Java's listeners
    do): a pod answers on its IP in an IPv4, IPv6 or dual-stack cluster, and ``--port 0`` gets one
    port for both. 0.0.0.0, the former default, is IPv4 only: on an IPv6 cluster no probe reached
    it. Where IPv6 is disabled (sysctl) the socket still takes IPv4; where the kernel has no IPv6
    at all, an IPv4 socket is bound instead. Any other failure (the port is taken) is raised.
    """
    try:
        return _bound(socket.AF_INET6, ("::", port)), "every interface, IPv4 and IPv6"
    except OSError as exc:
        if exc.errno not in _NO_IPV6:
            raise
        ipv6_error = exc
    sock = _bound(socket.AF_INET, ("0.0.0.0", port))
    log.warning("IPv6 unavailable (%s): listening on IPv4 only", ipv6_error.strerror or ipv6_error)
    return sock, "every IPv4 interface; no IPv6"


#: What creating or binding an IPv6 socket fails with where the host has no IPv6.
_NO_IPV6 = {errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT, errno.EADDRNOTAVAIL}


def _bound(family: socket.AddressFamily, address: tuple[str, int]) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # whatever net.ipv6.bindv6only says
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp's TCPSite does
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def _url_host(host: str) -> str:
    """``host`` as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def _in_daemon_thread(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
    """``fn(*args)`` in a daemon thread, as a future of the loop.

    Not the loop's executor: its threads are joined when the loop closes and at exit, so a stop
    during a long load (an S3 download, minutes of warm-up on Neuron) would wait for the load.
    """
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        result, error = None, None
        try:
            result = fn(*args)
        except BaseException as exc:  # handed to the awaiting coroutine, as an executor would
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="neuronserve-load", daemon=True).start()
    return future
