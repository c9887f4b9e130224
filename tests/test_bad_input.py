"""Bad input files end in one clear line and exit 2, never a traceback: malformed or deeply nested
reports, snapshots and model specs, and reports whose fields have the wrong types."""

from __future__ import annotations

import contextlib
import copy
import io
import json

import pytest
from helpers import REPO

from ddpdoctor.cli import main

SAMPLE = REPO / "tests" / "tui" / "data" / "report_2x2_gloo.json"
DEEP = "[" * 100_000 + "]" * 100_000  # past the JSON parser's recursion limit


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("argv", [
    ["report", "show", "{f}"], ["report", "json", "{f}"], ["report", "junit", "{f}"], ["recommend", "{f}"],
    ["topo", "--from", "{f}"], ["recommend", str(SAMPLE), "--model-spec", "{f}"],
])
def test_deeply_nested_json_is_refused_clearly(tmp_path, argv):
    f = tmp_path / "deep.json"
    f.write_text(DEEP)
    rc, _, err = cli(*(a.format(f=f) for a in argv))
    assert rc == 2 and f"{f}: JSON nested too deeply to read" in err, err


def test_check_refuses_a_nested_model_spec_before_launching(tmp_path):
    f = tmp_path / "deep.json"
    f.write_text(DEEP)
    rc, _, err = cli("check", "--model-spec", str(f))
    assert rc == 2 and "--model-spec" in err and "nested too deeply" in err


@pytest.mark.parametrize("path, value, words", [
    (("checks", 0, "duration_s"), "x", "checks[0].duration_s: expected a number, got 'x'"),
    (("checks", 1, "findings"), {"a": 1}, "checks[1].findings: expected a list"),
    (("checks", 0), 7, "checks[0]: expected an object, got int"),
    (("run", "world_size"), "four", "run.world_size: expected a whole number, got 'four'"),
    (("tool",), 1, "report.tool: expected an object, got 1"),
    (("recommendations", 0, "title"), ["x"], "recommendations[0].title: expected a string"),
])
def test_wrongly_typed_fields_are_named(tmp_path, path, value, words):
    doc = json.loads(SAMPLE.read_text())
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    rc, _, err = cli("report", "show", str(f))
    assert rc == 2 and words in err, err


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:1]):
            yield from _paths(v, prefix + (i,))


def test_no_field_of_a_report_can_make_report_show_crash(tmp_path):
    """Every field of a real report replaced by values of the wrong shape: exit 0, 1 or 2, no exception."""
    base = json.loads(SAMPLE.read_text())
    f = tmp_path / "r.json"
    crashes = []
    for path in [p for p in _paths(base) if p and "data" not in p]:
        for value in (None, -1, "x", [], {"a": 1}):
            doc = copy.deepcopy(base)
            target = doc
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
            f.write_text(json.dumps(doc))
            try:
                rc, _, _ = cli("report", "show", str(f))
            except Exception as e:  # noqa: BLE001 - the test's point: no exception escapes
                crashes.append(f"{path}={value!r}: {type(e).__name__}: {e}")
                continue
            assert rc in (0, 1, 2)
    assert not crashes, crashes[:5]


def test_a_sample_report_with_a_node_count_renders(tmp_path):
    rc, out, err = cli("report", "show", str(SAMPLE))
    assert rc in (0, 1) and "4 ranks on 2 node(s)" in out, err


def test_a_missing_or_binary_file_is_named(tmp_path):
    rc, _, err = cli("report", "show", str(tmp_path / "nope.json"))
    assert rc == 2 and "nope.json: cannot read report: no such file" in err
    b = tmp_path / "bin.json"
    b.write_bytes(b"\xff\xfe\x00")
    rc, _, err = cli("topo", "--from", str(b))
    assert rc == 2 and "bin.json: not UTF-8 text (UTF-16?)" in err


def test_an_option_nested_too_deeply_is_refused():
    rc, _, err = cli("check", "--option", "a=" + "[" * 100_000)
    assert rc == 2 and "--option a: value nested too deeply" in err


@pytest.mark.parametrize("command", [["check"], ["recommend", str(SAMPLE)]])
def test_model_flags_without_a_model_are_refused(command):
    rc, _, err = cli(*command, "--backward-ms", "180")
    assert rc == 2 and "--backward-ms describes the model: give --model-params COUNT or --model-spec FILE" in err
