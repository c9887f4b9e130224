"""The CLI's startup, --help, the pure layers and every check module never import torch or textual."""

import json
import subprocess
import sys

HEAVY = ("torch", "textual")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _heavy(mods: set[str]) -> set[str]:
    return {m for m in mods if m.split(".")[0] in HEAVY}


def test_help_does_not_import_torch():
    mods = _modules_after(
        "import contextlib, io\nfrom ddpdoctor.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        main(['--help'])\n    except SystemExit:\n        pass"
    )
    assert not _heavy(mods)


def test_pure_layers_and_check_modules_do_not_import_torch():
    mods = _modules_after(
        "import ddpdoctor.report, ddpdoctor.registry, ddpdoctor.core.summary, ddpdoctor.core.world, ddpdoctor.runtime.launch_plan, ddpdoctor.model\n"
        "import ddpdoctor.model.tuning.ddp_buckets, ddpdoctor.recommend.model_spec, ddpdoctor.recommend.bucket_cap\n"
        "from ddpdoctor.registry import discover\ndiscover()"
    )
    assert not _heavy(mods)


def test_lint_command_does_not_import_torch(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("print('hi')\n")
    mods = _modules_after(
        "import contextlib, io\nfrom ddpdoctor.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        f"    try:\n        main(['lint', {str(script)!r}])\n    except SystemExit:\n        pass"
    )
    assert not _heavy(mods)


def test_hang_command_does_not_import_torch(tmp_path):
    """`ddpdoctor hang` reads evidence on any machine: no torch, no textual."""
    import shutil
    from pathlib import Path

    src = Path(__file__).parent / "fixtures" / "hang" / "python_stuck"
    shutil.copytree(src, tmp_path / "ev")
    mods = _modules_after(
        "import contextlib, io\nfrom ddpdoctor.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        f"    rc = main(['hang', {str(tmp_path / 'ev')!r}])\n"
        "assert rc == 1, rc\n"
        "import ddpdoctor.commands.hang, ddpdoctor.model.hang.analysis, ddpdoctor.readers.hang_files\n"
        "import ddpdoctor.report.hang_view"
    )
    assert not _heavy(mods)
