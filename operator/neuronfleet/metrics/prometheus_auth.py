"""The operator's credentials for its own Prometheus: a bearer token, basic auth or AWS SigV4, and a CA bundle.

They come from files (the chart mounts them from a Secret), never from the URL or the command
line, which sit in plain text in the Deployment. A token or password file is read again when it
changes (its inode, size or modification time: a Secret volume swaps a symlink, a projected token
is rewritten in place), so a rotated token is sent from the next request on, without a restart.

They go only to ``--prometheus-url``: :class:`neuronfleet.metrics.prometheus.PrometheusMetrics`
gives them to the client of that URL alone, never to the client of a spec's
``scaling.metrics.prometheusUrl`` (whoever writes a spec could otherwise point it at their own
endpoint and read the operator's token). requests itself drops the ``Authorization`` header when
an answer redirects to another host.

Amazon Managed Service for Prometheus (AMP) takes no token: each request is signed with SigV4
(:class:`AwsSigV4Auth`) with the credentials botocore finds (on EKS, the ServiceAccount's IAM role
through IRSA or EKS Pod Identity), which it renews before they expire.

The CA bundle is no secret: it is trusted for every URL, so a spec's Prometheus behind the same
private CA works too, and it only adds to what requests trusts without it (:class:`TrustBundle`):
a spec's Prometheus with a publicly trusted certificate still works.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import tempfile
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import botocore.auth
import botocore.awsrequest
import botocore.config
import botocore.credentials
import botocore.exceptions
import botocore.session
import requests
import requests.utils
from requests.auth import AuthBase, HTTPBasicAuth

logger = logging.getLogger(__name__)


class CredentialsError(Exception):
    """A credentials file that cannot be used: its setting and why, in one line."""


class FileSecret:
    """The stripped text of a file, read again when the file changes; thread-safe.

    A file that cannot be read after the first time keeps the last value (a Secret's update
    swaps files; a moment without one must not fail every query), with one warning per problem.
    """

    def __init__(self, path: Path, setting: str) -> None:
        self.path = path
        self.setting = setting
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int, int] | None = None
        self._value = ""
        self._warned: str | None = None
        self.read()

    def _read_file(self) -> tuple[tuple[int, int, int, int], str]:
        stat = os.stat(self.path)  # follows the symlinks a Secret volume is made of
        stamp = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if stamp == self._stamp:
            return stamp, self._value
        return stamp, self.path.read_text(encoding="utf-8").strip()

    def read(self) -> str:
        """The file's value (read at construction: CredentialsError if unreadable or empty then)."""
        with self._lock:
            try:
                stamp, value = self._read_file()
            except (OSError, UnicodeDecodeError) as error:
                problem = f"{self.setting} {self.path}: {getattr(error, 'strerror', None) or error}"
                if self._stamp is None:
                    raise CredentialsError(problem) from None
                if self._warned != problem:
                    logger.warning("%s; sending the last value read", problem)
                    self._warned = problem
                return self._value
            if not value:
                if self._stamp is None:
                    raise CredentialsError(f"{self.setting} {self.path}: the file is empty")
                return self._value
            self._stamp, self._value, self._warned = stamp, value, None
            return value


class BearerTokenAuth(AuthBase):
    """``Authorization: Bearer <token>`` from a token file, read again when it changes."""

    def __init__(self, token: FileSecret) -> None:
        self.token = token

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self.token.read()}"
        return request


class FileBasicAuth(AuthBase):
    """HTTP basic auth with a password file, read again when it changes."""

    def __init__(self, username: str, password: FileSecret) -> None:
        self.username = username
        self.password = password

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        result: requests.PreparedRequest = HTTPBasicAuth(self.username, self.password.read())(request)
        return result


class AwsCredentialsUnavailable(requests.RequestException):
    """No AWS credentials to sign a request with (the role cannot be assumed, STS unreachable):
    the query fails as an unavailable Prometheus does, and the autoscaler holds."""


#: The service name AMP's query API is signed for.
AMP_SIGNING_SERVICE = "aps"
#: An AWS region's name (us-east-1, us-gov-west-1, ap-southeast-2).
AWS_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-[0-9]+")
#: AMP's query endpoint, whose host names the workspace's region.
AMP_HOST = re.compile(r"aps-workspaces(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?")


def amp_region(url: str) -> str | None:
    """The region of an AMP workspace URL (None: not AMP's host)."""
    match = AMP_HOST.fullmatch(urllib.parse.urlsplit(url).hostname or "")
    return match.group(1) if match else None


def _rfc3986_query(query: str) -> str:
    """``query`` re-encoded as SigV4's canonical form encodes it (every byte but ``A-Za-z0-9-_.~``
    percent-encoded, a space as ``%20``), its order kept.

    requests encodes a space as ``+``, which an AWS endpoint decodes as a literal ``+`` when it
    rebuilds the canonical request: a PromQL query with a space would never verify. Sent in this
    form, the URL is its own canonical query and Prometheus reads the same query.
    """
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    return "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}" for k, v in pairs)


