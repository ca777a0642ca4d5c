"""The sandbox kubelet's seeded phase durations: spread evenly around the profile's figure, within
its jitter, and the same for the same pod and seed (so a sandbox run can be repeated)."""

from __future__ import annotations

from neuronfleet.sandbox.clock import Clock
from neuronfleet.sandbox.kubelet import Kubelet
from neuronfleet.sandbox.store import Store


def _pod(uid: str) -> dict[str, object]:
    return {"metadata": {"uid": uid}}


def test_durations_spread_on_both_sides_of_the_base_within_the_jitter() -> None:
    kubelet = Kubelet(Store(Clock()), seed=7)
    durations = [kubelet._duration(_pod(f"uid-{i}"), "image-pull", 20.0, 0.25) for i in range(200)]
    assert all(15.0 <= d <= 25.0 for d in durations)
    below = sum(d < 20.0 for d in durations)
    assert 70 <= below <= 130  # about half on each side (a one-sided jitter puts none below)
    assert max(durations) - min(durations) > 8.0  # and across most of the range
    again = Kubelet(Store(Clock()), seed=7)
    assert [again._duration(_pod(f"uid-{i}"), "image-pull", 20.0, 0.25) for i in range(200)] == durations
    assert kubelet._duration(_pod("uid-0"), "image-pull", 20.0, 0.0) == 20.0
