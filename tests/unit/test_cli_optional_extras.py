"""`neuronfleet` without the sandbox extra (the operator image): `run` works, the rest says why not."""

from __future__ import annotations

import subprocess
import sys

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
