"""Cold-start measurement: pod/node objects -> phases -> rolling p50/p90 -> status and warm pool."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from neuronfleet.api.v1alpha1 import InferenceDeployment, InferenceDeploymentStatus, WarmPoolSpec
from neuronfleet.kube.builders import build_pod
from neuronfleet.kube.coldstart import parse_time, pod_timeline, pod_timelines, startup_budget
from neuronfleet.planning import coldstart, warmpool
from neuronfleet.planning.coldstart import ColdStartState, PodTimeline
from neuronfleet.planning.labels import ArtifactRevision, FleetRevision
from neuronfleet.planning.placement import plan_for_spec
from neuronfleet.sim.profiles import load_profile

T0 = datetime(2026, 1, 1, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]


def stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, created: float, ready: float | None, itype: str = "inf2.xlarge") -> dict[str, Any]:
    conditions = [] if ready is None else [{"type": "Ready", "status": "True", "lastTransitionTime": stamp(ready)}]
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": stamp(created),
            "labels": {"node.kubernetes.io/instance-type": itype},
        },
        "status": {"conditions": conditions},
    }


def pod(
    uid: str,
    created: float,
    scheduled: float | None,
    started: float | None,
    ready: float | None,
    node_name: str = "n1",
    role: str = "active",
    restarts: int = 0,
) -> dict[str, Any]:
    conditions = []
    if scheduled is not None:
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(scheduled)})
    conditions.append(
        {"type": "Ready", "status": "True" if ready is not None else "False", "lastTransitionTime": stamp(ready or 0)}
    )
    state = {"running": {"startedAt": stamp(started)}} if started is not None else {"waiting": {"reason": "x"}}
    return {
        "metadata": {
            "name": f"pod-{uid}",
            "uid": uid,
            "creationTimestamp": stamp(created),
            "labels": {"serving.neuronfleet.dev/role": role} if role else {},
        },
        "spec": {"nodeName": node_name},
        "status": {"conditions": conditions, "containerStatuses": [{"restartCount": restarts, "state": state}]},
    }


NODES = [node("n1", -1000, -990), node("fresh", 5, 65)]


def test_phases_of_a_pod_on_an_existing_node() -> None:
    (timeline,) = pod_timelines([pod("a", 0, 2, 32, 80)], NODES)
    sample = coldstart.measure(timeline)
    assert sample is not None
    assert (sample.scheduling, sample.start, sample.load, sample.pod, sample.node) == (2, 30, 48, 80, None)
    assert timeline.instance_type == "inf2.xlarge"


def test_a_pod_that_waited_for_a_new_node_reports_the_provisioning_time() -> None:
    # Pod created at 0, node created at 5 and Ready at 65, pod scheduled at 66, ready at 150.
    (timeline,) = pod_timelines([pod("a", 0, 66, 100, 150, node_name="fresh")], NODES)
    sample = coldstart.measure(timeline)
    assert sample is not None
    assert sample.node == 65
    assert sample.pod == 85  # node Ready -> pod Ready: the pod's own cold start
    assert sample.scheduling == 66


def test_incomplete_restarted_placeholder_and_compile_pods_are_not_measured() -> None:
    pods = [
        pod("starting", 0, 2, None, None),
        pod("not-ready", 0, 2, 30, None),
        pod("restarted", 0, 2, 30, 70, restarts=1),
        pod("placeholder", 0, 2, 3, 4, role="placeholder"),
        pod("compile-job-pod", 0, 2, 3, 4, role=""),
    ]
    timelines = pod_timelines(pods, NODES)
    assert [t.uid for t in timelines] == ["starting", "not-ready", "restarted"]
    assert [coldstart.measure(t) for t in timelines] == [None, None, None]


def test_malformed_timestamps_are_ignored_not_raised() -> None:
    broken = pod("a", 0, 2, 30, 70)
    broken["metadata"]["creationTimestamp"] = "yesterday"
    broken["status"]["conditions"] = "garbage"
    timeline = pod_timeline(broken, {})
    assert timeline is not None and timeline.created is None and timeline.ready is None
    assert coldstart.measure(timeline) is None
    assert parse_time(None) is None and parse_time("2026-01-01T00:00:00.5Z") == T0.timestamp() + 0.5


def test_a_node_created_after_the_binding_is_not_a_wait_for_a_node() -> None:
    # The node's creationTimestamp is after the pod was scheduled onto it: inconsistent clocks.
    sample = coldstart.measure(PodTimeline("a", "t", 0, 0, 5, 10, node_created=4000, node_ready=4000))
    assert sample is not None and sample.node is None and sample.pod == 10


def test_a_node_created_in_the_second_of_the_binding_is_a_wait_for_it() -> None:
    # Timestamps have whole seconds: a node that registered, turned Ready and took the pod within one
    # second shows the binding's second as its creation. Consistent, so the pod waited for it.
    sample = coldstart.measure(PodTimeline("a", "t", 0, 60, 70, 100, node_created=60, node_ready=60))
    assert sample is not None and (sample.pod, sample.node) == (40, 60)


def test_a_pod_that_waited_for_a_node_already_launching_is_not_charged_the_launch() -> None:
    # Review r5: a node Karpenter launched at 5 (for a placeholder or an earlier pod) turns Ready at
    # 300; pods created at 10, while it is on its way, are bound at 301, run at 331, Ready at 361.
    # Counted as a wait only for a node created after the pod, their pod phase was 351 s: the whole
    # launch, which sized the warm pool for it and made status.coldStart.pod lie.
    nodes = [node("n1", 5, 300)]
    timelines = pod_timelines([pod(f"p{i}", 10, 301, 331, 361) for i in range(3)], nodes)
    state = coldstart.observe(ColdStartState(), timelines)
    samples = state.for_type("inf2.xlarge")
    assert [(s.pod, s.node) for s in samples] == [(61, None)] * 3
    assert coldstart.for_warm_pool(state, "inf2.xlarge") == warmpool.ColdStart(pod_seconds=61, node_seconds=None)
    # Created once the node had registered, they waited for the rest of its start only: no node
    # sample (as before). A pod created before the node registered gives one.
    (before,) = pod_timelines([pod("b", 0, 301, 331, 361)], nodes)
    sample = coldstart.measure(before)
    assert sample is not None and (sample.pod, sample.node) == (61, 300)


def test_a_later_not_ready_flap_of_the_node_is_not_its_ready_time() -> None:
    # Review r5: the node's Ready time is its Ready condition's lastTransitionTime, which a flap
    # hours later (a kubelet restart) moves. A restarted operator measuring the pods again read the
    # flap as the node's start-up: clamped to the pod's Ready time, pod 0 s and node the whole start.
    # A pod is bound only to a Ready node: a Ready time after the binding is a later flap, and the
    # node was up by the binding.
    flapped = [node("n1", 5, 20000)]
    timelines = pod_timelines([pod(f"p{i}", 1, 301, 331, 361) for i in range(3)], flapped)
    state = coldstart.observe(ColdStartState(), timelines, now=21000)
    assert [(s.pod, s.node) for s in state.for_type("inf2.xlarge")] == [(60, 300)] * 3
    # NotReady at the moment (the flap under way): its Ready time unknown, the binding bounds it too.
    down = node("n1", 5, None)
    down["status"]["conditions"] = [{"type": "Ready", "status": "False", "lastTransitionTime": stamp(20000)}]
    (timeline,) = pod_timelines([pod("d", 1, 301, 331, 361)], [down])
    sample = coldstart.measure(timeline)
    assert sample is not None and (sample.pod, sample.node) == (60, 300)
    # A node Ready long before the pod: no wait, whatever happened to it later, unless the later
    # stamp hides when it came up (then the pod's scheduling is taken as that wait: seconds on a node
    # with room, where the other guess charges a whole launch to a pod that waited for one).
    (steady,) = pod_timelines([pod("s", 100, 102, 130, 160)], [node("n1", -1000, -990)])
    assert (s := coldstart.measure(steady)) is not None and (s.pod, s.node) == (60, None)
    (hidden,) = pod_timelines([pod("h", 100, 102, 130, 160)], [node("n1", -1000, 20000)])
    assert (s := coldstart.measure(hidden)) is not None and (s.pod, s.node) == (58, None)


def test_out_of_order_stamps_are_not_a_cold_start() -> None:
    assert coldstart.measure(PodTimeline("a", "t", created=10, scheduled=5, started=20, ready=30)) is None


def test_each_pod_is_measured_once_and_gone_pods_are_forgotten() -> None:
    timelines = pod_timelines([pod("a", 0, 2, 32, 80), pod("b", 0, 1, 11, 40)], NODES)
    state = coldstart.observe(ColdStartState(), timelines)
    again = coldstart.observe(state, timelines)
    assert again == state
    assert len(state.for_type("inf2.xlarge")) == 2
    later = coldstart.observe(state, timelines[:1])
    assert later.measured == frozenset({"a"})
    assert len(later.for_type("inf2.xlarge")) == 2  # samples outlive their pods


def test_status_reports_percentiles_in_the_api_shape() -> None:
    timelines = [PodTimeline(str(i), "inf2.xlarge", 0, 1, 1 + i, 10 + 2 * i) for i in range(10)]
    state = coldstart.observe(ColdStartState(), timelines)
    wire = coldstart.status(state, "inf2.xlarge").to_wire()
    parsed = InferenceDeploymentStatus.model_validate({"coldStart": wire}).cold_start
    assert parsed is not None
    assert parsed.instance_type == "inf2.xlarge"
    assert parsed.pod.samples == 10
    assert parsed.pod.p50_seconds == pytest.approx(19.0)
    assert parsed.pod.p90_seconds == pytest.approx(26.2)
    assert parsed.load.p50_seconds == pytest.approx(13.5)  # 9 + i
    assert parsed.node.samples == 0 and parsed.node.p90_seconds is None
    assert coldstart.status(state, "inf2.48xlarge").pod.samples == 0
    assert coldstart.status(state, None).to_wire() == {
        "scheduling": {"samples": 0},
        "start": {"samples": 0},
        "load": {"samples": 0},
        "pod": {"samples": 0},
        "node": {"samples": 0},
    }


def test_warm_pool_gets_p90s_only_with_enough_samples() -> None:
    two = coldstart.observe(ColdStartState(), [PodTimeline(str(i), "t", 0, 1, 2, 100) for i in range(2)])
    assert coldstart.for_warm_pool(two, "t") == warmpool.ColdStart(None, None)
    waited = [PodTimeline(f"n{i}", "t", 0, 70, 80, 150, node_created=1, node_ready=60 + i) for i in range(3)]
    state = coldstart.observe(two, waited)
    measured = coldstart.for_warm_pool(state, "t")
    assert measured.node_seconds == pytest.approx(61.8)
    assert measured.pod_seconds is not None and 88 < measured.pod_seconds <= 100
    assert coldstart.for_warm_pool(state, None) == warmpool.ColdStart()


def test_one_slow_start_among_few_does_not_size_the_warm_pool() -> None:
    # Three 4-minute cold starts and one 26-minute image pull: numpy's p90 of 4 samples (1169 s) is
    # nearly that outlier, and sized the Auto warm pool to maxPods for as long as it was kept.
    def start(uid: str, at: float, pull: float) -> PodTimeline:
        return PodTimeline(uid, "t", at, at + 5, at + 5 + pull, at + 65 + pull)

    normal = [start(f"p{i}", i * 600.0, 180) for i in range(3)]
    state = coldstart.observe(ColdStartState(), [*normal, start("slow", 2000.0, 1500)])
    assert coldstart.for_warm_pool(state, "t").pod_seconds == pytest.approx(245)
    spec = WarmPoolSpec(mode="Auto")
    history = warmpool.WarmPoolState(tuple((120.0 * i, min(4 + i, 20)) for i in range(30)))
    robust = warmpool.plan(spec, history, 20, 3600.0, coldstart.for_warm_pool(state, "t"), active=20, max_active=40)
    outlier = warmpool.ColdStart(pod_seconds=1169.0)
    assert robust.pods < warmpool.plan(spec, history, 20, 3600.0, outlier, active=20, max_active=40).pods
    # A slow mode seen twice is no outlier (pods that pull the image beside pods on nodes that have it).
    twice = coldstart.observe(state, [start("slow2", 2600.0, 1500)])
    assert coldstart.for_warm_pool(twice, "t").pod_seconds == pytest.approx(
        float(np.quantile([245] * 3 + [1565] * 2, 0.9))
    )
    # Only the outlier goes: the p90 of the others, distinct ones too.
    assert coldstart.estimate([250, 200, 1565, 240]) == pytest.approx(float(np.quantile([200, 240, 250], 0.9)))
    # Ten samples or more: the plain p90, which one sample above the rest hardly moves.
    many = [start(f"q{i}", i * 60.0, 180) for i in range(12)]
    assert coldstart.estimate([s.pod for s in coldstart.observe(ColdStartState(), many).for_type("t")] + [1565]) == 245


def test_the_simulators_cold_starts_estimate_as_their_plain_p90() -> None:
    # The estimate leaves a lone outlier out, and nothing else: the simulator's pod cold starts
    # (scheduling, image pull, init, load, warm-up drawn from its profiles' distributions) have
    # none, so every estimate from 3 samples on is numpy's p90, as the simulator computes it.
    for name in ("bert-base", "llama-2-7b"):
        phases = [load_profile(name).cold_start.dist(p) for p in ("scheduling", "pull", "init", "load", "warmup")]
        for seed in range(20):
            rng = np.random.default_rng(seed)
            starts = [sum(d.sample(rng) for d in phases) for _ in range(15)]
            for n in range(3, 16):
                assert coldstart.estimate(starts[:n]) == pytest.approx(float(np.quantile(starts[:n], 0.9)))


def test_samples_expire_after_a_day() -> None:
    day = coldstart.MAX_SAMPLE_AGE_SECONDS
    old = [PodTimeline(f"o{i}", "t", 0, 1, 2, 1000) for i in range(3)]
    state = coldstart.observe(ColdStartState(), old)
    assert len(state.for_type("t")) == 3
    assert coldstart.observe(state, old, now=1000 + day - 1) == state
    gone = coldstart.observe(state, old, now=1000 + day + 1)
    assert gone.samples == () and coldstart.for_warm_pool(gone, "t").pod_seconds is None
    # Exactly a day old is expired, as for the figures a takeover carries over
    # (tests/unit/test_coldstart_carried_age.py): the same sample is not kept by one and dropped by the other.
    assert coldstart.observe(state, old, now=1000 + day).samples == ()
    carried = coldstart.take_over(coldstart.status(state, "t"), 1500)
    assert coldstart.for_warm_pool(coldstart.observe(carried, [], now=1000 + day - 1), "t").pod_seconds is not None
    assert coldstart.for_warm_pool(coldstart.observe(carried, [], now=1000 + day), "t").pod_seconds is None
    # Without a clock, a day before the newest sample.
    fresh = [PodTimeline(f"f{i}", "t", day + 500, day + 501, day + 502, day + 1100) for i in range(3)]
    newer = coldstart.observe(state, fresh)
    assert {s.uid for s in newer.for_type("t")} == {"f0", "f1", "f2"}


def test_a_pod_seen_failing_to_pull_its_image_is_no_cold_start() -> None:
    # ErrImagePull / ImagePullBackOff are no container restarts: once the pull succeeds the pod
    # looks like one slow start. Seen failing once, it is never measured.
    failing = pod("a", 0, 2, None, None)
    failing["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "ImagePullBackOff"}}
    (timeline,) = pod_timelines([failing], NODES)
    assert timeline.start_failed
    state = coldstart.observe(ColdStartState(), [timeline])
    assert state.failed == frozenset({"a"})
    started = pod_timelines([pod("a", 0, 2, 1500, 1560), pod("b", 0, 2, 30, 90)], NODES)
    assert not any(t.start_failed for t in started)
    later = coldstart.observe(state, started)
    assert [s.uid for s in later.for_type("inf2.xlarge")] == ["b"]
    assert coldstart.observe(later, started[1:]).failed == frozenset()  # forgotten once the pod is gone


def test_measured_cold_starts_change_the_auto_warm_pool() -> None:
    spec = WarmPoolSpec.model_validate(
        {"mode": "Auto", "maxPods": 10, "assumedPodColdStartSeconds": 30, "coldStartTargetSeconds": 5}
    )
    history = warmpool.WarmPoolState(tuple((float(t), t // 20) for t in range(0, 600, 10)))
    slow = coldstart.observe(ColdStartState(), [PodTimeline(str(i), "t", 0, 1, 2, 300) for i in range(5)])
    assumed = warmpool.plan(spec, history, 30, 600.0, coldstart.for_warm_pool(ColdStartState(), "t"))
    measured = warmpool.plan(spec, history, 30, 600.0, coldstart.for_warm_pool(slow, "t"))
    assert measured.pods > assumed.pods
    assert "pod cold start 300s" in measured.reason


def _assert_phases_add_up(sample: coldstart.ColdStartSample) -> None:
    """Pod and node phases split the start: a node sample and the pod's phase make it whole; without
    one the pod's phase is all of it, or (a pod that waited for part of a node's launch) the part from
    the node's Ready, at most the scheduling shorter."""
    total = sample.scheduling + sample.start + sample.load
    if sample.node is not None:
        assert sample.pod + sample.node == pytest.approx(total, abs=1e-6)
    else:
        assert sample.start + sample.load - 1e-6 <= sample.pod <= total + 1e-6


