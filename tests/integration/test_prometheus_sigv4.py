"""AWS SigV4 for Amazon Managed Service for Prometheus (AMP), against a real Prometheus.

AMP's query API answers only requests signed with SigV4 for the service ``aps`` in the workspace's
region, and refuses the rest with HTTP 403. :class:`AmpFront` stands where AMP's endpoint does: it
checks each request's signature as AWS does (:func:`signature_problem`, written here from AWS's
published algorithm, not with botocore, which signs; checked against AWS's published example) and
passes what verifies to a real Prometheus (the Debian package's binary). The operator's reader signs
with the credentials of botocore's default chain: static keys in the environment, then IRSA's web
identity token exchanged for a role's keys at a real STS API (moto's server, in this process).
"""

from __future__ import annotations

import hashlib
import hmac
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import botocore.credentials
import botocore.exceptions
import pytest
import requests
import yaml
from aiohttp import web
from fixtures_prometheus import PrometheusServer, free_port
from moto.server import ThreadedMotoServer
from yarl import URL

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.metrics.prometheus import PrometheusMetrics
from neuronfleet.metrics.prometheus_auth import AwsCredentialsUnavailable, AwsSigV4Auth, PrometheusCredentials

pytestmark = [pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]
REGION = "eu-west-1"
WORKSPACE = "ws-0a1b2c3d-example"
KEY_ID, SECRET, TOKEN = "AKIAEXAMPLESIGV4TEST", "s3cr3t/Key+With/Slashes0123456789abcdef", "session-token-1"
ACCOUNT = "123456789012"

#: (secret key, session token or None) of an access key id, as the verifier's IAM knows them.
KeyLookup = Callable[[str], tuple[str, str | None] | None]


def _encode(text: str) -> str:
    return urllib.parse.quote(text, safe="-_.~")


