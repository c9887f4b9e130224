"""Which rank a value is and which rank test guards a statement (ddpdoctor.script.ranks)."""

import ast
import textwrap

from ddpdoctor.script.analysis import ModuleAnalysis

SRC = textwrap.dedent(
    """
    import argparse, os
    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", "--local_rank", type=int, default=-1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--world_rank", dest="grank", type=int)
    args = parser.parse_args()
    config = vars(args)

    def is_main_process():
        return dist.get_rank() == 0

    class Trainer:
        def __init__(self):
            self.gpu_id = int(os.environ["LOCAL_RANK"])
            self.global_rank = dist.get_rank()
            self.ngpus = torch.cuda.device_count()

        def save(self):
            torch.save({}, "ckpt.pt")

        def maybe_save(self):
            if self.gpu_id == 0:
                self.save()

        def node_index(self):
            return self.global_rank % self.ngpus

    def evaluate():
        if not is_main_process():
            return
        torch.save({}, "eval.pt")

    print(args.rank)
    if config["rank"] == 0:
        torch.save({}, "a.pt")
    if args.node_rank == 0:
        torch.save({}, "b.pt")
    if args.grank in (-1, 0):
        torch.save({}, "c.pt")
    """
)


def _m():
    return ModuleAnalysis("train.py", SRC, ast.parse(SRC))


def _expr(m, text):
    return next(n for n in ast.walk(m.tree) if isinstance(n, ast.expr) and ast.unparse(n) == text)


def _save(m, path):
    return next(c for c, q in m.calls if q == "torch.save" and ast.unparse(c.args[1]) == repr(path))


def test_argparse_dest_shared_by_local_rank_flag_is_local():
    m = _m()
    assert m.argparse_dests()["rank"].kind == "local"
    assert m.argparse_dests()["node_rank"].kind == "node"
    assert m.rank_kind(_expr(m, "args.rank")) == "local"
    assert m.rank_kind(_expr(m, "config['rank']")) == "local"  # config filled from vars(args)


def test_self_attributes_set_in_init():
    m = _m()
    assert m.rank_kind(_expr(m, "self.gpu_id")) == "local"
    assert m.rank_kind(_expr(m, "self.global_rank")) == "global"
    assert m.rank_kind(_expr(m, "self.global_rank % self.ngpus")) == "local"


def test_guards_of_each_kind():
    m = _m()
    assert m.rank_guard(_save(m, "a.pt")).kind == "local"
    assert m.rank_guard(_save(m, "b.pt")).kind == "node"
    assert m.rank_guard(_save(m, "eval.pt")).kind == "global"  # early return on a file-local predicate


def test_guard_through_the_callers_names_the_chain():
    m = _m()
    g = m.rank_guard(_save(m, "ckpt.pt"))
    assert g is not None and g.kind == "local"
    call = next(c for c, _q in m.calls if ast.unparse(c.func) == "self.save")
    assert g.chain == (call.lineno,)
    assert m.chain_text(g.chain, 22).startswith(f"train.py:{call.lineno} -> train.py:22")


def test_unguarded_call_site_means_no_guard():
    src = SRC + "\nTrainer().save()\n"
    m = ModuleAnalysis("t.py", src, ast.parse(src))
    assert m.rank_guard(_save(m, "ckpt.pt")) is None


WRAPPERS = textwrap.dedent(
    """
    import torch
    import torch.distributed as dist

    def is_main_process():
        return dist.get_rank() == 0

    def save_on_master(*args, **kwargs):
        if is_main_process():
            torch.save(*args, **kwargs)

    def log_local(msg):
        \"\"\"Only the first process of each node prints.\"\"\"
        if int(os.environ["LOCAL_RANK"]) != 0:
            return
        print(msg)

    save_on_master({}, "a.pt")
    log_local("hi")
    print("x")
    """
)


def test_minus_one_is_not_a_rank_test():
    src = "import torch\nif args.local_rank == -1:\n    torch.save({}, 'a')\nif args.local_rank in (-1, 0):\n    torch.save({}, 'b')\n"
    m = ModuleAnalysis("t.py", src, ast.parse(src))
    a, b = (c for c, q in m.calls if q == "torch.save")
    assert m.rank_guard(a) is None
    assert m.rank_guard(b).kind == "local"


