"""``neuronfleet sandbox up`` (via its ``register`` function): serves, writes a kubeconfig kubectl
can use, stops on SIGINT; bad node-group specs get a clear error; ``--prometheus auto`` on a
machine without Prometheus serves without it and points the operator at none, as does simulated
serving (no server process to scrape)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from neuronfleet.kube.builders import build_priority_classes
from neuronfleet.run_command import KNOWN_VARIABLES

DRIVER = (
    "import argparse, sys\n"
    "from neuronfleet.sandbox.command import register\n"
    "parser = argparse.ArgumentParser(prog='neuronfleet')\n"
    "register(parser.add_subparsers())\n"
    "args = parser.parse_args(sys.argv[1:])\n"
    "sys.exit(args.func(args))\n"
)


def read_banner(proc: subprocess.Popen[str]) -> list[str]:
    """What ``sandbox up`` prints before it waits (up to its last line, "Ctrl-C to stop.")."""
    assert proc.stdout is not None
    banner: list[str] = []
    while len(banner) < 40 and not (banner and banner[-1].startswith("Ctrl-C")):
        banner.append(proc.stdout.readline())
    assert banner[0].startswith("sandbox API server: http://127.0.0.1:"), banner
    return banner


def test_sandbox_up_serves_until_interrupted(kubectl: str, repo_root: Path, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    args = [
        "sandbox",
        "up",
        "--kubeconfig",
        str(kubeconfig),
        "--crd-dir",
        str(repo_root / "crds"),
        "--node-groups",
        "small:inf2.xlarge:2@us-east-1a+us-east-1b",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        banner = read_banner(proc)
        assert f"export KUBECONFIG={kubeconfig}" in "".join(banner)
        # Where the operator finds the sandbox's S3: beside the kubeconfig, gone after the sandbox.
        settings = (tmp_path / "sandbox.env").read_text()
        assert "export AWS_ENDPOINT_URL=http://127.0.0.1:" in settings
        assert "export NEURONFLEET_ARTIFACT_STORE=s3://" in settings
        # neuronfleet run refuses a NEURONFLEET_* name there that it does not read.
        names = {line.removeprefix("export ").partition("=")[0] for line in settings.splitlines()}
        assert {name for name in names if name.startswith("NEURONFLEET_")} <= KNOWN_VARIABLES
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}
        nodes = subprocess.run(
            [kubectl, "get", "nodes", "-o", "name"], env=env, capture_output=True, text=True, timeout=60
        )
        assert nodes.returncode == 0, nodes.stderr
        assert len(nodes.stdout.split()) == 2
        crds = subprocess.run(
            [kubectl, "get", "crd", "-o", "name"], env=env, capture_output=True, text=True, timeout=60
        )
        assert "inferencedeployments.serving.neuronfleet.dev" in crds.stdout
        # The PriorityClasses the operator's pods name, installed as the chart installs them.
        classes = subprocess.run(
            [kubectl, "get", "priorityclasses", "-o", "name"], env=env, capture_output=True, text=True, timeout=60
        )
        wanted = {f"priorityclass.scheduling.k8s.io/{c['metadata']['name']}" for c in build_priority_classes()}
        assert wanted <= set(classes.stdout.split()), classes.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
    assert code == 0
    assert not (tmp_path / "sandbox.env").exists()


def test_sandbox_up_rejects_bad_node_groups() -> None:
    result = subprocess.run(
        [sys.executable, "-c", DRIVER, "sandbox", "up", "--node-groups", "small:inf3.huge:2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "bad node group 'small:inf3.huge:2'" in result.stderr
    assert "Traceback" not in result.stderr


#: The same driver on a machine without Prometheus: the binary lookup fails as it does there.
DRIVER_WITHOUT_PROMETHEUS = (
    "import neuronfleet.sandbox.command as command\n"
    "from neuronfleet.sandbox.prometheus import PrometheusUnavailable\n"
    "def find_binary():\n"
    "    raise PrometheusUnavailable('no prometheus binary on PATH (test)')\n"
    "command.find_binary = find_binary\n" + DRIVER
)


@pytest.mark.parametrize(
    ("serving", "says", "looked_for"),
    [
        # Served pods still run and get routers; only the scraping is gone.
        ([], "each Service gets a router", True),
        # Nothing to scrape: not wanted, so not looked for (no word about a missing binary).
        (["--serving", "simulated"], "serving pods: simulated", False),
    ],
    ids=["served-pods", "simulated-serving"],
)
def test_prometheus_auto_without_the_binary_serves_without_it(
    serving: list[str], says: str, looked_for: bool, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    args = ["sandbox", "up", "--kubeconfig", str(kubeconfig), "--no-s3", "--prometheus", "auto", *serving]
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER_WITHOUT_PROMETHEUS, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        banner = read_banner(proc)
        assert any(says in line for line in banner), banner
        # The operator is not pointed at a Prometheus that is not there.
        assert not any(line.startswith("Prometheus:") for line in banner), banner
        settings = (tmp_path / "sandbox.env").read_text()
        assert "export KUBECONFIG=" in settings
        assert "NEURONFLEET_PROMETHEUS_URL" not in settings
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert ("no Prometheus: no prometheus binary on PATH (test)" in stderr) is looked_for
    assert "Traceback" not in stderr