timeline_strategy = st.builds(
    lambda uid, itype, created, d1, d2, d3, node_offset: PodTimeline(
        uid=uid,
        instance_type=itype,
        created=created,
        scheduled=created + d1,
        started=created + d1 + d2,
        ready=created + d1 + d2 + d3,
        node_created=None if node_offset is None else created + node_offset,
        node_ready=None if node_offset is None else created + node_offset + 30,
    ),
    st.text("abcdef", min_size=1, max_size=3),
    st.sampled_from(["inf2.xlarge", "inf2.8xlarge"]),
    st.floats(0, 1e6),
    st.floats(0, 600),
    st.floats(0, 600),
    st.floats(0, 600),
    st.none() | st.floats(-100, 100),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(timeline_strategy, max_size=40), st.integers(1, 8))
def test_properties_of_the_rolling_window(timelines: list[PodTimeline], bound: int) -> None:
    state = coldstart.observe(ColdStartState(), timelines, max_samples=bound)
    # Idempotent, and bounded per instance type.
    assert coldstart.observe(state, timelines, max_samples=bound) == state
    for itype, samples in state.samples:
        assert 0 < len(samples) <= bound
        report = coldstart.status(state, itype)
        for name in coldstart.PHASES:
            stats = getattr(report, name)
            assert stats.samples <= len(samples)
            if stats.samples:
                assert stats.p50_seconds is not None and stats.p90_seconds is not None
                assert 0 <= stats.p50_seconds <= stats.p90_seconds + 1e-9
        for sample in samples:
            assert min(sample.scheduling, sample.start, sample.load, sample.pod) >= 0
            _assert_phases_add_up(sample)
    # Every pod measured belongs to one of the timelines given.
    assert state.measured <= {t.uid for t in timelines}


