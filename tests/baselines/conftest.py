"""Shared pieces for the profile tests: a valid profile as text, to break one line at a time."""

from __future__ import annotations

VALID = """\
schema: 1
name: test-box
description: a test system
sources:
  - "made up for the tests"
match:
  backend: nccl
  gpu_model: 'H100'
  gpus_per_node: 8
  nvlink: true
  nics: {kind: InfiniBand, min_count: 8, rate_Gbps: 400}
expected_GBps:
  p2p_intra_node: 100
  p2p_inter_node: 40
  all_reduce_busbw_intra_node: 200
  all_reduce_busbw_inter_node: 80
thresholds:
  warn_below_pct: 80
  fail_below_pct: 50
"""


def line_of(text: str, needle: str) -> int:
    """The 1-based line of the first line containing needle."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)
