"""The operator's Prometheus credentials reach its own URL and nothing else.

Real HTTP: small servers on 127.0.0.1 answer Prometheus' query API and record the Authorization
header of every request, so each test sees which URL got the token. A spec author who points
``prometheusUrl`` at their own endpoint must not receive it (nor through a redirect of the
operator's Prometheus), a rotated token file is sent without a restart, and a private CA is
trusted through ``--prometheus-ca-file``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from fixtures_prometheus import private_ca

from neuronfleet import run_command
from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.cli import main
from neuronfleet.metrics.prometheus import PrometheusMetrics
from neuronfleet.metrics.prometheus_auth import CredentialsError, PrometheusCredentials, TrustBundle
from neuronfleet.planning.prometheus_urls import PrometheusUrlPolicy
from neuronfleet.reconcile import OperatorSettings

REPO = Path(__file__).resolve().parents[2]
#: An AMP workspace's endpoint, in us-east-1.
AMP = "https://aps-workspaces.us-east-1.amazonaws.com"
#: The deployments the tests read (in the example's namespace, search).
DEPLOYMENT_NAMES = ("bert", "spec-url")


class RecordingPrometheus:
    """Answers /api/v1/query with one sample; records (path, Authorization or None) per request.

    ``redirect_to``: answer every request with a 307 to that URL instead (same path and query);
    ``require``: answer 401 to a request without this Authorization.
    """

    def __init__(
        self, tls: ssl.SSLContext | None = None, redirect_to: str | None = None, require: str | None = None
    ) -> None:
        self.seen: list[tuple[str, str | None]] = []
        self.redirect_to = redirect_to
        self.require = require
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                recorder.seen.append((self.path, self.headers.get("Authorization")))
                if recorder.redirect_to is not None:
                    self.send_response(307)
                    self.send_header("Location", recorder.redirect_to + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if recorder.require is not None and self.headers.get("Authorization") != recorder.require:
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                # A fleet-wide query (the default queries' shared form) is answered a row for each
                # deployment the tests name, a deployment's own query one sample.
                query = parse_qs(urlsplit(self.path).query).get("query", [""])[0]
                labels = (
                    [{"namespace": "search", "deployment": name} for name in DEPLOYMENT_NAMES]
                    if "by (namespace, deployment)" in query
                    else [{}]
                )
                result = [{"metric": metric, "value": [time.time(), "1"]} for metric in labels]
                body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def authorizations(self) -> set[str | None]:
        return {authorization for _, authorization in self.seen}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def operators() -> Iterator[RecordingPrometheus]:
    """The operator's own Prometheus (--prometheus-url)."""
    server = RecordingPrometheus()
    yield server
    server.close()


@pytest.fixture
def harvester() -> Iterator[RecordingPrometheus]:
    """An endpoint a spec author controls and names in prometheusUrl."""
    server = RecordingPrometheus()
    yield server
    server.close()


def deployment(url: str | None, name: str = "bert") -> InferenceDeployment:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["scaling"]["metrics"] = {"timeoutSeconds": 2, **({"prometheusUrl": url} if url else {})}
    return InferenceDeployment.model_validate(doc)


def token_file(tmp_path: Path, token: str) -> Path:
    path = tmp_path / "token"
    path.write_text(token + "\n")
    return path


async def read(metrics: PrometheusMetrics, url: str | None) -> str:
    snapshot, reason = await metrics.snapshot(deployment(url), time.time())
    assert snapshot is not None, reason
    return reason


