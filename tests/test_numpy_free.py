"""ddpdoctor and its benchmarks run without numpy (the CPU torch wheel does not bring it): no object
collectives (they pickle through numpy) and no numpy warning from torch's import."""

from __future__ import annotations

import ast
import os
import socket
import subprocess
import sys

from helpers import REPO, without_numpy

# torch.distributed's *_object* collectives and Tensor.numpy() need numpy.
NEEDS_NUMPY = {"broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list",
               "send_object_list", "recv_object_list", "numpy"}


def test_no_object_collectives_anywhere():
    used = []
    for folder in ("ddpdoctor", "checks", "benchmarks"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if "lint" in path.relative_to(REPO).parts[:2]:
                continue  # the linter names these calls, it does not make them
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                if call and node.func.attr in NEEDS_NUMPY:
                    used.append(f"{path.relative_to(REPO)}:{node.lineno} {node.func.attr}")
    assert not used, used


def test_torchs_numpy_warning_is_silenced_where_ddpdoctor_imports_torch(tmp_path):
    env = {**os.environ, **without_numpy(tmp_path)}
    bare, ours = (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                       cwd=tmp_path, check=False)
        for code in ("import torch", "import ddpdoctor.runtime.launcher, torch.distributed")
    )
    assert "Failed to initialize NumPy" in bare.stderr  # the warning exists without numpy ...
    assert ours.returncode == 0 and "NumPy" not in ours.stderr, ours.stderr  # ... and we hide it


def test_the_benchmarks_broadcast_works_without_numpy(tmp_path):
    """benchmarks/_ddp_train.py hands rank 0's recommendation to rank 1 (broadcast_object_list crashed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "import sys, datetime, torch.distributed as dist\n"
        f"sys.path.insert(0, {str(REPO / 'benchmarks')!r})\n"
        "from _ddp_train import broadcast_json\n"
        "rank = int(sys.argv[1])\n"
        f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{port}', rank=rank, world_size=2,"
        " timeout=datetime.timedelta(seconds=30))\n"
        "got = broadcast_json({'value': 12.5, 'title': 'bucket_cap_mb ✓'} if rank == 0 else None, src=0)\n"
        "print(got)\n"
        "dist.destroy_process_group()\n"
    )
    env = {**os.environ, **without_numpy(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path) for r in (0, 1)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=90))
    finally:
        for p in procs:
            p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert out.strip() == "{'value': 12.5, 'title': 'bucket_cap_mb ✓'}"
