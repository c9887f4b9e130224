"""DDP432: a rendezvous port that no TCP port can be.

## What it does
Finds a MASTER_PORT set in code (`os.environ["MASTER_PORT"] = "80000"`, also through a name this
function binds to a literal) or a `tcp://host:PORT` rendezvous URL whose port is a number outside
1-65535.

## Why is this bad?
TCP ports are 16-bit. torch's env:// and tcp:// rendezvous check the number before they start the
TCPStore and raise `ValueError: port must have value from 0 to 65535` on every rank: the job never
starts (tests/test_torch_facts_for_lint.py runs it against the installed torch).

## Example
```python
os.environ["MASTER_PORT"] = "80000"
```

## Use instead
```python
os.environ.setdefault("MASTER_PORT", "29500")   # or a free port the launcher picks
```
"""

from __future__ import annotations

import ast
import re

from ddpdoctor.script.nodes import walk

CODE = "DDP432"
TITLE = "Rendezvous port out of range"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

_URL_PORT = re.compile(r"^tcp://[^:/]+:(\d+)$")


def check(m):
    for key, value, node, _how in m.env_writes:
        if key != "MASTER_PORT" or value is None:
            continue
        port = _literal_port(_literal(m, value, m.enclosing_function(node)))
        if port is not None and not 0 < port < 65536:
            yield _finding(m, node, port)
    for call in m.dist_calls("init_process_group"):
        url = m.keyword(call, "init_method")
        if isinstance(url, ast.Constant) and isinstance(url.value, str):
            found = _URL_PORT.match(url.value)
            if found and not 0 < int(found.group(1)) < 65536:
                yield _finding(m, call, int(found.group(1)))


def _finding(m, node, port: int):
    return m.finding(
        CODE,
        node,
        f"port {port} is outside 1-65535: the env:// and tcp:// rendezvous refuse it (ValueError), so every launch fails before training starts",
        SEVERITY,
        hint="use a port below 65536 (torchrun's default is 29500), or let the launcher choose it",
    )


def _literal(m, e: ast.AST, fn) -> ast.AST:
    """A name this function binds once, to a literal, read as that literal (``port = "5172019"``)."""
    if isinstance(e, ast.Name) and fn is not None:
        bound = [
            st.value
            for st in walk(fn)
            if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == e.id for t in st.targets)
        ]
        if len(bound) == 1:
            return bound[0]
    return e


def _literal_port(e: ast.AST) -> int | None:
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("str", "int") and len(e.args) == 1:
        e = e.args[0]
    if isinstance(e, ast.Constant) and not isinstance(e.value, bool):
        text = str(e.value).strip()
        return int(text) if text.isdigit() else None
    return None
