"""Whether a spec's own PromQL may run with the operator's Prometheus credentials (pure).

A spec that names no ``scaling.metrics.prometheusUrl`` is read from the operator's own Prometheus,
with the operator's token, and the values read show in its status. A query of its own (any PromQL
in ``scaling.metrics.utilization`` and the others) would then read whatever that token can: another
namespace's series, any metric. With ``--prometheus-refuse-query-overrides`` (chart
``operator.prometheusRefuseQueryOverrides``) the operator asks such a spec nothing and says why:
:func:`query_override_refusal`. An empty query (a signal turned off) is no override: it asks nothing.
A spec naming its own ``prometheusUrl`` is asked without the operator's credentials, so its queries
are its own business (the allow-list bounds where they go).

A query Prometheus refuses (a typo) costs its own signal only; the metrics reader names its field in
its reason (:func:`refused_query_note`), after everything else it says, and the plan finds those
notes there (:func:`refused_queries`) for ScalingActive's message and its Warning: one format,
written and read here.
"""

from __future__ import annotations

import re

from neuronfleet.api.v1alpha1 import MetricQueries
from neuronfleet.planning.signals import QUERIED

#: The settings that refuse query overrides, as every message names them.
REFUSE_OVERRIDES_SETTING = (
    "--prometheus-refuse-query-overrides (env NEURONFLEET_PROMETHEUS_REFUSE_QUERY_OVERRIDES, "
    "chart operator.prometheusRefuseQueryOverrides)"
)
#: The query fields of scaling.metrics, by attribute name.
QUERY_FIELDS = (*QUERIED, "sample_time")


def overridden_queries(metrics: MetricQueries) -> list[str]:
    """The spec field names (as written in YAML) of the queries that differ from the CRD's
    defaults and are not empty."""
    fields = MetricQueries.model_fields
    return [
        fields[name].alias or name
        for name in QUERY_FIELDS
        if getattr(metrics, name).strip() and getattr(metrics, name) != fields[name].default
    ]


def query_override_refusal(metrics: MetricQueries) -> str | None:
    """None when the operator may run the spec's queries against its own Prometheus; else why not,
    naming the fields and the setting (the queries themselves are not quoted)."""
    if metrics.prometheus_url:
        return None
    overridden = overridden_queries(metrics)
    if not overridden:
        return None
    names = ", ".join(f"spec.scaling.metrics.{name}" for name in overridden)
    verb = "is" if len(overridden) == 1 else "are"
    return (
        f"{names} {verb} not run: the operator asks its own Prometheus with its credentials and runs only the "
        f"default queries there ({REFUSE_OVERRIDES_SETTING}). Remove the override (an empty query turns its "
        "signal off and is allowed), or name a Prometheus of your own in spec.scaling.metrics.prometheusUrl"
    )


#: How the metrics reader's reason names a refused query's field; nothing before the notes holds it.
REFUSED_QUERY_PREFIX = "spec.scaling.metrics."


def refused_query_note(field: str, why: str) -> str:
    """The reader's note that Prometheus refused the query of ``field`` (as written in YAML), and why.
    The reader joins its notes with "; " and puts them last in its reason."""
    return f"{REFUSED_QUERY_PREFIX}{field}: {why}"


def refused_queries(reason: str) -> str:
    """The notes of refused queries in a metrics reader's ``reason`` (its tail from the first note:
    Prometheus' own error text may hold "; " itself); empty when it has none."""
    at = reason.find(REFUSED_QUERY_PREFIX)
    return reason[at:] if at >= 0 else ""


_REFUSED_FIELD = re.compile(re.escape(REFUSED_QUERY_PREFIX) + r"(\w+): ")


def refused_fields(text: str) -> frozenset[str]:
    """The fields whose refusal notes ``text`` holds (a reader's reason, or a ScalingActive message
    that carries its notes, wherever they stand in it)."""
    return frozenset(_REFUSED_FIELD.findall(text))
