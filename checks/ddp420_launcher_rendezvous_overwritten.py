"""DDP420: the rendezvous address the launcher set, overwritten with this machine.

## What it does
Finds `os.environ["MASTER_ADDR"] = "localhost"` (or `127.0.0.1`), written whatever the environment
holds, in a script the launcher starts once per process: it reads the rank the launcher puts in
each worker's environment (`LOCAL_RANK`, `RANK`) and starts no processes of its own (no
`mp.spawn`, no `Process(...)`: a spawner or a test harness puts every rank on this machine). A write only when the variable is unset (`setdefault`, under `if "MASTER_ADDR" not in
os.environ:` or any test of the environment) and one in a branch for another launcher (Slurm's
`SLURM_PROCID`, Open MPI's `OMPI_COMM_WORLD_RANK`, which set no rendezvous address) are left alone.

## Why is this bad?
torchrun (and Slurm's or Kubernetes' launchers) export `MASTER_ADDR` and `MASTER_PORT` for the whole
job before the script starts. Overwriting them with this machine makes every node's processes meet
at their own host: on one node it happens to work, on several the nodes never find each other and
`init_process_group` waits until its timeout. A fixed `MASTER_PORT` beside it collides with another
job on the same node.

## Example
```python
os.environ["MASTER_ADDR"] = "localhost"
os.environ["MASTER_PORT"] = "12355"
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
```

## Use instead
```python
dist.init_process_group("nccl")          # env:// reads what torchrun exported
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script import ranks

CODE = "DDP420"
TITLE = "Launcher's MASTER_ADDR overwritten with this machine"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

_THIS_MACHINE = ("localhost", "127.0.0.1", "0.0.0.0")
# other launchers' variables: a branch that reads them sets the job up for that launcher
_OTHER_LAUNCHERS = ("SLURM_", "OMPI_", "PMI_", "MV2_")


def _environment_tested(m, node: ast.AST) -> bool:
    """Under a test of the environment (``if "MASTER_ADDR" not in os.environ:``, ``if
    os.getenv("WORLD_SIZE") is None:``) or in a branch for another launcher."""
    for a in m.ancestors(node):
        if isinstance(a, (ast.If, ast.IfExp)):
            test = ast.unparse(a.test)
            if "environ" in test or "getenv" in test:
                return True
            # the branch reads another launcher's variables (in its test, or an `if`'s body)
            text = ast.unparse(a) if isinstance(a, ast.If) else test
            if any(w in text for w in _OTHER_LAUNCHERS):
                return True
    return False


def check(m):
    if not m.mentions("MASTER_ADDR") or not ranks.reads_launcher_rank(m) or ranks.spawn_calls(m):
        return
    if m.mentions(".Process(", "start_processes(", "spawn("):
        return  # the file starts its own processes on this machine (a test harness, a spawner)
    if m.mentions(*_OTHER_LAUNCHERS) and not m.mentions("LOCAL_RANK"):
        return  # a script for srun or mpirun, which set no rendezvous address of their own
    for key, value, node, how in m.env_writes:
        if key != "MASTER_ADDR" or how != "assign" or not isinstance(value, ast.Constant):
            continue
        if str(value.value) not in _THIS_MACHINE or _environment_tested(m, node):
            continue
        yield m.finding(
            CODE,
            node,
            f"`MASTER_ADDR` is set to {value.value!r} whatever the launcher exported: this script reads "
            "the rank torchrun gives each process, and torchrun already set the job's rendezvous "
            "address; on several nodes each node's processes now meet at their own host and "
            "`init_process_group` waits until it times out",
            SEVERITY,
            hint="remove it (env:// reads what the launcher set), or use "
            "`os.environ.setdefault('MASTER_ADDR', 'localhost')` for runs without a launcher",
        )
        return
