"""Which calls build a DDP model out of this file's sight (ModuleAnalysis.ddp_wrapper_calls)."""

import ast
import textwrap

from ddpdoctor.script.analysis import ModuleAnalysis


def _wrappers(src: str) -> list[str]:
    src = textwrap.dedent(src)
    m = ModuleAnalysis("t.py", src, ast.parse(src))
    return [ast.unparse(c.func) for c in m.ddp_wrapper_calls]


def test_a_call_with_ddp_constructor_keywords_builds_a_ddp_model():
    src = """
    from pkg.parallel import ParallelNet
    a = ParallelNet(module=net, broadcast_buffers=False)
    b = ParallelNet(net, device_ids=[0], find_unused_parameters=True)
    """
    assert _wrappers(src) == ["ParallelNet", "ParallelNet"]
    m = ModuleAnalysis("t.py", textwrap.dedent(src), ast.parse(textwrap.dedent(src)))
    assert m.distributed_context


def test_keyword_holders_without_a_model_are_not_ddp_models():
    src = """
    from accelerate.utils import DistributedDataParallelKwargs
    from lightning.pytorch.strategies import DDPStrategy
    kwargs = DistributedDataParallelKwargs(find_unused_parameters=True)
    strategy = DDPStrategy(find_unused_parameters=False, static_graph=True)
    cfg = dict(broadcast_buffers=False)
    """
    assert _wrappers(src) == []


def test_a_function_of_this_file_is_not_another_files_wrapper():
    src = """
    def build(net, find_unused_parameters=False):
        return net
    m = build(net, find_unused_parameters=True)
    """
    assert _wrappers(src) == []


def test_bookkeeping_on_the_inner_model_is_no_forward_around_the_wrapper():
    # DDP409 asks which calls run the model inside the wrapper: a forward takes inputs, and
    # nn.Module's own methods (state_dict, parameters, to, ...) are not forwards at all
    import importlib.util
    from pathlib import Path

    from ddpdoctor.script.flow import Flow

    rule = Path(__file__).parents[2] / "checks" / "ddp409_backward_bypasses_ddp.py"
    spec = importlib.util.spec_from_file_location("ddp409", rule)
    ddp409 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ddp409)
    src = textwrap.dedent("""
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(net)
    a = model.module.state_dict()
    b = model.module.load_state_dict(sd)
    c = model.module.parameters()
    d = model.module.compute_loss(batch)
    e = model.module(x)
    f = model.module.encoder(x)
    """)
    m = ModuleAnalysis("t.py", src, ast.parse(src))
    models = Flow(m, m.ddp_constructors)
    bypasses = [ast.unparse(c.func) for c, _q in m.calls if ddp409._through_module(c, models)]
    assert bypasses == ["model.module.compute_loss", "model.module", "model.module.encoder"]
