"""Layout strings and the rank at each mesh coordinate."""

import itertools
import math

import pytest

from ddpdoctor.model.placement.meshes import LayoutError, LayoutSpec, MeshLayout, parse_layout


def test_parse_keeps_the_written_order_outermost_first():
    assert parse_layout("dp=4,tp=8") == LayoutSpec(("dp", "tp"), (4, 8))
    assert parse_layout(" TP = 8 , dp=4 ", world_size=32) == LayoutSpec(("tp", "dp"), (8, 4))
    spec = parse_layout("pp=2,dp=2,tp=2")
    assert (
        spec.world_size == 8
        and spec.size("tp") == 2
        and spec.size("cp") == 1
        and str(spec) == "pp=2,dp=2,tp=2"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty layout"),
        ("   ", "empty layout"),
        ("tp8", "'tp8' is not NAME=SIZE"),
        ("=8", "'=8' is not NAME=SIZE"),
        ("xp=2,tp=4", "unknown mesh dimension 'xp'.*expected one of pp, dp, tp"),
        ("tp=2,TP=2", "mesh dimension 'tp' given twice"),
        ("tp=2.5", "tp size '2.5' .* not a positive integer"),
        ("tp=0", "tp size '0' .* not a positive integer"),
        ("tp=-2", "tp size '-2' .* not a positive integer"),
        ("tp=", "tp size '' .* not a positive integer"),
        ("tp=²", "tp size '²' .* not a positive integer"),
        ("dp=3,tp=4", r"dp=3 × tp=4 = 12 ranks, but the world has 8"),
    ],
)
def test_bad_layouts_say_what_is_wrong(text, message):
    with pytest.raises(LayoutError, match=message):
        parse_layout(text, world_size=8)


def test_default_mesh_is_row_major_like_init_device_mesh():
    mesh = MeshLayout.default(parse_layout("dp=2,tp=4"))
    assert mesh.is_default and mesh.nested() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert mesh.groups("tp") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert mesh.groups("dp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    swapped = MeshLayout.default(parse_layout("tp=4,dp=2"))
    assert swapped.groups("tp") == [[0, 2, 4, 6], [1, 3, 5, 7]]


@pytest.mark.parametrize("sizes", [(2, 3, 4), (4, 1, 2), (1, 6), (5,)])
def test_groups_vary_exactly_one_coordinate(sizes):
    """Against coordinates enumerated by hand: the rank at (i0..ik) is ranks[row-major index]."""
    n = math.prod(sizes)
    ranks = list(reversed(range(n)))  # an explicit, non-identity mesh
    dims = ("pp", "dp", "tp")[-len(sizes) :]
    mesh = MeshLayout(dims, sizes, ranks)
    coords = list(itertools.product(*(range(s) for s in sizes)))
    at = {c: ranks[k] for k, c in enumerate(coords)}
    for d, dim in enumerate(dims):
        expect = []
        for c in coords:
            if c[d] == 0:
                expect.append([at[c[:d] + (i,) + c[d + 1 :]] for i in range(sizes[d])])
        assert mesh.groups(dim) == expect
        assert sorted(r for g in mesh.groups(dim) for r in g) == list(range(n))
    nested = mesh.nested()
    for c in coords:
        v = nested
        for i in c:
            v = v[i]
        assert v == at[c]


def test_a_mesh_must_hold_its_ranks():
    with pytest.raises(LayoutError, match="does not hold 5 ranks"):
        MeshLayout(("dp", "tp"), (2, 2), [0, 1, 2, 3, 4])
