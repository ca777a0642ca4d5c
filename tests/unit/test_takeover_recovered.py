"""No false Recovered on a takeover while an apply-time refusal persists (review r16, finding 1).

An operator that takes an object over (a restart, a hand-over) does not remember what the last
apply met (pods refused at admission: a ResourceQuota, a missing PriorityClass; API errors), so its
first status write says Degraded False; its apply meets the refusal again and says it True. The
first write's Events are posted before the apply (a kill in a long apply must not lose them), so a
Recovered was posted, then a Warning again: alerting that resolves on Recovered flapped at every
restart. A takeover's first write now holds its Recovered back until the status after the apply
confirms it; the Warning found is announced again once (as any found on takeover is).
"""

from __future__ import annotations

from typing import Any

from neuronfleet.planning.observation import StatusMemory
from neuronfleet.planning.reconcile_plan import (
    FOUND_ON_TAKEOVER,
    after_apply_events,
    first_write_events,
    first_write_status,
)

QUOTA = "pods refused: exceeded quota: neuron, requested: aws.amazon.com/neuroncore=1, limited: 0"


def condition(kind: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def status(degraded: dict[str, Any], desired: int = 2) -> dict[str, Any]:
    return {"desiredReplicas": desired, "conditions": [degraded]}


REFUSED = condition("Degraded", "True", "PodCreationRefused", QUOTA)
HEALTHY = condition("Degraded", "False", "AsExpected")


def said(events: list[Any]) -> list[tuple[str, str]]:
    return [(e.type, e.reason.value) for e in events]


def test_a_refusal_that_persists_across_a_takeover_is_not_said_recovered() -> None:
    found = StatusMemory.from_status(status(REFUSED))
    first, final = status(HEALTHY), status(REFUSED)
    early = first_write_events(found, first, "", None, takeover=True)
    late = after_apply_events(found, first, final, "", takeover=True)
    assert said(early + late) == [("Warning", "PodCreationRefused")]
    assert late[0].message == f"{FOUND_ON_TAKEOVER}: {QUOTA}"


def test_a_refusal_gone_at_the_takeover_is_said_recovered_once_after_the_apply() -> None:
    found = StatusMemory.from_status(status(REFUSED))
    first = status(HEALTHY)
    assert first_write_events(found, first, "", None, takeover=True) == []
    late = after_apply_events(found, first, status(HEALTHY), "", takeover=True)
    assert said(late) == [("Normal", "Recovered")]
    assert late[0].message == "no longer degraded (was PodCreationRefused)"


def test_a_takeover_whose_apply_meets_another_trouble_warns_of_it_alone() -> None:
    found = StatusMemory.from_status(status(REFUSED))
    other = condition("Degraded", "True", "PriorityClassMissing", "no PriorityClass neuron-standby")
    late = after_apply_events(found, status(HEALTHY), status(other), "", takeover=True)
    assert said(late) == [("Warning", "PriorityClassMissing")]
    assert late[0].message == "no PriorityClass neuron-standby"


def test_the_first_writes_other_events_are_still_posted_before_the_apply() -> None:
    found = StatusMemory.from_status(status(REFUSED, desired=2))
    early = first_write_events(found, status(HEALTHY, desired=3), "queue", None, takeover=True)
    assert said(early) == [("Normal", "Scaled")]


def test_without_a_takeover_a_recovery_is_said_with_the_first_write() -> None:
    # The last apply's refusals are remembered: the first write's Degraded False is the plan's own.
    before = StatusMemory.from_status(status(REFUSED))
    assert said(first_write_events(before, status(HEALTHY), "", None)) == [("Normal", "Recovered")]
    assert after_apply_events(before, status(HEALTHY), status(HEALTHY), "") == []
    # ...and a trouble the apply meets afterwards is a new one, warned of.
    assert said(after_apply_events(before, status(HEALTHY), status(REFUSED), "")) == [("Warning", "PodCreationRefused")]


def test_a_takeovers_first_write_keeps_the_degraded_it_found_until_the_apply_outcome() -> None:
    # Review r18, finding 1: written False first, an outcome left unwritten (a stop in the apply) left
    # Degraded False with its Recovered unsaid, and the next operator, reading False, never said it.
    found = StatusMemory.from_status(status(REFUSED))
    planned = {"desiredReplicas": 3, "conditions": [condition("Ready", "True", "AsExpected"), HEALTHY]}
    sent = first_write_status(found, planned, takeover=True)
    assert sent["conditions"] == [condition("Ready", "True", "AsExpected"), REFUSED]
    assert sent["desiredReplicas"] == 3
    # The successor takes it over as this one did: the Recovered is held and said after its apply.
    again = StatusMemory.from_status(sent)
    assert first_write_events(again, planned, "", None, takeover=True) == []
    assert said(after_apply_events(again, planned, planned, "", takeover=True)) == [("Normal", "Recovered")]


def test_the_first_write_is_the_plans_own_off_a_takeover_or_when_the_trouble_stands() -> None:
    found = StatusMemory.from_status(status(REFUSED))
    assert first_write_status(found, status(HEALTHY)) == status(HEALTHY)
    other = condition("Degraded", "True", "PriorityClassMissing", "no PriorityClass neuron-standby")
    assert first_write_status(found, status(other), takeover=True) == status(other)
    healthy = StatusMemory.from_status(status(HEALTHY))
    assert first_write_status(healthy, status(HEALTHY, desired=3), takeover=True) == status(HEALTHY, desired=3)
