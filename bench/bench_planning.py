"""Benchmark of the pure planning path one reconcile runs per InferenceDeployment.

Per deployment: the pod read-back, then the whole pure plan of a reconcile
(``planning.reconcile_plan.plan_reconcile``: compile decision, autoscaler, warm pool, placement
with all four Inf2 types scored, the pod-template hash (builds a pod and hashes it), the fleet plan,
the status). Measured for a steady fleet (nothing to do) and a rollout (every pod outdated), and
for one reconcile round over 200 deployments. The autoscaler with a full day of history (the
learned scale-down delay's replay, :mod:`neuronfleet.planning.hold`): one decision, one decision
that re-chooses the delay, and the history's size in memory. Its checkpoint in the status
(``status.autoscaler``): the section's size, rendering it (the first time, which packs the
history, and again, as every reconcile until the next checkpoint does) and a restarted operator's
resume from it. An Auto warm pool's decision over a full demand history (the four node horizons it
keeps of decisions every 15 s; the increase quantiles of its two horizons). Writes
``bench/results/planning.json``. Run: ``.venv/bin/python bench/bench_planning.py``.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import write_result
from neuronfleet.api.v1alpha1 import (
    MAX_STATUS_SCALE_EVENTS,
    MAX_STATUS_TREND_READINGS,
    InferenceDeployment,
    ScalingSpec,
    WarmPoolSpec,
)
from neuronfleet.kube.builders import object_for_action, parse_pod, pod_template_hash
from neuronfleet.planning import hold, warmpool
from neuronfleet.planning.compile import CompileObservation, StoredArtifact, compile_request
from neuronfleet.planning.fleet import (
    CreatePlaceholder,
    CreatePod,
    FleetPolicy,
    FleetTarget,
    apply_actions,
    plan_fleet,
)
from neuronfleet.planning.labels import ArtifactRevision
from neuronfleet.planning.observation import DeploymentMemory, Observation, StatusMemory
from neuronfleet.planning.placement import plan_for_spec
from neuronfleet.planning.reconcile_plan import plan_reconcile
from neuronfleet.planning.scaling import Checkpoint, ScalingState, decide, resume
from neuronfleet.planning.signals import MetricSnapshot
from neuronfleet.planning.status import autoscaler_status, checkpoint_from_status

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ACTIVE, WARM, PLACEHOLDERS = 8, 2, 1
DEPLOYMENTS = 200
REPEATS = 7


def deployment(index: int) -> InferenceDeployment:
    return InferenceDeployment.model_validate(
        {
            "metadata": {"name": f"model-{index}", "namespace": "bench", "uid": f"uid-{index}", "generation": 1},
            "spec": {
                "model": {"source": "s3://models/bert/", "neuronCoresPerReplica": 2 if index % 2 else 8},
                "scaling": {"mode": "Manual", "replicas": ACTIVE},
                "warmPool": {"mode": "Fixed", "pods": WARM, "nodePlaceholders": PLACEHOLDERS},
            },
        }
    )


def stored_pods(dep: InferenceDeployment, artifact: ArtifactRevision) -> list[dict[str, Any]]:
    """The pods of a converged fleet, as the API would return them."""
    placement = plan_for_spec(dep.spec, ACTIVE + WARM + PLACEHOLDERS, serving=ACTIVE).chosen
    assert placement is not None
    target = FleetTarget(pod_template_hash(dep, placement), artifact, ACTIVE, WARM, PLACEHOLDERS)
    pods = []
    for action in plan_fleet(dep.name, target, [], NOW).actions:
        assert isinstance(action, CreatePod | CreatePlaceholder)
        pod = object_for_action(dep, placement, action)
        pod["spec"]["nodeName"] = "node-1"
        pod["status"] = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T11:00:00Z"}],
        }
        pods.append(pod)
    return pods


def reconcile(dep: InferenceDeployment, pods: list[dict[str, Any]], artifact: ArtifactRevision) -> int:
    """The pure part of one reconcile (planning.reconcile_plan.plan_reconcile); returns the number of actions."""
    stored = StoredArtifact(artifact.id + "0" * 54, artifact.uri, "0" * 64, "cpu")
    request = compile_request(dep.spec, "/store", "fingerprint")
    observation = Observation(
        NOW,
        pods=tuple(parse_pod(pod, node_names={"node-1"}) for pod in pods),
        compile=CompileObservation(request, stored, job_name="job"),
    )
    plan = plan_reconcile(
        dep, observation, DeploymentMemory(), StatusMemory(), FleetPolicy(), lambda c: pod_template_hash(dep, c)
    )
    return len(plan.actions)


def timed(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    """Median wall seconds of ``fn``."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def day_of_history() -> tuple[ScalingSpec, ScalingState, MetricSnapshot]:
    """A scaling state that has recorded a day of minutes (a daily cycle of 20 to 60 replicas)."""
    spec = ScalingSpec()
    history = hold.History()
    for minute in range(hold.HISTORY_SECONDS // hold.BUCKET_SECONDS):
        need = round(40 + 20 * math.sin(2 * math.pi * minute / 1440))
        history = hold.record(history, minute * 60.0, math.ceil(need / spec.target_utilization), need)
    now = float(hold.HISTORY_SECONDS)
    state = ScalingState(service_rate=100.0, history=history, hold_seconds=600.0, hold_chosen_at=now)
    snapshot = MetricSnapshot(time=now, queue_depth=0, in_flight=0, arrival_rate=4000.0, utilization=0.7)
    return spec, state, snapshot


def size_of(history: hold.History) -> int:
    """Bytes the history holds (its tuples and the ints not shared with Python's small-int cache)."""
    ints = {id(v): v for v in (*history.recommendations, *history.needs)}
    return (
        sys.getsizeof(history)
        + sys.getsizeof(history.recommendations)
        + sys.getsizeof(history.needs)
        + sum(sys.getsizeof(v) for v in ints.values() if not -5 <= v <= 256)
    )


def main() -> None:
    # The manifest digest reconcile() stores: the served revision carries it (pods pin the manifest).
    old = ArtifactRevision("aaaaaaaaaa", "s3://artifacts/old/", "0" * 64)
    new = ArtifactRevision("bbbbbbbbbb", "s3://artifacts/new/", "0" * 64)
    deps = [deployment(i) for i in range(DEPLOYMENTS)]
    fleets = [stored_pods(dep, old) for dep in deps]

    one, one_pods = deps[0], fleets[0]
    steady_actions = reconcile(one, one_pods, old)
    rollout_actions = reconcile(one, one_pods, new)
    assert steady_actions == 0 and rollout_actions > 0

    steady_ms = timed(lambda: reconcile(one, one_pods, old)) * 1e3
    rollout_ms = timed(lambda: reconcile(one, one_pods, new)) * 1e3
    round_s = timed(lambda: [reconcile(d, p, old) for d, p in zip(deps, fleets, strict=True)], 3)
    placement_us = timed(lambda: plan_for_spec(one.spec, ACTIVE + WARM + PLACEHOLDERS, serving=ACTIVE)) * 1e6
    views = [parse_pod(pod) for pod in one_pods]
    target = FleetTarget("x", new, ACTIVE, WARM, PLACEHOLDERS)
    plan_us = timed(lambda: plan_fleet(one.name, target, views, NOW)) * 1e6
    after = apply_actions(views, plan_fleet(one.name, target, views, NOW).actions, NOW)
    replan_actions = len(plan_fleet(one.name, target, after, NOW).actions)

    spec, state, snapshot = day_of_history()
    now = snapshot.time
    decide_us = timed(lambda: decide(spec, state, snapshot, 50, 50, now)) * 1e6
    stale = replace(state, hold_chosen_at=now - hold.REFRESH_SECONDS)
    rechoose_us = timed(lambda: decide(spec, stale, snapshot, 50, 50, now)) * 1e6

    # An Auto pool at a full history: a decision every 15 s, a demand with bursts.
    auto = WarmPoolSpec.model_validate({"mode": "Auto", "maxPods": 50, "maxNodePlaceholders": 50})
    steps = int(warmpool.MAX_HISTORY_SECONDS // 15)
    pool = warmpool.WarmPoolState(tuple((now - 15.0 * (steps - i), 40 + (i * 7) % 23) for i in range(steps)))
    cold = warmpool.ColdStart(pod_seconds=450.0, node_seconds=600.0)
    # What it keeps of them: four node horizons (pod 450 s + node 600 s cold starts), 273 samples.
    kept = len(warmpool.plan(auto, pool, 45, now, cold, 45, 100).new_state.history)
    warm_pool_us = timed(lambda: warmpool.plan(auto, pool, 45, now, cold, 45, 100)) * 1e6

    # The largest section the status keeps: every scale event and trend reading it allows.
    events = tuple(
        (now - 10.0 * (MAX_STATUS_SCALE_EVENTS - i), 1 if i % 2 else -1) for i in range(MAX_STATUS_SCALE_EVENTS)
    )
    readings = tuple(
        (now - 60.0 * (MAX_STATUS_TREND_READINGS - i), 40.0 + 0.37 * i) for i in range(MAX_STATUS_TREND_READINGS)
    )

    def checkpoint_of(history: hold.History) -> Checkpoint:
        return Checkpoint(now, 100.0, 450.0, 600.0, history, scale_events=events, rates=readings)

    def render(checkpoint: Checkpoint) -> dict[str, Any]:
        section = autoscaler_status(checkpoint)
        assert section is not None
        return section.to_wire()

    def resume_from(wire: dict[str, Any]) -> ScalingState:
        kept = checkpoint_from_status(wire)
        assert kept is not None
        return resume(kept, now + 60, 50, 0.8)

    renewed = checkpoint_of(state.history)
    wire = render(renewed)
    round_trip = checkpoint_from_status(wire)
    assert round_trip is not None and round_trip.history == state.history
    # A renewed checkpoint (here with a copy of the history, packed again) is rendered once; the
    # reconciles until the next renewal read that rendering (and dump it, as every status).
    render_first_us = timed(lambda: render(checkpoint_of(replace(state.history)))) * 1e6
    render_again_us = timed(lambda: render(renewed)) * 1e6
    resume_us = timed(lambda: resume_from(wire)) * 1e6

    figures: dict[str, float | int | str | None] = {
        "scaling_decide_day_of_history_us": round(decide_us, 1),
        "scaling_decide_rechoosing_delay_us": round(rechoose_us, 1),
        "scaling_history_day_kib": round(size_of(state.history) / 1024, 1),
        "warm_pool_auto_full_history_us": round(warm_pool_us, 1),
        "warm_pool_auto_history_samples": kept,
        "checkpoint_status_section_kib": round(len(json.dumps(wire)) / 1024, 1),
        "checkpoint_render_first_us": round(render_first_us, 1),
        "checkpoint_render_again_us": round(render_again_us, 1),
        "checkpoint_resume_us": round(resume_us, 1),
        "reconcile_steady_ms": round(steady_ms, 3),
        "reconcile_rollout_ms": round(rollout_ms, 3),
        "round_200_deployments_s": round(round_s, 4),
        "placement_us": round(placement_us, 1),
        "plan_fleet_rollout_us": round(plan_us, 1),
        "replan_actions_after_apply": replan_actions,
    }
    path = write_result(
        "planning",
        {"deployments": DEPLOYMENTS, "active": ACTIVE, "warm": WARM, "placeholders": PLACEHOLDERS, "repeats": REPEATS},
        figures,
    )
    for name, value in figures.items():
        print(f"{name}: {value}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
