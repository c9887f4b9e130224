"""DDP608: an NCCL transport or debug setting forced in code.

## What it does
Finds `os.environ["NCCL_IB_DISABLE"] = "1"`, `NCCL_P2P_DISABLE`, `NCCL_SHM_DISABLE`,
`NCCL_SOCKET_IFNAME`, `NCCL_IB_HCA`, `NCCL_NET_GDR_LEVEL`, `NCCL_P2P_LEVEL`, `NCCL_NSOCKS_PERTHREAD`,
`NCCL_SOCKET_NTHREADS` (and `NCCL_DEBUG=INFO`/`TRACE`, `TORCH_DISTRIBUTED_DEBUG=DETAIL`) written by a distributed script
unconditionally, or under a test of the machine rather than of the user's wish. Left alone:
`os.environ.setdefault(...)`, a write under a test of the variable itself (`if "NCCL_SOCKET_IFNAME"
not in os.environ:`) or of the script's options (`if args.disable_ib:`).

## Why is this bad?
These variables pick NCCL's transports for one machine: turning InfiniBand, NVLink peer-to-peer or
shared memory off, or naming a network interface, is a workaround for one site. Written in the
script, it overrides what the cluster's launch environment says on every machine the job ever runs
on: a job that should use InfiniBand crawls over TCP, a host without `eth0` cannot start, and
`NCCL_DEBUG=INFO` floods every rank's log, and `TORCH_DISTRIBUTED_DEBUG=DETAIL` checks every
collective against the other ranks (extra communication on every call) in every production run.
Nobody reading the launch command sees it.

## Example
```python
os.environ["NCCL_IB_DISABLE"] = "1"
os.environ["NCCL_SOCKET_IFNAME"] = "eth0"
```

## Use instead
Set them in the launch environment of the cluster that needs them (`NCCL_IB_DISABLE=1 torchrun
...`), or behind an option: `if args.no_ib: os.environ["NCCL_IB_DISABLE"] = "1"`.
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dotted

CODE = "DDP608"
TITLE = "NCCL transport or debug setting forced in code"
KIND = "script"
SEVERITY = "info"
CONFIDENCE = "medium"
# why it is not in the default selection (benchmarks/lint_rule_precision.py on the labelled sets)
OPT_IN_BECAUSE = (
    "8 of its 9 reports on the labelled files are labelled bugs (0.89): the ninth is a forced "
    "NCCL_P2P_DISABLE=1 on a line a reviewer listed as correct code for another question (the ranks "
    "read from torchrun's environment), under the 0.95 a default rule needs"
)

# variables that choose NCCL's transports for one site
_TRANSPORT = frozenset(
    (
        "NCCL_IB_DISABLE",
        "NCCL_P2P_DISABLE",
        "NCCL_SHM_DISABLE",
        "NCCL_SOCKET_IFNAME",
        "NCCL_IB_HCA",
        "NCCL_NET_GDR_LEVEL",
        "NCCL_P2P_LEVEL",
        "NCCL_NSOCKS_PERTHREAD",
        "NCCL_SOCKET_NTHREADS",
    )
)
_CHATTY = frozenset(("INFO", "TRACE"))
# what a test reads when it asks the user (an option, a config) or the environment, not the machine
_CHOICES = ("args", "opt", "opts", "cfg", "config", "conf", "hparams", "params", "flags", "FLAGS")


def _forced(key: str, value: ast.AST | None) -> bool:
    """A fixed value (one an option or a config supplies is the user's choice)."""
    if not isinstance(value, ast.Constant):
        return False
    text = str(value.value).strip()
    if key.endswith("_DISABLE"):
        return text == "1"  # "0" keeps the transport on, as NCCL does by itself
    if key == "NCCL_SOCKET_IFNAME":
        return not text.startswith("^")  # an exclusion list (`^docker0,lo`) names no host's interface
    if key == "TORCH_DISTRIBUTED_DEBUG":
        return text.upper() == "DETAIL"  # (INFO only logs a little more at start-up)
    return key in _TRANSPORT or key == "NCCL_DEBUG" and text.upper() in _CHATTY


def _chosen(m, node: ast.AST) -> bool:
    """Under a test of the variable itself or of the environment (only when unset), or of the
    script's options (the user asked for it)."""
    for a in m.ancestors(node):
        if not isinstance(a, (ast.If, ast.IfExp)):
            continue
        text = ast.unparse(a.test)
        if "NCCL_" in text or "environ" in text or "getenv" in text:
            return True
        roots = {(dotted(n) or "").split(".", 1)[0] for n in ast.walk(a.test) if isinstance(n, ast.Attribute)}
        if roots & set(_CHOICES) or any(
            isinstance(n, ast.Name) and n.id in _CHOICES for n in ast.walk(a.test)
        ):
            return True
    return False


def check(m):
    if not (m.mentions("NCCL_") or m.mentions("TORCH_DISTRIBUTED_DEBUG")) or not m.distributed_context:
        return
    forced = [
        (key, node)
        for key, value, node, how in m.env_writes
        if how == "assign" and _forced(key, value) and not _chosen(m, node)
    ]
    if not forced:
        return
    key, node = forced[0]
    others = sorted({k for k, _n in forced[1:] if k != key})
    also = f" (also {', '.join(f'`{k}`' for k in others)})" if others else ""
    why = (
        "every rank of every run then logs NCCL's setup and calls, and the user's own setting is lost"
        if key == "NCCL_DEBUG"
        else "every collective of every run is then checked against the other ranks (extra "
        "communication and a wrapper on each call): a debugging setting left on in production"
        if key == "TORCH_DISTRIBUTED_DEBUG"
        else "it overrides the NCCL settings of every cluster this script runs on, where it may turn "
        "off the fast transport or name an interface that host lacks"
    )
    yield m.finding(
        CODE,
        node,
        f"`{key}` is forced in code{also}: {why}",
        SEVERITY,
        hint="set it in the launch environment of the machine that needs it "
        "(`NCCL_IB_DISABLE=1 torchrun ...`), or only behind a command-line option",
    )
