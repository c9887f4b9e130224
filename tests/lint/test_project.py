"""Project-wide analysis: calls followed from one linted file into another (ddpdoctor.lint.project)."""

from __future__ import annotations

import shutil
from pathlib import Path

from ddpdoctor.lint import LintConfig, lint_paths
from ddpdoctor.lint.project import Project
from ddpdoctor.script.interp import UNKNOWN

FIXTURES = Path(__file__).parent / "fixtures"


def _codes(paths, select):
    return [
        (Path(f.location.path).name, f.location.line, f.code, f.message)
        for f in lint_paths(paths, LintConfig(select=select), jobs=1)
    ]


def test_module_names_from_paths():
    root = FIXTURES / "project_eval" / "src"
    p = Project(sorted(root.rglob("*.py")), roots=[str(root)])
    assert p.by_name["proj.engine"].name == "engine.py"
    assert p.by_name["engine"].name == "engine.py"
    assert p.by_name["proj"].name == "__init__.py"
    train = root / "proj" / "train.py"
    assert p.module_path("engine", str(train), level=1) == root / "proj" / "engine.py"


def test_forward_in_another_file_reached_by_rank_0_only():
    found = _codes([FIXTURES / "project_eval"], ("DDP308",))
    assert len(found) == 1
    name, line, _code, message = found[0]
    assert name == "train.py"
    text = (FIXTURES / "project_eval" / "src" / "proj" / "train.py").read_text().splitlines()
    assert "expect: DDP308" in text[line - 1]
    assert "train.py:20 -> engine.py:10" in message  # the evidence chain crosses the files


def test_a_file_alone_infers_the_forward_from_the_callee_name_only():
    # alone, train.py cannot see engine.py's forward: it reports the DDP wrapper handed to a
    # function named for evaluation, at the same line, without the other file's line
    train = FIXTURES / "project_eval" / "src" / "proj" / "train.py"
    found = _codes([train], ("DDP308",))
    assert len(found) == 1
    _name, line, _code, message = found[0]
    assert "expect: DDP308" in train.read_text().splitlines()[line - 1]
    assert "inside `evaluate(...)`, which is handed the DDP wrapper" in message
    assert "engine.py" not in message


def test_project_results_are_cached_with_the_other_files(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "project_eval" / "src", src)
    cache = tmp_path / "cache"
    first = lint_paths([src], LintConfig(select=("DDP308",)), jobs=1, cache_dir=cache)
    assert [f.code for f in first] == ["DDP308"]
    engine = src / "proj" / "engine.py"
    # the helper stops calling the model: the cached finding for train.py must not come back
    engine.write_text(engine.read_text().replace("model(x)", "model.module(x)"))
    again = lint_paths([src], LintConfig(select=("DDP308",)), jobs=1, cache_dir=cache)
    assert again == []


def test_set_epoch_missing_when_the_epoch_pass_lives_in_another_module():
    bad = _codes([FIXTURES / "project_epochs" / "bad"], ("DDP101",))
    assert [(n, line) for n, line, _c, _m in bad] == [("main.py", 18)]  # the epoch loop: where set_epoch goes
    assert "main.py:19 -> engine.py:6" in bad[0][3]
    # the other module reseeds the sampler: quiet; and main.py alone cannot tell: quiet
    assert _codes([FIXTURES / "project_epochs" / "ok"], ("DDP101",)) == []
    assert _codes([FIXTURES / "project_epochs" / "bad" / "main.py"], ("DDP101",)) == []


def test_a_helper_called_under_a_rank_test_in_another_file_is_guarded():
    root = FIXTURES / "project_guard"
    files = sorted(root.glob("*.py"))
    project = Project(files, roots=[str(root)])
    ckpt = project.analysis(root / "ckpt.py")
    save = next(c for c, q in ckpt.calls if q == "torch.save")
    guard = ckpt.rank_guard(save)
    assert guard is not None and guard.kind == "global"
    assert guard.path.endswith("train.py") and guard.chain == (14,)
    alone = Project([root / "ckpt.py"]).analysis(root / "ckpt.py")
    assert alone.rank_guard(next(c for c, q in alone.calls if q == "torch.save")) is None


CALLBACKS = FIXTURES / "project_callback"  # utils/dist.py: runners that call the function handed in

