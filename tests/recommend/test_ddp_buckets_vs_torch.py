"""The bucket replay (ddpdoctor.model.tuning.ddp_buckets) against torch's own assignment and a real DDP's buckets."""

from __future__ import annotations

import datetime

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

from ddpdoctor.model.tuning.ddp_buckets import (  # noqa: E402
    DEFAULT_FIRST_BUCKET_B,
    MIB,
    GradTensor,
    assign_by_size,
    canonical_dtype,
    cap_bytes,
    ddp_buckets,
    first_bucket_bytes,
)


def _mlp():
    return nn.Sequential(*[nn.Linear(512, 512) for _ in range(12)])


def _transformer():
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True), num_layers=3)


def _convnet():
    return nn.Sequential(
        nn.Conv2d(3, 64, 3),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.Conv2d(64, 256, 3),
        nn.BatchNorm2d(256),
        nn.Flatten(),
        nn.Linear(256, 10),
        nn.Embedding(30000, 64),
    )


def _mixed():
    m = nn.Sequential(nn.Linear(700, 700), nn.Linear(700, 300), nn.Linear(300, 900), nn.Linear(900, 64))
    m[1].to(torch.bfloat16)
    m[3].to(torch.float64)
    return m


def _frozen():
    m = _mlp()
    for p in m[3].parameters():
        p.requires_grad_(False)
    return m


MODELS = {"mlp": _mlp, "transformer": _transformer, "convnet": _convnet, "mixed": _mixed, "frozen": _frozen}
CAPS = [None, 0.5, 1, 2, 5, 25]


def _params(model):
    return [p for p in model.parameters() if p.requires_grad]


def _spec(params):
    return [GradTensor(p.numel(), canonical_dtype(str(p.dtype))) for p in params]


def _same(ours, theirs, mixed):
    """Bucket lists equal; with several dtypes the trailing partial buckets come out of a hash map in
    torch, so there only the set of them must agree."""
    idx, limits = theirs
    t = [(tuple(i), lim) for i, lim in zip(idx, limits)]
    o = [(b.indices, b.limit_B) for b in ours]
    if not mixed:
        assert o == t
    else:
        assert sorted(o) == sorted(t)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("cap", CAPS)
def test_rebuilt_buckets_match_torch(name, cap):
    torch.manual_seed(0)
    params = _params(MODELS[name]())
    order = list(reversed(range(len(params))))
    limits = [first_bucket_bytes(cap), cap_bytes(cap)]
    theirs = dist._compute_bucket_assignment_by_size([params[i] for i in order], limits, [], order)
    ours = ddp_buckets(_spec(params), cap)
    _same(ours, theirs, mixed=name == "mixed")
    # what our helpers call the limits is what torch uses: 1 MiB first for the default cap
    assert limits[0] == (DEFAULT_FIRST_BUCKET_B if cap is None else int(cap * MIB))


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("cap", CAPS)
def test_construction_buckets_match_torch(name, cap):
    """find_unused_parameters=True: the buckets built at construction stay (registration order, sorted,
    then reversed by DDP)."""
    params = _params(MODELS[name]())
    first, main = first_bucket_bytes(cap), cap_bytes(cap)
    limits = [first, main] if first < main else [main]
    idx, lims = dist._compute_bucket_assignment_by_size(params, limits, [])
    ours = ddp_buckets(_spec(params), cap, find_unused_parameters=True)
    # without an explicit order torch sorts the buckets, so even several dtypes come out in one order
    _same(ours, (list(reversed(idx)), list(reversed(lims))), mixed=False)
    assert [b.indices for b in assign_by_size(_spec(params), limits)] == [tuple(i) for i in idx]


@pytest.fixture(scope="module")
def gloo_world_of_one():
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    dist.init_process_group(
        "gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=datetime.timedelta(seconds=30)
    )
    yield
    dist.destroy_process_group()


def _run_ddp(model, x, **kw):
    ddp = nn.parallel.DistributedDataParallel(model, **kw)
    for _ in range(3):  # the logging data shows the rebuilt buckets from the third step on
        ddp(x).float().sum().backward()
    data = ddp._get_ddp_logging_data()
    buckets = [tuple(int(i) for i in b.split()) for b in data["rebuilt_per_bucket_param_indices"].split(",")]
    sizes = [int(s) for s in str(data["rebuilt_bucket_sizes"]).split(",")]
    return buckets, sizes, data


@pytest.mark.parametrize("cap", [None, 1, 2, 5])
def test_real_ddp_rebuilds_the_buckets_we_replay(gloo_world_of_one, cap):
    torch.manual_seed(0)
    model = _mlp()
    kw = {} if cap is None else {"bucket_cap_mb": cap}
    buckets, sizes, _ = _run_ddp(model, torch.randn(4, 512), **kw)
    ours = ddp_buckets(_spec(_params(model)), cap)
    assert [b.indices for b in ours] == buckets
    assert [b.size_B for b in ours] == sizes


def test_real_ddp_transformer_in_its_own_ready_order(gloo_world_of_one):
    """Autograd's ready order is not always reverse registration: given the order a real DDP saw, the
    replay builds the same buckets."""
    torch.manual_seed(0)
    model = _transformer()
    buckets, sizes, _ = _run_ddp(model, torch.randn(2, 8, 256), bucket_cap_mb=1)
    seen_order = [i for b in buckets for i in b]
    ours = ddp_buckets(_spec(_params(model)), 1, order=seen_order)
    assert [b.indices for b in ours] == buckets
    assert [b.size_B for b in ours] == sizes


def test_real_ddp_with_find_unused_parameters_keeps_construction_buckets(gloo_world_of_one):
    torch.manual_seed(0)
    model = _mlp()
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=2, find_unused_parameters=True)
    for _ in range(3):
        ddp(torch.randn(4, 512)).sum().backward()
    data = ddp._get_ddp_logging_data()
    assert not data.get("has_rebuilt_buckets")
    sizes = [int(s) for s in str(data["bucket_sizes"]).split(",")]
    ours = ddp_buckets(_spec(_params(model)), 2, find_unused_parameters=True)
    assert [b.size_B for b in ours] == sizes
