"""Kopf's login: the kubeconfig the operator was given is used as given, never via the environment."""

from __future__ import annotations

import base64
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, cast

import kopf
import pytest
import yaml
from handler_calls import as_called

from neuronfleet import handlers
from neuronfleet.handlers import OperatorContext
from neuronfleet.kube.client import kubeconfig_files, load_configuration

login = as_called(handlers.login)

CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"


def write_kubeconfig(path: Path, server: str, user: dict[str, Any], cluster_extra: dict[str, Any]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server, **cluster_extra}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def memo_for(kubeconfig: Path | None) -> kopf.Memo:
    # The reconciler is not used by the login handler.
    context = OperatorContext(reconciler=cast(Any, None), kubeconfig=kubeconfig)
    return kopf.Memo(context=context)


async def test_the_given_kubeconfig_wins_over_the_environment_and_the_environment_is_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = write_kubeconfig(tmp_path / "other", "https://other.example:6443", {"token": "other"}, {})
    monkeypatch.setenv("KUBECONFIG", str(other))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    ca = base64.b64encode(CA_PEM.encode()).decode()
    given = write_kubeconfig(
        tmp_path / "given", "https://given.example:6443", {"token": "s3cret"}, {"certificate-authority-data": ca}
    )

    info = await login(memo=memo_for(given), logger=logging.getLogger("test"))

    assert isinstance(info, kopf.ConnectionInfo)
    assert info.server == "https://given.example:6443"
    assert (info.scheme, info.token) == ("Bearer", "s3cret")
    assert info.insecure is False
    assert info.ca_path is not None
    with open(os.fsdecode(info.ca_path)) as ca_file:  # noqa: ASYNC230 (a small local file, in a test)
        assert ca_file.read() == CA_PEM
    assert os.environ["KUBECONFIG"] == str(other)


async def test_basic_auth_and_skip_tls_verify_are_carried(tmp_path: Path) -> None:
    given = write_kubeconfig(
        tmp_path / "given",
        "https://basic.example",
        {"username": "ada", "password": "pw"},
        {"insecure-skip-tls-verify": True},
    )

    info = await login(memo=memo_for(given), logger=logging.getLogger("test"))

    assert isinstance(info, kopf.ConnectionInfo)
    assert info.scheme == "Basic"
    assert info.token is not None and base64.b64decode(info.token) == b"ada:pw"
    assert info.insecure is True


async def test_without_a_given_kubeconfig_the_environment_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_config = write_kubeconfig(tmp_path / "env", "http://127.0.0.1:1234", {"token": "t"}, {})
    monkeypatch.setenv("KUBECONFIG", str(env_config))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    info = await login(memo=memo_for(None), logger=logging.getLogger("test"), settings=kopf.OperatorSettings())

    assert isinstance(info, kopf.ConnectionInfo)
    assert info.server == "http://127.0.0.1:1234"


async def test_the_operators_own_client_reads_kubeconfig_as_kubectl_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without a given kubeconfig: each file $KUBECONFIG lists, merged (those that exist), else
    # ~/.kube/config; in a pod, the service account.
    missing = tmp_path / "missing"
    env_config = write_kubeconfig(tmp_path / "env", "http://127.0.0.1:1234", {"token": "t"}, {})
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(missing), str(env_config)]))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert kubeconfig_files() == [missing, env_config]
    assert (await load_configuration()).host == "http://127.0.0.1:1234"
    given = write_kubeconfig(tmp_path / "given", "https://given.example:6443", {"token": "s3cret"}, {})
    assert (await load_configuration(given)).host == "https://given.example:6443"
    monkeypatch.delenv("KUBECONFIG")
    assert kubeconfig_files() == [tmp_path / ".kube" / "config"]
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert kubeconfig_files() is None
    assert kubeconfig_files(given) == [given]


async def test_without_a_given_kubeconfig_an_exec_plugins_token_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # EKS kubeconfigs get their token from an exec plugin (aws eks get-token); here a Python one.
    # Kopf's own kubeconfig login would send no token at all.
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": "from-the-plugin"},
    }
    plugin = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": ["-c", f"print({json.dumps(json.dumps(credential))})"],
        }
    }
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "eks", "https://eks.example", plugin, {})))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    info = await login(memo=memo_for(None), logger=logging.getLogger("test"), settings=kopf.OperatorSettings())

    assert isinstance(info, kopf.ConnectionInfo)
    assert (info.server, info.scheme, info.token) == ("https://eks.example", "Bearer", "from-the-plugin")


async def test_a_client_certificate_login_carries_the_certificate_and_its_key(tmp_path: Path) -> None:
    # kind, kubeadm and minikube users authenticate with a client certificate, not a token.
    certificate, key = tmp_path / "client.crt", tmp_path / "client.key"
    certificate.write_text("-----BEGIN CERTIFICATE-----\nMIIBclient\n-----END CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\nMIIBkey\n-----END PRIVATE KEY-----\n")
    given = write_kubeconfig(
        tmp_path / "given",
        "https://kind.example:6443",
        {"client-certificate": str(certificate), "client-key": str(key)},
        {},
    )

    info = await login(memo=memo_for(given), logger=logging.getLogger("test"))

    assert isinstance(info, kopf.ConnectionInfo)
    assert info.token is None and info.scheme is None
    assert info.certificate_path is not None and info.private_key_path is not None
    assert (os.fsdecode(info.certificate_path), os.fsdecode(info.private_key_path)) == (str(certificate), str(key))
