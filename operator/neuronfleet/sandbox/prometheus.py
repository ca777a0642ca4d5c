"""A real Prometheus (Debian's binary) for the sandbox, scraping the serving pods' processes.

:class:`PrometheusServer` runs one ``prometheus`` process on 127.0.0.1 with a generated config
(one scrape job over a file_sd target list, scrape and evaluation every ``scrape_interval_s``) and
its TSDB in a work directory, emptied when the server is created (a new run reads no samples of a
previous one); it can be stopped and started again (same port and TSDB: an outage).
The binary comes from the Debian package ``prometheus`` (``hack/install-prometheus.sh``).

:class:`PodTargets` keeps that target list equal to the sandbox's served pods, labelled as the
Helm chart's PodMonitor relabels them on EKS (``charts/neuronfleet/templates/podmonitor.yaml``):
pods carrying ``serving.neuronfleet.dev/deployment`` and a role in active/warm/draining, with
``namespace``, ``deployment``, ``role``, ``revision`` and ``pod`` labels. As with the PodMonitor,
readiness does not filter targets (a warm pod's queue is scraped too; the operator's queries
select ``role="active"``); a pod leaves the list when its process is gone.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from neuronfleet.aio import wait_event
from neuronfleet.sandbox.children import popen
from neuronfleet.sandbox.serving import ServerProcesses, free_port
from neuronfleet.sandbox.store import Store, WatchEvent

#: The pod labels the chart's PodMonitor turns into series labels (see the module docstring).
LABEL_DEPLOYMENT = "serving.neuronfleet.dev/deployment"
LABEL_ROLE = "serving.neuronfleet.dev/role"
LABEL_REVISION = "serving.neuronfleet.dev/revision"
SCRAPED_ROLES = frozenset({"active", "warm", "draining"})
INSTALL_HINT = "install Debian's prometheus package: sudo bash hack/install-prometheus.sh"


class PrometheusUnavailable(RuntimeError):
    """No prometheus binary, or it did not start (the message says why)."""


@dataclass(frozen=True)
class TargetGroup:
    """One file_sd entry: addresses (host:port) and the labels every series scraped from them gets."""

    targets: tuple[str, ...]
    labels: Mapping[str, str]


def find_binary() -> str:
    """The ``prometheus`` binary on PATH (``/usr/bin/prometheus`` from Debian), or PrometheusUnavailable."""
    found = shutil.which("prometheus") or ("/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None)
    if found is None:
        raise PrometheusUnavailable(f"no prometheus binary on PATH: {INSTALL_HINT}")
    return found


class PrometheusServer:
    """One Prometheus process with its config, file_sd targets and TSDB under ``workdir``.

    Blocking methods (``start``, ``stop``, ``query``): async callers run them in a thread.
    """

    def __init__(self, binary: str, workdir: Path, port: int | None = None, scrape_interval_s: float = 1.0) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = port or free_port()
        self.scrape_interval_s = scrape_interval_s
        workdir.mkdir(parents=True, exist_ok=True)
        self.targets_file = workdir / "targets.json"
        self.config_file = workdir / "prometheus.yml"
        self.tsdb = workdir / "tsdb"
        self.log_file = workdir / "prometheus.log"
        # A new server starts with no samples: a TSDB left by a previous run in this workdir would
        # answer this run's queries with old pods' series (the sandbox's lock on its directory makes
        # sure no running Prometheus owns it). A stop() then start() keeps it: that is an outage.
        shutil.rmtree(self.tsdb, ignore_errors=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.set_targets([])
        interval = f"{int(scrape_interval_s * 1000)}ms"
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [
                {
                    "job_name": "neuronserve",
                    "scrape_timeout": f"{int(scrape_interval_s * 900)}ms",
                    "file_sd_configs": [{"files": [str(self.targets_file)], "refresh_interval": interval}],
                }
            ],
        }
        self.config_file.write_text(yaml.safe_dump(config))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def set_targets(self, groups: Sequence[TargetGroup]) -> None:
        """Replace the scrape targets (atomically: Prometheus never reads a half-written file)."""
        doc = [{"targets": list(g.targets), "labels": dict(g.labels)} for g in groups]
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, sort_keys=True))
        os.replace(tmp, self.targets_file)

    def targets(self) -> list[TargetGroup]:
        doc = json.loads(self.targets_file.read_text())
        return [TargetGroup(tuple(g["targets"]), g["labels"]) for g in doc]

    def start(self, timeout: float = 30.0) -> None:
        """Start (or restart) the process and wait until it answers /-/ready."""
        if self.running:
            return
        self.tsdb.mkdir(exist_ok=True)
        with self.log_file.open("ab") as log:
            # Forked so that it dies with this process, even from a worker thread (sandbox.children).
            self.proc = popen(
                [
                    self.binary,
                    f"--config.file={self.config_file}",
                    f"--storage.tsdb.path={self.tsdb}",
                    "--storage.tsdb.retention.time=1h",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while not self._ready():
            if not self.running:
                raise PrometheusUnavailable(f"prometheus exited at start-up:\n{self.log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise PrometheusUnavailable(f"prometheus not ready after {timeout}s:\n{self.log()}")
            time.sleep(0.1)  # polling /-/ready of a starting process

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 10 s); the TSDB stays for a restart."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")[-4000:] if self.log_file.exists() else ""

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=5) as response:
            doc = json.loads(response.read())
        if doc.get("status") != "success":
            raise RuntimeError(f"prometheus API {path}: {doc}")
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def active_targets(self) -> list[dict[str, Any]]:
        targets: list[dict[str, Any]] = self.api("targets", state="active")["activeTargets"]
        return targets


def pod_targets(store: Store, servers: ServerProcesses) -> list[TargetGroup]:
    """The served pods as the chart's PodMonitor would select and label them (sorted by pod)."""
    groups = []
    for pod in store.iter(store.resource("", "pods")):
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        endpoint = servers.endpoint(meta["uid"])
        if endpoint is None or LABEL_DEPLOYMENT not in labels or labels.get(LABEL_ROLE) not in SCRAPED_ROLES:
            continue
        groups.append(
            TargetGroup(
                (f"{endpoint[0]}:{endpoint[1]}",),
                {
                    "namespace": meta["namespace"],
                    "deployment": labels[LABEL_DEPLOYMENT],
                    "role": labels[LABEL_ROLE],
                    "revision": labels.get(LABEL_REVISION, ""),
                    "pod": meta["name"],
                },
            )
        )
    return sorted(groups, key=lambda g: (g.labels["namespace"], g.labels["pod"]))


class PodTargets:
    """Rewrites the Prometheus file_sd list whenever a pod changes (``await run()``; cancel to stop)."""

    def __init__(self, store: Store, servers: ServerProcesses, prometheus: PrometheusServer) -> None:
        self.store = store
        self.servers = servers
        self.prometheus = prometheus
        self.written: list[TargetGroup] | None = None
        self._wake = asyncio.Event()

    def _on_event(self, event: WatchEvent) -> None:
        if event.resource == ("", "pods"):
            self._wake.set()

    def refresh(self) -> None:
        groups = pod_targets(self.store, self.servers)
        if groups != self.written:
            self.prometheus.set_targets(groups)
            self.written = groups

    async def run(self) -> None:
        self.store.listeners.append(self._on_event)
        try:
            while True:
                self._wake.clear()
                self.refresh()
                # Also every second: a process that died changes no pod until the kubelet notices.
                await wait_event(self._wake, 1.0)
        finally:
            self.store.listeners.remove(self._on_event)


__all__ = [
    "PodTargets",
    "PrometheusServer",
    "PrometheusUnavailable",
    "TargetGroup",
    "find_binary",
    "pod_targets",
]
