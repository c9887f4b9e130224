"""TEMPORARY stand-in for hangcore's ddpdoctor.commands.hang until it is merged."""
import json
from pathlib import Path


class EvidenceError(Exception):
    pass


class _Diag:
    def __init__(self, ranks):
        self.ranks = ranks
        self.culprit_ranks = []
        self.verdict = "placeholder"

    def to_dict(self):
        return {"ranks": self.ranks}


def analyse(dirs, allow_pickle=False, lint=True):
    ranks = {}
    for d in dirs:
        for p in Path(d).glob("rank-*.json"):
            doc = json.loads(p.read_text())
            fr = doc.get("flight_recorder") or {}
            pend = [(e["profiling_name"], e["collective_seq_id"]) for e in fr.get("entries", []) if not e.get("retired")]
            main = next((t for t in doc["threads"] if t["main"]), None)
            loc = [f"{f['file']}:{f['line']} {f['function']}" for f in (main["frames"] if main else [])][-4:]
            ranks[doc["rank"]] = {"reason": doc["reason"], "pending": pend, "stack": loc,
                                  "exception": doc.get("exception") and doc["exception"]["message"][:200]}
    return _Diag(ranks)


def print_diagnosis(diag, console):
    for r, d in sorted(diag.ranks.items()):
        console.print(f"rank {r}: {d['reason']} pending={d['pending']} exc={d['exception']}")
        for line in d["stack"]:
            console.print(f"   {line}", markup=False)
