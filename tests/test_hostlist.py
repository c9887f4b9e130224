import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddpdoctor.model.nodes.hostlist import compress_hostlist, ranges_text
from ddpdoctor.runtime.launch_plan import LaunchError, expand_slurm_nodelist


def test_ranges_and_singletons():
    assert compress_hostlist(["ddpb-node2", "ddpb-node5"]) == "ddpb-node[2,5]"
    assert compress_hostlist(["n1", "n2", "n3", "n7"]) == "n[1-3,7]"
    assert compress_hostlist(["n3"]) == "n3"
    assert compress_hostlist([]) == ""


def test_order_and_duplicates():
    assert compress_hostlist(["n7", "n1", "n2", "n1"]) == "n[1-2,7]"


def test_zero_padded_numbers_keep_their_width():
    assert compress_hostlist(["gpu007", "gpu008", "gpu009", "gpu010"]) == "gpu[007-010]"
    assert compress_hostlist(["node01", "node02", "node10"]) == "node[01-02,10]"
    # unpadded numbers of different lengths share a group; a padded one of another width does not
    assert compress_hostlist(["n9", "n10", "n11"]) == "n[9-11]"
    assert compress_hostlist(["n01", "n1"]) == "n01,n1"


def test_several_prefixes_and_names_without_numbers():
    hosts = ["rack1-gpu3", "rack1-gpu4", "rack2-gpu3", "login", "cpu05"]
    assert compress_hostlist(hosts) == "rack1-gpu[3-4],rack2-gpu3,login,cpu05"


def test_ranges_text():
    assert ranges_text([5, 0, 1, 2]) == "0-2,5"
    assert ranges_text([]) == ""
    assert ranges_text([3, 4], width=3) == "003-004"


names = st.builds(lambda p, n, pad: f"{p}{n:0{pad}d}", st.sampled_from(["node", "gpu-", "a1b", "x"]),
                  st.integers(0, 1200), st.sampled_from([0, 2, 3, 4]))


@given(st.lists(names, max_size=40))
def test_expansion_gives_back_the_same_hosts(hosts):
    text = compress_hostlist(hosts)
    assert sorted(expand_slurm_nodelist(text)) == sorted(set(hosts)) if hosts else text == ""


def test_several_bracket_groups_expand_leftmost_slowest_as_slurm_does():
    assert expand_slurm_nodelist("rack[1-2]-node[01-02]") == [
        "rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02",
    ]
    # commas inside the second group are ranges, not name separators
    assert expand_slurm_nodelist("r[1,3]-n[01,05-06],login") == [
        "r1-n01", "r1-n05", "r1-n06", "r3-n01", "r3-n05", "r3-n06", "login",
    ]


def test_a_bad_node_list_is_a_launch_error_naming_it():
    for bad in ("n[1-", "n[1]]", "n[a-b]", "n[3-1]", "rack[1-2]-n[x]"):
        with pytest.raises(LaunchError, match="cannot read Slurm node list"):
            expand_slurm_nodelist(bad)
