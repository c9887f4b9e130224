"""Collective fingerprints of `ddpdoctor watch --verify` (pure): what one rank was about to run, and
what differs when the ranks of a group compare theirs at the same sequence number.

Each rank counts the collectives it calls through ``torch.distributed`` per process group (our own
count, not torch's), writes the fingerprint of call N into the job's store and compares it with the
other members' fingerprints of call N before it runs the collective. The rank that finds every
peer's fingerprint there compares; the ranks before it go on (a store read never waits), so a rank
that never gets there is a hang for the hang doctor, not a wait of ours.

What is compared: the operation, the input tensors' shapes (where the operation needs equal ones)
and dtypes, and the root of a rooted operation. Not compared: the line (rank-dependent branches that
call the same collective are common and right).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

# operations whose inputs may differ in shape across ranks by design (split sizes, per-rank lists)
SHAPE_FREE = frozenset({"all_to_all", "all_to_all_single", "gather", "scatter"})
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})


@dataclass(frozen=True)
class CallPrint:
    """One rank's collective call N in one group, as --verify saw it before running it."""

    rank: int
    group: str  # "default_pg", or the group's name
    seq: int  # our count of collectives in this group, from 1
    op: str  # the c10d function: "all_gather", "broadcast", ...
    shapes: tuple[str, ...]  # each input tensor's shape, "100" or "8x4" ("" for a scalar)
    dtypes: tuple[str, ...]  # "float32", ...
    root: int | None  # src/dst of a rooted operation (global rank)
    file: str
    line: int
    api: str = ""  # the c10d function the user called, when it is another (all_gather_object)
    step: int | None = None  # forwards of the DDP model so far on this rank (None: no DDP model)

    def encode(self) -> str:
        return json.dumps([self.rank, self.group, self.seq, self.op, list(self.shapes), list(self.dtypes),
                           self.root, self.file, self.line, self.api, self.step], separators=(",", ":"))  # fmt: skip

    @classmethod
    def decode(cls, raw: bytes | str) -> CallPrint:
        r, g, s, op, shapes, dtypes, root, file, line, api, step = json.loads(raw)
        return cls(int(r), str(g), int(s), str(op), tuple(map(str, shapes)), tuple(map(str, dtypes)),
                   None if root is None else int(root), str(file), int(line), str(api),
                   None if step is None else int(step))  # fmt: skip

    def compared(self) -> tuple:
        """What must be equal across the members of a group."""
        shapes = () if self.op in SHAPE_FREE else self.shapes
        n = len(self.shapes) if self.op == "all_to_all" else None
        return (self.op, shapes, self.dtypes, self.root if self.op in ROOTED else None, n)

    def text(self) -> str:
        """'all_gather float32[101]', 'broadcast float32[8] from rank 0', 'barrier'."""
        tensors = ", ".join(f"{d}[{s.replace('x', ', ')}]" for s, d in zip(self.shapes, self.dtypes))
        root = f" {'to' if self.op in ('reduce', 'gather') else 'from'} rank {self.root}" if self.op in ROOTED else ""
        via = f" (in {self.api})" if self.api and self.api != self.op else ""
        return f"{self.op} {tensors}{root}{via}".replace("  ", " ").strip()

    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class CollectiveMismatch:
    """Ranks of one group about to run different collectives at the same sequence number."""

    group: str
    seq: int
    prints: tuple[CallPrint, ...]  # one per member, by rank
    aspects: tuple[str, ...]  # "operation", "shape", "dtype", "root", "count"

    @property
    def kind(self) -> str:
        """As the hang diagnosis names it: mismatch_op | mismatch_size | mismatch_dtype."""
        if "operation" in self.aspects:
            return "mismatch_op"
        if "dtype" in self.aspects and "shape" not in self.aspects:
            return "mismatch_dtype"
        return "mismatch_size"

    def by_call(self) -> list[tuple[CallPrint, list[int]]]:
        """Each distinct call with the ranks making it, the largest party first."""
        parties: dict[tuple, list[CallPrint]] = {}
        for p in self.prints:
            parties.setdefault(p.compared(), []).append(p)
        out = [(ps[0], sorted(p.rank for p in ps)) for ps in parties.values()]
        return sorted(out, key=lambda x: (-len(x[1]), x[1]))

    def culprits(self) -> list[int]:
        """The ranks outside the largest party; every rank when no party is the largest."""
        calls = self.by_call()
        if len(calls) > 1 and len(calls[0][1]) > len(calls[1][1]):
            return sorted(r for _, rs in calls[1:] for r in rs)
        return sorted(p.rank for p in self.prints)

    def operation(self) -> str:
        return "/".join(sorted({p.op for p in self.prints}))

    def step(self) -> int | None:
        steps = [p.step for p in self.prints if p.step is not None]
        return max(steps) if steps else None

    def message(self) -> str:
        parts = "; ".join(f"{_ranks(rs)} {'calls' if len(rs) == 1 else 'call'} {p.text()} at "
                          f"{_lines(self.prints, rs)}" for p, rs in self.by_call())  # fmt: skip
        step = self.step()
        when = f"collective #{self.seq} of {self.group}" + (f" (after DDP forward #{step})" if step else "")
        return f"{when} differs across ranks in {', '.join(self.aspects)}: {parts}"

    def to_dict(self) -> dict:
        return {"group": self.group, "seq": self.seq, "aspects": list(self.aspects),
                "prints": [json.loads(p.encode()) for p in self.prints]}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict) -> CollectiveMismatch:
        prints = tuple(CallPrint.decode(json.dumps(p)) for p in d["prints"])
        return cls(str(d["group"]), int(d["seq"]), prints, tuple(map(str, d["aspects"])))


def compare(prints: list[CallPrint]) -> CollectiveMismatch | None:
    """The mismatch among one group's fingerprints of one sequence number, or None when they agree."""
    if len(prints) < 2:
        return None
    aspects = []
    keys = [p.compared() for p in prints]
    for i, name in enumerate(("operation", "shape", "dtype", "root", "count")):
        if len({k[i] for k in keys}) > 1:
            aspects.append(name)
    if not aspects:
        return None
    first = prints[0]
    return CollectiveMismatch(first.group, first.seq, tuple(sorted(prints, key=lambda p: p.rank)), tuple(aspects))


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _lines(prints: tuple[CallPrint, ...], ranks: list[int]) -> str:
    """The path:line of the ranks making one call (one place usually; each place when they differ)."""
    places = Counter(f"{p.file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{p.line}" for p in prints if p.rank in ranks)
    return ", ".join(places)
