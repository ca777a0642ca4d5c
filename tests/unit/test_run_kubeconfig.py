"""`neuronfleet run` with a kubeconfig it cannot use: one line naming the file, exit code 2, no traceback."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import pytest

from neuronfleet.cli import main


@pytest.fixture(autouse=True)
def outside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)


def test_a_missing_kubeconfig_flag_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nonexistent"
    assert main(["run", "--kubeconfig", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"error: kubeconfig {missing} not found: pass --kubeconfig or set KUBECONFIG to an existing file\n"
    )


def test_a_missing_kubeconfig_variable_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nonexistent"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    assert main(["run"]) == 2
    assert capsys.readouterr().err.startswith(f"error: kubeconfig {missing} not found: ")


def test_a_kubeconfig_list_is_read_as_kubectl_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # $KUBECONFIG may list files, some of them missing: run reads those that exist (here an unusable
    # one, so it stops there, naming the list), and says "not found" only when none does.
    missing, broken = tmp_path / "missing", tmp_path / "kubeconfig"
    broken.write_text("{}\n")
    listed = os.pathsep.join([str(missing), str(broken)])
    monkeypatch.setenv("KUBECONFIG", listed)
    assert main(["run"]) == 2
    assert capsys.readouterr().err.startswith(f"error: kubeconfig {listed}: Invalid kube-config file.")
    neither = os.pathsep.join([str(missing), str(tmp_path / "also-missing")])
    monkeypatch.setenv("KUBECONFIG", neither)
    assert main(["run"]) == 2
    assert capsys.readouterr().err.startswith(f"error: kubeconfig {neither} not found: ")


def test_an_unusable_kubeconfig_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("{}\n")
    assert main(["run", "--kubeconfig", str(broken)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: kubeconfig {broken}: Invalid kube-config file. Expected key current-context")
    assert err.endswith("; fix it or pass another with --kubeconfig\n")
    assert err.count("\n") == 1


def _kubeconfig(path: Path) -> Path:
    # A well-formed kubeconfig; the server is never reached, since the failure comes first.
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return path


@pytest.mark.parametrize("url", [None, "http://prometheus.monitoring:9090"])
def test_the_start_up_log_says_whether_a_prometheus_url_is_set(
    url: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # With a URL set, the log said both "Prometheus at <url>" and "no --prometheus-url".
    for name in ("NEURONFLEET_PROMETHEUS_URL", "NEURONFLEET_PROMETHEUS_REFUSE_QUERY_OVERRIDES"):
        monkeypatch.delenv(name, raising=False)
    unusable = tmp_path / "kubeconfig"  # read after the start-up log: run stops there, exit code 2
    unusable.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    flags = ["--prometheus-url", url] if url else []
    with caplog.at_level("INFO", logger="neuronfleet.run_command"):
        assert main(["run", "--kubeconfig", str(unusable), "--artifact-store", str(tmp_path), *flags]) == 2
    said = [
        r.getMessage()
        for r in caplog.records
        if "Prometheus at" in r.getMessage() or "prometheus-url" in r.getMessage()
    ]
    if url:
        assert said == [f"Prometheus at {url}: no credentials"]
    else:
        assert said == ["no --prometheus-url: Auto scaling reads only the Prometheus a spec names (prometheusUrl)"]


def test_a_metrics_port_in_use_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["run", "--kubeconfig", str(_kubeconfig(tmp_path / "kubeconfig")), "--metrics-port", str(port)])
    assert code == 2
    err = capsys.readouterr().err
    assert err == f"error: cannot serve metrics on 0.0.0.0 port {port}: Address already in use\n"


@pytest.mark.parametrize("port", ["-1", "65536", "http"])
def test_a_metrics_port_out_of_range_is_refused_by_the_parser(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--metrics-port", port])
    assert exit_.value.code == 2
    assert "--metrics-port: " in capsys.readouterr().err


def test_a_liveness_port_in_use_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], held_port: int) -> None:
    url = f"http://127.0.0.1:{held_port}/healthz"
    code = main(["run", "--kubeconfig", str(_kubeconfig(tmp_path / "kubeconfig")), "--liveness", url])
    assert code == 2
    assert capsys.readouterr().err == f"error: cannot serve the liveness endpoint {url}: Address already in use\n"


def test_a_liveness_address_this_host_does_not_have_is_one_line() -> None:
    # The address is checked as given (192.0.2.1 is TEST-NET-1, no host's own), not as localhost.
    from neuronfleet.run_command import RunSetupError, check_liveness_endpoint

    with pytest.raises(RunSetupError) as refused:
        check_liveness_endpoint("http://192.0.2.1:8080/healthz")
    assert str(refused.value) == "cannot serve the liveness endpoint http://192.0.2.1:8080/healthz: " + os.strerror(
        errno.EADDRNOTAVAIL
    )


@pytest.mark.parametrize(
    ("url", "complaint"),
    [("https://0.0.0.0:8080/healthz", "an http:// URL"), ("http://0.0.0.0:99999/healthz", "out of range")],
)
def test_a_liveness_endpoint_kopf_cannot_serve_is_refused_by_the_parser(
    url: str, complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--liveness", url])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--liveness: " in err and complaint in err, err


def test_a_kubeconfig_that_is_not_yaml_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("garbage: [\n")
    assert main(["run", "--kubeconfig", str(broken)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: kubeconfig {broken}: while parsing a flow")
    assert err.count("\n") == 1


@pytest.mark.parametrize("interval", ["0", "1e-7", "0.99", "-5", "nan", "inf", "3601", "ten"])
def test_a_reconcile_interval_that_never_waits_or_never_ends_is_refused_by_the_parser(
    interval: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # 0 reconciled every object in a busy loop (20 CPU-seconds in 24 s for one object); 1e-7 was
    # taken and did the same.
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--interval", interval])
    assert exit_.value.code == 2
    assert "--interval: " in capsys.readouterr().err


def _ipv6_loopback() -> bool:
    try:
        with socket.create_server(("::1", 0), family=socket.AF_INET6):
            return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this host has no IPv6 loopback")
def test_an_ipv6_cluster_gets_its_liveness_endpoint_and_metrics_on_ipv6() -> None:
    # On an IPv6 EKS cluster a pod has only an IPv6 address: the kubelet's probe and Prometheus
    # reach the operator there (the chart's ipFamily: IPv6 passes [::]). The liveness check bound
    # an IPv4 socket whatever the address, so it refused [::] and the operator never started.
    import urllib.request

    from neuronfleet.metrics.operator_metrics import OperatorMetrics, serve
    from neuronfleet.run_command import check_liveness_endpoint

    check_liveness_endpoint("http://[::]:0/healthz")
    port = serve(OperatorMetrics(), 0, "::")
    with urllib.request.urlopen(f"http://[::1]:{port}/metrics", timeout=5) as answer:
        assert answer.status == 200 and b"neuronfleet_" in answer.read()


@pytest.mark.skipif(not _ipv6_loopback(), reason="this host has no IPv6 loopback")
def test_a_bracketed_ipv6_metrics_address_is_served() -> None:
    # [::], written as in the liveness URL, was taken for a host name: "Name or service not known",
    # and only after the operator had connected to the API server.
    import urllib.request

    from neuronfleet.cli import build_parser
    from neuronfleet.metrics.operator_metrics import OperatorMetrics, serve

    address = build_parser().parse_args(["run", "--metrics-address=[::1]"]).metrics_address
    assert address == "::1"
    port = serve(OperatorMetrics(), 0, address)
    with urllib.request.urlopen(f"http://[::1]:{port}/metrics", timeout=5) as answer:
        assert answer.status == 200 and b"neuronfleet_" in answer.read()


@pytest.mark.parametrize(
    ("address", "complaint"),
    [
        ("[0.0.0.0]", "brackets hold an IPv6 address"),
        ("[metrics.local]", "brackets hold an IPv6 address"),
        ("0.0.0.0:9090", "the port is --metrics-port"),
        ("[::]:9090", "the port is --metrics-port"),
        ("", "is not an address"),
    ],
)
def test_a_metrics_address_that_cannot_be_served_is_refused_by_the_parser(
    address: str, complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["run", f"--metrics-address={address}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--metrics-address: " in err and complaint in err, err
