"""Warnings found in the status on a takeover are announced again, once (review r13, finding 2).

A reconcile writes its status, then posts the Events of that change. An operator killed in between
(SIGKILL, OOM, its node lost) leaves a status whose change nobody announced, and the next one reads
it as "already so": a Degraded deployment that users alerting on Warning Events never hear of. So an
operator's first reconcile of an object (a fresh memory: a start, a restart, a new leader) posts
again the Warnings the status it finds already shows, saying they were found on takeover. Normal
Events are not repeated (a lost "Scaled" is the price of not re-announcing every restart).
"""

from __future__ import annotations

from typing import Any

from neuronfleet.planning.observation import StatusMemory
from neuronfleet.planning.reasons import Reason
from neuronfleet.planning.reconcile_plan import FOUND_ON_TAKEOVER, status_events

REFUSED = "spec.scaling.metrics.utilization: Prometheus refused the query: 1:42: parse error: unclosed left brace"


def condition(kind: str, status: str, reason: str, message: str = "why") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def status(*conditions: dict[str, Any], desired: int = 2, **extra: Any) -> dict[str, Any]:
    return {"desiredReplicas": desired, "conditions": list(conditions), **extra}


def said(events: list[Any]) -> list[tuple[str, str, str]]:
    return [(e.type, e.reason.value, e.message) for e in events]


DEGRADED = condition("Degraded", "True", "CrashLoopBackOff", "1 pod crash-looping: model-abc")
HOLDING = condition("ScalingActive", "False", "MetricsUnavailable", "Prometheus unreachable; holding 2")


def test_a_degraded_status_found_on_takeover_is_warned_of_again_once_saying_so() -> None:
    found = status(DEGRADED)
    events = status_events(StatusMemory.from_status(found), status(DEGRADED), "", takeover=True)
    assert said(events) == [
        ("Warning", "CrashLoopBackOff", f"{FOUND_ON_TAKEOVER}: 1 pod crash-looping: model-abc"),
    ]
    # The same reconcile's successors (no takeover) say nothing of a condition that did not change.
    assert status_events(StatusMemory.from_status(found), status(DEGRADED), "") == []


def test_every_condition_whose_change_posts_a_warning_is_warned_of_again_on_takeover() -> None:
    url = condition("ScalingActive", "False", "PrometheusUrlNotAllowed", "http://x:9090 is not allowed")
    query = condition("ScalingActive", "False", "PrometheusQueryNotAllowed", "spec.scaling.metrics.queueDepth")
    read = condition("ScalingActive", "True", "MetricsRead", f"3 replicas for the queue; {REFUSED}")
    for found, reason in (
        (HOLDING, "MetricsUnavailable"),
        (url, "PrometheusUrlNotAllowed"),
        (query, "PrometheusQueryNotAllowed"),
        (read, "MetricsQueryRefused"),
    ):
        events = status_events(StatusMemory.from_status(status(found)), status(found), "", takeover=True)
        assert [(e.type, e.reason.value) for e in events] == [("Warning", reason)], found
        assert events[0].message.startswith(f"{FOUND_ON_TAKEOVER}: "), events[0].message
        assert status_events(StatusMemory.from_status(status(found)), status(found), "") == []


def test_normal_events_are_not_announced_again_on_takeover() -> None:
    healthy = status(
        condition("Degraded", "False", "AsExpected"),
        condition("ScalingActive", "True", "MetricsRead", "2 replicas for the queue"),
        condition("Compiled", "True", "Compiled"),
        ignoredReplicas=5,
    )
    assert status_events(StatusMemory.from_status(healthy), healthy, "manual", takeover=True) == []


def test_a_warning_the_takeovers_own_change_posts_is_not_posted_twice() -> None:
    # Degraded's reason changes at the takeover: its own Warning, not one more "found on takeover".
    other = condition("Degraded", "True", "ReconcileError", "503 Service Unavailable")
    events = status_events(StatusMemory.from_status(status(DEGRADED)), status(other), "", takeover=True)
    assert said(events) == [("Warning", "ReconcileError", "503 Service Unavailable")]
    # A query refused besides the one found: one MetricsQueryRefused, as without the takeover.
    both = condition(
        "ScalingActive",
        "True",
        "MetricsRead",
        f"3 replicas; {REFUSED}; spec.scaling.metrics.queueDepth: Prometheus refused the query: bad",
    )
    one = condition("ScalingActive", "True", "MetricsRead", f"3 replicas; {REFUSED}")
    events = status_events(StatusMemory.from_status(status(one)), status(both), "", takeover=True)
    assert [e.reason for e in events] == [Reason.METRICS_QUERY_REFUSED]
    assert not events[0].message.startswith(FOUND_ON_TAKEOVER)


def test_a_warning_found_that_the_takeover_clears_is_said_recovered_not_warned_of_again() -> None:
    events = status_events(
        StatusMemory.from_status(status(DEGRADED, HOLDING)),
        status(
            condition("Degraded", "False", "AsExpected"),
            condition("ScalingActive", "True", "MetricsRead", "2 replicas for the queue"),
        ),
        "",
        takeover=True,
    )
    assert [(e.type, e.reason) for e in events] == [
        ("Normal", Reason.RECOVERED),
        ("Normal", Reason.METRICS_RECOVERED),
    ]