class AwsSigV4Auth(AuthBase):
    """Sign each request with AWS Signature Version 4 for AMP (``service``, ``region``).

    The credentials are botocore's default chain (environment, IRSA's web identity token, EKS Pod
    Identity, the instance's role): botocore renews refreshable ones before they expire, so a
    request is always signed with current ones. Only ``host``, ``x-amz-date`` and the session
    token are signed (with the payload's hash): headers a proxy or requests may rewrite are not.
    """

    def __init__(self, region: str, credentials: botocore.credentials.Credentials, service: str = AMP_SIGNING_SERVICE):
        self.region = region
        self.service = service
        self.credentials = credentials

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        url = urllib.parse.urlsplit(request.url or "")
        if url.query:
            request.url = urllib.parse.urlunsplit(url._replace(query=_rfc3986_query(url.query)))
        try:
            frozen = self.credentials.get_frozen_credentials()
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as error:
            # ClientError: STS refused (the role's trust policy, an expired web identity token).
            raise AwsCredentialsUnavailable(f"no AWS credentials to sign with SigV4: {error}") from None
        body = request.body if request.body is not None else b""
        signed = botocore.awsrequest.AWSRequest(method=request.method, url=request.url, data=body)
        botocore.auth.SigV4Auth(frozen, self.service, self.region).add_auth(signed)
        for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token"):
            if name in signed.headers:
                request.headers[name] = signed.headers[name]
        return request


def aws_credentials() -> botocore.credentials.Credentials:
    """botocore's default credentials chain, resolved without a network call (IRSA's are fetched at
    the first request); CredentialsError when no provider has any."""
    session = botocore.session.get_session()
    # STS (IRSA) is asked within a metrics read's deadline (5 s by default): botocore's default
    # retries (11 s against a closed port) and 60 s connect timeout would outlast it and hold a
    # query thread. The next read asks again after the back-off of a failed Prometheus.
    session.set_default_client_config(
        botocore.config.Config(connect_timeout=2, read_timeout=3, retries={"mode": "standard", "total_max_attempts": 2})
    )
    try:
        found = session.get_credentials()
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as error:
        # A provider that fetches at once (EKS Pod Identity's agent, the instance's metadata) failed.
        raise CredentialsError(f"--prometheus-sigv4-region: AWS credentials could not be had: {error}") from None
    if found is None:
        raise CredentialsError(
            "--prometheus-sigv4-region is set but botocore finds no AWS credentials: give the operator's "
            "ServiceAccount an IAM role (IRSA's eks.amazonaws.com/role-arn annotation, or an EKS Pod Identity "
            "association) allowed aps:QueryMetrics on the workspace"
        )
    return found


@dataclass(frozen=True)
class PrometheusCredentials:
    """What the operator's flags give for its own Prometheus (all optional)."""

    bearer_token_file: Path | None = None
    username: str | None = None
    password_file: Path | None = None
    ca_file: Path | None = None
    #: Sign requests with SigV4 for AMP in this region (None: no signing).
    sigv4_region: str | None = None

    def auth(self) -> AuthBase | None:
        """The requests auth for ``--prometheus-url``; CredentialsError for settings that do not fit
        together or a file that cannot be read."""
        if self.sigv4_region and (self.bearer_token_file is not None or self.username or self.password_file):
            raise CredentialsError(
                "--prometheus-sigv4-region and a bearer token or basic auth are both set: a SigV4 signature is the "
                "Authorization header, so set one of them"
            )
        if self.sigv4_region:
            if not AWS_REGION.fullmatch(self.sigv4_region):
                raise CredentialsError(
                    f"--prometheus-sigv4-region {self.sigv4_region!r} is not an AWS region (e.g. us-east-1)"
                )
            return AwsSigV4Auth(self.sigv4_region, aws_credentials())
        if self.bearer_token_file is not None and (self.username or self.password_file is not None):
            raise CredentialsError(
                "--prometheus-bearer-token-file and --prometheus-username/--prometheus-password-file are both set: "
                "Prometheus takes one Authorization header, so set one of them"
            )
        if self.bearer_token_file is not None:
            return BearerTokenAuth(FileSecret(self.bearer_token_file, "--prometheus-bearer-token-file"))
        if bool(self.username) != (self.password_file is not None):
            raise CredentialsError(
                "basic auth needs both --prometheus-username (env NEURONFLEET_PROMETHEUS_USERNAME) and "
                "--prometheus-password-file (env NEURONFLEET_PROMETHEUS_PASSWORD_FILE)"
            )
        if self.username and self.password_file is not None:
            return FileBasicAuth(self.username, FileSecret(self.password_file, "--prometheus-password-file"))
        return None

    def trust(self) -> TrustBundle | None:
        """What TLS is verified against when ``--prometheus-ca-file`` is set (None: requests' own
        trust, unchanged); CredentialsError for a file that is not a readable PEM bundle."""
        return None if self.ca_file is None else TrustBundle(self.ca_file)

    def describe(self) -> str:
        """What is sent to ``--prometheus-url``, for the start-up log (no secret)."""
        parts = []
        if self.bearer_token_file is not None:
            parts.append(f"a bearer token from {self.bearer_token_file}")
        if self.username:
            parts.append(f"basic auth with the password in {self.password_file}")
        if self.sigv4_region:
            parts.append(f"requests signed with AWS SigV4 for {AMP_SIGNING_SERVICE} in {self.sigv4_region}")
        if self.ca_file is not None:
            parts.append(f"TLS verified with the CA bundle {self.ca_file}")
        return ", ".join(parts) or "no credentials"