def canonical_query(raw: str) -> str:
    """AWS's canonical query: each name and value decoded (``+`` is a plus, not a space), encoded
    again (RFC 3986), sorted."""
    pairs = []
    for part in raw.split("&") if raw else []:
        name, _, value = part.partition("=")
        pairs.append((_encode(urllib.parse.unquote(name)), _encode(urllib.parse.unquote(value))))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def expected_signature(
    secret: str,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Mapping[str, str],
    signed_headers: list[str],
    body: bytes,
    scope: str,
) -> str:
    """The signature of a request under SigV4, from its parts as received (``headers`` lowercased)."""
    canonical = "\n".join(
        [
            method,
            urllib.parse.quote(urllib.parse.unquote(raw_path), safe="/-_.~"),
            canonical_query(raw_query),
            "".join(f"{name}:{' '.join(headers[name].split())}\n" for name in signed_headers),
            ";".join(signed_headers),
            hashlib.sha256(body).hexdigest(),
        ]
    )
    string_to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", headers["x-amz-date"], scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = f"AWS4{secret}".encode()
    for part in scope.split("/"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def signature_problem(
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Mapping[str, str],
    body: bytes,
    keys: KeyLookup,
    region: str,
    service: str,
) -> str | None:
    """Why AWS would refuse the request (its words, roughly), or None when the signature verifies."""
    authorization = headers.get("authorization", "")
    algorithm, _, fields_text = authorization.partition(" ")
    if algorithm != "AWS4-HMAC-SHA256":
        return "Missing Authentication Token"
    fields = dict(part.strip().split("=", 1) for part in fields_text.split(","))
    key_id, _, scope = fields["Credential"].partition("/")
    date, scope_region, scope_service, terminator = scope.split("/")
    if (scope_region, scope_service, terminator) != (region, service, "aws4_request"):
        return f"Credential should be scoped to a valid region and service: {scope}"
    signed_headers = fields["SignedHeaders"].split(";")
    if not {"host", "x-amz-date"} <= set(signed_headers) or not headers.get("x-amz-date", "").startswith(date):
        return "the host and a matching X-Amz-Date must be signed"
    known = keys(key_id)
    if known is None:
        return "The security token included in the request is invalid"
    secret, token = known
    if token is not None and (
        headers.get("x-amz-security-token") != token or "x-amz-security-token" not in signed_headers
    ):
        return "The security token included in the request is invalid"
    expected = expected_signature(secret, method, raw_path, raw_query, headers, signed_headers, body, scope)
    if not hmac.compare_digest(expected, fields["Signature"]):
        return "The request signature we calculated does not match the signature you provided"
    return None


def test_the_verifier_reproduces_awss_published_example() -> None:
    """AWS General Reference, "Signature Version 4 signing process", the IAM ListUsers example."""
    headers = {
        "content-type": "application/x-www-form-urlencoded; charset=utf-8",
        "host": "iam.amazonaws.com",
        "x-amz-date": "20150830T123600Z",
        "authorization": "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, "
        "SignedHeaders=content-type;host;x-amz-date, "
        "Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7",
    }

    def keys(key_id: str) -> tuple[str, str | None] | None:
        return ("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None) if key_id == "AKIDEXAMPLE" else None

    query = "Action=ListUsers&Version=2010-05-08"
    assert signature_problem("GET", "/", query, headers, b"", keys, "us-east-1", "iam") is None
    assert signature_problem("GET", "/", query + "x", headers, b"", keys, "us-east-1", "iam") is not None
    assert signature_problem("GET", "/", query, headers, b"", keys, "us-east-2", "iam") is not None


@dataclass
class AmpFront:
    """AMP's query endpoint for one workspace: verifies, then forwards to Prometheus."""

    prometheus: str
    keys: KeyLookup
    #: Per request: (raw query string, the key id signed with or "", the refusal or None).
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        target = request.rel_url
        headers = {name.lower(): value for name, value in request.headers.items()}
        problem = signature_problem(
            request.method,
            target.raw_path,
            target.raw_query_string,
            headers,
            await request.read(),
            self.keys,
            REGION,
            "aps",
        )
        credential = headers.get("authorization", "").partition("Credential=")[2].partition("/")[0]
        self.seen.append((target.raw_query_string, credential, problem))
        if problem is not None:
            return web.json_response({"message": problem}, status=403)
        path = target.raw_path.removeprefix(f"/workspaces/{WORKSPACE}")
        upstream = URL(f"{self.prometheus}{path}?{target.raw_query_string}", encoded=True)
        async with aiohttp.ClientSession() as session, session.get(upstream) as answer:
            return web.Response(body=await answer.read(), status=answer.status, content_type="application/json")


@pytest.fixture
async def amp(prometheus: PrometheusServer) -> AsyncIterator[Callable[[KeyLookup], Awaitable[AmpFront]]]:
    """Starts AMP fronts of the real Prometheus (on free ports), stopped after the test."""
    runners: list[web.AppRunner] = []

    async def start(keys: KeyLookup) -> AmpFront:
        front = AmpFront(prometheus.url, keys)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", front.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        front.url = f"http://127.0.0.1:{port}/workspaces/{WORKSPACE}"
        return front

    yield start
    for runner in runners:
        await runner.cleanup()


def deployment(url: str | None, name: str) -> InferenceDeployment:
    """A deployment whose queries Prometheus answers without targets, with the characters PromQL
    is made of: spaces, ``+``, braces, quotes, a ``/``."""
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["metadata"]["name"] = name
    queries = {field: "" for field in ("arrivalRate", "arrivalPeak", "utilization", "reporting", "sampleTime")}
    metrics = {
        "queueDepth": "vector(1) + vector(2)",
        "inFlight": 'sum(label_replace(vector(2), "path", "a b/c+d", "", ""))',
        "timeoutSeconds": 5,
        **queries,
    }
    doc["spec"]["scaling"]["metrics"] = {**metrics, **({"prometheusUrl": url} if url else {})}
    return InferenceDeployment.model_validate(doc)


def own_reader(front: AmpFront) -> PrometheusMetrics:
    return PrometheusMetrics(front.url, credentials=PrometheusCredentials(sigv4_region=REGION))


async def test_signed_reads_verify_at_amp_and_a_spec_url_is_never_signed(
    aws_env: pytest.MonkeyPatch, amp: Callable[[KeyLookup], Awaitable[AmpFront]]
) -> None:
    aws_env.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    aws_env.setenv("AWS_SESSION_TOKEN", TOKEN)
    front = await amp(lambda key_id: (SECRET, TOKEN) if key_id == KEY_ID else None)
    metrics = own_reader(front)
    try:
        snapshot, reason = await metrics.snapshot(deployment(None, "own"), time.time())
        assert snapshot is not None, f"{reason}; AMP saw {front.seen}"
        assert (snapshot.queue_depth, snapshot.in_flight) == (3.0, 2.0)
        assert front.seen and all(key == KEY_ID and problem is None for _, key, problem in front.seen), front.seen
        # The same URL named by a spec is asked unsigned, and AMP refuses it.
        signed = len(front.seen)
        snapshot, reason = await metrics.snapshot(deployment(front.url, "named"), time.time())
        assert snapshot is None and reason.endswith("HTTP 403"), reason
        assert front.seen[signed:] and all(key == "" for _, key, _ in front.seen[signed:]), front.seen[signed:]
    finally:
        metrics.close()


def issued_by_moto(key_id: str) -> tuple[str, str | None] | None:
    """The secret and session token moto's STS issued with ``key_id``, as AWS's IAM knows them."""
    from moto.sts.models import sts_backends

    for partitions in sts_backends.values():
        for backend in partitions.values():
            for role in backend.assumed_roles:
                if role.access_key_id == key_id:
                    return role.secret_access_key, role.session_token
    return None


@pytest.fixture
def sts() -> Iterator[str]:
    """A real STS API (moto's server, in this process): its URL."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


async def test_irsa_credentials_are_exchanged_at_sts_and_sign_the_reads(
    aws_env: pytest.MonkeyPatch, amp: Callable[[KeyLookup], Awaitable[AmpFront]], sts: str, tmp_path: Path
) -> None:
    # What EKS's pod identity webhook sets for a ServiceAccount annotated with a role.
    token = tmp_path / "token"
    token.write_text("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJl")
    aws_env.setenv("AWS_ROLE_ARN", f"arn:aws:iam::{ACCOUNT}:role/neuronfleet-operator")
    aws_env.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
    aws_env.setenv("AWS_ENDPOINT_URL_STS", sts)
    aws_env.setenv("AWS_REGION", REGION)
    front = await amp(issued_by_moto)
    metrics = own_reader(front)  # no network yet: the role is assumed at the first request
    try:
        assert front.seen == []
        snapshot, reason = await metrics.snapshot(deployment(None, "own"), time.time())
        assert snapshot is not None, f"{reason}; AMP saw {front.seen}"
        keys = {key for _, key, _ in front.seen}
        assert len(keys) == 1 and issued_by_moto(keys.pop()) is not None, front.seen
        assert all(problem is None for _, _, problem in front.seen), front.seen
    finally:
        metrics.close()


async def test_without_credentials_at_sts_the_read_fails_as_an_unavailable_prometheus(
    aws_env: pytest.MonkeyPatch, amp: Callable[[KeyLookup], Awaitable[AmpFront]], tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("a-token")
    aws_env.setenv("AWS_ROLE_ARN", f"arn:aws:iam::{ACCOUNT}:role/neuronfleet-operator")
    aws_env.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
    aws_env.setenv("AWS_ENDPOINT_URL_STS", f"http://127.0.0.1:{free_port()}")  # nothing listens
    aws_env.setenv("AWS_REGION", REGION)
    front = await amp(issued_by_moto)
    metrics = own_reader(front)
    try:
        snapshot, reason = await metrics.snapshot(deployment(None, "own"), time.time())
        assert snapshot is None and "AwsCredentialsUnavailable: no AWS credentials to sign with SigV4" in reason, reason
        assert front.seen == []  # nothing unsigned was sent
    finally:
        metrics.close()


# botocore ships no types (ignore_missing_imports in pyproject.toml): to mypy its Credentials is Any.
class RefusedAtSts(botocore.credentials.Credentials):  # type: ignore[misc]
    """Credentials whose renewal STS refuses, as it does an expired web identity token."""

    def get_frozen_credentials(self) -> botocore.credentials.ReadOnlyCredentials:
        error = {"Error": {"Code": "ExpiredTokenException", "Message": "Token expired: current date/time 1 > 0"}}
        raise botocore.exceptions.ClientError(error, "AssumeRoleWithWebIdentity")


def test_a_refusal_at_sts_is_a_request_error_naming_it() -> None:
    auth = AwsSigV4Auth(REGION, RefusedAtSts("unused", "unused"))
    with pytest.raises(AwsCredentialsUnavailable, match="ExpiredTokenException"):
        requests.get(f"http://127.0.0.1:{free_port()}/api/v1/query", params={"query": "up"}, auth=auth, timeout=5)