def built_pod(uid: str, created: float, scheduled: float, started: float, ready: float) -> dict[str, Any]:
    """A serving pod as the operator builds it (its probes included), with the stamps given."""
    dep = InferenceDeployment.model_validate(yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text()))
    dep.metadata.uid = "0f6c3f5e-1111-2222-3333-444455556666"
    candidate = plan_for_spec(dep.spec, 1).chosen
    assert candidate is not None
    obj = build_pod(dep, candidate, FleetRevision(ArtifactRevision("r", "s3://a/r/"), "t"), "active", f"pod-{uid}")
    stamps = pod(uid, created, scheduled, started, ready)
    obj["metadata"].update(uid=uid, creationTimestamp=stamps["metadata"]["creationTimestamp"])
    obj["spec"]["nodeName"] = "n1"
    obj["status"] = stamps["status"]
    return obj


def test_a_readiness_flip_hours_after_the_start_is_no_cold_start() -> None:
    # A pod up for hours goes unready for a while (a failed readiness probe, a slow dependency) and
    # turns Ready again: its Ready condition's lastTransitionTime is then the flip, hours after its
    # container started. Measured as it was, it sized the warm pool for a cold start of hours.
    budget = 1800 + 5  # the operator's startup probe (180 x 10 s) and one readiness period (5 s)
    normal = [built_pod(f"p{i}", 0, 2, 30, 90 + i) for i in range(3)]
    flipped = [built_pod(f"f{i}", 0, 2, 30, 3 * 3600 + i) for i in range(2)]
    at_budget, past_budget = built_pod("edge", 0, 2, 30, 30 + budget), built_pod("late", 0, 2, 30, 31 + budget)
    timelines = pod_timelines([*normal, *flipped, at_budget, past_budget], NODES)
    assert {t.startup_budget for t in timelines} == {budget}
    state = coldstart.observe(ColdStartState(), timelines)
    assert sorted(s.uid for s in state.for_type("inf2.xlarge")) == ["edge", "p0", "p1", "p2"]
    assert [(r.name, r.uid) for r in state.rejections] == [("pod-f0", "f0"), ("pod-f1", "f1"), ("pod-late", "late")]
    assert "beyond its startup budget 1805s" in state.rejections[0].reason
    load_p90 = coldstart.status(state, "inf2.xlarge").load.p90_seconds
    assert load_p90 is not None and load_p90 < budget
    # Reported once while the pod exists, not at every reconcile.
    assert coldstart.observe(state, timelines).rejections == ()
    # A restarted operator (its memory is empty) sees the flipped pods for the first time: still no
    # sample of hours, and the warm pool sizes for the starts the pods made.
    restarted = coldstart.observe(ColdStartState(), timelines[:5])
    assert coldstart.for_warm_pool(restarted, "inf2.xlarge").pod_seconds == pytest.approx(91.8)
    assert len(restarted.rejections) == 2


