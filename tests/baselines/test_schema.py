"""Profile files: every shipped one validates, and each kind of mistake is named with its file and line."""

from __future__ import annotations

import pytest

from ddpdoctor.baselines import ProfileError, list_profiles, load_file, load_profile, shipped_files
from ddpdoctor.model.profiles.schema import EXPECTED_CLASSES, parse_profile

from .conftest import VALID, line_of

SHIPPED = {
    "dgx-h100",
    "hgx-h200",
    "dgx-a100",
    "pcie-gen4-8gpu",
    "pcie-gen5-8gpu",
    "aws-p4d-24xlarge",
    "aws-p5-48xlarge",
    "gcp-a3-highgpu-8g",
    "azure-nd-h100-v5",
    "cpu-gloo",
}


@pytest.mark.parametrize("path", shipped_files(), ids=lambda p: p.name)
def test_every_shipped_profile_validates(path):
    p = load_file(path)
    assert p.name == path.stem  # one file per profile, named after it
    assert p.sources and all(len(s) > 20 for s in p.sources)
    assert set(EXPECTED_CLASSES) <= set(p.expected_GBps)
    assert 0 < p.fail_below_pct < p.warn_below_pct <= 100
    assert p.match.criteria(), "a shipped profile must be detectable"
    text = path.read_text()
    assert text.startswith("# ddpdoctor hardware profile, schema 1")  # the schema is documented atop


def test_the_catalog_has_the_promised_systems_with_unique_names():
    names = [p.name for p in list_profiles()]
    assert len(names) == len(set(names))
    assert SHIPPED <= set(names)


def test_load_by_name_and_by_path(tmp_path):
    assert load_profile("dgx-h100").expected("all_reduce_busbw_intra_node") == 370
    f = tmp_path / "mine.yaml"
    f.write_text(VALID)
    p = load_profile(str(f))
    assert (p.name, p.origin, p.expected("p2p_inter_node")) == ("test-box", str(f), 40)
    with pytest.raises(ProfileError, match=r"nope: unknown profile, expected one of .*dgx-h100"):
        load_profile("nope")


def _error(text: str, tmp_path, name="bad.yaml") -> str:
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(ProfileError) as e:
        load_file(f)
    return str(e.value)


BREAKS = [
    # (replace this, with that, the line to blame (a substring of it), words of the message)
    ("name: test-box", "name: Test Box", "name: Test Box", "expected lower-case"),
    (
        "  gpus_per_node: 8",
        "  gpus_per_node: 8\n  colour: blue",
        "colour: blue",
        "unknown key 'match.colour'",
    ),
    ("  p2p_intra_node: 100", "  p2p_intra_node: -100", "p2p_intra_node: -100", "expected a positive number"),
    ("  p2p_inter_node: 40", "  p2p_inter_node: fast", "p2p_inter_node: fast", "'fast', expected a positive"),
    ("  p2p_inter_node: 40", "  p2p_inter_node: true", "p2p_inter_node: true", "True, expected a positive"),
    ("  p2p_inter_node: 40", "  p2p_inter_node: .nan", "p2p_inter_node: .nan", "expected a positive"),
    ("  p2p_inter_node: 40\n", "", "p2p_intra_node: 100", "missing 'expected_GBps.p2p_inter_node'"),
    ("  gpu_model: 'H100'", "  gpu_model: 'H100('", "gpu_model:", "not a valid regular expression"),
    ("  nvlink: true", "  nvlink: maybe", "nvlink: maybe", "expected true or false"),
    ("  backend: nccl", "  backend: mpi", "backend: mpi", "expected one of nccl, gloo"),
    ("kind: InfiniBand", "kind: Fibre", "nics:", "match.nics.kind is 'Fibre'"),
    ("min_count: 8", "min_count: 0", "nics:", "min_count is 0, expected a whole number"),
    ("  gpus_per_node: 8", "  gpus_per_node: [8, x]", "gpus_per_node:", "gpus_per_node[1] is 'x'"),
    (
        "  fail_below_pct: 50",
        "  fail_below_pct: 90",
        "fail_below_pct: 90",
        "fail_below_pct (90) is not below",
    ),
    ("  warn_below_pct: 80", "  warn_below_pct: 180", "warn_below_pct: 180", "up to 100"),
    (
        "  fail_below_pct: 50",
        "  fail_below_pct: 50\n  fail_below_pct: 40",
        "fail_below_pct: 40",
        "given twice",
    ),
    ('sources:\n  - "made up for the tests"', "sources: []", "sources: []", "non-empty list"),
    ("description: a test system\n", "", "schema: 1", "missing 'description'"),
    ("schema: 1", "schema: 2", "schema: 2", "expected a whole number from 1 to 1"),
    (
        "match:\n  backend: nccl",
        "match: nccl\nxmatch:\n  backend: nccl",
        "match: nccl",
        "match must be a mapping",
    ),
    ("  nvlink: true", "  nvlink: !!python/name:os.system ''", "nvlink:", "expected a plain YAML value"),
    (
        "description: a test system",
        "description: [a, b]",
        "description:",
        "is a list, expected a single value",
    ),
    ("kind: InfiniBand, min_count: 8, rate_Gbps: 400", "kind: none, min_count: 8", "nics:", "kind is none"),
]


