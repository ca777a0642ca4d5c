"""The sandbox's SubprocessRunner, which runs a run-to-completion pod's command as a local process: a
failed process with no termination message gets its log's tail as one under FallbackToLogsOnError,
as the kubelet takes it."""

from __future__ import annotations

import sys
from typing import Any

from neuronfleet.sandbox.runners import SubprocessRunner

SCRIPT = "import sys; print('loading'); print('no space left on device'); sys.exit(int(sys.argv[1]))"


def _pod(exit_code: int) -> dict[str, Any]:
    container = {
        "name": "compile",
        "image": "neuronserve:compile",
        "command": [sys.executable, "-c", SCRIPT, str(exit_code)],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    return {"metadata": {"name": "p"}, "spec": {"containers": [container]}}


async def test_a_failed_process_without_a_message_gets_its_logs_tail_and_a_success_none() -> None:
    failed = await SubprocessRunner()(_pod(3))
    assert failed is not None
    assert (failed.exit_code, failed.message) == (3, "loading\nno space left on device")
    succeeded = await SubprocessRunner()(_pod(0))
    assert succeeded is not None
    assert (succeeded.exit_code, succeeded.message) == (0, "")
