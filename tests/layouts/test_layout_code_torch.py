"""The printed code, run for real: a gloo world of forked processes executes the snippets (device
"cpu") and reports the groups torch built, which must be the groups the layout claims; and
init_device_mesh must place ranks the way model/placement/meshes.py says it does."""

from __future__ import annotations

import os
import queue
import socket
import traceback
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
mp = pytest.importorskip("torch.multiprocessing")
# imported before the fork, so that each of the 8 children does not import them again on 2 cores
pytest.importorskip("torch.distributed.device_mesh")
pytest.importorskip("torch.distributed.fsdp")

from ddpdoctor.core.world import WorldInfo  # noqa: E402
from ddpdoctor.model.placement.layout_code import ddp_ring_code, mesh_snippet  # noqa: E402
from ddpdoctor.model.placement.layouts import analyze  # noqa: E402
from ddpdoctor.model.placement.meshes import MeshLayout, parse_layout  # noqa: E402
from tests.layouts.synth import matrix, ranks_for  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
TIMEOUT_S = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(rank: int, world: int, store: str, job, args, out) -> None:
    try:
        if store:
            dist.init_process_group(
                "gloo",
                init_method=f"file://{store}",
                rank=rank,
                world_size=world,
                timeout=timedelta(seconds=30),
            )
        out.put((rank, job(rank, *args)))
    except BaseException:  # noqa: BLE001 - any failure goes to the parent as text; never hang it
        out.put((rank, {"error": traceback.format_exc()}))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_world(world: int, job, *args, tmp_path=None) -> dict[int, object]:
    """job(rank, *args) in `world` forked processes, inside a gloo group when tmp_path gives a store."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    store = str(tmp_path / "store") if tmp_path is not None else ""
    procs = [ctx.Process(target=_child, args=(r, world, store, job, args, out)) for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, object] = {}
    try:
        for _ in range(world):
            rank, value = out.get(timeout=TIMEOUT_S)
            results[rank] = value
    except queue.Empty:
        pytest.fail(f"only ranks {sorted(results)} of {world} answered within {TIMEOUT_S} s")
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    errors = {r: v["error"] for r, v in results.items() if isinstance(v, dict) and "error" in v}
    assert not errors, errors
    return results


def _mesh_groups(mesh, dims) -> dict[str, tuple[list[int], list[int]]]:
    """Per dimension: (this rank's coordinates along it, the process group's ranks)."""
    return {d: (mesh[d].mesh.tolist(), dist.get_process_group_ranks(mesh.get_group(d))) for d in dims}


def _init_device_mesh_job(rank: int, specs: list[str]) -> dict:
    from torch.distributed.device_mesh import init_device_mesh

    out = {}
    for text in specs:
        spec = parse_layout(text)
        mesh = init_device_mesh("cpu", spec.sizes, mesh_dim_names=spec.dims)
        out[text] = _mesh_groups(mesh, spec.dims)
    return out


def mine(groups: list[list[int]], rank: int) -> list[int]:
    return next(g for g in groups if rank in g)


def test_init_device_mesh_places_ranks_row_major(tmp_path):
    specs = ["dp=2,tp=4", "tp=4,dp=2", "pp=2,dp=2,tp=2", "dp=8"]
    results = run_world(8, _init_device_mesh_job, specs, tmp_path=tmp_path)
    for rank, got in results.items():
        for text in specs:
            claimed = MeshLayout.default(parse_layout(text))
            for d, (coords, pg_ranks) in got[text].items():
                assert coords == mine(claimed.groups(d), rank), (text, d, rank)
                assert pg_ranks == sorted(mine(claimed.groups(d), rank)), (text, d, rank)


def _exec_snippet_job(rank: int, snippet: str, dims: tuple[str, ...]) -> dict:
    scope = {"model": torch.nn.Linear(4, 4)}
    exec(compile(snippet, "<snippet>", "exec"), scope)  # noqa: S102 - the printed code, as a user pastes it
    scope["model"](torch.ones(2, 4)).sum().backward()  # HSDP snippets shard the model for real
    return {
        "mesh": _mesh_groups(scope["mesh"], dims),
        "new_group": {d: dist.get_process_group_ranks(g) for d, g in scope["groups"].items()},
    }


@pytest.mark.parametrize("interleave", [False, True])
@pytest.mark.parametrize("kind", ["hsdp", "tp_dp"])
def test_printed_mesh_code_builds_the_claimed_groups(tmp_path, kind, interleave):
    per = 2 if kind == "hsdp" else 4  # FSDP's first step costs seconds per process on 2 shared cores
    ranks = ranks_for(2, per, interleave=interleave)
    plan = getattr(analyze(matrix(ranks), ranks), kind)
    mesh = plan.mesh
    assert mesh.is_default is (not interleave)
    usage = (
        ["from torch.distributed.fsdp import fully_shard", "fully_shard(model, mesh=mesh)"]
        if kind == "hsdp"
        else []
    )
    snippet = mesh_snippet(mesh, usage, device_type="cpu")
    results = run_world(len(ranks), _exec_snippet_job, snippet, mesh.dims, tmp_path=tmp_path)
    for rank, got in results.items():
        for d in mesh.dims:
            group = mine(mesh.groups(d), rank)
            coords, pg_ranks = got["mesh"][d]
            assert coords == group and pg_ranks == sorted(group), (kind, d, rank)
            assert got["new_group"][d] == sorted(group)
    if interleave:  # the groups stay on one node: TP/shard groups hold one node's ranks
        inner = mesh.dims[1]
        assert all(len({ranks[r]["node_rank"] for r in g}) == 1 for g in mesh.groups(inner))


def _ddp_job(rank: int, code: str, ranks: list[dict], port: int) -> dict:
    me = ranks[rank]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(me["local_rank"]))
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(len(ranks)))
    socket.gethostname = lambda: me["hostname"]  # this forked process plays its node
    exec(compile(code, "<snippet>", "exec"), {})  # noqa: S102 - the printed code
    total = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(total)
    return {"new_rank": dist.get_rank(), "sum": total.item()}


def test_printed_ddp_code_renumbers_ranks_into_the_ring(tmp_path):
    ranks = ranks_for(2, 2, interleave=True)
    cl = analyze(matrix(ranks), ranks)
    assert cl.ddp.reorder
    order = cl.ddp.best.order
    code = ddp_ring_code(order, WorldInfo.from_dicts(ranks), backend="gloo")
    results = run_world(4, _ddp_job, code, ranks, _free_port())
    assert {r: v["new_rank"] for r, v in results.items()} == {r: order.index(r) for r in range(4)}
    assert all(v["sum"] == 6.0 for v in results.values())