async def test_the_token_goes_to_the_operators_url_and_never_to_a_spec_url(
    tmp_path: Path, operators: RecordingPrometheus, harvester: RecordingPrometheus
) -> None:
    metrics = PrometheusMetrics(
        operators.url, credentials=PrometheusCredentials(bearer_token_file=token_file(tmp_path, "T0ken-1"))
    )
    try:
        await read(metrics, None)
        assert operators.seen and operators.authorizations == {"Bearer T0ken-1"}
        # A spec author's endpoint gets the queries, never the token.
        await read(metrics, f"{harvester.url}/")
        assert harvester.seen and harvester.authorizations == {None}
        # Nor does a spec that names the operator's own URL: a spec's URL is asked without credentials.
        asked_before = len(operators.seen)
        await read(metrics, operators.url)
        assert len(operators.seen) > asked_before
        assert {authorization for _, authorization in operators.seen[asked_before:]} == {None}
    finally:
        metrics.close()


async def test_a_spec_naming_the_operators_url_without_its_token_does_not_make_the_operator_back_off(
    tmp_path: Path,
) -> None:
    # The spec's reads fail (401: no token) and back off; the operator's own reads of the same URL
    # go on: a back-off of their own.
    server = RecordingPrometheus(require="Bearer T0ken-1")
    token = token_file(tmp_path, "T0ken-1")
    metrics = PrometheusMetrics(server.url, credentials=PrometheusCredentials(bearer_token_file=token))
    try:
        snapshot, reason = await metrics.snapshot(deployment(server.url, "spec-url"), time.time())
        assert snapshot is None and "HTTP 401" in reason
        assert metrics.backoff(server.url, own=False) is not None
        await read(metrics, None)
        assert metrics.backoff(server.url, own=True) is None
    finally:
        metrics.close()
        server.close()


async def test_a_redirect_of_the_operators_prometheus_does_not_carry_the_token_away(
    tmp_path: Path, harvester: RecordingPrometheus
) -> None:
    redirecting = RecordingPrometheus(redirect_to=harvester.url)
    metrics = PrometheusMetrics(
        redirecting.url, credentials=PrometheusCredentials(bearer_token_file=token_file(tmp_path, "T0ken-1"))
    )
    try:
        await read(metrics, None)
        assert redirecting.authorizations == {"Bearer T0ken-1"}
        assert harvester.seen and harvester.authorizations == {None}
    finally:
        metrics.close()
        redirecting.close()


async def test_a_rotated_token_is_sent_without_a_restart(tmp_path: Path, operators: RecordingPrometheus) -> None:
    path = token_file(tmp_path, "T0ken-1")
    # Every read asks Prometheus (a fleet-wide answer would serve the next reads for seconds).
    metrics = PrometheusMetrics(
        operators.url, credentials=PrometheusCredentials(bearer_token_file=path), group_default_queries=False
    )
    try:
        await read(metrics, None)
        # A Secret volume's update: a new file swapped in (a new inode).
        replacement = tmp_path / "token.new"
        replacement.write_text("T0ken-2")
        os.replace(replacement, path)
        operators.seen.clear()
        await read(metrics, None)
        assert operators.authorizations == {"Bearer T0ken-2"}
        # A projected token rewritten in place.
        path.write_text("T0ken-three\n")
        operators.seen.clear()
        await read(metrics, None)
        assert operators.authorizations == {"Bearer T0ken-three"}
        # Gone for a moment (mid-swap): the last token is sent rather than none.
        path.unlink()
        operators.seen.clear()
        await read(metrics, None)
        assert operators.authorizations == {"Bearer T0ken-three"}
    finally:
        metrics.close()


async def test_basic_auth_goes_to_the_operators_url_only(
    tmp_path: Path, operators: RecordingPrometheus, harvester: RecordingPrometheus
) -> None:
    password = tmp_path / "password"
    password.write_text("pa:ss\n")
    credentials = PrometheusCredentials(username="nf", password_file=password)
    metrics = PrometheusMetrics(operators.url, credentials=credentials)
    try:
        await read(metrics, None)
        assert operators.authorizations == {"Basic " + base64.b64encode(b"nf:pa:ss").decode()}
        await read(metrics, harvester.url)
        assert harvester.seen and harvester.authorizations == {None}
    finally:
        metrics.close()