@pytest.mark.parametrize("old,new,blame,words", BREAKS, ids=[b[3][:30] for b in BREAKS])
def test_each_mistake_names_file_line_and_what_was_expected(tmp_path, old, new, blame, words):
    assert old in VALID
    text = VALID.replace(old, new, 1)
    msg = _error(text, tmp_path)
    line = line_of(text, blame)
    assert f"{tmp_path / 'bad.yaml'}:{line}: " in msg, msg
    assert words in msg, msg


def test_the_pure_python_parser_gives_the_same_lines(tmp_path, monkeypatch):
    import yaml

    import ddpdoctor.model.profiles.schema as schema

    text = VALID.replace("backend: nccl", "backend: mpi").replace(
        "description: a test system", "description: ["
    )
    fast = _error(VALID.replace("backend: nccl", "backend: mpi"), tmp_path)
    broken = _error(text, tmp_path)
    monkeypatch.setattr(schema, "_LOADER", yaml.SafeLoader)
    assert _error(VALID.replace("backend: nccl", "backend: mpi"), tmp_path) == fast
    assert _error(text, tmp_path).split(": not valid YAML")[0] == broken.split(": not valid YAML")[0]


def test_several_mistakes_are_all_reported(tmp_path):
    text = VALID.replace("backend: nccl", "backend: mpi").replace("p2p_intra_node: 100", "p2p_intra_node: -1")
    msg = _error(text, tmp_path)
    assert len(msg.splitlines()) == 2
    assert f":{line_of(text, 'backend: mpi')}: " in msg and f":{line_of(text, 'p2p_intra_node')}: " in msg


def test_syntax_errors_empty_files_and_unreadable_files(tmp_path):
    text = VALID.replace("description: a test system", "description: a: b")
    assert f"bad.yaml:{line_of(text, 'description')}: not valid YAML: mapping values" in _error(
        text, tmp_path
    )
    assert "bad.yaml:1: empty file" in _error("", tmp_path)
    assert "bad.yaml:1: the profile must be a mapping" in _error("- 1\n- 2\n", tmp_path)
    f = tmp_path / "bin.yaml"
    f.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ProfileError, match=r"bin.yaml: not UTF-8"):
        load_file(f)
    with pytest.raises(ProfileError, match=r"missing.yaml: cannot read profile YAML file: no such file"):
        load_file(tmp_path / "missing.yaml")
    with pytest.raises(ProfileError, match=r": is a folder"):
        load_file(tmp_path)


def test_null_means_no_reference_and_optional_keys_default():
    p = parse_profile(VALID.replace("p2p_inter_node: 40", "p2p_inter_node: null"))
    assert p.expected("p2p_inter_node") is None
    assert p.priority == 0 and p.large_message_B == 64 * 2**20
    assert p.match.nics.kind == ("InfiniBand",) and p.match.nics.name is None


def test_duplicate_names_name_both_files(tmp_path):
    (tmp_path / "a.yaml").write_text(VALID)
    (tmp_path / "b.yaml").write_text("# another\n" + VALID)
    with pytest.raises(ProfileError) as e:
        list_profiles([tmp_path])
    msg = str(e.value)
    assert f"b.yaml:{line_of(VALID, 'name:') + 1}: profile name 'test-box' is already used by" in msg
    assert f"a.yaml:{line_of(VALID, 'name:')}" in msg
    (tmp_path / "c.yaml").write_text(VALID.replace("name: test-box", "name: dgx-h100"))
    (tmp_path / "b.yaml").unlink()
    with pytest.raises(
        ProfileError, match=r"c.yaml:\d+: profile name 'dgx-h100' is already used by .*dgx-h100.yaml"
    ):
        list_profiles([tmp_path])
