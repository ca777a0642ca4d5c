"""The operator's credentials for its own Prometheus: a bearer token or basic auth, and a CA bundle.

They come from files (the chart mounts them from a Secret), never from the URL or the command
line, which sit in plain text in the Deployment. A token or password file is read again when it
changes (its inode, size or modification time: a Secret volume swaps a symlink, a projected token
is rewritten in place), so a rotated token is sent from the next request on, without a restart.

They go only to ``--prometheus-url``: :class:`neuronfleet.metrics.prometheus.PrometheusMetrics`
gives them to the client of that URL alone, never to the client of a spec's
``scaling.metrics.prometheusUrl`` (whoever writes a spec could otherwise point it at their own
endpoint and read the operator's token). requests itself drops the ``Authorization`` header when
an answer redirects to another host. The CA bundle is no secret: it is trusted for every URL, so a
spec's Prometheus behind the same private CA works too.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import requests
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


@dataclass(frozen=True)
class PrometheusCredentials:
    """What the operator's flags give for its own Prometheus (all optional)."""

    bearer_token_file: Path | None = None
    username: str | None = None
    password_file: Path | None = None
    ca_file: Path | None = None

    def auth(self) -> AuthBase | None:
        """The requests auth for ``--prometheus-url``; CredentialsError for settings that do not fit
        together or a file that cannot be read."""
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

    def verify(self) -> str | bool:
        """requests' ``verify``: the CA bundle file, else True (the system's CAs, or REQUESTS_CA_BUNDLE)."""
        if self.ca_file is None:
            return True
        if not self.ca_file.is_file() or not os.access(self.ca_file, os.R_OK):
            raise CredentialsError(f"--prometheus-ca-file {self.ca_file}: not a readable file")
        return str(self.ca_file)

    def describe(self) -> str:
        """What is sent to ``--prometheus-url``, for the start-up log (no secret)."""
        parts = []
        if self.bearer_token_file is not None:
            parts.append(f"a bearer token from {self.bearer_token_file}")
        if self.username:
            parts.append(f"basic auth with the password in {self.password_file}")
        if self.ca_file is not None:
            parts.append(f"TLS verified with the CA bundle {self.ca_file}")
        return ", ".join(parts) or "no credentials"
