"""Never crash: random bytes, generated sources, a sample of CPython's stdlib and of torch's own
source. The full sweep over both trees lives in benchmarks/lint_bench.py --sweep."""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddpdoctor.lint import LintConfig, lint_paths, lint_source

# Every token the pre-filter and the rules react to, so generated text reaches the deep analysis.
WORDS = [
    "import torch.distributed as dist\n",
    "dist.init_process_group('nccl')\n",
    "rank = dist.get_rank()\n",
    "if rank == 0:\n",
    "if rank % 2:\n",
    "else:\n",
    "    dist.barrier()\n",
    "    dist.send(t, dst=1)\n",
    "    dist.recv(t, src=rank - 1)\n",
    "    req = dist.irecv(t, src=0)\n",
    "    t.sum()\n",
    "    req.wait()\n",
    "def f(rank, world_size):\n",
    "    return rank\n",
    "    f(rank + 1, 2)\n",
    "for epoch in range(3):\n",
    "    sampler.set_epoch(0)\n",
    "model = DistributedDataParallel(m)\n",
    "    model(x)\n",
    "while True:\n",
    "    torch.save(model.state_dict(), p)\n",
    "x = torch.load(p)\n",
    "os.environ['MASTER_PORT'] = '1'\n",
    "class A:\n",
    "    def g(self):\n",
    "        self.g()\n",
    "        return self.rank\n",
    "    break\n",
    "    raise ValueError\n",
    "mp.spawn(f, args=(4,), nprocs=4)\n",
    "f(*a, **k)\n",
    "x = 1 << 10**9\n",
    "    pass\n",
    "  ",
    "(",
    ")",
    ":",
    "lambda: 0\n",
    "async def h():\n",
    "    await x\n",
    "match x:\n",
    "if local_rank == 0:\n",
    "    os.makedirs(d)\n",
    "    open(p, 'w')\n",
    "model.save_pretrained(d)\n",
    "np.save(p, x)\n",
    "try:\n",
    "except KeyboardInterrupt:\n",
    "    save_checkpoint(p)\n",
    "os.environ['CUDA_VISIBLE_DEVICES'] = str(local_rank)\n",
    "torch.cuda.set_device(local_rank)\n",
    "parser.add_argument('--rank', '--local_rank', type=int)\n",
    "if isinstance(model, DistributedDataParallel):\n",
    "type Alias = int\n",
    "def g[T](x: T) -> T:\n",
]
EVERY_RULE = LintConfig(select=("DDP",), world_sizes=(2, 3))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_random_bytes_never_crash(data):
    head = b"import torch.distributed as dist\ndist.init_process_group()\n"
    for f in lint_source("rand.py", head + data, EVERY_RULE):
        assert f.evidence.get("kind") != "internal", f.message


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(WORDS), max_size=40))
def test_generated_sources_never_crash(parts):
    src = "".join(parts)
    for f in lint_source("gen.py", src, EVERY_RULE):
        assert f.evidence.get("kind") != "internal", f"{f.message}\n---\n{src}"


SIMPLE = [w.strip() for w in WORDS if w.strip() and not w.strip().endswith(":") and w.strip() not in "():"]
HEADERS = [
    "if local_rank == 0:",
    "except KeyboardInterrupt:",
    "if rank == 0:",
    "if rank % 2:",
    "for epoch in range(3):",
    "for p in range(world_size):",
    "def f(rank, world_size):",
    "while flag:",
    "with model.no_sync():",
    "try:",
    "class A:",
    "if args.x:",
    "def g(self):",
]


def _render(block, depth=0) -> str:
    out = []
    for item in block or ["pass"]:
        if isinstance(item, tuple):
            header, body = item
            if header.startswith("except"):  # a handler needs its try
                out.append("    " * depth + "try:\n" + "    " * (depth + 1) + "pass")
            out.append("    " * depth + header)
            out.append(_render(body, depth + 1))
            if header == "try:":
                out.append("    " * depth + "finally:\n" + "    " * (depth + 1) + "dist.barrier()")
        else:
            out.append("    " * depth + item)
    return "\n".join(out)


_blocks = st.recursive(
    st.lists(st.sampled_from(SIMPLE), max_size=4),
    lambda inner: st.lists(
        st.one_of(st.sampled_from(SIMPLE), st.tuples(st.sampled_from(HEADERS), inner)), max_size=5
    ),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_blocks)
def test_generated_valid_programs_never_crash(block):
    src = "import torch.distributed as dist\ndist.init_process_group()\n" + _render(block) + "\n"
    for f in lint_source("prog.py", src, EVERY_RULE):
        assert f.evidence.get("kind") != "internal", f"{f.message}\n---\n{src}"


NEWER_SYNTAX = [
    "type Pair = tuple[int, int]\n",
    "type Tree[T] = list[T | Tree[T]]\n",
    "def first[T](xs: list[T]) -> T:\n    return xs[0]\n",
    "class Box[T]:\n    item: T\n",
    "async def fetch[K, V](d: dict[K, V], k: K) -> V:\n    return d[k]\n",
    "def wrap[**P, R](fn: Callable[P, R]) -> Callable[P, R]:\n    return fn\n",
]


@pytest.mark.parametrize("snippet", NEWER_SYNTAX)
def test_pep695_syntax_is_linted_not_called_broken(snippet):
    """PEP 695 code linted by an older Python: its type parameters are erased and the file is linted
    (the lint engine's tests cover the syntax that cannot be erased, which gets a DDP000)."""
    src = (
        "import torch.distributed as dist\ndist.init_process_group()\nx = 1\n" + snippet + "dist.barrier()\n"
    )
    found = lint_source("new.py", src, EVERY_RULE)
    assert all(f.code != "DDP000" for f in found), [f.message for f in found]


def _sample(root: Path, n: int, seed: int) -> list[Path]:
    files = sorted(root.rglob("*.py"))
    return random.Random(seed).sample(files, min(n, len(files)))


def _no_internal_errors(paths: list[Path]) -> None:
    found = lint_paths(paths, LintConfig(select=("DDP",), world_sizes=(2, 4)))
    internal = [f for f in found if f.evidence.get("kind") == "internal"]
    assert not internal, [(f.location.path, f.message) for f in internal[:5]]


@pytest.mark.slow
def test_stdlib_sample_never_crashes():
    _no_internal_errors(_sample(Path(sysconfig.get_paths()["stdlib"]), 150, 1))


@pytest.mark.slow
def test_torch_source_sample_never_crashes():
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torch is not installed")
    root = Path(list(spec.submodule_search_locations)[0])
    dist_files = sorted((root / "distributed").rglob("*.py"))
    sample = random.Random(2).sample(dist_files, min(40, len(dist_files))) + _sample(root, 60, 3)
    _no_internal_errors(sample)


def test_lint_never_imports_torch(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n"
        "if dist.get_rank() == 0:\n    dist.barrier()\n"
    )
    code = (
        "import sys\nfrom ddpdoctor.cli import main\n"
        f"rc = main(['lint', '--isolated', {str(script)!r}])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'textual'))\n"
        "print('IMPORTED', bad)\nsys.exit(0 if rc == 1 and not bad else 3)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "IMPORTED []" in proc.stdout
