import pytest

from ddpdoctor.registry import RegistryError, discover, select


def test_builtin_checks_are_found_with_their_contract():
    specs = discover()
    codes = [s.code for s in specs]
    assert {"ENV001", "RDZ001", "COL001"} <= set(codes)
    assert len(codes) == len(set(codes))
    for s in specs:
        assert s.title and s.doc and s.kind in ("cluster", "script")


def test_select_and_skip_by_prefix():
    specs = discover(kind="cluster")
    assert [s.code for s in select(specs, ["COL"], None)] == ["COL001"]
    assert "COL001" not in [s.code for s in select(specs, None, ["COL001"])]
    with pytest.raises(RegistryError, match="unknown check code"):
        select(specs, ["NOPE"], None)


def test_user_check_files(tmp_path):
    good = tmp_path / "mine.py"
    good.write_text('"""Doc."""\nCODE = "USR001"\nTITLE = "Mine"\nKIND = "cluster"\ndef run(ctx):\n    return {}\n')
    assert "USR001" in [s.code for s in discover([str(good)])]
    bad = tmp_path / "bad.py"
    bad.write_text('"""Doc."""\nCODE = "lower1"\nTITLE = "x"\nKIND = "cluster"\n')
    with pytest.raises(RegistryError, match="must look like"):
        discover([str(bad)])
    broken = tmp_path / "broken.py"
    broken.write_text("import nonexistent_module_xyz\n")
    with pytest.raises(RegistryError, match="failed to import"):
        discover([str(broken)])
    with pytest.raises(RegistryError, match="no such"):
        discover([str(tmp_path / "missing.py")])


def test_duplicate_codes_are_refused(tmp_path):
    dup = tmp_path / "dup.py"
    dup.write_text('"""Doc."""\nCODE = "COL001"\nTITLE = "x"\nKIND = "cluster"\ndef run(ctx):\n    return {}\n')
    with pytest.raises(RegistryError, match="declared twice"):
        discover([str(dup)])