def test_whether_a_rank_is_set_is_not_a_rank_test():
    # `args.gpu is None` has the same answer on every rank of a run; `args.gpu == 0` does not
    src = (
        "import torch\nif args.gpu is None:\n    torch.save({}, 'a')\n"
        "if args.gpu is not None and args.gpu == 0:\n    torch.save({}, 'b')\n"
    )
    m = ModuleAnalysis("t.py", src, ast.parse(src))
    a, b = (c for c, q in m.calls if q == "torch.save")
    assert m.rank_guard(a) is None
    assert m.rank_guard(b).kind == "local"


def test_predicate_names_by_pattern():
    from ddpdoctor.script.ranks import predicate_name_kind

    assert predicate_name_kind("is_global_main") == "global"
    assert predicate_name_kind("is_local_master_process") == "local"
    assert predicate_name_kind("is_main_node") is None  # node 0, not rank 0: not read by name
    assert predicate_name_kind("is_maintained") is None
    assert predicate_name_kind("main") is None


def test_callee_guard_of_wrappers():
    m = ModuleAnalysis("w.py", WRAPPERS, ast.parse(WRAPPERS))
    calls = {ast.unparse(c.func): c for c, _q in m.calls}
    assert m.callee_guard(calls["save_on_master"]).kind == "global"
    assert m.callee_guard(calls["log_local"]).kind == "local"
    assert m.callee_guard(calls["print"]) is None


def _module(src: str) -> ModuleAnalysis:
    src = textwrap.dedent(src)
    return ModuleAnalysis("t.py", src, ast.parse(src))


def test_a_held_objects_method_is_not_a_call_of_the_classs_own():
    from ddpdoctor.script.ranks import own_call_sites

    m = _module(
        """
        class Engine:
            def train(self):
                pass

            def evaluate(self):
                self.model.train()
                self.train()
                engine.train()
        """
    )
    train = next(f for f in m.functions if f.name == "train")
    # `self.model.train()` is nn.Module.train of an object the engine holds
    assert [c.lineno for c in own_call_sites(m, train)] == [8, 9]


def test_rank_tests_by_device_index_and_upper_case_constants():
    from ddpdoctor.script.ranks import LOCAL, guard_kind

    m = _module(
        """
        def f(self, device):
            if self.device == 0: pass
            if self.cfg.GPU_ID == 0: pass
            if device == "cuda": pass
            if self.device.type == 0: pass
        """
    )
    tests = [n.test for n in m.nodes(ast.If)]
    assert [guard_kind(m, t) for t in tests] == [(LOCAL,), (LOCAL,), None, None]


def test_rank_against_the_world_size_parts_no_ranks():
    """``rank >= size`` (or ``rank > world_size - 1``) holds for no rank of the world: not a rank test
    that parts ranks. ``rank >= 1`` still is one."""
    from ddpdoctor.script.ranks import guard_kind

    src = "def run(rank, size, args):\n    pass\n"
    m = ModuleAnalysis("t.py", src, ast.parse(src))
    for text in ("rank >= size", "rank > args.world_size - 1", "rank < dist.get_world_size()"):
        assert guard_kind(m, ast.parse(text, mode="eval").body) is None, text
    assert guard_kind(m, ast.parse("rank >= 1", mode="eval").body) is not None


SPAWN_OR_SRUN = textwrap.dedent(
    """
    def main(args):
        if args.multiprocessing_distributed:
            args.rank = args.rank * 4 + args.gpu
        else:
            worker(0, args)
        if args.distributed:
            worker(1, args)
        else:
            worker(2, args)
    """
)


def test_the_else_of_multiprocessing_distributed_is_still_several_processes():
    # the ImageNet example's switch says who starts the processes (mp.spawn, or srun one per GPU),
    # not whether there are several: its `else` is no single-process arm; `--distributed`'s is
    from ddpdoctor.script.ranks import single_process_arm

    m = ModuleAnalysis("t.py", SPAWN_OR_SRUN, ast.parse(SPAWN_OR_SRUN))
    calls = {c.args[0].value: c for c, _q in m.calls if isinstance(c.func, ast.Name) and c.func.id == "worker"}
    assert not single_process_arm(m, calls[0])
    assert not single_process_arm(m, calls[1])
    assert single_process_arm(m, calls[2])