def test_the_startup_budget_comes_from_the_probes_with_kubernetes_defaults() -> None:
    def with_probes(**container: Any) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": "server", **container}, {"name": "no-probes"}]}}

    assert startup_budget(with_probes(startupProbe={"periodSeconds": 10, "failureThreshold": 30})) == 300
    # Left out: initialDelaySeconds 0, failureThreshold 3, periodSeconds 10 (readiness: 10).
    assert startup_budget(with_probes(startupProbe={}, readinessProbe={})) == 40
    assert startup_budget(with_probes(startupProbe={"initialDelaySeconds": 60, "periodSeconds": 5})) == 75
    # The readiness probe's own delay counts from the container's start, and it needs
    # successThreshold passes: a pod Ready 305 s after its start was refused on a 70 s budget.
    slow_ready = {"initialDelaySeconds": 300, "periodSeconds": 10}
    assert startup_budget(with_probes(startupProbe={"periodSeconds": 20}, readinessProbe=slow_ready)) == 310
    thrice = {"periodSeconds": 60, "successThreshold": 3}
    assert startup_budget(with_probes(startupProbe={"periodSeconds": 20}, readinessProbe=thrice)) == 240
    # Zero periods and thresholds are the API server's defaults (a budget of 0 refused every start).
    zeros = {"periodSeconds": 0, "failureThreshold": 0}
    assert startup_budget(with_probes(startupProbe=zeros, readinessProbe={"successThreshold": 0})) == 40
    # A readiness probe alone bounds nothing: the documented cap applies.
    assert startup_budget(with_probes(readinessProbe={"periodSeconds": 5})) is None
    assert startup_budget(with_probes(startupProbe={"failureThreshold": "many"})) is None
    assert startup_budget({"spec": {"containers": [{"name": "no-probes"}]}}) is None
    cap = coldstart.MAX_STARTUP_SECONDS
    assert coldstart.measure(PodTimeline("a", "t", 0, 1, 10, 10 + cap)) is not None
    assert coldstart.measure(PodTimeline("a", "t", 0, 1, 10, 11 + cap)) is None
    assert coldstart.measure(PodTimeline("a", "t", 0, 1, 10, 400, startup_budget=300)) is None


