"""Score ``ddpdoctor lint`` on the labelled development corpus of real training scripts.

Runs ``../shared/tools/score_lint.py`` on ``../shared/lint-corpus-dev`` with this checkout's
``ddpdoctor`` (the one next to this Python, else ``python -m ddpdoctor``) and prints its precision,
recall, every missed bug and every false alarm. Targets: precision >= 0.95, recall >= 0.90. The
corpus is third-party code and stays outside the project: without ``../shared`` this says so and
exits 0.

    python benchmarks/lint_corpus.py [--shared PATH]
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
    args = ap.parse_args()
    scorer = args.shared / "tools" / "score_lint.py"
    corpus = args.shared / "lint-corpus-dev"
    if not scorer.is_file() or not (corpus / "LABELS.md").is_file():
        print(f"lint corpus: {corpus} or {scorer} is not here; nothing to score (exit 0)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        exe = _ddpdoctor(Path(tmp))
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
        f"(one `ddpdoctor lint` per script, {wall:.1f} s in all; targets: precision >= 0.95, recall >= 0.90)"
    )
    return 0 if proc.returncode in (0, 1) else proc.returncode


if __name__ == "__main__":
    sys.exit(main())
