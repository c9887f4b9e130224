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
from dataclasses import dataclass, field

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
    """One cause found while the job ran (`watch --verify`), with every rank and moment that showed it.

    kind: sampler_epoch | collective_mismatch | p2p_unwaited | forward_some_ranks."""

    kind: str
    file: str
    line: int
    code: str
    message: str
    ranks: list[int]
    epochs: list[int]
    passes: list[int]  # which iterations of the loader repeated an order
    lint: list[dict[str, str]]  # {"code": "DDP101", "message": ..., "where": "train.py:10"}
    operation: str = ""
    seqs: list[int] = field(default_factory=list)  # collective (per group) or p2p (per rank) numbers
    steps: list[int] = field(default_factory=list)  # DDP forwards a rank had run by then
    calls: list[str] = field(default_factory=list)  # per rank: "rank 0: isend to rank 1, p2p #3"
    other_ranks: list[int] = field(default_factory=list)  # forward_some_ranks: the ranks that did not

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def when(self) -> str:
        """When it was seen, in the terms of its kind."""
        if self.kind == "sampler_epoch":
            epochs = ", ".join(map(str, sorted(set(self.epochs))))
            return f"epoch {epochs} at pass {', '.join(map(str, self.passes))} of the loader"
        parts = []
        if self.seqs:
            what = "p2p request" if self.kind == "p2p_unwaited" else "collective"
            parts.append(f"{what} #{', #'.join(map(str, sorted(set(self.seqs))))}")
        if self.steps:
            parts.append(f"after DDP forward #{min(self.steps)}")
        return ", ".join(parts)

    def headline(self) -> str:
        ranks = ", ".join(map(str, self.ranks))
        when = self.when()
        return f"{self.where} (rank{'s' if len(self.ranks) > 1 else ''} {ranks}{'; ' + when if when else ''}): {self.message}"

    def joined(self) -> list[str]:
        """'DDP101 at train.py:10, confirmed at run time: ...' for each lint finding at this place."""
        return [f"{x['code']} at {x['where']}, confirmed at run time: {x['message']}" for x in self.lint]


def group_run_findings(items: list[dict]) -> list[RunFinding]:
    """One finding per cause (kind and place), every rank and moment that showed it."""
    out: dict[tuple, RunFinding] = {}
    for d in items:
        try:
            key = (str(d["kind"]), str(d["file"]), int(d["line"]))
        except (KeyError, TypeError, ValueError):
            continue
        f = out.get(key)
        if f is None:
            f = out[key] = RunFinding(key[0], key[1], key[2], str(d.get("code") or ""), str(d.get("message") or ""),
                                      [], [], [], [], str(d.get("operation") or ""))  # fmt: skip
        for r in [d.get("rank"), *(d.get("ranks") or [])]:
            if isinstance(r, int) and r not in f.ranks:
                f.ranks.append(r)
        if isinstance(d.get("epoch"), int):
            f.epochs.append(d["epoch"])
        if isinstance(d.get("iteration"), int) and d["iteration"] not in f.passes:
            f.passes.append(d["iteration"])
        if isinstance(d.get("seq"), int) and d["seq"] not in f.seqs:
            f.seqs.append(d["seq"])
        if isinstance(d.get("step"), int) and d["step"] not in f.steps:
            f.steps.append(d["step"])
        for r in d.get("other_ranks") or []:
            if isinstance(r, int) and r not in f.other_ranks:
                f.other_ranks.append(r)
        call = _call_text(d)
        if call and call not in f.calls:
            f.calls.append(call)
    for f in out.values():
        f.ranks.sort()
        f.passes.sort()
        f.seqs.sort()
        f.steps.sort()
        f.other_ranks.sort()
    return list(out.values())


def _call_text(d: dict) -> str:
    if d.get("kind") != "p2p_unwaited" or not isinstance(d.get("rank"), int):
        return ""
    to = "to" if d.get("operation") == "isend" else "from"
    peer = f" {to} rank {d['peer']}" if isinstance(d.get("peer"), int) else ""
    return f"rank {d['rank']}: {d.get('operation')}{peer} of {d.get('tensor') or '?'}, p2p request #{d.get('seq')}"


def forward_findings(forwards: list[dict]) -> list[dict]:
    """Forwards of the DDP model that the ranks did not all run alike, from each rank's counts per
    call site (forward-R.json): one item per site, as the ranks' own findings are."""
    counts: dict[int, dict[str, dict]] = {}
    for d in forwards:
        if isinstance(d.get("rank"), int) and isinstance(d.get("sites"), dict):
            counts[d["rank"]] = d["sites"]
    if len(counts) < 2:
        return []
    out = []
    for site in sorted({s for sites in counts.values() for s in sites}):
        n = {r: int((sites.get(site) or {}).get("count", 0)) for r, sites in counts.items()}
        if len(set(n.values())) < 2:
            continue
        path, _, line = site.rpartition(":")
        if not line.isdigit():
            continue
        top = max(n.values())
        some = sorted(r for r, c in n.items() if c == top)
        rest = sorted(r for r in n if r not in some)
        firsts = [int(counts[r][site]["first"]) for r in some if site in counts[r]]
        ran = ", ".join(f"rank {r} {n[r]} time{'s' if n[r] != 1 else ''}" for r in sorted(n))
        reached = f"reached by {_ranks(some)} only" if all(n[r] == 0 for r in rest) else "run unevenly"
        out.append({
            "kind": "forward_some_ranks", "file": path, "line": int(line), "rank": None, "ranks": some,
            "other_ranks": rest, "step": min(firsts) if firsts else None, "operation": "forward",
            "message": (f"a forward of the DDP model {reached} ({ran}): every rank must run the same "
                        "forwards, or the next backward's gradient all_reduce (or the buffer broadcast "
                        "of the next forward) pairs with a different call or hangs"),
        })  # fmt: skip
    return out


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