def _with_sidecar(obj: dict[str, Any], sidecar: dict[str, Any], sidecar_started: float) -> dict[str, Any]:
    """``obj`` with a native sidecar (an init container with restartPolicy Always), as a mesh injects
    one, and its status: started at ``sidecar_started``, before the main container."""
    obj = copy.deepcopy(obj)
    obj["spec"]["initContainers"] = [{"name": "proxy", "image": "proxy", "restartPolicy": "Always", **sidecar}]
    obj["status"]["initContainerStatuses"] = [
        {"name": "proxy", "restartCount": 0, "state": {"running": {"startedAt": stamp(sidecar_started)}}}
    ]
    return obj


def test_a_native_sidecars_start_is_before_the_budgets_window_and_its_readiness_is_in_it() -> None:
    # The kubelet starts the main container only once each sidecar has started (its startupProbe
    # passed): a mesh proxy's 60 s start falls in the start phase, before the container start that
    # the budget counts from, and is measured as part of the cold start, not refused.
    proxy_start = {"startupProbe": {"periodSeconds": 1, "failureThreshold": 60}}
    meshed = _with_sidecar(built_pod("m", 0, 2, 64, 124), proxy_start, 3)
    assert startup_budget(meshed) == 1805  # the server's own, as without the proxy
    (sample,) = coldstart.observe(ColdStartState(), pod_timelines([meshed], NODES)).for_type("inf2.xlarge")
    assert (sample.start, sample.load) == (62, 60)

    # Its readiness probe, though, runs on beside the main container, and the pod is Ready only once
    # it passes: a delay of 120 s from the proxy's start, then a period. Regression: the budget was
    # the server's alone (40 s here), and this first start, Ready 125 s after the server started, was
    # refused as a readiness flip.
    server = {"startupProbe": {"periodSeconds": 10, "failureThreshold": 3}, "readinessProbe": {}}
    slow_ready = {**proxy_start, "readinessProbe": {"initialDelaySeconds": 120, "periodSeconds": 10}}
    plain = {"spec": {"containers": [{"name": "server", **server}]}, "status": {}}
    assert startup_budget(plain) == 40
    assert startup_budget(_with_sidecar(plain, slow_ready, 0)) == 130
    late = built_pod("late", 0, 2, 10, 135)
    late["spec"]["containers"][0].update(server)
    late = _with_sidecar(late, slow_ready, 5)
    timelines = pod_timelines([late], NODES)
    assert timelines[0].startup_budget == 130
    assert [s.uid for s in coldstart.observe(ColdStartState(), timelines).for_type("inf2.xlarge")] == ["late"]
    # A sidecar's readiness probe without a startup probe bounds nothing, as a main container's.
    assert startup_budget(_with_sidecar(plain, {"readinessProbe": {}}, 0)) is None
    # Nor does one with a field the API server would not take: the budget is not known.
    unreadable = {**proxy_start, "readinessProbe": {"periodSeconds": "ten"}}
    assert startup_budget(_with_sidecar(plain, unreadable, 0)) is None
    # A sidecar with no readiness probe is ready once started, before the main container starts;
    # plain init containers (no restartPolicy) run to completion before it: neither adds to the budget.
    assert startup_budget(_with_sidecar(plain, proxy_start, 0)) == 40
    init = {**plain, "spec": {**plain["spec"], "initContainers": [{"name": "fetch", "image": "fetch"}]}}
    assert startup_budget(init) == 40


