"""Ready-to-paste code for process-group layouts (pure: builds text, imports nothing heavy).

The code is checked for real in tests/layouts/test_layout_code_torch.py: run on a gloo world, the mesh
and the groups it builds are the ones the layout claims.
"""

from __future__ import annotations

import pprint

from ddpdoctor.core.world import WorldInfo
from ddpdoctor.model.placement.meshes import MeshLayout


def compact_ranks(order: list[int]) -> str:
    """Runs of consecutive ranks, either way: [0,1,2,3,7,6,5,4] -> "0-3,7-4"."""
    out: list[str] = []
    k = 0
    while k < len(order):
        j = k
        step = order[k + 1] - order[k] if k + 1 < len(order) else 0
        if step in (1, -1):
            while j + 1 < len(order) and order[j + 1] - order[j] == step:
                j += 1
        out.append(f"{order[k]}-{order[j]}" if j - k >= 2 else ",".join(map(str, order[k : j + 1])))
        k = j + 1
    return ",".join(out)


def _literal(value: object, indent: int) -> str:
    text = pprint.pformat(value, width=100 - indent, compact=True)
    return text.replace("\n", "\n" + " " * indent)


def ddp_ring_code(order: list[int], world: WorldInfo, backend: str = "nccl") -> str:
    """init_process_group with the ranks renumbered so that rank k is ``order[k]`` of this run.

    Ranks are matched by (hostname, LOCAL_RANK) where those are unique, so the order survives a launcher
    that numbers nodes differently next time; otherwise by this run's RANK."""
    keys = [(world.host_of(r), world.ranks[r].local_rank) for r in order]
    head = [
        "import os",
        "import socket",
        "",
        "import torch.distributed as dist",
        "",
        "# ddpdoctor layout_ddp: renumber the ranks at init so that rank order is the ring measured best.",
    ]
    if len(set(keys)) == len(keys):
        blocks: list[tuple[str, list[int]]] = []
        for host, local in keys:
            if blocks and blocks[-1][0] == host:
                blocks[-1][1].append(local)
            else:
                blocks.append((host, [local]))
        if len({h for h, _ in blocks}) == len(blocks):  # each node's ranks in one run of the ring
            lines = [
                f"    ({host!r}, {_literal(locals_, 4 + len(repr(host)) + 3)})," for host, locals_ in blocks
            ]
            body = [
                "RING = [  # (hostname, LOCAL_RANKs) node after node, in ring order",
                *lines,
                "]",
                "ORDER = [(host, local) for host, local_ranks in RING for local in local_ranks]",
            ]
        else:
            body = ["ORDER = " + _literal(keys, 8) + "  # (hostname, LOCAL_RANK) in ring order"]
        me = '(socket.gethostname(), int(os.environ["LOCAL_RANK"]))'
    else:  # hostnames do not tell nodes apart (e.g. containers sharing one name)
        head.remove("import socket")
        body = [
            "# this run's ranks in ring order: valid while the launcher numbers ranks the same way",
            "ORDER = " + _literal(list(order), 8),
        ]
        me = 'int(os.environ["RANK"])'
    return "\n".join(
        [
            *head,
            *body,
            f"rank = ORDER.index({me})",
            f'dist.init_process_group(backend="{backend}", rank=rank, world_size=len(ORDER))',
        ]
    )


def device_mesh_code(mesh: MeshLayout, device_type: str = "cuda") -> str:
    """``mesh = ...`` building exactly ``mesh``: init_device_mesh when its ranks are 0..n-1 row-major,
    else an explicit DeviceMesh."""
    names = "(" + ", ".join(f'"{d}"' for d in mesh.dims) + ("," if len(mesh.dims) == 1 else "") + ")"
    shape = "(" + ", ".join(map(str, mesh.sizes)) + ("," if len(mesh.sizes) == 1 else "") + ")"
    if mesh.is_default:
        return "\n".join(
            [
                "from torch.distributed.device_mesh import init_device_mesh",
                "",
                f'mesh = init_device_mesh("{device_type}", {shape}, mesh_dim_names={names})',
            ]
        )
    prefix = f'mesh = DeviceMesh(\n    "{device_type}",\n    mesh=torch.tensor('
    return "\n".join(
        [
            "import torch",
            "from torch.distributed.device_mesh import DeviceMesh",
            "",
            "# init_device_mesh would place ranks 0..n-1 in order; here the ranks are reordered so that",
            "# each group lies where the measurements say it should (the tensor holds the rank at each",
            "# mesh coordinate).",
            prefix + _literal(mesh.nested(), 22) + "),",
            f"    mesh_dim_names={names},",
            ")",
        ]
    )


def new_group_code(mesh: MeshLayout) -> str:
    """The same groups as plain ``torch.distributed.new_group`` calls, one dict entry per dimension."""
    lines = [
        "import torch.distributed as dist",
        "",
        "# Every rank creates every group, in the same order (new_group is collective over the world).",
    ]
    for d in mesh.dims:
        name = f"{d.upper()}_GROUPS = "
        lines.append(name + _literal(mesh.groups(d), len(name)))
    table = ", ".join(f'"{d}": {d.upper()}_GROUPS' for d in mesh.dims)
    lines += [
        "groups = {}  # dimension -> this rank's group",
        f"for dim, rank_lists in {{{table}}}.items():",
        "    for ranks in rank_lists:",
        "        group = dist.new_group(ranks=ranks)",
        "        if dist.get_rank() in ranks:",
        "            groups[dim] = group",
    ]
    return "\n".join(lines)


def mesh_snippet(mesh: MeshLayout, usage: list[str], device_type: str = "cuda") -> str:
    """The DeviceMesh code, lines that use it, then the same groups with new_group."""
    return "\n".join(
        [
            device_mesh_code(mesh, device_type),
            *usage,
            "",
            "# --- or, without DeviceMesh, the same groups as plain process groups ---",
            new_group_code(mesh),
        ]
    )
