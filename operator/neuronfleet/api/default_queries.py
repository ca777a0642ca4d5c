"""The CRD's default PromQL, built in two forms from the same pieces (pure text, no I/O).

- :data:`ONE_DEPLOYMENT`: one InferenceDeployment's queries, ``$namespace`` and ``$name`` to be
  replaced (the ``scaling.metrics`` defaults, against which a deployment's queries are compared);
- :data:`FLEET`: the same queries for every deployment at once, one row per ``(namespace,
  deployment)``, which the operator asks once per Prometheus and shares among the deployments, each
  taking its row of the queries it leaves at their default.

Both come from :func:`default_queries`, so a change to a default changes both: within one
deployment's series, keeping ``deployment`` in every ``by``/``on`` list changes nothing, and the
fleet form's row for a deployment is the number the one-deployment form answers.

:data:`FORMER_DEFAULTS` keeps every earlier release's default text, which objects made then still
hold, so that :func:`current_default` can read them as today's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QueryScope:
    """Which deployments' series a default query reads, and which labels its aggregations keep."""

    #: Label matchers of the deployments' series (without the role).
    selector: str
    #: Labels kept besides ``namespace`` and ``pod`` in the per-pod step (empty: one deployment).
    pod_labels: tuple[str, ...]
    #: Labels the outer aggregation keeps (empty: one number).
    grouped_by: tuple[str, ...]


#: One deployment, named by ``$namespace`` and ``$name``.
ONE_DEPLOYMENT = QueryScope('namespace="$namespace",deployment="$name"', (), ())
#: Every deployment: one series per (namespace, deployment).
FLEET = QueryScope('deployment!=""', ("deployment",), ("namespace", "deployment"))

#: The labels of a fleet-wide answer's rows, in the order of :attr:`QueryScope.grouped_by`.
ROW_LABELS = FLEET.grouped_by

#: The default arrival-rate query's ``rate()`` range, in seconds: it fits the chart's 15 s scrape, and
#: the simulator's Prometheus averages arrivals over the same window.
ARRIVAL_RATE_WINDOW_SECONDS = 60


def promql_range(seconds: int) -> str:
    """``seconds`` as a PromQL range duration, in whole minutes where it is some (``60`` -> ``1m``)."""
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def default_queries(scope: QueryScope) -> dict[str, str]:
    """The default query of every ``scaling.metrics`` signal (by field name, snake_case) and of
    ``sample_time``, for ``scope``."""
    active = f'{scope.selector},role="active"'
    pod = ", ".join(("namespace", *scope.pod_labels, "pod"))

    def per_pod(series: str, *more: str) -> str:
        # One series per pod: the same pod scraped twice (a PodMonitor beside a scrape config, an HA
        # pair without deduplication) must not count twice in a sum.
        return f"max by ({', '.join((pod, *more))}) ({series})"

    # ``and`` this to keep the series of pods that report ready (model loaded and warmed): per-pod
    # gauges of pods still loading must not be averaged in.
    ready = f"on({pod}) {per_pod(f'neuronserve_ready{{{active}}}')} == 1"

    def ready_pods(series: str) -> str:
        return f"{per_pod(series)} and {ready}"

    def total(op: str, vector: str) -> str:
        return f"{op} by ({', '.join(scope.grouped_by)}) ({vector})" if scope.grouped_by else f"{op}({vector})"

    arrivals = f"rate(neuronserve_requests_total{{{scope.selector}}}[{promql_range(ARRIVAL_RATE_WINDOW_SECONDS)}])"
    queued = ready_pods(f"neuronserve_queue_depth{{{active}}}")
    accepted = ready_pods(f"neuronserve_inflight_requests{{{active}}}")
    return {
        "queue_depth": total("sum", queued),
        # neuronserve_inflight_requests counts every request accepted and not answered, queued ones
        # included: the load signal (queued plus in flight) would count the queue twice.
        "in_flight": f"{total('sum', accepted)} - {total('sum', queued)}",
        "arrival_rate": total("sum", per_pod(arrivals, "outcome")),
        "arrival_peak": total("sum", per_pod(f"neuronserve_arrivals_peak_per_second{{{scope.selector}}}")),
        # Ready pods only: an active pod still loading its model reports 0 and halved the average.
        "utilization": total("avg", ready_pods(f"neuronserve_device_busy_ratio{{{active}}}")),
        "reporting": total("count", f"{per_pod(f'neuronserve_ready{{{active}}}')} == 1"),
        "sample_time": total("max", f"timestamp(neuronserve_ready{{{active}}})"),
    }


# The API server stores a schema default in the object when the object is created, so an
# InferenceDeployment made under an earlier release keeps that release's default text after an upgrade.
# Each was superseded for a reason (a pod scraped twice counted twice, a loading pod diluted the
# average, queued requests counted twice in in_flight), and the operator reads its signals with
# today's meaning. Read as overrides, they would also be asked one deployment at a time instead of in
# the fleet-wide read, and refused under --prometheus-refuse-query-overrides. Literal text on purpose:
# these are history (the CRD's defaults at earlier commits, `git log -p` of its YAML), not built
# from today's pieces. Append the old text here whenever a default changes.
_NS_NAME = 'namespace="$namespace",deployment="$name"'
_ACTIVE = f'{_NS_NAME},role="active"'
_READY = f"and on(namespace, pod) neuronserve_ready{{{_ACTIVE}}} == 1"
#: Every earlier default of a ``scaling.metrics`` query (one-deployment form), by field name.
FORMER_DEFAULTS: dict[str, tuple[str, ...]] = {
    "queue_depth": (
        f"sum(neuronserve_queue_depth{{{_ACTIVE}}})",
        f"sum(neuronserve_queue_depth{{{_ACTIVE}}} {_READY})",
    ),
    "in_flight": (
        f"sum(neuronserve_inflight_requests{{{_ACTIVE}}})",
        f"sum(neuronserve_inflight_requests{{{_ACTIVE}}}) - sum(neuronserve_queue_depth{{{_ACTIVE}}})",
        f"sum(neuronserve_inflight_requests{{{_ACTIVE}}} {_READY})"
        f" - sum(neuronserve_queue_depth{{{_ACTIVE}}} {_READY})",
    ),
    "arrival_rate": (f"sum(rate(neuronserve_requests_total{{{_NS_NAME}}}[1m]))",),
    "utilization": (
        f"avg(neuronserve_device_busy_ratio{{{_ACTIVE}}})",
        f"avg(neuronserve_device_busy_ratio{{{_ACTIVE}}} {_READY})",
    ),
    "arrival_peak": (f"sum(neuronserve_arrivals_peak_per_second{{{_NS_NAME}}})",),
}


def current_default(field: str, query: str) -> str:
    """``query``, or today's default of ``field`` when ``query`` is one of its earlier defaults."""
    if query in FORMER_DEFAULTS.get(field, ()):
        return default_queries(ONE_DEPLOYMENT)[field]
    return query
