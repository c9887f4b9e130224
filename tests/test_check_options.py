"""Per-check options are declared by the checks and validated before launch (ddpdoctor.check_options)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ddpdoctor.check_options import Option, OptionError, choice, declared, seconds, validate, whole


def _spec(code, *options):
    return SimpleNamespace(code=code, module=SimpleNamespace(OPTIONS=options))


SPECS = [
    _spec("ALG001", Option("algo_reps", "A/B repetitions per arm", whole(2, 20)),
          Option("algo_launch_timeout_s", "seconds per launch", seconds)),
    _spec("P2P001", Option("p2p_mode", "how pairs are measured", choice("pairs", "sequential"))),
    SimpleNamespace(code="COL001", module=SimpleNamespace()),  # declares none
]


def test_known_options_parse_to_what_the_check_reads():
    assert validate({"algo_reps": 3, "p2p_mode": "sequential", "algo_launch_timeout_s": 5}, SPECS) == {
        "algo_reps": 3, "p2p_mode": "sequential", "algo_launch_timeout_s": 5.0}
    assert set(declared(SPECS)) == {"algo_reps", "algo_launch_timeout_s", "p2p_mode"}


def test_a_typo_is_refused_naming_the_closest_and_the_valid_options():
    with pytest.raises(OptionError) as e:
        validate({"algo_rep": 3}, SPECS)
    msg = str(e.value)
    assert msg.startswith("--option algo_rep: no check takes this option; did you mean algo_reps?")
    assert "valid options: algo_launch_timeout_s, algo_reps, p2p_mode" in msg


@pytest.mark.parametrize("value, words", [
    (1, "expected a whole number from 2 to 20"),
    (21, "expected a whole number from 2 to 20"),
    ("three", "expected a whole number from 2 to 20"),
    (True, "expected a whole number from 2 to 20"),
])
def test_a_bad_value_is_refused_naming_the_option_and_its_check(value, words):
    with pytest.raises(OptionError) as e:
        validate({"algo_reps": value}, SPECS)
    assert f"--option algo_reps={value!r} (ALG001: A/B repetitions per arm): {words}" == str(e.value)


def test_every_option_a_check_reads_is_declared():
    """A key read from ctx.options (or the options dict a check hands on) that no check declares would be
    refused before launch: the declarations must cover every read."""
    import re

    from helpers import REPO

    from ddpdoctor.registry import discover

    known = set(declared(discover(kind="cluster")))
    read = set()
    for path in (REPO / "checks").glob("*.py"):
        read |= set(re.findall(r"options(?:\.get\(|\[)\s*\"(\w+)\"", path.read_text()))
    assert read and read <= known, sorted(read - known)


@pytest.mark.parametrize("option, words", [
    ("algo_rep=3", "--option algo_rep: no check takes this option; did you mean algo_reps?"),
    ("algo_reps=1", "--option algo_reps=1 (ALG001: A/B repetitions per arm): expected a whole number from 2 to 20"),
    ("p2p_mode=fast", "expected one of pairs, sequential"),
])
def test_the_cli_refuses_a_bad_option_before_launch(option, words, tmp_path):
    from helpers import run_cli

    p = run_cli("check", "--option", option, "--json", str(tmp_path / "r.json"), timeout=60)
    assert p.returncode == 2 and words in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "r.json").exists()
