"""The sandbox kubelet's pure rules: its seeded phase durations (spread evenly around the profile's
figure, within its jitter, and the same for the same pod and seed, so a sandbox run can be
repeated), and the termination message Kubernetes takes from a failed container's log."""

from __future__ import annotations

from neuronfleet.sandbox.clock import Clock
from neuronfleet.sandbox.kubelet import Kubelet, fallback_termination_message
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


def test_the_log_is_the_termination_message_only_of_a_failed_container_that_asks_for_it() -> None:
    fallback = {"name": "c", "terminationMessagePolicy": "FallbackToLogsOnError"}
    logs = [f"line {i}" for i in range(100)]
    assert fallback_termination_message(fallback, logs, 1) == "\n".join(logs[-80:])  # the last 80 lines
    assert fallback_termination_message(fallback, logs, 0) == ""  # it succeeded
    assert fallback_termination_message({"name": "c"}, logs, 1) == ""  # the default policy, File
    long = ["x" * 1000, "y" * 1000, "z" * 1000]
    assert (
        fallback_termination_message(fallback, long, 137)
        == ("x" * 1000 + "\n" + "y" * 1000 + "\n" + "z" * 1000)[-2048:]
    )
