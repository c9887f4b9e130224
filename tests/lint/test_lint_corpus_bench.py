"""benchmarks/lint_corpus.py: without the shared corpus it says so and exits 0; with a corpus it
runs the scorer and passes its output through."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "lint_corpus.py"


def test_without_the_shared_corpus_it_says_so_and_exits_zero(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--shared", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "is not here; nothing to score" in proc.stdout


def test_runs_the_scorer_on_the_corpus(tmp_path):
    corpus = tmp_path / "lint-corpus-dev"
    (tmp_path / "tools").mkdir()
    corpus.mkdir()
    (corpus / "LABELS.md").write_text("## 1. a.py\n")
    (corpus / "a.py").write_text("x = 1\n")
    # a stand-in scorer: prints what it was given, as the real one prints precision and recall
    (tmp_path / "tools" / "score_lint.py").write_text(
        "import sys\nprint('precision 1.00 recall 1.00 corpus', sys.argv[1], 'tool', sys.argv[2])\n"
    )
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--shared", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"precision 1.00 recall 1.00 corpus {corpus}" in proc.stdout
    assert "ddpdoctor" in proc.stdout.split(" tool ")[1]
