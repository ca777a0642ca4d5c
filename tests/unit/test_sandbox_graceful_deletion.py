"""The sandbox API server's second DELETE of a pod already terminating, as apiserver's BeforeDelete
answers it: only an explicit, shorter grace period changes the deletion, counted from when the
first was asked and never into the past; anything else leaves the deletion as it is."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest

from neuronfleet.sandbox.clock import Clock
from neuronfleet.sandbox.store import Store


def _running_pod_store(clock: Clock, grace_spec: int = 30) -> Store:
    clock.bind(asyncio.get_running_loop())
    store = Store(clock)
    store.graceful_pods = True  # as the kubelet sets it: a running pod's deletion waits for it
    pod = {
        "metadata": {"name": "p", "finalizers": ["example.com/keep"]},
        "spec": {
            "containers": [{"name": "c", "image": "i"}],
            "nodeName": "node-1",
            "terminationGracePeriodSeconds": grace_spec,
        },
    }
    store.create(store.resource("", "pods"), "default", pod)
    return store


def _deletion(store: Store) -> tuple[datetime, int]:
    meta = store.get(store.resource("", "pods"), "default", "p")["metadata"]
    return datetime.fromisoformat(meta["deletionTimestamp"]), meta["deletionGracePeriodSeconds"]


def _delete(store: Store, grace: int | None = None) -> dict[str, Any]:
    return store.delete(store.resource("", "pods"), "default", "p", grace_period=grace)


@pytest.mark.looptime
async def test_a_shorter_grace_counts_from_the_first_request() -> None:
    clock = Clock()
    store = _running_pod_store(clock)
    asked = clock.wall()
    _delete(store, 60)
    assert _deletion(store) == (asked.replace(microsecond=0) + timedelta(seconds=60), 60)
    await asyncio.sleep(10)
    _delete(store, 20)  # 20 s from the first request, not from now
    assert _deletion(store) == (asked.replace(microsecond=0) + timedelta(seconds=20), 20)


@pytest.mark.looptime
async def test_a_longer_equal_or_unstated_grace_changes_nothing() -> None:
    clock = Clock()
    store = _running_pod_store(clock, grace_spec=30)
    _delete(store, 60)
    first = _deletion(store)
    await asyncio.sleep(5)
    for grace in (90, 60, None):  # None: the spec's 30 s would be shorter, but only a stated grace counts
        _delete(store, grace)
        assert _deletion(store) == first


@pytest.mark.looptime
async def test_a_shorter_grace_already_past_ends_now_with_one_second() -> None:
    clock = Clock()
    store = _running_pod_store(clock)
    _delete(store, 60)
    await asyncio.sleep(45)
    _delete(store, 10)  # 10 s after the request was 35 s ago: at once, still gracefully (1 s)
    assert _deletion(store) == (clock.wall().replace(microsecond=0), 1)
    _delete(store, 0)
    now = clock.wall().replace(microsecond=0)
    assert _deletion(store) == (now, 0)  # its finalizer holds it
    await asyncio.sleep(5)
    _delete(store, 30)  # a deletion at 0 s is not made graceful again
    assert _deletion(store) == (now, 0)
