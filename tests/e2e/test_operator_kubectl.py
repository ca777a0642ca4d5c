"""What a platform engineer sees with kubectl while the operator runs: printer columns and scale."""

from __future__ import annotations

import asyncio

from operator_harness import OperatorHarness, example, ready

NS = "kubectl"


async def run_kubectl(harness: OperatorHarness, binary: str, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        binary,
        "--kubeconfig",
        str(harness.cluster.kubeconfig_path),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, f"kubectl {' '.join(args)} failed: {err.decode()}"
    return out.decode()


async def test_get_shows_filled_columns_and_scale_changes_active_count(harness: OperatorHarness, kubectl: str) -> None:
    manifest = harness.localize(example("batch-classifier-fixed", scaling={"replicas": 2}), namespace=NS)
    revision = harness.precompile(manifest)
    await harness.apply(manifest)
    name = manifest["metadata"]["name"]
    await harness.wait(lambda: harness.condition(NS, name, "Ready").get("status") == "True", timeout=90, what="Ready")

    table = await run_kubectl(harness, kubectl, "get", "infdep", "-n", NS)
    header, row = table.strip().splitlines()[:2]
    assert header.split() == [
        "NAME",
        "MODEL",
        "INSTANCE",
        "READY",
        "UP-TO-DATE",
        "DESIRED",
        "WARM",
        "COMPILED",
        "STATUS",
        "AGE",
    ]
    cells = row.split()
    assert cells[0] == name and cells[2] == "inf2.xlarge"
    # STATUS is the Ready condition's reason: why the spec is not served yet, or that it is.
    assert cells[3:9] == ["2", "2", "2", "0", "True", "ReplicasReady"], row

    await run_kubectl(harness, kubectl, "scale", f"infdep/{name}", "-n", NS, "--replicas=3")
    await harness.wait(
        lambda: len([p for p in harness.pods(NS, name, "active") if ready(p)]) == 3, timeout=90, what="3 active"
    )
    wide = await run_kubectl(harness, kubectl, "get", "infdep", name, "-n", NS, "-o", "wide")
    assert "manual: replicas 3" in wide
    assert harness.deployment(NS, name)["status"]["artifact"]["revision"] == revision
