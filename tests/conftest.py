"""Test configuration shared by every test folder.

Fixture plugins that several folders use live in ``tests/fixtures_*.py`` and are registered here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# The processes the tests start buffer their output as a user's do: a developer's PYTHONUNBUFFERED
# hid a command that exited 120 after its terminal closed (text a failed write left in stdout's
# buffer, flushed again at exit) and would hide a protocol line written without a flush.
os.environ.pop("PYTHONUNBUFFERED", None)


@pytest.fixture
def repo_root() -> Path:
    return REPO


# Fixture plugins shared by several test folders (tests/ is on sys.path: this conftest's folder).
pytest_plugins = ["fixtures_aws", "fixtures_cluster", "fixtures_peering", "fixtures_prometheus"]
