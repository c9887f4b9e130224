"""Per-rule precision of ``ddpdoctor lint`` on labelled real code: what decides which rules run by default.

Every labelled corpus given (a folder with the files and a LABELS.md in the shared corpora's format:
``## N. file.py`` sections, rows ``| F1.2 | 771, 784 | ...``, ``| N1.3 | 786 | ...``, ``| M1.1 | ...``)
is linted file by file with EVERY rule on (opt-in ones too), and each report is sorted as the shared
scorer sorts them: on an anchor line of an F row (a real bug) it is true, on a line of an N row (code
that looks wrong but is right) it is false, on an M row neither, elsewhere unlabelled (for review).
A row counts once per rule. Where the labels list one line both as a bug's anchor (F) and as a trap
(N), a report there is true for the F row and counted apart as a label conflict, not as false: one
report cannot be both the bug found and a false alarm. Likewise a line an N row marks correct for
one look-alike and an M row calls debatable (often the very thing the rule reports) is a conflict,
not a false report. Rows that evidence shows wrong (``label_errata.md`` beside this script: a run of
torch, a contradiction with a labelled row that cites the upstream report) are set aside and listed;
``--errata none`` counts every label as written. A rule earns its place in the default selection by precision >= 0.95
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

# label rows that evidence shows wrong (a run of torch, a contradiction with a referenced label)
ERRATA = Path(__file__).with_name("label_errata.md")
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
    debatable: set = field(default_factory=set)  # N rows whose line is also an M row's
    refuted: set = field(default_factory=set)  # rows the errata file shows wrong, with evidence

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


def read_errata(path: Path | None) -> dict[tuple[str, str], str]:
    """``| corpus | row | why |`` lines of the errata file -> {(corpus, row id): why}."""
    out: dict[tuple[str, str], str] = {}
    if path is None or not path.is_file():
        return out
    for ln in path.read_text().splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"[FNM]\d+\.\d+", cells[1]):
            out[(cells[0], cells[1])] = cells[2]
    return out


def tally(corpora: list[Path], errata: dict[tuple[str, str], str] | None = None) -> tuple[dict[str, Tally], int]:
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
                wrong = [r for r in hits if (corpus.name, r.ident) in (errata or {})]
                hits = [r for r in hits if r not in wrong]
                is_bug = any(r.kind == "F" for r in hits)
                is_moot = any(r.kind == "M" for r in hits)
                for r in wrong:
                    t.refuted.add((corpus.name, name, r.ident))
                for r in hits:
                    if r.kind == "F":
                        t.true.add((corpus.name, name, r.ident))
                    elif r.kind == "N":
                        key = (corpus.name, name, r.ident)
                        (t.conflict if is_bug else t.debatable if is_moot else t.false).add(key)
                if not hits and not wrong:
                    t.unlabelled.add((corpus.name, name, line))
    return out, files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpora", nargs="*", type=Path, help="labelled corpus folders (each with LABELS.md)")
    ap.add_argument(
        "--errata",
        type=Path,
        default=ERRATA,
        help="label rows shown wrong, with the evidence (default: %(default)s; 'none' to count every label as written)",
    )
    args = ap.parse_args(argv)
    errata = read_errata(None if str(args.errata) == "none" else args.errata)
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
    tallies, files = tally(here, errata)
    wall = time.perf_counter() - t0
    print(
        f"per-rule precision over {files} labelled files in {', '.join(str(c) for c in here)} "
        f"(every rule on, each file alone; {wall:.1f} s; {len(errata)} label rows set aside by "
        f"{args.errata.name if errata else 'no errata'})"
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
            f"{spec.code:7} {len(t.true):5} {len(t.false):5} {len(t.unlabelled):6} {len(t.conflict) + len(t.debatable):6} "
            f"{ptxt:>9}  {now:8} {verdict}"
        )
        for c, f, r in sorted(t.false):
            print(f"        false: {c}/{f} {r}")
        for c, f, r in sorted(t.conflict):
            print(f"        label conflict (line is also a bug's anchor): {c}/{f} {r}")
        for c, f, r in sorted(t.debatable):
            print(f"        label conflict (line is also a debatable row's): {c}/{f} {r}")
        for c, f, r in sorted(t.refuted):
            print(f"        label set aside ({errata[(c, r)][:60]}): {c}/{f} {r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
