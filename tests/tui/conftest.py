from __future__ import annotations

import pytest

from .helpers import load


@pytest.fixture
def gloo_report():
    return load("report_2x2_gloo.json")


@pytest.fixture
def gpu_report():
    return load("report_gpu_node.json")
