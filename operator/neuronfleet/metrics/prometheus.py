"""Read the autoscaler's signals from Prometheus (prometheus-api-client) as a typed snapshot.

The queries are the spec's ``scaling.metrics`` (defaults match the names ``neuronserve`` exports;
``$namespace`` and ``$name`` are replaced by the resource's). Each signal is one instant query; an
empty query turns its signal off. One more, ``sampleTime``, says when the newest sample was
scraped: an instant query answers samples up to Prometheus' lookback (5 minutes) old stamped with
the query's time, so the snapshot is dated by the samples, and ``staleAfterSeconds`` can tell.

Missing data is never a zero: an empty result (no series, e.g. every target down: Prometheus marks
its series stale after a failed scrape) makes that signal ``None``, and the scaling policy then
holds instead of scaling down. A query Prometheus refuses (400 or 422: a typo) makes only its own
signal ``None``, and the reason names its ``scaling.metrics`` field; so does an answer that is no
value of its signal: the counts and rates are summed over an answer's series, but the busy ratio
(``utilization``) must be one series (a sum of per-pod ratios sized the fleet twice too big) and at
most :data:`RATIO_MOST` (a rate of busy-time counters overshoots 1: between 1 and that it reads as
1); several sample times read as the newest. Prometheus
unreachable, timing out or failing (5xx) makes the whole snapshot unavailable, with the reason,
which the status shows as ScalingActive=False.

A reconcile waits for its snapshot inside its reconcile slot, so a Prometheus that accepts
connections and never answers must not hold the slots (32 snapshots against one took 26 s, a
median of 15 s each):

- one deadline per snapshot, ``timeoutSeconds`` from when its queries start, bounds all of them
  (each query gets what is left). requests' timeout bounds each socket read only (an answer trickled
  a byte at a time never meets it), so when the deadline passes the read's connection is shut down
  (:class:`_Watch`), answer half-read or not, also through an http:// or https:// proxy: the query
  thread is free then, not when the endpoint stops sending. (Not through a SOCKS proxy, nor a host
  name's DNS look-up, which have no socket to shut: those are bounded by the socket timeout and the
  resolver's only);
- prometheus-api-client is synchronous (requests), so the queries run in a small pool of
  :data:`QUERY_THREADS` threads of their own, not the default executor the rest of the operator's
  ``to_thread`` calls share; a snapshot waits at most ``timeoutSeconds`` for a thread, and one still
  queued then is dropped unrun (not counted against Prometheus: it reads "not asked"); a read's
  deadline runs from its start, and only a read that ran records a failure in the back-off;
- after a failure the URL backs off (:class:`Backoff`): for :data:`BACKOFF_SECONDS`, doubling per
  failed probe up to :data:`MAX_BACKOFF_SECONDS`, every snapshot of it is unavailable at once,
  without a connection; then one snapshot probes while the others keep backing off, and none
  while an earlier read of the URL still runs (a read outlives its snapshot when the reconcile
  waiting for it is cancelled, or when the watch cannot end it: each probe beside it would hold one
  more query thread); and, backing off or not, no read while one its snapshot gave up on runs past
  its deadline (not failed yet: it records its own outcome when it ends);
- a URL no snapshot asked for :data:`IDLE_ENDPOINT_SECONDS` (a spec's URL edited, a deployment
  deleted) loses its HTTP client (closed) and its back-off: the operator keeps those of the URLs
  in use, not of every URL it ever asked.

Each query of a deployment that is the default (compared as rendered text: an override equal to
the default counts as the default) is read together with the other deployments': each default
signal is asked once per :class:`Endpoint` in its fleet-wide form
(:data:`neuronfleet.api.default_queries.FLEET`, one row per namespace and deployment), and each
deployment's snapshot takes its row of the queries it has at their default; a deployment absent
from an answer reads as missing, as its own query returning nothing would. That read is:

- shared by every snapshot asked within :func:`fleet_read_max_age` of when it started (at most
  :data:`FLEET_READ_MAX_AGE_SECONDS`, and at most half the asking deployment's interval, so that no
  deployment reads the same answer at two evaluations);
- single-flight: a snapshot asked while the read is under way waits for it, not for one of its own;
- one snapshot's worth of work as above: one deadline (the ``timeoutSeconds`` of the deployments
  sharing it; deployments with another timeout share another read), a query thread, and the
  endpoint's back-off, so a failure backs off every deployment on that endpoint at once.

A deployment's overridden queries (the usual one: a longer ``arrivalRate`` window for a slower
scrape) are its own: asked together as one read as described above, after the shared read (which
is usually there already) answered: one after the other, not at once, so that a probe of a backing
off endpoint is one read, and the other is not turned away by the probe under way. Each of the two
has its ``timeoutSeconds``. A snapshot mixing the two is dated as any: by the earliest of its
queries' evaluation times (the shared read's and its own) and its sample time (from whichever
read asked ``sampleTime``), so it is never newer than its oldest part.

What a failure says goes to the status (readable by anyone who may get the resource), its Events and
the log, and the URL is the user's (a spec may point ``prometheusUrl`` anywhere the operator can
reach): a URL is printed only through :func:`redact_url` (no user-info, no query-string values), and
an HTTP error is its status code plus, when the body is Prometheus' JSON error, its short ``error``;
never the body itself.

Whom the operator asks, and with what (see :mod:`neuronfleet.metrics.prometheus_auth` and
:mod:`neuronfleet.planning.prometheus_urls`):

- the operator's credentials (a bearer token or basic auth, ``--prometheus-*-file``) go only to its
  own ``--prometheus-url``, for deployments whose spec names no ``prometheusUrl``. A spec's URL is
  asked without them, even when it is the same URL: a client and a back-off of its own each;
- a spec's URL outside the operator's allow-list is not requested at all, and a spec's URL is
  asked without following redirects (:class:`RedirectNotFollowed`): an allowed endpoint answering
  3xx must not send the operator to a URL the allow-list does not name. The operator's own URL is
  trusted configuration and keeps following them (requests drops the credentials across hosts);
- TLS is verified against what requests trusts (the system's bundle, or REQUESTS_CA_BUNDLE's) plus
  ``--prometheus-ca-file`` when set, for every URL.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import logging
import math
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests.adapters import HTTPAdapter
from urllib3 import HTTPConnectionPool, HTTPResponse, HTTPSConnectionPool, ProxyManager
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.util.retry import Retry

from neuronfleet.api.default_queries import FLEET, ONE_DEPLOYMENT, ROW_LABELS, default_queries
from neuronfleet.api.v1alpha1 import InferenceDeployment, MetricQueries
from neuronfleet.metrics.prometheus_auth import PrometheusCredentials, TrustBundle
from neuronfleet.planning.prometheus_queries import refused_query_note
from neuronfleet.planning.prometheus_urls import PrometheusUrlPolicy
from neuronfleet.planning.scaling import queries_off
from neuronfleet.planning.signals import QUERIED, SIGNALS, MetricSnapshot

logger = logging.getLogger(__name__)


def render(query: str, namespace: str, name: str) -> str:
    """A query template with the resource's namespace and name filled in."""
    return query.replace("$namespace", namespace).replace("$name", name)


