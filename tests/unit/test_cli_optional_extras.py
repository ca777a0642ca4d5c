"""`neuronfleet` without the sandbox extra (the operator image): `run` works, the rest says why not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Make `import jsonpath_ng` fail as it does where the sandbox extra is not installed.
WITHOUT_JSONPATH_NG = """
import sys
sys.modules["jsonpath_ng"] = None
from neuronfleet.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def _neuronfleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_JSONPATH_NG, *args], capture_output=True, text=True, check=False, timeout=120
    )


def test_run_is_available_and_the_sandbox_says_what_it_needs() -> None:
    proc = _neuronfleet("--help")
    assert proc.returncode == 0, proc.stderr
    assert "  run " in proc.stdout
    assert "Unavailable in this install" in proc.stdout
    assert "sandbox: needs jsonpath_ng" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_run_help_works_without_the_sandbox() -> None:
    proc = _neuronfleet("run", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--artifact-store" in proc.stdout


# Runs the CLI in a fresh interpreter and prints which command modules it imported.
LOADED_MODULES = """
import sys
from neuronfleet.cli import OPTIONAL_COMMANDS, main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print("LOADED", ",".join(sorted(m for _, m, _ in OPTIONAL_COMMANDS if m in sys.modules)))
"""
EVERY_COMMAND_MODULE = (
    "neuronfleet.demo.cli,neuronfleet.plan_command,neuronfleet.run_command,neuronfleet.sandbox.command,"
    "neuronfleet.sim.command"
)


@pytest.mark.parametrize(
    ("argv", "loaded"),
    [
        pytest.param(["validate", "-f", "examples/bert-embeddings.yaml"], "", id="validate"),
        pytest.param(["run", "--help"], "neuronfleet.run_command", id="run"),
        pytest.param(["simulate", "--help"], "neuronfleet.sim.command", id="simulate"),
        # `sandbox demo` is the demo module's: both load (and the operator's, which the demo runs).
        pytest.param(
            ["sandbox", "demo", "--help"],
            "neuronfleet.demo.cli,neuronfleet.run_command,neuronfleet.sandbox.command",
            id="sandbox",
        ),
        # Help and a mistyped command list every command, so every module loads.
        pytest.param(["--help"], EVERY_COMMAND_MODULE, id="help"),
        pytest.param(["simulte"], EVERY_COMMAND_MODULE, id="typo"),
    ],
)
def test_a_command_imports_only_the_modules_that_register_it(argv: list[str], loaded: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", LOADED_MODULES, *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.splitlines()[-1] == f"LOADED {loaded}", proc.stdout[-2000:]
    if argv[0] == "sandbox":
        assert "--peak-rps" in proc.stdout  # the demo's options, under `sandbox demo`
    if argv == ["simulte"]:
        assert "invalid choice: 'simulte'" in proc.stderr and "'simulate'" in proc.stderr
