"""What the `watch --verify` checks in a rank share (no torch import here): the user's frame, a
finding's line in verify-R.jsonl, and the count of DDP forwards that says when a finding was seen."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field

_TORCH_FILE = ("/torch/", "/ddpdoctor/runtime/")


def user_frame(frame):
    """The innermost frame outside torch and ddpdoctor: the user's call."""
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if not any(t in path for t in _TORCH_FILE) and not path.startswith("<"):
            return frame
        frame = frame.f_back
    return None


def record_finding(agent, finding: dict) -> None:
    """One finding, one JSON line in verify-R.jsonl (the watch reads them all at the end)."""
    path = os.path.join(agent.run_dir, f"verify-{agent.env_rank}.jsonl")
    try:
        with open(path, "a") as fh:
            fh.write(json.dumps(finding) + "\n")
    except OSError:
        pass


def write_json(path: str, doc: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


@dataclass
class ForwardCounts:
    """Forwards of DDP models in this rank, per call site of the user's code."""

    total: int = 0
    sites: dict[str, list[int]] = field(default_factory=dict)  # "path:line" -> [count, first #, last #]
    written: int = -1
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, where: str) -> None:
        with self.lock:
            self.total += 1
            s = self.sites.get(where)
            if s is None:
                self.sites[where] = [1, self.total, self.total]
            else:
                s[0] += 1
                s[2] = self.total

    def to_dict(self, rank: int | None, host: str) -> dict:
        with self.lock:
            return {"rank": rank, "host": host, "total": self.total,
                    "sites": {k: {"count": c, "first": a, "last": b} for k, (c, a, b) in self.sites.items()}}  # fmt: skip


FORWARDS = ForwardCounts()


def forward_step() -> int | None:
    """How many forwards of a DDP model this rank has run (None before the first or without one)."""
    return FORWARDS.total or None
