"""Parser of ``nvidia-smi -q`` (pure): the indented ``Key : value`` tree, one per GPU.

Used for users' saved outputs and to build recorded NVML doubles in tests. Values stay strings;
``gpu_facts`` pulls out the few the topology needs.
"""

from __future__ import annotations

import re

_LINE = re.compile(r"^(\s*)([^:]+?)\s*(?::\s*(.*))?$")


class SmiQueryParseError(ValueError):
    """Not ``nvidia-smi -q`` output."""


def parse_smi_query(text: str) -> tuple[dict[str, str], list[dict]]:
    """(header, gpus): header keys such as "Driver Version"; each GPU a nested dict with "Bus Id"."""
    header: dict[str, str] = {}
    gpus: list[dict] = []
    stack: list[tuple[int, dict]] = []
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith("="):
            continue
        if m := re.match(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$", raw):
            gpu: dict = {"Bus Id": m.group(1)}
            gpus.append(gpu)
            stack = [(0, gpu)]
            continue
        m = _LINE.match(raw)
        if not m:
            continue
        indent, key, value = len(m.group(1)), m.group(2).strip(), m.group(3)
        if not stack:
            if value is not None:
                header[key] = value.strip()
            continue
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if value is None or value.strip() == "" and raw.rstrip().endswith(key):
            child: dict = {}
            parent[key] = child
            stack.append((indent, child))
        else:
            parent[key] = value.strip()
    if not gpus:
        raise SmiQueryParseError("no 'GPU <bus id>' section: not `nvidia-smi -q` output")
    return header, gpus


def get(d: dict, *path: str, default: str | None = None):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return default
        d = d[p]
    return d
