"""One cause, one finding: a load that several rank-0 saves of the same file race with is reported
once, and the message lists the other saves."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.lint import LintConfig, lint_source

SRC = '''
import os

import torch
import torch.distributed as dist


class Trainer:
    def __init__(self, model, folder):
        self.model = model
        self.folder = folder
        self.rank = dist.get_rank()

    def save_state(self, best):
        if self.rank != 0:
            return
        path = os.path.join(self.folder, "latest.pth")
        if best:
            torch.save(self.model.state_dict(), path)
        else:
            torch.save({"model": self.model.state_dict()}, path)

    def reload(self):
        path = os.path.join(self.folder, "latest.pth")
        return torch.load(path, map_location="cpu")

    def fit(self, loader, epochs):
        for epoch in range(epochs):
            for batch in loader:
                self.model(batch).sum().backward()
            self.save_state(epoch % 2 == 0)
            self.reload()
'''


def test_a_load_raced_by_two_saves_is_one_finding_naming_both():
    found = lint_source("trainer.py", SRC, LintConfig(select=("DDP504",)))
    assert [f.location.line for f in found] == [25]
    assert "line 19" in found[0].message and "lines 21" in found[0].message



EARLY_EXIT = """
import torch.distributed as dist


def stage(model):
    rank = dist.get_rank()
    if rank == 0:
        return None
    total = model.sum()
    dist.all_reduce(total)
    dist.barrier()
    dist.broadcast(total, src=0)
    return total


def main(model):
    dist.init_process_group("gloo")
    stage(model)


if __name__ == "__main__":
    main(None)
"""


def _line(src: str, text: str) -> int:
    return next(i for i, ln in enumerate(src.splitlines(), 1) if text in ln)


def test_collectives_one_rank_test_keeps_from_the_others_are_one_finding():
    # rank 0's early return keeps it from three collectives: one cause, so one DDP301 finding,
    # at the first of them, naming the rest
    found = lint_source("stage.py", EARLY_EXIT, LintConfig(select=("DDP301",)))
    assert [f.location.line for f in found] == [_line(EARLY_EXIT, "all_reduce")]
    rest = f"lines {_line(EARLY_EXIT, 'barrier')}, {_line(EARLY_EXIT, 'broadcast')}"
    assert rest in found[0].message


def test_collectives_under_two_rank_tests_stay_two_findings():
    src = EARLY_EXIT.replace("    dist.barrier()\n", "    if rank == 1:\n        dist.barrier()\n")
    found = lint_source("stage.py", src, LintConfig(select=("DDP301",)))
    assert len(found) == 2, [f.message for f in found]


STEPS = """
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, optimizer, scheduler, loader):
    model = DDP(model)
    if dist.get_rank() == 0:
        return
    for batch in loader:
        model(batch).sum().backward()
        optimizer.step()
        scheduler.step()
"""


def test_steps_one_rank_test_decides_are_one_finding_in_neutral_words():
    # rank 0 leaves before the loop: the steps run on the other ranks, so the message must not
    # say they run "only where rank == 0"
    found = lint_source("train.py", STEPS, LintConfig(select=("DDP302",)))
    assert [f.location.line for f in found] == [_line(STEPS, "optimizer.step")]
    msg = found[0].message
    assert f"`scheduler.step()` (line {_line(STEPS, 'scheduler.step')})" in msg
    assert "runs only where" not in msg and "on some ranks only" in msg


def test_a_local_rank_given_to_the_group_and_the_samplers_is_one_finding_naming_them():
    src = (Path(__file__).parent / "fixtures" / "DDP107_ok_same_local_rank_as_group.py").read_bytes()
    found = lint_source("train.py", src, LintConfig(select=("DDP107", "DDP414")))
    assert [(f.code, f.location.line) for f in found] == [("DDP414", 11)]
    assert "DistributedSampler on line 13 takes it as the rank too" in found[0].message
