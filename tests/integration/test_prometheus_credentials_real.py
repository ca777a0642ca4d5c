"""The operator's credentials against a real Prometheus that demands them.

Prometheus (the Debian package's binary) serves TLS with a certificate of a private CA and requires
basic auth (its ``--web.config.file``). The operator's reader, given the CA bundle and the basic
auth files, reads it; a deployment whose spec names the very same URL is asked without them and
gets a 401, as would any endpoint a spec names; without the CA bundle TLS fails.
"""

from __future__ import annotations

import base64
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fixtures_prometheus import free_port, private_ca

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.metrics.prometheus import PrometheusMetrics
from neuronfleet.metrics.prometheus_auth import PrometheusCredentials

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]
USER, PASSWORD = "neuronfleet", "S3cr3t-pw"
#: bcrypt of PASSWORD (cost 4: Prometheus checks it on every request).
PASSWORD_BCRYPT = "$2b$04$2Sx6nQgFbqnDBeVhSOP5fOlPmdnl6MhJpmhSwcddmrRxmPIIiJOLm"


class SecuredPrometheus:
    """A Prometheus on 127.0.0.1 behind TLS (a private CA) and basic auth."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.ca_file, cert_file, key_file = private_ca(workdir)
        web = workdir / "web.yml"
        web.write_text(
            yaml.safe_dump(
                {
                    "tls_server_config": {"cert_file": str(cert_file), "key_file": str(key_file)},
                    "basic_auth_users": {USER: PASSWORD_BCRYPT},
                }
            )
        )
        config = workdir / "prometheus.yml"
        config.write_text("global: {scrape_interval: 1s}\nscrape_configs: []\n")
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.log = workdir / "prometheus.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--web.config.file={web}",
                    f"--storage.tsdb.path={workdir / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout: float = 30.0) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        request = urllib.request.Request(f"{self.url}/-/ready")
        request.add_unredirected_header("Authorization", "Basic " + _basic())
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, f"prometheus exited:\n{self.log.read_text(errors='replace')}"
            try:
                with urllib.request.urlopen(request, timeout=1, context=context) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            assert time.monotonic() < deadline, f"prometheus not ready:\n{self.log.read_text(errors='replace')}"
            time.sleep(0.1)  # polling /-/ready of a starting process

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _basic() -> str:
    return base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


@pytest.fixture
def secured(prometheus_bin: str, tmp_path: Path) -> Iterator[SecuredPrometheus]:
    server = SecuredPrometheus(prometheus_bin, tmp_path)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def deployment(url: str | None, name: str) -> InferenceDeployment:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["metadata"]["name"] = name
    # Queries Prometheus answers without any target; the other signals off.
    queries = {field: "" for field in ("inFlight", "arrivalRate", "arrivalPeak", "utilization", "reporting")}
    metrics = {"queueDepth": "vector(3)", "sampleTime": "", "timeoutSeconds": 5, **queries}
    doc["spec"]["scaling"]["metrics"] = {**metrics, **({"prometheusUrl": url} if url else {})}
    return InferenceDeployment.model_validate(doc)


async def test_the_operators_credentials_and_ca_read_a_secured_prometheus_and_a_spec_url_gets_neither(
    secured: SecuredPrometheus, tmp_path: Path
) -> None:
    password = tmp_path / "password"
    password.write_text(PASSWORD)
    credentials = PrometheusCredentials(username=USER, password_file=password, ca_file=secured.ca_file)
    metrics = PrometheusMetrics(secured.url, credentials=credentials)
    without_ca = PrometheusMetrics(
        secured.url, credentials=PrometheusCredentials(username=USER, password_file=password)
    )
    try:
        snapshot, reason = await metrics.snapshot(deployment(None, "own"), time.time())
        assert snapshot is not None and snapshot.queue_depth == 3.0, reason
        # The same URL named by a spec: TLS verified with the same CA, but no credentials.
        snapshot, reason = await metrics.snapshot(deployment(secured.url, "named"), time.time())
        assert snapshot is None and reason.endswith("unavailable: PrometheusApiClientException: HTTP 401"), reason
        # The operator's own reads go on (a back-off of the spec's own).
        snapshot, reason = await metrics.snapshot(deployment(None, "own"), time.time())
        assert snapshot is not None, reason
        snapshot, reason = await without_ca.snapshot(deployment(None, "own"), time.time())
        assert snapshot is None and "SSLError" in reason and PASSWORD not in reason
    finally:
        metrics.close()
        without_ca.close()
