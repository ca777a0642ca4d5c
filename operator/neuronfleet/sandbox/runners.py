"""``SubprocessRunner``: a kubelet container runner that runs a pod's command as a local process.

For run-to-completion pods (e.g. the compile Job's) in the sandbox: the first container's
``command`` + ``args`` run on this machine with its ``env`` values (``valueFrom`` is not resolved)
added to the current environment; stdout and stderr become the pod's log, the exit code its
outcome. The container's ``terminationMessagePath`` (``/dev/termination-log`` by default) in the
arguments is replaced by a temporary file whose content becomes ``state.terminated.message``, as a
kubelet reads that file after the container exits. Opt-in only: set ``kubelet.container_runner``.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from neuronfleet.sandbox.children import die_with_parent
from neuronfleet.sandbox.kubelet import ContainerResult, fallback_termination_message

DEFAULT_TERMINATION_PATH = "/dev/termination-log"


class SubprocessRunner:
    """Run a pod's first container command locally (``await runner(pod)``)."""

    def __init__(
        self,
        *,
        extra_env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        images: set[str] | None = None,
        commands: set[str] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.extra_env = dict(extra_env or {})
        self.cwd = cwd
        #: Only pods whose image is listed run for real (None: every pod); others are simulated.
        self.images = images
        #: Only pods whose command is one of these (e.g. ``{"neuronserve compile"}``: the first two
        #: words of command + args) run for real (None: every pod); others are simulated.
        self.commands = commands
        self.timeout_s = timeout_s

    async def __call__(self, pod: dict[str, Any]) -> ContainerResult | None:
        containers = (pod.get("spec") or {}).get("containers") or []
        if not containers:
            return None
        container = containers[0]
        if self.images is not None and container.get("image") not in self.images:
            return None
        argv = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
        if self.commands is not None and " ".join(argv[:2]) not in self.commands:
            return None
        if not argv:
            return ContainerResult(exit_code=128, message="the container has no command to run locally")
        termination_path = container.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH
        with tempfile.TemporaryDirectory(prefix="sandbox-container-") as scratch:
            message_file = Path(scratch) / "termination-log"
            message_file.touch()
            argv = [str(message_file) if a == termination_path else a for a in argv]
            env = {**os.environ, **self.extra_env}
            env.update({str(e["name"]): str(e["value"]) for e in container.get("env") or [] if "value" in e})
            try:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                    env=env,
                    cwd=self.cwd,
                    preexec_fn=die_with_parent(),  # a killed sandbox's compile dies with it (sandbox.children)
                )
            except OSError as exc:
                return ContainerResult(exit_code=127, message=f"cannot start {argv[0]!r}: {exc}")
            try:
                async with asyncio.timeout(self.timeout_s):
                    output, _ = await process.communicate()
            except TimeoutError:
                process.kill()
                await process.wait()
                return ContainerResult(exit_code=137, message=f"killed after {self.timeout_s}s")
            except asyncio.CancelledError:
                # The kubelet stops (the sandbox stops, the pod went): a cancelled communicate()
                # leaves the process running, so a compile would run on, orphaned.
                process.kill()
                await process.wait()
                raise
            message = message_file.read_text(errors="replace")[-4096:]
        logs = tuple(output.decode(errors="replace").splitlines())
        if not message:
            message = fallback_termination_message(container, logs, process.returncode or 0)
        return ContainerResult(exit_code=process.returncode or 0, message=message, logs=logs)