# a training script whose rank-0-only checkpoint barrier is a DDP301, started through a runner
_SCRIPT = """\
import functools

import torch
import torch.distributed as dist

{imports}


def save_checkpoint(step):
    dist.barrier()


def maybe_save(rank, step):
    if rank == 0 and step == 2:
        save_checkpoint(step)  # expect: DDP301 (where rank 0 alone goes on to the barrier)


def main(rank, world):
    grad = torch.ones(1000)
    for step in range(5):
        dist.all_reduce(grad)
        maybe_save(rank, step)


{start}
"""
_STARTS = {
    "positional": ("from utils.dist import run", "run(main)"),
    "keyword": ("import utils.dist as launcher", "launcher.run(fn=main)"),
    "keywords_call": ("from utils import dist as launcher", "launcher.run_keywords(main)"),
    "star": ("from utils.dist import run_star", "run_star(main)"),
    "spawn": ("from utils.dist import spawn", "spawn(main, world=2)"),
    "partial": ("from utils.dist import run", "run(functools.partial(main))"),
    "lambda": ("from utils.dist import run", "run(lambda r, w: main(r, w))"),
    "exit": ("from utils.dist import run_then_exit", "run_then_exit(main)"),
    "fail": ("from utils.dist import run_then_fail", "run_then_fail(main)"),
}


def _callback_project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(CALLBACKS, root)
    for name, (imports, start) in _STARTS.items():
        (root / f"train_{name}.py").write_text(_SCRIPT.format(imports=imports, start=start))
    # every rank saves together: fine however it is started
    ok = _SCRIPT.format(imports="from utils.dist import run", start="run(main)")
    (root / "train_ok.py").write_text(ok.replace("rank == 0 and step == 2", "step == 2"))
    return root


def _where(paths):
    return sorted((n, line) for n, line, _c, _m in _codes(paths, ("DDP301",)))


def test_a_function_handed_to_a_runner_in_another_file_keeps_its_findings(tmp_path):
    # run(main), run(fn=main), fn(*args), fn(rank=..., world=...), mp.spawn through a helper,
    # functools.partial and lambda, a runner that ends in a raise: the project's runner calls the
    # training function it is handed
    root = _callback_project(tmp_path)
    runner = root / "utils" / "dist.py"
    line = next(i for i, t in enumerate(_SCRIPT.splitlines(), 1) if "# expect: DDP301" in t)
    everything = _where([root])
    for name in _STARTS:
        script = root / f"train_{name}.py"
        expected = [(script.name, line)]
        assert _where([script]) == expected, name  # alone, the runner is not known
        assert _where([script, runner]) == expected, name  # linting the runner too loses nothing
        assert [w for w in everything if w[0] == script.name] == expected, name
    assert len(everything) == len(_STARTS)  # and nothing for train_ok.py


def test_the_chain_crosses_the_runner_and_comes_back(tmp_path):
    root = _callback_project(tmp_path)
    [(_n, _line, _code, message)] = _codes(
        [root / "train_positional.py", root / "utils" / "dist.py"], ("DDP301",)
    )
    assert "train_positional.py:25 -> dist.py:9 -> train_positional.py:22" in message
    assert "reached through the call on dist.py:9" in message  # the other rank's place names the file


_TRAINER = """\
import torch
import torch.distributed as dist

from utils.dist import fit


def save_checkpoint(step):
    dist.barrier()


class Trainer:
    def __init__(self):
        self.grad = torch.ones(10)

    def step(self, rank, step):
        dist.all_reduce(self.grad)
        if rank == 0 and step == 2:
            self.save(step)  # expect: DDP301

    def save(self, step):
        save_checkpoint(step)


{start}
"""


def test_an_object_or_class_handed_to_a_runner_in_another_file_keeps_its_findings(tmp_path):
    root = _callback_project(tmp_path)
    runner = root / "utils" / "dist.py"
    line = next(i for i, t in enumerate(_TRAINER.splitlines(), 1) if "# expect: DDP301" in t)
    for name, start in (("object", "trainer = Trainer()\nfit(trainer)"), ("class", "fit(Trainer())")):
        script = root / f"fit_{name}.py"
        script.write_text(_TRAINER.format(start=start))
        assert _where([script]) == [(script.name, line)], name
        assert _where([script, runner]) == [(script.name, line)], name


def test_a_starred_tuple_spreads_over_the_parameters():
    import ast

    from ddpdoctor.script.interp import Interpreter

    src = "def f(rank, world):\n    pass\n\nargs = (3, 4)\nf(*args)\nf(*unknown, 5)\n"
    it = Interpreter(ast.parse(src), {}, 2, 0)
    seen = []
    bind = it._bind
    it._bind = lambda ref, args, kwargs, **kw: seen.append(list(args)) or bind(ref, args, kwargs, **kw)
    it.run_module()
    assert seen == [[3, 4], [UNKNOWN]]


