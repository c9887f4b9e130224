"""pytest marks for tests that need the namespace test bed or the Slurm bed: skipped with the reason."""

from __future__ import annotations

import pytest

from .slurmbed import slurm_available
from .testbed import netns_available

NETNS_OK, NETNS_WHY = netns_available()
# Slurm's bed runs in namespaces: without them there is nothing to ask.
SLURM_OK, SLURM_WHY = slurm_available() if NETNS_OK else (False, NETNS_WHY)

NEEDS_NETNS = [
    pytest.mark.netns,
    pytest.mark.slow,
    pytest.mark.skipif(not NETNS_OK, reason=NETNS_WHY or "network namespaces unavailable"),
]
NEEDS_SLURM = [
    *NEEDS_NETNS,
    pytest.mark.skipif(not SLURM_OK, reason=SLURM_WHY or "Slurm unavailable"),
]
