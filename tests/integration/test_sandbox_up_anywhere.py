"""``neuronfleet sandbox up`` started outside the repository: it registers the packaged
InferenceDeployment CRD (no ``crds/`` directory needed) and creates the PriorityClasses the Helm
chart would, so that the operator's pods are admitted."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from neuronfleet.api.crd import CRD_NAME
from neuronfleet.kube.builders import build_priority_classes


def _wait_for_line(proc: subprocess.Popen[str], prefix: str, timeout: float = 60.0) -> list[str]:
    """Lines of ``proc``'s stdout up to one starting with ``prefix`` (read in a thread: a pipe's
    buffered lines would not wake a selector)."""
    assert proc.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    stdout = proc.stdout

    def read() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=remaining)
        except queue.Empty:
            break
        seen.append(line)
        if line.startswith(prefix):
            return seen
    raise AssertionError(f"no line starting with {prefix!r} within {timeout}s: {seen}")


def test_sandbox_up_from_another_directory_serves_crd_and_priority_classes(kubectl: str, tmp_path: Path) -> None:
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "neuronfleet.cli",
            "sandbox",
            "up",
            "--kubeconfig",
            str(kubeconfig),
            "--node-groups",
            "small:inf2.xlarge:1",
        ],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "AWS_EC2_METADATA_DISABLED": "true"},
    )
    try:
        _wait_for_line(proc, "Ctrl-C to stop.")  # the banner is flushed at its end
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}

        def kubectl_json(*args: str) -> dict[str, Any]:
            result = subprocess.run(
                [kubectl, *args, "-o", "json"], env=env, capture_output=True, text=True, timeout=60, cwd=workdir
            )
            assert result.returncode == 0, result.stderr
            parsed: dict[str, Any] = json.loads(result.stdout)
            return parsed

        crd = kubectl_json("get", "crd", CRD_NAME)
        assert crd["spec"]["names"]["kind"] == "InferenceDeployment"
        classes = kubectl_json("get", "priorityclasses")
        served = {item["metadata"]["name"]: item["value"] for item in classes["items"]}
        for wanted in build_priority_classes():
            assert served.get(wanted["metadata"]["name"]) == wanted["value"]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
