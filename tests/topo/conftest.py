"""Shared fixtures for the topology tests: paths to ../shared/fixtures and a sysfs tree builder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

# tests/topo/conftest.py -> repo -> its parent, where CI clones shared/ beside the repository.
FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures"
DATA = Path(__file__).resolve().parent / "data"


def fixture(rel: str) -> Path:
    p = FIXTURES / rel
    if not p.exists():
        pytest.skip(f"shared fixture {rel} is absent (clone ../shared beside the repository)")
    return p


@pytest.fixture
def ib_root(tmp_path) -> Path:
    """A filesystem root whose sys/class/infiniband is a copy of the recorded H100 tree."""
    src = fixture("infiniband/sysfs-infiniband/h100.0")
    shutil.copytree(src, tmp_path / "sys/class/infiniband")
    return tmp_path
