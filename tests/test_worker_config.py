"""The worker's config is one typed object, checked when the worker starts."""

from __future__ import annotations

import pytest

from ddpdoctor.runtime.worker_config import ConfigError, WorkerConfig


def test_round_trip_and_defaults():
    cfg = WorkerConfig(checks=["COL001"], options={"algo_reps": 3}, report="/tmp/r.json")
    assert WorkerConfig.from_dict(cfg.to_dict()) == cfg
    assert WorkerConfig.from_dict({}) == WorkerConfig()
    assert WorkerConfig.from_dict({"options": None}).options == {}


@pytest.mark.parametrize("d, words", [
    ({"check": ["COL001"]}, "unknown key(s) check; expected some of checks,"),
    ({"rdzv_timeout_s": "60"}, "rdzv_timeout_s: expected a number, got '60'"),
    ({"options": []}, "options: expected dict"),
    ([], "expected a JSON object, got list"),
])
def test_bad_configs_name_the_key(d, words):
    with pytest.raises(ConfigError) as e:
        WorkerConfig.from_dict(d)
    assert words in str(e.value)


def test_a_bad_config_file_ends_the_worker_with_a_message(tmp_path):
    from ddpdoctor.runtime.worker import main

    p = tmp_path / "cfg.json"
    p.write_text('{"budget_scale": "fast"}')
    with pytest.raises(SystemExit) as e:
        main(["--config", str(p)])
    assert "budget_scale: expected a number" in str(e.value)
