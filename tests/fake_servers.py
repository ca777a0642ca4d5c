"""Fake model servers for the sandbox's kubelet and process tests: a few lines of ``http.server``
run as a real process, speaking as much of ``neuronserve serve`` as a test needs."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

from neuronfleet.sandbox import ColdStartProfile, NodeGroup, SandboxCluster
from neuronfleet.sandbox.serving import ServingOptions

#: Answers every GET 200 (its readiness probe); as neuronserve, the first SIGTERM or SIGINT starts a
#: drain delay and a second signal ends it (exit 0). Given one SIGTERM, it serves on until SIGKILL.
DRAINING_SERVER = textwrap.dedent(
    """\
    import http.server, signal, sys, threading
    port = int(sys.argv[sys.argv.index("--port") + 1])
    signals = []

    def on_signal(number, frame):
        # As neuronserve: the first signal starts a drain delay, a second one ends it.
        signals.append(number)
        if len(signals) == 2:
            sys.exit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    class Ready(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", port), Ready)
    server.timeout = 0.05
    while True:
        server.handle_request()
    """
)


def draining_neuronserve(directory: Path) -> Path:
    """An executable named ``neuronserve`` in ``directory/bin`` that runs :data:`DRAINING_SERVER`."""
    binary = directory / "bin" / "neuronserve"
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_text(f"#!{sys.executable}\n{DRAINING_SERVER}")
    binary.chmod(0o755)
    return binary


def served_pod(name: str, binary: Path, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A pod whose server the sandbox kubelet runs as ``binary serve`` (one NeuronCore, probed ready)."""
    return {
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {
            "tolerations": [{"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "server",
                    "image": "neuronserve:1",
                    "command": [str(binary)],
                    "args": ["serve"],
                    "resources": {"limits": {"aws.amazon.com/neuroncore": "1"}},
                    "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": 8080}},
                }
            ],
            **spec,
        },
    }


def serving_sandbox(directory: Path, nodes: int = 1, *, own_workdir: bool = True) -> SandboxCluster:
    """A sandbox whose kubelet runs served pods' processes at once (no simulated start-up phases), on
    ``nodes`` inf2.xlarge nodes, with no provisioner; enter it with ``async with``. Its workdir is
    ``directory/sandbox``, or (``own_workdir=False``) a temporary one of its own."""
    return SandboxCluster(
        node_groups=[NodeGroup("small", "inf2.xlarge", count=nodes)],
        cold_start=ColdStartProfile(
            image_pull_s=0.0, container_start_s=0.0, readiness_s=0.0, shutdown_s=0.0, jitter=0.0
        ),
        run_provisioner=False,
        serving=ServingOptions(device_args=(), starting_niceness=0, ready_timeout_s=30.0, probe_period_s=0.2),
        workdir=directory / "sandbox" if own_workdir else None,
    )
