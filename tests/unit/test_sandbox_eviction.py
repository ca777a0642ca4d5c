"""Which evictions the sandbox refuses, as kube-apiserver's eviction handler decides them: a pod that
is Pending, has ended or is being deleted without a look at its budget; a Running pod that is not
Ready by the budget's unhealthyPodEvictionPolicy; a pod two budgets select never; a budget's empty
selector covering every pod of its namespace (policy/v1)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from neuronfleet.sandbox.clock import Clock
from neuronfleet.sandbox.disruption import check_eviction
from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.store import Store


def _store(pods: dict[str, tuple[str, bool]], *budgets: dict[str, Any]) -> Store:
    """``pods``: name -> (phase, Ready), each labelled app=model; then the budgets' specs."""
    clock = Clock()
    clock.bind(asyncio.get_running_loop())
    store = Store(clock)
    resource = store.resource("", "pods")
    for name, (phase, ready) in pods.items():
        body = {
            "metadata": {"name": name, "labels": {"app": "model"}},
            "spec": {"containers": [{"name": "server", "image": "neuronserve:1"}], "nodeName": "node-1"},
        }
        store.create(resource, "default", body)

        def status(o: dict[str, Any], phase: str = phase, ready: bool = ready) -> None:
            o["status"] = {"phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]}

        store.update(resource, "default", name, status, subresource="status")
    for index, spec in enumerate(budgets):
        store.create(
            store.resource("policy", "poddisruptionbudgets"),
            "default",
            {"metadata": {"name": f"b{index}"}, "spec": spec},
        )
    return store


def _refusal(store: Store, name: str) -> int | None:
    """The status an eviction of ``name`` is refused with; None when it is allowed."""
    try:
        check_eviction(store, store.get(store.resource("", "pods"), "default", name))
    except ApiError as error:
        return error.code
    return None


MODEL = {"matchLabels": {"app": "model"}}


@pytest.mark.looptime
async def test_a_not_ready_pod_goes_when_its_budget_is_healthy_or_its_policy_always_allows_it() -> None:
    healthy = {"a": ("Running", True), "b": ("Running", True), "starting": ("Running", False)}
    assert _refusal(_store(healthy, {"minAvailable": 2, "selector": MODEL}), "starting") is None
    # The budget short of its healthy pods: the not-ready pod is refused as a ready one would be.
    short = {"a": ("Running", True), "starting": ("Running", False)}
    assert _refusal(_store(short, {"minAvailable": 2, "selector": MODEL}), "starting") == 429
    always = {"minAvailable": 2, "selector": MODEL, "unhealthyPodEvictionPolicy": "AlwaysAllow"}
    assert _refusal(_store(short, always), "starting") is None
    # A ready pod of the healthy budget is refused: it would leave one healthy pod of the two.
    assert _refusal(_store(healthy, {"minAvailable": 2, "selector": MODEL}), "a") == 429


@pytest.mark.looptime
async def test_a_pending_or_ended_pod_goes_whatever_its_budget() -> None:
    pods = {"a": ("Running", True), "queued": ("Pending", False), "done": ("Failed", False)}
    store = _store(pods, {"minAvailable": 5, "selector": MODEL})
    assert (_refusal(store, "queued"), _refusal(store, "done"), _refusal(store, "a")) == (None, None, 429)


@pytest.mark.looptime
async def test_a_pod_two_budgets_select_is_refused_and_an_empty_selector_selects_every_pod() -> None:
    pods = {"a": ("Running", True), "b": ("Running", True)}
    assert (
        _refusal(_store(pods, {"maxUnavailable": 1, "selector": MODEL}, {"maxUnavailable": 1, "selector": {}}), "a")
        == 500
    )
    assert _refusal(_store(pods, {"minAvailable": 2, "selector": {}}), "a") == 429
    assert _refusal(_store(pods, {"minAvailable": 2}), "a") is None  # no selector: no pod