HELPERS = FIXTURES / "project_helpers"  # train.py calls checkpoint helpers kept in ckpt.py


def _expected(path: Path) -> list[tuple[str, int, str]]:
    return [
        (path.name, i, line.rsplit("expect: ", 1)[1].strip())
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if "expect: " in line
    ]


def test_a_checkpoint_helper_in_another_file_run_by_every_rank():
    found = _codes([HELPERS / "bad"], ("DDP501", "DDP503"))
    assert sorted((n, line, c) for n, line, c, _m in found) == _expected(HELPERS / "bad" / "train.py")
    by_code = {c: m for _n, _l, c, m in found}
    assert "ckpt.py:11" in by_code["DDP501"] and "train.py:22 -> ckpt.py:11" in by_code["DDP501"]
    assert "ckpt.py:15" in by_code["DDP503"]
    # the rank test at the call, and map_location in the helper: quiet; the script alone cannot tell
    assert _codes([HELPERS / "ok"], ("DDP501", "DDP503")) == []
    assert _codes([HELPERS / "bad" / "train.py"], ("DDP501", "DDP503")) == []


def test_a_helper_that_guards_itself_or_reports_itself_is_not_reported_again(tmp_path):
    root = tmp_path / "proj"
    shutil.copytree(HELPERS / "bad", root)
    ckpt = root / "ckpt.py"
    text = ckpt.read_text()
    # the helper tests the rank itself: the call site needs no guard
    ckpt.write_text(
        text.replace("import torch\n", "import torch\nimport torch.distributed as dist\n").replace(
            "    os.makedirs(out_dir, exist_ok=True)\n",
            "    if dist.get_rank() != 0:\n        return\n    os.makedirs(out_dir, exist_ok=True)\n",
        )
    )
    found = _codes([root], ("DDP501", "DDP503"))
    assert [c for _n, _l, c, _m in found].count("DDP501") == 0
    # the helper file is distributed code itself: its own torch.load is reported there, once
    loads = [(n, line) for n, line, c, _m in found if c == "DDP503"]
    assert loads == [("ckpt.py", 18)]


def test_the_global_rank_handed_to_a_helper_in_another_file_that_uses_it_as_a_device():
    root = FIXTURES / "project_zero_first"
    found = _codes([root], ("DDP402",))
    assert [(n, line) for n, line, _c, _m in found] == [(n, line) for n, line, _c in _expected(root / "train.py")]
    assert "dist_utils.py:11" in found[0][3] and "`local_rank`" in found[0][3]
    assert _codes([root / "train.py"], ("DDP402",)) == []  # alone, the helper's body is unknown


def test_a_saving_object_of_another_file_reached_through_a_package_and_a_loop_helper(tmp_path):
    """``pkg.Saver`` (re-exported by the package's __init__) is built here and handed to
    ``pkg.train``, whose loop calls ``saver.save`` on every rank: reported at the call here, naming
    the line in the loop where the rank test belongs."""
    root = FIXTURES / "project_classes"
    found = _codes([root], ("DDP501",))
    assert [(n, line) for n, line, _c, _m in found] == [(n, line) for n, line, _c in _expected(root / "train.py")]
    message = found[0][3]
    assert "loop.py:10" in message and "saver.py:15" in message
    # the loop's call guarded by the rank: quiet
    proj = tmp_path / "proj"
    shutil.copytree(root, proj)
    loop = proj / "pkg" / "loop.py"
    loop.write_text(
        loop.read_text()
        .replace("import torch\n", "import torch\nimport torch.distributed as dist\n")
        .replace("if step % 100 == 0:", "if step % 100 == 0 and dist.get_rank() == 0:")
    )
    assert _codes([proj], ("DDP501",)) == []


def test_two_scripts_reaching_one_unmapped_load_report_it_once(tmp_path):
    root = tmp_path / "proj"
    shutil.copytree(HELPERS / "bad", root)
    (root / "finetune.py").write_text((root / "train.py").read_text())
    found = _codes([root], ("DDP503",))
    assert [(n, line) for n, line, _c, _m in found] == [("finetune.py", 16)]


