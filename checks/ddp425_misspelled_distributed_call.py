"""DDP425: a torch.distributed function that does not exist, close to one that does.

## What it does
Finds a call `dist.name(...)` where `dist` is torch.distributed and `name` is none of its public
functions or modules (as of torch 2.13), but is a near miss of one (`dist.all_reduct`, `dist.barier`,
`dist.get_world_sise`). A name that is far from all of them (a newer API, a project's own module
imported as `dist`) is left alone.

## Why is this bad?
Python looks the name up only when the line runs, and in many scripts that is only in a distributed
run: the single-GPU test passes, and every rank of the real job raises AttributeError there (at the
first evaluation, after hours of training).

## Example
```python
dist.all_reduct(correct, op=dist.ReduceOp.SUM)
```

## Use instead
```python
dist.all_reduce(correct, op=dist.ReduceOp.SUM)
```
"""

from __future__ import annotations

import ast
import difflib

from ddpdoctor.script.names import dotted

CODE = "DDP425"
TITLE = "Misspelled torch.distributed function"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

# torch.distributed's public names (dir() of torch 2.13, lower-case ones: functions, modules,
# constants), and modules of the package a script may reach as attributes
_KNOWN = frozenset(
    """
    algorithms all_gather all_gather_coalesced all_gather_into_tensor all_gather_object all_gather_single
    all_reduce all_reduce_coalesced all_to_all all_to_all_single autograd barrier batch_isend_irecv
    breakpoint broadcast broadcast_object_list c10d_logger config constants default_pg_timeout
    destroy_process_group device_mesh distributed_c10d gather gather_object get_backend get_backend_config
    get_debug_level get_default_backend_for_device get_global_rank get_group_rank get_node_local_rank
    get_pg_count get_process_group_ranks get_rank get_world_size group init_device_mesh init_process_group
    irecv is_available is_backend_available is_gloo_available is_initialized is_mpi_available
    is_nccl_available is_torchelastic_launched is_ucc_available is_xccl_available isend log logging
    logging_handlers monitored_barrier new_group new_subgroups new_subgroups_by_enumeration record_comm
    recv recv_object_list reduce reduce_op reduce_scatter reduce_scatter_single reduce_scatter_tensor
    register_rendezvous_handler remote_device rendezvous rpc scatter scatter_object_list send
    send_object_list set_debug_level set_debug_level_from_env shrink_group split_group supports_complex
    utils checkpoint elastic fsdp nn optim pipelining tensor launcher launch run argparse_util
    collective_utils fsdp rendezvous_handler all_gather_base reduce_scatter_base all_reduce_multigpu
    all_gather_multigpu broadcast_multigpu reduce_multigpu reduce_scatter_multigpu get_process_group
    """.split()
)


def _near_miss(name: str) -> str | None:
    if name in _KNOWN or name.startswith("_") or not name.islower():
        return None
    close = difflib.get_close_matches(name, _KNOWN, n=1, cutoff=0.85)
    return close[0] if close else None


def check(m):
    roots = {alias for alias, full in m.aliases.items() if full == "torch.distributed"}
    if not roots:
        return
    seen: set[str] = set()
    for call, _q in m.calls:
        f = call.func
        if not (isinstance(f, ast.Attribute) and dotted(f.value) in roots | {"torch.distributed"}):
            continue
        if f.attr in seen:
            continue
        meant = _near_miss(f.attr)
        if meant is None:
            continue
        seen.add(f.attr)
        yield m.finding(
            CODE,
            call,
            f"torch.distributed has no `{f.attr}` (`{meant}`?): every rank that reaches this line raises "
            "AttributeError, and often only a distributed run does",
            SEVERITY,
            hint=f"call `{dotted(f.value)}.{meant}`",
        )
