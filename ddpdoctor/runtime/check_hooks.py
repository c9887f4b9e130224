"""Callables the worker runs on every rank just before each cluster check: ``hook(ctx)``.

Empty in a normal run. The tests install a fault injector here (tests/fault_inject/sitecustomize.py) to
make a rank hang, stall or die in a chosen check, so the production path carries no test branches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

BEFORE_CHECK: list[Callable[[Any], None]] = []
