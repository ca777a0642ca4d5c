"""Which pods the sandbox's Prometheus scrapes: served pods of a deployment in a scraped role, and
only once their server listens (a pod whose server has not started, or has exited, is no target)."""

from __future__ import annotations

from pathlib import Path

from neuronfleet.sandbox.clock import Clock
from neuronfleet.sandbox.prometheus import LABEL_DEPLOYMENT, LABEL_ROLE, pod_targets
from neuronfleet.sandbox.serving import ServerProcesses, ServingOptions
from neuronfleet.sandbox.store import Store


def test_a_pod_whose_server_does_not_listen_is_no_target(tmp_path: Path) -> None:
    store = Store(Clock())
    servers = ServerProcesses(ServingOptions(), {}, tmp_path / "servers")  # none started
    labels = {LABEL_DEPLOYMENT: "bert", LABEL_ROLE: "active"}
    pod = {"metadata": {"name": "bert-0", "labels": labels}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    store.create(store.resource("", "pods"), "default", pod)
    assert pod_targets(store, servers) == []
