"""Crash the operator at random points of its flows and restart it: it must always converge.

20 rounds, each: change the spec (scale, warm pool, a new artifact revision), let the operator run
for a random (seeded) moment, kill its tasks wherever they are, wait a random moment, start a
fresh operator (empty memory) and wait for convergence. After each round: exactly the desired pods,
all of the current revision, every pod owned by the live object, the Service there.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from operator_harness import OperatorHarness, example, ready

from neuronfleet.api.v1alpha1 import GROUP

NS = "chaos"
ROUNDS = 20


def _spec(harness: OperatorHarness, replicas: int, warm: int, tag: str) -> dict[str, Any]:
    manifest = harness.localize(
        example(
            "bert-embeddings",
            scaling={"mode": "Manual", "replicas": replicas, "minReplicas": 0},
            warmPool={"mode": "Fixed", "pods": warm, "nodePlaceholders": 0},
        ),
        namespace=NS,
    )
    manifest["spec"]["compile"]["extraArgs"] = [f"--tag={tag}"]
    return manifest


async def test_operator_converges_after_crashes_at_random_points(harness: OperatorHarness) -> None:
    rng = random.Random(20261130)
    replicas, warm, tag = 2, 1, "r0"
    manifest = _spec(harness, replicas, warm, tag)
    revision = harness.precompile(manifest, label=tag)
    created = await harness.apply(manifest)
    name, uid = manifest["metadata"]["name"], created["metadata"]["uid"]

    for round_no in range(1, ROUNDS + 1):
        change = rng.choice(["scale", "warm", "revision", "scale+revision"])
        if "scale" in change:
            replicas = rng.randint(1, 5)
        if change == "warm":
            warm = rng.randint(0, 2)
        if "revision" in change:
            tag = f"r{round_no}"
            revision = harness.precompile(_spec(harness, replicas, warm, tag), label=tag)
        await harness.patch_spec(
            NS,
            name,
            {
                "scaling": {"replicas": replicas},
                "warmPool": {"pods": warm},
                "compile": {"extraArgs": [f"--tag={tag}"]},
            },
        )
        await asyncio.sleep(rng.uniform(0.0, 6.0))
        await harness.crash()
        await asyncio.sleep(rng.uniform(0.0, 3.0))
        await harness.start()

        def converged(want_active: int = replicas, want_warm: int = warm, want_rev: str = revision) -> bool:
            pods = harness.pods(NS, name)
            by_role = {
                role: [p for p in pods if p["metadata"]["labels"][f"{GROUP}/role"] == role]
                for role in ("active", "warm", "draining")
            }
            return (
                len(by_role["active"]) == want_active
                and len(by_role["warm"]) == want_warm
                and not by_role["draining"]
                and all(ready(p) for p in pods)
                and {p["metadata"]["labels"][f"{GROUP}/revision"] for p in pods} <= {want_rev}
            )

        await harness.wait(converged, timeout=300, what=f"round {round_no} ({change}) converged")
        everything = [
            p
            for p in harness.cluster.list("pods", NS)
            if (p["metadata"].get("labels") or {}).get(f"{GROUP}/deployment")
        ]
        live = [p for p in everything if not p["metadata"].get("deletionTimestamp")]
        assert len(live) == replicas + warm, f"round {round_no}: {len(live)} pods for {replicas}+{warm}"
        for pod in everything:
            owners = pod["metadata"].get("ownerReferences") or []
            assert [o["uid"] for o in owners] == [uid], (
                f"round {round_no}: orphan or foreign pod {pod['metadata']['name']}"
            )
        assert harness.cluster.get("services", name, NS) is not None
        status = harness.deployment(NS, name)["status"]
        assert status["artifact"]["revision"] == revision
