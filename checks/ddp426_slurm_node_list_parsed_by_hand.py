"""DDP426: the Slurm node list parsed by hand.

## What it does
Finds a read of `SLURM_NODELIST` (`SLURM_JOB_NODELIST`, `SLURM_STEP_NODELIST`) whose value the file
takes apart with string operations (`.split`, `.find`, `.index`, `.replace`, slicing, a regular
expression), itself or in its own helper that it hands the value to, to find the master's host. A file
that asks Slurm to expand the list (`scontrol show hostnames`) or uses a hostlist library is left alone.

## Why is this bad?
Slurm writes the node list compressed, in forms a hand-written parser rarely covers all of:
`gpu[01-04,07]`, `gpu01,gpu02` with no brackets, `a01,b[02-03]` across two prefixes, names with dashes.
A parser that works for one cluster's naming gives a wrong or impossible host on another (`gpu01,gpu02`
as one address, a prefix cut at a fixed width): every rank then waits for a rendezvous at a host that
is not there, and the job hangs at start-up on more than one node.

## Example
```python
node_list = os.environ["SLURM_NODELIST"]
host = node_list.split("[")[0] + node_list.split("[")[1].split("-")[0]
```

## Use instead
```python
host = subprocess.check_output(["scontrol", "show", "hostnames", os.environ["SLURM_NODELIST"]]).split()[0].decode()
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.ranks import env_key

CODE = "DDP426"
TITLE = "Slurm node list parsed by hand"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

_KEYS = frozenset(("SLURM_NODELIST", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST"))
_EXPANDERS = ("scontrol", "hostlist", "hostnames", "expand_hostlist", "nodelist_to_list")
_STRING_METHODS = frozenset(("split", "find", "index", "rfind", "rindex", "replace", "strip", "partition", "startswith"))


def _reads(m) -> list[ast.AST]:
    out = []
    for node in m.nodes(ast.Subscript, ast.Call):
        if env_key(m, node) in _KEYS:
            out.append(node)
    return out


def _names_holding(m, read: ast.AST) -> list[tuple[str, ast.AST]]:
    """(name, scope) the read is assigned to: ``node_list = os.environ["SLURM_NODELIST"]``."""
    parent = m.parents.get(read)
    if isinstance(parent, ast.Assign) and parent.value is read:
        scope = m.enclosing_function(read) or m.tree
        return [(t.id, scope) for t in parent.targets if isinstance(t, ast.Name)]
    return []


def _taken_apart(m, name: str, scope: ast.AST) -> ast.AST | None:
    """A string operation on ``name`` in ``scope``: ``name.split(...)``, ``name[8:]``, ``re.match(p, name)``."""
    for n in ast.walk(scope):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _STRING_METHODS:
            if isinstance(n.func.value, ast.Name) and n.func.value.id == name:
                return n
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Slice):
            if isinstance(n.value, ast.Name) and n.value.id == name:
                return n
        if isinstance(n, ast.Call) and (m.qualname(n.func) or "").startswith("re."):
            if any(isinstance(a, ast.Name) and a.id == name for a in n.args):
                return n
    return None


def _parsed(m, read: ast.AST) -> ast.AST | None:
    """Where the file takes the node list apart: on the name it is kept in, or in its own helper's
    parameter when the read (or that name) is handed to one."""
    holders = _names_holding(m, read)
    for name, scope in holders:
        found = _taken_apart(m, name, scope)
        if found is not None:
            return found
    handed = [read] + [
        n for name, scope in holders for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name
    ]
    for h in handed:
        call = m.parents.get(h)
        if not (isinstance(call, ast.Call) and h in call.args and isinstance(call.func, ast.Name)):
            continue
        defs = [f for f in m.functions if getattr(f, "name", None) == call.func.id and not isinstance(f, ast.Lambda)]
        if len(defs) != 1:
            continue
        params = [a.arg for a in (*defs[0].args.posonlyargs, *defs[0].args.args)]
        i = call.args.index(h)
        if i < len(params):
            found = _taken_apart(m, params[i], defs[0])
            if found is not None:
                return found
    return None


def check(m):
    if not m.mentions("NODELIST") or m.mentions(*_EXPANDERS):
        return
    reads = _reads(m)
    if not reads:
        return
    for read in reads:
        parsed = _parsed(m, read)
        if parsed is None:
            continue
        # at the parsing, the code to replace (the read, often in another function, is named)
        yield m.finding(
            CODE,
            parsed,
            f"the Slurm node list `{env_key(m, read)}` (read at line {read.lineno}) is taken apart by hand "
            f"here: Slurm compresses it in forms such code rarely covers "
            "(`gpu[01-04,07]`, `gpu01,gpu02`, `a01,b[02-03]`), and on another cluster the master's "
            "host comes out wrong, so every rank waits for a rendezvous that never starts",
            SEVERITY,
            hint="expand it with `scontrol show hostnames $SLURM_NODELIST` and take the first host",
        )
        return