def requests_trust() -> Path:
    """The CA bundle (file or directory) requests verifies TLS against without ``verify`` set:
    REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE when set (requests reads them), else certifi's bundle."""
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        if value := os.environ.get(name):
            return Path(value)
    return Path(requests.utils.DEFAULT_CA_BUNDLE_PATH)


def _pem_text(source: Path) -> str:
    """The PEM text of a bundle file, or of every certificate file in a (c_rehash) directory;
    CredentialsError naming it when it cannot be read."""
    try:
        if not source.is_dir():
            return source.read_text(errors="replace")
        files = sorted(p for p in source.iterdir() if p.is_file())
        return "\n".join(p.read_text(errors="replace") for p in files)
    except OSError as error:
        raise CredentialsError(
            f"the CA bundle requests trusts without --prometheus-ca-file, {source} "
            f"(REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE or certifi's): {error.strerror or error}"
        ) from None


class TrustBundle:
    """requests' own trust (:func:`requests_trust`) plus ``--prometheus-ca-file``, in one PEM file.

    requests takes one ``verify`` bundle, and a bundle replaces what it trusts: given the CA file
    alone, every endpoint with a publicly trusted certificate (a spec's Prometheus, a managed
    service) would fail TLS. So the file is added to what requests would trust without it, written
    to a file of the operator's own (:attr:`path`, given to requests as ``verify``). :meth:`refresh`
    writes it again when the CA file changes (a Secret's update), so new connections trust the new
    CA without a restart. A PEM file and not an ``ssl.SSLContext``: requests takes a path through
    its public API, while a context has to be slipped past its adapter's internals.
    """

    def __init__(self, ca_file: Path) -> None:
        self.ca_file = ca_file
        self.base = requests_trust()
        handle, name = tempfile.mkstemp(prefix="neuronfleet-prometheus-ca-", suffix=".pem")
        os.close(handle)
        self.path = Path(name)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int, int] | None = None
        self._warned: str | None = None
        try:
            self.refresh()
        except CredentialsError:
            self.close()
            raise

    def _check(self) -> tuple[int, int, int, int]:
        if not self.ca_file.is_file() or not os.access(self.ca_file, os.R_OK):
            raise CredentialsError(f"--prometheus-ca-file {self.ca_file}: not a readable file")
        try:
            ssl.create_default_context(cafile=str(self.ca_file))
        except (ssl.SSLError, ValueError) as error:
            raise CredentialsError(
                f"--prometheus-ca-file {self.ca_file}: no PEM certificate in it ({error.__class__.__name__})"
            ) from None
        stat = os.stat(self.ca_file)
        return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def refresh(self) -> None:
        """Write the bundle again if the CA file changed; a CA file that became unusable keeps the
        bundle as it was (a Secret's update swaps files), with a warning. CredentialsError the first
        time only."""
        with self._lock:
            try:
                stat = os.stat(self.ca_file)
                if self._stamp == (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns):
                    return
                stamp = self._check()
                text = _pem_text(self.base).rstrip("\n") + "\n" + self.ca_file.read_text(errors="replace")
            except (OSError, CredentialsError) as error:
                problem = (
                    str(error)
                    if isinstance(error, CredentialsError)
                    else f"--prometheus-ca-file {self.ca_file}: {error.strerror or error}"
                )
                if self._stamp is None:
                    raise CredentialsError(problem) from None
                if self._warned != problem:
                    logger.warning("%s; verifying TLS with the bundle read before", problem)
                    self._warned = problem
                return
            # Replaced whole, never rewritten in place: a connection opening meanwhile reads a whole file.
            handle, partial = tempfile.mkstemp(prefix=self.path.stem, suffix=".tmp", dir=self.path.parent)
            with os.fdopen(handle, "w") as out:
                out.write(text)
            os.replace(partial, self.path)
            self._stamp, self._warned = stamp, None

    def close(self) -> None:
        """Remove the bundle file."""
        self.path.unlink(missing_ok=True)
