"""Queries an earlier release stored as its defaults are read as today's defaults after an upgrade."""

from __future__ import annotations

import hashlib
import json

import pytest

from neuronfleet.api.default_queries import FORMER_DEFAULTS, ONE_DEPLOYMENT, default_queries
from neuronfleet.api.v1alpha1 import MetricQueries
from neuronfleet.planning.prometheus_queries import overridden_queries, query_override_refusal

TODAY = default_queries(ONE_DEPLOYMENT)
EARLIER = [(field, query) for field, queries in FORMER_DEFAULTS.items() for query in queries]


def wire(field: str) -> str:
    return MetricQueries.model_fields[field].alias or field


@pytest.mark.parametrize(("field", "query"), EARLIER)
def test_an_earlier_default_is_read_as_todays(field: str, query: str) -> None:
    assert query != TODAY[field]
    stored = MetricQueries.model_validate({wire(field): query})
    assert getattr(stored, field) == TODAY[field]
    assert overridden_queries(stored) == [] and query_override_refusal(stored) is None


def test_an_object_made_under_the_first_release_has_no_override() -> None:
    first = MetricQueries.model_validate({wire(field): queries[0] for field, queries in FORMER_DEFAULTS.items()})
    assert first == MetricQueries()


def test_a_query_that_only_resembles_an_earlier_default_is_the_users() -> None:
    field, query = EARLIER[0]
    own = query.replace("[1m]", "[2m]") if "[1m]" in query else f"({query})"
    stored = MetricQueries.model_validate({wire(field): own})
    assert getattr(stored, field) == own and overridden_queries(stored) == [wire(field)]


def test_a_changed_default_keeps_its_old_text_as_a_former_default() -> None:
    # Objects made before a change keep the old default text (the API server stored it). If this
    # fails, a default changed: add the text it had to FORMER_DEFAULTS, then put the new digest here.
    digest = hashlib.sha256(json.dumps(TODAY, sort_keys=True).encode()).hexdigest()
    assert digest == "b2d0f4d6870e5257da7fe11ffd5b1d6d6329045320f72b2f8e5a0847a858d50d"
