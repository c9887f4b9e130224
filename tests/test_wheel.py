"""checks/ and profiles/ ship inside the built wheel: build it, install it in a fresh venv, run it."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from helpers import REPO


def package_dirs() -> list[str]:
    """Where the running interpreter finds its packages: its site folders and what their .pth files added,
    without the standard library and without this checkout (so an editable install does not leak in)."""
    stdlib = [Path(sysconfig.get_path(k)).resolve() for k in ("stdlib", "platstdlib")]
    out = []
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        p = Path(entry).resolve()
        site = bool({"site-packages", "dist-packages"} & set(p.parts))
        # The checkout and its tests/ are left out, not a venv inside it (README's `.venv` in the clone).
        if (is_within(p, REPO) and not site) or str(p) in out:
            continue
        if any(is_within(p, s) for s in stdlib) and not site:
            continue
        out.append(str(p))
    return out


def is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def make_venv(path: Path, with_pip: bool = True) -> Path:
    """A fresh venv that sees the packages of the interpreter running the tests, and returns its python.

    `--system-site-packages` is not enough: when the tests run inside a venv, sys.executable's base is the
    interpreter the venv was made from, so the new venv would see that one's packages, not this venv's.
    The running interpreter's package folders go into a .pth file instead; a wheel installed into the new
    venv's own site-packages comes first on sys.path, so it wins over anything in them."""
    subprocess.run([sys.executable, "-m", "venv", *([] if with_pip else ["--without-pip"]), str(path)],
                   check=True, timeout=120)
    py = path / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    (Path(site) / "_running_env.pth").write_text("".join(d + "\n" for d in package_dirs()))
    return py


def test_new_venv_sees_the_running_interpreters_packages(tmp_path):
    """The venv the wheel goes into imports the dependencies this interpreter imports, from the same place
    (whether the tests run in a venv, the system Python or CI), and not this checkout's ddpdoctor."""
    import rich

    py = make_venv(tmp_path / "venv", with_pip=False)
    code = "\n".join(["import rich, importlib.util as u", "print(rich.__file__)",
                      "s = u.find_spec('ddpdoctor')", "print(s and s.origin)"])
    out = subprocess.run([str(py), "-c", code], check=False, capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    found, ddpdoctor = out.stdout.splitlines()
    assert Path(found).resolve() == Path(rich.__file__).resolve()
    assert ddpdoctor == "None" or REPO not in Path(ddpdoctor).resolve().parents


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
    # A fresh venv; torch and the other dependencies come from the running environment (installing torch
    # again would download gigabytes), ddpdoctor itself only from the wheel.
    venv = tmp_path / "venv"
    py = make_venv(venv)
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
