"""Which Prometheus URLs a spec may make the operator request (pure).

A spec's ``scaling.metrics.prometheusUrl`` makes the operator send HTTP requests from its own pod,
and what comes back (status codes, timing, connection errors) shows in the deployment's status. So
anyone who may write an InferenceDeployment could probe any address the operator reaches. The
operator's allow-list (``--prometheus-allowed-url``, env ``NEURONFLEET_PROMETHEUS_ALLOWED_URLS``,
chart ``operator.prometheusAllowedUrls``) bounds that; a URL it refuses is not requested at all.

The matching rule (:meth:`PrometheusUrlPolicy.refusal`): an entry is ``scheme://host[:port][/path]``
(http or https; no user-info, query or fragment). A spec's URL is allowed by an entry when

- its scheme is the entry's, its host is the entry's host exactly (case-insensitive: never a
  suffix or a prefix, so ``http://prom.example.com.evil.io`` is not ``http://prom.example.com``),
  and its port is the entry's (the scheme's default, 80 or 443, when either leaves it out);
- its path is the entry's path or lies under it on a ``/`` boundary (``/ws-1`` allows ``/ws-1`` and
  ``/ws-1/...``, not ``/ws-10``).

Whatever the entry, a URL is refused when parsers could disagree on where it goes: a backslash,
whitespace, a control or non-ASCII character, a host that is not plain letters, digits, dots and
dashes (or a bracketed IPv6 address), a ``.`` path segment or one that starts with ``..`` (also
percent-encoded: ``..;`` is ``..`` to Tomcat and Spring, which drop a segment's ``;`` parameters), a
``;`` anywhere in the path (a path parameter, which such servers drop before routing, so
``/ws-1;x`` is ``/ws-1`` to them and not to this rule), a ``%`` still there once the path is decoded
(encoded twice, for a server that decodes twice), an unreadable port. User-info is read as urllib3
reads it (the host is after the last ``@``), so ``http://prom.example.com@evil.io`` goes to, and is
judged as, ``evil.io``.

No entries (the default) allows every URL, as before the allow-list existed; the one entry ``none``
allows no spec URL (only the operator's own ``--prometheus-url`` is asked).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

#: The settings that hold the allow-list, as every message names them.
ALLOW_LIST_SETTING = (
    "--prometheus-allowed-url (env NEURONFLEET_PROMETHEUS_ALLOWED_URLS, chart operator.prometheusAllowedUrls)"
)
#: The entry that allows no spec URL at all.
NO_SPEC_URLS = "none"

_DEFAULT_PORTS = {"http": 80, "https": 443}
#: Characters parsers disagree on (``\`` is a path separator to browsers and urllib3, not to
#: urllib.parse), or that no URL of ours has: any of them refuses the URL.
_AMBIGUOUS = re.compile(r"[\\\s\x00-\x1f\x7f-\U0010ffff]")
#: A host name (letters, digits, dots, dashes) or a bracketed IPv6 address: nothing percent-encoded.
_HOST = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:.]+\]")


class AllowListError(ValueError):
    """An allow-list entry that is not ``scheme://host[:port][/path]``."""


@dataclass(frozen=True)
class UrlTarget:
    """Where a URL sends a request: scheme, host (lower case), port (the default filled in), path."""

    scheme: str
    host: str
    port: int
    path: str

    @property
    def origin(self) -> str:
        """``scheme://host:port``: what a message may print of a URL (no user-info, path or query)."""
        return f"{self.scheme}://{self.host}:{self.port}"

    def under(self, prefix: UrlTarget) -> bool:
        """Whether this target is ``prefix``'s origin and its path or below it."""
        if (self.scheme, self.host, self.port) != (prefix.scheme, prefix.host, prefix.port):
            return False
        base = prefix.path.rstrip("/")
        return not base or self.path == base or self.path.startswith(base + "/")


def url_target(url: str) -> UrlTarget | None:
    """Where ``url`` goes, or None when it is not an http(s) URL every parser reads alike."""
    if _AMBIGUOUS.search(url):
        return None
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    # urllib.parse and urllib3 both take the host after the netloc's last "@".
    host = parts.netloc.rpartition("@")[2]
    host = host[: host.rindex(":")] if ":" in host and not host.endswith("]") else host
    host = host.lower()
    if scheme not in _DEFAULT_PORTS or not _HOST.fullmatch(host):
        return None
    path = urllib.parse.unquote(parts.path)
    if ";" in path or "%" in path or any(segment == "." or segment.startswith("..") for segment in path.split("/")):
        return None
    return UrlTarget(scheme, host, port if port is not None else _DEFAULT_PORTS[scheme], parts.path)


def parse_allowed_entry(entry: str) -> UrlTarget:
    """One allow-list entry; AllowListError saying what is wrong with it."""
    target = url_target(entry)
    if target is None:
        raise AllowListError(
            f"{entry!r} is not an http(s)://host[:port][/path] URL (a plain host name or IP address, "
            "no spaces, backslashes, ';', '.'/'..' segments)"
        )
    parts = urllib.parse.urlsplit(entry)
    if "@" in parts.netloc or parts.query or parts.fragment or entry.endswith(("?", "#")):
        raise AllowListError(f"{entry!r}: an allowed URL has no user-info, query or fragment")
    return target


@dataclass(frozen=True)
class PrometheusUrlPolicy:
    """The operator's allow-list of spec Prometheus URLs; ``allowed`` None allows every URL."""

    allowed: tuple[UrlTarget, ...] | None = None

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> PrometheusUrlPolicy:
        """The policy of the setting's entries (blank ones skipped); AllowListError for a bad one."""
        cleaned = [entry.strip() for entry in entries if entry.strip()]
        if not cleaned:
            return cls(None)
        if NO_SPEC_URLS in cleaned:
            if len(cleaned) > 1:
                raise AllowListError(f"{NO_SPEC_URLS!r} allows no spec URL: it cannot be listed with URLs")
            return cls(())
        return cls(tuple(parse_allowed_entry(entry) for entry in cleaned))

    def describe(self) -> str:
        """The policy in one line, for the operator's start-up log."""
        if self.allowed is None:
            return "a spec's scaling.metrics.prometheusUrl may name any URL"
        if not self.allowed:
            return "no spec's scaling.metrics.prometheusUrl is requested"
        prefixes = ", ".join(f"{t.origin}{t.path.rstrip('/')}/" for t in self.allowed)
        return f"a spec's scaling.metrics.prometheusUrl must be under one of: {prefixes}"

    def refusal(self, url: str) -> str | None:
        """None when a spec's ``url`` may be requested; else why not, and the setting that allows it.

        The message prints the URL's origin only (scheme, host and port): never its user-info,
        path or query, which may hold credentials.
        """
        if self.allowed is None:
            return None
        target = url_target(url)
        if target is None:
            return (
                "spec.scaling.metrics.prometheusUrl is not requested: it is not an http(s) URL that the operator's "
                "allow-list of Prometheus URLs can judge (a plain host name or IP address, no spaces, backslashes, "
                f"';', '.'/'..' segments); the allow-list is {ALLOW_LIST_SETTING}"
            )
        if any(target.under(prefix) for prefix in self.allowed):
            return None
        scope = "allows no spec URL" if not self.allowed else "does not include it"
        return (
            f"spec.scaling.metrics.prometheusUrl (at {target.origin}) is not requested: the operator's allow-list "
            f"of Prometheus URLs {scope}. Remove prometheusUrl to use the operator's Prometheus, or ask the "
            f"operator's administrators to allow its prefix in {ALLOW_LIST_SETTING}"
        )
