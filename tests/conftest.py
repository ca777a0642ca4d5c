"""Test configuration shared by every test folder.

Fixture plugins that several folders use live in ``tests/fixtures_*.py`` and are registered here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def repo_root() -> Path:
    return REPO


# Fixture plugins shared by several test folders (tests/ is on sys.path: this conftest's folder).
pytest_plugins = ["fixtures_aws", "fixtures_cluster", "fixtures_peering", "fixtures_prometheus"]
