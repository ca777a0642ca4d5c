"""A sandbox controller whose loop ends with an error is logged at once, by name, with the error:
the cluster goes on without it, and whoever waits on its work would otherwise only time out."""

from __future__ import annotations

import logging

import pytest

from neuronfleet.sandbox import SandboxCluster
from neuronfleet.sandbox.resourcequota import QuotaController


async def test_a_crashed_controller_is_logged_by_name(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def crash(_self: QuotaController) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(QuotaController, "run", crash)
    caplog.set_level(logging.ERROR, logger="neuronfleet.sandbox.cluster")
    async with SandboxCluster(run_kubelet=False) as cluster:

        def logged() -> list[logging.LogRecord]:
            return [r for r in caplog.records if r.name == "neuronfleet.sandbox.cluster"]

        (record,) = await cluster.wait_for(logged, timeout=10, what="the crash logged")
        assert record.getMessage() == "sandbox: sandbox-resource-quota-controller stopped: RuntimeError('boom')"
        assert record.exc_info is not None and record.exc_info[1] is not None
    # A stop cancels the rest, which is no crash.
    assert len([r for r in caplog.records if r.name == "neuronfleet.sandbox.cluster"]) == 1
