"""Where the server listens by default: every interface of both families, so that the kubelet's
probes and the Service reach a pod on its IP in an IPv4, IPv6 or dual-stack cluster (0.0.0.0, the
former default, never answered on an IPv6 pod IP); still IPv4 where IPv6 is disabled or absent.
"""

from __future__ import annotations

import errno
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from neuronserve.server import all_interfaces_socket
from runtime_support import NEURONSERVE, ServeProcess, http_json, wait_for

EMULATED = ["--device", "emulated-neuroncore", "--profile", "bert-base"]


def _host_has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def _ready(url: str) -> int:
    try:
        return http_json(url, "GET", "/v2/health/ready")[0]
    except OSError:
        return 0


def test_by_default_it_answers_on_ipv4_and_ipv6_on_one_port(serve_process: Callable[..., ServeProcess]) -> None:
    process = serve_process(EMULATED, host=None)
    process.wait_listening(60)
    ipv4 = f"http://127.0.0.1:{process.port}"
    wait_for(lambda: _ready(ipv4) == 200, 60, f"{ipv4} to be ready")
    if _host_has_ipv6_loopback():
        assert _ready(f"http://[::1]:{process.port}") == 200
    assert "listening on http://*:" in process.log and "every interface, IPv4 and IPv6" in process.log
    if not _host_has_ipv6_loopback():
        pytest.skip("this host has no IPv6 loopback: IPv4 checked only")


def _check_in_network_namespace(script: str, *sysctls: str) -> str:
    """Run ``script`` with this Python in a new network namespace (its own loopback, ``sysctls``
    set); its stdout. Skipped where namespaces cannot be made (no user namespaces, no iproute2)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip (util-linux, iproute2)")
    setup = " && ".join(["ip link set lo up", *(f"sysctl -qw {s}" for s in sysctls)])
    command = f'{setup} && exec "$0" -c "$1"'
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {probe.stderr.decode().strip()}")
    done = subprocess.run(
        ["unshare", "-rn", "sh", "-c", command, sys.executable, textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


CONNECT_OVER_IPV4 = """
    import socket
    from neuronserve.server import all_interfaces_socket
    sock, where = all_interfaces_socket(0)
    sock.listen()
    with socket.create_connection(("127.0.0.1", sock.getsockname()[1]), timeout=5):
        conn, _ = sock.accept()
    print(sock.family.name, where)
"""


def test_where_ipv6_is_disabled_it_still_listens_on_ipv4() -> None:
    disabled = ("net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.lo.disable_ipv6=1")
    printed = _check_in_network_namespace(CONNECT_OVER_IPV4, *disabled)
    assert printed.strip() == "AF_INET6 every interface, IPv4 and IPv6"


def test_where_the_kernel_has_no_ipv6_it_listens_on_ipv4(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = socket.socket

    def no_ipv6(family: int = socket.AF_INET, *args: Any, **kwargs: Any) -> socket.socket:
        if family == socket.AF_INET6:  # what a kernel booted with ipv6.disable=1 answers
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real(family, *args, **kwargs)

    monkeypatch.setattr(socket, "socket", no_ipv6)
    sock, where = all_interfaces_socket(0)
    monkeypatch.undo()
    # Why, in words (not the exception's form with its errno).
    assert caplog.messages == ["IPv6 unavailable (Address family not supported by protocol): listening on IPv4 only"]
    with sock:
        assert (sock.family, where) == (socket.AF_INET, "every IPv4 interface; no IPv6")
        sock.listen()
        with socket.create_connection(("127.0.0.1", sock.getsockname()[1]), timeout=5):
            sock.accept()[0].close()


def test_a_port_in_use_is_said_in_one_line_and_the_server_exits(held_port: int) -> None:
    port = held_port
    done = subprocess.run(
        [NEURONSERVE, "serve", "--host", "127.0.0.1", "--port", str(port), *EMULATED],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    said = done.stderr.strip().splitlines()[-1]
    assert said.startswith(f"neuronserve: cannot listen on 127.0.0.1, port {port}: ")
    # The reason in words, not the exception's form with its errno.
    assert said.endswith("address already in use") and "Errno" not in said
