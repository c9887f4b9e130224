"""The printed code, read back with ast: it names the meshes and groups the layout claims."""

import ast

import pytest

from ddpdoctor.core.world import WorldInfo
from ddpdoctor.model.placement.layout_code import (
    compact_ranks,
    ddp_ring_code,
    device_mesh_code,
    mesh_snippet,
    new_group_code,
)
from ddpdoctor.model.placement.meshes import MeshLayout, parse_layout


def assigned(tree: ast.AST, name: str):
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return node.value
    raise AssertionError(f"{name} is not assigned")


def call(tree: ast.AST, func: str) -> ast.Call:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Name) and f.id == func) or (
                isinstance(f, ast.Attribute) and f.attr == func
            ):
                return node
    raise AssertionError(f"no call to {func}")


def test_default_mesh_prints_init_device_mesh_with_shape_and_names():
    mesh = MeshLayout.default(parse_layout("dp=2,tp=4"))
    tree = ast.parse(device_mesh_code(mesh))
    c = call(tree, "init_device_mesh")
    assert ast.literal_eval(c.args[0]) == "cuda"
    assert ast.literal_eval(c.args[1]) == (2, 4)
    names = next(k.value for k in c.keywords if k.arg == "mesh_dim_names")
    assert ast.literal_eval(names) == ("dp", "tp")


def test_one_dimensional_mesh_prints_tuples():
    tree = ast.parse(device_mesh_code(MeshLayout(("shard",), (8,), list(range(8)))))
    c = call(tree, "init_device_mesh")
    assert ast.literal_eval(c.args[1]) == (8,)
    assert ast.literal_eval(next(k.value for k in c.keywords)) == ("shard",)


def test_reordered_mesh_prints_an_explicit_device_mesh():
    mesh = MeshLayout(("dp", "tp"), (2, 4), [0, 2, 4, 6, 1, 3, 5, 7])
    tree = ast.parse(device_mesh_code(mesh, device_type="cpu"))
    c = call(tree, "DeviceMesh")
    assert ast.literal_eval(c.args[0]) == "cpu"
    tensor = next(k.value for k in c.keywords if k.arg == "mesh")
    assert ast.literal_eval(call(tensor, "tensor").args[0]) == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_new_group_code_lists_every_group_of_every_dimension():
    mesh = MeshLayout(("pp", "dp", "tp"), (2, 2, 2), [0, 4, 1, 5, 2, 6, 3, 7])
    tree = ast.parse(new_group_code(mesh))
    for d in mesh.dims:
        assert ast.literal_eval(assigned(tree, f"{d.upper()}_GROUPS")) == mesh.groups(d)
    call(tree, "new_group")


def test_mesh_snippet_parses_whole():
    mesh = MeshLayout.default(parse_layout("dp=128,tp=8"))
    text = mesh_snippet(mesh, ["", 'tp_mesh = mesh["tp"]'])
    tree = ast.parse(text)
    assert ast.literal_eval(assigned(tree, "TP_GROUPS"))[127] == list(range(1016, 1024))
    assert max(len(line) for line in text.splitlines()) <= 110


def test_ddp_code_renumbers_by_hostname_and_local_rank():
    ranks = [{"rank": r, "node_rank": r % 2, "local_rank": r // 2, "hostname": f"h{r % 2}"} for r in range(6)]
    world = WorldInfo.from_dicts(ranks)
    order = [0, 2, 4, 5, 3, 1]
    tree = ast.parse(ddp_ring_code(order, world))
    ring = ast.literal_eval(assigned(tree, "RING"))
    assert ring == [("h0", [0, 1, 2]), ("h1", [2, 1, 0])]
    flat = [(h, lr) for h, lrs in ring for lr in lrs]
    assert flat == [(world.host_of(r), world.ranks[r].local_rank) for r in order]
    c = call(tree, "init_process_group")
    assert {k.arg for k in c.keywords} == {"backend", "rank", "world_size"}


def test_ddp_code_falls_back_to_rank_numbers_when_hostnames_repeat():
    world = WorldInfo.from_dicts(
        [{"rank": r, "local_rank": 0, "node_rank": r, "hostname": "same"} for r in range(3)]
    )
    tree = ast.parse(ddp_ring_code([0, 2, 1], world))
    assert ast.literal_eval(assigned(tree, "ORDER")) == [0, 2, 1]
    assert "RANK" in ast.unparse(assigned(tree, "rank"))


def test_ddp_code_lists_pairs_when_a_node_is_visited_twice():
    ranks = [
        {"rank": r, "node_rank": r // 2, "local_rank": r % 2, "hostname": f"h{r // 2}"} for r in range(4)
    ]
    world = WorldInfo.from_dicts(ranks)
    tree = ast.parse(ddp_ring_code([0, 2, 1, 3], world))
    assert ast.literal_eval(assigned(tree, "ORDER")) == [("h0", 0), ("h1", 0), ("h0", 1), ("h1", 1)]


@pytest.mark.parametrize(
    ("order", "text"),
    [
        ([0, 1, 2, 3, 7, 6, 5, 4], "0-3,7-4"),
        ([0, 2, 4, 6, 7, 5, 3, 1], "0,2,4,6,7,5,3,1"),
        ([0, 1, 5], "0,1,5"),
        ([], ""),
        ([3], "3"),
    ],
)
def test_compact_ranks(order, text):
    assert compact_ranks(order) == text
