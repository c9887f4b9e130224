"""Shared fixtures for the topology tests: paths to tests/fixtures and a sysfs tree builder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import FIXTURES, fixture  # noqa: F401  (re-exported for the topology tests)

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def ib_root(tmp_path) -> Path:
    """A filesystem root whose sys/class/infiniband is a copy of the recorded H100 tree."""
    src = fixture("infiniband/sysfs-infiniband/h100.0")
    shutil.copytree(src, tmp_path / "sys/class/infiniband")
    return tmp_path
