"""DDP509: a run folder named after the clock, on every rank.

## What it does
Finds a path or run name built from this process's clock to the second or minute
(`datetime.now().strftime("%Y%m%d-%H%M%S")`, `time.strftime("%H%M")`, `f"{datetime.now():%H%M}"`,
`f"run_{int(time.time())}"`)
by every rank of a distributed script, and then used by every rank: joined into a path, created,
opened, handed on. A name computed under a rank test, or handed to a broadcast
(`dist.broadcast_object_list([run_dir], src=0)`), is left alone, and so is the name of one log file
(`log_file = out / f"train_{stamp}.log"`), which one writer uses (each rank its own, or rank 0), and a
stamp that never names a folder (`timestamp` handed to a logger, as mmcv's trainers do).

## Why is this bad?
Each process reads its own clock. The ranks do not start at the same instant (imports, the
rendezvous, loading data): those that cross a second (or a minute) boundary get another name. Rank
0 creates its folder and writes logs and checkpoints there; a rank with another name writes into a
folder nobody created (FileNotFoundError, often only at the first save, hours in), or creates its
own, and the run's files are scattered over several folders. It works in every short test on one
machine, where the processes start within the same second.

## Example
```python
run_dir = os.path.join("runs", datetime.now().strftime("%Y%m%d-%H%M%S"))
os.makedirs(run_dir, exist_ok=True)
```

## Use instead
```python
name = [datetime.now().strftime("%Y%m%d-%H%M%S") if dist.get_rank() == 0 else None]
dist.broadcast_object_list(name, src=0)      # every rank gets rank 0's name
run_dir = os.path.join("runs", name[0])
```
"""

from __future__ import annotations

import ast
import re

from ddpdoctor.script.names import dotted
from ddpdoctor.script.writers import every_rank_reaches

CODE = "DDP509"
TITLE = "Run folder named after each rank's clock"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

# directives that read the time of day: two processes started apart get two names
_TIME_OF_DAY = re.compile(r"%[HIMSXTcfsRpr]")
_NOW = frozenset(("now", "today", "utcnow"))


def _clock_call(e: ast.AST) -> bool:
    """``datetime.now()`` (``datetime.datetime.now(tz)``, ``today()``, ``utcnow()``)."""
    return (
        isinstance(e, ast.Call)
        and isinstance(e.func, ast.Attribute)
        and e.func.attr in _NOW
        and "datetime" in (dotted(e.func.value) or "")
    )


def _time_of_day(fmt: ast.AST | None) -> bool:
    """The format reads the time of day (or cannot be read here)."""
    if isinstance(fmt, ast.Constant) and isinstance(fmt.value, str):
        return _TIME_OF_DAY.search(fmt.value) is not None
    if isinstance(fmt, ast.JoinedStr):
        return any(_time_of_day(v) for v in fmt.values if isinstance(v, ast.Constant))
    return fmt is not None


def _stamps(m, e: ast.AST) -> ast.AST | None:
    """The node of ``e`` that formats this process's clock into text to the second or minute."""
    for n in ast.walk(e):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "strftime":
            fmt = n.args[0] if n.args else None
            if _clock_call(n.func.value) and _time_of_day(fmt):
                return n
            # time.strftime(fmt) and time.strftime(fmt, time.localtime()): the current time
            if (m.qualname(n.func) or "") == "time.strftime" and (
                len(n.args) == 1
                or len(n.args) == 2
                and "time" in (dotted(getattr(n.args[1], "func", None)) or "")
            ):
                if _time_of_day(fmt):
                    return n
        if isinstance(n, ast.FormattedValue) and _clock_call(n.value) and _time_of_day(n.format_spec):
            return n
        # the epoch seconds as text: f"run_{int(time.time())}", str(int(time.time()))
        if (isinstance(n, ast.FormattedValue) or isinstance(n, ast.Call) and dotted(n.func) == "str") and any(
            isinstance(c, ast.Call) and (m.qualname(c.func) or "") == "time.time" for c in ast.walk(n)
        ):
            return n
    return None


# what a folder or run name is called (`run_dir`, `exp_name`, `timestamp`, `self.start_time`)
_NAMED_FOR = re.compile(
    r"dir|path|folder|root|out|exp|run|save|ckpt|checkpoint|work|stamp|time|date|name|tag|id$|version"
)
# a file's extension: a log file named for the time is one writer's (each rank's own, or rank 0's)
_FILE = re.compile(r"\.(log|txt|json|csv|out|ya?ml|pkl|pt|pth|npy|png|jpg)\b")


def _names_a_folder(name: str, value: ast.AST) -> bool:
    """The value names a folder or a run, not one log file (`train_%s.log`, `log_file`), nor a line
    of a log."""
    last = name.rsplit(".", 1)[-1].lower()
    if "file" in last or not _NAMED_FOR.search(last):
        return False
    return not any(
        isinstance(n, ast.Constant) and isinstance(n.value, str) and _FILE.search(n.value)
        for n in ast.walk(value)
    )


