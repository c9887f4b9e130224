"""What `ddpdoctor watch --verify` turns into findings (pure).

``TORCH_DISTRIBUTED_DEBUG=DETAIL`` makes torch check every collective's fingerprint across ranks
before running it; a mismatch raises on every rank (torch 2.13, seen here)::

    RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective:
    CollectiveFingerPrint(SequenceNumber=1, OpType=ALLGATHER, TensorShape=[100], TensorDtypes=Float,
    TensorDeviceTypes=...), but Rank 1 is running collective: CollectiveFingerPrint(...).Collectives
    differ in the following aspects: ...

Each rank's message names itself and one peer; together they give every rank's operation, shapes
and dtypes at that sequence number (torch's own count of collectives in the wrapped group).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MISMATCH_HEAD = "Detected mismatch between collectives on ranks"
_FP = re.compile(
    r"Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=(\d+), OpType=(\w+)"
    r"(?:, TensorShape=\[([^\]]*)\])?(?:, TensorDtypes=([\w, ]+?))?(?:, TensorDeviceTypes=|\))"
)
_ASPECTS = re.compile(r"Collectives differ in the following aspects:\s*(.+)$", re.S)


@dataclass(frozen=True)
class Fingerprint:
    rank: int
    seq: int
    op: str  # "all_gather" (torch's OpType ALLGATHER, in c10d's spelling)
    shape: str  # "100", "" when none
    dtypes: str  # "Float"

    def text(self) -> str:
        shape = f" of shape [{self.shape}]" if self.shape else ""
        return f"{self.op}{shape} {self.dtypes}".strip()


_OPS = {"ALLREDUCE": "all_reduce", "ALLGATHER": "all_gather", "BROADCAST": "broadcast", "BARRIER": "barrier",
        "REDUCE": "reduce", "GATHER": "gather", "SCATTER": "scatter", "REDUCE_SCATTER": "reduce_scatter",
        "ALLTOALL": "all_to_all", "ALLTOALL_BASE": "all_to_all_single", "_ALLGATHER_BASE": "all_gather_into_tensor",
        "_REDUCE_SCATTER_BASE": "reduce_scatter_tensor", "ALLGATHER_COALESCED": "all_gather_coalesced",
        "SEND": "send", "RECV": "recv"}  # fmt: skip


def fingerprints(message: str) -> tuple[list[Fingerprint], str]:
    """The fingerprints named in one rank's mismatch message, and torch's list of what differs."""
    if MISMATCH_HEAD not in message:
        return [], ""
    out = [
        Fingerprint(int(m.group(1)), int(m.group(2)), _OPS.get(m.group(3), m.group(3).lower()),
                    (m.group(4) or "").replace(" ", ""), (m.group(5) or "").strip())  # fmt: skip
        for m in _FP.finditer(message)
    ]
    aspects = _ASPECTS.search(message)
    return out, (" ".join(aspects.group(1).split()) if aspects else "")


def combine(messages: dict[int, str]) -> tuple[dict[int, Fingerprint], str]:
    """rank -> its fingerprint, from every rank's mismatch message; the first 'differ' text."""
    seen: dict[int, Fingerprint] = {}
    differ = ""
    for _, msg in sorted(messages.items()):
        fps, aspects = fingerprints(msg)
        for fp in fps:
            seen.setdefault(fp.rank, fp)
        differ = differ or aspects
    return seen, differ


@dataclass
class RunFinding:
    """One cause found while the job ran (`watch --verify`), with every rank and pass that showed it."""

    kind: str  # "sampler_epoch"
    file: str
    line: int
    code: str
    message: str
    ranks: list[int]
    epochs: list[int]
    passes: list[int]  # which iterations of the loader repeated an order
    lint: list[dict[str, str]]  # {"code": "DDP101", "message": ..., "where": "train.py:10"}

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def headline(self) -> str:
        ranks = ", ".join(map(str, self.ranks))
        epochs = ", ".join(map(str, sorted(set(self.epochs))))
        passes = ", ".join(map(str, self.passes))
        return (f"{self.where} (rank{'s' if len(self.ranks) > 1 else ''} {ranks}; epoch {epochs} at "
                f"pass {passes} of the loader): {self.message}")  # fmt: skip

    def joined(self) -> list[str]:
        """'DDP101 at train.py:10, confirmed at run time: ...' for each lint finding at this place."""
        return [f"{x['code']} at {x['where']}, confirmed at run time: {x['message']}" for x in self.lint]


def group_run_findings(items: list[dict]) -> list[RunFinding]:
    """One finding per cause (kind and place), every rank and pass that showed it."""
    out: dict[tuple, RunFinding] = {}
    for d in items:
        try:
            key = (str(d["kind"]), str(d["file"]), int(d["line"]))
        except (KeyError, TypeError, ValueError):
            continue
        f = out.get(key)
        if f is None:
            f = out[key] = RunFinding(key[0], key[1], key[2], str(d.get("code") or ""), str(d.get("message") or ""),
                                      [], [], [], [])  # fmt: skip
        if isinstance(d.get("rank"), int) and d["rank"] not in f.ranks:
            f.ranks.append(d["rank"])
        if isinstance(d.get("epoch"), int):
            f.epochs.append(d["epoch"])
        if isinstance(d.get("iteration"), int) and d["iteration"] not in f.passes:
            f.passes.append(d["iteration"])
    for f in out.values():
        f.ranks.sort()
        f.passes.sort()
    return list(out.values())