def test_a_folder_created_without_exist_ok_in_another_file_by_every_rank():
    root = FIXTURES / "project_writes"
    found = _codes([root / "bad"], ("DDP505",))
    want = [(n, line) for n, line, _c in _expected(root / "bad" / "train.py")]
    assert [(n, line) for n, line, _c, _m in found] == want
    assert "paths.py:8" in found[0][3] and "`prepare_output`" in found[0][3]
    assert _codes([root / "ok"], ("DDP505",)) == []
    assert _codes([root / "bad" / "train.py"], ("DDP505",)) == []


def test_a_standard_library_import_is_not_taken_for_a_project_file_of_that_name(tmp_path):
    root = tmp_path / "proj"
    (root / "pkg" / "_dynamo").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "_dynamo" / "__init__.py").write_text("")
    (root / "pkg" / "_dynamo" / "logging.py").write_text("def getLogger(name):\n    return name\n")
    (root / "pkg" / "train.py").write_text("import logging\nlog = logging.getLogger(__name__)\n")
    (root / "logging_tools.py").write_text("")
    (root / "random.py").write_text("def seed(n):\n    return n\n")  # a project's own random.py at its top
    files = sorted(root.rglob("*.py"))
    p = Project(files, roots=[str(root)])
    train = str(root / "pkg" / "train.py")
    assert p.by_name["logging"].name == "logging.py"  # the suffix name still exists...
    assert p.module_path("logging", train) is None  # ...but `import logging` is the stdlib's
    assert p.module_path("pkg._dynamo.logging", train) == root / "pkg" / "_dynamo" / "logging.py"
    assert p.module_path("random", train) == root / "random.py"  # a top-level file shadows, as in Python


def test_a_helper_the_spawning_parent_calls_before_the_workers_start_runs_once():
    root = FIXTURES / "project_spawn_parent"
    found = _codes([root / "bad"], ("DDP505",))
    want = [(n, line) for n, line, _c in _expected(root / "bad" / "train.py")]
    assert [(n, line) for n, line, _c, _m in found] == want
    assert _codes([root / "ok"], ("DDP505",)) == []


def test_a_dataset_split_per_rank_in_another_module_is_not_unsharded(tmp_path):
    """contriever's pattern: train.py builds a RandomSampler over ``data.load_data(opt)``, and
    data.py splits its files by ``get_rank()`` in a helper: each rank draws from its own part."""
    (tmp_path / "data.py").write_text(
        "import numpy as np\n"
        "import torch.distributed as dist\n\n\n"
        "def _files(paths):\n"
        "    return list(np.array_split(paths, dist.get_world_size()))[dist.get_rank()]\n\n\n"
        "def load_data(opt):\n"
        "    return Shards(_files(opt.paths))\n"
    )
    train = tmp_path / "train.py"
    train.write_text(
        "import torch\n"
        "import torch.distributed as dist\n"
        "from torch.utils.data import DataLoader, RandomSampler\n\n"
        "import data\n\n\n"
        "def main(opt):\n"
        "    dist.init_process_group('nccl')\n"
        "    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))\n"
        "    dataset = data.load_data(opt)\n"
        "    loader = DataLoader(dataset, sampler=RandomSampler(dataset), batch_size=4)\n"
        "    for x in loader:\n"
        "        model(x).sum().backward()\n"
    )
    assert _codes([tmp_path], ("DDP105",)) == []
    # alone, train.py cannot see the split: the loader looks unsharded
    assert [c for _n, _l, c, _m in _codes([train], ("DDP105",))] == ["DDP105"]


def test_one_gpu_per_process_set_by_an_imported_module_leaves_cuda_0_loads_alone(tmp_path):
    """guided-diffusion's family: dist_util.setup_dist() sets CUDA_VISIBLE_DEVICES from the rank, so
    a checkpoint saved from cuda:0 comes back onto each process's own GPU."""
    (tmp_path / "dist_util.py").write_text(
        "import os\n"
        "import torch.distributed as dist\n\n\n"
        "def setup_dist(rank):\n"
        "    os.environ['CUDA_VISIBLE_DEVICES'] = f'{rank % 8}'\n"
        "    dist.init_process_group('nccl')\n"
    )
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import torch\n"
        "import torch.distributed as dist\n\n"
        "import dist_util\n\n\n"
        "def main(rank, path):\n"
        "    dist_util.setup_dist(rank)\n"
        "    state = torch.load(path)\n"
        "    dist.barrier()\n"
        "    return state\n"
    )
    assert _codes([tmp_path], ("DDP503",)) == []
    # alone, sample.py cannot see where the GPUs are pinned
    assert [c for _n, _l, c, _m in _codes([sample], ("DDP503",))] == ["DDP503"]
