"""Pytest plugin: a real Prometheus (the Debian package's binary) on 127.0.0.1 for one test.

The server class is the sandbox's own (:mod:`neuronfleet.sandbox.prometheus`); this plugin adds the
install-when-absent step and the fixtures.

``prometheus`` starts the binary with a generated config (scrape and evaluation every second,
targets from a file_sd file the test rewrites) and a temporary TSDB; the test points targets at
real processes with :meth:`PrometheusServer.set_targets`, can :meth:`~PrometheusServer.stop` and
:meth:`~PrometheusServer.start` it mid-test (same port and TSDB: a restart, as a real outage), and
query it. The binary is installed by ``hack/install-prometheus.sh`` when absent; if that cannot
be done (no root, no apt) the tests that need it are skipped with the reason.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neuronfleet.sandbox.prometheus import PrometheusServer, TargetGroup
from neuronfleet.sandbox.serving import free_port

REPO = Path(__file__).resolve().parent.parent
INSTALL_SCRIPT = REPO / "hack" / "install-prometheus.sh"


def fast_scaling(scale_down_window: float, prometheus_url: str | None = None) -> dict[str, Any]:
    """A ``spec.scaling`` that reacts within seconds, for tests that scale from Prometheus.

    1 s decisions, no panic, the scale-up unstabilized and the scale-down held only for
    ``scale_down_window`` seconds (no ``scaleDownDelaySeconds``: the CRD's default holds replicas for
    30 minutes), and a 5 s arrival-rate window (the default [1m] keeps the signal up for a minute
    after the load stops).
    """
    selector = 'namespace="$namespace",deployment="$name"'
    metrics: dict[str, Any] = {
        "staleAfterSeconds": 5,
        "timeoutSeconds": 2,
        "arrivalRate": f"sum(rate(neuronserve_requests_total{{{selector}}}[5s]))",
    }
    if prometheus_url is not None:
        metrics["prometheusUrl"] = prometheus_url
    return {
        "mode": "Auto",
        "minReplicas": 1,
        "maxReplicas": 3,
        "targetQueueDepth": 2,
        "targetUtilization": 0.9,
        "intervalSeconds": 1,
        "panicWindowSeconds": 0,
        "scaleDownDelaySeconds": 0,
        "behavior": {
            "scaleUp": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Pods", "value": 4, "periodSeconds": 1}],
            },
            "scaleDown": {
                "stabilizationWindowSeconds": scale_down_window,
                "policies": [{"type": "Percent", "value": 100, "periodSeconds": 1}],
            },
        },
        "metrics": metrics,
    }


def prometheus_binary() -> str | None:
    """The prometheus binary, installed with hack/install-prometheus.sh when absent; None if impossible."""
    found = shutil.which("prometheus")
    if found:
        return found
    if os.environ.get("NO_PROMETHEUS_INSTALL"):  # tests that must not install anything
        return None
    result = subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        return None
    return shutil.which("prometheus")


def private_ca(directory: Path) -> tuple[Path, Path, Path]:
    """A private CA and a server certificate it signed for 127.0.0.1, as PEM files in ``directory``:
    (the CA bundle, the server's certificate, its key). Skips the test without ``cryptography``."""
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "neuronfleet test CA")])

    def signed(builder: x509.CertificateBuilder) -> x509.Certificate:
        return (
            builder.issuer_name(ca_name)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .sign(ca_key, hashes.SHA256())
        )

    ca = signed(
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .public_key(ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
    )
    cert = signed(
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .public_key(key.public_key())
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    ca_file, cert_file, key_file = directory / "ca.pem", directory / "server.pem", directory / "server-key.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca_file, cert_file, key_file


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    binary = prometheus_binary()
    if binary is None:
        pytest.skip(
            "the prometheus binary is not installed and hack/install-prometheus.sh could not install it "
            "(needs root or sudo and the Debian package 'prometheus')"
        )
    return binary


@pytest.fixture
def prometheus(prometheus_bin: str, tmp_path: Path) -> Iterator[PrometheusServer]:
    """A running Prometheus scraping whatever the test puts in its targets file, every second."""
    workdir = tmp_path / "prometheus"
    workdir.mkdir()
    server = PrometheusServer(prometheus_bin, workdir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


__all__ = [
    "PrometheusServer",
    "TargetGroup",
    "free_port",
    "private_ca",
    "prometheus",
    "prometheus_bin",
    "prometheus_binary",
]
