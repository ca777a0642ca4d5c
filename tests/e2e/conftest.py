"""End-to-end tests: the real Kopf operator against the sandbox, under looptime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from operator_harness import (  # the chart tests load this module by path and use these names
    FAST_START,
    NEURON_SCHEDULER,
    REPO,
    OperatorHarness,
    e2e_cluster,
    example,
    ready,
)


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[OperatorHarness]:
    """Two inf2.xlarge nodes, a provisioner for more of every Inf2 type, and the operator."""
    async with e2e_cluster() as cluster:
        harness = OperatorHarness(cluster, tmp_path)
        try:
            await harness.start()
            yield harness
        finally:
            await harness.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every e2e test runs under looptime: minutes of kubelet delays and timers in seconds."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.looptime)


__all__ = ["FAST_START", "NEURON_SCHEDULER", "REPO", "OperatorHarness", "example", "harness", "ready"]
