"""ModelSpec: counts, modules, JSON and their bad inputs."""

from __future__ import annotations

import json

import pytest

from ddpdoctor.recommend.model_spec import (
    SPLIT_MAX_TENSORS,
    SPLIT_MIN_NUMEL,
    ModelSpec,
    parse_count,
    split_count,
)


@pytest.mark.parametrize(
    "text, n",
    [
        ("124M", 124_000_000),
        ("1.3B", 1_300_000_000),
        ("7e9", 7_000_000_000),
        ("350_000", 350_000),
        ("2k", 2000),
        (" 70 b ", 70_000_000_000),
        ("1.5T", 1_500_000_000_000),
        (1000, 1000),
        ("1,000", 1000),
    ],
)
def test_parse_count(text, n):
    assert parse_count(text) == n


@pytest.mark.parametrize("text", ["", "abc", "12X", "-5M", "0", "1e", "M", "nan", True, float("inf")])
def test_parse_count_errors_say_what_was_expected(text):
    with pytest.raises(ValueError, match=r"parameter count"):
        parse_count(text)


def test_bare_count_split_rule():
    small = split_count(1_000_000)
    assert [t.numel for t in small] == [SPLIT_MIN_NUMEL] * 3 + [1_000_000 - 3 * SPLIT_MIN_NUMEL]
    big = split_count(7_000_000_000, "bf16")
    assert len(big) <= SPLIT_MAX_TENSORS and sum(t.numel for t in big) == 7_000_000_000
    assert {t.dtype for t in big} == {"bf16"}


def test_from_params_and_grad_bytes():
    spec = ModelSpec.from_params("124M", "bf16", backward_ms=80)
    assert spec.numel == 124_000_000 and spec.grad_bytes == 248_000_000
    assert not spec.exact and spec.timing == "given"
    by_bytes = ModelSpec.from_params(grad_bytes="496MiB")
    assert by_bytes.numel == 124 * 2**20 and by_bytes.tensors[0].dtype == "fp32"
    with pytest.raises(ValueError, match="bad size '12 apples'"):
        ModelSpec.from_params(grad_bytes="12 apples")
    with pytest.raises(ValueError, match="either a parameter count or grad_bytes"):
        ModelSpec.from_params("1M", grad_bytes="4MB")
    with pytest.raises(ValueError, match="unknown gradient dtype 'fp9'"):
        ModelSpec.from_params("1M", "fp9")
    with pytest.raises(ValueError, match="backward_ms must be a number of milliseconds"):
        ModelSpec.from_params("1M", backward_ms=-3)


def test_json_round_trip_keeps_everything():
    spec = ModelSpec.from_params(
        "1.3B", "bf16", backward_ms=120.5, forward_ms=40, static_graph=True, name="gpt"
    )
    d = json.loads(json.dumps(spec.to_dict()))
    assert d["source"] == "count" and d["count"] == 1_300_000_000 and "tensors" not in d
    assert ModelSpec.from_dict(d) == spec


@pytest.mark.parametrize(
    "d, msg",
    [
        ([], "must be a JSON object"),
        ({"version": 9, "count": 5}, "version 9 is not supported"),
        ({"count": 5, "colour": "red"}, "unknown key"),
        ({"source": "count"}, "needs 'count'"),
        ({"source": "tensors", "tensors": []}, "non-empty list"),
        ({"tensors": [["w", 10]]}, r"model.tensors\[0\]: expected \[name, numel, dtype\]"),
        (
            {"tensors": [["w", 10, "fp32"], ["b", -1, "fp32"]]},
            r"model.tensors\[1\].numel: expected a positive",
        ),
        ({"tensors": [["w", 10, "int4"]]}, r"model.tensors\[0\]: unknown gradient dtype"),
        ({"count": "lots"}, "cannot read parameter count 'lots'"),
        ({"count": 5, "static_graph": "yes"}, "model.static_graph must be true or false"),
        ({"count": 5, "timing": "guessed", "backward_ms": 3}, "timing must be measured, given or null"),
    ],
)
def test_from_dict_errors_name_the_value(d, msg):
    with pytest.raises(ValueError, match=msg):
        ModelSpec.from_dict(d)


def test_from_module_reads_trainable_parameters_once():
    torch = pytest.importorskip("torch")
    from torch import nn

    m = nn.Sequential(nn.Linear(10, 20), nn.Linear(20, 20), nn.Linear(20, 5))
    m[1].requires_grad_(False)
    tied = nn.ModuleDict({"a": m, "b": nn.Linear(10, 20)})
    tied["b"].weight = m[0].weight  # shared: DDP reduces it once
    spec = ModelSpec.from_module(tied, backward_ms=5)
    assert [t.name for t in spec.tensors] == ["a.0.weight", "a.0.bias", "a.2.weight", "a.2.bias", "b.bias"]
    assert [t.numel for t in spec.tensors] == [200, 20, 100, 5, 20]
    assert spec.exact and spec.source == "module"
    assert ModelSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert ModelSpec.from_module(m.to(torch.bfloat16)).tensors[0].dtype == "bf16"
    assert ModelSpec.from_module(m, dtype="fp16").tensors[0].dtype == "fp16"
    with pytest.raises(ValueError, match="expected a torch.nn.Module, got str"):
        ModelSpec.from_module("resnet50")
    with pytest.raises(ValueError, match="no parameter requires grad"):
        ModelSpec.from_module(nn.Linear(3, 3).requires_grad_(False))


def test_from_module_measures_backward_on_this_machine():
    torch = pytest.importorskip("torch")
    from torch import nn

    m = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
    spec = ModelSpec.from_module(m, sample_input=torch.randn(64, 256))
    assert spec.timing == "measured" and spec.backward_ms > 0 and spec.forward_ms > 0
    assert spec.notes["device"] == "cpu" and spec.notes["timed_iters"] >= 1
    assert all(p.grad is None for p in m.parameters())
    with pytest.raises(ValueError, match="backward_ms or sample_input"):
        ModelSpec.from_module(m, sample_input=torch.randn(1, 256), backward_ms=3)
