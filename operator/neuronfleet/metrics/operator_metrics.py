"""The operator's own metrics (prometheus-client): reconciles, durations, errors, fleet sizes, scalings.

One :class:`OperatorMetrics` per operator process, on its own ``CollectorRegistry`` (not the
global one, so that several in-process operators in tests do not collide). The handlers call
:meth:`OperatorMetrics.record_reconcile` after each reconcile with the object's status as written
(desired vs actual counts come from there, so the metrics say what the status says) and
:func:`serve` starts the HTTP endpoint (prometheus-client's own threaded server) on a port.

``neuronfleet_reconcile_duration_seconds`` (a histogram) is one for the operator, not per object: its
16 series a deployment were half of all (34,000 at a thousand deployments), and nothing reads it per
deployment. The other series are labelled by ``namespace`` and ``name`` of the InferenceDeployment:

- ``neuronfleet_reconciles_total{outcome="ok|error"}``;
- ``neuronfleet_reconcile_errors_total{kind}`` (``kind``: a short class such as ApiException);
- ``neuronfleet_replicas{kind="desired|actual|ready|warm|warm_desired|draining|placeholders"}``, a
  kind whose field the status written does not hold having no series;
- ``neuronfleet_scaling_decisions_total{direction="up|down"}`` when desired active replicas change;
- ``neuronfleet_metrics_available`` (1 when the autoscaler's Prometheus answered with a usable, fresh
  signal, 0 when it holds for want of one, from ScalingActive; no series in Manual mode, which reads
  no signal, so that an alert on 0 means an autoscaler holding);
- ``neuronfleet_degraded{reason}`` (1 while the Degraded condition is True, 0 while False; ``reason``:
  the condition's reason, one of the operator's CamelCase reasons, so one series per object at a time);
- ``neuronfleet_available{reason}`` (1 while the Available condition is True, 0 while False; ``reason``
  as for Degraded: ``AwaitingArtifact`` before a first compiled artifact, so that an alert on missing
  replicas can tell a deployment still compiling from one whose pods do not come up).

``forget`` drops an object's series when it is deleted or its daemon stops (a peering pause), so a
replica exports series only of the objects it reconciles, and none of objects that are gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from neuronfleet.planning.reasons import Reason
from neuronfleet.planning.status import find_condition

Family = Counter | Gauge | Histogram

#: Status fields -> the ``kind`` label of ``neuronfleet_replicas``.
REPLICA_FIELDS = {
    "desiredReplicas": "desired",
    "replicas": "actual",
    "readyReplicas": "ready",
    "warmReplicas": "warm",
    "drainingReplicas": "draining",
    "placeholders": "placeholders",
}
#: Reconciles take milliseconds to seconds (API round trips, an artifact-store lookup).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class OperatorMetrics:
    """The operator's metric families on one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        labels = ("namespace", "name")
        self.reconciles = Counter(
            "neuronfleet_reconciles",
            "Reconciles of InferenceDeployments.",
            (*labels, "outcome"),
            registry=self.registry,
        )
        self.duration = Histogram(
            "neuronfleet_reconcile_duration_seconds",
            "Time one reconcile took (any InferenceDeployment).",
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter(
            "neuronfleet_reconcile_errors", "Reconcile errors by kind.", (*labels, "kind"), registry=self.registry
        )
        self.replicas = Gauge(
            "neuronfleet_replicas", "Replicas wanted and present, by kind.", (*labels, "kind"), registry=self.registry
        )
        self.scaling_decisions = Counter(
            "neuronfleet_scaling_decisions",
            "Changes of the desired active replicas, by direction.",
            (*labels, "direction"),
            registry=self.registry,
        )
        self.metrics_available = Gauge(
            "neuronfleet_metrics_available",
            "1 when the autoscaler had a usable, fresh signal at its last decision (ScalingActive True).",
            labels,
            registry=self.registry,
        )
        self.degraded = Gauge(
            "neuronfleet_degraded",
            "1 while the Degraded condition is True (reason: its reason), 0 while it is False.",
            (*labels, "reason"),
            registry=self.registry,
        )
        self.available = Gauge(
            "neuronfleet_available",
            "1 while the Available condition is True (reason: its reason), 0 while it is False.",
            (*labels, "reason"),
            registry=self.registry,
        )
        self._desired: dict[tuple[str, str], int] = {}
        #: The reason label of each object's series of a condition gauge (neuronfleet_degraded,
        #: neuronfleet_available), so that a new reason replaces the series instead of adding one.
        self._condition_reason: dict[tuple[Gauge, str, str], str] = {}
        #: Label sets used per object, for :meth:`forget` (prometheus-client has no public listing).
        self._series: dict[tuple[str, str], set[tuple[Family, tuple[str, ...]]]] = {}

    def _child(self, family: Family, namespace: str, name: str, *extra: str) -> Any:
        labels = (namespace, name, *extra)
        self._series.setdefault((namespace, name), set()).add((family, labels))
        return family.labels(*labels)

    def _drop(self, family: Family, namespace: str, name: str, *extra: str) -> None:
        labels = (namespace, name, *extra)
        series = self._series.get((namespace, name), set())
        if (family, labels) in series:
            series.discard((family, labels))
            family.remove(*labels)

    def record_reconcile(
        self,
        namespace: str,
        name: str,
        seconds: float,
        status: Mapping[str, Any] | None,
        error_kind: str | None = None,
    ) -> None:
        """One reconcile: its duration and outcome, and the counts in the status it wrote."""
        self._child(self.reconciles, namespace, name, "error" if error_kind else "ok").inc()
        self.duration.observe(max(0.0, seconds))
        if error_kind:
            self._child(self.errors, namespace, name, error_kind).inc()
        if not status:
            return
        counts = {kind: status.get(field) for field, kind in REPLICA_FIELDS.items()}
        counts["warm_desired"] = (status.get("warmPool") or {}).get("desiredPods")
        for kind, value in counts.items():
            if isinstance(value, int | float):
                self._child(self.replicas, namespace, name, kind).set(value)
            else:
                # Gone from the status (warmPool when the warm pool is turned off): a series kept at
                # its last value would say the status still holds it.
                self._drop(self.replicas, namespace, name, kind)
        if scaling := find_condition({"status": status}, "ScalingActive"):
            if scaling.get("reason") == Reason.MANUAL_SCALING:
                self._drop(self.metrics_available, namespace, name)
            else:
                self._child(self.metrics_available, namespace, name).set(1 if scaling.get("status") == "True" else 0)
        self._record_condition(self.degraded, namespace, name, find_condition({"status": status}, "Degraded"))
        self._record_condition(self.available, namespace, name, find_condition({"status": status}, "Available"))
        desired = status.get("desiredReplicas")
        if isinstance(desired, int):
            previous = self._desired.get((namespace, name))
            if previous is not None and desired != previous:
                self._child(self.scaling_decisions, namespace, name, "up" if desired > previous else "down").inc()
            self._desired[(namespace, name)] = desired

    def _record_condition(self, family: Gauge, namespace: str, name: str, condition: Mapping[str, Any]) -> None:
        """A condition as a gauge labelled by its reason: 1 while True, else 0; one series per object.
        An absent condition (empty) leaves the series as they were."""
        if not condition:
            return
        reason = str(condition.get("reason") or "")
        previous_reason = self._condition_reason.get((family, namespace, name))
        if previous_reason is not None and previous_reason != reason:
            self._drop(family, namespace, name, previous_reason)
        self._condition_reason[(family, namespace, name)] = reason
        self._child(family, namespace, name, reason).set(1 if condition.get("status") == "True" else 0)

    def forget(self, namespace: str, name: str) -> None:
        """Drop every series of an object (deleted, or reconciled by a peer now)."""
        self._desired.pop((namespace, name), None)
        for gauge in (self.degraded, self.available):
            self._condition_reason.pop((gauge, namespace, name), None)
        for family, labels in self._series.pop((namespace, name), set()):
            family.remove(*labels)


def serve(metrics: OperatorMetrics, port: int, address: str = "0.0.0.0") -> int:
    """Start the /metrics endpoint in a daemon thread; returns the port (useful with ``port=0``)."""
    server, _thread = start_http_server(port, addr=address, registry=metrics.registry)
    return int(server.server_address[1])


__all__ = ["DURATION_BUCKETS", "REPLICA_FIELDS", "OperatorMetrics", "serve"]
