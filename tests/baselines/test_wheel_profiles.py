"""The built wheel carries every profile and finds them from wherever it is installed."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest
from helpers import REPO

from ddpdoctor.baselines import shipped_files


@pytest.mark.slow
def test_wheel_ships_the_profiles_and_loads_them(tmp_path):
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(REPO)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    wheel = next(dist.glob("ddpdoctor-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"ddpdoctor/profiles/{f.name}" for f in shipped_files()}
    assert len(shipped) >= 10 and shipped <= names
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = (
        "import ddpdoctor, ddpdoctor.baselines as b\nprint(ddpdoctor.__file__)\n"
        "print(' '.join(p.name for p in b.list_profiles()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=elsewhere,
        env={**os.environ, "PYTHONPATH": str(unpacked)},
    )
    assert out.returncode == 0, out.stderr
    where, listed = out.stdout.strip().splitlines()
    assert where.startswith(str(unpacked))  # the wheel's copy, not the checkout
    assert set(listed.split()) == {f.removeprefix("ddpdoctor/profiles/").rsplit(".", 1)[0] for f in shipped}
