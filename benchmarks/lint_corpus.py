"""Score ``ddpdoctor lint`` on labelled corpora of real training scripts, overall and per rule.

Runs ``../shared/tools/score_lint.py`` on each corpus folder given (default: ``../shared/lint-corpus-dev``
and ``../shared/lint-corpus-dev2``; mined sets such as ``/work/mined/A`` by path) with this checkout's
``ddpdoctor`` (the one next to this Python, else ``python -m ddpdoctor``) and prints its precision,
recall, every missed bug and every false alarm; then every rule's true and false reports over all of
them (benchmarks/lint_rule_precision.py), which decide the default selection. Targets: precision
>= 0.95, recall >= 0.90. The corpora are third-party code and stay outside the project: a folder that
is not here is named and skipped, and with none this says so and exits 0.

    python benchmarks/lint_corpus.py [--shared PATH] [CORPUS_DIR ...]
"""

from __future__ import annotations

import argparse
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ddpdoctor(tmp: Path) -> str:
    """This checkout's CLI as one executable path (the scorer takes a single program)."""
    here = Path(sys.executable).parent / "ddpdoctor"
    if here.is_file():
        return str(here)
    found = shutil.which("ddpdoctor")
    if found:
        return found
    wrapper = tmp / "ddpdoctor"
    wrapper.write_text(f'#!/bin/sh\ncd "{ROOT}" && exec "{sys.executable}" -m ddpdoctor "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return str(wrapper)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--shared", type=Path, default=ROOT.parent / "shared", help="the shared folder (../shared)"
    )
    ap.add_argument("corpora", nargs="*", type=Path, help="labelled corpus folders (default: the shared two)")
    args = ap.parse_args()
    scorer = args.shared / "tools" / "score_lint.py"
    corpora = args.corpora or [args.shared / "lint-corpus-dev", args.shared / "lint-corpus-dev2"]
    here = [c for c in corpora if (c / "LABELS.md").is_file()]
    for c in corpora:
        if c not in here:
            print(f"lint corpus: {c} is not here; skipped")
    if not scorer.is_file() or not here:
        print(
            f"lint corpus: {', '.join(map(str, corpora))} or {scorer} is not here; nothing to score (exit 0)"
        )
        return 0
    worst = 0
    with tempfile.TemporaryDirectory() as tmp:
        exe = _ddpdoctor(Path(tmp))
        for corpus in here:
            files = sorted(corpus.glob("*.py"))
            print(f"lint corpus: {len(files)} scripts in {corpus}, scored by {scorer.name} with {exe}")
            t = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, str(scorer), str(corpus), exe],
                capture_output=True,
                text=True,
                timeout=1800,
                check=False,
            )
            wall = time.perf_counter() - t
            sys.stdout.write(proc.stdout)
            if proc.stderr.strip():
                sys.stderr.write(proc.stderr)
            print(
                f"(one `ddpdoctor lint` per script, {wall:.1f} s in all; targets: precision >= 0.95, "
                "recall >= 0.90)\n"
            )
            worst = max(worst, 0 if proc.returncode in (0, 1) else proc.returncode)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from lint_rule_precision import main as per_rule

    per_rule([str(c) for c in here])
    return worst


if __name__ == "__main__":
    sys.exit(main())
