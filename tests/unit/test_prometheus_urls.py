"""The allow-list of spec Prometheus URLs: the matching rule, its tricks, and the setting's errors."""

from __future__ import annotations

import pytest

from neuronfleet.planning.prometheus_urls import AllowListError, PrometheusUrlPolicy

POLICY = PrometheusUrlPolicy.from_entries(
    [
        "http://prom.example.com:9090",
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/",
        "http://[fd00::1]",
    ]
)


@pytest.mark.parametrize(
    "url",
    [
        "http://prom.example.com:9090",
        "http://prom.example.com:9090/",
        "http://PROM.Example.COM:9090/prometheus",  # host names are case-insensitive
        "HTTP://prom.example.com:9090",
        "http://user:secret@prom.example.com:9090/",  # user-info does not change where it goes
        "http://prom.example.com:9090/?token=abc",
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1",
        "https://aps-workspaces.us-east-1.amazonaws.com:443/workspaces/ws-1/",  # the default port, spelt out
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api",
        "http://[fd00::1]:80/",
    ],
)
def test_allowed(url: str) -> None:
    assert POLICY.refusal(url) is None


@pytest.mark.parametrize(
    "url",
    [
        # The host is compared whole: never a prefix, a suffix or a sub-domain.
        "http://prom.example.com.evil.io:9090/",
        "http://evil-prom.example.com:9090/",
        "http://xprom.example.com:9090/",
        "http://prom.example.co:9090/",
        # User-info: the host is after the last "@", as requests reads it.
        "http://prom.example.com:9090@evil.io/",
        "http://prom.example.com@evil.io:9090/",
        "http://prom.example.com:9090:x@evil.io/",
        # Another port, or the default one where the entry names 9090; another scheme.
        "http://prom.example.com/",
        "http://prom.example.com:9091/",
        "https://prom.example.com:9090/",
        "http://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/",
        # A path beside or above the entry's, not under it.
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-10",
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/",
        "https://aps-workspaces.us-east-1.amazonaws.com/",
        # Dot segments (also encoded) that a client or a server would resolve out of the path.
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/../ws-2",
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/%2e%2E/ws-2",
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1%2F..%2Fws-2",
        # "..;" is ".." to Tomcat and Spring (they drop a segment's ";" parameters); any segment
        # starting with "..", and any path parameter, is refused.
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/..;/ws-2",
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/..;x=1/ws-2",
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/%2e%2e%3b/ws-2",
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/..%00/ws-2",
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/.;/api",
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1;jsessionid=x/api",
        # Encoded twice: ".." to a server that decodes twice.
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/%252e%252e/ws-2",
        # Parser differentials: urllib3 and browsers end the host at a backslash, urllib.parse does not.
        "http://evil.io\\@prom.example.com:9090/",
        "http://evil.io\\.prom.example.com:9090/",
        "http://prom.example.com:9090\t@evil.io/",
        "http://prom.example.com%2eevil.io:9090/",  # a percent-encoded host
        "http://prom.ex\u0430mple.com:9090/",  # a Cyrillic a
        "http://evil.io#@prom.example.com:9090/",
        "http://evil.io?@prom.example.com:9090/",
        # Not http(s), not a URL, a bad port, the IPv6 entry's neighbour.
        "ftp://prom.example.com:9090/",
        "prom.example.com:9090",
        "http://prom.example.com:99999/",
        "http://[fd00::2]/",
        "http://fd00::1/",
    ],
)
def test_refused(url: str) -> None:
    refusal = POLICY.refusal(url)
    assert refusal is not None
    assert "--prometheus-allowed-url" in refusal and "operator.prometheusAllowedUrls" in refusal


def test_the_refusal_prints_the_origin_only() -> None:
    refusal = POLICY.refusal("http://user:S3cr3t@internal.corp:8080/private-path?token=T0ken")
    assert refusal is not None and "http://internal.corp:8080" in refusal
    assert not any(secret in refusal for secret in ("S3cr3t", "T0ken", "private-path", "user"))


def test_no_entries_allow_every_url_and_none_allows_none() -> None:
    assert PrometheusUrlPolicy.from_entries([]).refusal("http://anything.internal:1234/") is None
    assert PrometheusUrlPolicy.from_entries(["", " "]).allowed is None
    nothing = PrometheusUrlPolicy.from_entries(["none"])
    refusal = nothing.refusal("http://prom.example.com:9090/")
    assert refusal is not None and "allows no spec URL" in refusal


@pytest.mark.parametrize(
    ("entry", "complaint"),
    [
        ("prom.example.com", "is not an http(s)://host"),
        ("http://user@prom.example.com", "no user-info"),
        ("http://prom.example.com/?x=1", "no user-info, query or fragment"),
        ("http://prom.example.com/#x", "no user-info, query or fragment"),
        ("http://prom.example.com\\x", "is not an http(s)://host"),
        ("http://prom.example.com:0x50", "is not an http(s)://host"),
    ],
)
def test_a_bad_entry_says_what_is_wrong(entry: str, complaint: str) -> None:
    with pytest.raises(AllowListError, match=complaint.replace("(", r"\(").replace(")", r"\)")):
        PrometheusUrlPolicy.from_entries([entry])


def test_none_is_not_listed_with_urls() -> None:
    with pytest.raises(AllowListError, match="cannot be listed with URLs"):
        PrometheusUrlPolicy.from_entries(["none", "http://prom.example.com"])