def _into_file_name(m, read: ast.AST) -> bool:
    """The read is part of a file's name: the text it is formatted or joined into has an extension."""
    for a in m.ancestors(read):
        if isinstance(a, ast.stmt):
            return False
        if isinstance(a, (ast.JoinedStr, ast.BinOp, ast.Call)) and any(
            isinstance(n, ast.Constant) and isinstance(n.value, str) and _FILE.search(n.value)
            for n in ast.walk(a)
        ):
            return True
    return False


def _broadcast_names(m) -> set[str]:
    """Names handed to a broadcast (``broadcast_object_list([run_dir])``)."""
    out = set()
    for call, q in m.calls:
        if "broadcast" in (q or dotted(call.func) or "").rsplit(".", 1)[-1]:
            for a in ast.walk(call):
                if isinstance(a, (ast.Name, ast.Attribute)) and (name := dotted(a)):
                    out.add(name)
    return out


def _reads(m, name: str, fn, after: int) -> list[ast.AST]:
    """Reads of ``name`` after line ``after``: in ``fn`` for a local name, anywhere for an attribute."""
    out = []
    for n in m.nodes(ast.Name, ast.Attribute):
        if not isinstance(n.ctx, ast.Load) or dotted(n) != name or n.lineno <= after:
            continue
        if "." not in name and m.enclosing_function(n) is not fn:
            continue
        if isinstance(n, ast.Attribute) and isinstance(m.parents.get(n), ast.Attribute):
            continue  # a longer name read through it (`self.run_dir.name`) is read as that
        out.append(n)
    return out


def _target_name(stmt: ast.AST) -> str | None:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    if len(targets) != 1:
        return None
    return dotted(targets[0])


# what a folder is called (`run_dir`, `exp_name`, `save_path`, `self.log_path`, `project_id`)
_FOLDER = re.compile(r"dir|path|folder|root|exp|run|project|work|save|out|ckpt|checkpoint")


def _folder_named(name: str) -> bool:
    return _FOLDER.search(name.rsplit(".", 1)[-1].lower()) is not None


def _used_by_every_rank(m, name: str, fn, line: int, shared: set[str]) -> bool:
    """The name, or one it is put into (`exp_dir = os.path.join(root, stamp)`), names a folder and
    is read where every rank goes, beyond the statements that only carry it on. A stamp that only
    ends up in a file's name (`f"{timestamp}.log"`, handed to a logger) names no shared folder."""
    names = [(name, fn, line)]
    seen = {name}
    while names:
        cur, where, after = names.pop()
        for read in _reads(m, cur, where, after):
            if _into_file_name(m, read):
                continue  # `f"output_{stamp}.log"`: one log file's name
            stmt = next((a for a in m.ancestors(read) if isinstance(a, ast.stmt)), None)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and (nxt := _target_name(stmt)):
                if nxt in shared:
                    return False  # put into a name that is broadcast: the same everywhere
                if not _names_a_folder(nxt, stmt.value):
                    continue
                if nxt not in seen and len(seen) < 4:
                    seen.add(nxt)
                    names.append((nxt, m.enclosing_function(stmt), stmt.lineno - 1))
                if nxt != cur:
                    continue
            if _folder_named(cur) and every_rank_reaches(m, read):
                return True
    return False


def check(m):
    if not m.distributed_context or m.one_process or m.pinned_rank is not None:
        return
    shared = None
    named: set[tuple[int, str]] = set()  # (function, name) reported: one cause per name
    for stmt in m.nodes(ast.Assign, ast.AnnAssign):
        if stmt.value is None:
            continue
        stamp = _stamps(m, stmt.value)
        if stamp is None:
            continue
        name = _target_name(stmt)
        if name is None or not _names_a_folder(name, stmt.value) or not every_rank_reaches(m, stmt):
            continue
        if shared is None:
            shared = _broadcast_names(m)
        if name in shared:
            continue
        if _fallback_of_environment(m, stmt, name):
            continue
        fn = m.enclosing_function(stmt)
        if (id(fn), name) in named or not _used_by_every_rank(m, name, fn, stmt.lineno, shared):
            continue
        named.add((id(fn), name))
        yield m.finding(
            CODE,
            stmt,
            f"`{name}` is named from this process's clock (`{ast.unparse(stamp)[:50]}`) on every rank: "
            "processes that start across a second (or minute) boundary get different names, so a rank writes into a folder "
            "rank 0 never created, or the run's files are split over several folders",
            SEVERITY,
            hint="make the name on rank 0 and send it to every rank (dist.broadcast_object_list), or "
            "take it from the job (a job id, an --output-dir option)",
        )


def _fallback_of_environment(m, stmt: ast.AST, name: str) -> bool:
    """The clock names the run only where the environment does not (``try: exp =
    os.environ["SLURM_JOB_ID"] except KeyError: exp = str(time.time())``): under a launcher the
    job's own id, the same on every rank, is the name."""
    handler = next((a for a in m.ancestors(stmt) if isinstance(a, ast.ExceptHandler)), None)
    attempt = m.parents.get(handler) if handler is not None else None
    if not isinstance(attempt, ast.Try):
        return False
    for st in attempt.body:
        if isinstance(st, ast.Assign) and any(dotted(t) == name for t in st.targets):
            reads = {m.qualname(n) for n in ast.walk(st.value) if isinstance(n, (ast.Attribute, ast.Name))}
            if reads & {"os.environ", "os.getenv", "os.environ.get"}:
                return True
    return False

