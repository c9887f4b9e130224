"""One cause, one finding: a load that several rank-0 saves of the same file race with is reported
once, and the message lists the other saves."""

from __future__ import annotations

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