def queries_for(dep: InferenceDeployment) -> dict[str, str]:
    metrics: MetricQueries = dep.spec.scaling.metrics
    namespace = dep.metadata.namespace or "default"
    # An empty query turns its signal off (None, as if it returned nothing) without a round trip:
    # the simulator leaves it out by the same rule (planning.scaling.as_read).
    off = queries_off(dep.spec.scaling)
    return {signal: render(getattr(metrics, signal), namespace, dep.name) for signal in QUERIED if signal not in off}


#: The per-deployment default of every query (templates), and their fleet-wide form, by field name.
DEFAULT_QUERIES = default_queries(ONE_DEPLOYMENT)
FLEET_QUERIES = default_queries(FLEET)
#: Every query a snapshot may ask: the signals' and the sample time's.
QUERY_FIELDS = (*QUERIED, "sample_time")


def default_query_fields(dep: InferenceDeployment) -> frozenset[str]:
    """The fields (of :data:`QUERY_FIELDS`) whose query, rendered for ``dep``, is the default's: its
    snapshot takes those from its row of the fleet-wide read. An override spelling out the default for
    this deployment is the default; any other text is asked on its own, and an empty query (its
    signal off) is asked by neither."""
    metrics = dep.spec.scaling.metrics
    namespace = dep.metadata.namespace or "default"
    return frozenset(
        field
        for field in QUERY_FIELDS
        if render(getattr(metrics, field), namespace, dep.name).strip()
        == render(DEFAULT_QUERIES[field], namespace, dep.name)
    )


#: The spec field (under scaling.metrics) each signal's query comes from.
SIGNAL_FIELDS = {signal: MetricQueries.model_fields[signal].alias or signal for signal in QUERIED}

#: A URL's user-info in any text: from ``://`` to the last ``@`` before a space or a quote, so that
#: a password with an unencoded ``/``, ``?`` or ``#`` is hidden whole too (a path's or a query's
#: ``@``, which a Prometheus URL has no use for, is hidden with what comes before it).
_USERINFO = re.compile(r"(?<=://)[^\s'\"<>]*@")
#: The longest reason taken from an answer (Prometheus' ``error``) or an exception's text.
REASON_CHARS = 200


def redact_url(url: str) -> str:
    """``url`` fit for a status, an Event or a log line: its user-info and its query string's values
    replaced by ``***``, its fragment dropped.

    A ``--prometheus-url`` or ``scaling.metrics.prometheusUrl`` may carry basic-auth credentials
    (``http://user:password@host/``) or a token (``?token=...``); what the operator prints of it
    is readable by anyone who may get the resource or list its Events.
    """
    base, question, query = _USERINFO.sub("***@", url).partition("#")[0].partition("?")
    if not question:
        return base
    pairs = (pair.partition("=") for pair in query.split("&") if pair)
    # A key without a value may be a bare token: hidden whole.
    return f"{base}?{'&'.join(f'{key}=***' if equals else '***' for key, equals, _ in pairs)}"


def _scrub(text: str, url: str) -> str:
    """An exception's ``text`` without ``url``'s secrets: a URL's user-info anywhere in it (an error
    may print a URL whole) and ``url``'s query-string pairs (the client appends its path to the URL,
    query and all, and the connection errors print that path)."""
    text = _USERINFO.sub("***@", text)
    query = url.partition("#")[0].partition("?")[2]
    for pair in query.split("&"):
        key, equals, value = pair.partition("=")
        if value:
            text = text.replace(pair, f"{key}{equals}***")
        elif pair and not equals:
            text = text.replace(pair, "***")
    return text


def _short(text: str) -> str:
    """``text`` on one line (no control characters: a status message, an Event, a log line) of at
    most REASON_CHARS characters."""
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "\u2026"


_HTTP_ERROR = re.compile(r"^HTTP Status Code (?P<code>\d{3}) \((?P<body>.*)\)$", re.DOTALL)


def _prometheus_error(body: str) -> str | None:
    """The ``error`` of Prometheus' JSON error answer (``{"status": "error", "errorType": ...,
    "error": ...}``), short; None for any other body (an HTML page, a proxy's text, another service's
    JSON), which is not copied: the URL may be any endpoint the operator can reach."""
    with contextlib.suppress(ValueError, SyntaxError):
        body = ast.literal_eval(body).decode(errors="replace")  # the client writes repr(bytes)
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    if not isinstance(answer, dict) or answer.get("status") != "error":
        return None
    error, error_type = answer.get("error"), answer.get("errorType")
    if not isinstance(error, str) or not isinstance(error_type, str) or not error.strip():
        return None
    return _short(_USERINFO.sub("***@", error))


