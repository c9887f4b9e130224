"""Per-rule precision of ``ddpdoctor lint`` on labelled real code: what decides which rules run by default.

Every labelled corpus given (a folder with the files and a LABELS.md in the shared corpora's format:
``## N. file.py`` sections, rows ``| F1.2 | 771, 784 | ...``, ``| N1.3 | 786 | ...``, ``| M1.1 | ...``)
is linted file by file with EVERY rule on (opt-in ones too), and each report is sorted as the shared
scorer sorts them: on an anchor line of an F row (a real bug) it is true, on a line of an N row (code
that looks wrong but is right) it is false, on an M row neither, elsewhere unlabelled (for review).
A row counts once per rule. Where the labels list one line both as a bug's anchor (F) and as a trap
(N), a report there is true for the F row and counted apart as a label conflict, not as false: one
report cannot be both the bug found and a false alarm. A rule earns its place in the default selection by precision >= 0.95
on these reports, true / (true + false); below that it is opt-in (``--extend-select``). A rule with
few reports is judged on them all the same (the table shows how many there are).

    python benchmarks/lint_rule_precision.py CORPUS_DIR [CORPUS_DIR ...]

A corpus folder that is not here is named and skipped; with none at all this says so and exits 0.
The corpora are third-party code and stay outside the project.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PRECISION_FOR_DEFAULT = 0.95
# an opt-in rule moves to the default selection only on a handful of true reports: one or two right
# answers say little about code nobody has seen

_SECTION = re.compile(r"##\s+\d+\.\s+(\S+\.py)")
_ROW = re.compile(r"\|\s*([FNM])(\d+\.\d+)\s*\|\s*([^|]*)\|")


@dataclass(frozen=True)
class Row:
    kind: str  # F (must report), N (must not), M (may)
    ident: str
    lines: frozenset[int]


@dataclass
class Tally:
    true: set = field(default_factory=set)  # (corpus, file, row id)
    false: set = field(default_factory=set)
    unlabelled: set = field(default_factory=set)  # (corpus, file, line)
    conflict: set = field(default_factory=set)  # N rows whose line is also an F row's anchor

    @property
    def precision(self) -> float | None:
        n = len(self.true) + len(self.false)
        return len(self.true) / n if n else None


def line_set(cell: str) -> frozenset[int]:
    """``"771, 784-786; L12"`` -> {12, 771, 784, 785, 786}."""
    out: set[int] = set()
    for part in re.split(r"[,;]", cell):
        m = re.match(r"\s*L?(\d+)\s*(?:[-\u2013]\s*L?(\d+))?", part)
        if m:
            a = int(m.group(1))
            out.update(range(a, int(m.group(2) or a) + 1))
    return frozenset(out)


def read_labels(text: str) -> dict[str, list[Row]]:
    rows: dict[str, list[Row]] = {}
    current = None
    for ln in text.splitlines():
        m = _SECTION.match(ln)
        if m:
            current = m.group(1)
            rows.setdefault(current, [])
            continue
        m = _ROW.match(ln)
        if m and current:
            rows[current].append(Row(m.group(1), m.group(1) + m.group(2), line_set(m.group(3))))
    return rows


def tally(corpora: list[Path]) -> tuple[dict[str, Tally], int]:
    from ddpdoctor.lint import LintConfig, lint_paths

    every = LintConfig(select=("DDP",))
    out: dict[str, Tally] = {}
    files = 0
    for corpus in corpora:
        for name, rows in read_labels((corpus / "LABELS.md").read_text()).items():
            path = corpus / name
            if not path.is_file():
                print(f"  {corpus.name}: {name} is labelled but not here; skipped")
                continue
            files += 1
            for f in lint_paths([path], every, jobs=1):
                line = f.location.line if f.location else 0
                t = out.setdefault(f.code, Tally())
                hits = [r for r in rows if line in r.lines]
                is_bug = any(r.kind == "F" for r in hits)
                for r in hits:
                    if r.kind == "F":
                        t.true.add((corpus.name, name, r.ident))
                    elif r.kind == "N":
                        (t.conflict if is_bug else t.false).add((corpus.name, name, r.ident))
                if not hits:
                    t.unlabelled.add((corpus.name, name, line))
    return out, files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpora", nargs="*", type=Path, help="labelled corpus folders (each with LABELS.md)")
    args = ap.parse_args(argv)
    here = []
    for c in args.corpora:
        if (c / "LABELS.md").is_file():
            here.append(c)
        else:
            print(f"per-rule precision: {c} is not here (no LABELS.md); skipped")
    if not here:
        print("per-rule precision: no labelled corpus given or found; nothing to measure (exit 0)")
        return 0
    from ddpdoctor.lint.rules import on_by_default, script_rules

    t0 = time.perf_counter()
    tallies, files = tally(here)
    wall = time.perf_counter() - t0
    print(
        f"per-rule precision over {files} labelled files in {', '.join(str(c) for c in here)} "
        f"(every rule on, each file alone; {wall:.1f} s)"
    )
    print(
        f"{'rule':7} {'true':>5} {'false':>5} {'unlab.':>6} {'confl.':>6} {'precision':>9}  now      measured"
    )
    for spec in script_rules():
        t = tallies.get(spec.code, Tally())
        p = t.precision
        now = "default" if on_by_default(spec) else "opt-in"
        if p is None:
            verdict = "no reports: unmeasured"
        elif p >= PRECISION_FOR_DEFAULT:
            verdict = "fit for default"
        else:
            verdict = "below 0.95: opt-in"
        if verdict.startswith(("fit", "below")) and (p >= PRECISION_FOR_DEFAULT) != (now == "default"):
            verdict += "  <- differs from now"
        ptxt = "-" if p is None else f"{p:.2f}"
        print(
            f"{spec.code:7} {len(t.true):5} {len(t.false):5} {len(t.unlabelled):6} {len(t.conflict):6} "
            f"{ptxt:>9}  {now:8} {verdict}"
        )
        for c, f, r in sorted(t.false):
            print(f"        false: {c}/{f} {r}")
        for c, f, r in sorted(t.conflict):
            print(f"        label conflict (line is also a bug's anchor): {c}/{f} {r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
