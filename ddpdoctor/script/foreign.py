"""Events that happen in another file of the project, reached from this file's code (project mode).

``train.py`` calls ``checkpoint.save_checkpoint(...)`` on every rank and the ``torch.save`` is in
``checkpoint.py``. Linted alone, ``checkpoint.py`` cannot know who calls it and ``train.py`` cannot see
the save; linted together, the per-rank interpreter of ``train.py`` walks into ``checkpoint.py`` and
records the save there. A rule then reports it once, at the call in this file: that is where the
user adds the rank test, and the chain names the line in the other file.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from ddpdoctor.script import writers


@dataclass
class ForeignEvent:
    anchor: ast.AST  # the call in this file that leads there
    event: object  # the first interp.Event seen for it (kind, node, chain, path)
    other: object  # the ModuleAnalysis of the file the event is in
    reach: list[tuple[object, set[int]]] = field(default_factory=list)  # (Run, ranks reaching it)


def foreign_events(m, kind: str) -> list[ForeignEvent]:
    """Events of ``kind`` (``save``, ``load``) in other files of the project that complete runs of this
    file reach, one per (call here, node there)."""
    project = m.project
    if project is None:
        return []
    out: dict[tuple[int, int], ForeignEvent] = {}
    for run in m.runs:
        if not run.complete:
            continue
        per: dict[tuple[int, int], set[int]] = {}
        for r, t in enumerate(run.traces):
            for e in t.events:
                if e.kind != kind or e.path is None or e.path == m.path:
                    continue
                anchor = m.event_anchor(e)
                key = (id(anchor), id(e.node))
                if key not in out:
                    if writers.in_spawning_parent(m, anchor):
                        continue  # called by the parent before it starts the workers: runs once

                    other = project.analysis(Path(e.path))
                    if other is None:
                        continue
                    out[key] = ForeignEvent(anchor, e, other)
                per.setdefault(key, set()).add(r)
        for key, ranks in per.items():
            out[key].reach.append((run, ranks))
    return list(out.values())


def callee(fe: ForeignEvent) -> str:
    """The call here that leads there, as the user wrote it (``checkpoint.save_checkpoint``)."""
    return ast.unparse(fe.anchor.func) if isinstance(fe.anchor, ast.Call) else "the helper"


def place(fe: ForeignEvent) -> str:
    """The event's line in the other file (``checkpoint.py:100``)."""
    return f"{Path(fe.other.path).name}:{fe.event.node.lineno}"


def guarded_on_the_way(m, fe: ForeignEvent) -> bool:
    """A rank test the interpreter could not decide (``if args.is_master:``), on the node in the other
    file or on any call of the chain that led there, in whichever file it is: it reads as a guard."""
    if writers.guarded_here(fe.other, fe.event.node):
        return True
    project = m.project
    paths = fe.event.chain_paths or (None,) * len(fe.event.chain)
    for line, path in zip(fe.event.chain, paths):
        where = m if path is None or path == m.path else project.analysis(Path(path))
        if where is None:
            continue
        for call, _q in where.calls:
            if call.lineno == line and writers.guarded_here(where, call):
                return True
    return False


def reported_there(check, other, node: ast.AST) -> bool:
    """Whether the rule ``check`` already reports ``node`` when it lints the other file itself (its
    own rank context says so): then the finding is that file's, and this one would repeat it."""
    memo = other.__dict__.setdefault("_foreign_reported", {})
    key = id(check)
    if key not in memo:
        memo[key] = {(f.location.line, f.location.col) for f in check(other)}
    return (node.lineno, node.col_offset + 1) in memo[key]


def entering_call(m, fe: ForeignEvent) -> tuple[str, int] | None:
    """(file name, line) of the call that enters the event's file, when that call is itself in a third
    file (``run_train.py`` -> ``train.py:246 checkpoint_handler.save(...)`` -> ``checkpoint.py``): the
    line where the rank test belongs. None when the call is the anchor in this file."""
    ev = fe.event
    paths = ev.chain_paths or (None,) * len(ev.chain)
    for line, path in reversed(list(zip(ev.chain, paths))):
        if path == ev.path:
            continue
        if path is None or path == m.path:
            return None
        return Path(path).name, line
    return None