def http_failure(message: str) -> tuple[int, str | None] | None:
    """The status code and Prometheus' short ``error`` (None unless the body is Prometheus' JSON
    error) of the client's exception text for an HTTP error; None for any other text."""
    match = _HTTP_ERROR.match(message)
    if match is None:
        return None
    return int(match["code"]), _prometheus_error(match["body"])


def query_refusal(message: str) -> str | None:
    """Prometheus' reason for refusing a query (400 bad_data, 422 execution), from the client's
    exception text; None when the failure is not the query's (5xx, 503: Prometheus unavailable)."""
    failure = http_failure(message)
    if failure is None or failure[0] not in (400, 422):
        return None
    code, error = failure
    return f"Prometheus refused the query: {error}" if error else f"Prometheus refused the query (HTTP {code})"


def _failure(exc: BaseException, url: str) -> str:
    """Why a snapshot's queries failed, for the status: the exception's type and a reason holding
    neither ``url``'s secrets nor what the endpoint answered."""
    name = type(exc).__name__
    if isinstance(exc, PrometheusApiClientException):
        failure = http_failure(str(exc))
        if failure is None:
            return f"{name}: an error answer"
        code, error = failure
        return f"{name}: HTTP {code}: {error}" if error else f"{name}: HTTP {code}"
    if isinstance(exc, _INVALID_URL):
        # Its text is the URL, or a piece of it (the part before the @ of a malformed user-info).
        return f"{name}: not a valid URL"
    if isinstance(exc, (requests.RequestException, TimeoutError)):
        text = _short(_scrub(str(exc), url))
        return f"{name}: {text}" if text else name
    # ValueError, KeyError, TypeError of reading the answer: their text may quote it.
    return f"{name}: an answer of an unexpected shape"


@dataclass(frozen=True)
class QueryResult:
    value: float | None
    evaluated_at: float | None


def _scalar(result: list[Any]) -> QueryResult:
    """One number from an instant query's result: the sum over an instant vector's series, or a
    scalar's value (a query may wrap its sum in ``scalar()``); None when empty, not a number (a
    string) or not finite (NaN, or Inf from a division by zero, is no measurement)."""
    if not result:
        return QueryResult(None, None)
    samples: list[list[Any]]
    if len(result) == 2 and not isinstance(result[0], dict):
        # A scalar (or string) result is one [time, "value"] pair, not a list of series.
        samples = [result]
    else:
        samples = [series["value"] for series in result if isinstance(series, dict) and "value" in series]
    if not samples:
        return QueryResult(None, None)
    total = 0.0
    evaluated_at = None
    for stamp, raw in samples:
        try:
            value = float(raw)
        except (TypeError, ValueError):  # a string result: no number to read
            return QueryResult(None, float(stamp))
        if not math.isfinite(value):
            return QueryResult(None, float(stamp))
        total += value
        evaluated_at = float(stamp)
    return QueryResult(total, evaluated_at)


#: The most a busy ratio may read and still be a ratio; above it, a sum of ratios (two pods at 0.9
#: read 1.8) or a broken exporter. Between 1 and this it reads as 1 (busy): a rate of busy-time
#: counters overshoots, as neuronserve credits a batch's busy time to
#: ``neuronserve_device_busy_seconds_total`` when the batch ends, so its rate() over a window,
#: divided by ``neuronserve_device_cores`` (the counter is summed over cores: undivided, a saturated
#: 2-core replica reads about 2), reads up to 1 + batch / window (1.07 for 4 s batches over a
#: 1-minute rate of a 15 s scrape). A sum of ratios that adds up to this or less (two pods at 0.7)
#: is not told from such an overshoot.
RATIO_MOST = 1.5


class _NotOneNumber(Exception):
    """An answer that is no value of its signal; its text is the reason, for the status."""


def _series(result: list[Any]) -> int:
    """How many series (or a scalar's one value) an instant query's ``result`` holds."""
    if len(result) == 2 and not isinstance(result[0], dict):
        return 1
    return sum(isinstance(series, dict) for series in result)


def _own_answer(field: str, result: list[Any]) -> QueryResult:
    """One deployment's own query's answer, as :func:`_scalar` reads it, but for the fields whose
    series do not add up: the busy ratio (a sum of per-pod ratios reads 1.8 for two pods at 0.9 and
    sizes the fleet twice too big) is refused unless one series, and the sample time of several is
    the newest. The other signals are counts and rates, whose sum over series is the fleet's."""
    series = _series(result)
    if field == "utilization" and series > 1:
        raise _NotOneNumber(
            f"the query answered {series} series where a ratio is one number: aggregate them, e.g. avg(...)"
        )
    if field == "sample_time" and series > 1:
        stamps = [_scalar([one]) for one in result]
        if any(stamp.value is None for stamp in stamps):
            return QueryResult(None, stamps[0].evaluated_at)
        return max(stamps, key=lambda stamp: stamp.value or 0.0)
    return _scalar(result)


def _over_one(results: dict[str, QueryResult]) -> str | None:
    """Why the busy ratio in ``results`` is no ratio (above :data:`RATIO_MOST`), or None."""
    utilization = results.get("utilization")
    if utilization is None or utilization.value is None or utilization.value <= RATIO_MOST:
        return None
    return (
        f"the busy ratio read {utilization.value:g}, above {RATIO_MOST:g}: a sum where an average belongs? "
        "e.g. avg(...)"
    )


#: A row of a fleet-wide answer: (namespace, deployment).
Row = tuple[str, str]
_NOTHING = QueryResult(None, None)


def _rows(result: list[Any]) -> dict[Row, QueryResult]:
    """A fleet-wide query's answer by (namespace, deployment), each row read as :func:`_scalar`
    reads a one-deployment answer; raises ValueError for an answer that is not a vector."""
    rows: dict[Row, QueryResult] = {}
    for series in result:
        if not isinstance(series, dict) or "value" not in series:
            raise ValueError("not an instant vector")
        labels = series.get("metric") or {}
        namespace, deployment = (str(labels.get(label, "")) for label in ROW_LABELS)
        rows[(namespace, deployment)] = _scalar([series])
    return rows


