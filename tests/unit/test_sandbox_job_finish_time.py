"""When the sandbox Job controller says a pod ended, which its back-off counts from: the rules of
kubernetes pkg/controller/job's getFinishedTime, in their order, read as times (not as text)."""

from __future__ import annotations

import datetime
from typing import Any

from neuronfleet.sandbox.clock import parse_timestamp
from neuronfleet.sandbox.jobs import _finish_time

CREATED = "2026-12-07T10:00:00Z"
#: A deletion asked at 10:06:00 with 30 s of grace.
DELETED = ("2026-12-07T10:06:30Z", 30)


def pod(
    *exits: str | None, ready_false_at: str | None = None, deleted: tuple[str, int | None] | None = None
) -> dict[str, Any]:
    statuses: list[dict[str, Any]] = [
        {"name": f"c{i}", "state": {"terminated": {"finishedAt": at}} if at else {"running": {}}}
        for i, at in enumerate(exits)
    ]
    conditions = [{"type": "Ready", "status": "False", "lastTransitionTime": ready_false_at}] if ready_false_at else []
    meta: dict[str, Any] = {"name": "p", "creationTimestamp": CREATED}
    if deleted is not None:
        meta["deletionTimestamp"] = deleted[0]
        if deleted[1] is not None:
            meta["deletionGracePeriodSeconds"] = deleted[1]
    return {"metadata": meta, "status": {"containerStatuses": statuses, "conditions": conditions}}


def at(timestamp: str) -> datetime.datetime:
    moment = parse_timestamp(timestamp)
    assert moment is not None
    return moment


def test_the_last_container_exit_once_every_container_has_exited() -> None:
    assert _finish_time(pod("2026-12-07T10:05:00Z", "2026-12-07T10:07:00Z")) == at("2026-12-07T10:07:00Z")
    # One still running: the exits say nothing yet, and the deletion does.
    assert _finish_time(pod("2026-12-07T10:05:00Z", None, deleted=DELETED)) == at("2026-12-07T10:06:00Z")


def test_exits_are_ordered_as_times_whatever_their_precision_or_offset() -> None:
    # As text, "10:07:00.5Z" sorts before "10:07:00Z" and "11:06:00+01:00" after both.
    assert _finish_time(pod("2026-12-07T10:07:00.5Z", "2026-12-07T10:07:00Z")) == at("2026-12-07T10:07:00.5Z")
    assert _finish_time(pod("2026-12-07T10:07:00Z", "2026-12-07T11:06:00+01:00")) == at("2026-12-07T10:07:00Z")


def test_then_when_ready_turned_false() -> None:
    assert _finish_time(pod(None, ready_false_at="2026-12-07T10:04:00Z", deleted=DELETED)) == at("2026-12-07T10:04:00Z")


def test_then_when_the_deletion_was_asked_not_when_its_grace_ends() -> None:
    assert _finish_time(pod(None, deleted=("2026-12-07T10:06:30Z", 90))) == at("2026-12-07T10:05:00Z")
    assert _finish_time(pod(None, deleted=("2026-12-07T10:06:30Z", None))) == at("2026-12-07T10:06:30Z")  # no grace


def test_else_its_creation() -> None:
    assert _finish_time(pod(None)) == at(CREATED)
    assert _finish_time(pod()) == at(CREATED)  # no container reported yet
    assert _finish_time({"metadata": {"name": "p"}}) is None  # nothing says: no failure time to count from
