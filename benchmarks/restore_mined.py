"""Restore a mined lint set (benchmarks/mined/SET) from its sources: the labels live here, the
third-party files do not (they are never copied into the project).

Each row of SET/SOURCES.md names a public repository, a path, a commit and the file's sha256. This
script writes each file, byte for byte, into DEST (default: ../mined/SET beside the checkout), then
copies LABELS.md beside them, so `python ../shared/tools/score_lint.py DEST "$(which ddpdoctor)"`
scores it. Files come from a local git directory per repository (`--mirror DIR`, where
DIR/owner+name/repo is a clone; the layout of a `fetch` snapshot) or, without one, from
GitHub over the network (a shallow fetch of the one commit). A file whose sha256 differs is
refused, not written.

    python benchmarks/restore_mined.py AC [--dest ../mined/AC] [--mirror /work/.mirror]
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent / "mined"
_ROW = re.compile(r"^\|\s*\d+\s*\|(?P<cells>.*)\|\s*$")


def rows(sources: Path) -> list[dict[str, str]]:
    """The file rows of a SOURCES.md table: file, repo, path, commit, sha256 (found by their column
    names in the header, so a table with more columns reads the same)."""
    lines = sources.read_text().splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.startswith("|") and "commit" in ln and "sha256" in ln)
    names = [c.strip() for c in lines[header].strip("|").split("|")]
    out = []
    for ln in lines[header + 2 :]:
        if not _ROW.match(ln):
            continue
        cells = [c.strip().strip("`") for c in ln.strip().strip("|").split("|")]
        row = dict(zip(names, cells))
        # (a commit cell may say more: "abc123... (file last changed in def456...)")
        commit = re.search(r"\b[0-9a-f]{40}\b", row.get("commit", ""))
        sha = re.search(r"\b[0-9a-f]{64}\b", row.get("sha256", ""))
        if commit and sha and all(row.get(k) for k in ("file", "repo", "path")):
            out.append({**row, "commit": commit.group(0), "sha256": sha.group(0)})
    return out


def _git_dir(mirror: Path | None, repo: str) -> Path | None:
    if mirror is None:
        return None
    base = mirror / repo.replace("/", "+") / "repo"
    for cand in (base, base / ".git"):
        if (cand / "HEAD").exists() or (cand / "objects").is_dir():
            return cand
    return None


def _from_network(repo: str, commit: str, path: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        git = ["git", "-C", tmp]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run(
            [*git, "fetch", "-q", "--depth", "1", f"https://github.com/{repo}", commit], check=True, timeout=300
        )
        return subprocess.run([*git, "show", f"{commit}:{path}"], check=True, capture_output=True).stdout


def fetch_file(row: dict[str, str], mirror: Path | None) -> bytes:
    git_dir = _git_dir(mirror, row["repo"])
    if git_dir is not None:
        return subprocess.run(
            ["git", "--git-dir", str(git_dir), "show", f"{row['commit']}:{row['path']}"],
            check=True,
            capture_output=True,
        ).stdout
    return _from_network(row["repo"], row["commit"], row["path"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("set", help="the set's name, a folder under benchmarks/mined (AC, AD, ...)")
    ap.add_argument("--dest", type=Path, help="where to write it (default: ../mined/SET beside the checkout)")
    ap.add_argument("--mirror", type=Path, help="folder of local clones, DIR/owner+name/repo")
    args = ap.parse_args(argv)
    src = HERE / args.set
    if not (src / "SOURCES.md").is_file():
        print(f"restore_mined: no set {args.set!r} under {HERE}", file=sys.stderr)
        return 2
    dest = args.dest or Path(__file__).resolve().parents[2] / "mined" / args.set
    dest.mkdir(parents=True, exist_ok=True)
    bad = 0
    table = rows(src / "SOURCES.md")
    for row in table:
        try:
            data = fetch_file(row, args.mirror)
        except (subprocess.SubprocessError, OSError) as e:
            print(f"  {row['file']}: cannot fetch {row['repo']}@{row['commit'][:12]}: {e}", file=sys.stderr)
            bad += 1
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest != row["sha256"]:
            print(f"  {row['file']}: sha256 {digest[:12]} is not the recorded {row['sha256'][:12]}", file=sys.stderr)
            bad += 1
            continue
        (dest / row["file"]).write_bytes(data)
    shutil.copyfile(src / "LABELS.md", dest / "LABELS.md")
    print(f"{args.set}: {len(table) - bad} of {len(table)} files restored into {dest}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