def test_stamps_a_second_out_of_order_from_skewed_clocks_are_measured() -> None:
    # The kubelet's clock 1 s behind the API server's: a container started within the second its pod
    # was scheduled (the image on the node) reads a second before it. Refused, the pods that start
    # fastest were never measured and the estimate leaned to the slow ones.
    (timeline,) = pod_timelines([pod("a", 0, 10, 9, 60)], NODES)
    sample = coldstart.measure(timeline)
    assert sample is not None
    assert (sample.scheduling, sample.start, sample.load, sample.pod) == (10, 0, 50, 60)
    # Ready read before the container started (the kubelet's own clock cannot, the node's can) and
    # a scheduling before the creation: taken as simultaneous within the tolerance.
    sample = coldstart.measure(PodTimeline("b", "t", created=100, scheduled=98, started=110, ready=108))
    assert sample is not None and (sample.scheduling, sample.start, sample.load, sample.pod) == (0, 10, 0, 10)
    # Beyond it, the stamps describe no start, and the pod is reported.
    late = PodTimeline("c", "t", created=0, scheduled=10, started=10 - coldstart.CLOCK_SKEW_SECONDS - 1, ready=60)
    assert coldstart.measure(late) is None
    assert coldstart.rejection(late) == "started 4s before the stamp it follows"
    assert [r.uid for r in coldstart.observe(ColdStartState(), [late]).rejections] == ["c"]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(timeline_strategy, min_size=1, max_size=20),
    st.lists(st.floats(-1.5, 1.5), min_size=4, max_size=4),
)
def test_skew_within_the_tolerance_loses_no_sample(timelines: list[PodTimeline], skew: list[float]) -> None:
    # Each stamp off by up to 1.5 s: two of them at most 3 s out of order. All created at 0, so
    # that none has expired.
    def shifted(t: PodTimeline, by: float) -> float:
        return 0.0 if t.created is None else by - t.created

    skewed = [
        replace(
            t,
            uid=f"{i}",
            created=shifted(t, t.created or 0) + skew[0],
            scheduled=shifted(t, t.scheduled or 0) + skew[1],
            started=shifted(t, t.started or 0) + skew[2],
            ready=shifted(t, t.ready or 0) + skew[3],
            node_created=None if t.node_created is None else shifted(t, t.node_created),
            node_ready=None if t.node_ready is None else shifted(t, t.node_ready),
        )
        for i, t in enumerate(timelines)
    ]
    state = coldstart.observe(ColdStartState(), skewed, max_samples=100)
    assert state.rejections == ()
    assert sum(len(samples) for _, samples in state.samples) == len(skewed)
    for _, samples in state.samples:
        for sample in samples:
            assert min(sample.scheduling, sample.start, sample.load, sample.pod) >= 0
            _assert_phases_add_up(sample)