_Parsed = TypeVar("_Parsed")


def _ignore_field(parse: Callable[[list[Any]], _Parsed], field: str, result: list[Any]) -> _Parsed:
    return parse(result)


@dataclass(frozen=True)
class FleetAnswer:
    """One fleet-wide read: each signal's rows, the queries Prometheus refused, the sample times."""

    #: When the read started, on the reader's clock.
    started: float
    results: dict[str, dict[Row, QueryResult]]
    refused: dict[str, str]
    sampled: dict[Row, QueryResult]


#: Threads for Prometheus queries, shared by every deployment (a snapshot's queries run in one).
QUERY_THREADS = 8
#: How long past a started read's deadline its snapshot still waits for it (the watch's hang-up and
#: the error's way back to the event loop), before giving up on a read the watch cannot end.
READ_GRACE_SECONDS = 1.0
#: How long a URL is skipped after its first failure...
BACKOFF_SECONDS = 15.0
#: ... doubling with each failed probe, up to this.
MAX_BACKOFF_SECONDS = 120.0
#: An endpoint no snapshot asked for this long loses its client and its back-off (a spec URL edited
#: or of a deleted deployment is never asked again); longer than any deployment's interval (600 s
#: at most), so that no endpoint in use loses either.
IDLE_ENDPOINT_SECONDS = 1200.0

#: A fleet-wide read serves the snapshots asked at most this long after it started: Prometheus'
#: data moves once per scrape (the chart's PodMonitor: 15 s), and a reconcile that waits for the
#: pods and the API server is seconds late anyway; 200 deployments at 15 s then send 7 queries per
#: 5 s instead of 90 per second.
FLEET_READ_MAX_AGE_SECONDS = 5.0


def fleet_read_max_age(interval_seconds: float) -> float:
    """How old a fleet-wide read a deployment evaluated every ``interval_seconds`` may take: at most
    half its interval, so that each of its evaluations reads data newer than the last one's."""
    return min(FLEET_READ_MAX_AGE_SECONDS, interval_seconds / 2)


#: Failures that say Prometheus (or the way to it) is unavailable, not that a query is wrong.
_UNAVAILABLE: tuple[type[Exception], ...] = (requests.RequestException, PrometheusApiClientException, TimeoutError)
#: ... and those of an answer of an unexpected shape (e.g. a matrix from a range selector).
_MALFORMED: tuple[type[Exception], ...] = (ValueError, KeyError, TypeError)
#: Failures of a URL that cannot be requested, whose text holds the URL.
_INVALID_URL: tuple[type[Exception], ...] = (
    requests.exceptions.InvalidURL,
    requests.exceptions.MissingSchema,
    requests.exceptions.InvalidSchema,
    requests.exceptions.URLRequired,
)


class RedirectNotFollowed(requests.RequestException):
    """A spec's Prometheus answered a redirect, which the operator does not follow."""


def _refuse_redirect(response: requests.Response, *args: Any, **kwargs: Any) -> requests.Response:
    """A session's response hook: a redirect ends the request (before requests follows it) as an
    error that says so. The target is not printed: it is whatever the endpoint answered."""
    if response.is_redirect:
        response.close()
        raise RedirectNotFollowed(
            f"the endpoint redirected (HTTP {response.status_code}); redirects are not followed for a spec's "
            "scaling.metrics.prometheusUrl: name the URL it redirects to"
        )
    return response


