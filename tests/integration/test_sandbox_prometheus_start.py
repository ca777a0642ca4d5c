"""The sandbox's Prometheus process at start-up (``sandbox.prometheus.PrometheusServer.start``): one
that exits is reported as having exited, with its log, not as a server that never became ready."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuronfleet.sandbox.prometheus import PrometheusServer, PrometheusUnavailable


def test_a_prometheus_that_exits_at_start_up_is_reported_with_its_log(
    prometheus_bin: str, tmp_path: Path, held_port: int
) -> None:
    server = PrometheusServer(prometheus_bin, tmp_path / "prometheus", port=held_port)
    with pytest.raises(PrometheusUnavailable, match="prometheus exited at start-up") as refused:
        server.start(timeout=120)
    assert "address already in use" in str(refused.value)
    assert not server.running
