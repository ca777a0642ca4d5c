"""`neuronfleet run` refuses a ``NEURONFLEET_*`` variable it does not read: one line, exit code 2.

A chart newer than the operator's image sets variables the image does not read (an older operator
ran without the Prometheus URL allow-list or the query refusal, silently); the refusal names the
variable and says the image may be older than the chart.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import pytest

import neuronfleet
from neuronfleet.cli import build_parser, main
from neuronfleet.run_command import DEFAULT_ARTIFACT_STORE, KNOWN_VARIABLES, is_service_link, resolve_defaults


@pytest.fixture(autouse=True)
def no_neuronfleet_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in os.environ if name.startswith("NEURONFLEET_")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def test_an_unknown_variable_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NEURONFLEET_PROMETHEUS_QUERY_TIMEOUT", "5")
    monkeypatch.setenv("NEURONFLEET_ARTIFACT_STORE", "s3://bucket/prefix")  # known: not named
    assert main(["run", "--kubeconfig", str(tmp_path / "nonexistent")]) == 2
    assert capsys.readouterr().err == (
        "error: NEURONFLEET_PROMETHEUS_QUERY_TIMEOUT is not a variable this operator "
        f"(neuronfleet {neuronfleet.__version__}) reads: its image may be older than the chart that set it "
        "(build and push the operator's image from the chart's checkout under a new tag, then set image.tag: "
        'docs/install-eks.md, "Upgrade"), or the name is misspelt\n'
    )


def test_several_unknown_variables_are_all_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NEURONFLEET_ZONE", "a")
    monkeypatch.setenv("NEURONFLEET_ARTIFACT_STOR", "s3://bucket/prefix")
    assert main(["run", "--kubeconfig", str(tmp_path / "nonexistent")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: NEURONFLEET_ARTIFACT_STOR, NEURONFLEET_ZONE are not variables this operator ")
    assert err.count("\n") == 1


#: What the kubelet sets in a pod for the Service the operator makes for an InferenceDeployment
#: ``neuronfleet-demo`` in its own namespace (port ``http``), and for a Service
#: ``neuronfleet`` (two ports, the second UDP, an IPv6 cluster IP), as pkg/kubelet/envvars writes them.
SERVICE_LINKS = {
    "NEURONFLEET_DEMO_SERVICE_HOST": "10.100.0.7",
    "NEURONFLEET_DEMO_SERVICE_PORT": "8080",
    "NEURONFLEET_DEMO_SERVICE_PORT_HTTP": "8080",
    "NEURONFLEET_DEMO_PORT": "tcp://10.100.0.7:8080",
    "NEURONFLEET_DEMO_PORT_8080_TCP": "tcp://10.100.0.7:8080",
    "NEURONFLEET_DEMO_PORT_8080_TCP_PROTO": "tcp",
    "NEURONFLEET_DEMO_PORT_8080_TCP_PORT": "8080",
    "NEURONFLEET_DEMO_PORT_8080_TCP_ADDR": "10.100.0.7",
    "NEURONFLEET_SERVICE_HOST": "fd00::8",
    "NEURONFLEET_SERVICE_PORT": "9090",
    "NEURONFLEET_PORT": "tcp://[fd00::8]:9090",
    "NEURONFLEET_PORT_9090_TCP": "tcp://[fd00::8]:9090",
    "NEURONFLEET_PORT_9090_TCP_PROTO": "tcp",
    "NEURONFLEET_PORT_9090_TCP_PORT": "9090",
    "NEURONFLEET_PORT_9090_TCP_ADDR": "fd00::8",
    "NEURONFLEET_PORT_53_UDP": "udp://[fd00::8]:53",
    "NEURONFLEET_PORT_53_UDP_PROTO": "udp",
    "NEURONFLEET_PORT_53_UDP_PORT": "53",
    "NEURONFLEET_PORT_53_UDP_ADDR": "fd00::8",
}


def test_the_kubelets_service_links_are_no_settings_to_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Service ``neuronfleet-<x>`` in the operator's namespace put the operator in a crash loop:
    the kubelet sets its service links in every pod (unless enableServiceLinks is false, as the
    chart sets it; a pod spec of the user's may not)."""
    for name, value in SERVICE_LINKS.items():
        monkeypatch.setenv(name, value)
    missing = tmp_path / "nonexistent"
    assert main(["run", "--kubeconfig", str(missing)]) == 2
    assert capsys.readouterr().err.startswith(f"error: kubeconfig {missing} not found")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        # Misspelt settings, some with a link's suffix: the value is not a link's.
        ("NEURONFLEET_PROMETHEUS_URLS", "http://prometheus:9090"),
        ("NEURONFLEET_PROMETHEUS_URL_", "http://prometheus:9090"),
        ("NEURONFLEET_METRICS_PORT", "9090"),
        ("NEURONFLEET_PROMETHEUS_PORT", "http://prometheus:9090"),
        ("NEURONFLEET_PROMETHEUS_SERVICE_HOST", "prometheus.monitoring"),
        ("NEURONFLEET_PROMETHEUS_SERVICE_PORT", "web"),
        ("NEURONFLEET_WEB_PORT_8080_TCP", "tcp://10.100.0.7:8081"),
        ("NEURONFLEET_WEB_PORT_8080_TCP_PROTO", "udp"),
        ("NEURONFLEET_DEMO_PORT_8080_HTTP", "tcp://10.100.0.7:8080"),
        ("NEURONFLEET__SERVICE_HOST", "10.100.0.7"),
    ],
)
def test_a_misspelt_setting_is_no_service_link(
    name: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not is_service_link(name, value)
    monkeypatch.setenv(name, value)
    for link, link_value in SERVICE_LINKS.items():
        monkeypatch.setenv(link, link_value)
    assert main(["run", "--kubeconfig", str(tmp_path / "nonexistent")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {name} is not a variable this operator ")


@pytest.mark.parametrize("named_by", ["--kubeconfig", "$KUBECONFIG", "~/.kube/config"])
def test_an_unknown_variable_in_sandbox_env_is_refused_naming_the_file(
    named_by: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run`` reads ``sandbox.env`` beside its kubeconfig (the first file ``$KUBECONFIG`` lists,
    ``~/.kube/config`` without either) after checking the environment: a misspelt name there was
    loaded and ignored, the operator running on the default store."""
    kubeconfig = tmp_path / ".kube" / "config"
    kubeconfig.parent.mkdir()
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    env_file = kubeconfig.parent / "sandbox.env"
    env_file.write_text("export NEURONFLEET_NEURON_SCHEDULER=neuron\nexport NEURONFLEET_ARTIFACT_STOR=s3://bucket/p\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    if named_by == "$KUBECONFIG":
        monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(kubeconfig), str(tmp_path / "missing")]))
    flags = ["--kubeconfig", str(kubeconfig)] if named_by == "--kubeconfig" else []
    assert main(["run", *flags]) == 2
    assert capsys.readouterr().err == (
        f"error: {env_file}: NEURONFLEET_ARTIFACT_STOR is not a variable this operator (neuronfleet "
        f"{neuronfleet.__version__}) reads: the name is misspelt, or another version's `neuronfleet sandbox up` "
        "wrote the file\n"
    )
    assert "NEURONFLEET_NEURON_SCHEDULER" not in os.environ  # nothing of the file was set


def test_known_variables_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in KNOWN_VARIABLES:
        monkeypatch.setenv(name, "")
    missing = tmp_path / "nonexistent"
    assert main(["run", "--kubeconfig", str(missing)]) == 2
    # Past the check: the next setup error is the kubeconfig's.
    assert capsys.readouterr().err.startswith(f"error: kubeconfig {missing} not found")


#: A value each variable takes that differs from its default.
SAMPLES = {
    "NEURONFLEET_ARTIFACT_STORE": "s3://bucket/prefix",
    "NEURONFLEET_NEURON_SCHEDULER": "my-scheduler",
    "NEURONFLEET_PROMETHEUS_URL": "http://prometheus:9090",
    "NEURONFLEET_PROMETHEUS_BEARER_TOKEN_FILE": "/etc/token",
    "NEURONFLEET_PROMETHEUS_USERNAME": "user",
    "NEURONFLEET_PROMETHEUS_PASSWORD_FILE": "/etc/password",
    "NEURONFLEET_PROMETHEUS_CA_FILE": "/etc/ca.crt",
    "NEURONFLEET_PROMETHEUS_SIGV4_REGION": "us-east-1",
    "NEURONFLEET_PROMETHEUS_REFUSE_QUERY_OVERRIDES": "true",
    "NEURONFLEET_PROMETHEUS_ALLOWED_URLS": "http://prometheus:9090",
    "NEURONFLEET_MODEL_SERVER_IMAGE": "registry.example/neuronserve:1",
    "NEURONFLEET_DAEMONSET_HEADROOM_CPU": "1500m",
    "NEURONFLEET_DAEMONSET_HEADROOM_MEMORY": "2Gi",
    "NEURONFLEET_COMPILE_SERVICE_ACCOUNT": "compile",
    "NEURONFLEET_SERVING_SERVICE_ACCOUNT": "serving",
    "NEURONFLEET_DEVICE_GROUP_ID": "994",
    "NEURONFLEET_OPERATOR_SERVICE_ACCOUNT": "nf-neuronfleet",
    "NEURONFLEET_OPERATOR_NAMESPACE": "neuronfleet-system",
}


def _resolved() -> argparse.Namespace:
    return resolve_defaults(build_parser().parse_args(["run"]))


def test_without_flag_or_variable_the_artifact_store_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KNOWN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert _resolved().artifact_store == DEFAULT_ARTIFACT_STORE
    monkeypatch.setenv("NEURONFLEET_ARTIFACT_STORE", "s3://bucket/prefix")
    assert _resolved().artifact_store == "s3://bucket/prefix"
    flagged = resolve_defaults(build_parser().parse_args(["run", "--artifact-store", "s3://flag/x"]))
    assert flagged.artifact_store == "s3://flag/x"  # a flag wins over the variable


@pytest.mark.parametrize("name", sorted(KNOWN_VARIABLES))
def test_each_known_variable_is_read(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """No name is known that ``run`` ignores: each one changes a resolved setting."""
    default = vars(_resolved())
    monkeypatch.setenv(name, SAMPLES[name])
    assert vars(_resolved()) != default


def test_the_known_variables_are_those_run_help_names() -> None:
    parser = build_parser()
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    help_text = subcommands.choices["run"].format_help()
    assert set(re.findall(r"NEURONFLEET_[A-Z0-9_]+", help_text)) == KNOWN_VARIABLES == set(SAMPLES)
