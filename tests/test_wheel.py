"""checks/ and profiles/ ship inside the built wheel: build it, install it in a fresh venv, run it."""

import json
import shutil
import subprocess
import sys
import zipfile

import pytest

from helpers import REPO


@pytest.mark.slow
def test_wheel_installs_and_runs_check(tmp_path):
    dist = tmp_path / "dist"
    build = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(REPO)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    wheel = next(dist.glob("ddpdoctor-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "ddpdoctor/checks/col001_collectives.py" in names
    assert any(n.startswith("ddpdoctor/profiles/") for n in names)
    assert "ddpdoctor/runtime/watch_site/sitecustomize.py" in names  # ddpdoctor watch's rank helper
    # A fresh venv; torch and the other dependencies come from the system site (installing torch again
    # would download gigabytes), ddpdoctor itself only from the wheel.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    inst = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert inst.returncode == 0, inst.stderr
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run([str(py), "-c", "import ddpdoctor.checks as c, ddpdoctor; print(ddpdoctor.__file__, c.__path__[0])"],
                           capture_output=True, text=True, cwd=work, timeout=60)
    assert str(venv) in where.stdout, where.stdout + where.stderr
    exe = venv / "bin" / "ddpdoctor"
    assert exe.exists() and shutil.which(str(exe))
    out = subprocess.run([str(exe), "check", "--json", str(work / "r.json"), "-q"], capture_output=True, text=True,
                         cwd=work, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    rep = json.loads((work / "r.json").read_text())
    assert rep["run"]["complete"] and {c["code"] for c in rep["checks"]} >= {"ENV001", "RDZ001", "COL001"}
