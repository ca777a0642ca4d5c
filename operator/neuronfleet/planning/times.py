"""Times as the status writes them (pure): RFC 3339 in UTC, whole seconds, as Kubernetes does.

Its own module so that the planning modules below :mod:`.status` (the fleet plan, the warm pool)
can write a time into a message without importing the status builder, which imports them.
"""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(moment: datetime) -> str:
    """A UTC timestamp as Kubernetes writes it (seconds, ``Z``)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_seconds(value: object) -> float | None:
    """An RFC 3339 time as Unix seconds (a time without a zone taken as UTC); None if not one."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)).timestamp()
