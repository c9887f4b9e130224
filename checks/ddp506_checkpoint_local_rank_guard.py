"""DDP506: a checkpoint written by local rank 0, once per node.

## What it does
Finds a checkpoint save (`torch.save`, `save_pretrained`, or this file's helper that does one)
whose only rank test is on the node-local rank (`local_rank == 0`, `LOCAL_RANK`, an argparse option
fed by `--local_rank`), in a script that can run on several nodes (nothing pins its rendezvous
to localhost). Saves to a path that names the host or node are left alone.

## Why is this bad?
Every node has a local rank 0, so on N nodes N processes write the same checkpoint at the same time.
On shared storage (NFS, Lustre, a bucket) the writes interleave into a corrupt or truncated file,
and a reader may load a half-written one. It works on one node, so it shows up only when the job
scales out.

## Example
```python
local_rank = int(os.environ["LOCAL_RANK"])
if local_rank == 0:
    torch.save(model.module.state_dict(), "ckpt.pt")
```

## Use instead
```python
if dist.get_rank() == 0:          # the global rank: one writer per job
    torch.save(model.module.state_dict(), "ckpt.pt")
dist.barrier()
```
"""

from __future__ import annotations

import ast

from ddpdoctor.lint.names import dotted
from ddpdoctor.lint.writers import guard_chains, per_process_path

CODE = "DDP506"
TITLE = "Checkpoint guarded by the local rank"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

_LOCAL_FLAGS = ("--local_rank", "--local-rank")
_LOCALHOST = ("localhost", "127.0.0.1", "::1")
_RANK_WORDS = ("rank", "master", "main_process", "is_main", "global_zero", "rank_zero", "rank0")


def local_rank_dests(m) -> set[str]:
    """argparse dests that hold the local rank although their name does not say so:
    ``add_argument("--rank", "--local_rank")`` stores the launcher's --local_rank as ``args.rank``."""
    out = set()
    for call in m.method_calls("add_argument"):
        flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not any(f in _LOCAL_FLAGS for f in flags):
            continue
        dest = m.keyword(call, "dest")
        if isinstance(dest, ast.Constant) and isinstance(dest.value, str):
            out.add(dest.value)
        else:
            longs = [f for f in flags if f.startswith("--")]
            if longs:
                out.add(longs[0][2:].replace("-", "_"))
    return out


def _rank_tokens(test: ast.AST):
    """The names a rank test reads: variables, attributes, dict keys, called functions, env keys."""
    for n in ast.walk(test):
        if isinstance(n, ast.Name):
            yield n.id
        elif isinstance(n, ast.Attribute):
            yield n.attr
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            yield n.value


def is_local_rank_test(test: ast.AST, local_dests: set[str]) -> bool:
    """The test reads a node-local rank and no global one."""
    local = glob = False
    for tok in _rank_tokens(test):
        low = tok.lower()
        if "local" in low and "rank" in low or low in ("is_local_main", "local_main") or tok in local_dests:
            local = True
        elif any(w in low for w in _RANK_WORDS):
            glob = True
    return local and not glob


def single_node(m) -> bool:
    """The script pins its rendezvous to this machine: it cannot run on several nodes."""
    for key, value, _node, how in m.env_writes:
        if key == "MASTER_ADDR" and how == "assign" and isinstance(value, ast.Constant):
            if str(value.value) in _LOCALHOST:
                return True
    for call in m.dist_calls("init_process_group"):
        init = m.keyword(call, "init_method")
        if isinstance(init, (ast.Constant, ast.JoinedStr)) and any(h in ast.unparse(init) for h in _LOCALHOST):
            return True
    return False


def _saves(m):
    for call in m.calls_named("torch.save"):
        yield call, call.args[1] if len(call.args) > 1 else m.keyword(call, "f")
    for call in m.method_calls("save_pretrained"):
        if m.keyword(call, "is_main_process") is None:
            yield call, call.args[0] if call.args else m.keyword(call, "save_directory")


def check(m):
    if not m.uses_distributed or not m.mentions("local_rank", "LOCAL_RANK", "local-rank", "local_main"):
        return
    if single_node(m):
        return
    local_dests = local_rank_dests(m)
    reported: set[int] = set()
    for save, path in _saves(m):
        if per_process_path(path):
            continue
        for chain in guard_chains(m, save):
            if not chain:
                continue
            tests = [t for t, _ in chain]
            if not all(is_local_rank_test(t, local_dests) for t in tests):
                continue
            test = tests[-1]  # the outermost: where the one-per-node decision is taken
            if id(test) in reported:
                continue
            reported.add(id(test))
            lines = [t.lineno for t in reversed(tests)] + [save.lineno]
            via = " → ".join(f"line {ln}" for ln in dict.fromkeys(lines))
            yield m.finding(
                CODE,
                test,
                f"the checkpoint save is guarded only by the node-local rank (`{ast.unparse(test)}`): "
                f"on several nodes every node's local rank 0 writes the same file at once ({via})",
                SEVERITY,
                hint="guard the save with the global rank (`dist.get_rank() == 0`), or put the "
                "host name in the path",
                chain=lines,
                writer=dotted(save.func) or "save",
            )
            break
