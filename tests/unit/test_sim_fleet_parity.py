"""The simulator's fleet does what the operator's fleet plan does with the same targets.

The operator's side: :func:`neuronfleet.planning.fleet.plan_fleet` applied with
:func:`neuronfleet.planning.fleet.apply_actions` to pod views, every pod turning ready exactly
``COLD`` seconds after it is created and bound at once. The simulator's side:
:class:`neuronfleet.sim.fleet.Fleet` with a profile whose cold start is exactly ``COLD`` seconds
(one for the node, the rest warm-up) and whose promotion is instant. Both get the same random
sequence of (active, warm) targets, one every ``INTERVAL`` seconds; each second they must hold the
same counts (serving, active, warm, ready warm). A difference lasting a few seconds is timing (a
node the simulator launches takes its second); one lasting longer is a rule written twice.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from neuronfleet.planning.fleet import FleetPolicy, FleetTarget, PodView, Relabel, apply_actions, plan_fleet
from neuronfleet.planning.labels import ArtifactRevision
from neuronfleet.sim.fleet import Fleet
from neuronfleet.sim.profiles import BERT_BASE, Profile

COLD, DRAIN, INTERVAL, START = 40, 5, 15, 2
T0 = datetime(2026, 12, 1, tzinfo=UTC)
ART = ArtifactRevision("rev1", "s3://b/a", "")
PROFILE = Profile.model_validate(
    {
        **BERT_BASE,
        "drain_seconds": DRAIN,
        "promote_seconds": 0,
        "cold_start": {"node": 1, "scheduling": 0, "pull": 0, "init": 0, "load": 0, "warmup": COLD - 1},
    }
)
Counts = tuple[int, int, int, int]


def operator_counts(targets: list[tuple[int, int]], seconds: int) -> list[Counts]:
    pods = {
        f"d-x-{i}": PodView(
            name=f"d-x-{i}",
            role="active",
            revision="rev1",
            template="t",
            phase="Running",
            ready=True,
            created_at=T0,
            ready_at=T0,
            node=f"node-{i}",
        )
        for i in range(START)
    }
    policy = FleetPolicy(min_drain_seconds=DRAIN, drain_grace_seconds=DRAIN)
    target = FleetTarget("t", ART, START, 0)
    out: list[Counts] = []
    for s in range(seconds + 1):
        now = T0 + timedelta(seconds=s)
        for name, pod in list(pods.items()):
            created = pod.created_at or T0
            if pod.role in ("active", "warm") and not pod.ready and created + timedelta(seconds=COLD) <= now:
                pods[name] = replace(pod, ready=True, ready_at=now)
        if s > 0 and s % INTERVAL == 0 and s // INTERVAL < len(targets):
            active, warm = targets[s // INTERVAL]
            target = FleetTarget("t", ART, active, warm)
        for _ in range(5):  # reconciles until the plan has nothing left to do
            plan = plan_fleet("d", target, list(pods.values()), now, policy)
            if not plan.actions:
                break
            after = apply_actions(list(pods.values()), plan.actions, now)
            pods = {p.name: replace(p, node=f"node-{p.name}", phase="Running") if p.node is None else p for p in after}
        live = [p for p in pods.values() if not p.deleting]
        out.append(
            (
                sum(1 for p in live if p.role == "active" and p.ready),
                sum(1 for p in live if p.role == "active"),
                sum(1 for p in live if p.role == "warm"),
                sum(1 for p in live if p.role == "warm" and p.ready),
            )
        )
    return out


def simulator_counts(targets: list[tuple[int, int]], seconds: int) -> list[Counts]:
    fleet = Fleet(PROFILE, np.random.default_rng(0))
    fleet.start_ready(START)
    out: list[Counts] = []
    for s in range(seconds + 1):
        fleet.advance(float(s))
        if s > 0 and s % INTERVAL == 0 and s // INTERVAL < len(targets):
            active, warm = targets[s // INTERVAL]
            fleet.set_targets(float(s), active, warm, 0)
        c = fleet.counts(float(s))
        out.append((c.serving, c.active, c.warm, c.warm_ready))
    return out


def longest_divergence(targets: list[tuple[int, int]]) -> int:
    """The longest run of consecutive seconds in which the two sides' counts differ."""
    seconds = INTERVAL * len(targets) + 2 * COLD
    longest = run = 0
    for ours, theirs in zip(operator_counts(targets, seconds), simulator_counts(targets, seconds), strict=True):
        run = run + 1 if ours != theirs else 0
        longest = max(longest, run)
    return longest


def test_a_scale_down_keeps_a_loading_surplus_as_the_operator_does() -> None:
    # Up to 4 active, then back to 2 with a pool of 1 while the 2 new pods still load: the operator
    # moves a loading one into the pool; it does not delete it and create another.
    assert longest_divergence([(2, 0), (4, 0), (2, 1)]) < 4


def test_no_lasting_divergence_over_random_target_sequences() -> None:
    rng = np.random.default_rng(0)
    lasting = []
    for _ in range(200):
        n = int(rng.integers(2, 8))
        targets = [(int(rng.integers(0, 6)), int(rng.integers(0, 3))) for _ in range(n)]
        if longest_divergence(targets) >= 4:
            lasting.append(targets)
    assert lasting == [], f"{len(lasting)} of 200 sequences diverge for 4 s or more, e.g. {lasting[:3]}"


def test_the_settled_shortcut_skips_only_plans_with_nothing_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fleet skips the plan when it deems it settled (for speed); every such skip must be one
    # where the plan would have done nothing, over random targets with placeholders, on the real
    # profile's cold starts and several replicas per node.
    settled = Fleet._settled
    checked = 0

    def checking(fleet: Fleet, now: float) -> bool:
        nonlocal checked
        answer = settled(fleet, now)
        if answer:
            checked += 1
            plan = fleet.plan(now)
            acting = [a for a in plan.actions if not (isinstance(a, Relabel) and a.role == a.previous_role)]
            assert acting == [], f"settled at t={now} with targets {fleet.targets}, yet the plan does {acting}"
        return answer

    monkeypatch.setattr(Fleet, "_settled", checking)
    profile = Profile.model_validate({**BERT_BASE, "replicas_per_node": 2})
    rng = np.random.default_rng(1)
    for scale_down in ("operator", "replicaset", "ray-serve"):
        for _ in range(20):
            fleet = Fleet(profile, np.random.default_rng(0), scale_down=scale_down)
            fleet.start_ready(int(rng.integers(0, 5)))
            for step in range(12):
                now = 60.0 * step
                fleet.advance(now)
                fleet.set_targets(now, int(rng.integers(0, 7)), int(rng.integers(0, 3)), int(rng.integers(0, 3)))
                for t in np.arange(now, now + 60.0, 5.0):
                    fleet.advance(float(t))
    assert checked > 100
