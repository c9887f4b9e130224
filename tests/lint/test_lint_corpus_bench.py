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


def test_per_rule_precision_counts_true_false_and_conflicting_labels(tmp_path, capsys):
    sys.path.insert(0, str(BENCH.parent))
    from lint_rule_precision import main as per_rule

    corpus = tmp_path / "c"
    corpus.mkdir()
    # our own three-line script: DDP413 (DataParallel in a distributed script) on line 3
    script = 'import torch\nimport torch.distributed as dist\ndist.init_process_group("nccl"); m = torch.nn.DataParallel(x)\n'
    (corpus / "a.py").write_text(script)
    (corpus / "b.py").write_text(script)
    (corpus / "LABELS.md").write_text(
        "## 1. a.py\n| F1.1 | 3 | dataparallel |\n| N1.1 | 3 | something else |\n"
        "## 2. b.py\n| N2.1 | 3 | not a bug here |\n"
    )
    assert per_rule([str(corpus), str(tmp_path / "absent")]) == 0
    out = capsys.readouterr().out
    assert "absent is not here" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("DDP413"))
    assert row.split()[1:6] == ["1", "1", "0", "1", "0.50"]  # true, false, unlabelled, conflict, precision
    assert "false: c/b.py N2.1" in out and "label conflict (line is also a bug's anchor): c/a.py N1.1" in out


def test_per_rule_precision_without_corpora_exits_zero(capsys):
    sys.path.insert(0, str(BENCH.parent))
    from lint_rule_precision import main as per_rule

    assert per_rule([]) == 0
    assert "nothing to measure" in capsys.readouterr().out


def test_per_rule_precision_judges_an_opt_in_rule_on_its_reports(tmp_path, capsys):
    sys.path.insert(0, str(BENCH.parent))
    from lint_rule_precision import main as per_rule

    corpus = tmp_path / "c"
    corpus.mkdir()
    # our own script: DDP406 (opt-in, a hard-coded MASTER_PORT) on line 3, labelled a bug
    (corpus / "a.py").write_text(
        'import os\nimport torch.distributed as dist\nos.environ["MASTER_PORT"] = "29500"\n'
        'dist.init_process_group("nccl")\n'
    )
    (corpus / "LABELS.md").write_text("## 1. a.py\n| F1.1 | 3 | hard-coded port |\n")
    assert per_rule([str(corpus)]) == 0
    row = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("DDP406"))
    # one true report, none false: fit for the default selection, and the table says it differs
    assert "fit for default" in row and "differs from now" in row


def test_per_rule_precision_sets_aside_debatable_lines_and_errata(tmp_path, capsys):
    sys.path.insert(0, str(BENCH.parent))
    from lint_rule_precision import main as per_rule

    corpus = tmp_path / "c"
    corpus.mkdir()
    script = 'import torch\nimport torch.distributed as dist\ndist.init_process_group("nccl"); m = torch.nn.DataParallel(x)\n'
    for name in ("a.py", "b.py", "d.py"):
        (corpus / name).write_text(script)
    (corpus / "LABELS.md").write_text(
        "## 1. a.py\n| N1.1 | 3 | a trap of another kind |\n| M1.1 | 3 | this very report: debatable |\n"
        "## 2. b.py\n| N2.1 | 3 | labelled correct, shown wrong |\n"
        "## 3. d.py\n| N3.1 | 3 | a plain false alarm |\n"
    )
    errata = tmp_path / "errata.md"
    errata.write_text("| corpus | row | why |\n|---|---|---|\n| c | N2.1 | a run of torch shows it |\n")
    assert per_rule([str(corpus), "--errata", str(errata)]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("DDP413"))
    assert row.split()[1:6] == ["0", "1", "0", "1", "0.00"]  # only d.py is false
    assert "label conflict (line is also a debatable row's): c/a.py N1.1" in out
    assert "label set aside (a run of torch shows it): c/b.py N2.1" in out
    # without the errata the shown-wrong row counts as written
    assert per_rule([str(corpus), "--errata", "none"]) == 0
    row = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("DDP413"))
    assert row.split()[1:3] == ["0", "2"]
