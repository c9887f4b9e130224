"""A value that differs across ranks, said in nodes (ddpdoctor/model/nodes/spread.py)."""

from ddpdoctor.model.nodes.spread import describe, fmt_ranks, spread, where

HOSTS = {r: f"n{r // 4}" for r in range(16)}  # 4 nodes × 4 ranks


def test_the_same_everywhere_is_no_spread():
    assert spread({r: "a" for r in range(16)}, HOSTS) is None


def test_one_odd_node_is_named_with_its_ranks():
    sp = spread({r: "b" if HOSTS[r] == "n2" else "a" for r in range(16)}, HOSTS)
    assert sp.odd_nodes == ["n2"] and sp.norm == "a" and sp.norm_nodes == 3
    assert describe(sp, "x differs", str) == "x differs: odd node n2 has b (ranks 8-11) where the 3 other nodes have a"
    assert where(sp) == {"node": "n2", "ranks": [8, 9, 10, 11]}


def test_a_node_whose_ranks_disagree_is_odd_too():
    values = {r: "a" for r in range(16)}
    values[13] = "b"
    sp = spread(values, HOSTS)
    assert sp.odd_nodes == ["n3"]
    assert describe(sp, "x", str) == "x: odd node n3 has a (ranks 12,14-15), b (rank 13) where the 3 other nodes have a"


def test_without_a_majority_every_value_gets_its_nodes():
    hosts = {0: "a", 1: "a", 2: "b", 3: "b"}
    sp = spread({0: 1, 1: 1, 2: 2, 3: 2}, hosts)
    assert sp.odd_nodes == []
    assert describe(sp, "v", str) == "v across nodes: 1 on a (ranks 0-1); 2 on b (ranks 2-3)"
    assert where(sp) == {"nodes": ["a", "b"], "ranks": [0, 1, 2, 3]}
    one = spread({0: 1, 1: 2}, {0: "a", 1: "a"})
    assert describe(one, "v", str) == "v across the ranks of a: 1 on a (rank 0); 2 on a (rank 1)"


def test_fmt_ranks():
    assert fmt_ranks([5, 0, 1, 2]) == "0-2,5" and fmt_ranks([]) == "none"
