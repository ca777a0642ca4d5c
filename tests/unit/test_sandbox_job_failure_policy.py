"""How the sandbox Job controller reads a failed pod against a pod failure policy (the rules of
kubernetes pkg/controller/job/pod_failure_policy.go): rules in order, the first match decides;
``onExitCodes`` for one container or any, init containers included, exit code 0 never matching;
``onPodConditions`` with the status asked (True when unsaid). A pod that matches no rule counts."""

from __future__ import annotations

from typing import Any

from neuronfleet.sandbox.jobs import _outcome


def failed_pod(*exits: tuple[str, int], init: tuple[str, int] | None = None, **conditions: str) -> dict[str, Any]:
    def status(name: str, code: int) -> dict[str, Any]:
        return {"name": name, "state": {"terminated": {"exitCode": code}}}

    return {
        "metadata": {"namespace": "ns", "name": "job-abc"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [status(name, code) for name, code in exits],
            **({"initContainerStatuses": [status(*init)]} if init else {}),
            "conditions": [{"type": kind, "status": value} for kind, value in conditions.items()],
        },
    }


def policy(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"podFailurePolicy": {"rules": list(rules)}}


def on_exit(action: str, operator: str, values: list[int], container: str | None = None) -> dict[str, Any]:
    codes: dict[str, Any] = {"operator": operator, "values": values}
    if container:
        codes["containerName"] = container
    return {"action": action, "onExitCodes": codes}


def test_an_exit_code_0_never_matches_not_even_a_not_in_rule() -> None:
    # The sidecar exited 0 and main 3: "NotIn [3]" matches neither (0 is skipped, 3 is in).
    pod = failed_pod(("sidecar", 0), ("main", 3))
    assert _outcome(pod, policy(on_exit("Ignore", "NotIn", [3]))) == ("failed", "")
    assert _outcome(pod, policy(on_exit("Ignore", "NotIn", [4]))) == ("ignored", "")


def test_a_rule_for_one_container_reads_only_that_container() -> None:
    pod = failed_pod(("sidecar", 42), ("main", 3))
    assert _outcome(pod, policy(on_exit("FailJob", "In", [42], container="main"))) == ("failed", "")
    assert _outcome(pod, policy(on_exit("FailJob", "In", [42], container="sidecar"))) == (
        "fail-job",
        "Container sidecar for pod ns/job-abc failed with exit code 42 matching FailJob rule at index 0",
    )


def test_init_containers_are_read_too() -> None:
    pod = failed_pod(("main", 137), init=("fetch", 5))
    assert _outcome(pod, policy(on_exit("FailJob", "In", [5])))[0] == "fail-job"


def test_the_first_matching_rule_decides() -> None:
    pod = failed_pod(("main", 3), DisruptionTarget="True")
    ignore_disruption = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    count_3 = on_exit("Count", "In", [3])
    assert _outcome(pod, policy(ignore_disruption, count_3)) == ("ignored", "")
    assert _outcome(pod, policy(count_3, ignore_disruption)) == ("failed", "")
    assert _outcome(pod, policy(on_exit("Ignore", "In", [9]), on_exit("FailJob", "In", [3])))[1].endswith(
        "matching FailJob rule at index 1"
    )


def test_a_condition_rule_matches_only_the_status_it_asks() -> None:
    rule = {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "False"}]}
    assert _outcome(failed_pod(("main", 1), DisruptionTarget="True"), policy(rule)) == ("failed", "")
    assert _outcome(failed_pod(("main", 1), DisruptionTarget="False"), policy(rule)) == (
        "fail-job",
        "Pod ns/job-abc has condition DisruptionTarget matching FailJob rule at index 0",
    )


def test_a_succeeded_pod_and_a_pod_deleted_before_it_ended_are_read_without_the_policy() -> None:
    ignore_all = policy(on_exit("Ignore", "NotIn", [0]))
    succeeded = failed_pod(("main", 0))
    succeeded["status"]["phase"] = "Succeeded"
    assert _outcome(succeeded, ignore_all) == ("succeeded", "")
    deleted = failed_pod(("main", 1))
    deleted["status"]["phase"] = "Running"  # counted as deleted: no end for the policy to read
    assert _outcome(deleted, ignore_all) == ("failed", "")