async def test_a_spec_url_the_allow_list_refuses_is_not_requested(
    operators: RecordingPrometheus, harvester: RecordingPrometheus
) -> None:
    policy = PrometheusUrlPolicy.from_entries([operators.url])
    metrics = PrometheusMetrics(operators.url, url_policy=policy)
    try:
        snapshot, reason = await metrics.snapshot(deployment(harvester.url), time.time())
        assert snapshot is None and "is not requested" in reason and "--prometheus-allowed-url" in reason
        assert harvester.seen == []
        await read(metrics, f"{operators.url}/")  # under an allowed prefix
    finally:
        metrics.close()


async def test_a_private_ca_is_trusted_through_the_ca_file(tmp_path: Path) -> None:
    ca_file, cert_file, key_file = private_ca(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server = RecordingPrometheus(tls=context)
    token = token_file(tmp_path, "T0ken-1")
    without = PrometheusMetrics(server.url, credentials=PrometheusCredentials(bearer_token_file=token))
    with_ca = PrometheusMetrics(server.url, credentials=PrometheusCredentials(bearer_token_file=token, ca_file=ca_file))
    try:
        snapshot, reason = await without.snapshot(deployment(None), time.time())
        assert snapshot is None and "SSLError" in reason
        await read(with_ca, None)
        assert server.authorizations == {"Bearer T0ken-1"}
    finally:
        without.close()
        with_ca.close()
        server.close()


async def test_the_ca_file_adds_to_what_requests_trusts_for_every_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CA file widens trust: a spec's Prometheus with a certificate requests trusts without it
    (here REQUESTS_CA_BUNDLE's, standing for the system's bundle) is still verified."""
    (tmp_path / "public").mkdir()
    (tmp_path / "private").mkdir()
    public_ca, public_cert, public_key = private_ca(tmp_path / "public")
    own_ca, own_cert, own_key = private_ca(tmp_path / "private")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(public_ca))
    servers = []
    for cert, key in ((public_cert, public_key), (own_cert, own_key)):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        servers.append(RecordingPrometheus(tls=context))
    spec_server, own_server = servers
    metrics = PrometheusMetrics(own_server.url, credentials=PrometheusCredentials(ca_file=own_ca))
    try:
        await read(metrics, None)
        await read(metrics, spec_server.url)
        assert own_server.seen and spec_server.seen
    finally:
        metrics.close()
        for server in servers:
            server.close()


async def test_a_changed_ca_file_is_trusted_without_a_restart(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old_ca, _, _ = private_ca(tmp_path / "old")
    new_ca, cert, key = private_ca(tmp_path / "new")
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(old_ca.read_bytes())
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = RecordingPrometheus(tls=context)
    clock = [0.0]
    metrics = PrometheusMetrics(server.url, clock=lambda: clock[0], credentials=PrometheusCredentials(ca_file=ca_file))
    try:
        snapshot, reason = await metrics.snapshot(deployment(None), time.time())
        assert snapshot is None and "SSLError" in reason
        # A Secret volume's update: the new CA swapped in.
        replacement = tmp_path / "ca.new"
        replacement.write_bytes(new_ca.read_bytes())
        os.replace(replacement, ca_file)
        clock[0] += 1000  # past the back-off the TLS failure began
        await read(metrics, None)
    finally:
        metrics.close()
        server.close()


def test_a_ca_file_that_became_unusable_keeps_the_bundle_with_one_warning_per_problem(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A Secret's update swaps files: between two reads the CA file may be briefly gone or partial.
    # The bundle read before stays trusted, and each problem is logged once, not at every read.
    ca, _, _ = private_ca(tmp_path)
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(ca.read_bytes())
    bundle = TrustBundle(ca_file)
    try:
        trusted = bundle.path.read_text()
        with caplog.at_level(logging.WARNING, logger="neuronfleet.metrics.prometheus_auth"):
            ca_file.write_text("not a certificate\n")
            bundle.refresh()
            bundle.refresh()
            ca_file.unlink()
            bundle.refresh()
            bundle.refresh()
        warnings = [r.getMessage() for r in caplog.records]
        assert len(warnings) == 2, warnings
        assert "no PEM certificate in it" in warnings[0] and "No such file or directory" in warnings[1]
        assert all(w.endswith("verifying TLS with the bundle read before") for w in warnings)
        assert bundle.path.read_text() == trusted
    finally:
        bundle.close()


async def test_a_spec_url_that_redirects_is_not_followed(
    operators: RecordingPrometheus, harvester: RecordingPrometheus
) -> None:
    """An allowed spec URL answering a redirect must not lead the operator to a URL the allow-list
    does not name (e.g. the instance metadata service)."""
    redirecting = RecordingPrometheus(redirect_to=harvester.url)
    policy = PrometheusUrlPolicy.from_entries([redirecting.url])
    metrics = PrometheusMetrics(operators.url, url_policy=policy)
    try:
        snapshot, reason = await metrics.snapshot(deployment(redirecting.url), time.time())
        assert snapshot is None and redirecting.seen
        assert "RedirectNotFollowed: the endpoint redirected (HTTP 307)" in reason, reason
        assert "not followed for a spec's scaling.metrics.prometheusUrl" in reason, reason
        assert harvester.seen == []
        assert metrics.backoff(redirecting.url, own=False) is not None
    finally:
        metrics.close()
        redirecting.close()


def test_credentials_that_cannot_be_used_fail_at_start_up(tmp_path: Path) -> None:
    token, password = token_file(tmp_path, "t"), tmp_path / "password"
    password.write_text("p")
    with pytest.raises(CredentialsError, match="both set"):
        PrometheusCredentials(bearer_token_file=token, username="u", password_file=password).auth()
    # Half of basic auth beside a token is refused as well, not dropped for the token.
    with pytest.raises(CredentialsError, match="both set"):
        PrometheusCredentials(bearer_token_file=token, username="u").auth()
    with pytest.raises(CredentialsError, match="both set"):
        PrometheusCredentials(bearer_token_file=token, password_file=password).auth()
    with pytest.raises(CredentialsError, match="needs both"):
        PrometheusCredentials(username="u").auth()
    with pytest.raises(CredentialsError, match=r"--prometheus-bearer-token-file .*missing: No such file"):
        PrometheusCredentials(bearer_token_file=tmp_path / "missing").auth()
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(CredentialsError, match="the file is empty"):
        PrometheusCredentials(password_file=tmp_path / "empty", username="u").auth()
    with pytest.raises(CredentialsError, match=r"--prometheus-ca-file .* not a readable file"):
        PrometheusCredentials(ca_file=tmp_path).trust()
    with pytest.raises(CredentialsError, match=r"--prometheus-ca-file .*missing: No such file"):
        PrometheusCredentials(ca_file=tmp_path / "missing").trust()
    with pytest.raises(CredentialsError, match=r"--prometheus-ca-file .* no PEM certificate in it"):
        PrometheusCredentials(ca_file=password).trust()


def _kubeconfig(path: Path) -> str:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return str(path)


@pytest.fixture
def run_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for name in run_command.KNOWN_VARIABLES:  # every variable run reads, so none leaks in from the shell
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def stopped_before_connecting(monkeypatch: pytest.MonkeyPatch) -> list[tuple[OperatorSettings, PrometheusMetrics]]:
    """Make ``neuronfleet run`` stop where it would connect to the cluster; the list returned gets
    the settings and the metrics reader it built."""
    seen: list[tuple[OperatorSettings, PrometheusMetrics]] = []

    async def build_context(settings: OperatorSettings, kubeconfig: Any, metrics: Any, *args: Any) -> Any:
        seen.append((settings, metrics))
        raise run_command.RunSetupError("stopped before connecting")

    monkeypatch.setattr(run_command, "build_context", build_context)
    return seen


def test_run_reads_the_settings_from_the_environment(
    tmp_path: Path, run_env: pytest.MonkeyPatch, operators: RecordingPrometheus
) -> None:
    token = token_file(tmp_path, "T0ken-env")
    run_env.setenv("NEURONFLEET_PROMETHEUS_URL", operators.url)
    run_env.setenv("NEURONFLEET_PROMETHEUS_BEARER_TOKEN_FILE", str(token))
    run_env.setenv("NEURONFLEET_PROMETHEUS_ALLOWED_URLS", "http://prom-a.monitoring:9090, https://prom-b/ws-1")
    seen = stopped_before_connecting(run_env)
    assert main(["run", "--kubeconfig", _kubeconfig(tmp_path / "kubeconfig")]) == 2
    ((settings, metrics),) = seen
    assert isinstance(metrics, PrometheusMetrics) and metrics.credentials.bearer_token_file == token
    assert settings.prometheus_urls == metrics.url_policy
    assert settings.prometheus_urls.refusal("http://prom-a.monitoring:9090/") is None
    assert settings.prometheus_urls.refusal("https://prom-b/ws-1/x") is None
    assert settings.prometheus_urls.refusal("https://prom-b/ws-2") is not None


@pytest.mark.parametrize(
    ("flags", "complaint"),
    [
        (
            ["--prometheus-bearer-token-file", "/dev/null"],
            "error: Prometheus credentials are set but --prometheus-url (env NEURONFLEET_PROMETHEUS_URL) is not",
        ),
        (
            ["--prometheus-url", "http://p:9090", "--prometheus-bearer-token-file", "/nonexistent/token"],
            "error: --prometheus-bearer-token-file /nonexistent/token: No such file or directory",
        ),
        (
            ["--prometheus-sigv4-region", "eu-west-1"],
            "error: Prometheus credentials are set but --prometheus-url (env NEURONFLEET_PROMETHEUS_URL) is not",
        ),
        (
            ["--prometheus-username", "operator"],  # any one credential, not only some pairs
            "error: Prometheus credentials are set but --prometheus-url (env NEURONFLEET_PROMETHEUS_URL) is not",
        ),
        (
            ["--prometheus-url", f"{AMP}/workspaces/ws-1", "--prometheus-sigv4-region", "eu-west-1"],
            "error: --prometheus-sigv4-region is eu-west-1 but --prometheus-url is an AMP workspace in us-east-1: "
            "AMP accepts only signatures for its own region",
        ),
        (
            ["--prometheus-url", "https://prometheus-proxy.example", "--prometheus-sigv4-region", "us-east1"],
            "error: --prometheus-sigv4-region 'us-east1' is not an AWS region (e.g. us-east-1)",
        ),
        (
            [
                "--prometheus-url",
                f"{AMP}/workspaces/ws-1",
                "--prometheus-sigv4-region",
                "us-east-1",
                "--prometheus-bearer-token-file",
                "/dev/null",
            ],
            "error: --prometheus-sigv4-region and a bearer token or basic auth are both set",
        ),
        (
            ["--prometheus-url", f"{AMP}/workspaces/ws-1", "--prometheus-sigv4-region", "us-east-1"],
            "error: --prometheus-sigv4-region is set but botocore finds no AWS credentials: give the operator's "
            "ServiceAccount an IAM role",
        ),
        (
            ["--prometheus-allowed-url", "http://user@prom"],
            "error: --prometheus-allowed-url (env NEURONFLEET_PROMETHEUS_ALLOWED_URLS): 'http://user@prom': an "
            "allowed URL has no user-info, query or fragment",
        ),
    ],
)
def test_run_refuses_unusable_prometheus_settings_in_one_line(
    tmp_path: Path,
    run_env: pytest.MonkeyPatch,
    aws_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    complaint: str,
) -> None:
    assert main(["run", "--kubeconfig", _kubeconfig(tmp_path / "kubeconfig"), *flags]) == 2
    assert capsys.readouterr().err.startswith(complaint)


@pytest.mark.parametrize(
    ("flags", "variable", "refused"),
    [
        ([], None, False),
        (["--prometheus-refuse-query-overrides"], None, True),
        ([], "true", True),
        ([], "False", False),
    ],
)
def test_run_takes_refuse_query_overrides_from_the_flag_or_the_environment(
    tmp_path: Path, run_env: pytest.MonkeyPatch, flags: list[str], variable: str | None, refused: bool
) -> None:
    if variable is not None:
        run_env.setenv("NEURONFLEET_PROMETHEUS_REFUSE_QUERY_OVERRIDES", variable)
    seen = stopped_before_connecting(run_env)
    assert main(["run", "--kubeconfig", _kubeconfig(tmp_path / "kubeconfig"), *flags]) == 2
    ((settings, metrics),) = seen
    metrics.close()
    assert settings.refuse_query_overrides is refused


def test_run_refuses_a_refuse_query_overrides_variable_that_is_not_true_or_false(
    tmp_path: Path, run_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_env.setenv("NEURONFLEET_PROMETHEUS_REFUSE_QUERY_OVERRIDES", "yes")
    assert main(["run", "--kubeconfig", _kubeconfig(tmp_path / "kubeconfig")]) == 2
    assert capsys.readouterr().err.startswith("error: NEURONFLEET_PROMETHEUS_REFUSE_QUERY_OVERRIDES is 'yes': true or")


def test_run_without_an_operator_url_still_reads_a_spec_url(
    tmp_path: Path, run_env: pytest.MonkeyPatch, harvester: RecordingPrometheus
) -> None:
    # Without --prometheus-url no metrics source was built at all: a spec's prometheusUrl, which the
    # CRD says is the Prometheus to query, was never asked, and its fleet held ("no metrics source").
    seen = stopped_before_connecting(run_env)
    assert main(["run", "--kubeconfig", _kubeconfig(tmp_path / "kubeconfig")]) == 2
    ((_, metrics),) = seen
    assert isinstance(metrics, PrometheusMetrics) and metrics.default_url is None
    try:
        asyncio.run(read(metrics, harvester.url))
        assert harvester.seen and harvester.authorizations == {None}
        snapshot, reason = asyncio.run(metrics.snapshot(deployment(None), time.time()))
        assert snapshot is None and "no Prometheus URL configured" in reason
    finally:
        metrics.close()


def test_run_signs_for_amp_with_the_region_from_the_environment_and_warns_of_an_unsigned_workspace(
    tmp_path: Path, run_env: pytest.MonkeyPatch, aws_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    aws_env.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    run_env.setenv("NEURONFLEET_PROMETHEUS_URL", f"{AMP}/workspaces/ws-1")
    seen = stopped_before_connecting(run_env)
    with caplog.at_level("WARNING"):
        assert main(["run", "--kubeconfig", _kubeconfig(tmp_path / "kubeconfig")]) == 2
    assert "AMP workspace but --prometheus-sigv4-region is not set" in caplog.text
    _, metrics = seen.pop()
    metrics.close()
    assert metrics.credentials.sigv4_region is None
    caplog.clear()
    run_env.setenv("NEURONFLEET_PROMETHEUS_SIGV4_REGION", "us-east-1")
    with caplog.at_level("WARNING"):
        assert main(["run", "--kubeconfig", _kubeconfig(tmp_path / "kubeconfig")]) == 2
    assert "sigv4" not in caplog.text
    _, metrics = seen.pop()
    metrics.close()
    credentials = metrics.credentials
    assert credentials.sigv4_region == "us-east-1"
    assert credentials.describe() == "requests signed with AWS SigV4 for aps in us-east-1"