class _Watch:
    """The deadline of one read in a query thread. requests' timeout bounds each socket read, not an
    answer: a Prometheus that sends a byte per second (of its headers or its body) never times out.
    When the deadline passes, the socket the read is using is shut down, which ends the blocked read
    at once (closing it would not wake it).

    Only while the read owns the connection: requests hands a kept-alive connection back to the pool
    as soon as the answer's body is read, and the answer is decoded and parsed after that, so a
    deadline passing then would shut the socket another read of the endpoint has taken since. The
    pool's release (:func:`_released`) and :meth:`stop` forget the socket, and the shutdown happens
    under the same lock, so none can slip between the two."""

    def __init__(self, timeout: float) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._stopped = False
        self.expired = False
        self._timer = threading.Timer(timeout, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self.expired = True
            if self._sock is not None:
                _hang_up(self._sock)

    def using(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            if self._stopped:
                return
            self._sock = sock
            if self.expired:
                _hang_up(sock)

    def released(self) -> None:
        """The read's connection went back to the pool: no longer the read's to shut."""
        with self._lock:
            self._sock = None

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._sock = None
        self._timer.cancel()


def _shut(sock: Any) -> None:
    # The plain socket's shutdown, also for a TLS one: SSLSocket.shutdown would drop its TLS state
    # under the reading thread's feet. Through an https:// proxy to an https URL the connection's
    # socket is urllib3's SSLTransport (TLS in TLS), no socket at all: the one it runs over is shut.
    while not isinstance(sock, socket.socket) and hasattr(sock, "socket"):
        sock = sock.socket
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _hang_up(sock: Any) -> None:
    """:func:`_shut`, its failure logged: raised in the watch's timer thread, it would end the
    watch unseen and leave the read to run for as long as the endpoint sends."""
    try:
        _shut(sock)
    except Exception:
        logger.warning("could not shut a Prometheus read's connection down at its deadline", exc_info=True)


#: The watch of the read the current query thread runs, if any.
_WATCHING = threading.local()


def _watched(sock: socket.socket | None) -> None:
    watch: _Watch | None = getattr(_WATCHING, "watch", None)
    if watch is not None:
        watch.using(sock)


def _released() -> None:
    watch: _Watch | None = getattr(_WATCHING, "watch", None)
    if watch is not None:
        watch.released()


class _WatchedConnection:
    """A connection (a mixin of urllib3's, HTTP or HTTPS) whose socket the current read's
    :class:`_Watch` may shut down: a new one from the moment it is connected (a proxy's CONNECT
    reply and a TLS handshake are read within the connection's connect, and a proxy may trickle
    the first as any endpoint its answer), then the socket its connect ends with; a kept-alive one
    from the request whose answer it waits for."""

    sock: socket.socket | None

    def _new_conn(self) -> socket.socket:
        sock: socket.socket = super()._new_conn()  # type: ignore[misc]
        _watched(sock)
        return sock

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        _watched(self.sock)

    def getresponse(self) -> HTTPResponse:
        _watched(self.sock)
        response: HTTPResponse = super().getresponse()  # type: ignore[misc]
        return response


class _WatchedHTTPConnection(_WatchedConnection, HTTPConnection):  # type: ignore[misc]
    """:class:`_WatchedConnection` over plain HTTP."""


class _WatchedHTTPSConnection(_WatchedConnection, HTTPSConnection):  # type: ignore[misc]
    """:class:`_WatchedConnection` over TLS."""


class _WatchedHTTPPool(HTTPConnectionPool):
    """A pool whose connections are watched, and forgotten by the read's watch once handed back."""

    ConnectionCls = _WatchedHTTPConnection

    def _put_conn(self, conn: Any) -> None:
        # In the thread that read the answer (urllib3 releases the connection when its body is
        # read), before another read can take the connection from the pool.
        _released()
        super()._put_conn(conn)


class _WatchedHTTPSPool(HTTPSConnectionPool):
    """:class:`_WatchedHTTPPool` over TLS."""

    ConnectionCls = _WatchedHTTPSConnection

    def _put_conn(self, conn: Any) -> None:
        _released()
        super()._put_conn(conn)


_WATCHED_POOLS = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


class _WatchedAdapter(HTTPAdapter):
    """requests' adapter with :class:`_Watch`-able connections, direct or through an HTTP(S) proxy
    (a SOCKS proxy's connections are its own: a read through one is bounded per socket read only)."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _WATCHED_POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if isinstance(manager, ProxyManager):
            manager.pool_classes_by_scheme = _WATCHED_POOLS
        return manager


@dataclass(frozen=True)
class Endpoint:
    """A Prometheus the operator asks: its URL, and whether it is the operator's own (asked with its
    credentials) or a spec's (asked without them; it backs off on its own, so a spec that names the
    operator's URL and fails without credentials does not stop the operator's own reads)."""

    url: str
    own: bool


@dataclass
class Backoff:
    """A URL that failed: no query to it before ``until`` (the clock's seconds), then one probe."""

    failures: int
    until: float
    seconds: float
    reason: str
    #: While a probe is under way (until this time), the others keep backing off.
    probe_until: float = 0.0


class _Skipped(Exception):
    """A snapshot that asked Prometheus nothing: its URL backs off."""


class _Unavailable(Exception):
    """A read that got no answer; its text is the reason for the status."""


class _Breaker:
    """The back-off of every endpoint; used from the event loop and the query threads."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._state: dict[Endpoint, Backoff] = {}
        #: Reads under way in a query thread, by endpoint.
        self._running: dict[Endpoint, int] = {}
        #: Of those, the reads their snapshots gave up on past their deadline, by endpoint.
        self._overdue: dict[Endpoint, int] = {}

    def get(self, endpoint: Endpoint) -> Backoff | None:
        with self._lock:
            return self._state.get(endpoint)

    def _unavailable(self, endpoint: Endpoint, backoff: Backoff, now: float) -> str:
        left = max(backoff.until, backoff.probe_until) - now
        return (
            f"Prometheus at {redact_url(endpoint.url)} unavailable: {backoff.reason} "
            f"(backing off: asked again in {left:.0f} s)"
        )

    def admit(self, endpoint: Endpoint, probe_seconds: float) -> bool:
        """Whether a snapshot that may query ``endpoint`` is its probe; raises _Skipped if it may not."""
        with self._lock:
            backoff, now = self._state.get(endpoint), self._clock()
            if backoff is None and self._overdue.get(endpoint):
                # A read the watch could not end (a DNS look-up, a SOCKS proxy) runs past its
                # deadline, and has not failed yet: each read beside it would hold one more thread.
                raise _Skipped(
                    f"Prometheus at {redact_url(endpoint.url)} unavailable: no answer within the snapshot's "
                    "deadline (an earlier read of it still runs)"
                )
            if backoff is None:
                return False
            if now < backoff.until or now < backoff.probe_until:
                raise _Skipped(self._unavailable(endpoint, backoff, now))
            if self._running.get(endpoint):
                # A read its snapshot gave up on still holds a query thread (its reconcile cancelled,
                # or a read the watch cannot end): a probe beside it would hold one more, each
                # back-off another.
                raise _Skipped(
                    f"Prometheus at {redact_url(endpoint.url)} unavailable: {backoff.reason} "
                    "(backing off: an earlier read of it still runs)"
                )
            backoff.probe_until = now + probe_seconds
            return True

    def overdue(self, endpoint: Endpoint) -> bool:
        """Whether a read of ``endpoint`` its snapshot gave up on past its deadline still runs."""
        with self._lock:
            return bool(self._overdue.get(endpoint))

    def gave_up(self, endpoint: Endpoint) -> Callable[[object], None]:
        """A read of ``endpoint`` runs past its deadline and its snapshot's wait: no other read of it
        starts until it ends. Returns what to call when it ends."""
        with self._lock:
            self._overdue[endpoint] = self._overdue.get(endpoint, 0) + 1

        def ended(_: object) -> None:
            with self._lock:
                if self._overdue.get(endpoint, 0) <= 1:
                    self._overdue.pop(endpoint, None)
                else:
                    self._overdue[endpoint] -= 1

        return ended

    def unprobe(self, endpoint: Endpoint) -> None:
        """The probe :meth:`admit` let through asked nothing: the next snapshot may probe."""
        with self._lock:
            backoff = self._state.get(endpoint)
            if backoff is not None:
                backoff.probe_until = 0.0

    @contextlib.contextmanager
    def reading(self, endpoint: Endpoint) -> Iterator[None]:
        """A read of ``endpoint`` under way in a query thread, for as long as the context lasts."""
        with self._lock:
            self._running[endpoint] = self._running.get(endpoint, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                if self._running[endpoint] <= 1:
                    del self._running[endpoint]
                else:
                    self._running[endpoint] -= 1

    def check(self, endpoint: Endpoint) -> None:
        """Raise _Skipped if ``endpoint`` backs off (for a snapshot queued while it started to)."""
        with self._lock:
            backoff, now = self._state.get(endpoint), self._clock()
            if backoff is not None and now < backoff.until:
                raise _Skipped(self._unavailable(endpoint, backoff, now))

    def failed(self, endpoint: Endpoint, reason: str) -> None:
        with self._lock:
            backoff, now = self._state.get(endpoint), self._clock()
            if backoff is not None and now < backoff.until:
                return  # the same outage, met by a snapshot that had started before it was known
            failures = backoff.failures + 1 if backoff is not None else 1
            seconds = min(MAX_BACKOFF_SECONDS, BACKOFF_SECONDS * 2 ** (failures - 1))
            self._state[endpoint] = Backoff(failures, now + seconds, seconds, reason)

    def answered(self, endpoint: Endpoint) -> None:
        with self._lock:
            self._state.pop(endpoint, None)

    def forget(self, endpoint: Endpoint) -> bool:
        """Drop ``endpoint``'s back-off, unless a read of it is under way (then False)."""
        with self._lock:
            if self._running.get(endpoint):
                return False
            self._state.pop(endpoint, None)
            return True


class PrometheusMetrics:
    """A metrics source for the reconcile; one client per :class:`Endpoint` (a URL, own or a spec's),
    kept (with its back-off) until no snapshot asked for it for :data:`IDLE_ENDPOINT_SECONDS`.

    ``clock`` (monotonic seconds) times the back-off only; the queries' timeouts are real time.
    ``credentials`` are sent to ``default_url`` only; ``url_policy`` says which spec URLs may be
    asked (default: any). ``group_default_queries`` False: every deployment asks all its queries
    itself, as it does those it overrides.
    """

    def __init__(
        self,
        default_url: str | None,
        clock: Callable[[], float] = time.monotonic,
        threads: int = QUERY_THREADS,
        *,
        credentials: PrometheusCredentials | None = None,
        url_policy: PrometheusUrlPolicy | None = None,
        group_default_queries: bool = True,
    ) -> None:
        self.default_url = default_url
        self.credentials = credentials or PrometheusCredentials()
        self.url_policy = url_policy or PrometheusUrlPolicy()
        # Built now: a token file that cannot be read fails at start-up, not at the first query.
        self._auth = self.credentials.auth()
        self._trust: TrustBundle | None = self.credentials.trust()
        self._clients: dict[Endpoint, PrometheusConnect] = {}
        self._breaker = _Breaker(clock)
        # When each endpoint was last asked for, and when the unused were last dropped (the clock's).
        self._used: dict[Endpoint, float] = {}
        self._swept = clock()
        self._threads = threads
        self._executor: ThreadPoolExecutor | None = None
        self.group_default_queries = group_default_queries
        self._clock = clock
        # The last fleet-wide answer and the read under way, by endpoint and deadline.
        self._fleet_answers: dict[tuple[Endpoint, float], FleetAnswer] = {}
        self._fleet_reads: dict[tuple[Endpoint, float], asyncio.Task[FleetAnswer]] = {}

    def backoff(self, url: str, *, own: bool) -> Backoff | None:
        """The back-off ``url`` is in, if any (``own``: asked as the operator's URL, else as a spec's)."""
        return self._breaker.get(Endpoint(url, own))

    def close(self) -> None:
        """Stop the query threads (those under way end by their deadline) and the fleet-wide reads,
        close the clients; remove the trust bundle's file."""
        for read in self._fleet_reads.values():
            read.cancel()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        if self._trust is not None:
            self._trust.close()

    def _forget_unused(self) -> None:
        """Close the clients and drop the back-offs of the endpoints not asked for
        :data:`IDLE_ENDPOINT_SECONDS` (looked for at most once a minute: it goes through all)."""
        now = self._clock()
        if now - self._swept < 60:
            return
        self._swept = now
        for endpoint, used in list(self._used.items()):
            if now - used <= IDLE_ENDPOINT_SECONDS or not self._breaker.forget(endpoint):
                continue
            del self._used[endpoint]
            client = self._clients.pop(endpoint, None)
            if client is not None:
                client.close()
            for key in [key for key in self._fleet_answers if key[0] == endpoint]:
                del self._fleet_answers[key]

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._threads, thread_name_prefix="prometheus")
        return self._executor

    def _client(self, endpoint: Endpoint) -> PrometheusConnect:
        if endpoint not in self._clients:
            # TLS is verified: against requests' own trust, plus --prometheus-ca-file when given
            # (the two in one bundle: a bundle given to requests replaces its own). The client
            # takes a session's verify as it is.
            session = requests.Session()
            if self._trust is not None:
                session.verify = str(self._trust.path)
            if not endpoint.own:
                session.hooks["response"].append(_refuse_redirect)
            # No retries: a slow or absent Prometheus must not stall the reconcile; the next tick
            # asks again. (retry=None would mean the library's default: 3 retries with back-off,
            # about 6 s per query against a closed port.) Credentials only for the operator's own.
            client = PrometheusConnect(
                url=endpoint.url,
                session=session,
                retry=Retry(total=0),
                auth=self._auth if endpoint.own else None,
            )
            # Replaces the client's own adapter for its URL, and requests' for a redirect's target.
            adapter = _WatchedAdapter(max_retries=Retry(total=0))
            for prefix in ("http://", "https://", endpoint.url):
                session.mount(prefix, adapter)
            self._clients[endpoint] = client
        return self._clients[endpoint]

    def _read(
        self,
        client: PrometheusConnect,
        endpoint: Endpoint,
        queries: dict[str, str],
        sample_query: str,
        parse: Callable[[str, list[Any]], _Parsed],
        timeout: float,
        probe: bool,
        start: Callable[[], None],
    ) -> tuple[dict[str, _Parsed], dict[str, str], _Parsed | None]:
        """One read's queries, in a query thread, within ``timeout`` from now: each signal's result
        (as ``parse`` reads it, given the field), why Prometheus (or ``parse``) refused the queries it
        refused (by signal), and the sample time's. ``start`` is called as the read starts."""
        with self._breaker.reading(endpoint):
            start()
            return self._queries(client, endpoint, queries, sample_query, parse, timeout, probe)

    def _queries(
        self,
        client: PrometheusConnect,
        endpoint: Endpoint,
        queries: dict[str, str],
        sample_query: str,
        parse: Callable[[str, list[Any]], _Parsed],
        timeout: float,
        probe: bool,
    ) -> tuple[dict[str, _Parsed], dict[str, str], _Parsed | None]:
        url = endpoint.url
        if self._trust is not None:
            self._trust.refresh()
        if not probe:
            self._breaker.check(endpoint)  # it may have started to back off while this one queued
        deadline = time.monotonic() + timeout
        late = f"no answer within the snapshot's {timeout:g} s"

        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(late)
            return remaining

        # The queries' timeout bounds each socket read; the watch bounds the read as a whole.
        watch = _WATCHING.watch = _Watch(timeout)
        try:
            results: dict[str, _Parsed] = {}
            refused: dict[str, str] = {}
            try:
                for signal, query in queries.items():
                    try:
                        results[signal] = parse(signal, client.custom_query(query, timeout=left()))
                    except _NotOneNumber as exc:
                        refused[signal] = str(exc)
                    except PrometheusApiClientException as exc:
                        reason = query_refusal(str(exc))
                        if reason is None:
                            raise  # not the query: Prometheus itself failed
                        refused[signal] = reason
                sampled = (
                    parse("sample_time", client.custom_query(sample_query, timeout=left())) if sample_query else None
                )
            except _UNAVAILABLE as exc:
                if not isinstance(exc, TimeoutError) and (watch.expired or time.monotonic() >= deadline):
                    # The watch hung up (the error says a connection broke), or the socket's timeout
                    # (what was left) ran out first, which the error says as urllib3's retry pool's.
                    raise TimeoutError(late) from exc
                raise
            finally:
                watch.stop()
                _WATCHING.watch = None
        except _UNAVAILABLE as exc:
            # Recorded here, not when the reconcile hears of it: a query thread that takes the next
            # snapshot of this URL must already see the back-off.
            self._breaker.failed(endpoint, _failure(exc, url))
            raise
        except _MALFORMED:
            self._breaker.answered(endpoint)  # an answer of an unexpected shape: Prometheus is there
            raise
        self._breaker.answered(endpoint)
        return results, refused, sampled

    async def _ask(self, endpoint: Endpoint, timeout: float, read: Callable[..., _Parsed]) -> _Parsed:
        """``read(probe, start)`` in a query thread, within the endpoint's back-off; raises _Unavailable
        with the reason when it gets no answer.

        It waits at most ``timeout`` for a query thread: a read not started by then is dropped unrun,
        which says nothing of Prometheus (the operator's threads were busy). A started read is timed
        from its start by its own deadline and records its own outcome in the back-off; the snapshot
        waits for it that long and :data:`READ_GRACE_SECONDS` more (a read the watch cannot end, see
        above), then gives up on it without blaming the endpoint for a read still under way."""
        loop = asyncio.get_running_loop()
        started = threading.Event()
        begun = asyncio.Event()

        def start() -> None:
            started.set()
            loop.call_soon_threadsafe(begun.set)

        printed = redact_url(endpoint.url)
        try:
            probe = self._breaker.admit(endpoint, 2 * timeout + READ_GRACE_SECONDS)
        except _Skipped as exc:
            raise _Unavailable(str(exc)) from None
        job = self._pool().submit(read, probe, start)
        answer = asyncio.wrap_future(job)
        # Retrieved here too: a snapshot that gave up on a read no longer awaits it.
        answer.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            waiting = asyncio.ensure_future(begun.wait())
            either: set[asyncio.Future[Any]] = {waiting, answer}
            try:
                await asyncio.wait(either, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiting.cancel()
            if not started.is_set() and job.cancel():
                raise _Unavailable(
                    f"Prometheus at {printed} not asked: "
                    f"its query threads ({self._threads}) were busy for {timeout:g} s"
                )
            return await asyncio.wait_for(asyncio.shield(answer), timeout + READ_GRACE_SECONDS)
        except _Skipped as exc:  # the endpoint began to back off while the read queued
            raise _Unavailable(str(exc)) from None
        except TimeoutError as exc:
            if not answer.done():
                # The read runs on past its deadline (a DNS look-up, a SOCKS proxy): it records its
                # own outcome when it ends, and no other read of the endpoint starts meanwhile.
                answer.add_done_callback(self._breaker.gave_up(endpoint))
                raise _Unavailable(
                    f"Prometheus at {printed} unavailable: no answer within the snapshot's {timeout:g} s"
                ) from None
            raise _Unavailable(f"Prometheus at {printed} unavailable: {_failure(exc, endpoint.url)}") from None
        except _UNAVAILABLE + _MALFORMED as exc:
            raise _Unavailable(f"Prometheus at {printed} unavailable: {_failure(exc, endpoint.url)}") from None
        finally:
            # Dropped unrun (not asked, or its snapshot cancelled while it queued; a started read runs
            # on): it asked nothing, so it was no probe, and the next snapshot may be one.
            if job.cancel() and probe:
                self._breaker.unprobe(endpoint)

    async def _fleet_read(self, key: tuple[Endpoint, float], client: PrometheusConnect) -> FleetAnswer:
        endpoint, timeout = key
        started = self._clock()
        queries = {signal: FLEET_QUERIES[signal] for signal in QUERIED}
        rows = partial(_ignore_field, _rows)
        read = partial(self._read, client, endpoint, queries, FLEET_QUERIES["sample_time"], rows, timeout)
        results, refused, sampled = await self._ask(endpoint, timeout, read)
        answer = FleetAnswer(started, results, refused, sampled or {})
        # Answers of endpoints no longer asked (a spec's URL changed) are dropped with the next read.
        self._fleet_answers = {
            k: a for k, a in self._fleet_answers.items() if started - a.started <= FLEET_READ_MAX_AGE_SECONDS
        }
        self._fleet_answers[key] = answer
        return answer

    async def _fleet_answer(
        self, endpoint: Endpoint, client: PrometheusConnect, timeout: float, max_age: float
    ) -> FleetAnswer:
        """The fleet-wide answer of ``endpoint`` no older than ``max_age``: the last one, the one
        under way, or a new read. Raises _Unavailable as :meth:`_ask`."""
        key = (endpoint, timeout)
        answer = self._fleet_answers.get(key)
        if answer is not None and self._clock() - answer.started <= max_age:
            return answer
        read = self._fleet_reads.get(key)
        if read is None:
            # A task of its own: a reconcile cancelled while waiting does not cancel the others' read.
            read = asyncio.create_task(self._fleet_read(key, client))
            self._fleet_reads[key] = read

            def done(task: asyncio.Task[FleetAnswer]) -> None:
                if self._fleet_reads.get(key) is task:
                    del self._fleet_reads[key]
                if not task.cancelled():
                    task.exception()  # every waiter may be gone: retrieved here, reported by them

            read.add_done_callback(done)
        return await asyncio.shield(read)

    async def snapshot(self, dep: InferenceDeployment, now: float) -> tuple[MetricSnapshot | None, str]:
        spec_url = dep.spec.scaling.metrics.prometheus_url
        url = spec_url or self.default_url
        if not url:
            return None, "no Prometheus URL configured (scaling.metrics.prometheusUrl or --prometheus-url)"
        if spec_url and (refusal := self.url_policy.refusal(spec_url)) is not None:
            return None, refusal
        endpoint = Endpoint(url, own=not spec_url)
        self._used[endpoint] = self._clock()
        self._forget_unused()
        timeout = dep.spec.scaling.metrics.timeout_seconds
        namespace = dep.metadata.namespace or "default"
        printed = redact_url(url)
        try:
            client = self._client(endpoint)
        except ValueError as exc:
            # Its text may quote the URL's user-info (a netloc that does not normalise).
            return None, f"Prometheus at {printed} unavailable: {type(exc).__name__}: not a valid URL"
        queries = queries_for(dep)
        sample_query = render(dep.spec.scaling.metrics.sample_time, namespace, dep.name).strip()
        shared = default_query_fields(dep) if self.group_default_queries else frozenset()
        own_queries = {signal: query for signal, query in queries.items() if signal not in shared}
        own_sample_query = "" if "sample_time" in shared else sample_query
        results: dict[str, QueryResult] = {}
        refused: dict[str, str] = {}
        sampled: float | None = None
        try:
            if shared:
                # A spec's URL is grouped too: its read is asked without credentials and backs off
                # on its own, as its deployments' own queries would.
                max_age = fleet_read_max_age(dep.spec.scaling.interval_seconds)
                answer = await self._fleet_answer(endpoint, client, timeout, max_age)
                row = (namespace, dep.name)
                results = {
                    signal: rows.get(row, _NOTHING) for signal, rows in answer.results.items() if signal in shared
                }
                refused = {signal: why for signal, why in answer.refused.items() if signal in shared}
                if "sample_time" in shared:
                    sampled = answer.sampled.get(row, _NOTHING).value
            if own_queries or own_sample_query:
                read = partial(self._read, client, endpoint, own_queries, own_sample_query, _own_answer, timeout)
                own_results, own_refused, sampled_result = await self._ask(endpoint, timeout, read)
                results |= own_results
                refused |= own_refused
                if sampled_result is not None:
                    sampled = sampled_result.value
        except _Unavailable as exc:
            return None, str(exc)
        if (over_one := _over_one(results)) is not None:
            refused["utilization"] = over_one
            results["utilization"] = QueryResult(None, results["utilization"].evaluated_at)
        elif (busy := results.get("utilization")) is not None and busy.value is not None and busy.value > 1:
            results["utilization"] = QueryResult(1.0, busy.evaluated_at)  # a counter's overshoot: busy
        # A query Prometheus refuses (a typo in one of scaling.metrics) costs its own signal only,
        # and the reason names the field to fix.
        refusals = "; ".join(refused_query_note(SIGNAL_FIELDS[s], refused[s]) for s in QUERIED if s in refused)
        # The pods-reporting count alone is no signal to decide on.
        if all(result.value is None for signal, result in results.items() if signal in SIGNALS):
            return None, refusals or f"Prometheus at {printed} returned no samples for {dep.name}"
        # Every part's stamp, the shared read's rows and the deployment's own queries alike: a snapshot
        # is as old as its oldest part.
        stamps = [r.evaluated_at for r in results.values() if r.evaluated_at is not None]
        if sampled is not None:
            # The samples' own age: the queries' stamp is their evaluation time, however old the data.
            stamps.append(sampled)
        values = {signal: results[signal].value if signal in results else None for signal in QUERIED}
        snapshot = MetricSnapshot(time=min(stamps) if stamps else now, **values)
        # Every configured signal that came back empty or refused (the arrival rate too: the
        # autoscaler's primary signal once it knows the service rate), not only those a scale-down
        # needs before that.
        missing = [signal for signal in SIGNALS if signal in queries and getattr(snapshot, signal) is None]
        reason = f"signals missing: {', '.join(missing)}" if missing else "metrics read"
        return snapshot, f"{reason}; {refusals}" if refusals else reason
