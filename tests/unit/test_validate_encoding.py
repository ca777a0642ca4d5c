"""`neuronfleet validate -f` on a file that is not UTF-8: a clear error, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_a_file_that_is_not_utf8_is_reported_not_raised(tmp_path: Path) -> None:
    manifest = tmp_path / "latin1.yaml"
    manifest.write_bytes("metadata:\n  name: caf\u00e9\n".encode("latin-1"))
    done = subprocess.run(
        [sys.executable, "-m", "neuronfleet.cli", "validate", "-f", str(manifest)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = done.stdout + done.stderr
    assert "Traceback" not in output
    assert done.returncode != 0
    assert "not UTF-8 text: byte 0xe9 at offset 21" in output