# ------------------------------------------------------------------------- an operator restart

#: An LLM-sized start: 20 s scheduling, 480 s pull, 300 s load: 800 s.
RESTART_TYPE = "inf2.xlarge"
RESTART_T0 = 1_800_000_000.0


def llm_start(i: int, created: float, load: float = 300.0) -> PodTimeline:
    return PodTimeline(f"u{i}", RESTART_TYPE, created, created + 20, created + 500, created + 500 + load)


def _twelve_hours() -> tuple[ColdStartState, list[PodTimeline], float]:
    """One operator process over 12 hours: 12 pods came and went, 2 serve now (made 6 h ago)."""
    state = ColdStartState()
    for i in range(12):
        gone = llm_start(i, RESTART_T0 + i * 3600)
        assert gone.ready is not None
        state = coldstart.observe(state, [gone], now=gone.ready + 1)
    present = [llm_start(100, RESTART_T0 + 6 * 3600), llm_start(101, RESTART_T0 + 6 * 3600 + 60)]
    now = RESTART_T0 + 12 * 3600
    return coldstart.observe(state, present, now=now), present, now


def test_a_restarted_operator_sizes_the_warm_pool_from_the_cold_start_in_the_status() -> None:
    """The reviewer's repro (r13): the samples of pods since gone lived only in the process; a
    restarted operator measured the 2 pods present, fell back to the assumed 300 s, and the Auto pool
    shrank from 3 warm pods to 1 while status.coldStart still said p90 800 s (14 samples)."""
    before, present, now = _twelve_hours()
    written = coldstart.status(before, RESTART_TYPE)
    assert (written.pod.p90_seconds, written.pod.samples) == (800.0, 14)

    after = coldstart.observe(coldstart.take_over(written, now + 30), present, now=now + 30)
    assert coldstart.for_warm_pool(after, RESTART_TYPE) == coldstart.for_warm_pool(before, RESTART_TYPE)
    # The status keeps the figures it carried (a second restart carries them again), not 2 samples.
    assert coldstart.status(after, RESTART_TYPE) == written
    again = coldstart.observe(
        coldstart.take_over(coldstart.status(after, RESTART_TYPE), now + 60), present, now=now + 60
    )
    assert coldstart.for_warm_pool(again, RESTART_TYPE).pod_seconds == 800.0

    spec = WarmPoolSpec(mode="Auto")
    history, t = warmpool.WarmPoolState(), now - 7200
    while t < now:  # a fleet that grows by one replica every 5 minutes, 4..9, a decision every 15 s
        demand = 4 + int((t - (now - 7200)) // 300) % 6
        history = warmpool.plan(
            spec, history, demand, t, coldstart.for_warm_pool(before, RESTART_TYPE), demand, 40
        ).new_state
        t += 15
    stayed = warmpool.plan(spec, history, 6, now, coldstart.for_warm_pool(before, RESTART_TYPE), 6, 40, sample=False)
    restarted = warmpool.plan(spec, history, 6, now, coldstart.for_warm_pool(after, RESTART_TYPE), 6, 40, sample=False)
    assert stayed.pods == 3
    assert restarted.pods == stayed.pods
    assert "pod cold start 800s" in restarted.reason


def test_the_cold_start_carried_over_gives_way_to_enough_samples_of_its_own() -> None:
    """Carried until the samples measured since are as many as the status counted, at most
    ROBUST_SAMPLES; for its instance type only; never below MIN_SAMPLES; at most a sample's age."""
    before, _, now = _twelve_hours()
    carried = coldstart.take_over(coldstart.status(before, RESTART_TYPE), now)
    # Pods that start faster since (a smaller image): 9 measured are not yet enough, 10 are.
    faster = [llm_start(200 + i, now + i * 60, load=100.0) for i in range(coldstart.ROBUST_SAMPLES)]
    nine = coldstart.observe(carried, faster[:9], now=now + 3600)
    assert coldstart.for_warm_pool(nine, RESTART_TYPE).pod_seconds == 800.0
    assert coldstart.status(nine, RESTART_TYPE).pod.samples == 14
    ten = coldstart.observe(nine, faster, now=now + 3600)
    assert coldstart.for_warm_pool(ten, RESTART_TYPE).pod_seconds == 600.0
    assert coldstart.status(ten, RESTART_TYPE).pod.samples == 10
    # Another instance type's figures say nothing of this one's.
    assert coldstart.for_warm_pool(carried, "inf2.8xlarge").pod_seconds is None
    assert coldstart.status(carried, "inf2.8xlarge").pod.samples == 0
    # A status that counted 4 gives way to 4 measured since.
    four = coldstart.take_over(coldstart.status(coldstart.observe(ColdStartState(), faster[:4]), RESTART_TYPE), now)
    slower = [llm_start(300 + i, now + i * 60, load=700.0) for i in range(4)]
    assert coldstart.for_warm_pool(coldstart.observe(four, slower[:3], now=now), RESTART_TYPE).pod_seconds == 600.0
    assert coldstart.for_warm_pool(coldstart.observe(four, slower, now=now), RESTART_TYPE).pod_seconds == 1200.0
    # Fewer than MIN_SAMPLES in the status: the assumed value applies, as it did before the restart.
    two = coldstart.take_over(coldstart.status(coldstart.observe(ColdStartState(), faster[:2]), RESTART_TYPE), now)
    assert coldstart.for_warm_pool(two, RESTART_TYPE).pod_seconds is None
    # Dropped once the samples it stands for have all expired: a day after the newest (not after the
    # takeover, which restarts in a row would push back forever).
    newest = coldstart.status(before, RESTART_TYPE).pod.last_sample_time
    assert newest is not None
    late = datetime.fromisoformat(newest).timestamp() + coldstart.MAX_SAMPLE_AGE_SECONDS
    assert late < now + coldstart.MAX_SAMPLE_AGE_SECONDS
    assert coldstart.for_warm_pool(coldstart.observe(carried, [], now=late - 1), RESTART_TYPE).pod_seconds == 800.0
    assert coldstart.for_warm_pool(coldstart.observe(carried, [], now=late), RESTART_TYPE).pod_seconds is None
    # Nothing carried from a status without the section, or with no instance type.
    assert coldstart.take_over(None, now) == ColdStartState()
    assert coldstart.take_over(coldstart.status(before, None), now) == ColdStartState()
