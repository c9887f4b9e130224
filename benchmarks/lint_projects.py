"""``ddpdoctor lint`` in project mode on whole repositories, as users run it (``ddpdoctor lint .``).

For every repository folder under ROOT (each a checkout of a public repository; a ``.lint-pin``
file in it, one line ``<repo> <commit>``, names what it is), this lints the folder as one project
and then every file alone, and prints per repository: the Python files, the findings in project
mode, the wall time of the project run, the findings of the files linted one by one, the
findings only project mode makes (bugs whose parts sit in two files), and every single-file finding
project mode lost (there should be none). The repositories are third-party code: fetch them into a
temporary folder outside the project; nothing of them goes into it.

    python benchmarks/lint_projects.py ROOT [--show]

Pinned set used for the figures in docs (fetched with the session's fetch tool, *.py files only):
karpathy/nanoGPT 3adf61e1, facebookresearch/deit 7e160fe4, facebookresearch/dino 7c446df5,
FareedKhan-dev/train-llm-from-scratch 98f808c4, meta-llama/llama-cookbook 0e003351,
pytorch/examples 77f55b91. Without ROOT (or with an empty one) this says so and exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def _key(f) -> tuple:
    loc = f.location
    return (os.path.realpath(loc.path), loc.line, f.code)


def measure(repo: Path, show: bool) -> dict:
    from ddpdoctor.lint import lint_paths
    from ddpdoctor.lint.files import discover

    files = discover([str(repo)], [])
    t = time.perf_counter()
    project = lint_paths([repo])
    wall = time.perf_counter() - t
    alone = []
    t = time.perf_counter()
    for f in files:
        alone.extend(lint_paths([f], jobs=1))
    wall_alone = time.perf_counter() - t
    p_keys = {_key(f) for f in project}
    a_keys = {_key(f) for f in alone}
    lost = sorted(a_keys - p_keys)
    gained = [f for f in project if _key(f) not in a_keys]
    if show:
        for f in project:
            mark = "  (project only)" if _key(f) not in a_keys else ""
            print(f"    {os.path.relpath(f.location.path, repo)}:{f.location.line} {f.code}{mark}")
    for path, line, code in lost:
        print(f"    LOST in project mode: {os.path.relpath(path, repo)}:{line} {code}")
    return {
        "files": len(files),
        "project": len(project),
        "wall": wall,
        "alone": len(alone),
        "wall_alone": wall_alone,
        "gained": len(gained),
        "lost": len(lost),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", type=Path, help="a folder of repository checkouts")
    ap.add_argument("--show", action="store_true", help="list every finding")
    args = ap.parse_args(argv)
    repos = sorted(p for p in args.root.iterdir() if p.is_dir()) if args.root and args.root.is_dir() else []
    if not repos:
        print(f"lint projects: no repositories under {args.root}; nothing to measure (exit 0)")
        return 0
    load = os.getloadavg()
    print(
        f"lint projects: {len(repos)} repositories under {args.root}; load average {load[0]:.2f} "
        f"{load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores; one run each, cold (no cache)"
    )
    print(
        f"{'repository':42} {'commit':9} {'.py':>4} {'proj.':>5} {'wall s':>6} {'alone':>5} "
        f"{'wall s':>6} {'+proj':>5} {'lost':>4}"
    )
    total_lost = 0
    for repo in repos:
        pin = (repo / ".lint-pin").read_text().split() if (repo / ".lint-pin").is_file() else [repo.name, "?"]
        if args.show:
            print(f"  {pin[0]}:")
        r = measure(repo, args.show)
        total_lost += r["lost"]
        print(
            f"{pin[0].removeprefix('github.com/')[:42]:42} {pin[1][:8]:9} {r['files']:4} {r['project']:5} "
            f"{r['wall']:6.2f} {r['alone']:5} {r['wall_alone']:6.2f} {r['gained']:5} {r['lost']:4}"
        )
    print(
        "proj.: findings linting the repository as one project (`ddpdoctor lint REPO`); alone: the "
        "sum over its files linted one by one; +proj: findings only project mode makes; lost: "
        f"single-file findings project mode does not make (total {total_lost})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
